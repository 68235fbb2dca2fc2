// run_mamba2_cross_checks (part of what `kvbuf check` prints): every check passes and the list
// covers every mode in both precisions; each line is printed so the margins are visible in the test
// log. (No time limit: ctest's TIMEOUT catches a hang, and a wall-clock assertion would fail on a
// loaded machine, not on a wrong result.)
#include <gtest/gtest.h>

#include <cstdio>

#include "reference/mamba2.h"

namespace kvbuf::ref {
namespace {

TEST(Mamba2CrossChecks, AllPass) {
  const auto checks = run_mamba2_cross_checks(20261129);
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
}

}  // namespace
}  // namespace kvbuf::ref
