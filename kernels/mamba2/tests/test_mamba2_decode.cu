// GPU tests of the Mamba-2 decode kernels against the float64 reference (the cases of
// kernels/mamba2/checks/mamba2_decode_checks.h), plus the dispatch's refusals of unsupported shapes and the
// case list's checks (host only: they throw or finish before any CUDA call, so CI without a GPU runs
// them too).
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/common/checks/check_common.h"
#include "kernels/mamba2/checks/mamba2_decode_checks.h"
#include "kernels/mamba2/mamba2_decode.h"
#include "kernels/common/tests/check_case_support.h"

namespace kvbuf::mamba2_check {
namespace {

class Mamba2Decode : public ::testing::TestWithParam<Mamba2DecodeCase> {};

TEST_P(Mamba2Decode, MatchesFloat64Reference) {
  const Mamba2DecodeCase& cs = GetParam();
  checks::expect_case_passes(cs.name, describe(cs), [&](uint64_t seed) { return run_decode_case(cs, seed); });
}

INSTANTIATE_TEST_SUITE_P(Cases, Mamba2Decode, ::testing::ValuesIn(decode_cases(false)), checks::CaseParamName());

// The control of the late-inputs cases (check_case_support.h).
TEST(Mamba2DecodeLateWrites, PoolsWrittenLateAreReadEarly) {
  checks::expect_late_pools_seen(decode_cases(false), run_decode_case, [](const Mamba2DecodeCase& c) { return describe(c); });
}

// Host only: case names (which case seeds derive from) unique, and the quick subset `kvbuf check`
// runs part of the full list (gtest also aborts the binary on an invalid or duplicate parameter
// name).
TEST(Mamba2DecodeCases, QuickIsASubset) {
  const auto quick = decode_cases(true);
  checks::expect_unique_names_quick_subset(
      decode_cases(false), quick, [](const Mamba2DecodeCase& c) { return c.name; },
      [](const Mamba2DecodeCase& c) { return describe(c); });
  EXPECT_GE(quick.size(), 10u);
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

// Recurrent Params of one row with every pointer set (to fake storage) and head dims N, P.
Mamba2RecurrentParams fake_recurrent_params(int N, int P) {
  Mamba2RecurrentParams p;
  p.io.batch = 1, p.io.G = 1, p.io.NH = 2, p.io.P = P, p.io.N = N;
  p.io.slot = fake<const int32_t>();
  p.io.x = p.io.B = p.io.C = p.io.dt = fake<const __nv_bfloat16>();
  p.io.A = p.io.D = fake<const float>();
  p.io.out = fake<__nv_bfloat16>();
  p.state = fake<float>();
  return p;
}

TEST(Mamba2DecodeDispatch, RefusesUnsupportedShapes) {
  Mamba2RecurrentParams p = fake_recurrent_params(96, 64);
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
  b.done_count = fake<int32_t>(), b.path = DecodePath::Split;
  expect_refusal([&] { mamba2_decode_kvbuffer(b, 0); }, "the split path is mamba2_decode_direct's");
  b.path = DecodePath::Auto, b.every_row_has_state = true;  // a promise direct mode cannot keep
  expect_refusal([&] { mamba2_decode_direct(b, 0); }, "every_row_has_state contradicts direct mode");
  b.every_row_has_state = false, b.path = DecodePath::Split;
  expect_refusal([&] { mamba2_decode_direct(b, 0); }, "the split path needs row_fill/row_has_state");
  b.row_fill = b.row_has_state = fake<const int32_t>(), b.io.P = 128;
  expect_refusal([&] { mamba2_decode_direct(b, 0); }, "P <= 64");
  // Wider warps only for mamba2_decode_kvbuffer with a 16-bit state, dividing the block's rows.
  b.row_fill = b.row_has_state = nullptr, b.path = DecodePath::Auto, b.io.P = 64, b.warp_rows = 16;
  expect_refusal([&] { mamba2_decode_kvbuffer(b, 0); }, "unsupported warp_rows 16");  // fp32 state
  b.state_type = StateType::BF16, b.warp_rows = 12;
  expect_refusal([&] { mamba2_decode_kvbuffer(b, 0); }, "unsupported warp_rows 12");
  b.warp_rows = 32, b.io.rows_per_block = 16;
  expect_refusal([&] { mamba2_decode_kvbuffer(b, 0); }, "dividing the 16 rows per block");
  b.io.rows_per_block = 0, b.warp_rows = 16;
  expect_refusal([&] { mamba2_decode_direct(b, 0); }, "unsupported warp_rows 16");
}

// A state dtype outside StateType: refused by the one dispatch, before any launch.
TEST(Mamba2DecodeDispatch, RefusesUnknownStateType) {
  Mamba2RecurrentParams p = fake_recurrent_params(128, 64);
  p.state_type = static_cast<StateType>(7);
  expect_refusal([&] { mamba2_decode_recurrent(p, 0); }, "unsupported state dtype");
  Mamba2KVBufferParams b;
  b.io = p.io, b.capacity = 8, b.state = p.state, b.state_type = p.state_type;
  b.buf_k = b.buf_val = fake<__nv_bfloat16>();
  b.buf_gcum = b.buf_beta = fake<float>();
  b.fill = b.has_state = b.done_count = fake<int32_t>();
  expect_refusal([&] { mamba2_decode_kvbuffer(b, 0); }, "unsupported state dtype");
  expect_refusal([&] { mamba2_decode_direct(b, 0); }, "unsupported state dtype");
  b.row_fill = b.row_has_state = fake<const int32_t>(), b.every_row_has_state = true, b.capacity = 1;
  expect_refusal([&] { mamba2_decode_kvbuffer(b, 0); }, "unsupported state dtype");  // the recurrent route
}

}  // namespace
}  // namespace kvbuf::mamba2_check
