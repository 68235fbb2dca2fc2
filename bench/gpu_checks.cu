// `kvbuf check` on a GPU machine: the decode kernel cases of kernels/tests/test_gdn_decode_cases.h
// (the quick subset; the gtest binary runs them all) and verify-gpu's checks when linked.
#include <fmt/format.h>

#include <cstdlib>
#include <exception>

#include "bench/gpu_commands.h"
#include "bench/sweep.h"
#include "kernels/tests/test_gdn_decode_cases.h"

namespace kvbuf {

std::string commit_id() {
  const char* c = std::getenv("KVBUF_COMMIT");
  return c && *c ? c : "unknown";
}

int run_gpu_checks(uint64_t seed) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    fmt::print("GPU checks: no CUDA device answers, skipped\n");
    return 0;
  }
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
  if (run_verify_checks) failed += run_verify_checks(seed);
  return failed;
}

}  // namespace kvbuf
