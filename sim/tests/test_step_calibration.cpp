// The step terms' fit (sim/step_calibration.h): known coefficients recovered from synthetic rows,
// the held-out validation, the calibration file's step_terms, and the validation counts that
// results/README.md states recomputed from results/step_h200.csv.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <regex>
#include <sstream>

#include "sim/step_calibration.h"

namespace kvbuf {
namespace {

const std::string kStepCsv = std::string(KVBUF_RESULTS_DIR) + "/step_h200.csv";

StepTermFit known_fit() {
  StepTermFit f;
  f.fitted = true;
  f.attn_layer_us = 12, f.attn_token_us = 0.02, f.attn_us_per_byte = 1 / 3.0e3;
  f.gemm_kernel_us = 3, f.gemm_us_per_dense_byte = 1 / 4.0e3, f.gemm_us_per_expert_byte = 1 / 2.5e3,
  f.gemm_us_per_flop = 1 / 6.0e8;
  f.elementwise_kernel_us = 1.5, f.elementwise_us_per_byte = 1 / 900.0;
  return f;
}

// The measured rows' shapes with every term replaced by what `f` gives (times `noise(i)`), and the
// kvbuffer rows' speedups recomputed from the synthetic steps.
std::vector<StepProfile> synthetic_rows(const StepTermFit& f, double noise_amplitude = 0) {
  std::vector<StepProfile> rows = read_step_profiles(kStepCsv);
  for (size_t i = 0; i < rows.size(); ++i) {
    StepProfile& p = rows[i];
    const double n = 1 + noise_amplitude * ((i * 7919 % 13) / 6.0 - 1);  // deterministic, in [-a, a]
    p.measured_attention_us = n * fitted_attention_us(f, p.features);
    p.measured_gemm_us = n * fitted_gemm_us(f, p.features.gemm());
    p.measured_elementwise_us = n * fitted_elementwise_us(f, p.features);
    p.measured_linear_us = p.simulated_linear_us;
    p.measured_step_us = predict_step(f, p).total();
  }
  for (StepProfile& p : rows) {
    p.measured_speedup = 0;
    if (p.method != "kvbuffer") continue;
    for (const StepProfile& c : rows)
      if (c.method == "classic" && c.model == p.model && c.tp == p.tp && c.batch == p.batch && c.context == p.context &&
          c.state_dtype == p.state_dtype && c.drafts == p.drafts && c.routing == p.routing &&
          c.expert_gemm == p.expert_gemm)
        p.measured_speedup = c.measured_step_us / p.measured_step_us;
  }
  return rows;
}

void expect_coefficients_near(const StepTermFit& got, const StepTermFit& want, double rel) {
  auto near = [rel](auto a, auto b, const char* term) {
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], rel * b[i]) << term << " coefficient " << i;
  };
  near(attention_coefficients(got), attention_coefficients(want), "attention");
  near(gemm_coefficients(got), gemm_coefficients(want), "gemm");
  near(elementwise_coefficients(got), elementwise_coefficients(want), "elementwise");
}

TEST(StepCalibration, RecoversKnownCoefficients) {
  const StepTermFit want = known_fit();
  const std::vector<StepProfile> rows = synthetic_rows(want);
  const StepTermFit got = fit_step_terms(rows);
  EXPECT_TRUE(got.fitted);
  EXPECT_EQ(got.rows, int(rows.size()));
  for (const StepProfile& p : rows) EXPECT_NE(got.source.find(p.commit), std::string::npos) << p.commit;
  expect_coefficients_near(got, want, 1e-6);
}

TEST(StepCalibration, NoisyRowsStayNearTheCoefficientsAndFitZeroWhereUnsupported) {
  StepTermFit want = known_fit();
  want.attn_token_us = 0;  // a term the data does not need: the constrained fit must not go negative
  const StepTermFit got = fit_step_terms(synthetic_rows(want, 0.03));
  EXPECT_GE(got.attn_token_us, 0);
  EXPECT_NEAR(got.attn_us_per_byte, want.attn_us_per_byte, 0.1 * want.attn_us_per_byte);
  EXPECT_NEAR(got.gemm_us_per_dense_byte, want.gemm_us_per_dense_byte, 0.1 * want.gemm_us_per_dense_byte);
  EXPECT_NEAR(got.elementwise_kernel_us, want.elementwise_kernel_us, 0.1 * want.elementwise_kernel_us);
}

