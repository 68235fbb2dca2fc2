// GPU tests of the GDN verify kernels against the float64 reference (the cases of
// kernels/gdn/checks/gdn_verify_checks.h), plus the dispatch's refusals of unsupported shapes.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/common/checks/check_common.h"
#include "kernels/gdn/checks/gdn_verify_checks.h"
#include "kernels/common/common.cuh"
#include "kernels/gdn/gdn_verify.h"
#include "kernels/common/tests/check_case_support.h"
#include "kernels/common/tests/commit_layers_support.h"

namespace kvbuf::verify_check {
namespace {

void run_and_expect_pass(const VerifyCase& c) {
  checks::expect_case_passes(qualified_name(c), describe(c), [&](uint64_t seed) { return run_verify_case(c, seed); });
}

class GdnVerifyKVBufferTest : public ::testing::TestWithParam<VerifyCase> {};

TEST_P(GdnVerifyKVBufferTest, MatchesRecurrentOfAcceptedTokens) { run_and_expect_pass(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Cases, GdnVerifyKVBufferTest,
                         ::testing::ValuesIn(checks::cases_of(verify_cases(false), VerifyMethod::KVBuffer)),
                         checks::CaseParamName());

class GdnVerifyClassicTest : public ::testing::TestWithParam<VerifyCase> {};

TEST_P(GdnVerifyClassicTest, MatchesRecurrentOfAcceptedTokens) { run_and_expect_pass(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Cases, GdnVerifyClassicTest,
                         ::testing::ValuesIn(checks::cases_of(verify_cases(false), VerifyMethod::Classic)),
                         checks::CaseParamName());

// Host only (ctest GdnVerifyCases.host_only, which CI without a GPU runs): qualified names, which
// `kvbuf check` prints and case seeds derive from, are unique across methods, and the quick subset
// `kvbuf check` runs is part of the full list. (gtest itself aborts the binary on an invalid or
// duplicate parameter name within a suite.)
TEST(GdnVerifyCases, QualifiedNamesUniqueQuickSubset) {
  checks::expect_unique_names_quick_subset(
      verify_cases(false), verify_cases(true), [](const VerifyCase& c) { return qualified_name(c); },
      [](const VerifyCase& c) { return describe(c); });
}

// ---- bad input --------------------------------------------------------------------------------

TEST(GdnVerifyBadInput, UnsupportedShapesThrow) {
  GdnVerifyKVBufferParams p;
  p.io.batch = 0;
  p.io.tokens = 4;
  p.capacity = 16;
  p.io.K = 96;
  EXPECT_THROW(gdn_verify_kvbuffer(p, 0), std::invalid_argument);
  p.io.K = 128;
  p.io.tokens = 9;
  EXPECT_THROW(gdn_verify_kvbuffer(p, 0), std::invalid_argument);
  p.io.tokens = 4;
  p.capacity = 3;  // C < T
  EXPECT_THROW(gdn_verify_kvbuffer(p, 0), std::invalid_argument);
  p.capacity = 16;
  p.io.batch = 2;  // null pointers
  EXPECT_THROW(gdn_verify_kvbuffer(p, 0), std::invalid_argument);
  EXPECT_THROW(gdn_verify_kvbuffer_commit(p, 0), std::invalid_argument);
  {  // more rows than the grid's z dimension holds; the pointers are never dereferenced
    GdnVerifyKVBufferParams big = p;
    static float sink[1];
    auto any = [](auto*& ptr) { ptr = reinterpret_cast<std::remove_reference_t<decltype(ptr)>>(sink); };
    any(big.io.slot), any(big.io.q), any(big.io.k), any(big.io.v), any(big.io.g), any(big.io.beta), any(big.io.out);
    any(big.state), any(big.buf_k), any(big.buf_val), any(big.buf_gcum), any(big.fill), any(big.has_state);
    any(big.win_k), any(big.win_u), any(big.win_gcum), any(big.win_base);
    big.io.H = 1, big.io.HV = 1, big.io.V = 128;
    big.io.batch = 65535 + 1;
    EXPECT_THROW(gdn_verify_kvbuffer(big, 0), std::invalid_argument);
    // Layers committed at once: none, or one whose batch differs from the first's.
    GdnVerifyKVBufferParams two[2] = {big, big};
    any(two[0].accept.accept_len), any(two[1].accept.accept_len);
    two[0].io.batch = 2, two[1].io.batch = 3;
    EXPECT_THROW(gdn_verify_kvbuffer_commit(two, 0, 0), std::invalid_argument);
    EXPECT_THROW(gdn_verify_kvbuffer_commit(two, 2, 0), std::invalid_argument);
    // A state type outside StateType, refused before any launch (the commit's copy never reads it).
    big.io.batch = 2;
    big.state_type = static_cast<StateType>(7);
    any(big.accept.accept_len);
    EXPECT_THROW(gdn_verify_kvbuffer(big, 0), std::invalid_argument);
    EXPECT_THROW(gdn_verify_kvbuffer_commit(big, 0), std::invalid_argument);
  }
  GdnVerifyClassicParams c;
  c.io.batch = 1;
  c.io.tokens = 4;
  c.io.V = 48;
  EXPECT_THROW(gdn_verify_classic(c, 0), std::invalid_argument);
  c.io.V = 128;
  EXPECT_THROW(gdn_verify_classic(c, 0), std::invalid_argument);  // null pointers
  {  // exactly one of step_states (copy) and step_slot (in place); the pointers are never dereferenced
    static float sink[1];
    auto any = [](auto*& ptr) { ptr = reinterpret_cast<std::remove_reference_t<decltype(ptr)>>(sink); };
    any(c.io.slot), any(c.io.q), any(c.io.k), any(c.io.v), any(c.io.g), any(c.io.beta), any(c.io.out), any(c.state);
    EXPECT_THROW(gdn_verify_classic(c, 0), std::invalid_argument);  // neither
    any(c.step_states), any(c.step_slot), any(c.accept.accept_len);
    EXPECT_THROW(gdn_verify_classic(c, 0), std::invalid_argument);  // both
    c.step_states = nullptr;
    EXPECT_THROW(gdn_verify_classic_commit(c, 0), std::invalid_argument);  // in place commits by index
    c.state_type = static_cast<StateType>(7);  // outside StateType: refused before any launch
    EXPECT_THROW(gdn_verify_classic(c, 0), std::invalid_argument);
    c.step_slot = nullptr, any(c.step_states);
    EXPECT_THROW(gdn_verify_classic_commit(c, 0), std::invalid_argument);
    c.state_type = StateType::FP32, c.step_slot = reinterpret_cast<const int32_t*>(sink), c.step_states = nullptr;
    c.io.batch = 65535 + 1;
    EXPECT_THROW(gdn_verify_classic(c, 0), std::invalid_argument);  // more rows than the grid's z holds
  }
}

// GPU: the commit of 2 layer tables' worth of layers in one call (two launches) leaves every
// layer's pools as one commit per layer does; random scratch, bases and accepted nodes, a padding
// row, T < C and T == C (the commit's fold, which writes the state in its type).
void expect_commit_layers_equal_per_layer(StateType state_type) {
  const int B = checks::CommitRows::kRows, slots = checks::CommitRows::kSlots, T = checks::CommitRows::kTokens;
  auto make = [&](checks::CommitLayerTensors& l, std::mt19937_64& r, int C, const checks::CommitRows& rows) {
    GdnVerifyKVBufferParams p;
    GdnVerifyIO& io = p.io;
    io.batch = B, io.tokens = T, io.H = 2, io.HV = 4, io.K = 64, io.V = 64;
    io.slot = rows.slot.as<int32_t>();
    io.q = io.k = io.v = io.out = rows.io.as<__nv_bfloat16>();
    io.g = io.beta = rows.io.as<float>();
    p.entry = EntryType::BF16;
    p.capacity = C;
    p.accept = VerifyAccept{rows.len.as<int32_t>(), C == T ? nullptr : rows.nodes.as<int32_t>()};
    const size_t entries = size_t(slots) * C, window = size_t(B) * T;
    // 16-bit states: random bf16 values in [-1, 1] (finite read as fp16 too: the exponent field
    // stays far from fp16's inf).
    const size_t state_elems = size_t(slots) * io.HV * io.V * io.K;
    p.state_type = state_type;
    if (state_type == StateType::FP32)
      p.state = l.add_f32(state_elems, r, -1.f, 1.f);
    else
      p.state = l.add_bf16(state_elems, r);
    p.buf_k = l.add_bf16(entries * io.H * io.K, r);
    p.buf_val = l.add_bf16(entries * io.HV * io.V, r);
    p.buf_gcum = l.add_f32(entries * io.HV, r, -2.f, 0.f);
    p.fill = l.add_ints(slots, r, C);
    p.has_state = l.add_ints(slots, r, 2);
    p.win_k = l.add_bf16(window * io.H * io.K, r);
    p.win_u = l.add_bf16(window * io.HV * io.V, r);
    p.win_gcum = l.add_f32(window * io.HV, r, -2.f, 0.f);
    p.win_base = l.add_bases(B, C, T, r);
    return p;
  };
  checks::expect_layers_commit_equals_per_layer<GdnVerifyKVBufferParams>(
      kGdnVerifyCommitLayersPerLaunch + 2, 4, make,
      [](const GdnVerifyKVBufferParams& p, cudaStream_t s) { gdn_verify_kvbuffer_commit(p, s); },
      [](const GdnVerifyKVBufferParams* p, int n, cudaStream_t s) { gdn_verify_kvbuffer_commit(p, n, s); });
}
TEST(GdnVerifyCommitLayers, EqualsOneCommitPerLayer) { expect_commit_layers_equal_per_layer(StateType::FP32); }
TEST(GdnVerifyCommitLayers, EqualsOneCommitPerLayerBf16State) { expect_commit_layers_equal_per_layer(StateType::BF16); }
TEST(GdnVerifyCommitLayers, EqualsOneCommitPerLayerFp16State) { expect_commit_layers_equal_per_layer(StateType::FP16); }

}  // namespace
}  // namespace kvbuf::verify_check
