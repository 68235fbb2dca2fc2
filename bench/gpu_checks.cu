// `kvbuf check` on a GPU machine: the quick subsets of the decode and verify kernel checks
// (kernels/checks/; the gtest binaries run every case). Each case's inputs come from
// checks::case_seed(--seed, case name), as in the gtest binaries with KVBUF_TEST_SEED = --seed.
// One line per case, a summary line per kernel family.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include "bench/gpu_commands.h"
#include "kernels/checks/check_common.h"
#include "kernels/checks/gdn_decode_checks.h"
#include "kernels/checks/gdn_verify_checks.h"
#include "kernels/checks/mamba2_verify_checks.h"

namespace kvbuf {

namespace {

// Returns the number of failed cases; a case that throws (a CUDA error, a dispatch refusal) fails.
int run_decode_checks(uint64_t seed) {
  int failed = 0, n = 0;
  for (const auto& cs : decode_check::decode_cases(true)) {
    ++n;
    try {
      const auto r = decode_check::run_decode_case(cs, checks::case_seed(seed, cs.name));
      if (!r.passed) ++failed;
      fmt::print("{}\n", r.line(cs.name));
      if (!r.passed) fmt::print("  case {}\n", decode_check::describe(cs));
    } catch (const std::exception& e) {
      ++failed;
      fmt::print("FAIL {}: {}\n  case {}\n", cs.name, e.what(), decode_check::describe(cs));
    }
  }
  fmt::print("GPU decode checks: {} of {} passed (seed {})\n", n - failed, n, seed);
  return failed;
}

// A verify family's quick cases (GDN: verify_check, Mamba-2: mamba2_verify_check; the same case and
// result interface).
template <class Case, class RunCase, class NameOf, class Describe>
int run_verify_family(const char* family, const std::vector<Case>& cases, uint64_t seed, RunCase run_case,
                      NameOf name_of, Describe describe) {
  int failed = 0, n = 0;
  for (const auto& cs : cases) {
    ++n;
    const std::string name = name_of(cs);
    try {
      const auto r = run_case(cs, checks::case_seed(seed, name));
      if (!r.passed) ++failed;
      fmt::print("{}\n", r.line(name));
      if (!r.passed) fmt::print("  case {}\n", describe(cs));
    } catch (const std::exception& e) {
      ++failed;
      fmt::print("FAIL {}: {}\n  case {}\n", name, e.what(), describe(cs));
    }
  }
  fmt::print("GPU {} checks: {} of {} passed (seed {})\n", family, n - failed, n, seed);
  return failed;
}

int run_verify_checks(uint64_t seed) {
  namespace v = verify_check;
  return run_verify_family("verify", v::verify_cases(true), seed, v::run_verify_case,
                           [](const v::VerifyCase& c) { return v::qualified_name(c); },
                           [](const v::VerifyCase& c) { return v::describe(c); });
}

int run_mamba2_verify_checks(uint64_t seed) {
  namespace v = mamba2_verify_check;
  return run_verify_family("Mamba-2 verify", v::verify_cases(true), seed, v::run_verify_case,
                           [](const v::VerifyCase& c) { return v::qualified_name(c); },
                           [](const v::VerifyCase& c) { return v::describe(c); });
}

}  // namespace

int run_gpu_checks(uint64_t seed) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    fmt::print("GPU checks: no CUDA device answers, skipped\n");
    return 0;
  }
  return run_decode_checks(seed) + run_verify_checks(seed) + run_mamba2_verify_checks(seed);
}

}  // namespace kvbuf
