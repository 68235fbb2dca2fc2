// A 10,000-step float32 decode against the float64 recurrence: the drift stays bounded (it does not
// grow with the number of steps) and is printed.
//
// Bound: the recurrence maps an error E in S to exp(g) (I - beta k k^T) E, whose norm is at most
// exp(g_max) |E| (|k| < 1, beta in [0, 1]). Each step adds a rounding error of at most about
// 16 (K + V) u of the state's scale (gdn_rel_tolerance's per-token term), so the accumulated error
// is at most that divided by 1 - exp(g_max), whatever the number of steps. With g in
// [-0.05, -0.01] (a memory of about 20 to 100 tokens) that is 100x the per-step term.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "reference/tests/test_gdn_util.h"

namespace kvbuf::ref::test {
namespace {

struct Drift {
  double first_window = 0;  // max over steps [1000, 2000) of |o32 - o64| / max |o64|
  double last_window = 0;   // same over the last 1000 steps
  double all = 0;           // over every step
  double state = 0;         // final state, normwise relative
};

template <class Run>
Drift measure(const GdnTokens<double>& x, const Truth& truth, Run run) {
  GdnState<float> s = gdn_zero_state<float>(x.dims);
  std::vector<float> o;
  run(gdn_cast_tokens<float>(x), s, o);
  double scale = 0;
  for (double e : truth.o) scale = std::max(scale, std::abs(e));
  const size_t row = size_t(x.dims.HV) * x.dims.V;
  Drift d;
  for (int t = 0; t < x.steps; ++t) {
    double err = 0;
    for (size_t i = t * row; i < (t + 1) * row; ++i)
      err = std::max(err, std::abs(double(o[i]) - truth.o[i]));
    err /= scale;
    d.all = std::max(d.all, err);
    if (t >= 1000 && t < 2000) d.first_window = std::max(d.first_window, err);
    if (t >= x.steps - 1000) d.last_window = std::max(d.last_window, err);
  }
  d.state = max_rel_err(flat(s), flat(truth.state));
  return d;
}

TEST(GdnDrift, TenThousandStepsFloat32StaysBounded) {
  const GdnDims d{1, 2, 64, 48};
  const int steps = 10000;
  const GateRange gates{-0.05, -0.01, 0.0, 1.0, 0.0, 0.0};
  std::mt19937_64 rng(10000);
  const GdnTokens<double> x = make_random_gdn_tokens<double>(d, steps, rng, gates);
  const Truth truth = recurrent_truth(x, gdn_zero_state<double>(d));
  const double bound = 16.0 * (d.K + d.V) * 0x1p-24 / (1.0 - std::exp(gates.g_max));
  struct Mode {
    const char* name;
    std::function<void(const GdnTokens<float>&, GdnState<float>&, std::vector<float>&)> run;
  };
  const std::vector<Mode> modes = {
      {"recurrent", [](auto& xf, auto& s, auto& o) { gdn_decode_recurrent(xf, s, o); }},
      {"kvbuffer cached-u C=16",
       [](auto& xf, auto& s, auto& o) { gdn_decode_kvbuffer(xf, 16, BufferVariant::CachedU, s, o); }},
      {"kvbuffer raw C=16",
       [](auto& xf, auto& s, auto& o) { gdn_decode_kvbuffer(xf, 16, BufferVariant::Raw, s, o); }},
      {"chunk 64", [](auto& xf, auto& s, auto& o) { gdn_prefill_chunk(xf, 64, s, o); }},
  };
  std::printf("  float32 drift vs float64 over %d steps (%s, g in [%.2f, %.2f]), bound %.2e:\n",
              steps, dims_str(d).c_str(), gates.g_min, gates.g_max, bound);
  for (const Mode& m : modes) {
    const Drift dr = measure(x, truth, m.run);
    std::printf("  %-24s o: steps 1000-2000 %.2e, last 1000 %.2e, max %.2e; final state %.2e\n",
                m.name, dr.first_window, dr.last_window, dr.all, dr.state);
    EXPECT_LE(dr.all, bound) << m.name;
    EXPECT_LE(dr.state, bound) << m.name;
    // Bounded, not growing: the error late in the run is of the order of the error early on.
    EXPECT_LE(dr.last_window, 10.0 * dr.first_window) << m.name;
    EXPECT_GT(dr.all, 0.0) << m.name << ": float32 identical to float64 means it never ran in f32";
  }
}

}  // namespace
}  // namespace kvbuf::ref::test
