// GPU tests of the Mamba-2 verify kernels against the float64 reference (the cases of
// kernels/mamba2/checks/mamba2_verify_checks.h), plus the dispatch's refusals of unsupported shapes (host
// only: they throw before any CUDA call, so CI without a GPU runs them too).
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/common/checks/check_common.h"
#include "kernels/mamba2/checks/mamba2_verify_checks.h"
#include "kernels/common/common.cuh"
#include "kernels/mamba2/mamba2_verify.h"
#include "kernels/common/tests/check_case_support.h"
#include "kernels/common/tests/commit_layers_support.h"

namespace kvbuf::mamba2_verify_check {
namespace {

void run_and_expect_pass(const VerifyCase& c) {
  checks::expect_case_passes(qualified_name(c), describe(c), [&](uint64_t seed) { return run_verify_case(c, seed); });
}

class Mamba2VerifyKVBufferTest : public ::testing::TestWithParam<VerifyCase> {};
TEST_P(Mamba2VerifyKVBufferTest, MatchesRecurrentOfAcceptedTokens) { run_and_expect_pass(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Cases, Mamba2VerifyKVBufferTest,
                         ::testing::ValuesIn(checks::cases_of(verify_cases(false), VerifyMethod::KVBuffer)),
                         checks::CaseParamName());

class Mamba2VerifyClassicTest : public ::testing::TestWithParam<VerifyCase> {};
TEST_P(Mamba2VerifyClassicTest, MatchesRecurrentOfAcceptedTokens) { run_and_expect_pass(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Cases, Mamba2VerifyClassicTest,
                         ::testing::ValuesIn(checks::cases_of(verify_cases(false), VerifyMethod::Classic)),
                         checks::CaseParamName());

// Host only: qualified names unique across methods, the quick subset part of the full list.
TEST(Mamba2VerifyCases, QualifiedNamesUniqueQuickSubset) {
  checks::expect_unique_names_quick_subset(
      verify_cases(false), verify_cases(true), [](const VerifyCase& c) { return qualified_name(c); },
      [](const VerifyCase& c) { return describe(c); });
}

// Never dereferenced: every refusal below happens on the host, before a launch.
template <class T>
T* fake() {
  alignas(16) static char storage[16];
  return reinterpret_cast<T*>(storage);
}

void set_io(Mamba2VerifyIO& io) {
  io.batch = 1, io.tokens = 4, io.G = 1, io.NH = 2, io.P = 64, io.N = 128;
  io.slot = fake<const int32_t>();
  io.x = io.B = io.C = io.dt = fake<const __nv_bfloat16>();
  io.A = io.D = fake<const float>();
  io.out = fake<__nv_bfloat16>();
}

void set_pools(Mamba2VerifyKVBufferParams& k) {
  k.state = fake<float>(), k.buf_k = k.buf_val = fake<__nv_bfloat16>(), k.buf_gcum = k.buf_beta = fake<float>();
  k.fill = k.has_state = k.win_base = fake<int32_t>();
  k.win_k = k.win_u = fake<__nv_bfloat16>(), k.win_gcum = k.win_beta = fake<float>();
}

TEST(Mamba2VerifyBadInput, UnsupportedShapesThrow) {
  Mamba2VerifyClassicParams c;
  set_io(c.io);
  EXPECT_THROW(mamba2_verify_classic(c, 0), std::invalid_argument);  // no state, no step_slot
  c.state = fake<float>(), c.step_slot = fake<const int32_t>();
  c.io.N = 96;
  EXPECT_THROW(mamba2_verify_classic(c, 0), std::invalid_argument);
  c.io.N = 128, c.io.P = 12;
  EXPECT_THROW(mamba2_verify_classic(c, 0), std::invalid_argument);
  c.io.P = 64, c.io.tokens = 9;
  EXPECT_THROW(mamba2_verify_classic(c, 0), std::invalid_argument);
  c.io.tokens = 0;
  EXPECT_THROW(mamba2_verify_classic(c, 0), std::invalid_argument);
  c.io.tokens = 4, c.io.NH = 3, c.io.G = 2;
  EXPECT_THROW(mamba2_verify_classic(c, 0), std::invalid_argument);
  c.io.NH = 2, c.io.G = 1, c.io.batch = 65536;
  EXPECT_THROW(mamba2_verify_classic(c, 0), std::invalid_argument);
  c.io.batch = 3;
  for (int rows : {1, 3, 16}) {
    c.rows_per_warp = rows;
    EXPECT_THROW(mamba2_verify_classic(c, 0), std::invalid_argument);
  }
  c.rows_per_warp = 0;

  Mamba2VerifyKVBufferParams k;
  set_io(k.io);
  k.capacity = 16;
  EXPECT_THROW(mamba2_verify_kvbuffer(k, 0), std::invalid_argument);  // null pools
  set_pools(k);
  k.capacity = 3;  // C < T
  EXPECT_THROW(mamba2_verify_kvbuffer(k, 0), std::invalid_argument);
  k.capacity = 65;
  EXPECT_THROW(mamba2_verify_kvbuffer(k, 0), std::invalid_argument);
  k.capacity = 16;
  for (int heads : {3, 4, 16, -1}) {  // not a power of 2, not dividing NH / G = 2, over 8, negative
    k.heads_per_block = heads;
    EXPECT_THROW(mamba2_verify_kvbuffer(k, 0), std::invalid_argument) << "heads_per_block " << heads;
  }
  k.heads_per_block = 0;
  EXPECT_THROW(mamba2_verify_kvbuffer_commit(k, 0), std::invalid_argument);  // no accept_len
  {  // layers committed at once: none, or one whose batch differs from the first's
    Mamba2VerifyKVBufferParams two[2] = {k, k};
    two[0].accept.accept_len = two[1].accept.accept_len = fake<const int32_t>();
    two[1].io.batch = 2;
    EXPECT_THROW(mamba2_verify_kvbuffer_commit(two, 0, 0), std::invalid_argument);
    EXPECT_THROW(mamba2_verify_kvbuffer_commit(two, 2, 0), std::invalid_argument);
  }
  EXPECT_THROW(mamba2_verify_kvbuffer_order(k, nullptr, 0), std::invalid_argument);  // nowhere to write
  k.io.N = 32;
  EXPECT_THROW(mamba2_verify_kvbuffer(k, 0), std::invalid_argument);
}

// A state dtype outside StateType: refused by every entry point, on the host before any launch.
TEST(Mamba2VerifyBadInput, RefusesUnknownStateType) {
  auto expect_refusal = [](auto&& f) {
    try {
      f();
      ADD_FAILURE() << "not refused";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("unsupported state dtype"), std::string::npos) << e.what();
    }
  };
  Mamba2VerifyClassicParams c;
  set_io(c.io);
  c.state = fake<uint16_t>(), c.step_slot = fake<const int32_t>();
  c.state_type = static_cast<StateType>(7);
  expect_refusal([&] { mamba2_verify_classic(c, 0); });
  Mamba2VerifyKVBufferParams k;
  set_io(k.io);
  set_pools(k);
  k.state_type = static_cast<StateType>(7);
  k.accept.accept_len = fake<const int32_t>();
  expect_refusal([&] { mamba2_verify_kvbuffer(k, 0); });
  expect_refusal([&] { mamba2_verify_kvbuffer_commit(k, 0); });
  expect_refusal([&] { mamba2_verify_kvbuffer_order(k, fake<int32_t>(), 0); });
}

// GPU (occupancy queries, no launch): the row order pays where the verify takes its head-group
// kernel: Nemotron-3 Nano's heads at batch 512, not at batch 8 (the one-head kernel) unless
// heads_per_block forces the head-group kernel.
TEST(Mamba2VerifyRowOrder, PaysWithTheHeadGroupKernel) {
  Mamba2VerifyKVBufferParams k;
  set_io(k.io);
  set_pools(k);
  k.io.G = 8, k.io.NH = 64, k.capacity = 16;
  // The head-group kernel also writes its windows into the buffer (sim/layout.h's VerifyWindow).
  auto expect_group = [&](bool group) {
    EXPECT_EQ(mamba2_verify_kvbuffer_row_order_pays(k), group);
    EXPECT_EQ(mamba2_verify_kvbuffer_window(k), group ? VerifyWindow::Buffer : VerifyWindow::Scratch);
  };
  k.io.batch = 8;
  expect_group(false);
  k.io.batch = 512;
  expect_group(true);
  k.io.batch = 8, k.heads_per_block = 2;
  expect_group(true);
  k.heads_per_block = 1;
  expect_group(false);
}

// GPU (occupancy queries, no launch): the head-group kernel from the batch whose 4-head blocks fill
// 1.5 waves of 3 blocks per SM (verify_heads_per_block): Nemotron-3 Nano's heads make 16 such
// blocks per row, so from batch ceil(4.5 SMs / 16) on, the one-head kernel below it.
TEST(Mamba2VerifyRowOrder, HeadGroupKernelFromOneAndAHalfWaves) {
  const int sms = multiprocessor_count();
  Mamba2VerifyKVBufferParams k;
  set_io(k.io);
  set_pools(k);
  k.io.G = 8, k.io.NH = 64, k.capacity = 16;
  const int first = (9 * sms + 31) / 32;
  k.io.batch = first - 1;
  EXPECT_FALSE(mamba2_verify_kvbuffer_row_order_pays(k)) << "batch " << k.io.batch << ", " << sms << " SMs";
  k.io.batch = first;
  EXPECT_TRUE(mamba2_verify_kvbuffer_row_order_pays(k)) << "batch " << k.io.batch << ", " << sms << " SMs";
}

// GPU: the commit of 2 layer tables' worth of layers in one call (two launches) leaves every
// layer's pools as one commit per layer does; random scratch, bases (some with the window in the
// buffer) and accepted nodes, a padding row, T < C and T == C (the commit's fold).
// mixed: the layers' state pools in fp32, bf16 and fp16 in turn (one call folds each in its type).
void expect_commit_layers_equal_per_layer(bool mixed) {
  const int B = checks::CommitRows::kRows, slots = checks::CommitRows::kSlots, T = checks::CommitRows::kTokens;
  int made = 0;
  auto make = [&](checks::CommitLayerTensors& l, std::mt19937_64& r, int C, const checks::CommitRows& rows) {
    Mamba2VerifyKVBufferParams p;
    Mamba2VerifyIO& io = p.io;
    io.batch = B, io.tokens = T, io.G = 2, io.NH = 4, io.P = 64, io.N = 64;
    io.slot = rows.slot.as<int32_t>();
    io.x = io.B = io.C = io.dt = io.out = rows.io.as<__nv_bfloat16>();
    io.A = io.D = rows.io.as<float>();
    p.capacity = C;
    p.accept = VerifyAccept{rows.len.as<int32_t>(), C == T ? nullptr : rows.nodes.as<int32_t>()};
    const size_t entries = size_t(slots) * C, window = size_t(B) * T;
    const size_t state_elems = size_t(slots) * io.NH * io.P * io.N;
    constexpr StateType kTypes[] = {StateType::FP32, StateType::BF16, StateType::FP16};
    // make is called twice per layer (the per-layer set, then the all-at-once set): both in one type.
    p.state_type = mixed ? kTypes[made++ / 2 % 3] : StateType::FP32;
    if (p.state_type == StateType::FP32)
      p.state = l.add_f32(state_elems, r, -1.f, 1.f);
    else
      p.state = l.add_bf16(state_elems, r);  // as fp16 bits: finite values below 2
    p.buf_k = l.add_bf16(entries * io.G * io.N, r);
    p.buf_val = l.add_bf16(entries * io.NH * io.P, r);
    p.buf_gcum = l.add_f32(entries * io.NH, r, -2.f, 0.f);
    p.buf_beta = l.add_f32(entries * io.NH, r, 0.01f, 1.f);
    p.fill = l.add_ints(slots, r, C);
    p.has_state = l.add_ints(slots, r, 2);
    p.win_k = l.add_bf16(window * io.G * io.N, r);
    p.win_u = l.add_bf16(window * io.NH * io.P, r);
    p.win_gcum = l.add_f32(window * io.NH, r, -2.f, 0.f);
    p.win_beta = l.add_f32(window * io.NH, r, 0.01f, 1.f);
    p.win_base = l.add_bases(B, C, T, r, kMamba2WindowInBuffer);
    return p;
  };
  checks::expect_layers_commit_equals_per_layer<Mamba2VerifyKVBufferParams>(
      LayerTable<Mamba2VerifyKVBufferParams>::kMaxLayers + 2, 5, make,
      [](const Mamba2VerifyKVBufferParams& p, cudaStream_t s) { mamba2_verify_kvbuffer_commit(p, s); },
      [](const Mamba2VerifyKVBufferParams* p, int n, cudaStream_t s) { mamba2_verify_kvbuffer_commit(p, n, s); });
}
TEST(Mamba2VerifyCommitLayers, EqualsOneCommitPerLayer) { expect_commit_layers_equal_per_layer(false); }
// The same with the layers' states in fp32, bf16 and fp16 in one call.
TEST(Mamba2VerifyCommitLayers, EqualsOneCommitPerLayerMixedStateTypes) { expect_commit_layers_equal_per_layer(true); }

}  // namespace
}  // namespace kvbuf::mamba2_verify_check
