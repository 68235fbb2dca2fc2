// archs_run_on: which devices a build's architecture list runs on (the refusal of `kvbuf`'s GPU
// commands), for the catalog's GPUs and the build's default and PTX-only lists.
#include <gtest/gtest.h>

#include <stdexcept>

#include "bench/cuda_archs.h"

namespace kvbuf {
namespace {

constexpr const char* kDefault = "80-real;86-real;89-real;90-real;100-real;120-real;120-virtual";

TEST(CudaArchs, DefaultListRunsOnEveryCatalogGpu) {
  // A100 8.0, RTX 3090 / A40 8.6, L40S / RTX 4090 8.9, H100 / H200 9.0, B200 10.0, RTX 5090 12.0.
  for (auto [major, minor] : {std::pair{8, 0}, {8, 6}, {8, 9}, {9, 0}, {10, 0}, {12, 0}})
    EXPECT_TRUE(archs_run_on(kDefault, major, minor)) << major << "." << minor;
  EXPECT_TRUE(archs_run_on(kDefault, 13, 0)) << "a later GPU JIT-compiles the newest PTX";
  EXPECT_FALSE(archs_run_on(kDefault, 7, 5)) << "Turing: nothing built for it";
}

TEST(CudaArchs, MachineCodeRunsWithinItsMajorOnly) {
  EXPECT_TRUE(archs_run_on("80-real", 8, 6));
  EXPECT_TRUE(archs_run_on("80-real", 8, 9));
  EXPECT_FALSE(archs_run_on("86-real", 8, 0));
  EXPECT_FALSE(archs_run_on("90-real", 8, 0)) << "an A100 with a Hopper-only build";
  EXPECT_FALSE(archs_run_on("90-real", 10, 0)) << "a B200 with a Hopper-only build";
  EXPECT_FALSE(archs_run_on("90a-real", 9, 1));
  EXPECT_TRUE(archs_run_on("90a-real;90a-virtual", 9, 0));
  EXPECT_FALSE(archs_run_on("90a-real;90a-virtual", 10, 0)) << "arch-specific PTX runs on its own GPU only";
  EXPECT_TRUE(archs_run_on("100f-real", 10, 3));
}

TEST(CudaArchs, PtxRunsOnEveryLaterDevice) {
  EXPECT_TRUE(archs_run_on("80-virtual", 9, 0)) << "the PTX-only build the H200 JIT-compiles";
  EXPECT_TRUE(archs_run_on("80-virtual", 12, 0));
  EXPECT_FALSE(archs_run_on("90-virtual", 8, 9));
  EXPECT_TRUE(archs_run_on("80", 9, 0)) << "a bare number is both machine code and PTX";
}

TEST(CudaArchs, UnresolvedListsDeferToTheDevice) {
  EXPECT_TRUE(archs_run_on("native", 7, 0));
  EXPECT_TRUE(archs_run_on("all-major", 8, 0));
}

TEST(CudaArchs, UnreadableEntryThrows) {
  EXPECT_THROW(archs_run_on("sm_90", 9, 0), std::invalid_argument);
  EXPECT_THROW(archs_run_on("90-fast", 9, 0), std::invalid_argument);
}

}  // namespace
}  // namespace kvbuf
