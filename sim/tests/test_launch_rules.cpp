// The launch-shape rules (sim/launch_rules.h) for every catalog GPU's limits: the H200's shapes are
// the measured ones, every GPU's shapes meet the rules' occupancy targets on its own SM count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "kernels/gdn/gdn_launch_shape.h"
#include "kernels/mamba2/mamba2_launch_shape.h"
#include "sim/catalog.h"
#include "sim/gpus.h"
#include "sim/launch_rules.h"
#include "sim/state_type.h"

namespace kvbuf {
namespace {

// Qwen3-Next's GDN layer (HV = 32 value heads of V = 128 rows) and the GDN rules of
// kernels/gdn/gdn_decode_device.h: recurrent {32 rows, 4 blocks per SM}, single KVBuffer {64, 4}
// and its 16-bit widening {128, 8}.
constexpr int kHV = 32, kV = 128;
int gdn_rows(int batch, int max_rows, int min_blocks, const DeviceLimits& d) {
  return halve_rows_to_fill(long(batch) * kHV, kV, max_rows, 16, min_blocks, d);
}

TEST(LaunchRules, CatalogGpusCarryTheirLimits) {
  for (const GpuSpec& g : gpu_catalog()) {
    const DeviceLimits& d = g.limits;
    SCOPED_TRACE(g.name);
    EXPECT_GE(d.cc_major, 8);
    EXPECT_GT(d.sms, 0);
    EXPECT_TRUE(d.max_threads_per_sm == 1536 || d.max_threads_per_sm == 2048);
    EXPECT_GE(d.max_blocks_per_sm, 16);
    EXPECT_GE(d.smem_per_block_optin, size_t(99) * 1024);
    EXPECT_LT(d.smem_per_block_optin, d.smem_per_sm);
    EXPECT_GE(d.l2_bytes, size_t(40) << 20);
  }
  const DeviceLimits& h200 = find_gpu("h200").limits;
  EXPECT_EQ(h200.sms, 132);
  EXPECT_EQ(h200.smem_per_block_optin, size_t(227) * 1024);
  EXPECT_EQ(find_gpu("a100-80gb").limits.smem_per_block_optin, size_t(163) * 1024);
  EXPECT_EQ(find_gpu("rtx4090").limits.max_threads_per_sm, 1536);
}

// The H200's shapes as measured (kernels/gdn/notes/gdn_decode_kvbuffer.md v10, v12, v30).
TEST(LaunchRules, H200KeepsItsMeasuredShapes) {
  const DeviceLimits& d = find_gpu("h200").limits;
  EXPECT_EQ(gdn_rows(1, 32, 4, d), 16);
  EXPECT_EQ(gdn_rows(8, 32, 4, d), 32);  // batch 8 at 4 blocks per SM
  EXPECT_EQ(gdn_rows(8, 64, 4, d), 32);
  EXPECT_EQ(gdn_rows(64, 64, 4, d), 64);
  // 16-bit single KVBuffer: whole-head tiles from 8 blocks per SM (batch 33 on 132 SMs); batch 32
  // stays at the fp32 rule's 64 rows.
  EXPECT_EQ(gdn_rows(32, 128, 8, d), 64);
  EXPECT_EQ(gdn_rows(33, 128, 8, d), 128);
  EXPECT_EQ(gdn_rows(256, 128, 8, d), 128);
  // Mamba-2 classic verify, Nemotron-3 Nano (4096 state rows per request): 2 rows per warp at batch
  // 1-2, 4 at 4, 8 at 8, then 4 in two-warp blocks.
  const long nano_rows = 64L * 64;
  EXPECT_EQ(classic_verify_rows_per_warp(1 * nano_rows, d), 2);
  EXPECT_EQ(classic_verify_rows_per_warp(2 * nano_rows, d), 2);
  EXPECT_EQ(classic_verify_rows_per_warp(4 * nano_rows, d), 4);
  EXPECT_EQ(classic_verify_rows_per_warp(8 * nano_rows, d), 8);
  EXPECT_EQ(classic_verify_rows_per_warp(16 * nano_rows, d), 4);
  // Commits of 256-thread blocks: 2048-thread rounds of 132 SMs (1056 blocks).
  EXPECT_EQ(commit_slices_for(128L * 23, 256, 8, d), 1);
  EXPECT_EQ(commit_slices_for(23, 256, 8, d), 8);
  EXPECT_EQ(commit_slices_for(4L * 23, 256, 16, d), 12);
}

// Every GPU: the rows are a power of 2 between the floor and the widest shape, a shape below the
// widest is chosen only because the wider one would leave SMs short of the target, and a shape
// above the floor meets the target on this GPU's SM count.
TEST(LaunchRules, EveryCatalogGpuMeetsTheOccupancyTargets) {
  struct Rule {
    int max_rows, min_blocks;
  };
  for (const GpuSpec& g : gpu_catalog()) {
    const DeviceLimits& d = g.limits;
    for (Rule r : {Rule{32, 4}, Rule{64, 4}, Rule{128, 8}, Rule{64, 8}}) {
      int previous = 0;
      for (int batch : {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512}) {
        SCOPED_TRACE(g.name + " batch " + std::to_string(batch) + " max " + std::to_string(r.max_rows));
        const int rows = gdn_rows(batch, r.max_rows, r.min_blocks, d);
        EXPECT_GE(rows, 16);
        EXPECT_LE(rows, r.max_rows);
        EXPECT_EQ(rows & (rows - 1), 0);
        EXPECT_GE(rows, previous) << "rows shrink as the batch grows";
        previous = rows;
        const long target = long(r.min_blocks) * d.sms;
        if (rows > 16) EXPECT_GE(long(batch) * kHV * (kV / rows), target);
        if (rows < r.max_rows) EXPECT_LT(long(batch) * kHV * (kV / (2 * rows)), target);
      }
    }
    for (long rows : {4096L, 8192L, 65536L, 1L << 20}) {
      const int r = classic_verify_rows_per_warp(rows, d);
      if (r == 2 || r == 8) EXPECT_LE(rows / r, long(d.max_blocks_per_sm) * d.sms) << g.name;
    }
    const long wave = long(d.sms) * (d.max_threads_per_sm / 256);
    for (long rows_layers : {1L, 23L, 100L, 1000L, 100000L}) {
      const int s = commit_slices_for(rows_layers, 256, 8, d);
      EXPECT_GE(s, 1);
      EXPECT_LE(s, 8);
      if (s < 8) EXPECT_GE(rows_layers * s, wave) << g.name;
      if (s > 1) EXPECT_LT(rows_layers * (s - 1), wave) << g.name;
    }
  }
}

// Fewer SMs shift the shapes to smaller batches: the A100's 108 SMs take whole-head 16-bit tiles
// from batch 27, the RTX 4090's 128 from 32, the B200's 148 from 37.
TEST(LaunchRules, ThresholdsFollowTheSmCount) {
  EXPECT_EQ(gdn_rows(26, 128, 8, find_gpu("a100-80gb").limits), 64);
  EXPECT_EQ(gdn_rows(27, 128, 8, find_gpu("a100-80gb").limits), 128);
  EXPECT_EQ(gdn_rows(32, 128, 8, find_gpu("rtx4090").limits), 128);
  EXPECT_EQ(gdn_rows(36, 128, 8, find_gpu("b200").limits), 64);
  EXPECT_EQ(gdn_rows(37, 128, 8, find_gpu("b200").limits), 128);
}

// Mamba-2 KVBuffer decode, 16-bit state, the Nemotron-3 Nano layer (64 heads of P = 64 rows, whole-head
// blocks): rows per warp 8 below batch 13, 16 from 13, 32 from 99 on the H200 (measured: 8 rows
// fastest at batch 8, 16 at 32 and 64, 32 from 128); fewer SMs move the thresholds down.
TEST(LaunchRules, Mamba2KVBuffer16WarpRowsFollowTheGrid) {
  auto warp_rows = [](int batch, int rows_per_block, const char* gpu) {
    return mamba2_kvbuffer16_warp_rows(long(batch) * 64 * 64, rows_per_block, find_gpu(gpu).limits);
  };
  EXPECT_EQ(warp_rows(1, 64, "h200"), 8);
  EXPECT_EQ(warp_rows(12, 64, "h200"), 8);
  EXPECT_EQ(warp_rows(13, 64, "h200"), 16);
  EXPECT_EQ(warp_rows(64, 64, "h200"), 16);
  EXPECT_EQ(warp_rows(98, 64, "h200"), 16);
  EXPECT_EQ(warp_rows(99, 64, "h200"), 32);
  EXPECT_EQ(warp_rows(512, 64, "h200"), 32);
  EXPECT_EQ(warp_rows(512, 16, "h200"), 16);  // the rows per block bound the warp's rows
  EXPECT_EQ(warp_rows(512, 8, "h200"), 8);
  EXPECT_EQ(warp_rows(11, 64, "a100-80gb"), 16);  // 108 SMs: 16 rows from batch 11
  EXPECT_EQ(warp_rows(10, 64, "a100-80gb"), 8);
  EXPECT_EQ(warp_rows(81, 64, "a100-80gb"), 32);
  EXPECT_EQ(warp_rows(80, 64, "a100-80gb"), 16);
}

// ---- Shared memory: every shape the sweep grid can ask of the GDN kernels whose shared memory
// depends on it (kernels/gdn/gdn_launch_shape.h), on every catalog GPU.

constexpr int kMaxCapacity = 64;  // the sweep's chunks 1..64
constexpr int kMaxDrafts = 8;     // verify tokens T 1..8

// The GDN layer shapes of the catalog's models that the kernels are built for (K 64 or 128).
std::vector<LayerShape> gdn_layers() {
  std::vector<LayerShape> v;
  for (const ModelSpec& m : model_catalog())
    if (m.kind == LayerKind::GatedDeltaNet && (m.layer.head_k == 64 || m.layer.head_k == 128)) v.push_back(m.layer);
  return v;
}

// What a GPU does with each kernel's shapes: points whose rows the fit rule lowers, points refused.
struct SmemOutcome {
  long points = 0, fewer_rows = 0, refused = 0;
  int first_c = 0;  // the smallest capacity C with a point lowered or refused
};
using SmemOutcomes = std::map<std::string, SmemOutcome>;

// A rows-per-block kernel at every occupancy choice `widest` its rule can make (16 .. max_rows,
// dividing V: row counts the kernels' checks cover): the fit rule's rows are covered, no wider than
// the choice, and fit; or nothing covered fits and the rule leaves the choice for the launch to refuse.
template <class BytesOf>
void check_rows_kernel(const std::string& kernel, int C, int V, int max_rows, BytesOf bytes_of, const DeviceLimits& d,
                       SmemOutcomes& out) {
  for (int widest = 16; widest <= max_rows && widest <= V; widest *= 2) {
    const int rows = rows_within_smem(widest, 16, bytes_of, d);
    SmemOutcome& o = out[kernel];
    ++o.points;
    ASSERT_TRUE(rows >= 16 && rows <= widest && V % rows == 0 && (rows & (rows - 1)) == 0) << kernel << " " << rows;
    if (rows < widest || size_t(bytes_of(rows)) > d.smem_per_block_optin)
      o.first_c = o.first_c ? std::min(o.first_c, C) : C;
    if (size_t(bytes_of(rows)) <= d.smem_per_block_optin) {
      if (rows < widest) {
        ++o.fewer_rows;
        EXPECT_GT(size_t(bytes_of(2 * rows)), d.smem_per_block_optin) << kernel << ": the largest that fits";
      }
    } else {
      ++o.refused;
      EXPECT_EQ(rows, widest) << kernel;
      EXPECT_GT(size_t(bytes_of(16)), d.smem_per_block_optin) << kernel;
    }
  }
}

// A kernel of fixed rows: fits, or refused at launch.
void check_fixed_kernel(const std::string& kernel, int C, size_t bytes, const DeviceLimits& d, SmemOutcomes& out) {
  SmemOutcome& o = out[kernel];
  ++o.points;
  if (bytes <= d.smem_per_block_optin) return;
  ++o.refused;
  o.first_c = o.first_c ? std::min(o.first_c, C) : C;
}

SmemOutcomes gdn_smem_outcomes(const DeviceLimits& d) {
  using namespace gdn_detail;
  using gdn_verify_detail::VerifySmem;
  SmemOutcomes out;
  for (const LayerShape& l : gdn_layers())
    for (StateType st : {StateType::FP32, StateType::BF16, StateType::FP16}) {
      const size_t sb = state_type_bytes(st);
      check_rows_kernel("gdn recurrent", 0, l.head_v, kRecurrentRows.max_rows, [&](int r) { return recurrent_smem_bytes(l.head_k, r, sb); }, d, out);
      for (size_t eb : {size_t(2), size_t(4)})
        for (int C = 1; C <= kMaxCapacity; ++C) {
          for (bool raw : {false, true})
            check_rows_kernel(raw ? "gdn kvbuffer single (raw)" : "gdn kvbuffer single (cached u)", C, l.head_v,
                              kSingleKVBufferRows.max_rows * rows_per_fp32_row(st),
                              [&](int r) { return kvbuffer_smem_layout(l.head_k, C, r, sb, eb, raw).bytes; }, d, out);
          check_rows_kernel("gdn kvbuffer split / direct, kernel B", C, l.head_v, split_state_rows(C).max_rows, [&](int r) {
            return split_state_smem_bytes(l.head_k, C, r, sb, eb) + kSplitStateStaticSmemBound;
          }, d, out);
          check_fixed_kernel("gdn kvbuffer split / direct, kernel A", C,
                             split_buffer_smem_bytes(l.value_heads / l.key_heads, C, l.head_v, eb), d, out);
          for (int T = 1; T <= kMaxDrafts && T <= C; ++T) {
            check_fixed_kernel("gdn verify kvbuffer", C,
                               VerifySmem{l.head_k, gdn_verify_detail::verify_tmax(T), C, int(eb)}.bytes() +
                                   gdn_verify_detail::verify_static_smem_bytes(gdn_verify_detail::verify_tmax(T)),
                               d, out);
            check_fixed_kernel("gdn verify kvbuffer, split path's coefficient kernel", C,
                               gdn_verify_detail::verify_coef_smem_bytes(l.head_k, gdn_verify_detail::verify_tmax(T), C,
                                                                         int(eb), l.value_heads / l.key_heads),
                               d, out);
          }
          if (C <= kMaxDrafts)  // the commit folds at T == C
            check_fixed_kernel("gdn verify kvbuffer commit fold", C, gdn_verify_detail::commit_fold_smem_bytes(l.head_k, C),
                               d, out);
        }
    }
  return out;
}

// The fit rule on its own: at 1 KiB per row 99 KiB hold 64 rows, 163 KiB 128; at 7 KiB per row
// 163 KiB hold 16 rows and 99 KiB none (the choice stays for the launch to refuse).
TEST(LaunchRulesSmem, RowsWithinSmemPicksTheLargestThatFits) {
  const auto kib_per_row = [](int kib) { return [kib](int rows) { return size_t(rows) * kib * 1024; }; };
  const DeviceLimits& l40s = find_gpu("l40s").limits;
  const DeviceLimits& a100 = find_gpu("a100-80gb").limits;
  EXPECT_EQ(rows_within_smem(128, 16, kib_per_row(1), l40s), 64);
  EXPECT_EQ(rows_within_smem(128, 16, kib_per_row(1), a100), 128);
  EXPECT_EQ(rows_within_smem(32, 16, kib_per_row(1), l40s), 32);
  EXPECT_EQ(rows_within_smem(128, 16, kib_per_row(7), l40s), 128);  // 16 rows need 112 KiB: refused
  EXPECT_EQ(rows_within_smem(128, 16, kib_per_row(7), a100), 16);
}

// The Mamba-2 layer shapes of the catalog's models that the kernels are built for (N 64 or 128).
std::vector<LayerShape> mamba2_layers() {
  std::vector<LayerShape> v;
  for (const ModelSpec& m : model_catalog())
    if (m.kind == LayerKind::Mamba2 && (m.layer.head_k == 64 || m.layer.head_k == 128)) v.push_back(m.layer);
  return v;
}

// The Mamba-2 KVBuffer kernels (kernels/mamba2/mamba2_launch_shape.h) at the rows they launch: the
// decode block's whole head (kKVBufferRows: 64 rows at every batch) and the verify's one-head block
// (the largest of 64, 32, 16, 8 dividing P). Their rows follow P, not the device: a shape that does not
// fit is refused. (The verify's head-group kernel takes its heads per block from the occupancy API,
// which reads the device's shared memory.)
SmemOutcomes mamba2_smem_outcomes(const DeviceLimits& d) {
  using namespace mamba2_detail;
  SmemOutcomes out;
  for (const LayerShape& l : mamba2_layers()) {
    const int N = l.head_k, P = l.head_v;
    int rows = kMaxRowsPerBlock;
    while (P % rows != 0) rows /= 2;
    for (StateType st : {StateType::FP32, StateType::BF16, StateType::FP16}) {
      const int sb = state_type_bytes(st);
      for (int C = 2; C <= kMaxCapacity; ++C) {
        for (bool tile : {false, true})  // 8 rows per warp: the most warps, so the most bytes of any warp_rows
          check_fixed_kernel(tile ? "mamba2 kvbuffer decode (tiled)" : "mamba2 kvbuffer decode / direct, kernel B", C,
                             kvbuffer_block_smem_bytes(N, tile, sb, C - 1, rows / kWarpRows, kWarpRows), d, out);
        check_fixed_kernel("mamba2 kvbuffer split / direct, kernel A", C, split_buffer_smem_bytes(C - 1, P, C), d, out);
        for (int T = 1; T <= kMaxDrafts && T <= C; ++T)
          check_fixed_kernel("mamba2 verify kvbuffer (one head)", C, size_t(VerifySmem(N, C, rows, T, sb).bytes), d, out);
      }
    }
  }
  return out;
}

// Both families' outcomes.
SmemOutcomes smem_outcomes(const DeviceLimits& d) {
  SmemOutcomes out = gdn_smem_outcomes(d);
  for (const auto& [kernel, o] : mamba2_smem_outcomes(d)) out[kernel] = o;
  return out;
}

// The H200 (227 KiB per block) holds every shape: its measured choices never change.
TEST(LaunchRulesSmem, H200FitsEveryShape) {
  ASSERT_FALSE(gdn_layers().empty());
  ASSERT_FALSE(mamba2_layers().empty());
  for (const auto& [kernel, o] : smem_outcomes(find_gpu("h200").limits)) {
    EXPECT_GT(o.points, 0) << kernel;
    EXPECT_EQ(o.fewer_rows, 0) << kernel;
    EXPECT_EQ(o.refused, 0) << kernel;
  }
}

// Every catalog GPU: each shape fits or is refused (checked in check_rows_kernel); the table of
// what changes is printed, and sim/README.md must carry it as printed.
TEST(LaunchRulesSmem, EveryCatalogGpuFitsOrRefuses) {
  const SmemOutcomes h200 = smem_outcomes(find_gpu("h200").limits);
  std::ifstream readme_file(std::string(KVBUF_RESULTS_DIR) + "/../sim/README.md");
  ASSERT_TRUE(readme_file) << "sim/README.md";
  std::stringstream readme;
  readme << readme_file.rdbuf();
  std::printf("| GPU | smem/block opt-in KiB | smem/SM KiB | SMs | L2 MiB | changes from the H200's shapes |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (const GpuSpec& g : gpu_catalog()) {
    const DeviceLimits& d = g.limits;
    const SmemOutcomes out = smem_outcomes(d);
    std::string changes;
    for (const auto& [kernel, o] : out) {
      EXPECT_EQ(o.points, h200.at(kernel).points) << g.name << " " << kernel;
      if (d.smem_per_block_optin >= find_gpu("h200").limits.smem_per_block_optin)
        EXPECT_EQ(o.fewer_rows + o.refused, 0) << g.name << " " << kernel;
      if (o.fewer_rows + o.refused == 0) continue;
      changes += (changes.empty() ? "" : "; ") + kernel + " (from C = " + std::to_string(o.first_c) + "): ";
      if (o.fewer_rows) changes += std::to_string(o.fewer_rows) + " of " + std::to_string(o.points) + " fewer rows";
      if (o.refused)
        changes += std::string(o.fewer_rows ? ", " : "") + std::to_string(o.refused) + " of " + std::to_string(o.points) +
                   " refused";
    }
    char row[2048];
    std::snprintf(row, sizeof(row), "| %s | %zu | %zu | %d | %zu | %s |\n", g.name.c_str(), d.smem_per_block_optin / 1024,
                  d.smem_per_sm / 1024, d.sms, d.l2_bytes >> 20, changes.empty() ? "none" : changes.c_str());
    std::printf("%s", row);
    EXPECT_NE(readme.str().find(row), std::string::npos) << "sim/README.md lacks the row " << row;
  }
}

}  // namespace
}  // namespace kvbuf