TEST(StepCalibration, HeldOutValidationOnExactRowsIsExact) {
  const std::vector<StepProfile> rows = synthetic_rows(known_fit());
  for (HoldOut by : {HoldOut::Model, HoldOut::Batch}) {
    const std::vector<ValidationRow> v = validate_held_out(rows, by);
    ASSERT_EQ(v.size(), rows.size()) << hold_out_name(by);
    int speedups = 0;
    for (const ValidationRow& r : v) {
      EXPECT_NEAR(r.step_error(), 0, 1e-6) << r.row.model << " batch " << r.row.batch;
      const std::string fold = by == HoldOut::Model ? r.row.model : std::to_string(r.row.batch);
      EXPECT_EQ(r.fold, fold);
      // The fit of a fold never saw the fold's rows.
      const long in_fold = std::count_if(rows.begin(), rows.end(), [&](const StepProfile& p) {
        return (by == HoldOut::Model ? p.model : std::to_string(p.batch)) == fold;
      });
      EXPECT_EQ(r.fit_rows, int(rows.size() - in_fold));
      if (!r.has_speedup()) continue;
      ++speedups;
      EXPECT_NEAR(r.speedup_error(), 0, 1e-6);
    }
    EXPECT_GT(speedups, 50);
  }
}

TEST(StepCalibration, HeldOutValidationSeesAMissAndNamesItsTerm) {
  std::vector<StepProfile> rows = synthetic_rows(known_fit());
  // One model's GEMMs twice as slow as the others': held out, its steps miss and the GEMM term says so.
  for (StepProfile& p : rows)
    if (p.model == "qwen3.5-4b") p.measured_step_us += p.measured_gemm_us, p.measured_gemm_us *= 2;
  int misses = 0;
  for (const ValidationRow& r : validate_held_out(rows, HoldOut::Model)) {
    if (r.row.model != "qwen3.5-4b") continue;
    // The fit from the other models predicts the step before the doubling.
    EXPECT_NEAR(r.step_error(), -(r.row.measured_gemm_us / 2) / r.row.measured_step_us, 0.01);
    EXPECT_LT(r.step_error(), -0.05);
    EXPECT_EQ(r.worst_term(), "gemm");
    ++misses;
  }
  EXPECT_GT(misses, 10);
}

TEST(StepCalibration, FittedTermsReplaceBytesOverBandwidthInTheStep) {
  StepConfig cfg;
  cfg.model = find_model("qwen3.5-35b-a3b");
  cfg.gpu = find_gpu("h200");
  const StepTerms plain = StepModel(cfg, MeasuredLinearTable()).step_uniform(64, 4096);
  EXPECT_FALSE(plain.fitted_terms);
  cfg.gpu.step_terms = known_fit();
  const StepModel m(cfg, MeasuredLinearTable());
  const std::vector<long> contexts(64, 4096);
  const StepTerms t = m.step(contexts);
  const StepFeatures x = m.features(contexts);
  EXPECT_TRUE(t.fitted_terms);
  EXPECT_DOUBLE_EQ(t.attn_kv_us, fitted_attention_us(cfg.gpu.step_terms, x));
  EXPECT_NEAR(t.projections_us + t.mlp_us + t.lm_head_us, fitted_gemm_us(cfg.gpu.step_terms, x.gemm()), 1e-9 * t.mlp_us);
  EXPECT_DOUBLE_EQ(t.overhead_us, fitted_elementwise_us(cfg.gpu.step_terms, x));
  EXPECT_DOUBLE_EQ(t.linear_attn_us, plain.linear_attn_us);
  EXPECT_GT(x.mlp.expert_bytes, 0);
}

TEST(StepCalibration, CalibrationFileCarriesTheFit) {
  Calibration c = read_calibration(std::string(KVBUF_RESULTS_DIR) + "/calibrate_h200.json");
  c.step_terms = known_fit();
  c.step_terms.source = "abc";
  c.step_terms.rows = 7;
  const std::string path = testing::TempDir() + "/calibration_step_terms.json";
  write_calibration(path, c);
  const Calibration back = read_calibration(path);
  EXPECT_TRUE(back.step_terms.fitted);
  EXPECT_EQ(back.step_terms.source, "abc");
  EXPECT_EQ(back.step_terms.rows, 7);
  expect_coefficients_near(back.step_terms, c.step_terms, 1e-12);
  EXPECT_TRUE(apply_calibration(find_gpu("h200"), back).step_terms.fitted);
  // A negative coefficient is refused with the file's name.
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = std::regex_replace(ss.str(), std::regex("\"gemm_kernel_us\": [0-9.e+-]+"), "\"gemm_kernel_us\": -1");
  ASSERT_NE(text, ss.str());
  std::ofstream(path) << text;
  EXPECT_THROW(read_calibration(path), std::invalid_argument);
}

