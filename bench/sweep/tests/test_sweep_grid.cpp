// The grid of `kvbuf sweep` without a GPU (bench/sweep/sweep_grid.h): the size and modes of expanded
// grids, points that cannot run carrying their reason, bad axis values refused, the shard split
// covering every point exactly once, and the resume scan (finished keys, torn last line dropped).
#include "bench/sweep/sweep_grid.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "bench/csv.h"
#include "bench/gpu_telemetry.h"

namespace kvbuf {
namespace {

namespace fs = std::filesystem;

SweepAxes small_axes() {
  SweepAxes a;
  a.models = {"qwen3-next-80b-a3b"};
  a.kernels = {"recurrent", "kvbuffer", "direct"};
  a.batches = {1, 64};
  a.chunks = {2, 8};
  a.contexts = {0, 1, 16};
  a.drafts = {2};
  return a;
}

const SweepPoint& find(const std::vector<SweepPoint>& ps, const std::string& kernel, int batch, int chunk, int context) {
  for (const SweepPoint& p : ps)
    if (p.kernel->name == kernel && p.batch == batch && p.chunk == chunk && p.context == context) return p;
  throw std::runtime_error("no point " + kernel);
}

TEST(SweepGrid, SizeIsTheProductOfTheAxes) {
  const auto ps = expand_grid(small_axes());
  // recurrent: 2 batches x 3 contexts; kvbuffer and direct: 2 batches x 2 C x 3 contexts.
  EXPECT_EQ(ps.size(), 6u + 12u + 12u);
  for (const SweepPoint& p : ps) {
    EXPECT_TRUE(p.decode());
    EXPECT_EQ(p.layers, find_model("qwen3-next-80b-a3b").linear_layers);
    EXPECT_EQ(p.state_dtype, "fp32");
  }
}

TEST(SweepGrid, ContextPicksTheMode) {
  const auto ps = expand_grid(small_axes());
  EXPECT_EQ(find(ps, "recurrent", 1, 0, 16).mode, "recurrent");
  const SweepPoint& kv_short = find(ps, "kvbuffer", 1, 8, 1);  // 1 <= C - 2: direct, fill 1
  EXPECT_EQ(kv_short.mode, "direct");
  EXPECT_EQ(kv_short.direct_fill, 1);
  EXPECT_TRUE(kv_short.note.empty());
  const SweepPoint& kv_long = find(ps, "kvbuffer", 1, 2, 1);  // C = 2 cannot hold it: buffered
  EXPECT_EQ(kv_long.mode, "buffered");
  EXPECT_EQ(kv_long.direct_fill, -1);
  EXPECT_EQ(find(ps, "kvbuffer", 64, 8, 0).mode, "buffered");
  EXPECT_EQ(find(ps, "direct", 64, 8, 0).mode, "direct");
  EXPECT_EQ(find(ps, "direct", 64, 8, 0).direct_fill, -1);  // steady state: staggered fills
  const SweepPoint& too_long = find(ps, "direct", 64, 8, 16);
  EXPECT_NE(too_long.note.find("context 16 does not fit a direct-mode buffer of C = 8"), std::string::npos);
}

TEST(SweepGrid, MemoryAndAttentionColumnsFollowTheContext) {
  const auto ps = expand_grid(small_axes());
  const ModelSpec m = find_model("qwen3-next-80b-a3b");
  const PoolLayout layout{m.layer, 8, BufferVariant::CachedU, Precision{}};
  auto col = [](const SweepPoint& p, const std::string& c) { return std::stod(point_columns(p, "g", "c").at(c)); };
  const SweepPoint& direct = find(ps, "kvbuffer", 64, 8, 1);
  EXPECT_EQ(col(direct, "request_state_bytes"), 0);
  EXPECT_NEAR(col(direct, "request_entry_bytes"), 1.0 * layout.entry_bytes() * m.linear_layers, 1);
  const SweepPoint& buffered = find(ps, "kvbuffer", 64, 8, 16);
  EXPECT_NEAR(col(buffered, "request_state_bytes"), double(layout.state_bytes()) * m.linear_layers, 1);
  EXPECT_NEAR(col(buffered, "request_entry_bytes"), 8.0 * layout.entry_bytes() * m.linear_layers, 1);
  EXPECT_NEAR(col(buffered, "attn_kv_bytes_per_layer_step"), m.attn_kv_bytes_per_token() / m.attn_layers * 16 * 64, 1);
  EXPECT_EQ(col(find(ps, "recurrent", 64, 0, 0), "attn_kv_bytes_per_layer_step"), 0);
  EXPECT_EQ(grid_fields(buffered).size(), decode_grid_columns().size());
}

TEST(SweepGrid, BothFamiliesPairKernelsWithTheirModels) {
  SweepAxes a;
  a.models = {"qwen3-next-80b-a3b", "nemotron-3-nano-30b-a3b"};
  a.batches = {8};
  a.chunks = {4};
  const auto ps = expand_grid(a);  // default kernels: 5 GDN (2 unbuffered), 3 Mamba-2 (1 unbuffered)
  EXPECT_EQ(ps.size(), 5u + 3u);
  for (const SweepPoint& p : ps) EXPECT_EQ(p.kernel->kind, find_model(p.model).layer.kind) << p.label();
}

TEST(SweepGrid, ImpossiblePointsCarryTheirReason) {
  SweepAxes a = small_axes();
  a.kernels = {"verify-classic", "verify-kvbuffer"};
  a.drafts = {4};
  a.chunks = {2, 8};
  a.contexts = {0};
  a.tps = {1, 3};
  const auto ps = expand_grid(a);
  // per tp: 2 batches x (1 classic + 2 C of kvbuffer)
  ASSERT_EQ(ps.size(), 12u);
  for (const SweepPoint& p : ps) {
    if (p.tp == 3)
      EXPECT_NE(p.note.find("tp 3"), std::string::npos) << p.label();
    else if (p.kernel->buffered && p.chunk == 2)
      EXPECT_EQ(p.note, "T = 4 drafts do not fit a buffer of C = 2");
    else
      EXPECT_EQ(p.note, "") << p.label();
  }
}

TEST(SweepGrid, EntryDtypeAxisUsesTheTableTwin) {
  SweepAxes a = small_axes();
  a.kernels = {"kvbuffer", "kvbuffer-raw", "kvbuffer-fp32", "recurrent"};
  a.contexts = {0};
  a.batches = {1};
  a.chunks = {4};
  a.entry_dtypes = {"bf16", "fp32"};
  const auto ps = expand_grid(a);
  std::map<std::string, std::string> seen;  // kernel/entry -> note
  for (const SweepPoint& p : ps) seen[p.kernel->name + "/" + p.entry_dtype] = p.note;
  // kvbuffer x {bf16, fp32} = kvbuffer, kvbuffer-fp32 (kvbuffer-fp32 listed too: no duplicate);
  // kvbuffer-raw has no fp32 twin: a row saying so.
  EXPECT_EQ(ps.size(), 5u);
  EXPECT_EQ(seen.at("kvbuffer/bf16"), "");
  EXPECT_EQ(seen.at("kvbuffer-fp32/fp32"), "");
  EXPECT_EQ(seen.at("kvbuffer-raw/bf16"), "");
  EXPECT_EQ(seen.at("kvbuffer-raw/fp32"), "no fp32-entry kernel for kvbuffer-raw in the kernel table");
  EXPECT_EQ(seen.at("recurrent/none"), "");
}

// The state dtype axis: every kernel runs each type; the memory columns follow the type.
TEST(SweepGrid, StateDtypeAxis) {
  SweepAxes a = small_axes();
  a.kernels = {"recurrent", "kvbuffer", "direct", "verify-classic", "verify-kvbuffer"};
  a.contexts = {0};
  a.batches = {8};
  a.chunks = {8};
  a.drafts = {4};
  a.state_dtypes = {"fp32", "bf16", "fp16"};
  const auto ps = expand_grid(a);
  ASSERT_EQ(ps.size(), 15u);
  std::map<std::string, std::string> bytes;  // kernel/state -> request_state_bytes
  for (const SweepPoint& p : ps) {
    EXPECT_EQ(p.note, "") << p.label();
    if (p.decode()) bytes[p.kernel->name + "/" + p.state_dtype] = point_columns(p, "", "").at("request_state_bytes");
  }
  EXPECT_EQ(std::stod(bytes.at("recurrent/fp32")), 2 * std::stod(bytes.at("recurrent/bf16")));
  EXPECT_EQ(bytes.at("recurrent/bf16"), bytes.at("recurrent/fp16"));
}

TEST(SweepGrid, BadAxisValuesAreRefused) {
  auto refused = [](auto edit, const std::string& part) {
    SweepAxes a = small_axes();
    edit(a);
    try {
      expand_grid(a);
      ADD_FAILURE() << "accepted; expected " << part;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  refused([](SweepAxes& a) { a.state_dtypes = {"fp8"}; }, "unknown state dtype 'fp8'");
  refused([](SweepAxes& a) { a.chunks = {65}; }, "--chunk: 65");
  refused([](SweepAxes& a) { a.batches = {0}; }, "--batch");
  refused([](SweepAxes& a) { a.drafts = {9}; }, "--drafts: 9");
  refused([](SweepAxes& a) { a.contexts = {-1}; }, "--context");
  refused([](SweepAxes& a) { a.models = {"nope"}; }, "unknown model");
  refused([](SweepAxes& a) { a.kernels = {"fastest"}; }, "unknown kernel fastest");
  refused([](SweepAxes& a) { a.kernels = {"mamba2-recurrent"}; }, "qwen3-next-80b-a3b is Gated DeltaNet");
  refused([](SweepAxes& a) { a.entry_dtypes = {"fp8"}; }, "--entry-dtype: fp8");
}

TEST(SweepGrid, ShardsPartitionTheGrid) {
  SweepAxes a = small_axes();
  a.kernels = {"recurrent", "kvbuffer", "direct", "verify-classic", "verify-kvbuffer"};
  const auto all = expand_grid(a);
  for (int n = 1; n <= 5; ++n) {
    std::map<std::string, int> count;
    size_t total = 0;
    for (int i = 0; i < n; ++i)
      for (const SweepPoint& p : shard_points(all, i, n)) ++count[point_key(p, "c")], ++total;
    EXPECT_EQ(total, all.size()) << n;
    EXPECT_EQ(count.size(), all.size()) << n;
    for (const auto& [key, c] : count) EXPECT_EQ(c, 1);
  }
  EXPECT_EQ(shard_points(all, 1, 2).front().label(), all[1].label());  // deterministic: every n-th from i
  EXPECT_EQ(parse_shard("1/4"), std::make_pair(1, 4));
  for (const char* bad : {"4/4", "-1/2", "1/0", "1", "a/b", "1/2x", "/2"})
    EXPECT_THROW(parse_shard(bad), std::invalid_argument) << bad;
}

TEST(SweepGrid, ResumeSkipsFinishedPointsAndDropsATornLine) {
  const fs::path dir = fs::temp_directory_path() / ("kvbuf_sweep_grid_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "decode.csv").string();
  const auto ps = expand_grid(small_axes());
  {
    CsvWriter csv(path, decode_columns());
    for (size_t i = 0; i < 6; ++i) {
      // Rows as the GPU driver writes them: base columns (measured ones made up), then the grid's;
      // the sixth point failed (its row says so) and runs again; the fifth was timed under the power
      // cap (runs again only with redo_clock_limited).
      auto c = point_columns(ps[i], "NVIDIA H200", "abc123");
      if (i == 5) c["note"] = "failed: an illegal memory access, say";
      if (i == 4) c["note"] = std::string(kClockLimitedNote) + ": power cap in 3 of 9 samples";
      std::vector<std::string> base;
      for (const std::string& name : decode_base_columns()) base.push_back(c.count(name) ? c.at(name) : "1.5");
      csv.set_row_suffix(grid_fields(ps[i]));
      csv.row(base);
    }
  }
  { std::ofstream(path, std::ios::app) << "qwen3-next-80b-a3b,kvbuffer,cached-u,bf16,in-pl"; }  // Ctrl-C mid-row
  const CsvResume r = resume_csv(path, decode_columns(), decode_key_columns());
  EXPECT_TRUE(r.exists);
  EXPECT_TRUE(r.dropped_torn_line);
  EXPECT_EQ(r.rows, 6u);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str().back(), '\n');
  EXPECT_EQ(text.str().find("in-pl\n"), std::string::npos);
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_EQ(r.finished.count(point_key(ps[i], "abc123")), i < 5 ? 1u : 0u) << ps[i].label();
    EXPECT_EQ(r.finished.count(point_key(ps[i], "other-commit")), 0u);  // another commit measures again
  }
  // --redo-clock-limited: the capped point runs again, the others stay finished.
  const CsvResume redo = resume_csv(path, decode_columns(), decode_key_columns(), true);
  for (size_t i = 0; i < ps.size(); ++i)
    EXPECT_EQ(redo.finished.count(point_key(ps[i], "abc123")), i < 4 ? 1u : 0u) << ps[i].label();
  // Resuming again finds the same rows and nothing torn.
  const CsvResume again = resume_csv(path, decode_columns(), decode_key_columns());
  EXPECT_FALSE(again.dropped_torn_line);
  EXPECT_EQ(again.finished, r.finished);
  // A file with other columns is refused, not appended to.
  EXPECT_THROW(resume_csv(path, verify_columns(), verify_key_columns()), std::invalid_argument);
  // No file: nothing finished.
  EXPECT_FALSE(resume_csv((dir / "none.csv").string(), decode_columns(), decode_key_columns()).exists);
  fs::remove_all(dir);
}

TEST(SweepGrid, SharedMeasurementsAreEstimatedOnce) {
  SweepAxes a = small_axes();
  a.kernels = {"recurrent"};
  a.batches = {1};
  const auto ps = expand_grid(a);  // 3 contexts, one measurement
  ASSERT_EQ(ps.size(), 3u);
  EXPECT_DOUBLE_EQ(estimate_seconds(ps, 0.5), estimate_seconds({ps[0]}, 0.5));
}

// --rest-s idles once per timed point: not per row of a shared measurement, not for rows with a note.
TEST(SweepGrid, RestIsEstimatedPerTimedPoint) {
  SweepAxes a = small_axes();
  a.kernels = {"recurrent"};
  a.batches = {1, 8};
  const auto ps = expand_grid(a);  // 2 batches x 3 contexts, two measurements
  ASSERT_EQ(ps.size(), 6u);
  EXPECT_DOUBLE_EQ(estimate_seconds(ps, 0.5, 3.0), estimate_seconds(ps, 0.5) + 2 * 3.0);
  SweepPoint noted = ps[0];
  noted.note = "cannot run";
  EXPECT_DOUBLE_EQ(estimate_seconds({noted}, 0.5, 3.0), 0.0);
}

TEST(SweepGrid, PaperPresetFitsItsBudget) {
  const auto ps = expand_grid(paper_axes());
  std::set<std::string> models;
  for (const SweepPoint& p : ps) models.insert(p.model);
  EXPECT_EQ(models, (std::set<std::string>{"qwen3-next-80b-a3b", "nemotron-3-nano-30b-a3b"}));
  const double s = estimate_seconds(ps, kPaperBudgetS);
  EXPECT_GT(s, 8 * 60);
  EXPECT_LT(s, 14 * 60);
}

// The preset measures fp32 and each model's engine-default state dtype: Qwen3-Next's bf16 at every
// point of its fp32 grid, Nemotron-3 Nano (whose default is fp32) once.
TEST(SweepGrid, PaperPresetAddsEachModelsEngineState) {
  std::map<std::string, std::map<std::string, size_t>> count;  // model -> state -> points
  for (const SweepPoint& p : expand_grid(paper_axes())) ++count[p.model][p.state_dtype];
  EXPECT_EQ(find_model("qwen3-next-80b-a3b").engine_state, StateType::BF16);
  EXPECT_EQ(find_model("nemotron-3-nano-30b-a3b").engine_state, StateType::FP32);
  const auto& qwen = count.at("qwen3-next-80b-a3b");
  const auto& nano = count.at("nemotron-3-nano-30b-a3b");
  EXPECT_EQ(qwen.size(), 2u);
  EXPECT_GT(qwen.at("fp32"), 0u);
  EXPECT_EQ(qwen.at("bf16"), qwen.at("fp32"));
  EXPECT_EQ(nano.size(), 1u);
  EXPECT_GT(nano.at("fp32"), 0u);
}

// kEngineStateDtype resolves per model; a default equal to another value of the axis runs once; the
// estimate counts each state dtype's measurement.
TEST(SweepGrid, EngineStateDtypeResolvesPerModel) {
  SweepAxes a;
  a.models = {"qwen3-next-80b-a3b", "nemotron-3-nano-30b-a3b"};
  a.kernels = {"recurrent", "mamba2-recurrent"};
  a.batches = {8};
  a.state_dtypes = {kEngineStateDtype};
  auto states = [](const std::vector<SweepPoint>& ps) {
    std::vector<std::string> s;
    for (const SweepPoint& p : ps) s.push_back(p.model + "/" + p.state_dtype);
    return s;
  };
  EXPECT_EQ(states(expand_grid(a)),
            (std::vector<std::string>{"qwen3-next-80b-a3b/bf16", "nemotron-3-nano-30b-a3b/fp32"}));
  a.state_dtypes = {"bf16", kEngineStateDtype, "fp32"};
  const auto ps = expand_grid(a);
  EXPECT_EQ(states(ps), (std::vector<std::string>{"qwen3-next-80b-a3b/bf16", "qwen3-next-80b-a3b/fp32",
                                                  "nemotron-3-nano-30b-a3b/bf16", "nemotron-3-nano-30b-a3b/fp32"}));
  EXPECT_GT(estimate_seconds({ps[0], ps[1]}, 0.5), estimate_seconds({ps[0]}, 0.5) + 0.5);
}

}  // namespace
}  // namespace kvbuf
