// Bad arguments: every entry point throws std::invalid_argument whose message names the problem
// (C = 0, T > C, negative sizes, HV not a multiple of H, out-of-range accept, bad trees, wrong
// state shape, gates out of range), never a crash or a silently wrong result.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <stdexcept>

#include "reference/tests/test_gdn_util.h"

namespace kvbuf::ref::test {
namespace {

void expect_invalid(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected std::invalid_argument mentioning '" << needle << "'";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message '" << e.what() << "' does not mention '" << needle << "'";
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
  }
}

struct Fixture : ::testing::Test {
  GdnDims d{1, 2, 16, 8};
  std::mt19937_64 rng{9};
  GdnTokens<double> x = make_random_gdn_tokens<double>(d, 6, rng);
  GdnState<double> s = make_random_gdn_state<double>(d, rng);
  std::vector<double> o;
};

using GdnErrors = Fixture;

TEST_F(GdnErrors, CapacityZero) {
  for (int C : {0, -3}) {
    expect_invalid([&] { gdn_decode_kvbuffer(x, C, BufferVariant::Raw, s, o); }, "capacity");
    expect_invalid([&] { gdn_decode_direct(x, C, BufferVariant::CachedU, s, o); }, "capacity");
    expect_invalid([&] { gdn_verify_kvbuffer(x, C, BufferVariant::CachedU, 1, 1, s, o); },
                   "capacity");
    expect_invalid([&] { GdnKVBuffer<double>(d, C, BufferVariant::Raw, s); }, "capacity");
    expect_invalid([&] { GdnKVBuffer<float>(d, C, BufferVariant::Raw); }, "capacity");
  }
}

TEST_F(GdnErrors, WindowLargerThanCapacity) {
  expect_invalid([&] { gdn_verify_kvbuffer(x, 4, BufferVariant::Raw, 5, 1, s, o); },
                 "exceed the buffer capacity");
  GdnKVBuffer<double> buf(d, 4, BufferVariant::CachedU, s);
  expect_invalid([&] { buf.verify(gdn_slice_tokens(x, 0, 5), o); }, "exceed the buffer capacity");
  // A tree may have more nodes than C, but no root path longer than C.
  EXPECT_NO_THROW(buf.verify(gdn_slice_tokens(x, 0, 6), {0, 0, 0, 1, 2, 3}, o));
  expect_invalid([&] { buf.verify(gdn_slice_tokens(x, 0, 5), {0, 1, 2, 3, 4}, o); },
                 "exceed the buffer capacity");
  EXPECT_EQ(buf.fill(), 0);  // a rejected call changes nothing
  EXPECT_EQ(buf.folds(), 0);
}

TEST_F(GdnErrors, NegativeOrZeroSizes) {
  for (GdnDims bad : {GdnDims{0, 1, 16, 8}, GdnDims{1, -1, 16, 8}, GdnDims{1, 1, 0, 8},
                      GdnDims{1, 1, 16, -8}}) {
    expect_invalid([&] { gdn_validate_dims(bad); }, "positive");
    expect_invalid([&] { gdn_zero_state<double>(bad); }, "positive");
    expect_invalid([&] { make_random_gdn_tokens<double>(bad, 3, rng); }, "positive");
  }
  expect_invalid([&] { make_random_gdn_tokens<double>(d, -1, rng); }, "steps");
  GdnTokens<double> neg = x;
  neg.steps = -2;
  expect_invalid([&] { gdn_decode_recurrent(neg, s, o); }, "steps");
  expect_invalid([&] { gdn_slice_tokens(x, -1, 2); }, "range");
  expect_invalid([&] { gdn_slice_tokens(x, 4, 3); }, "range");
  expect_invalid([&] { gdn_prefill_chunk(x, 0, s, o); }, "chunk");
  expect_invalid([&] { gdn_verify_classic(x, 0, 1, s, o); }, "drafts");
  GdnKVBuffer<double> buf(d, 4, BufferVariant::Raw, s);
  expect_invalid([&] { buf.verify(gdn_slice_tokens(x, 0, 0), o); }, "at least one token");
  expect_invalid([&] { buf.decode(x, 6, o.data()); }, "outside");
}

TEST_F(GdnErrors, ValueHeadsNotMultipleOfKeyHeads) {
  GdnTokens<double> y = x;
  y.dims = GdnDims{2, 3, 16, 8};
  expect_invalid([&] { gdn_validate_dims(y.dims); }, "multiple");
  expect_invalid([&] { gdn_decode_recurrent(y, s, o); }, "multiple");
  expect_invalid([&] { GdnKVBuffer<double>(y.dims, 4, BufferVariant::Raw); }, "multiple");
}

TEST_F(GdnErrors, AcceptedLengthOutOfRange) {
  for (int m : {0, 5})
    expect_invalid([&] { gdn_verify_kvbuffer(x, 8, BufferVariant::Raw, 4, m, s, o); },
                   "accepted length");
  expect_invalid([&] { gdn_verify_classic(x, 4, 5, s, o); }, "accepted length");
  std::vector<GdnState<double>> states;
  expect_invalid([&] { gdn_verify_classic_window(gdn_slice_tokens(x, 0, 3), 4, s, o, states); },
                 "accepted length");
  GdnKVBuffer<double> buf(d, 8, BufferVariant::CachedU, s);
  EXPECT_THROW(buf.accept(1), std::logic_error);  // nothing verified yet
  buf.verify(gdn_slice_tokens(x, 0, 3), o);
  expect_invalid([&] { buf.accept(4); }, "accepted length");
  expect_invalid([&] { buf.accept(-1); }, "accepted length");
  EXPECT_NO_THROW(buf.accept(3));
}

TEST_F(GdnErrors, BadTrees) {
  GdnKVBuffer<double> buf(d, 8, BufferVariant::Raw, s);
  const GdnTokens<double> w = gdn_slice_tokens(x, 0, 3);
  expect_invalid([&] { buf.verify(w, {0, 2, 1}, o); }, "parent of node 2");
  expect_invalid([&] { buf.verify(w, {0, -1, 1}, o); }, "parent of node 2");
  expect_invalid([&] { buf.verify(w, {0, 1}, o); }, "parents");
  buf.verify(w, {0, 1, 1}, o);
  expect_invalid([&] { buf.accept_path({2}); }, "not a child");
  expect_invalid([&] { buf.accept_path({1, 2, 3}); }, "not a child");
  expect_invalid([&] { buf.accept_path({1, 4}); }, "outside");
  EXPECT_NO_THROW(buf.accept_path({1, 3}));
  EXPECT_EQ(buf.fill(), 2);
}

TEST_F(GdnErrors, WrongStateShape) {
  GdnState<double> wrong_heads(3, Mat<double>::Zero(d.K, d.V));
  expect_invalid([&] { gdn_decode_recurrent(x, wrong_heads, o); }, "heads");
  GdnState<double> wrong_dims(d.HV, Mat<double>::Zero(d.V, d.K));
  expect_invalid([&] { gdn_decode_kvbuffer(x, 4, BufferVariant::Raw, wrong_dims, o); }, "K x V");
  expect_invalid([&] { GdnKVBuffer<double>(d, 4, BufferVariant::Raw, wrong_dims); }, "K x V");
}

TEST_F(GdnErrors, InputsOutOfRange) {
  GdnTokens<double> y = x;
  y.g[3] = 0.25;
  expect_invalid([&] { gdn_decode_recurrent(y, s, o); }, "g is a log decay");
  y = x;
  y.beta[1] = 1.5;
  expect_invalid([&] { gdn_prefill_chunk(y, 16, s, o); }, "beta");
  y = x;
  y.q[0] = NAN;
  expect_invalid([&] { gdn_decode_kvbuffer(y, 4, BufferVariant::CachedU, s, o); }, "non-finite");
  y = x;
  y.v.pop_back();
  expect_invalid([&] { gdn_decode_recurrent(y, s, o); }, "v has");
  expect_invalid([&] { make_random_gdn_tokens<double>(d, 3, rng, GateRange{-1, 0.5}); },
                 "g_max <= 0");
}

}  // namespace
}  // namespace kvbuf::ref::test
