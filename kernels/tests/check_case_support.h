// What the GPU check tests (test_gdn_decode.cu, test_gdn_verify.cu) share: the base seed, gtest
// parameter names, and the reproduction note every failure carries.
#pragma once
#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace kvbuf::checks {

// The base seed of every case's inputs (checks::case_seed mixes in the case's name): fixed, so a
// failure reproduces run after run; KVBUF_TEST_SEED=N explores other inputs.
inline constexpr uint64_t kDefaultTestSeed = 1;
inline uint64_t test_base_seed() {
  const char* env = std::getenv("KVBUF_TEST_SEED");
  if (!env || !*env) return kDefaultTestSeed;
  const std::string text = env;
  size_t used = 0;
  unsigned long long seed = 0;
  try {
    seed = std::stoull(text, &used, 10);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text[0] == '-')
    throw std::invalid_argument("KVBUF_TEST_SEED must be a non-negative integer, got '" + text + "'");
  return seed;
}

// A case name as a gtest parameter name: letters, digits and '_' only.
inline std::string gtest_param_name(const std::string& case_name) {
  std::string n = case_name;
  for (char& ch : n)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return n;
}

// The case, its seed and how to rerun just this test with the same inputs.
inline std::string reproduction_note(const std::string& case_description, uint64_t case_seed, uint64_t base_seed) {
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  return "\n  case " + case_description + "\n  case seed " + std::to_string(case_seed) +
         "; rerun with KVBUF_TEST_SEED=" + std::to_string(base_seed) + " --gtest_filter='" + t->test_suite_name() +
         "." + t->name() + "'";
}

}  // namespace kvbuf::checks
