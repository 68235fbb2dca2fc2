// GPU test of `kvbuf capacity --measure` (ctest label gpu) at every state dtype: for a GDN and a
// Mamba-2 model at T = 4, C = 16 on the default 141 GiB (measured on a slice of at most 4 GiB), the
// CSV's measured request counts and their ratio against the capacity model's. The model counting
// what the measurement allocates (ratio_linear_allocated: the T verify-scratch entries of our
// kernels) must agree within 3% (measured_over_model; the rest is alignment and metadata); the
// measured counts stay at or below the model's without the scratch; a 16-bit state fits more
// requests than fp32 with either method, bf16 and fp16 the same number.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "sim/csv.h"

namespace kvbuf {
namespace {

namespace fs = std::filesystem;

using Row = CsvRow;

double num(const Row& r, const std::string& k) { return std::stod(r.at(k)); }

class CapacityMeasure : public testing::TestWithParam<std::string> {};

TEST_P(CapacityMeasure, EveryStateDtypeWithinThreePercentOfTheModel) {
  const std::string model = GetParam();
  const fs::path dir = fs::temp_directory_path() / ("kvbuf_capacity_measure_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path csv = dir / (model + ".csv");
  // $KVBUF_CLI overrides the build's path (a GPU bundle runs the binaries from another folder).
  const char* cli = std::getenv("KVBUF_CLI");
  const std::string cmd = std::string(cli && *cli ? cli : KVBUF_CLI_PATH) + " capacity --model " + model +
                          " --drafts 4 --chunk 16 --weights-gib 0 --state-dtype all --measure --csv " + csv.string() +
                          " > " + (dir / (model + ".log")).string() + " 2>&1";
  const int raw = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(raw) && WEXITSTATUS(raw) == 0) << cmd;
  const std::vector<Row> rows = read_csv_rows(csv);
  ASSERT_EQ(rows.size(), 3u) << cmd;
  std::map<std::string, Row> by_state;
  for (const Row& r : rows) {
    const std::string what = model + " " + r.at("state_dtype");
    by_state[r.at("state_dtype")] = r;
    EXPECT_GT(num(r, "measured_classic_max_requests"), 0) << what;
    EXPECT_GT(num(r, "measured_kvbuffer_max_requests"), 0) << what;
    EXPECT_NEAR(num(r, "measured_over_model"), 1.0, 0.03) << what;
    EXPECT_NEAR(num(r, "measured_ratio") / num(r, "ratio_linear_allocated"), num(r, "measured_over_model"), 1e-3)
        << what;
    EXPECT_LE(num(r, "measured_classic_max_requests"), num(r, "classic_max_requests_linear")) << what;
    EXPECT_LE(num(r, "measured_kvbuffer_max_requests"), num(r, "kvbuffer_max_requests_linear")) << what;
    EXPECT_FALSE(r.at("gpu").empty()) << what;
  }
  ASSERT_EQ(by_state.size(), 3u);
  for (const char* method : {"measured_classic_max_requests", "measured_kvbuffer_max_requests"}) {
    EXPECT_GT(num(by_state.at("bf16"), method), num(by_state.at("fp32"), method)) << model << " " << method;
    EXPECT_EQ(by_state.at("bf16").at(method), by_state.at("fp16").at(method)) << model << " " << method;
  }
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Families, CapacityMeasure, testing::Values("qwen3-next-80b-a3b", "nemotron-3-nano-30b-a3b"),
                         [](const testing::TestParamInfo<std::string>& i) {
                           return i.param.substr(0, i.param.find('-'));
                         });

}  // namespace
}  // namespace kvbuf