namespace kvbuf {
namespace {

// Results files are named by the GPU: the catalog's name for a catalog GPU as the driver names it.
TEST(GpuFileKey, DriverNamesMapToTheCatalog) {
  EXPECT_EQ(gpu_file_key("NVIDIA H200"), "h200");
  EXPECT_EQ(gpu_file_key("NVIDIA H200 NVL"), "h200");
  EXPECT_EQ(gpu_file_key("NVIDIA H100 80GB HBM3"), "h100-sxm");
  EXPECT_EQ(gpu_file_key("NVIDIA H100 PCIe"), "h100-pcie");
  EXPECT_EQ(gpu_file_key("NVIDIA A100-SXM4-80GB"), "a100-80gb");
  EXPECT_EQ(gpu_file_key("NVIDIA A100-PCIE-40GB"), "a100-40gb");
  EXPECT_EQ(gpu_file_key("NVIDIA L40S"), "l40s");
  EXPECT_EQ(gpu_file_key("NVIDIA GeForce RTX 4090"), "rtx4090");
  EXPECT_EQ(gpu_file_key("NVIDIA B200"), "b200");
  for (const GpuSpec& g : gpu_catalog()) EXPECT_EQ(gpu_file_key(g.name), g.name) << "a key maps to itself";
  EXPECT_EQ(gpu_file_key("NVIDIA GeForce RTX 5090"), "rtx-5090");
  EXPECT_EQ(gpu_file_key("NVIDIA RTX PRO 6000 Blackwell Server Edition"), "rtx-pro-6000-blackwell-server-edition");
  EXPECT_EQ(gpu_file_key(""), "gpu");
}

}  // namespace
}  // namespace kvbuf

