// `kvbuf check` on a GPU machine: the quick subsets of the decode and verify kernel checks
// (kernels/*/checks/; the gtest binaries run every case). Each case's inputs come from
// checks::case_seed(--seed, case name), as in the gtest binaries with KVBUF_TEST_SEED = --seed.
// One line per case, a summary line per kernel family.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "bench/gpu_commands.h"
#include "bench/gpu_timing.h"
#include "kernels/common/checks/check_common.h"
#include "kernels/gdn/checks/gdn_decode_checks.h"
#include "kernels/gdn/checks/gdn_verify_checks.h"
#include "kernels/mamba2/checks/mamba2_decode_checks.h"
#include "kernels/mamba2/checks/mamba2_verify_checks.h"

namespace kvbuf {

namespace {

// Runs one family's quick cases: one line per case, a summary line; returns the number of failed
// cases (a case that throws, a CUDA error or a dispatch refusal, fails).
template <class Case, class Run, class Describe, class Name>
int run_family(const char* family, const std::vector<Case>& cases, uint64_t seed, Run run, Describe describe,
               Name name_of) {
  int failed = 0;
  for (const Case& cs : cases) {
    const std::string name = name_of(cs);
    try {
      const auto r = run(cs, checks::case_seed(seed, name));
      if (!r.passed) ++failed;
      fmt::print("{}\n", r.line(name));
      if (!r.passed) fmt::print("  case {}\n", describe(cs));
    } catch (const std::exception& e) {
      ++failed;
      fmt::print("FAIL {}: {}\n  case {}\n", name, e.what(), describe(cs));
    }
  }
  fmt::print("GPU {} checks: {} of {} passed (seed {})\n", family, cases.size() - failed, cases.size(), seed);
  return failed;
}

int run_decode_checks(uint64_t seed) {
  using namespace decode_check;
  return run_family("decode", decode_cases(true), seed, run_decode_case, describe, [](const DecodeCase& c) { return c.name; });
}

int run_verify_checks(uint64_t seed) {
  using namespace verify_check;
  return run_family("verify", verify_cases(true), seed, run_verify_case, describe, qualified_name);
}

int run_mamba2_decode_checks(uint64_t seed) {
  using namespace mamba2_check;
  return run_family("Mamba-2 decode", decode_cases(true), seed, run_decode_case, describe,
                    [](const Mamba2DecodeCase& c) { return c.name; });
}

int run_mamba2_verify_checks(uint64_t seed) {
  namespace v = mamba2_verify_check;
  return run_family("Mamba-2 verify", v::verify_cases(true), seed, v::run_verify_case,
                    [](const v::VerifyCase& c) { return v::describe(c); },
                    [](const v::VerifyCase& c) { return v::qualified_name(c); });
}

}  // namespace

int run_gpu_checks(uint64_t seed) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    fmt::print("GPU checks: no CUDA device answers, skipped\n");
    return 0;
  }
  gpu_name();  // prints the GPU; refuses one this build has no code for
  return run_decode_checks(seed) + run_verify_checks(seed) + run_mamba2_decode_checks(seed) +
         run_mamba2_verify_checks(seed);
}

}  // namespace kvbuf
