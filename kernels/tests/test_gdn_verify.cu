// GPU tests of the GDN verify kernels against the float64 reference (cases and tolerances in
// test_gdn_verify_cases.h), plus the dispatch's refusals of unsupported shapes.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/tests/test_gdn_verify_cases.h"

namespace kvbuf::verify_check {
namespace {

std::vector<VerifyCase> cases_of(VerifyMethod method) {
  std::vector<VerifyCase> r;
  for (const auto& c : verify_cases(false))
    if (c.method == method) r.push_back(c);
  return r;
}

// A fixed seed per case (per method and name), so that a failure reproduces run after run.
uint64_t case_seed(const VerifyCase& c) {
  return uint64_t((c.method == VerifyMethod::KVBuffer ? 0x5eed0000u : 0xc1a55000u) + std::hash<std::string>{}(c.name));
}

void run_and_expect_pass(const VerifyCase& c) {
  const uint64_t seed = case_seed(c);
  const VerifyResult r = run_verify_case(c, seed);
  std::printf("%s (seed %llu)\n", r.line(c.name).c_str(), (unsigned long long)seed);
  EXPECT_TRUE(r.passed) << r.message;
  EXPECT_GT(r.outputs_checked, 0);
  EXPECT_GT(r.states_checked, 0);
}

std::string case_name(const ::testing::TestParamInfo<VerifyCase>& info) { return info.param.name; }

class GdnVerifyKVBufferTest : public ::testing::TestWithParam<VerifyCase> {};

TEST_P(GdnVerifyKVBufferTest, MatchesRecurrentOfAcceptedTokens) { run_and_expect_pass(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Cases, GdnVerifyKVBufferTest, ::testing::ValuesIn(cases_of(VerifyMethod::KVBuffer)),
                         case_name);

class GdnVerifyClassicTest : public ::testing::TestWithParam<VerifyCase> {};

TEST_P(GdnVerifyClassicTest, MatchesRecurrentOfAcceptedTokens) { run_and_expect_pass(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Cases, GdnVerifyClassicTest, ::testing::ValuesIn(cases_of(VerifyMethod::Classic)),
                         case_name);

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
    c.io.batch = 65535 + 1;
    EXPECT_THROW(gdn_verify_classic(c, 0), std::invalid_argument);  // more rows than the grid's z holds
  }
}

}  // namespace
}  // namespace kvbuf::verify_check
