// `kvbuf check` on a GPU machine: the decode kernel cases of kernels/tests/test_gdn_decode_cases.h
// and the verify kernel cases of kernels/tests/test_gdn_verify_cases.h, the quick subset of each
// (the gtest binaries run them all). One line per case, a summary line per kernel family.
#include <fmt/format.h>

#include <cstdlib>
#include <exception>

#include "bench/gpu_commands.h"
#include "kernels/tests/test_gdn_decode_cases.h"
#include "kernels/tests/test_gdn_verify_cases.h"

namespace kvbuf {

std::string commit_id() {
  const char* c = std::getenv("KVBUF_COMMIT");
  return c && *c ? c : "unknown";
}

namespace {

// Returns the number of failed cases; a case that throws (a CUDA error, a dispatch refusal) fails.
int run_decode_checks(uint64_t seed) {
  int failed = 0, n = 0;
  for (const auto& cs : decode_check::decode_cases(true)) {
    ++n;
    try {
      const auto r = decode_check::run_decode_case(cs, seed + n);
      if (!r.passed) ++failed;
      fmt::print("{}\n", r.line(cs.name));
    } catch (const std::exception& e) {
      ++failed;
      fmt::print("FAIL {}: {}\n", cs.name, e.what());
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
      const auto r = verify_check::run_verify_case(cs, seed + n);
      if (!r.passed) ++failed;
      fmt::print("{}\n", r.line(name));
    } catch (const std::exception& e) {
      ++failed;
      fmt::print("FAIL {}: {}\n", name, e.what());
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
