// Runs the built `kvbuf simulate` and `kvbuf step`: a summary and a timeline CSV for good input,
// exit 2 with a message for every bad input (unknown GPU or model, rate <= 0, empty or malformed
// traces with their line numbers, a model that does not fit).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "sim/csv.h"

namespace {

namespace fs = std::filesystem;

struct SimRun {
  int status = -1;
  std::string out, err;
};

fs::path scratch() {
  const fs::path dir = fs::temp_directory_path() / ("kvbuf_simulate_tests_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  return dir;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

fs::path write(const std::string& name, const std::string& text) {
  const fs::path p = scratch() / name;
  std::ofstream(p) << text;
  return p;
}

SimRun kvbuf(const std::string& args) {
  static int counter = 0;
  const fs::path out = scratch() / ("out" + std::to_string(counter));
  const fs::path err = scratch() / ("err" + std::to_string(counter++));
  const std::string cmd = std::string(KVBUF_CLI_PATH) + " " + args + " >" + out.string() + " 2>" + err.string();
  const int raw = std::system(cmd.c_str());
  SimRun r;
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

void expect_usage_error(const std::string& args, const std::string& part) {
  const SimRun r = kvbuf(args);
  EXPECT_EQ(r.status, 2) << "kvbuf " << args << "\n" << r.out << r.err;
  EXPECT_NE(r.err.find(part), std::string::npos) << "kvbuf " << args << ": stderr lacks '" << part << "':\n" << r.err;
}

const std::string kModel = "--model qwen3-next-80b-a3b --tp 2 ";

TEST(KvbufSimulate, PoissonSummaryAndTimeline) {
  const fs::path csv = scratch() / "timeline.csv";
  const SimRun r = kvbuf("simulate " + kModel + "--method kvbuffer --rate 20 --duration 3 --seed 4 --csv " + csv.string());
  ASSERT_EQ(r.status, 0) << r.err;
  for (const char* part : {"throughput:", "TTFT", "TPOT", "concurrency:", "linear attention", "measured"})
    EXPECT_NE(r.out.find(part), std::string::npos) << part << "\n" << r.out;
  const std::string text = slurp(csv);
  EXPECT_EQ(text.rfind("time_s,step_us,prefill_us,running,waiting,tokens,memory_bytes", 0), 0u);
  EXPECT_GT(std::count(text.begin(), text.end(), '\n'), 10);
  EXPECT_NE(text.find(",acceptance,state_dtype\n"), std::string::npos);
  EXPECT_NE(text.find(",fp32\n"), std::string::npos);
  // The timeline names its state dtype.
  const fs::path csv16 = scratch() / "timeline16.csv";
  ASSERT_EQ(kvbuf("simulate " + kModel + "--method kvbuffer --rate 20 --duration 3 --seed 4 --state-dtype bf16 --csv " +
                  csv16.string()).status, 0);
  const std::string text16 = slurp(csv16);
  EXPECT_EQ(text16.find(",fp32\n"), std::string::npos);
  EXPECT_NE(text16.find(",bf16\n"), std::string::npos);
  // Deterministic: the same seed prints the same summary.
  EXPECT_EQ(kvbuf("simulate " + kModel + "--method kvbuffer --rate 20 --duration 3 --seed 4").out,
            r.out.substr(0, r.out.find("wrote")));
}

TEST(KvbufSimulate, SparseTimelineKeepsEveryToken) {
  const fs::path every = scratch() / "every.csv", sparse = scratch() / "sparse.csv";
  const std::string run = "simulate " + kModel + "--method classic --rate 20 --duration 3 --seed 2 --csv ";
  ASSERT_EQ(kvbuf(run + every.string()).status, 0);
  ASSERT_EQ(kvbuf(run + sparse.string() + " --timeline-every-s 0.5").status, 0);
  auto rows_and_tokens = [](const fs::path& p) {
    std::ifstream in(p);
    std::string line;
    std::getline(in, line);
    long rows = 0, tokens = 0;
    while (std::getline(in, line)) {
      std::stringstream ss(line);
      std::string f;
      for (int i = 0; i < 6; ++i) std::getline(ss, f, ',');
      tokens += std::stol(f);
      ++rows;
    }
    return std::make_pair(rows, tokens);
  };
  const auto a = rows_and_tokens(every), b = rows_and_tokens(sparse);
  EXPECT_EQ(a.second, b.second);
  EXPECT_LT(b.first * 5, a.first);
  expect_usage_error(run + sparse.string() + " --timeline-every-s -1", "--timeline-every-s");
}

TEST(KvbufSimulate, TraceWithSpeculativeDecoding) {
  const fs::path trace = write("trace.csv", "arrival_s,prompt_tokens,output_tokens\n0,100,20\n0.01,200,30\n");
  const SimRun r = kvbuf("simulate " + kModel + "--method classic --drafts 4 --accept-rate 0.8 --trace " + trace.string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("2 requests"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("50 tokens"), std::string::npos) << r.out;
}

TEST(KvbufSimulate, BadInputExitsTwo) {
  const std::string run = "simulate " + kModel + "--method kvbuffer ";
  expect_usage_error(run + "--rate 1 --duration 1 --gpu a100", "--gpu: a100 not in");
  expect_usage_error("simulate --model nope --method kvbuffer --rate 1 --duration 1", "unknown model 'nope'");
  expect_usage_error(run + "--rate 0 --duration 1", "--rate: must be a positive finite number, got 0");
  expect_usage_error(run + "--rate -3 --duration 1", "--rate");
  expect_usage_error(run + "--rate 1", "--rate needs --duration");
  expect_usage_error(run, "give either --rate R --duration S or --trace FILE");
  expect_usage_error("simulate " + kModel + "--method fast --rate 1 --duration 1", "--method: fast not in");
  expect_usage_error(run + "--rate 1 --duration 1 --drafts 17", "exceeds buffer capacity");
  expect_usage_error(run + "--rate 1 --duration 1 --accept-rate 1.5", "--accept-rate");
  expect_usage_error(run + "--trace " + write("empty.csv", "arrival_s,prompt_tokens,output_tokens\n").string(),
                     "has no requests");
  expect_usage_error(run + "--trace " + write("bad.csv", "arrival_s,prompt_tokens,output_tokens\n0,5,5\n0,5,x\n").string(),
                     "bad.csv:3: output_tokens is not a number");
  expect_usage_error(run + "--trace /nonexistent/trace.csv", "cannot read trace");
  expect_usage_error("simulate --model qwen3.5-397b-a17b --method kvbuffer --rate 1 --duration 1", "does not fit");
  expect_usage_error(run + "--rate 1 --duration 1 --results /nonexistent", "--results");
  expect_usage_error(run + "--rate 1 --duration 1 --calibration /nonexistent.json", "--calibration");
#ifndef KVBUF_WITH_CUDA
  expect_usage_error("calibrate --out x.json", "kvbuf calibrate requires a CUDA build");
#endif
}

TEST(KvbufStep, TermsPerBatchAndHeldOut) {
  const fs::path no_tables = scratch() / "no_tables";
  fs::create_directories(no_tables);
  const SimRun r = kvbuf("step --model nemotron-3-nano-30b-a3b --batch 1,64 --context 2048 --results " +
                         no_tables.string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("modelled"), std::string::npos);  // no measured table in that directory
  const SimRun h = kvbuf("step --held-out");
  ASSERT_EQ(h.status, 0) << h.err;
  EXPECT_NE(h.out.find("largest error"), std::string::npos);
  expect_usage_error("step --model qwen3.5-9b --batch 0", "--batch: must be a positive integer, got 0");
  expect_usage_error("step --batch 8", "--model is required");
  expect_usage_error("step --model qwen3.5-9b --state-dtype fp8", "--state-dtype: fp8 not in");
  // A bf16 state: the committed 16-bit tables, measured, and the header says which state.
  const SimRun b = kvbuf("step --model qwen3-next-80b-a3b --tp 2 --batch 256 --context 4096 --state-dtype bf16");
  ASSERT_EQ(b.status, 0) << b.err;
  EXPECT_NE(b.out.find("bf16 states"), std::string::npos) << b.out;
  EXPECT_NE(b.out.find("measured"), std::string::npos) << b.out;
}

// `step --measure`'s arguments are checked before any device is touched: every bad one exits 2.
TEST(KvbufStep, MeasureArgumentsAreValidated) {
  expect_usage_error("step --measure --model qwen3.5-0.8b --method fast", "--method: fast not in");
  expect_usage_error("step --measure --model qwen3.5-0.8b --routing zipf", "--routing: zipf not in");
  expect_usage_error("step --measure --model qwen3.5-0.8b --expert-gemm cutlass", "--expert-gemm: cutlass not in");
  expect_usage_error("step --measure --model qwen3.5-0.8b --budget-s 0", "--budget-s");
  expect_usage_error("step --measure --model qwen3.5-0.8b --context 0", "--context: must be a positive integer, got 0");
  expect_usage_error("step --model qwen3.5-0.8b --out x.csv", "--out goes with --measure");
#ifdef KVBUF_WITH_STEP_RUNNER
  expect_usage_error("step --measure --model qwen3.5-0.8b --drafts 9 --chunk 16", "--drafts at most 8");
  expect_usage_error("step --measure --model qwen3.5-0.8b --drafts 8 --chunk 4", "exceeds buffer capacity");
  expect_usage_error("step --measure --model nemotron-3-super-120b-a12b", "latent MoE");
  expect_usage_error("step --measure --model qwen3.5-4b --tp 3", "not divisible by --tp 3");
#else
  expect_usage_error("step --measure --model qwen3.5-0.8b", "requires a CUDA build");
#endif
}

TEST(KvbufStep, CalibrationFromTheResultsDirectoryUnlessNone) {
  const fs::path dir = scratch() / "calibrated";
  fs::create_directories(dir);
  std::ofstream(dir / "calibrate_h200.json")
      << R"({"gpu": "test H200", "commit": "abc123", "copy_gbps": 4000, "kernel_overhead_us": 1.5,)"
      << R"( "gemm_n": 4096, "gemm_k": 4096, "gemm": [{"m": 1, "tflops": 4}, {"m": 512, "tflops": 600}]})";
  const std::string step = "step --model qwen3.5-9b --batch 1 --results " + dir.string();
  const SimRun automatic = kvbuf(step);
  ASSERT_EQ(automatic.status, 0) << automatic.err;
  EXPECT_NE(automatic.out.find("kernel overhead 1.5 us (calibrated)"), std::string::npos) << automatic.out;
  EXPECT_NE(automatic.out.find("calibrated on test H200 (commit abc123)"), std::string::npos) << automatic.out;
  const SimRun none = kvbuf(step + " --calibration none");
  ASSERT_EQ(none.status, 0) << none.err;
  EXPECT_NE(none.out.find("(assumed)"), std::string::npos) << none.out;
  const SimRun other_gpu = kvbuf("step --model qwen3.5-9b --batch 1 --gpu h100-sxm --results " + dir.string());
  ASSERT_EQ(other_gpu.status, 0) << other_gpu.err;
  EXPECT_EQ(other_gpu.out.find("calibrated on"), std::string::npos) << other_gpu.out;  // the H200's file only
  const SimRun unknown_gpu = kvbuf("step --model qwen3.5-9b --batch 1 --gpu a100 --results " + dir.string());
  EXPECT_EQ(unknown_gpu.status, 2);
  EXPECT_NE(unknown_gpu.err.find("a100-40gb"), std::string::npos) << unknown_gpu.err;  // the choices are named
}

}  // namespace

namespace {

const std::string kStepCsv = std::string(KVBUF_RESULTS_DIR) + "/step_h200.csv";

// The rows of the step CSV with a measured whole step (a point refused for memory has none).
int measured_step_rows() {
  const std::vector<kvbuf::CsvRow> rows = kvbuf::read_csv_rows(kStepCsv);
  return int(std::count_if(rows.begin(), rows.end(),
                           [](const kvbuf::CsvRow& r) { return !r.at("measured_step_us").empty(); }));
}
const std::string kCalibration = std::string(KVBUF_RESULTS_DIR) + "/calibrate_h200.json";

TEST(KvbufCalibrateStep, FitsIntoTheCalibrationAndStepUsesIt) {
  const fs::path out = scratch() / "calibration_fitted.json";
  const SimRun r = kvbuf("calibrate-step --step-csv " + kStepCsv + " --calibration " + kCalibration + " --out " +
                         out.string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("fitted to " + std::to_string(measured_step_rows()) + " measured rows"), std::string::npos) << r.out;
  EXPECT_NE(slurp(out).find("\"step_terms\""), std::string::npos);
  const SimRun fitted = kvbuf("step --model qwen3.5-4b --batch 8 --calibration " + out.string());
  ASSERT_EQ(fitted.status, 0) << fitted.err;
  EXPECT_NE(fitted.out.find("fitted to " + std::to_string(measured_step_rows()) + " measured step profiles"),
            std::string::npos)
      << fitted.out;
  const SimRun plain = kvbuf("step --model qwen3.5-4b --batch 8 --calibration none");
  ASSERT_EQ(plain.status, 0) << plain.err;
  EXPECT_NE(plain.out.find("bytes over bandwidth"), std::string::npos) << plain.out;
}

TEST(KvbufCalibrateStep, HoldOutWritesOneRowPerMeasuredRow) {
  const fs::path csv = scratch() / "validation.csv";
  const SimRun r = kvbuf("calibrate-step --step-csv " + kStepCsv + " --holdout batch --validation-csv " + csv.string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("step within 10%:"), std::string::npos) << r.out;
  const std::string text = slurp(csv);
  EXPECT_EQ(text.rfind("holdout,fold,fit_rows,model,", 0), 0u);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), measured_step_rows() + 1);
  EXPECT_NE(text.find(",0243fd4d09dd\n"), std::string::npos);
}

TEST(KvbufCalibrateStep, BadInputExitsTwo) {
  const fs::path missing = write("step_missing.csv", "model,tp,batch,context\nqwen3.5-4b,1,8,256\n");
  expect_usage_error("calibrate-step --step-csv " + missing.string() + " --holdout model", "measured_step_us");
  expect_usage_error("calibrate-step --step-csv /nonexistent/step.csv --holdout model", "--step-csv");
  expect_usage_error("calibrate-step --step-csv " + kStepCsv + " --holdout context", "--holdout");
  expect_usage_error("calibrate-step --step-csv " + kStepCsv, "--calibration");
  std::string text = slurp(kStepCsv);
  const fs::path bad_model = write("step_bad_model.csv", text.substr(0, text.find('\n') + 1) + "nosuch" +
                                                             text.substr(text.find('\n') + 1).substr(
                                                                 text.substr(text.find('\n') + 1).find(',')));
  expect_usage_error("calibrate-step --step-csv " + bad_model.string() + " --holdout model", "line 2");
  const fs::path few = write("step_few.csv", text.substr(0, text.find('\n') + 1));
  expect_usage_error("calibrate-step --step-csv " + few.string() + " --holdout model", "at least");
}

// A copy of the step CSV with one column's values replaced.
fs::path with_column(const std::string& name, const std::string& column, const std::string& value) {
  std::istringstream in(slurp(kStepCsv));
  std::string line, out;
  int index = -1;
  while (std::getline(in, line)) {
    std::vector<std::string> fields;
    std::stringstream ls(line);
    for (std::string f; std::getline(ls, f, ',');) fields.push_back(f);
    if (index < 0) {
      index = int(std::find(fields.begin(), fields.end(), column) - fields.begin());
    } else if (index < int(fields.size())) {
      fields[index] = value;
    }
    for (size_t i = 0; i < fields.size(); ++i) out += (i ? "," : "") + fields[i];
    out += line.back() == ',' ? ",\n" : "\n";
  }
  return write(name, out);
}

TEST(KvbufValidateStep, LeavePointOutAndSeparateRun) {
  const fs::path csv = scratch() / "profile_validation.csv";
  const SimRun r = kvbuf("validate-step --step-csv " + kStepCsv + " --out " + csv.string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("profile leave-point-out"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("speedup within 10%:"), std::string::npos) << r.out;
  const std::string text = slurp(csv);
  EXPECT_EQ(text.rfind("profile,profile_points,model,", 0), 0u);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), measured_step_rows() + 1);
  // The CSV's own terms as a separate run: each step is its terms' sum, within 12% everywhere.
  const SimRun same = kvbuf("validate-step --step-csv " + kStepCsv + " --profile " + kStepCsv + " --require-within 0.12");
  EXPECT_EQ(same.status, 0) << same.out << same.err;
  EXPECT_NE(same.out.find("profile separate-run"), std::string::npos) << same.out;
  // Without the GEMM term the same check fails.
  const fs::path no_gemm = with_column("step_no_gemm.csv", "measured_gemm_us", "0");
  const SimRun dropped =
      kvbuf("validate-step --step-csv " + kStepCsv + " --profile " + no_gemm.string() + " --require-within 0.12");
  EXPECT_EQ(dropped.status, 1) << dropped.out << dropped.err;
  EXPECT_NE(dropped.out.find("FAILED"), std::string::npos) << dropped.out;
}

TEST(KvbufValidateStep, BadInputExitsTwo) {
  expect_usage_error("validate-step --step-csv /nonexistent/step.csv", "--step-csv");
  expect_usage_error("validate-step --step-csv " + kStepCsv + " --profile /nonexistent/terms.csv", "--profile");
  const fs::path terms_only = with_column("step_terms_only.csv", "measured_step_us", "");
  expect_usage_error("validate-step --step-csv " + terms_only.string(), "no row with a measured whole step");
  const fs::path negative = with_column("step_negative.csv", "measured_attention_us", "-1");
  expect_usage_error("validate-step --step-csv " + kStepCsv + " --profile " + negative.string(), "negative");
}

TEST(KvbufStep, ProfileTermsAndTheirSources) {
  const fs::path csv = scratch() / "step_profiled.csv";
  const SimRun r = kvbuf("step --model qwen3.5-0.8b --batch 8,64,1024 --context 1024 --profile " + kStepCsv +
                         " --csv " + csv.string());
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("profile " + kStepCsv), std::string::npos) << r.out;
  const std::string text = slurp(csv);
  EXPECT_NE(text.find(",profile,profile,profile,"), std::string::npos) << text;  // batch 8 and 64
  EXPECT_NE(text.find(",profile,profile-extrapolated,profile-extrapolated,"), std::string::npos) << text;  // 1024
  // T = 2 was not profiled: parametric, and tokens per second at E[m] = 1 + 0.7.
  const SimRun t2 = kvbuf("step --model qwen3.5-0.8b --batch 8 --context 1024 --drafts 2 --acceptance 0.7 --profile " +
                          kStepCsv + " --csv " + csv.string());
  ASSERT_EQ(t2.status, 0) << t2.err;
  EXPECT_NE(t2.out.find("E[m] = 1.700"), std::string::npos) << t2.out;
  EXPECT_NE(slurp(csv).find(",parametric,parametric,parametric,1.7000,"), std::string::npos) << slurp(csv);
  expect_usage_error("step --model qwen3.5-0.8b --batch 8 --profile /nonexistent/terms.csv", "--profile");
  expect_usage_error("step --model qwen3.5-0.8b --batch 8 --terms-only", "--terms-only");
}

// The committed profile is the default (auto: <results>/step_<gpu>.csv); none gives the parametric terms;
// a GPU without a step CSV of its own falls back to the parametric terms.
TEST(KvbufStep, ProfileAutoIsTheDefault) {
  const fs::path csv = scratch() / "step_default.csv";
  const SimRun by_default = kvbuf("step --model qwen3.5-0.8b --batch 64 --context 1024 --csv " + csv.string());
  ASSERT_EQ(by_default.status, 0) << by_default.err;
  EXPECT_NE(by_default.out.find("profile " + kStepCsv), std::string::npos) << by_default.out;
  EXPECT_NE(slurp(csv).find(",profile,profile,profile,"), std::string::npos) << slurp(csv);
  const SimRun none = kvbuf("step --model qwen3.5-0.8b --batch 64 --context 1024 --profile none --csv " + csv.string());
  ASSERT_EQ(none.status, 0) << none.err;
  EXPECT_EQ(none.out.find("profile " + kStepCsv), std::string::npos) << none.out;
  EXPECT_NE(slurp(csv).find(",parametric,parametric,parametric,"), std::string::npos) << slurp(csv);
  const SimRun other_gpu = kvbuf("step --model qwen3.5-0.8b --gpu a100-80gb --batch 64 --context 1024 --csv " + csv.string());
  ASSERT_EQ(other_gpu.status, 0) << other_gpu.err;
  EXPECT_NE(slurp(csv).find(",parametric,parametric,parametric,"), std::string::npos) << slurp(csv);
}

}  // namespace
