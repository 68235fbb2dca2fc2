// The classic Mamba-2 verify with a 16-bit state (mamba2_verify_classic_window, _tree and
// mamba2_verify_classic with a StateStore): every written node state is rounded once, the chain
// goes on from the unrounded state, outputs come from the unrounded state, a tree node whose parent
// is not the previous node starts from its parent's rounded state, and the commit keeps the rounded
// one (kernels/mamba2/mamba2_verify_classic.cu does exactly this).
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "reference/mamba2.h"
#include "reference/state_rounding.h"
#include "reference/tests/test_mamba2_util.h"

namespace kvbuf::ref {
namespace {

using namespace test_mamba2;

constexpr StateType kSixteenBit[] = {StateType::BF16, StateType::FP16};
const Mamba2Dims kDims{2, 4, 16, 8};  // G, NH, N, P

Mamba2State<double> rounded(Mamba2State<double> s, StateType t) {
  round_state(s, StateStore(t));
  return s;
}
bool same(const Mamba2State<double>& a, const Mamba2State<double>& b) {
  for (size_t h = 0; h < a.size(); ++h)
    if (a[h] != b[h]) return false;
  return true;
}
bool representable(const Mamba2State<double>& s, StateType t) { return same(s, rounded(s, t)); }

// A chain: the outputs are those of the unrounded recurrence, bitwise; each written state is that
// recurrence's state rounded once; the commit keeps the rounded one.
TEST(Mamba2ClassicVerifyRounding, ChainRoundsOnlyTheWrittenStates) {
  for (StateType t : kSixteenBit)
    for (int T : {1, 4, 8}) {
      const Inputs in = make_inputs(kDims, T, 11 + T);
      const Mamba2State<double> s0 = rounded(in.s0, t);  // a 16-bit pool holds rounded values
      for (int accept : {0, 1, T}) {
        Mamba2State<double> exact = s0, kept = s0;
        std::vector<double> y_exact, y;
        std::vector<Mamba2State<double>> st_exact, st;
        mamba2_verify_classic_window(in.x, accept, exact, y_exact, st_exact);
        mamba2_verify_classic_window(in.x, accept, kept, y, st, StateStore(t));
        EXPECT_EQ(y, y_exact) << state_type_name(t) << " T=" << T;
        ASSERT_EQ(st.size(), size_t(T));
        for (int i = 0; i < T; ++i) {
          EXPECT_TRUE(same(st[i], rounded(st_exact[i], t))) << state_type_name(t) << " node " << i;
          EXPECT_TRUE(representable(st[i], t));
        }
        EXPECT_TRUE(same(kept, accept ? st[size_t(accept - 1)] : s0));
      }
    }
}

// Without a StateStore nothing changes: the written states are the recurrence's.
TEST(Mamba2ClassicVerifyRounding, NoStoreKeepsTheExactStates) {
  const Inputs in = make_inputs(kDims, 5, 3);
  Mamba2State<double> s = in.s0, r = in.s0;
  std::vector<double> y, y_rec;
  std::vector<Mamba2State<double>> st;
  mamba2_verify_classic_window(in.x, 5, s, y, st);
  mamba2_decode_recurrent(in.x, r, y_rec);
  EXPECT_EQ(y, y_rec);
  EXPECT_TRUE(same(s, r));
}

// A tree: node i continues from node i - 1's unrounded state when that is its parent, else starts
// from its parent's written (rounded) state or the committed state; each node's output and state
// equal one recurrent step from that start.
TEST(Mamba2ClassicVerifyRounding, TreeNodesReloadTheirParentsRoundedState) {
  const std::vector<int> parents = {-1, 0, 0, 2, 1, -1, 5, 3};
  const int T = int(parents.size());
  for (StateType t : kSixteenBit) {
    const Inputs in = make_inputs(kDims, T, 29);
    const Mamba2State<double> s0 = rounded(in.s0, t);
    for (int accept_node : {-1, 4, 7}) {
      Mamba2State<double> state = s0;
      std::vector<double> y;
      std::vector<Mamba2State<double>> st;
      mamba2_verify_classic_tree(in.x, parents, accept_node, state, y, st, StateStore(t));
      const size_t per = size_t(kDims.NH) * kDims.P;
      Mamba2State<double> prev = s0;  // node i - 1's unrounded state
      for (int i = 0; i < T; ++i) {
        const int p = parents[size_t(i)];
        Mamba2State<double> s = p == i - 1 ? prev : p < 0 ? s0 : st[size_t(p)];
        std::vector<double> yi;
        mamba2_decode_recurrent(mamba2_slice_tokens(in.x, i, 1), s, yi);
        EXPECT_EQ(std::vector<double>(y.begin() + i * per, y.begin() + (i + 1) * per), yi)
            << state_type_name(t) << " node " << i;
        EXPECT_TRUE(same(st[size_t(i)], rounded(s, t))) << state_type_name(t) << " node " << i;
        prev = s;
      }
      EXPECT_TRUE(same(state, accept_node < 0 ? s0 : st[size_t(accept_node)]));
    }
  }
  // A chain given as a tree is the chain window.
  const Inputs in = make_inputs(kDims, 6, 31);
  const std::vector<int> chain = {-1, 0, 1, 2, 3, 4};
  Mamba2State<double> a = rounded(in.s0, StateType::BF16), b = a;
  std::vector<double> ya, yb;
  std::vector<Mamba2State<double>> sa, sb;
  mamba2_verify_classic_tree(in.x, chain, 3, a, ya, sa, StateStore(StateType::BF16));
  mamba2_verify_classic_window(in.x, 4, b, yb, sb, StateStore(StateType::BF16));
  EXPECT_EQ(ya, yb);
  EXPECT_TRUE(same(a, b));
}

TEST(Mamba2ClassicVerifyRounding, TreeRefusesBadParents) {
  const Inputs in = make_inputs(kDims, 3, 5);
  Mamba2State<double> s = in.s0;
  std::vector<double> y;
  std::vector<Mamba2State<double>> st;
  EXPECT_THROW(mamba2_verify_classic_tree(in.x, {-1, 1, 0}, -1, s, y, st), std::invalid_argument);   // a parent >= node
  EXPECT_THROW(mamba2_verify_classic_tree(in.x, {-1, 0}, -1, s, y, st), std::invalid_argument);      // one per node
  EXPECT_THROW(mamba2_verify_classic_tree(in.x, {-1, 0, -2}, -1, s, y, st), std::invalid_argument);  // below -1
  EXPECT_THROW(mamba2_verify_classic_tree(in.x, {-1, 0, 1}, 3, s, y, st), std::invalid_argument);    // accepted node
}

// The whole-sequence driver: each round starts from the previous round's rounded commit.
TEST(Mamba2ClassicVerifyRounding, DriverCommitsTheRoundedState) {
  for (StateType t : kSixteenBit) {
    const int steps = 11, drafts = 4, accept = 3;
    const Inputs in = make_inputs(kDims, steps, 41);
    const Mamba2State<double> s0 = rounded(in.s0, t);
    Mamba2State<double> s = s0, manual = s0;
    std::vector<double> y, y_manual(size_t(steps) * kDims.NH * kDims.P);
    mamba2_verify_classic(in.x, drafts, accept, s, y, StateStore(t));
    const size_t per = size_t(kDims.NH) * kDims.P;
    for (int pos = 0; pos < steps;) {
      const int len = std::min(drafts, steps - pos), keep = std::min(accept, len);
      std::vector<double> yw;
      std::vector<Mamba2State<double>> st;
      mamba2_verify_classic_window(mamba2_slice_tokens(in.x, pos, len), keep, manual, yw, st, StateStore(t));
      std::copy_n(yw.begin(), keep * per, y_manual.begin() + pos * per);
      pos += keep;
    }
    EXPECT_EQ(y, y_manual);
    EXPECT_TRUE(same(s, manual));
    EXPECT_TRUE(representable(s, t));
    // The rounding is felt: the fp32-kept driver ends elsewhere.
    Mamba2State<double> exact = s0;
    std::vector<double> y_exact;
    mamba2_verify_classic(in.x, drafts, accept, exact, y_exact);
    EXPECT_FALSE(same(exact, s));
  }
}

}  // namespace
}  // namespace kvbuf::ref
