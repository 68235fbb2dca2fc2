// `kvbuf check`: the reference cross-checks (every mode against the recurrent ground truth) and,
// in CUDA builds, the GPU kernels against the reference. Exit 1 when any check fails.
#include <fmt/format.h>

#include <memory>

#include "bench/cmd_common.h"
#include "reference/cross_checks.h"
#ifdef KVBUF_WITH_CUDA
#include "bench/gpu_commands.h"
#endif

namespace kvbuf::cli {

Command add_check_command(CLI::App& app) {
  auto seed = std::make_shared<long long>(1);
  Command c;
  c.app = app.add_subcommand(
      "check", "run the reference cross-checks (and the GPU kernel checks in CUDA builds)");
  c.app->add_option("--seed", *seed,
                    "random seed of the inputs (GPU cases: the GPU tests' KVBUF_TEST_SEED)")
      ->capture_default_str();
  c.run = [seed] {
    if (*seed < 0) throw UsageError(fmt::format("--seed must be non-negative, got {}", *seed));
    const std::vector<ref::CrossCheck> checks = ref::run_reference_cross_checks(uint64_t(*seed));
    int failed = 0;
    for (const auto& r : checks) {
      if (!r.ok) ++failed;
      fmt::print("{:<4} {:<60} rel err {:.3e}  tol {:.3e}\n", r.ok ? "ok" : "FAIL", r.name,
                 r.max_rel_err, r.tol);
    }
    fmt::print("reference cross-checks: {} of {} passed (seed {})\n", checks.size() - failed,
               checks.size(), *seed);
    if (checks.empty()) {
      fmt::print("no reference cross-checks ran\n");
      ++failed;
    }
#ifdef KVBUF_WITH_CUDA
    const int gpu_failed = run_gpu_checks(uint64_t(*seed));
    fmt::print("GPU checks: {} failed\n", gpu_failed);
    failed += gpu_failed;
#endif
    return failed ? 1 : 0;
  };
  return c;
}

}  // namespace kvbuf::cli
