// GPU tests of the GDN decode kernels against the float64 reference (the cases of
// kernels/gdn/checks/gdn_decode_checks.h), plus the dispatch's refusals of unsupported shapes.
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/common/checks/check_common.h"
#include "kernels/gdn/checks/gdn_decode_checks.h"
#include "kernels/common/common.cuh"
#include "kernels/common/tests/check_case_support.h"

namespace kvbuf::decode_check {
namespace {

class GdnDecode : public ::testing::TestWithParam<DecodeCase> {};

TEST_P(GdnDecode, MatchesFloat64Reference) {
  const DecodeCase& cs = GetParam();
  checks::expect_case_passes(cs.name, describe(cs), [&](uint64_t seed) { return run_decode_case(cs, seed); });
}

INSTANTIATE_TEST_SUITE_P(Cases, GdnDecode, ::testing::ValuesIn(decode_cases(false)), checks::CaseParamName());

// The control of the late-inputs cases (check_case_support.h).
TEST(GdnDecodeLateWrites, PoolsWrittenLateAreReadEarly) {
  checks::expect_late_pools_seen(decode_cases(false), run_decode_case, [](const DecodeCase& c) { return describe(c); });
}

// Host only (ctest GdnDecodeCases.host_only, which CI without a GPU runs; there gtest also aborts
// the binary on an invalid or duplicate parameter name): case names unique, the quick subset
// `kvbuf check` runs part of the full list, and case seeds depend on both the base seed and the name.
TEST(GdnDecodeCases, QuickIsASubset) {
  const auto quick = decode_cases(true);
  checks::expect_unique_names_quick_subset(
      decode_cases(false), quick, [](const DecodeCase& c) { return c.name; },
      [](const DecodeCase& c) { return describe(c); });
}

TEST(GdnDecodeCases, CaseSeedDependsOnBaseAndName) {
  const uint64_t s = checks::case_seed(1, "kvbuffer-cachedu-bf16-C4-b3");
  EXPECT_EQ(s, checks::case_seed(1, "kvbuffer-cachedu-bf16-C4-b3"));
  EXPECT_NE(s, checks::case_seed(2, "kvbuffer-cachedu-bf16-C4-b3"));
  EXPECT_NE(s, checks::case_seed(1, "kvbuffer-cachedu-bf16-C4-b4"));
  EXPECT_NE(checks::case_seed(0, "a"), checks::case_seed(0, "b"));
}

TEST(GdnDecodeDispatch, RefusesUnsupportedShapes) {
  GdnRecurrentParams p;
  int32_t* dummy = nullptr;
  ASSERT_EQ(cudaMalloc(&dummy, 1 << 20), cudaSuccess);
  p.io.batch = 1, p.io.H = 1, p.io.HV = 1, p.io.K = 96, p.io.V = 96;
  p.io.slot = dummy;
  p.io.q = p.io.k = p.io.v = reinterpret_cast<const __nv_bfloat16*>(dummy);
  p.io.out = reinterpret_cast<__nv_bfloat16*>(dummy);
  p.io.g = p.io.beta = reinterpret_cast<const float*>(dummy);
  p.state_in = p.state_out = dummy;
  EXPECT_THROW(gdn_decode_recurrent(p, 0), std::invalid_argument);
  p.io.K = p.io.V = 128;
  p.io.rows_per_block = 48;
  EXPECT_THROW(gdn_decode_recurrent(p, 0), std::invalid_argument);
  p.io.rows_per_block = 0;
  p.state_type = static_cast<StateType>(7);  // no such state type
  EXPECT_THROW(gdn_decode_recurrent(p, 0), std::invalid_argument);
  p.state_type = StateType::FP32;
  p.io.batch = 65536;  // beyond the grid's z dimension
  EXPECT_THROW(gdn_decode_recurrent(p, 0), std::invalid_argument);
  p.io.batch = 1;
  p.io.beta = nullptr;
  EXPECT_THROW(gdn_decode_recurrent(p, 0), std::invalid_argument);

  GdnKVBufferParams b;
  b.io = p.io;
  b.io.beta = b.io.g;
  b.state = dummy;
  b.buf_k = b.buf_val = dummy;
  b.buf_gcum = reinterpret_cast<float*>(dummy);
  b.fill = b.has_state = b.done_count = dummy;
  b.capacity = 65;
  EXPECT_THROW(gdn_decode_kvbuffer(b, 0), std::invalid_argument);
  b.capacity = 0;
  EXPECT_THROW(gdn_decode_kvbuffer(b, 0), std::invalid_argument);
  b.capacity = 8;
  b.io.rows_per_block = 8;  // the one-warp shape is the recurrent kernel's only
  EXPECT_THROW(gdn_decode_kvbuffer(b, 0), std::invalid_argument);
  b.io.rows_per_block = 0;
  b.variant = BufferVariant::Raw;  // no buf_beta
  EXPECT_THROW(gdn_decode_kvbuffer(b, 0), std::invalid_argument);
  // The split path needs cached-u entries, scheduler row metadata and scratch.
  b.buf_beta = reinterpret_cast<float*>(dummy);
  b.path = DecodePath::Split;
  b.row_fill = b.row_has_state = dummy;
  b.scratch = reinterpret_cast<float*>(dummy);
  EXPECT_THROW(gdn_decode_kvbuffer(b, 0), std::invalid_argument);  // raw
  b.variant = BufferVariant::CachedU, b.scratch = nullptr;
  EXPECT_THROW(gdn_decode_kvbuffer(b, 0), std::invalid_argument);  // no scratch
  b.scratch = reinterpret_cast<float*>(dummy), b.row_fill = b.row_has_state = nullptr;
  EXPECT_THROW(gdn_decode_kvbuffer(b, 0), std::invalid_argument);  // no row metadata
  b.row_fill = b.row_has_state = dummy, b.split_row_groups = -1;
  EXPECT_THROW(gdn_decode_direct(b, 0), std::invalid_argument);
  b.split_row_groups = 0, b.every_row_has_state = true;  // a promise direct mode cannot keep
  EXPECT_THROW(gdn_decode_direct(b, 0), std::invalid_argument);
  b.every_row_has_state = false, b.state_type = static_cast<StateType>(7);  // no such state type
  EXPECT_THROW(gdn_decode_kvbuffer(b, 0), std::invalid_argument);
  EXPECT_THROW(gdn_decode_direct(b, 0), std::invalid_argument);
  cudaFree(dummy);
}

// The single KVBuffer kernel's rows per block by state type (Qwen3-Next, scheduler metadata, C = 8):
// fp32 keeps 32 KiB tiles of 64 rows; a 16-bit state takes whole heads where the grid keeps twice
// the fp32 rule's blocks per SM, and the fp32 rule below that.
TEST(GdnDecodeDispatch, SingleKVBufferRowsByStateType) {
  int32_t* dummy = nullptr;
  KVB_CUDA_CHECK(cudaMalloc(&dummy, 256));
  int sms = 0;
  KVB_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  GdnKVBufferParams p;
  p.io.H = 16, p.io.HV = 32, p.io.K = 128, p.io.V = 128;
  p.io.slot = dummy;
  p.state = dummy;
  p.buf_k = p.buf_val = dummy;
  p.buf_gcum = reinterpret_cast<float*>(dummy);
  p.row_fill = p.row_has_state = dummy;
  p.capacity = 8;
  const int wide_batch = (8 * sms + p.io.HV - 1) / p.io.HV;  // one 128-row block per head: 8 blocks per SM
  for (StateType st : {StateType::FP32, StateType::BF16, StateType::FP16}) {
    p.state_type = st;
    p.io.batch = wide_batch;
    EXPECT_EQ(gdn_decode_kvbuffer_rows_per_block(p), st == StateType::FP32 ? 64 : 128) << state_type_name(st);
    p.io.batch = wide_batch - 1;
    EXPECT_EQ(gdn_decode_kvbuffer_rows_per_block(p), 64) << state_type_name(st);
    p.io.batch = 1;
    EXPECT_EQ(gdn_decode_kvbuffer_rows_per_block(p), 16) << state_type_name(st);
  }
  cudaFree(dummy);
}

// The row groups the direct entry point's compacted state kernel gets (the sweep's row_groups column).
TEST(GdnDecodeDispatch, DirectRowGroups) {
  int32_t* dummy = nullptr;
  KVB_CUDA_CHECK(cudaMalloc(&dummy, 256));
  GdnKVBufferParams p;
  p.io.batch = 64;
  p.io.H = 16, p.io.HV = 32, p.io.K = 128, p.io.V = 128;  // Qwen3-Next
  p.io.slot = dummy;
  p.state = dummy;
  p.buf_k = p.buf_val = dummy;
  p.buf_gcum = reinterpret_cast<float*>(dummy);
  p.row_fill = p.row_has_state = dummy;
  p.scratch = reinterpret_cast<float*>(dummy);
  p.capacity = 8;  // split, but below kCompactMinCapacity: one block row per request
  EXPECT_EQ(gdn_decode_direct_row_groups(p), 0);
  p.split_row_groups = 3;
  EXPECT_EQ(gdn_decode_direct_row_groups(p), 3);
  p.split_row_groups = 64;  // as many groups as rows: the plain kernel
  EXPECT_EQ(gdn_decode_direct_row_groups(p), 0);
  p.split_row_groups = 0, p.capacity = 64, p.io.batch = 512;  // one wave of 32-row blocks: fewer groups than rows
  const int g = gdn_decode_direct_row_groups(p);
  EXPECT_GE(g, 1);
  EXPECT_LT(g, 512 / 12);
  for (StateType st : {StateType::BF16, StateType::FP16}) {  // half the S0 tile: at least as many blocks per SM
    p.state_type = st;
    EXPECT_GE(gdn_decode_direct_row_groups(p), g);
    EXPECT_LT(gdn_decode_direct_row_groups(p), 512 / 12);
  }
  p.state_type = StateType::FP32;
  p.io.batch = 8;  // the plain grid would run fewer than 12 waves: not compacted
  EXPECT_EQ(gdn_decode_direct_row_groups(p), 0);
  p.capacity = 1;  // the recurrent kernels
  EXPECT_EQ(gdn_decode_direct_row_groups(p), 0);
  p.capacity = 64, p.io.batch = 2000;  // above the compacted kernel's 1024 rows
  EXPECT_EQ(gdn_decode_direct_row_groups(p), 0);
  p.io.batch = 512, p.scratch = nullptr;  // no split path
  EXPECT_EQ(gdn_decode_direct_row_groups(p), 0);
  cudaFree(dummy);
}

}  // namespace
}  // namespace kvbuf::decode_check
