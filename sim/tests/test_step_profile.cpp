// Operator profiles (sim/step_profile.h): interpolation in log KV tokens, log context and log batch,
// the source of each term (profile, profile-extrapolated beyond the range, parametric for a
// configuration the profile lacks), the step model taking its terms from a profile, and the validation leaving the
// checked point out (sim/step_calibration.h).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <regex>
#include <sstream>

#include "sim/step_calibration.h"
#include "sim/step_profile.h"

namespace kvbuf {
namespace {

const ProfileKey kKey{"qwen3.5-0.8b", 1, 0, "uniform", "none"};

// attention = 0.05 us per KV token, gemm = 700 us x batch^0.2, elementwise = 300 + batch us.
ProfilePoint point(int batch, long context) {
  return {kKey, batch, context, {0.05 * batch * context, 700 * std::pow(batch, 0.2), 300.0 + batch}};
}

double no_parametric(int, long) { return 0; }

TEST(StepProfile, ExactPointsAndInterpolationInLogCoordinates) {
  const StepProfileTable t({point(8, 256), point(8, 4096), point(64, 256), point(64, 4096)});
  EXPECT_EQ(t.points(), 4u);
  // A profiled point: its own value.
  TermLookup l = t.lookup(kKey, OperatorTerm::Gemm, 8, 8 * 256, no_parametric, -1);
  EXPECT_EQ(l.source, TermSource::Profile);
  EXPECT_NEAR(l.us, 700 * std::pow(8, 0.2), 1e-6);
  // Log-log interpolation is exact on a power law: gemm at batch 16 from batches 8 and 64.
  l = t.lookup(kKey, OperatorTerm::Gemm, 16, 16 * 1024, no_parametric, -1);
  EXPECT_EQ(l.source, TermSource::Profile);
  EXPECT_NEAR(l.us, 700 * std::pow(16, 0.2), 1e-6);
  // Attention follows the KV tokens: 16 x 1024 lies between 64 x 256 (16384 tokens, exact) ...
  l = t.lookup(kKey, OperatorTerm::Attention, 16, 16 * 1024, no_parametric, -1);
  EXPECT_NEAR(l.us, 0.05 * 16 * 1024, 1e-6);
  // ... and 32 x 1024 between 64 x 256 and 8 x 4096 (16384 and 32768 tokens), linear in tokens.
  l = t.lookup(kKey, OperatorTerm::Attention, 32, 32 * 1024, no_parametric, -1);
  EXPECT_EQ(l.source, TermSource::Profile);
  EXPECT_NEAR(l.us, 0.05 * 32 * 1024, 1e-6);
  // Elementwise at batch 32 between 8 and 64: log-log, so between the two values but not linear.
  l = t.lookup(kKey, OperatorTerm::Elementwise, 32, 32 * 256, no_parametric, -1);
  EXPECT_GT(l.us, 308);
  EXPECT_LT(l.us, 364);
}

TEST(StepProfile, SameCoordinateAveragedGeometrically) {
  ProfilePoint a = point(8, 256), b = point(8, 1024);
  a.us[1] = 400, b.us[1] = 900;  // the same batch: the GEMMs measured at two contexts
  const StepProfileTable t({a, b});
  EXPECT_NEAR(t.lookup(kKey, OperatorTerm::Gemm, 8, 8 * 512, no_parametric, -1).us, 600, 1e-6);
}

TEST(StepProfile, BeyondTheRange) {
  const StepProfileTable t({point(8, 256), point(64, 256)});
  // Above: the parametric growth scaled to the nearest point. Parametric gemm 2 us per request:
  // here (batch 256) 512 us, at the nearest point (64) 128 us.
  auto parametric = [](int batch, long) { return 2.0 * batch; };
  const TermLookup l = t.lookup(kKey, OperatorTerm::Gemm, 256, 256 * 256, parametric, 512);
  EXPECT_EQ(l.source, TermSource::ProfileExtrapolated);
  EXPECT_NEAR(l.us, 700 * std::pow(64, 0.2) * 512 / 128, 1e-6);
  // Below: scaled to the smallest point (batch 8).
  const TermLookup low = t.lookup(kKey, OperatorTerm::Gemm, 1, 256, parametric, 2);
  EXPECT_EQ(low.source, TermSource::ProfileExtrapolated);
  EXPECT_NEAR(low.us, 700 * std::pow(8, 0.2) * 2 / 16, 1e-6);
}

TEST(StepProfile, BetweenPointsTheParametricShapeCarriesTheCurvature) {
  // The measured gemm is 3x a parametric term that is not a power law (100 + batch): the ratio is
  // interpolated, so the prediction is exact where plain log-log interpolation would not be.
  auto parametric = [](int batch, long) { return 100.0 + batch; };
  std::vector<ProfilePoint> points;
  for (int b : {1, 64}) {
    ProfilePoint p = point(b, 256);
    p.us[1] = 3 * parametric(b, 256);
    points.push_back(p);
  }
  const StepProfileTable t(points);
  const TermLookup l = t.lookup(kKey, OperatorTerm::Gemm, 8, 8 * 256, parametric, parametric(8, 256));
  EXPECT_EQ(l.source, TermSource::Profile);
  EXPECT_NEAR(l.us, 3 * 108.0, 1e-6);
}

TEST(StepProfile, AttentionAlongTheContextAtTheRequestsOwnBatch) {
  // Batch 1 slower than the KV tokens alone say (as FlashInfer's at batch 1): where the profile
  // brackets the context at batch 1, that batch's rows; where it does not, the KV-token diagonal.
  std::vector<ProfilePoint> points = {point(1, 256), point(1, 4096), point(8, 256), point(8, 4096)};
  points[0].us[0] *= 1.5, points[1].us[0] *= 1.5;
  const StepProfileTable t(points);
  EXPECT_NEAR(t.lookup(kKey, OperatorTerm::Attention, 1, 1024, no_parametric, -1).us, 1.5 * 0.05 * 1024, 1e-6);
  EXPECT_NEAR(t.lookup(kKey, OperatorTerm::Attention, 2, 2 * 1024, no_parametric, -1).us, 0.05 * 2048, 1e-6);
}

TEST(StepProfile, AnotherConfigurationIsParametric) {
  const StepProfileTable t({point(8, 256), point(64, 256)});
  for (ProfileKey other : {ProfileKey{"qwen3.5-4b", 1, 0, "uniform", "none"},
                           ProfileKey{"qwen3.5-0.8b", 1, 4, "uniform", "none"},
                           ProfileKey{"qwen3.5-0.8b", 2, 0, "uniform", "none"}}) {
    const TermLookup l = t.lookup(other, OperatorTerm::Attention, 16, 16 * 256, no_parametric, 123);
    EXPECT_EQ(l.source, TermSource::Parametric);
    EXPECT_EQ(l.us, 123);
  }
}

TEST(StepProfile, RejectsBadPoints) {
  ProfilePoint p = point(8, 256);
  p.us[0] = -1;
  EXPECT_THROW(StepProfileTable({p}), std::invalid_argument);
  p = point(0, 256);
  EXPECT_THROW(StepProfileTable({p}), std::invalid_argument);
}

StepConfig config(const std::string& model) {
  StepConfig c;
  c.model = find_model(model);
  c.gpu = find_gpu("h200");
  c.method = DecodeMethod::Classic;
  return c;
}

TEST(StepProfile, StepModelTakesItsTermsFromTheProfileAndSaysSo) {
  const auto table = std::make_shared<const StepProfileTable>(
      std::vector<ProfilePoint>{point(8, 256), point(8, 4096), point(64, 256), point(64, 4096)});
  const StepModel with(config("qwen3.5-0.8b"), MeasuredLinearTable(), table);
  const StepModel without(config("qwen3.5-0.8b"), MeasuredLinearTable());
  const StepTerms t = with.step_uniform(32, 1024);
  const StepTerms p = without.step_uniform(32, 1024);
  EXPECT_NEAR(t.attn_kv_us, 0.05 * 32 * 1024, 1e-6);
  EXPECT_NEAR(t.projections_us + t.mlp_us + t.lm_head_us, 700 * std::pow(32, 0.2), 1e-6);
  for (TermSource s : t.operator_sources) EXPECT_EQ(s, TermSource::Profile);
  for (TermSource s : p.operator_sources) EXPECT_EQ(s, TermSource::Parametric);
  EXPECT_EQ(t.linear_attn_us, p.linear_attn_us);  // the linear term is not the profile's
  // Batch 512 lies beyond the profile: scaled; another model: parametric, as without a profile.
  EXPECT_EQ(with.step_uniform(512, 1024).operator_sources[1], TermSource::ProfileExtrapolated);
  const StepModel other(config("qwen3.5-4b"), MeasuredLinearTable(), table);
  const StepTerms o = other.step_uniform(32, 1024);
  const StepTerms o_plain = StepModel(config("qwen3.5-4b"), MeasuredLinearTable()).step_uniform(32, 1024);
  EXPECT_EQ(o.operator_sources[0], TermSource::Parametric);
  EXPECT_DOUBLE_EQ(o.total_us(), o_plain.total_us());
}

// Rows of one model on a grid with terms from point(); the whole step their sum (+ the linear term).
std::vector<StepProfile> grid_rows() {
  std::vector<StepProfile> rows;
  for (const char* method : {"classic", "kvbuffer"})
    for (int b : {1, 8, 32, 64, 128})
      for (long c : {256L, 1024L, 4096L}) {
        StepProfile r;
        r.model = "qwen3.5-0.8b", r.method = method, r.state_dtype = "fp32", r.routing = "uniform";
        r.expert_gemm = "none", r.commit = "test";
        r.batch = b, r.context = c, r.chunk = std::string(method) == "kvbuffer" ? 16 : 0;
        const ProfilePoint p = point(b, c);
        r.measured_attention_us = p.us[0], r.measured_gemm_us = p.us[1], r.measured_elementwise_us = p.us[2];
        r.measured_linear_us = r.simulated_linear_us = (std::string(method) == "kvbuffer" ? 6.0 : 10.0) * b;
        r.measured_step_us = r.measured_linear_us + p.us[0] + p.us[1] + p.us[2];
        rows.push_back(r);
      }
  for (StepProfile& r : rows)
    if (r.method == "kvbuffer")
      for (const StepProfile& c : rows)
        if (c.method == "classic" && c.batch == r.batch && c.context == r.context)
          r.measured_speedup = c.measured_step_us / r.measured_step_us;
  return rows;
}

TEST(StepProfileValidation, LeavesTheCheckedPointOut) {
  std::vector<StepProfile> rows = grid_rows();
  const GpuSpec gpu = find_gpu("h200");
  const auto v = validate_with_profiles(rows, nullptr, gpu);
  ASSERT_EQ(v.size(), rows.size());
  // An interior point (batch 32, context 1024): interpolated from its neighbours, exact on these laws.
  int interior = 0;
  for (const ProfileValidationRow& r : v)
    if (r.row.batch == 32 && r.row.context == 1024) {
      ++interior;
      EXPECT_EQ(r.profile_points, int(rows.size()) - 2);  // both methods' rows of the point left out
      EXPECT_NEAR(r.step_error(), 0, 1e-6);
      for (TermSource s : r.sources) EXPECT_EQ(s, TermSource::Profile);
      if (r.row.method == "kvbuffer") EXPECT_NEAR(r.speedup_error(), 0, 1e-6);
    }
  EXPECT_EQ(interior, 2);
  // The checked point's own terms do not enter its prediction (it is not in its profile); a
  // neighbour's do.
  auto predicted_at_32_1024 = [&](const std::vector<StepProfile>& rs) {
    for (const ProfileValidationRow& r : validate_with_profiles(rs, nullptr, gpu))
      if (r.row.batch == 32 && r.row.context == 1024 && r.row.method == "classic") return r.total();
    return 0.0;
  };
  const double before = predicted_at_32_1024(rows);
  for (StepProfile& r : rows)
    if (r.batch == 32 && r.context == 1024) r.measured_attention_us *= 3, r.measured_gemm_us *= 3;
  EXPECT_DOUBLE_EQ(predicted_at_32_1024(rows), before);
  for (StepProfile& r : rows)
    if (r.batch == 32 && r.context == 256) r.measured_gemm_us *= 3;
  EXPECT_GT(predicted_at_32_1024(rows), before * 1.1);
}

TEST(StepProfileValidation, SeparateRunAtTheSameShapesAndADroppedTermFails) {
  const std::vector<StepProfile> rows = grid_rows();
  const GpuSpec gpu = find_gpu("h200");
  std::vector<StepProfile> terms_only = rows;
  for (StepProfile& r : terms_only) r.measured_step_us = 0, r.measured_speedup = 0;
  for (const ProfileValidationRow& r : validate_with_profiles(rows, &terms_only, gpu)) {
    EXPECT_EQ(r.profile, "separate-run");
    EXPECT_NEAR(r.step_error(), 0, 1e-6);
  }
  // The profile without its GEMMs (zeroed): the prediction misses.
  for (StepProfile& r : terms_only) r.measured_gemm_us = 0;
  int missed = 0;
  for (const ProfileValidationRow& r : validate_with_profiles(rows, &terms_only, gpu)) {
    missed += std::abs(r.step_error()) > 0.10;
    EXPECT_EQ(r.worst_term(), "gemm");
  }
  EXPECT_GT(missed, 0);
}

// results/README.md states the leave-point-out outcome on results/step_h200.csv; the code must compute it.
TEST(StepProfileValidation, ReadmeCountsAreWhatTheValidationComputes) {
  std::ifstream in(std::string(KVBUF_RESULTS_DIR) + "/README.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string readme = ss.str();
  const std::regex stated(
      "leave-point-out profiles: ([0-9]+) of ([0-9]+) steps within 10% \\(classic ([0-9]+) of ([0-9]+), kvbuffer "
      "([0-9]+) of ([0-9]+)\\); speedup ([0-9]+) of ([0-9]+) within 10%");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(readme, m, stated)) << "results/README.md should state the leave-point-out outcome";
  const auto v = validate_with_profiles(read_step_profiles(std::string(KVBUF_RESULTS_DIR) + "/step_h200.csv"),
                                        nullptr, find_gpu("h200"));
  int within = 0, classic = 0, classic_n = 0, kvb = 0, kvb_n = 0, sp = 0, sp_n = 0;
  for (const ProfileValidationRow& r : v) {
    const bool ok = std::abs(r.step_error()) <= 0.10;
    within += ok;
    (r.row.method == "classic" ? classic : kvb) += ok;
    (r.row.method == "classic" ? classic_n : kvb_n) += 1;
    if (r.has_speedup()) ++sp_n, sp += std::abs(r.speedup_error()) <= 0.10;
  }
  const std::vector<int> computed = {within, int(v.size()), classic, classic_n, kvb, kvb_n, sp, sp_n};
  for (size_t i = 0; i < computed.size(); ++i) EXPECT_EQ(std::to_string(computed[i]), m[i + 1].str()) << i;
}

}  // namespace
}  // namespace kvbuf
