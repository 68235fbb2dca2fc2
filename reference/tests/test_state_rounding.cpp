// The state rounding of reference/state_rounding.h and where the reference applies it: after every
// token of the recurrent decode, at every fold of the KV buffer, both families.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "reference/gdn.h"
#include "reference/mamba2.h"
#include "reference/random_inputs.h"
#include "reference/state_rounding.h"

namespace kvbuf::ref {
namespace {

constexpr StateType kSixteenBit[] = {StateType::BF16, StateType::FP16};

bool representable(double x, StateType t) { return round_to_state(x, t) == x; }

template <class State>
bool all_representable(const State& s, StateType t) {
  for (const auto& m : s)
    for (int i = 0; i < m.size(); ++i)
      if (!representable(m.data()[i], t)) return false;
  return true;
}

template <class State>
double rel_diff(const State& a, const State& b) {
  double num = 0, den = 0;
  for (size_t h = 0; h < a.size(); ++h) num += (a[h] - b[h]).squaredNorm(), den += b[h].squaredNorm();
  return std::sqrt(num / den);
}

TEST(StateRounding, KnownValues) {
  EXPECT_EQ(round_to_state(1.0 / 3, StateType::FP32), double(1.0f / 3));
  // bf16: 8 significant bits; halfway cases go to the even neighbour.
  EXPECT_EQ(round_to_state(1 + std::ldexp(1.0, -8), StateType::BF16), 1.0);
  EXPECT_EQ(round_to_state(1 + 3 * std::ldexp(1.0, -8), StateType::BF16), 1 + std::ldexp(1.0, -6));
  EXPECT_EQ(round_to_state(-1 - std::ldexp(1.0, -7), StateType::BF16), -1 - std::ldexp(1.0, -7));
  EXPECT_EQ(round_to_state(1e38, StateType::BF16), 9.969209968386869e37);
  // fp16: 11 significant bits, subnormals, overflow from 65520.
  EXPECT_EQ(round_to_state(1.0 / 3, StateType::FP16), 0.333251953125);
  EXPECT_EQ(round_to_state(1 + std::ldexp(1.0, -11), StateType::FP16), 1.0);
  EXPECT_EQ(round_to_state(1 + 3 * std::ldexp(1.0, -11), StateType::FP16), 1 + std::ldexp(1.0, -9));
  EXPECT_EQ(round_to_state(65504.0, StateType::FP16), 65504.0);
  EXPECT_EQ(round_to_state(65519.0, StateType::FP16), 65504.0);
  EXPECT_EQ(round_to_state(65520.0, StateType::FP16), std::numeric_limits<double>::infinity());
  EXPECT_EQ(round_to_state(-1e6, StateType::FP16), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(round_to_state(std::ldexp(1.0, -24), StateType::FP16), std::ldexp(1.0, -24));
  EXPECT_EQ(round_to_state(std::ldexp(1.0, -25), StateType::FP16), 0.0);
  EXPECT_EQ(round_to_state(3 * std::ldexp(1.0, -25), StateType::FP16), std::ldexp(1.0, -23));
  EXPECT_EQ(round_to_state(std::ldexp(1.0, -20) * 1.3, StateType::FP16), std::ldexp(1.0, -24) * 21);
  for (StateType t : kSixteenBit) {
    EXPECT_TRUE(std::isnan(round_to_state(std::nan(""), t)));
    EXPECT_EQ(round_to_state(0.0, t), 0.0);
  }
}

// Random values over the whole useful range: the rounded value is representable, rounding it
// again changes nothing, and it is the nearest representable value (within half a spacing).
TEST(StateRounding, NearestAndIdempotent) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> mant(-1, 1);
  std::uniform_int_distribution<int> expo(-30, 15);
  for (StateType t : kSixteenBit) {
    const int digits = t == StateType::BF16 ? 8 : 11;
    for (int i = 0; i < 20000; ++i) {
      const double x = std::ldexp(mant(rng), expo(rng));
      const double r = round_to_state(x, t);
      ASSERT_EQ(round_to_state(r, t), r) << state_type_name(t) << " x=" << x;
      const double a = std::fabs(float(x));
      const int lead = std::ilogb(a);
      const double spacing = std::ldexp(1.0, std::max(lead, t == StateType::BF16 ? -126 : -14) - digits + 1);
      ASSERT_LE(std::fabs(r - double(float(x))), spacing / 2) << state_type_name(t) << " x=" << x;
    }
  }
}

GdnDims gdn_dims() { return {2, 4, 16, 16}; }

// Random tokens and a random checkpoint already representable in t, as a kernel's pool holds it.
struct GdnStart {
  GdnTokens<double> x;
  GdnState<double> s0;
};
GdnStart gdn_start(uint64_t seed, int steps, StateType t) {
  std::mt19937_64 rng(seed);
  GdnStart g{make_random_gdn_tokens<double>(gdn_dims(), steps, rng), {}};
  g.s0 = make_random_gdn_state<double>(gdn_dims(), rng, 0.5);
  round_state(g.s0, StateStore(t));
  return g;
}

// The recurrent decode with a store: the state is representable after the run, and it equals
// running token by token with the state rounded in between (the rounding sits after every token).
TEST(StateRounding, GdnRecurrentRoundsAfterEveryToken) {
  for (StateType t : kSixteenBit) {
    const auto [x, s0] = gdn_start(11, 12, t);
    GdnState<double> stored = s0, stepped = s0, exact = s0;
    std::vector<double> o, o_step, o_exact;
    gdn_decode_recurrent(x, stored, o, StateStore(t));
    EXPECT_TRUE(all_representable(stored, t)) << state_type_name(t);
    for (int i = 0; i < x.steps; ++i) {
      std::vector<double> oi;
      gdn_decode_recurrent(gdn_slice_tokens(x, i, 1), stepped, oi);
      round_state(stepped, StateStore(t));
      o_step.insert(o_step.end(), oi.begin(), oi.end());
    }
    EXPECT_EQ(o, o_step) << state_type_name(t);
    EXPECT_EQ(rel_diff(stored, stepped), 0.0) << state_type_name(t);
    // Rounding moves the state, by about the type's precision per token, never wildly.
    gdn_decode_recurrent(x, exact, o_exact);
    const double d = rel_diff(stored, exact), u = std::ldexp(1.0, t == StateType::BF16 ? -8 : -11);
    EXPECT_GT(d, 0.0);
    EXPECT_LT(d, x.steps * u) << state_type_name(t);
  }
}

// The classic verify with a store rounds every node's state where the kernel writes it and goes on
// from the rounded state: a window is T recurrent steps with the same store (outputs and states
// exactly), and the driver over rounds is the recurrent decode of the whole sequence.
TEST(StateRounding, GdnClassicVerifyRoundsEveryNodeState) {
  for (StateType t : kSixteenBit) {
    const auto [x, s0] = gdn_start(17, 11, t);
    const int W = 5;
    const GdnTokens<double> window = gdn_slice_tokens(x, 0, W);
    GdnState<double> committed = s0;
    std::vector<double> o;
    std::vector<GdnState<double>> states;
    gdn_verify_classic_window(window, 3, committed, o, states, StateStore(t));
    ASSERT_EQ(int(states.size()), W);
    GdnState<double> walked = s0;
    for (int i = 0; i < W; ++i) {
      std::vector<double> oi;
      gdn_decode_recurrent(gdn_slice_tokens(window, i, 1), walked, oi, StateStore(t));
      EXPECT_TRUE(all_representable(states[i], t)) << state_type_name(t) << " node " << i;
      EXPECT_EQ(rel_diff(states[i], walked), 0.0) << state_type_name(t) << " node " << i;
      const size_t row = size_t(gdn_dims().HV) * gdn_dims().V;
      EXPECT_TRUE(std::equal(oi.begin(), oi.end(), o.begin() + i * row)) << state_type_name(t) << " node " << i;
    }
    EXPECT_EQ(rel_diff(committed, states[2]), 0.0);
    // Without a store nothing is rounded: the same window drifts from the stored one.
    GdnState<double> exact_state = s0;
    std::vector<GdnState<double>> exact;
    std::vector<double> o_exact;
    gdn_verify_classic_window(window, 0, exact_state, o_exact, exact);
    EXPECT_FALSE(all_representable(exact[W - 1], t));
    EXPECT_GT(rel_diff(states[W - 1], exact[W - 1]), 0.0);
    // Rounds of 4 drafts accepting 3: the recurrent decode of the sequence with the same store.
    GdnState<double> verified = s0, decoded = s0;
    std::vector<double> ov, od;
    gdn_verify_classic(x, 4, 3, verified, ov, StateStore(t));
    gdn_decode_recurrent(x, decoded, od, StateStore(t));
    EXPECT_EQ(ov, od) << state_type_name(t);
    EXPECT_EQ(rel_diff(verified, decoded), 0.0) << state_type_name(t);
  }
}

// The buffered verify driver passes its store to the buffer: every fold, the last one too, stores a
// rounded S0, within a few roundings of the exact state.
TEST(StateRounding, GdnKVBufferVerifyDriverRoundsFolds) {
  for (StateType t : kSixteenBit) {
    const auto [x, s0] = gdn_start(19, 14, t);
    GdnState<double> stored = s0, exact = s0;
    std::vector<double> o, o_exact;
    gdn_verify_kvbuffer(x, 6, BufferVariant::CachedU, 4, 3, stored, o, StateStore(t));
    gdn_verify_kvbuffer(x, 6, BufferVariant::CachedU, 4, 3, exact, o_exact);
    EXPECT_TRUE(all_representable(stored, t)) << state_type_name(t);
    EXPECT_FALSE(all_representable(exact, t));
    const double d = rel_diff(stored, exact), u = std::ldexp(1.0, t == StateType::BF16 ? -8 : -11);
    EXPECT_GT(d, 0.0);
    EXPECT_LT(d, 4 * u) << state_type_name(t);  // 14 tokens at C = 6: at most 4 folds
  }
}

// The KV buffer with a store rounds S0 at every fold, and only there: between folds S0 is what the
// last fold stored; without a store nothing is rounded.
TEST(StateRounding, GdnKVBufferRoundsAtEveryFold) {
  for (StateType t : kSixteenBit) {
    const auto [x, s0] = gdn_start(13, 13, t);
    GdnKVBuffer<double> stored(gdn_dims(), 4, BufferVariant::CachedU, s0, StateStore(t));
    GdnKVBuffer<double> exact(gdn_dims(), 4, BufferVariant::CachedU, s0);
    std::vector<double> o(size_t(gdn_dims().HV) * gdn_dims().V), o_exact(o.size());
    for (int i = 0; i < x.steps; ++i) {
      stored.decode(x, i, o.data());
      exact.decode(x, i, o_exact.data());
      if (stored.fill() == 0) {
        EXPECT_TRUE(all_representable(stored.checkpoint(), t)) << state_type_name(t) << " token " << i;
        GdnState<double> r = exact.checkpoint();
        EXPECT_FALSE(all_representable(r, t));
        round_state(r, StateStore(t));
        if (i == 3) EXPECT_EQ(rel_diff(stored.checkpoint(), r), 0.0);  // the first fold: same inputs
      }
    }
    EXPECT_EQ(stored.folds(), 3);
    // Direct mode: the fold on overflow creates a rounded state.
    GdnState<double> created;
    std::vector<double> od;
    EXPECT_TRUE(gdn_decode_direct(gdn_slice_tokens(x, 0, 6), 4, BufferVariant::CachedU, created, od, StateStore(t)));
    EXPECT_TRUE(all_representable(created, t));
  }
}

TEST(StateRounding, Mamba2RecurrentAndFold) {
  const Mamba2Dims d{2, 4, 8, 16};
  for (StateType t : kSixteenBit) {
    std::mt19937_64 rng(17);
    const Mamba2Tokens<double> x = make_random_mamba2_tokens<double>(d, 9, rng, Mamba2DecayRange{});
    Mamba2State<double> s0 = make_random_mamba2_state<double>(d, rng, 0.5);
    round_state(s0, StateStore(t));
    Mamba2State<double> stored = s0, stepped = s0;
    std::vector<double> y, y_step;
    mamba2_decode_recurrent(x, stored, y, StateStore(t));
    EXPECT_TRUE(all_representable(stored, t));
    for (int i = 0; i < x.steps; ++i) {
      std::vector<double> yi;
      mamba2_decode_recurrent(mamba2_slice_tokens(x, i, 1), stepped, yi);
      round_state(stepped, StateStore(t));
      y_step.insert(y_step.end(), yi.begin(), yi.end());
    }
    EXPECT_EQ(y, y_step);
    EXPECT_EQ(rel_diff(stored, stepped), 0.0);
    Mamba2State<double> folded = s0;
    mamba2_decode_kvbuffer(x, 4, folded, y, StateStore(t));
    EXPECT_TRUE(all_representable(folded, t));
    Mamba2State<double> created;
    EXPECT_TRUE(mamba2_decode_direct(x, 4, created, y, StateStore(t)));
    EXPECT_TRUE(all_representable(created, t));
  }
}

}  // namespace
}  // namespace kvbuf::ref
