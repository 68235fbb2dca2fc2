// Mamba-2 speculative verify: the buffered verify (all T outputs at once from S0 + buffer) and the
// classic baseline (T intermediate states) against the float64 recurrence, for T in 1..8 and every
// accepted length m in 0..T, from several buffer fills (including n + T > C, which folds first);
// rejected drafts must leave no trace. Then the whole-sequence drivers.
#include <gtest/gtest.h>

#include <limits>

#include "reference/tests/test_mamba2_util.h"

namespace kvbuf::ref {
namespace {

using namespace test_mamba2;

// One verify round after `prefix` decoded tokens of `seq`: the window is seq's next m tokens
// followed by T - m junk drafts. Checks the T window outputs (recurrence along the window's own
// chain), then after accepting m: the state, and that the next two decoded tokens of seq match
// the recurrence over seq (the junk left no trace).
template <class T>
void check_round(const Mamba2Dims& d, int cap, int prefix, int drafts, int m, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto seq32 = make_random_mamba2_tokens<float>(d, prefix + m + 2, rng);
  auto junk32 = make_random_mamba2_tokens<float>(d, drafts - m, rng);
  junk32.A = seq32.A;
  junk32.D = seq32.D;
  const auto s32 = make_random_mamba2_state<float>(d, rng);
  const auto window32 = concat(mamba2_slice_tokens(seq32, prefix, m), junk32);

  const auto seq = mamba2_cast_tokens<double>(seq32);
  const auto window = mamba2_cast_tokens<double>(window32);
  const auto s0 = mamba2_cast_state<double>(s32);
  const Truth truth_seq = recurrent_truth(seq, s0);
  const Truth truth_window =
      recurrent_truth(concat(mamba2_slice_tokens(seq, 0, prefix), window), s0);

  const Mamba2Tokens<T>& seq_t = [&]() -> const Mamba2Tokens<T>& {
    if constexpr (std::is_same_v<T, float>)
      return seq32;
    else
      return seq;
  }();
  const Mamba2Tokens<T> window_t = mamba2_cast_tokens<T>(window32);
  const Mamba2State<T> s0_t = mamba2_cast_state<T>(s32);
  double tol = kF64Tol;
  if constexpr (std::is_same_v<T, float>) {
    tol = std::max(mamba2_f32_tolerance(truth_window.x, s0, cap).y,
                   mamba2_f32_tolerance(seq, s0, cap).y);
    tol = std::max(tol, std::max(mamba2_f32_tolerance(truth_window.x, s0, cap).state,
                                 mamba2_f32_tolerance(seq, s0, cap).state));
  }
  const std::string where = "C=" + std::to_string(cap) + " prefix=" + std::to_string(prefix) +
                            " T=" + std::to_string(drafts) + " m=" + std::to_string(m) +
                            (std::is_same_v<T, float> ? " f32" : " f64");
  const size_t row = size_t(d.NH) * d.P;

  // Buffered verify.
  Mamba2KVBuffer<T> buf(d, cap, s0_t);
  std::vector<T> y1(row);
  for (int t = 0; t < prefix; ++t) buf.decode(seq_t, t, y1.data());
  const int fill = buf.fill();
  std::vector<T> y(size_t(drafts) * row, std::numeric_limits<T>::quiet_NaN());
  buf.verify(window_t, y);
  EXPECT_LE(max_rel_err(y, rows(truth_window.y, d, prefix, drafts)), tol) << "kvbuffer y " << where;
  EXPECT_EQ(buf.fill(), fill + drafts > cap ? 0 : fill) << "verify folds first only when n + T > C";
  buf.accept(m);
  Mamba2State<double> s_after = s0;
  std::vector<double> y_unused;
  mamba2_decode_recurrent(mamba2_slice_tokens(seq, 0, prefix + m), s_after, y_unused);
  EXPECT_LE(max_rel_err(flat(buf.state()), flat(s_after)), tol) << "kvbuffer state " << where;
  for (int t = prefix + m; t < prefix + m + 2; ++t) {
    std::fill(y1.begin(), y1.end(), std::numeric_limits<T>::quiet_NaN());
    buf.decode(seq_t, t, y1.data());
    EXPECT_LE(max_rel_err(y1, rows(truth_seq.y, d, t, 1)), tol)
        << "kvbuffer next " << t << " " << where;
  }

  // Classic verify.
  Mamba2State<T> s = s0_t;
  std::vector<T> y_prefix;
  mamba2_decode_recurrent(mamba2_slice_tokens(seq_t, 0, prefix), s, y_prefix);
  std::vector<Mamba2State<T>> states;
  std::vector<T> yc(size_t(drafts) * row, std::numeric_limits<T>::quiet_NaN());
  mamba2_verify_classic_window(window_t, m, s, yc, states);
  EXPECT_LE(max_rel_err(yc, rows(truth_window.y, d, prefix, drafts)), tol) << "classic y " << where;
  ASSERT_EQ(states.size(), size_t(drafts));
  EXPECT_LE(max_rel_err(flat(s), flat(s_after)), tol) << "classic committed state " << where;
  std::vector<T> y_next;
  mamba2_decode_recurrent(mamba2_slice_tokens(seq_t, prefix + m, 2), s, y_next);
  EXPECT_LE(max_rel_err(y_next, rows(truth_seq.y, d, prefix + m, 2)), tol)
      << "classic next " << where;
}

TEST(Mamba2Verify, EveryDraftCountAndAcceptedLengthFromSeveralFills) {
  const Mamba2Dims d{1, 2, 16, 8};
  uint64_t seed = 1;
  for (int cap : {8, 16})
    for (int prefix : {0, 5, cap - 1, cap + 3})
      for (int drafts = 1; drafts <= 8; ++drafts)
        for (int m = 0; m <= drafts; ++m) {
          check_round<double>(d, cap, prefix, drafts, m, seed);
          check_round<float>(d, cap, prefix, drafts, m, seed++);
        }
}

TEST(Mamba2Verify, LargerHeadsAndGroups) {
  const Mamba2Dims d{2, 4, 128, 64};
  uint64_t seed = 900;
  for (int drafts : {1, 4, 8})
    for (int m : {0, drafts / 2, drafts}) {
      check_round<double>(d, 8, 6, drafts, m, seed);
      check_round<float>(d, 8, 6, drafts, m, seed++);
    }
}

// Verify on a direct-mode buffer (no state yet) reads S0 as zero and creates no state.
TEST(Mamba2Verify, DirectModeBuffer) {
  const Mamba2Dims d{2, 4, 16, 8};
  const Inputs in = make_inputs(d, 9, 3, {}, true);
  const Truth truth = recurrent_truth(in.x, in.s0);
  Mamba2KVBuffer<double> buf(d, 16);
  std::vector<double> y1(size_t(d.NH) * d.P), y;
  for (int t = 0; t < 5; ++t) buf.decode(in.x, t, y1.data());
  buf.verify(mamba2_slice_tokens(in.x, 5, 4), y);
  EXPECT_FALSE(buf.has_state());
  EXPECT_LE(max_rel_err(y, rows(truth.y, d, 5, 4)), kF64Tol);
  buf.accept(4);
  EXPECT_FALSE(buf.has_state());
  EXPECT_LE(max_rel_err(flat(buf.state()), flat(truth.state)), kF64Tol);
}

// Whole sequences through rounds of verify: every drafts in 1..8 and accept in 1..drafts, several
// capacities; y and the final state equal the recurrence.
TEST(Mamba2Verify, DriversOverWholeSequences) {
  const Mamba2Dims d{2, 4, 16, 8};
  const Inputs in = make_inputs(d, 65, 12);
  const Truth truth = recurrent_truth(in.x, in.s0);
  for (int drafts = 1; drafts <= 8; ++drafts)
    for (int accept = 1; accept <= drafts; ++accept) {
      const std::string what = "T=" + std::to_string(drafts) + " m=" + std::to_string(accept);
      for (int cap : {1, 2, 3, 8, 16, 64}) {
        if (drafts > cap) continue;
        Mamba2State<double> s = in.s0;
        std::vector<double> y;
        mamba2_verify_kvbuffer(in.x, cap, drafts, accept, s, y);
        expect_matches(y, s, truth, cap, "verify kvbuffer C=" + std::to_string(cap) + " " + what);
        Mamba2State<float> s32 = in.s32;
        std::vector<float> y32;
        mamba2_verify_kvbuffer(in.x32, cap, drafts, accept, s32, y32);
        expect_matches(y32, s32, truth, cap,
                       "verify kvbuffer C=" + std::to_string(cap) + " " + what);
      }
      Mamba2State<double> s = in.s0;
      std::vector<double> y;
      mamba2_verify_classic(in.x, drafts, accept, s, y);
      expect_matches(y, s, truth, 1, "verify classic " + what);
      Mamba2State<float> s32 = in.s32;
      std::vector<float> y32;
      mamba2_verify_classic(in.x32, drafts, accept, s32, y32);
      expect_matches(y32, s32, truth, 1, "verify classic " + what);
    }
}

}  // namespace
}  // namespace kvbuf::ref
