// GPU smoke test of `kvbuf sweep` (ctest label gpu): a tiny grid with 2 layer pools, every decode
// and verify row family and two contexts (steady state, and 2 tokens: direct mode at C = 4), whose
// CSVs are parsed and checked: the columns, positive and ordered latencies, and bytes equal to the
// bytes model of sim/ for each row; then the same command again, which resumes and adds no row.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "bench/gpu_telemetry.h"
#include "sim/bytes_model.h"
#include "sim/catalog.h"
#include "sim/csv.h"

namespace kvbuf {
namespace {

namespace fs = std::filesystem;

using Row = CsvRow;

double num(const Row& r, const std::string& k) { return std::stod(r.at(k)); }

TEST(SweepSmoke, TinyGridWritesRowsThatMatchTheBytesModel) {
  const fs::path dir = fs::temp_directory_path() / ("kvbuf_sweep_smoke_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path decode = dir / "decode.csv", verify = dir / "verify.csv";
  // $KVBUF_CLI overrides the build's path (a GPU bundle runs the binaries from another folder).
  const char* cli = std::getenv("KVBUF_CLI");
  const std::string cmd = std::string(cli && *cli ? cli : KVBUF_CLI_PATH) +
                          " sweep --model qwen3-next-80b-a3b --layer-pools 2 --batch 3 --chunk 2,4 --drafts 2 --context 0,2"
                          " --kernels recurrent,recurrent-oop,kvbuffer,kvbuffer-raw,kvbuffer-fp32,direct,"
                          "verify-classic,verify-classic-inplace,verify-kvbuffer --budget-s 0.02 --out " +
                          decode.string() + " --verify-out " + verify.string() + " > " + (dir / "log").string() +
                          " 2>&1";
  const int raw = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(raw) && WEXITSTATUS(raw) == 0) << cmd;
  ASSERT_TRUE(fs::exists(decode.string() + ".grid.toml"));

  const ModelSpec m = find_model("qwen3-next-80b-a3b");
  const LayerShape& s = m.layer;
  std::vector<std::string> header;
  const auto drows = read_csv_rows(decode, &header);
  // The columns the consumers read, in their old order, then the grid's.
  const std::vector<std::string> base{"model", "kernel", "variant", "entry_dtype", "placement", "batch", "chunk",
                                      "layers", "rows_per_block", "row_groups", "latency_us_median", "latency_us_min",
                                      "latency_us_max", "samples", "bytes_per_layer_step", "gbps", "frac_copy_bw",
                                      "copy_gbps", "sm_clock_mhz", "power_w", "gpu", "commit", "note"};
  ASSERT_GE(header.size(), base.size());
  EXPECT_EQ(std::vector<std::string>(header.begin(), header.begin() + base.size()), base);
  for (const char* c : {"tp", "context_tokens", "mode", "request_state_bytes", "request_entry_bytes",
                        "attn_kv_bytes_per_layer_step"})
    EXPECT_NE(std::find(header.begin(), header.end(), c), header.end()) << c;
  // Per context: 2 recurrent rows + 4 buffered kernels x 2 capacities. At context 2, C = 2 runs
  // buffered (direct: a row saying it does not fit), C = 4 in direct mode (raw: a row saying why).
  ASSERT_EQ(drows.size(), 20u);
  int notes = 0;
  for (const Row& r : drows) {
    SCOPED_TRACE(r.at("kernel") + " C " + r.at("chunk") + " context " + r.at("context_tokens"));
    const std::string k = r.at("kernel");
    const int C = std::stoi(r.at("chunk")), context = std::stoi(r.at("context_tokens"));
    EXPECT_EQ(r.at("layers"), "2");
    EXPECT_FALSE(r.at("gpu").empty());
    // A measured row's only note is the clock limits it was timed under (bench/gpu_telemetry.h).
    const std::string& note = r.at("note");
    if (!note.empty() && note.rfind(std::string(kClockLimitedNote) + ": ", 0) != 0) {
      ++notes;
      EXPECT_EQ(context, 2);
      EXPECT_TRUE((k == "direct" && C == 2) || (k == "kvbuffer-raw" && C == 4)) << note;
      EXPECT_EQ(r.at("latency_us_median"), "");
      continue;
    }
    EXPECT_GT(num(r, "latency_us_min"), 0);
    EXPECT_LE(num(r, "latency_us_min"), num(r, "latency_us_median"));
    EXPECT_LE(num(r, "latency_us_median"), num(r, "latency_us_max"));
    const Precision p = precision_of(k == "kvbuffer-fp32" ? EntryType::FP32 : EntryType::BF16);
    StepBytes b;
    if (k == "recurrent" || k == "recurrent-oop") {
      b = bytes_recurrent(s, p);
      EXPECT_EQ(r.at("mode"), "recurrent");
    } else if (context == 2 && C == 4) {
      b = bytes_direct_at_fill(s, p, 2);
      EXPECT_EQ(r.at("mode"), "direct");
      EXPECT_EQ(num(r, "request_state_bytes"), 0);
    } else if (k == "direct") {
      b = bytes_direct_mean(s, p, C);
    } else {
      b = bytes_kvbuffer_cycle(s, p, k == "kvbuffer-raw" ? BufferVariant::Raw : BufferVariant::CachedU, C);
      EXPECT_EQ(r.at("mode"), "buffered");
    }
    EXPECT_NEAR(num(r, "bytes_per_layer_step"), b.scale(3).total_bytes(), 1e-5 * b.total_bytes());
    EXPECT_NEAR(num(r, "gbps"), num(r, "bytes_per_layer_step") / (num(r, "latency_us_median") * 1e3),
                1e-4 * num(r, "gbps"));
    if (context == 2)
      EXPECT_NEAR(num(r, "attn_kv_bytes_per_layer_step"), m.attn_kv_bytes_per_token() / m.attn_layers * 2 * 3, 1);
  }
  EXPECT_EQ(notes, 2);

  const auto vrows = read_csv_rows(verify, &header);
  std::map<std::string, int> seen;
  for (const Row& r : vrows) {
    const std::string k = r.at("method");
    SCOPED_TRACE(k + " C " + r.at("chunk"));
    ++seen[k];
    EXPECT_GT(num(r, "latency_us_min"), 0);
    EXPECT_LE(num(r, "latency_us_min"), num(r, "latency_us_max"));
    const Precision p;
    const double bytes = num(r, "bytes_per_layer_step");
    if (k == "verify-classic" || k == "verify-classic-inplace") {
      EXPECT_NEAR(bytes, bytes_verify_classic(s, p, 2, k == "verify-classic").scale(3).total_bytes(), 1e-5 * bytes);
    } else if (k == "verify-kvbuffer") {
      // The rows' fills evolve under the protocol: the mean lies between the cheapest and dearest fill.
      const int C = std::stoi(r.at("chunk"));
      double lo = 1e300, hi = 0;
      for (int n = 0; n < C; ++n)
        for (int acc = 1; acc <= 2; ++acc) {
          const double x = bytes_verify_kvbuffer(s, p, BufferVariant::CachedU, C, 2, 2, n, acc, VerifyWindow::Scratch).total_bytes() * 3;
          lo = std::min(lo, x), hi = std::max(hi, x);
        }
      EXPECT_GE(bytes, lo * (1 - 1e-9));
      EXPECT_LE(bytes, hi * (1 + 1e-9));
    } else {
      ADD_FAILURE() << "unexpected method " << k;
    }
  }
  EXPECT_EQ(seen["verify-classic"], 1);
  EXPECT_EQ(seen["verify-classic-inplace"], 1);
  EXPECT_EQ(seen["verify-kvbuffer"], 2);  // C 2 and 4 (T = 2 <= C)
  std::ifstream log(dir / "log");
  std::stringstream ss;
  ss << log.rdbuf();
  EXPECT_NE(ss.str().find("verify/dec"), std::string::npos) << ss.str();

  // Again with the same outputs: every point is in the CSVs already, nothing is measured or added.
  const int again = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(again) && WEXITSTATUS(again) == 0) << cmd;
  EXPECT_EQ(read_csv_rows(decode, &header).size(), drows.size());
  EXPECT_EQ(read_csv_rows(verify, &header).size(), vrows.size());
  std::ifstream log2(dir / "log");
  std::stringstream ss2;
  ss2 << log2.rdbuf();
  EXPECT_NE(ss2.str().find("already in the CSVs"), std::string::npos) << ss2.str();
  EXPECT_NE(ss2.str().find("0 to run"), std::string::npos) << ss2.str();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvbuf
