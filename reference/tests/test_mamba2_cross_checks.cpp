// run_mamba2_cross_checks (part of what `kvbuf check` prints): every check passes, the list covers
// every mode in both precisions, and it runs in under 2 s; each line is printed so the margins are
// visible in the test log.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "reference/mamba2.h"

namespace kvbuf::ref {
namespace {

TEST(Mamba2CrossChecks, AllPassUnderTwoSeconds) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto checks = run_mamba2_cross_checks(20261129);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const char* mode :
       {"recurrent f32", "prefill", "kvbuffer", "direct", "verify classic", "verify kvbuffer"}) {
    bool found = false;
    for (const auto& c : checks) found = found || c.name.find(mode) != std::string::npos;
    EXPECT_TRUE(found) << "no cross-check for " << mode;
  }
  for (const auto& c : checks) {
    std::printf("  %-58s rel err %.2e  tol %.2e  %s\n", c.name.c_str(), c.max_rel_err, c.tol,
                c.ok ? "ok" : "FAIL");
    EXPECT_TRUE(c.ok) << c.name << ": " << c.max_rel_err << " > " << c.tol;
    EXPECT_EQ(c.ok, c.max_rel_err <= c.tol) << c.name;
    EXPECT_LT(c.tol, 1e-3) << c.name << ": tolerance too loose to mean anything";
  }
  std::printf("  %zu Mamba-2 cross-checks in %.3f s\n", checks.size(), secs);
  EXPECT_LT(secs, 2.0);
}

}  // namespace
}  // namespace kvbuf::ref
