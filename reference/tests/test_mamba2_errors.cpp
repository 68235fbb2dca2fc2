// Mamba-2 reference: bad arguments throw std::invalid_argument whose message names the problem.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>

#include "reference/tests/test_mamba2_util.h"

namespace kvbuf::ref {
namespace {

using namespace test_mamba2;

void expect_invalid(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one mentioning \"" << needle << "\"";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message \"" << e.what() << "\" lacks \"" << needle << "\"";
  }
}

class Mamba2Errors : public ::testing::Test {
 protected:
  const Mamba2Dims d{2, 4, 16, 8};
  const Inputs in = make_inputs(d, 6, 5);
  std::vector<double> y;
};

TEST_F(Mamba2Errors, Dims) {
  for (Mamba2Dims bad : {Mamba2Dims{0, 4, 16, 8}, Mamba2Dims{2, -4, 16, 8}, Mamba2Dims{2, 4, 0, 8},
                         Mamba2Dims{2, 4, 16, 0}})
    expect_invalid([&] { mamba2_validate_dims(bad); }, "dims must be positive");
  expect_invalid([&] { mamba2_validate_dims({3, 4, 16, 8}); }, "not divisible by groups");
  expect_invalid([&] { mamba2_zero_state<double>({3, 4, 16, 8}); }, "not divisible");
  expect_invalid([&] { Mamba2KVBuffer<double>({2, 4, 0, 8}, 4); }, "dims must be positive");
}

TEST_F(Mamba2Errors, TokenArrays) {
  auto x = in.x;
  x.steps = -1;
  expect_invalid([&] { mamba2_validate(x); }, "steps must be >= 0");
  for (auto member :
       {&Mamba2Tokens<double>::x, &Mamba2Tokens<double>::B, &Mamba2Tokens<double>::C,
        &Mamba2Tokens<double>::dt, &Mamba2Tokens<double>::A, &Mamba2Tokens<double>::D}) {
    auto bad = in.x;
    (bad.*member).pop_back();
    expect_invalid([&] { mamba2_validate(bad); }, "elements, expected");
    auto s = in.s0;
    expect_invalid([&] { mamba2_decode_recurrent(bad, s, y); }, "elements, expected");
  }
  for (double dt : {0.0, -0.1, std::nan(""), std::numeric_limits<double>::infinity()}) {
    auto bad = in.x;
    bad.dt[3] = dt;
    expect_invalid([&] { mamba2_validate(bad); }, "dt must be positive and finite");
    Mamba2KVBuffer<double> buf(d, 4, in.s0);
    std::vector<double> y1(size_t(d.NH) * d.P);
    expect_invalid([&] { buf.decode(bad, 0, y1.data()); }, "dt must be positive");
  }
  for (double A : {0.0, 0.5, std::nan("")}) {
    auto bad = in.x;
    bad.A[1] = A;
    expect_invalid([&] { mamba2_validate(bad); }, "A must be negative and finite");
  }
}

TEST_F(Mamba2Errors, StateShape) {
  auto s = in.s0;
  s.pop_back();
  expect_invalid([&] { mamba2_decode_recurrent(in.x, s, y); },
                 "state has 3 heads, expected NH = 4");
  s = in.s0;
  s[2] = Mat<double>::Zero(16, 8);
  expect_invalid([&] { mamba2_prefill_chunk(in.x, 16, s, y); }, "expected P x N = 8 x 16");
  expect_invalid([&] { Mamba2KVBuffer<double>(d, 4, s); }, "expected P x N");
  std::vector<Mamba2State<double>> states;
  expect_invalid([&] { mamba2_verify_classic_window(in.x, 1, s, y, states); }, "expected P x N");
}

TEST_F(Mamba2Errors, ChunkCapacityDraftsAccept) {
  auto s = in.s0;
  expect_invalid([&] { mamba2_prefill_chunk(in.x, 0, s, y); }, "chunk must be >= 1");
  expect_invalid([&] { mamba2_decode_kvbuffer(in.x, 0, s, y); }, "capacity must be >= 1");
  expect_invalid([&] { mamba2_decode_direct(in.x, -3, s, y); }, "capacity must be >= 1");
  expect_invalid([&] { mamba2_verify_kvbuffer(in.x, 4, 5, 1, s, y); },
                 "drafts T = 5 exceed buffer capacity C = 4");
  expect_invalid([&] { mamba2_verify_kvbuffer(in.x, 4, 0, 1, s, y); }, "drafts must be >= 1");
  expect_invalid([&] { mamba2_verify_kvbuffer(in.x, 4, 3, 4, s, y); },
                 "accept must be in 1..drafts");
  expect_invalid([&] { mamba2_verify_classic(in.x, 3, 0, s, y); }, "accept must be in 1..drafts");
  std::vector<Mamba2State<double>> states;
  expect_invalid([&] { mamba2_verify_classic_window(in.x, 7, s, y, states); },
                 "accepted length 7 outside 0..6");
  expect_invalid(
      [&] { mamba2_verify_classic_window(mamba2_slice_tokens(in.x, 0, 0), 0, s, y, states); },
      "at least one token");

  Mamba2KVBuffer<double> buf(d, 4, in.s0);
  expect_invalid([&] { buf.accept(0); }, "accept without a preceding verify");
  expect_invalid([&] { buf.verify(in.x, y); }, "verify window T = 6 exceeds buffer capacity C = 4");
  expect_invalid([&] { buf.verify(mamba2_slice_tokens(in.x, 0, 0), y); }, "at least one token");
  buf.verify(mamba2_slice_tokens(in.x, 0, 3), y);
  expect_invalid([&] { buf.accept(4); }, "accepted length 4 outside 0..3");
  expect_invalid([&] { buf.accept(-1); }, "accepted length -1 outside 0..3");
  std::vector<double> y1(size_t(d.NH) * d.P);
  expect_invalid([&] { buf.decode(in.x, 6, y1.data()); }, "token 6 outside 0..5");
  std::mt19937_64 rng(1);
  const auto other = make_random_mamba2_tokens<double>({1, 4, 16, 8}, 2, rng);
  expect_invalid([&] { buf.decode(other, 0, y1.data()); }, "tokens have dims");
  expect_invalid([&] { buf.verify(other, y); }, "tokens have dims");
}

TEST_F(Mamba2Errors, SlicesAndRandomRanges) {
  expect_invalid([&] { mamba2_slice_tokens(in.x, 4, 3); }, "token slice [4, 7) outside [0, 6)");
  expect_invalid([&] { mamba2_slice_tokens(in.x, -1, 1); }, "outside");
  std::mt19937_64 rng(1);
  expect_invalid([&] { make_random_mamba2_tokens<double>(d, -1, rng); }, "steps must be >= 0");
  expect_invalid(
      [&] {
        make_random_mamba2_tokens<double>(d, 3, rng, {0.0, 1.0, -1.0, -0.5});
      },
      "0 < dt_min <= dt_max");
  expect_invalid(
      [&] {
        make_random_mamba2_tokens<double>(d, 3, rng, {0.1, 1.0, -1.0, 0.0});
      },
      "A_min <= A_max < 0");
  expect_invalid([&] { mamba2_f32_tolerance(in.x, in.s0, 0); }, "window must be >= 1");
}

}  // namespace
}  // namespace kvbuf::ref
