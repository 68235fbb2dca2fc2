// Mamba-2 property test: 240 random configurations (dims, group ratio, length, decay regime,
// chunk, capacity, drafts, accepted length), every mode against the float64 recurrence in float64
// and float32; a failure names the configuration's seed so it can be replayed.
#include <gtest/gtest.h>

#include "reference/tests/test_mamba2_util.h"

namespace kvbuf::ref {
namespace {

using namespace test_mamba2;

TEST(Mamba2Property, RandomConfigurationsAgreeWithRecurrent) {
  constexpr int kConfigs = 240;
  std::mt19937_64 pick(20261129);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(pick); };
  const Mamba2DecayRange regimes[] = {Mamba2DecayRange::typical(), Mamba2DecayRange::mild(),
                                      Mamba2DecayRange::extreme()};
  for (int c = 0; c < kConfigs; ++c) {
    const uint64_t seed = pick();
    Mamba2Dims d;
    d.G = uniform(1, 3);
    d.NH = d.G * uniform(1, 3);
    d.N = uniform(1, 48);
    d.P = uniform(1, 24);
    const int steps = uniform(1, 90);
    const auto& decay = regimes[uniform(0, 2)];
    const int chunk = uniform(1, 64);
    const int cap = uniform(1, 64);
    const int drafts = uniform(1, std::min(cap, 8));
    const int accept = uniform(1, drafts);
    SCOPED_TRACE("config " + std::to_string(c) + ": seed " + std::to_string(seed) + ", " +
                 dims_str(d) + ", steps " + std::to_string(steps) + ", dt [" +
                 std::to_string(decay.dt_min) + ", " + std::to_string(decay.dt_max) + "], chunk " +
                 std::to_string(chunk) + ", C " + std::to_string(cap) + ", T " +
                 std::to_string(drafts) + ", m " + std::to_string(accept));
    const Inputs in = make_inputs(d, steps, seed, decay);
    const Truth truth = recurrent_truth(in.x, in.s0);
    const Truth truth_from_zero = recurrent_truth(in.x, mamba2_zero_state<double>(d));
    auto run_all = [&](auto zero) {
      using T = decltype(zero);
      const Mamba2Tokens<T>& x = tokens<T>(in);
      std::vector<T> y;
      Mamba2State<T> s = state0<T>(in);
      mamba2_prefill_chunk(x, chunk, s, y);
      expect_matches(y, s, truth, chunk, "prefill");
      s = state0<T>(in);
      mamba2_decode_kvbuffer(x, cap, s, y);
      expect_matches(y, s, truth, cap, "kvbuffer");
      s = state0<T>(in);
      mamba2_decode_direct(x, cap, s, y);
      expect_matches(y, s, truth_from_zero, cap, "direct");
      s = state0<T>(in);
      mamba2_verify_kvbuffer(x, cap, drafts, accept, s, y);
      expect_matches(y, s, truth, cap, "verify kvbuffer");
      s = state0<T>(in);
      mamba2_verify_classic(x, drafts, accept, s, y);
      expect_matches(y, s, truth, 1, "verify classic");
    };
    run_all(double{});
    run_all(float{});
    if (::testing::Test::HasFailure()) break;  // one replayable failure, not 240
  }
}

}  // namespace
}  // namespace kvbuf::ref