TEST(StepCalibration, MissingColumnsAreNamed) {
  const std::string path = testing::TempDir() + "/step_missing.csv";
  std::ofstream(path) << "model,tp,batch\nqwen3.5-4b,1,8\n";
  try {
    read_step_profiles(path);
    FAIL() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("measured_gemm_us"), std::string::npos) << e.what();
  }
}

// A point the runner refused (a row with its reason, no numbers) is left out; an empty row without a
// reason is an error.
TEST(StepCalibration, SkippedRowsAreLeftOutAndEmptyRowsWithoutAReasonAreErrors) {
  std::ifstream in(kStepCsv);
  std::string header, measured;
  std::getline(in, header);
  std::getline(in, measured);
  const size_t columns = size_t(std::count(header.begin(), header.end(), ',')) + 1;
  std::vector<std::string> names;
  std::stringstream hs(header);
  for (std::string c; std::getline(hs, c, ',');) names.push_back(c);
  auto empty_row = [&](const std::string& note) {
    std::string row;
    for (size_t i = 0; i < columns; ++i) {
      const std::string& c = names[i];
      std::string v = c == "model" ? "qwen3.5-4b" : c == "tp" ? "1" : c == "batch" ? "512" : c == "context" ? "32768"
                    : c == "method" ? "classic" : c == "state_dtype" ? "fp32" : c == "note" ? note : "";
      row += (i ? "," : "") + v;
    }
    return row + "\n";
  };
  const std::string path = testing::TempDir() + "/step_skipped.csv";
  std::ofstream(path) << header << "\n" << measured << "\n" << empty_row("skipped: memory: needs 540 GiB");
  EXPECT_EQ(read_step_profiles(path).size(), 1u);
  std::ofstream(path) << header << "\n" << measured << "\n" << empty_row("");
  EXPECT_THROW(read_step_profiles(path), std::invalid_argument);
}

// results/README.md states the held-out outcome on results/step_h200.csv; the code must compute it.
TEST(StepCalibration, ReadmeCountsAreWhatTheValidationComputes) {
  std::ifstream in(std::string(KVBUF_RESULTS_DIR) + "/README.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string readme = ss.str();
  const std::regex stated(
      "held out by (model|batch): ([0-9]+) of ([0-9]+) steps within 10% \\(classic ([0-9]+) of ([0-9]+), kvbuffer "
      "([0-9]+) of ([0-9]+)\\); speedup ([0-9]+) of ([0-9]+) within 10%");
  const std::vector<StepProfile> rows = read_step_profiles(kStepCsv);
  int checked = 0;
  for (auto it = std::sregex_iterator(readme.begin(), readme.end(), stated); it != std::sregex_iterator(); ++it) {
    const std::smatch& m = *it;
    const std::vector<ValidationRow> v = validate_held_out(rows, parse_hold_out(m[1]));
    int within = 0, classic = 0, classic_n = 0, kvb = 0, kvb_n = 0, sp = 0, sp_n = 0;
    for (const ValidationRow& r : v) {
      const bool ok = std::abs(r.step_error()) <= 0.10;
      within += ok;
      (r.row.method == "classic" ? classic : kvb) += ok;
      (r.row.method == "classic" ? classic_n : kvb_n) += 1;
      if (r.has_speedup()) ++sp_n, sp += std::abs(r.speedup_error()) <= 0.10;
    }
    EXPECT_EQ(std::to_string(within), m[2].str()) << m[1];
    EXPECT_EQ(std::to_string(v.size()), m[3].str()) << m[1];
    EXPECT_EQ(std::to_string(classic), m[4].str()) << m[1];
    EXPECT_EQ(std::to_string(classic_n), m[5].str()) << m[1];
    EXPECT_EQ(std::to_string(kvb), m[6].str()) << m[1];
    EXPECT_EQ(std::to_string(kvb_n), m[7].str()) << m[1];
    EXPECT_EQ(std::to_string(sp), m[8].str()) << m[1];
    EXPECT_EQ(std::to_string(sp_n), m[9].str()) << m[1];
    ++checked;
  }
  EXPECT_EQ(checked, 2) << "results/README.md should state both held-out outcomes";
}

}  // namespace
}  // namespace kvbuf
