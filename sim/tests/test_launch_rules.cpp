// The launch-shape rules (sim/launch_rules.h) for every catalog GPU's limits: the H200's shapes are
// the measured ones, every GPU's shapes meet the rules' occupancy targets on its own SM count.
#include <gtest/gtest.h>

#include "sim/gpus.h"
#include "sim/launch_rules.h"

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
