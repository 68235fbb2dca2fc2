// `kvbuf check` on a GPU machine: the quick subsets of the decode and verify kernel checks
// (kernels/checks/; the gtest binaries run every case). Each case's inputs come from
// checks::case_seed(--seed, case name), as in the gtest binaries with KVBUF_TEST_SEED = --seed.
// One line per case, a summary line per kernel family.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cstdlib>
#include <exception>

#include "bench/gpu_commands.h"
#include "kernels/checks/check_common.h"
#include "kernels/checks/gdn_decode_checks.h"
#include "kernels/checks/gdn_verify_checks.h"

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

int run_verify_checks(uint64_t seed) {
  int failed = 0, n = 0;
  for (const auto& cs : verify_check::verify_cases(true)) {
    ++n;
    const std::string name = verify_check::qualified_name(cs);
    try {
      const auto r = verify_check::run_verify_case(cs, checks::case_seed(seed, name));
      if (!r.passed) ++failed;
      fmt::print("{}\n", r.line(name));
      if (!r.passed) fmt::print("  case {}\n", verify_check::describe(cs));
    } catch (const std::exception& e) {
      ++failed;
      fmt::print("FAIL {}: {}\n  case {}\n", name, e.what(), verify_check::describe(cs));
    }
  }
  fmt::print("GPU verify checks: {} of {} passed (seed {})\n", n - failed, n, seed);
  return failed;
}

}  // namespace

int run_gpu_checks(uint64_t seed) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    fmt::print("GPU checks: no CUDA device answers, skipped\n");
    return 0;
  }
  return run_decode_checks(seed) + run_verify_checks(seed);
}

}  // namespace kvbuf
