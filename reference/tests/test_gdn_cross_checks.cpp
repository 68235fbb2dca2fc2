// run_reference_cross_checks (what `kvbuf check` prints): every case passes, and each line is
// printed so the margins are visible in the test log. (No time limit: ctest's TIMEOUT catches a
// hang, and a wall-clock assertion would fail on a loaded machine, not on a wrong result.)
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "reference/cross_checks.h"

namespace kvbuf::ref {
namespace {

TEST(GdnCrossChecks, AllPass) {
  const auto checks = run_reference_cross_checks(20261129);
  ASSERT_GT(checks.size(), 80u);
  int gdn = 0, mamba2 = 0;
  for (const auto& c : checks) {
    gdn += c.name.rfind("gdn ", 0) == 0;
    mamba2 += c.name.find("mamba2") != std::string::npos;
  }
  EXPECT_EQ(gdn, 84);  // 2 gate regimes x 2 precisions x 21 (every GDN mode, o and state)
  EXPECT_GT(mamba2, 0);
  for (const auto& c : checks) {
    std::printf("  %-62s rel err %.2e  tol %.2e  %s\n", c.name.c_str(), c.max_rel_err, c.tol,
                c.ok ? "ok" : "FAIL");
    EXPECT_TRUE(c.ok) << c.name << ": " << c.max_rel_err << " > " << c.tol;
    EXPECT_EQ(c.ok, c.max_rel_err <= c.tol) << c.name;
  }
}

}  // namespace
}  // namespace kvbuf::ref