namespace kvbuf {
namespace {

// The GDN KVBuffer verify's shared-memory carve-up (VerifySmem) for every shape the kernel is built
// for (K, T = 1..8 and its TMAX, entry size, T <= C <= 64): the regions are disjoint, inside bytes(),
// 16-byte aligned where the kernel copies or loads 16 bytes (landed key rows too: their pitch in
// bytes), and the fixed regions' offsets (those the kernel takes as compile-time constants) do not
// depend on C. Each region: (offset, size in bytes, alignment).
TEST(GdnVerifySmem, RegionsDisjointAlignedAndFixedOnesIndependentOfC) {
  using gdn_verify_detail::kRows;
  using gdn_verify_detail::kVerifyWarps;
  using gdn_verify_detail::VerifySmem;
  struct Region {
    const char* name;
    int at, size, align;
  };
  for (int kd : {64, 128})
    for (int T = 1; T <= 8; ++T)
      for (int esz : {2, 4}) {
        const int tmax = gdn_verify_detail::verify_tmax(T);
        const int pitch_bytes = VerifySmem::key_pitch(kd, esz) * esz;
        EXPECT_EQ(pitch_bytes % 16, 0) << "K " << kd << " esz " << esz;
        EXPECT_GE(pitch_bytes, kd * esz);
        for (int c = T; c <= 64; ++c) {
          const VerifySmem L{kd, tmax, c, esz};
          SCOPED_TRACE("K " + std::to_string(kd) + " TMAX " + std::to_string(tmax) + " esz " + std::to_string(esz) +
                       " C " + std::to_string(c));
          const std::vector<Region> rs = {
              {"raw_kq", L.raw_kq(), 2 * tmax * kd * 2, 16},
              {"raw_v", L.raw_v(), tmax * kRows * 2, 16},
              {"b", L.b(), L.nb() * L.bp() * 4, 16},
              {"scale", L.scale(), 2 * tmax * 4, 4},
              {"gwin", L.gwin(), tmax * 4, 4},
              {"graw", L.graw(), tmax * 4, 4},
              {"beta", L.beta(), tmax * 4, 4},
              {"w", L.w(), c * kRows * 4, 16},
              {"keys", L.keys(), c * pitch_bytes, 16},
              {"u", L.u(), c * kRows * esz, 16},
              {"part", L.part(), kVerifyWarps * L.key_rows_pad() * L.nb() * 4, 8},
              {"wu", L.wu(), c * tmax * 4, 4},
              {"wo", L.wo(), c * tmax * 4, 4},
              {"gbuf", L.gbuf(), c * 4, 4}};
          for (size_t i = 0; i < rs.size(); ++i) {
            EXPECT_EQ(rs[i].at % rs[i].align, 0) << rs[i].name;
            EXPECT_GE(rs[i].at, 0) << rs[i].name;
            EXPECT_LE(size_t(rs[i].at + rs[i].size), L.bytes()) << rs[i].name;
            for (size_t j = 0; j < i; ++j)
              EXPECT_TRUE(rs[i].at + rs[i].size <= rs[j].at || rs[j].at + rs[j].size <= rs[i].at)
                  << rs[i].name << " overlaps " << rs[j].name;
          }
          EXPECT_GE(L.key_rows_pad(), c + tmax);
          EXPECT_EQ(L.key_rows_pad() % 16, 0);
          // The split path's state kernel copies its coefficient record (16-byte pieces) into the
          // partial sums' region and reads the window coefficients' rows as float4s.
          const gdn_verify_detail::VerifyCoefRecord rec{tmax, c};
          EXPECT_LE(rec.floats() * 4, kVerifyWarps * L.key_rows_pad() * L.nb() * 4);
          EXPECT_EQ(rec.floats() % 4, 0);
          EXPECT_EQ(L.part() % 16, 0);
          for (int at : {rec.colf(), rec.cu(), rec.co()}) EXPECT_EQ(at % 4, 0);
          EXPECT_GE(rec.floats(), rec.wo() + c * tmax);
          EXPECT_EQ(gdn_verify_detail::verify_coef_floats(T, c), rec.floats());
          const VerifySmem L1{kd, tmax, 1, esz};
          for (auto [a, b] : {std::pair{L.raw_kq(), L1.raw_kq()}, {L.raw_v(), L1.raw_v()}, {L.b(), L1.b()},
                              {L.scale(), L1.scale()}, {L.gwin(), L1.gwin()},
                              {L.graw(), L1.graw()}, {L.beta(), L1.beta()}, {L.w(), L1.w()}})
            EXPECT_EQ(a, b);
        }
      }
  // The size at the sweep's shape (K = 128, T = 5, C = 16, bf16 entries): v20's measured 32384 bytes
  // less the window coefficients and e^{G_t} (220 bytes, rounded to 16), which v21 moved to static
  // shared arrays of the kernel or dropped.
  EXPECT_EQ((VerifySmem{128, 5, 16, 2}.bytes()), size_t(32176));
}

}  // namespace
}  // namespace kvbuf
