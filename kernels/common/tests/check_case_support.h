// What the GPU check tests (test_gdn_decode.cu, test_gdn_verify.cu, test_mamba2_decode.cu,
// test_mamba2_verify.cu) share: the base seed, gtest parameter names, the reproduction note every
// failure carries, running one case, and the case lists' checks.
#pragma once
#include <gtest/gtest.h>

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/common/checks/check_common.h"

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

// gtest's parameter name of a check case (INSTANTIATE_TEST_SUITE_P's name generator): its name
// (unqualified: the suite says the method) as gtest_param_name.
struct CaseParamName {
  template <class Case>
  std::string operator()(const ::testing::TestParamInfo<Case>& info) const {
    return gtest_param_name(info.param.name);
  }
};

// The cases of `all` with the given method (a verify family's KVBuffer or classic cases), in order.
template <class Case, class Method>
std::vector<Case> cases_of(const std::vector<Case>& all, Method method) {
  std::vector<Case> r;
  for (const auto& c : all)
    if (c.method == method) r.push_back(c);
  return r;
}

// The case, its seed and how to rerun just this test with the same inputs.
inline std::string reproduction_note(const std::string& case_description, uint64_t case_seed, uint64_t base_seed) {
  const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
  return "\n  case " + case_description + "\n  case seed " + std::to_string(case_seed) +
         "; rerun with KVBUF_TEST_SEED=" + std::to_string(base_seed) + " --gtest_filter='" + t->test_suite_name() +
         "." + t->name() + "'";
}

// One check case under gtest: runs it on its seed (case_seed of the base seed and `name`, the name
// its family's seeds derive from), prints its line, and expects a pass with outputs and states
// checked; a case that throws fails. Every failure carries the reproduction note. run_case(seed)
// returns a result with passed, line(name), outputs_checked and states_checked (every family's).
template <class RunCase>
void expect_case_passes(const std::string& name, const std::string& description, RunCase run_case) {
  const uint64_t base_seed = test_base_seed();
  const uint64_t seed = case_seed(base_seed, name);
  const std::string note = reproduction_note(description, seed, base_seed);
  decltype(run_case(seed)) r;
  try {
    r = run_case(seed);
  } catch (const std::exception& e) {
    FAIL() << "threw: " << e.what() << note;
  }
  std::printf("%s (case seed %llu)\n", r.line(name).c_str(), (unsigned long long)seed);
  EXPECT_TRUE(r.passed) << r.line(name) << note;
  EXPECT_GT(r.outputs_checked, 0) << note;
  EXPECT_GT(r.states_checked, 0) << note;
}

// The control of a family's late-input cases (late_inputs: the token's inputs written by a kernel
// after the kernel under test started, kernels/common/checks/late_copy.h): each case again with its
// pools written late too (late_pools). The kernels read their pools before their wait, so each must
// see the poison and fail; a pass would mean the kernel before was no longer running when they read,
// and the late-input cases would prove nothing. run_case(case, seed) returns a result with passed.
template <class Case, class RunCase, class Describe>
void expect_late_pools_seen(const std::vector<Case>& all, RunCase run_case, Describe describe) {
  int controls = 0;
  for (Case c : all) {
    if (!c.late_inputs) continue;
    c.late_pools = true, ++controls;
    EXPECT_FALSE(run_case(c, case_seed(test_base_seed(), c.name)).passed)
        << describe(c) << ": passed with its pools written after the kernel's start";
  }
  EXPECT_GT(controls, 0) << "no late-input case to control";
}

// A family's case lists: the names name_of gives (which case seeds derive from: the verify
// families' qualified names, the decode families' names) unique, the quick subset `kvbuf check`
// runs non-empty, smaller than and part of the full list.
template <class Case, class NameOf, class Describe>
void expect_unique_names_quick_subset(const std::vector<Case>& all, const std::vector<Case>& quick, NameOf name_of,
                                      Describe describe) {
  std::set<std::string> names;
  for (const auto& c : all) EXPECT_TRUE(names.insert(name_of(c)).second) << "duplicate case name " << describe(c);
  EXPECT_FALSE(quick.empty());
  EXPECT_LT(quick.size(), names.size());
  for (const auto& c : quick) EXPECT_EQ(names.count(name_of(c)), 1u) << describe(c);
}

}  // namespace kvbuf::checks
