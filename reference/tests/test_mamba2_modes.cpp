// Mamba-2 reference: every decode/prefill mode against the float64 recurrence, outputs and final
// state, float64 (1e-12) and float32 (mamba2_f32_tolerance), over head dims (N, P) in
// {(16,8), (64,32), (128,64)}, group ratios 1 and 2+, C in {1,2,3,8,16,64}, chunks 16/32/64,
// lengths {1,3,17,63,65,130}; extreme and mixed decays; the buffer's invariants step by step; and
// a 10,000-step float32 drift.
#include <gtest/gtest.h>

#include <cstdio>
#include <limits>

#include "reference/tests/test_mamba2_util.h"

namespace kvbuf::ref {
namespace {

using namespace test_mamba2;

const int kLengths[] = {1, 3, 17, 63, 65, 130};
const int kCapacities[] = {1, 2, 3, 8, 16, 64};
const int kChunks[] = {16, 32, 64};

template <class T>
void check_all_modes(const Inputs& in, const Truth& truth, const Truth& truth_from_zero) {
  const Mamba2Tokens<T>& x = tokens<T>(in);
  for (int chunk : kChunks) {
    Mamba2State<T> s = state0<T>(in);
    std::vector<T> y;
    mamba2_prefill_chunk(x, chunk, s, y);
    expect_matches(y, s, truth, chunk, "prefill chunk=" + std::to_string(chunk));
  }
  for (int cap : kCapacities) {
    Mamba2State<T> s = state0<T>(in);
    std::vector<T> y;
    mamba2_decode_kvbuffer(x, cap, s, y);
    expect_matches(y, s, truth, cap, "kvbuffer C=" + std::to_string(cap));

    Mamba2State<T> sd = state0<T>(in);  // ignored by direct mode: it starts from no state
    std::vector<T> yd;
    const bool overflowed = mamba2_decode_direct(x, cap, sd, yd);
    expect_matches(yd, sd, truth_from_zero, cap, "direct C=" + std::to_string(cap));
    EXPECT_EQ(overflowed, x.steps >= cap) << "direct C=" << cap << ", " << x.steps << " tokens";
  }
}

struct DimsCase {
  Mamba2Dims d;
};
void PrintTo(const DimsCase& c, std::ostream* os) { *os << dims_str(c.d); }

class Mamba2Modes : public ::testing::TestWithParam<DimsCase> {};

TEST_P(Mamba2Modes, EveryModeMatchesRecurrentOverLengthsChunksAndCapacities) {
  const Mamba2Dims d = GetParam().d;
  uint64_t seed = 1000 + d.N * 7 + d.NH * 3 + d.G;
  for (int steps : kLengths) {
    const Inputs in = make_inputs(d, steps, seed++);
    const Truth truth = recurrent_truth(in.x, in.s0);
    const Truth truth_from_zero = recurrent_truth(in.x, mamba2_zero_state<double>(d));
    check_all_modes<double>(in, truth, truth_from_zero);
    check_all_modes<float>(in, truth, truth_from_zero);
  }
}

INSTANTIATE_TEST_SUITE_P(
    HeadDimsAndGroupRatios, Mamba2Modes,
    ::testing::Values(DimsCase{{2, 2, 16, 8}}, DimsCase{{2, 4, 16, 8}},     // ratio 1, 2
                      DimsCase{{2, 2, 64, 32}}, DimsCase{{1, 3, 64, 32}},   // ratio 1, 3
                      DimsCase{{1, 1, 128, 64}}, DimsCase{{1, 2, 128, 64}}  // ratio 1, 2
                      ),
    [](const ::testing::TestParamInfo<DimsCase>& param_info) {
      const auto& d = param_info.param.d;
      return "G" + std::to_string(d.G) + "_NH" + std::to_string(d.NH) + "_N" + std::to_string(d.N) +
             "_P" + std::to_string(d.P);
    });

// The random inputs keep their promises: ranges, determinism, float tokens = rounded double tokens,
// and the bf16 rounding gives bf16-representable x, B, C (within 2^-8 relative) and fp32 dt, A, D.
TEST(Mamba2Inputs, RandomTokensAndBf16Rounding) {
  const Mamba2Dims d{2, 4, 16, 8};
  const Mamba2DecayRange range = Mamba2DecayRange::extreme();
  std::mt19937_64 rng_a(7), rng_b(7);
  const auto xd = make_random_mamba2_tokens<double>(d, 40, rng_a, range);
  const auto xf = make_random_mamba2_tokens<float>(d, 40, rng_b, range);
  for (size_t i = 0; i < xd.x.size(); ++i) ASSERT_EQ(xf.x[i], float(xd.x[i]));
  for (size_t i = 0; i < xd.C.size(); ++i) ASSERT_EQ(xf.C[i], float(xd.C[i]));
  for (double dt : xd.dt) ASSERT_TRUE(dt >= range.dt_min && dt <= range.dt_max) << dt;
  for (double A : xd.A) ASSERT_TRUE(A >= range.A_min && A <= range.A_max) << A;
  std::mt19937_64 rng_c(7);
  EXPECT_EQ(make_random_mamba2_tokens<double>(d, 40, rng_c, range).B, xd.B) << "not deterministic";

  const auto r = round_mamba2_tokens_to_bf16(xd);
  for (auto [rounded, orig] :
       {std::pair{&r.x, &xd.x}, std::pair{&r.B, &xd.B}, std::pair{&r.C, &xd.C}})
    for (size_t i = 0; i < orig->size(); ++i) {
      const double v = (*rounded)[i], o = (*orig)[i];
      ASSERT_EQ(v, round_to_bf16(v)) << "not bf16-representable";
      ASSERT_LE(std::abs(v - o), std::ldexp(std::abs(o), -8)) << o << " -> " << v;
    }
  for (auto [rounded, orig] :
       {std::pair{&r.dt, &xd.dt}, std::pair{&r.A, &xd.A}, std::pair{&r.D, &xd.D}})
    for (size_t i = 0; i < orig->size(); ++i) ASSERT_EQ((*rounded)[i], double(float((*orig)[i])));
}

// The recurrent float32 run itself, against the float64 recurrence.
TEST(Mamba2Recurrent, Float32MatchesFloat64) {
  for (int steps : kLengths) {
    const Inputs in = make_inputs({2, 4, 64, 32}, steps, 77 + steps);
    const Truth truth = recurrent_truth(in.x, in.s0);
    Mamba2State<float> s = in.s32;
    std::vector<float> y;
    mamba2_decode_recurrent(in.x32, s, y);
    expect_matches(y, s, truth, 1, "recurrent");
  }
}

// A hand-computed case: one head, N = P = 1, so y = S C + D x is scalar arithmetic.
TEST(Mamba2Recurrent, ScalarCaseByHand) {
  Mamba2Tokens<double> x{{1, 1, 1, 1}, 2,          {2.0, -1.0}, {0.5, 3.0},
                         {4.0, 0.25},  {0.1, 0.2}, {-2.0},      {0.5}};
  Mamba2State<double> s = {Mat<double>::Constant(1, 1, 1.5)};
  std::vector<double> y;
  mamba2_decode_recurrent(x, s, y);
  const double s1 = std::exp(0.1 * -2.0) * 1.5 + 0.1 * 2.0 * 0.5;
  const double y1 = s1 * 4.0 + 0.5 * 2.0;
  const double s2 = std::exp(0.2 * -2.0) * s1 + 0.2 * -1.0 * 3.0;
  const double y2 = s2 * 0.25 + 0.5 * -1.0;
  ASSERT_EQ(y.size(), 2u);
  EXPECT_NEAR(y[0], y1, 1e-15);
  EXPECT_NEAR(y[1], y2, 1e-15);
  EXPECT_NEAR(s[0](0, 0), s2, 1e-15);
}

// The recurrence written as plain loops over the flat arrays, independent of the Eigen code: checks
// the layouts ([T, NH, P], [T, G, N]), S as P x N, and that head h reads group h / (NH / G).
TEST(Mamba2Recurrent, MatchesPlainLoopsOverTheFlatLayout) {
  for (Mamba2Dims d : {Mamba2Dims{2, 4, 16, 8}, Mamba2Dims{1, 3, 5, 7}, Mamba2Dims{3, 6, 4, 9}}) {
    const Inputs in = make_inputs(d, 20, 321 + d.N);
    const auto& x = in.x;
    std::vector<double> S(size_t(d.NH) * d.P * d.N);  // [NH, P, N]
    for (int h = 0; h < d.NH; ++h)
      for (int p = 0; p < d.P; ++p)
        for (int n = 0; n < d.N; ++n) S[(size_t(h) * d.P + p) * d.N + n] = in.s0[h](p, n);
    std::vector<double> y_loops(size_t(x.steps) * d.NH * d.P);
    for (int t = 0; t < x.steps; ++t)
      for (int h = 0; h < d.NH; ++h) {
        const int g = h / (d.NH / d.G);
        const double dt = x.dt[t * d.NH + h], decay = std::exp(dt * x.A[h]);
        for (int p = 0; p < d.P; ++p) {
          const double xp = x.x[(t * d.NH + h) * d.P + p];
          double acc = 0;
          for (int n = 0; n < d.N; ++n) {
            double& s = S[(size_t(h) * d.P + p) * d.N + n];
            s = decay * s + dt * xp * x.B[(t * d.G + g) * d.N + n];
            acc += s * x.C[(t * d.G + g) * d.N + n];
          }
          y_loops[(t * d.NH + h) * d.P + p] = acc + x.D[h] * xp;
        }
      }
    const Truth truth = recurrent_truth(x, in.s0);
    EXPECT_LE(max_rel_err(truth.y, y_loops), kF64Tol) << dims_str(d);
    std::vector<double> S_truth;
    for (int h = 0; h < d.NH; ++h)
      for (int p = 0; p < d.P; ++p)
        for (int n = 0; n < d.N; ++n) S_truth.push_back(truth.state[h](p, n));
    EXPECT_LE(max_rel_err(S_truth, S), kF64Tol) << dims_str(d);
  }
}

// Per-token decay dt A <= -60: exp(G) underflows; every mode stays finite and exact.
TEST(Mamba2Modes, ExtremeDecayUnderflowsInsteadOfOverflowing) {
  const Mamba2Dims d{1, 2, 64, 32};
  for (int steps : {17, 130}) {
    const Inputs in = make_inputs(d, steps, 4242 + steps, Mamba2DecayRange::extreme());
    for (int t = 0; t < steps; ++t)
      for (int h = 0; h < d.NH; ++h) ASSERT_LE(in.x.dt[t * d.NH + h] * in.x.A[h], -60.0);
    const Truth truth = recurrent_truth(in.x, in.s0);
    const Truth truth_from_zero = recurrent_truth(in.x, mamba2_zero_state<double>(d));
    ASSERT_TRUE(all_finite(truth.y));
    check_all_modes<double>(in, truth, truth_from_zero);
    check_all_modes<float>(in, truth, truth_from_zero);
    std::vector<float> y;
    Mamba2State<float> s = in.s32;
    mamba2_decode_kvbuffer(in.x32, 64, s, y);
    EXPECT_TRUE(all_finite(y));
    EXPECT_TRUE(all_finite(flat(s)));
  }
}

// Strong decays then long memory: G reaches about -64 in the first 16 tokens, then barely moves,
// so exp(G_t - G_j) comes from differences of large running sums (the float32 weak spot).
TEST(Mamba2Modes, MixedDecaysAcrossTheBuffer) {
  const Mamba2Dims d{2, 4, 64, 32};
  std::mt19937_64 rng(99);
  const auto strong = make_random_mamba2_tokens<float>(d, 16, rng, {1.0, 2.0, -4.0, -2.0});
  auto mild = make_random_mamba2_tokens<float>(d, 80, rng, Mamba2DecayRange::mild());
  auto typical = make_random_mamba2_tokens<float>(d, 34, rng);
  Inputs in;
  in.x32 = concat(concat(strong, mild), typical);
  in.s32 = make_random_mamba2_state<float>(d, rng);
  in.x = mamba2_cast_tokens<double>(in.x32);
  in.s0 = mamba2_cast_state<double>(in.s32);
  const Truth truth = recurrent_truth(in.x, in.s0);
  const Truth truth_from_zero = recurrent_truth(in.x, mamba2_zero_state<double>(d));
  check_all_modes<double>(in, truth, truth_from_zero);
  check_all_modes<float>(in, truth, truth_from_zero);
}

// Step by step: the output of each token and the state after it (S0 folded with the buffer) match
// the recurrence; S0 is written only when the buffer fills, which empties it.
TEST(Mamba2KVBuffer, CheckpointWrittenOnlyOnFoldAndStateMatchesEveryPrefix) {
  const Mamba2Dims d{1, 2, 16, 8};
  for (int cap : {1, 3, 8}) {
    const Inputs in = make_inputs(d, 30, 500 + cap);
    Mamba2KVBuffer<double> buf(d, cap, in.s0);
    Mamba2State<double> s_rec = in.s0;
    const size_t row = size_t(d.NH) * d.P;
    for (int t = 0; t < in.x.steps; ++t) {
      const auto before = flat(buf.checkpoint());
      const int fill_before = buf.fill();
      std::vector<double> y(row, std::numeric_limits<double>::quiet_NaN());
      buf.decode(in.x, t, y.data());
      std::vector<double> y_rec;
      mamba2_decode_recurrent(mamba2_slice_tokens(in.x, t, 1), s_rec, y_rec);
      EXPECT_LE(max_rel_err(y, y_rec), kF64Tol) << "token " << t << " C=" << cap;
      EXPECT_LE(max_rel_err(flat(buf.state()), flat(s_rec)), kF64Tol) << "token " << t;
      if (fill_before + 1 == cap) {
        EXPECT_EQ(buf.fill(), 0) << "the buffer folds when it becomes full";
        EXPECT_LE(max_rel_err(flat(buf.checkpoint()), flat(s_rec)), kF64Tol);
      } else {
        EXPECT_EQ(buf.fill(), fill_before + 1);
        EXPECT_EQ(flat(buf.checkpoint()), before) << "S0 written before the buffer was full";
      }
    }
    EXPECT_EQ(buf.folds(), 30 / cap);
  }
}

// Direct mode: no state while the context fits; the fold on overflow creates it.
TEST(Mamba2KVBuffer, DirectModeHasNoStateUntilTheBufferFills) {
  const Mamba2Dims d{2, 4, 16, 8};
  const int cap = 8;
  const Inputs in = make_inputs(d, 20, 31, {}, true);
  Mamba2KVBuffer<double> buf(d, cap);
  Mamba2State<double> s_rec = in.s0;
  std::vector<double> y(size_t(d.NH) * d.P), y_rec;
  for (int t = 0; t < in.x.steps; ++t) {
    EXPECT_EQ(buf.has_state(), t >= cap) << "token " << t;
    if (!buf.has_state()) {
      EXPECT_EQ(flat(buf.checkpoint()), flat(in.s0));
    }
    buf.decode(in.x, t, y.data());
    mamba2_decode_recurrent(mamba2_slice_tokens(in.x, t, 1), s_rec, y_rec);
    EXPECT_LE(max_rel_err(y, y_rec), kF64Tol) << "token " << t;
  }
  EXPECT_LE(max_rel_err(flat(buf.state()), flat(s_rec)), kF64Tol);
}

// 10,000 decode steps with long memory (decays in [0.95, 1)): the float32 recurrent and buffered
// decodes against float64, reported at 100, 1000 and 10000 tokens; bounded by the derived
// tolerance.
TEST(Mamba2Drift, TenThousandStepsFloat32AgainstFloat64) {
  const Mamba2Dims d{1, 2, 64, 32};
  const Inputs in = make_inputs(d, 10000, 2026, Mamba2DecayRange::mild());
  const Truth truth = recurrent_truth(in.x, in.s0);
  const auto tol = mamba2_f32_tolerance(in.x, in.s0, 16);
  Mamba2State<float> s_rec = in.s32, s_buf = in.s32;
  std::vector<float> y_rec, y_buf;
  mamba2_decode_recurrent(in.x32, s_rec, y_rec);
  mamba2_decode_kvbuffer(in.x32, 16, s_buf, y_buf);
  for (int n : {100, 1000, 10000}) {
    const auto want = rows(truth.y, d, n - 100, 100);
    std::printf("  mamba2 f32 drift, tokens %5d..%5d: recurrent %.2e, kvbuffer C=16 %.2e\n",
                n - 100, n, max_rel_err(rows(y_rec, d, n - 100, 100), want),
                max_rel_err(rows(y_buf, d, n - 100, 100), want));
  }
  std::printf(
      "  mamba2 f32 drift over all 10000 tokens: recurrent %.2e, kvbuffer %.2e (tol %.2e)\n",
      max_rel_err(y_rec, truth.y), max_rel_err(y_buf, truth.y), tol.y);
  EXPECT_LE(max_rel_err(y_rec, truth.y), tol.y);
  EXPECT_LE(max_rel_err(y_buf, truth.y), tol.y);
  EXPECT_LE(max_rel_err(flat(s_rec), flat(truth.state)), tol.state);
  EXPECT_LE(max_rel_err(flat(s_buf), flat(truth.state)), tol.state);
}

}  // namespace
}  // namespace kvbuf::ref
