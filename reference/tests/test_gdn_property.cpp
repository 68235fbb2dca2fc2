// Property test: on 240 random configurations (dims, GQA ratio, length, capacity, chunk, window,
// accepted length, gates from mild to g <= -100 with beta exactly 0/1, variant, direct or not)
// every mode equals the float64 recurrence, outputs and final state, within gdn_rel_tolerance.
// Every 4th configuration also runs in float32.
#include <gtest/gtest.h>

#include <random>

#include "reference/tests/test_gdn_util.h"

namespace kvbuf::ref::test {
namespace {

struct Config {
  GdnDims d;
  int steps, capacity, chunk, drafts, accept;
  GateRange gates;
  BufferVariant variant;
  std::string str() const {
    return dims_str(d) + " steps=" + std::to_string(steps) + " C=" + std::to_string(capacity) +
           " chunk=" + std::to_string(chunk) + " T=" + std::to_string(drafts) +
           " accept=" + std::to_string(accept) + " g in [" + std::to_string(gates.g_min) + ", " +
           std::to_string(gates.g_max) + "] p(beta=0)=" + std::to_string(gates.p_beta_zero) +
           " p(beta=1)=" + std::to_string(gates.p_beta_one) + " " + variant_name(variant);
  }
};

Config random_config(std::mt19937_64& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto unit = [&] { return std::uniform_real_distribution<double>(0.0, 1.0)(rng); };
  Config c;
  c.d.H = pick(1, 2);
  c.d.HV = c.d.H * pick(1, 3);
  c.d.K = 4 << pick(0, 3);
  c.d.V = 4 * pick(1, 6);
  c.steps = pick(1, 70);
  c.capacity = pick(1, 20);
  c.chunk = pick(1, 40);
  c.drafts = pick(1, std::min(8, c.capacity));
  c.accept = pick(1, c.drafts);
  const double g_min = -std::pow(10.0, 2.0 * unit()) + 1.0;  // down to -99
  c.gates = GateRange{g_min, g_min * unit(), 0.0, 1.0, 0.3 * unit(), 0.3 * unit()};
  c.variant = unit() < 0.5 ? BufferVariant::Raw : BufferVariant::CachedU;
  return c;
}

template <class T>
void check_config(const Config& c, const GdnTokens<double>& x, const GdnState<double>& s0,
                  const Truth& truth, const Truth& zero_truth) {
  const GdnTokens<T> xt = gdn_cast_tokens<T>(x);
  const int L = x.steps;
  auto run = [&](const std::string& what, auto f, const Truth& want, bool from_zero = false) {
    GdnState<T> s = from_zero ? gdn_zero_state<T>(c.d) : gdn_cast_state<T>(s0);
    std::vector<T> o;
    f(s, o);
    expect_close(o, want.o, c.d, L, what + " o");
    expect_close(flat(s), flat(want.state), c.d, L, what + " state");
  };
  run("chunk", [&](auto& s, auto& o) { gdn_prefill_chunk(xt, c.chunk, s, o); }, truth);
  run("kvbuffer", [&](auto& s, auto& o) { gdn_decode_kvbuffer(xt, c.capacity, c.variant, s, o); },
      truth);
  run("direct", [&](auto& s, auto& o) { gdn_decode_direct(xt, c.capacity, c.variant, s, o); },
      zero_truth, true);
  run("verify kvbuffer",
      [&](auto& s, auto& o) {
        gdn_verify_kvbuffer(xt, c.capacity, c.variant, c.drafts, c.accept, s, o);
      },
      truth);
  run("verify classic",
      [&](auto& s, auto& o) { gdn_verify_classic(xt, c.drafts, c.accept, s, o); }, truth);
}

TEST(GdnProperty, RandomConfigurationsMatchRecurrent) {
  std::mt19937_64 rng(0x6b76627566);
  const int configs = 240;
  for (int i = 0; i < configs; ++i) {
    const Config c = random_config(rng);
    SCOPED_TRACE("config " + std::to_string(i) + ": " + c.str());
    const GdnTokens<double> x = make_random_gdn_tokens<double>(c.d, c.steps, rng, c.gates);
    const GdnState<double> s0 = make_random_gdn_state<double>(c.d, rng);
    const Truth truth = recurrent_truth(x, s0);
    const Truth zero_truth = recurrent_truth(x, gdn_zero_state<double>(c.d));
    check_config<double>(c, x, s0, truth, zero_truth);
    if (i % 4 == 0) check_config<float>(c, x, s0, truth, zero_truth);
    if (::testing::Test::HasFailure()) break;  // one failing configuration is enough to read
  }
}

}  // namespace
}  // namespace kvbuf::ref::test
