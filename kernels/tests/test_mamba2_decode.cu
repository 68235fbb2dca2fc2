// GPU tests of the Mamba-2 decode kernels against the float64 reference (the cases of
// kernels/checks/mamba2_decode_checks.h), plus the dispatch's refusals of unsupported shapes and the
// case list's checks (host only: they throw or finish before any CUDA call, so CI without a GPU runs
// them too).
#include <gtest/gtest.h>

#include <cstdio>
#include <exception>
#include <set>
#include <stdexcept>
#include <string>

#include "kernels/checks/check_common.h"
#include "kernels/checks/mamba2_decode_checks.h"
#include "kernels/mamba2_decode.h"
#include "kernels/tests/check_case_support.h"

namespace kvbuf::mamba2_check {
namespace {

class Mamba2Decode : public ::testing::TestWithParam<Mamba2DecodeCase> {};

TEST_P(Mamba2Decode, MatchesFloat64Reference) {
  const Mamba2DecodeCase& cs = GetParam();
  const uint64_t base_seed = checks::test_base_seed();
  const uint64_t seed = checks::case_seed(base_seed, cs.name);
  const std::string note = checks::reproduction_note(describe(cs), seed, base_seed);
  CaseResult r;
  try {
    r = run_decode_case(cs, seed);
  } catch (const std::exception& e) {
    FAIL() << "threw: " << e.what() << note;
  }
  std::printf("%s (case seed %llu)\n", r.line(cs.name).c_str(), (unsigned long long)seed);
  EXPECT_TRUE(r.passed) << r.line(cs.name) << note;
  EXPECT_GT(r.outputs_checked, 0) << note;
  EXPECT_GT(r.states_checked, 0) << note;
}

INSTANTIATE_TEST_SUITE_P(Cases, Mamba2Decode, ::testing::ValuesIn(decode_cases(false)),
                         [](const ::testing::TestParamInfo<Mamba2DecodeCase>& info) {
                           return checks::gtest_param_name(info.param.name);
                         });

// Host only: the quick subset `kvbuf check` runs is part of the full list (gtest aborts the binary
// on an invalid or duplicate parameter name).
TEST(Mamba2DecodeCases, QuickIsASubset) {
  std::set<std::string> names;
  for (const auto& c : decode_cases(false)) names.insert(c.name);
  const auto quick = decode_cases(true);
  EXPECT_GE(quick.size(), 10u);
  EXPECT_LT(quick.size(), names.size());
  for (const auto& c : quick) EXPECT_EQ(names.count(c.name), 1u) << describe(c);
}

// Expects `run` to throw std::invalid_argument whose message contains `needle`.
template <class F>
void expect_refusal(F&& run, const std::string& needle) {
  try {
    run();
    ADD_FAILURE() << "no exception, expected one containing '" << needle << "'";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// Never dereferenced: every refusal below happens on the host, before a launch.
template <class T>
T* fake() {
  alignas(16) static char storage[16];
  return reinterpret_cast<T*>(storage);
}

TEST(Mamba2DecodeDispatch, RefusesUnsupportedShapes) {
  Mamba2RecurrentParams p;
  p.io.batch = 1, p.io.G = 1, p.io.NH = 2, p.io.P = 64, p.io.N = 96;
  p.io.slot = fake<const int32_t>();
  p.io.x = p.io.B = p.io.C = p.io.dt = fake<const __nv_bfloat16>();
  p.io.A = p.io.D = fake<const float>();
  p.io.out = fake<__nv_bfloat16>();
  p.state = fake<float>();
  expect_refusal([&] { mamba2_decode_recurrent(p, 0); }, "unsupported head dims");
  p.io.N = 128, p.io.P = 12;
  expect_refusal([&] { mamba2_decode_recurrent(p, 0); }, "unsupported head dims");
  p.io.P = 64, p.io.rows_per_block = 24;
  expect_refusal([&] { mamba2_decode_recurrent(p, 0); }, "unsupported rows_per_block");
  p.io.P = 32, p.io.rows_per_block = 64;  // does not divide P
  expect_refusal([&] { mamba2_decode_recurrent(p, 0); }, "unsupported rows_per_block");
  p.io.P = 64, p.io.rows_per_block = 0, p.io.batch = 65536;  // beyond the grid's z dimension
  expect_refusal([&] { mamba2_decode_recurrent(p, 0); }, "unsupported batch");
  p.io.batch = 1, p.io.NH = 3, p.io.G = 2;
  expect_refusal([&] { mamba2_decode_recurrent(p, 0); }, "multiple of G");
  p.io.NH = 2, p.io.G = 1, p.io.dt = nullptr;
  expect_refusal([&] { mamba2_decode_recurrent(p, 0); }, "must be set");

  Mamba2KVBufferParams b;
  b.io = p.io;
  b.io.dt = fake<const __nv_bfloat16>();
  b.state = fake<float>();
  b.buf_k = b.buf_val = fake<__nv_bfloat16>();
  b.buf_gcum = b.buf_beta = fake<float>();
  b.fill = b.has_state = b.done_count = fake<int32_t>();
  b.io.N = 96;
  expect_refusal([&] { mamba2_decode_kvbuffer(b, 0); }, "unsupported head dims");
  expect_refusal([&] { mamba2_decode_direct(b, 0); }, "unsupported head dims");
  b.io.N = 128, b.capacity = 65;
  expect_refusal([&] { mamba2_decode_kvbuffer(b, 0); }, "unsupported capacity");
  b.capacity = 0;
  expect_refusal([&] { mamba2_decode_direct(b, 0); }, "unsupported capacity");
  b.capacity = 8, b.buf_beta = nullptr;
  expect_refusal([&] { mamba2_decode_kvbuffer(b, 0); }, "must be set");
  b.buf_beta = fake<float>(), b.row_fill = fake<const int32_t>();  // row_has_state missing
  expect_refusal([&] { mamba2_decode_kvbuffer(b, 0); }, "both row_fill and row_has_state");
  b.row_fill = nullptr, b.done_count = nullptr;
  expect_refusal([&] { mamba2_decode_kvbuffer(b, 0); }, "done_count must be set");
}

}  // namespace
}  // namespace kvbuf::mamba2_check
