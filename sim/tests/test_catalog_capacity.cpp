// Catalog entries, tensor parallelism, and the capacity model against an independent hand formula.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <stdexcept>

#include "sim/capacity.h"
#include "sim/catalog.h"

namespace kvbuf {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

TEST(Catalog, AllModelsAreValidAndNamedOnce) {
  std::set<std::string> names;
  for (const auto& m : model_catalog()) {
    EXPECT_NO_THROW(validate_model(m)) << m.name;
    EXPECT_TRUE(names.insert(m.name).second) << m.name;
    EXPECT_EQ(m.layer.conv_width, 4);
    EXPECT_GT(m.params_billion, 0);
  }
  EXPECT_EQ(names.size(), 11u);
}

TEST(Catalog, ShapesFromTheIssue) {
  const ModelSpec& q = find_model("qwen3-next-80b-a3b");
  EXPECT_EQ(q.linear_layers, 36);
  EXPECT_EQ(q.full_attn_layers(), 12);
  EXPECT_EQ(q.layer.key_heads, 16);
  EXPECT_EQ(q.layer.value_heads, 32);
  EXPECT_EQ(q.attn_kv_heads, 2);
  EXPECT_EQ(q.attn_head_dim, 256);
  EXPECT_DOUBLE_EQ(q.params_billion, 80);
  const ModelSpec& big = find_model("qwen3.5-397b-a17b");
  EXPECT_EQ(big.linear_layers, 45);
  EXPECT_EQ(big.layer.value_heads, 64);
  const ModelSpec& nano = find_model("nemotron-3-nano-30b-a3b");
  EXPECT_EQ(nano.kind, LayerKind::Mamba2);
  EXPECT_EQ(nano.linear_layers, 23);
  EXPECT_EQ(nano.full_attn_layers(), 6);  // not 52 - 23: the rest are MLP/MoE layers
  EXPECT_EQ(nano.layer.key_heads, 8);     // groups
  EXPECT_EQ(nano.layer.value_heads, 64);  // heads
  EXPECT_EQ(nano.layer.head_k, 128);      // d_state
  EXPECT_EQ(nano.layer.head_v, 64);       // head_dim
  EXPECT_EQ(find_model("nemotron-3-super-120b-a12b").full_attn_layers(), 8);
  // 12 layers x K and V x 2 kv heads x 256 x bf16 per token.
  EXPECT_DOUBLE_EQ(q.attn_kv_bytes_per_token(), 12.0 * 2 * 2 * 256 * 2);
}

// The state dtype engines keep by default: Qwen3-Next's model dtype in vLLM, fp32 for Qwen3.5 (its
// configs' mamba_ssm_dtype) and Nemotron-3 (vLLM forces it).
TEST(Catalog, EngineStateDtypes) {
  for (const ModelSpec& m : model_catalog()) {
    const StateType want = m.name == "qwen3-next-80b-a3b" ? StateType::BF16 : StateType::FP32;
    EXPECT_EQ(m.engine_state, want) << m.name;
  }
}

TEST(Catalog, UnknownModelListsTheKnownOnes) {
  try {
    find_model("gpt-5");
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("gpt-5"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("qwen3-next-80b-a3b"), std::string::npos);
  }
}

TEST(Catalog, TensorParallel) {
  const ModelSpec& q = find_model("qwen3-next-80b-a3b");
  const ModelSpec t2 = apply_tensor_parallel(q, 2);
  EXPECT_EQ(t2.layer.key_heads, 8);
  EXPECT_EQ(t2.layer.value_heads, 16);
  EXPECT_EQ(t2.attn_q_heads, 8);
  EXPECT_EQ(t2.attn_kv_heads, 1);
  EXPECT_EQ(t2.tp, 2);
  EXPECT_EQ(apply_tensor_parallel(q, 4).attn_kv_heads, 1);  // 2 KV heads replicated over 4 GPUs
  EXPECT_EQ(apply_tensor_parallel(q, 16).layer.key_heads, 1);
  EXPECT_THROW(apply_tensor_parallel(q, 3), std::invalid_argument);
  EXPECT_THROW(apply_tensor_parallel(q, 32), std::invalid_argument);  // 16 key heads
  EXPECT_THROW(apply_tensor_parallel(q, 0), std::invalid_argument);
  EXPECT_THROW(apply_tensor_parallel(q, -2), std::invalid_argument);
  EXPECT_THROW(apply_tensor_parallel(t2, 2), std::invalid_argument);  // applied twice
}

TEST(Catalog, ValidateRejectsBadCustomShapes) {
  ModelSpec m = find_model("qwen3.5-0.8b");
  m.layer.value_heads = 24;  // not a multiple of 16 key heads
  EXPECT_THROW(validate_model(m), std::invalid_argument);
  m = find_model("qwen3.5-0.8b");
  m.layer.head_k = 0;
  EXPECT_THROW(validate_model(m), std::invalid_argument);
  m = find_model("qwen3.5-0.8b");
  m.linear_layers = -1;
  EXPECT_THROW(validate_model(m), std::invalid_argument);
  EXPECT_THROW(parse_layer_kind("rwkv"), std::invalid_argument);
}

// Hand formula for Qwen3-Next, per linear layer and request:
//   state 32*128*128*4, conv (2*16*128 + 32*128) * 3 * 2, cached-u entry 16*128*2 + 32*128*2 +
//   32*4.
double hand_ratio_qwen3_next(int T, int C) {
  const double state = 32.0 * 128 * 128 * 4, conv = (2.0 * 16 * 128 + 32 * 128) * 3 * 2;
  const double entry = 16.0 * 128 * 2 + 32 * 128 * 2 + 32 * 4;
  return (1 + T) * (state + conv) / (state + conv + C * entry);
}

CapacityInputs qwen3_next_inputs(int tp, int T, int C) {
  const ModelSpec& q = find_model("qwen3-next-80b-a3b");
  CapacityInputs in;
  in.model = apply_tensor_parallel(q, tp);
  in.gpu_memory_bytes = 141 * kGiB;
  in.weight_bytes = default_weight_bytes(q, tp);
  in.context = 32768;
  in.drafts = T;
  in.chunk = C;
  return in;
}

TEST(Capacity, RatioMatchesHandFormulaAndLimits) {
  const int T = 4;
  double previous = 0;
  for (int C : {64, 32, 16, 8, 6, 5, 4}) {
    const CapacityResult r = capacity_model(qwen3_next_inputs(1, T, C));
    EXPECT_NEAR(r.ratio_linear_pool, hand_ratio_qwen3_next(T, C), 1e-12) << "C " << C;
    EXPECT_LT(r.ratio_linear_pool, 1 + T);
    EXPECT_GT(r.ratio_linear_pool, previous) << "ratio must grow as C falls";
    previous = r.ratio_linear_pool;
  }
  // The issue's headline range, about 4.6 (C = 16) to 4.9 (C = 4).
  EXPECT_NEAR(capacity_model(qwen3_next_inputs(1, 4, 16)).ratio_linear_pool, 4.576, 0.001);
  EXPECT_NEAR(capacity_model(qwen3_next_inputs(1, 4, 4)).ratio_linear_pool, 4.887, 0.001);
}

TEST(Capacity, RequestCountsTp2) {
  const CapacityInputs in = qwen3_next_inputs(2, 4, 8);
  const CapacityResult r = capacity_model(in);
  // TP 2 halves the heads: state 16*128*128*4, conv (2*8*128 + 16*128) * 3 * 2, entry 8*128*2 +
  // 16*128*2 + 16*4.
  const double state = 16.0 * 128 * 128 * 4, conv = (2.0 * 8 * 128 + 16 * 128) * 6,
               entry = 8.0 * 128 * 2 + 16 * 128 * 2 + 16 * 4;
  const double pool = 141 * kGiB - 80e9 * 2 / 2;
  const double classic = 36 * 5 * (state + conv), kvb = 36 * (state + conv + 8 * entry);
  const double attn = 32768.0 * 12 * 2 * 1 * 256 * 2;  // one KV head per GPU
  EXPECT_DOUBLE_EQ(r.pool_bytes, pool);
  EXPECT_DOUBLE_EQ(r.classic.linear_bytes_per_request, classic);
  EXPECT_DOUBLE_EQ(r.kvbuffer.linear_bytes_per_request, kvb);
  EXPECT_EQ(r.classic.max_requests_linear_pool, long(std::floor(pool / classic)));
  EXPECT_EQ(r.kvbuffer.max_requests_linear_pool, long(std::floor(pool / kvb)));
  EXPECT_DOUBLE_EQ(r.kvbuffer.attn_bytes_per_request, attn);
  EXPECT_EQ(r.kvbuffer.max_requests_whole_model, long(std::floor(pool / (kvb + attn))));
  EXPECT_EQ(r.classic.max_requests_whole_model, long(std::floor(pool / (classic + attn))));
  EXPECT_GT(r.ratio_whole_model, 1.0);
  EXPECT_LT(r.ratio_whole_model, r.ratio_linear_pool);
  // The mean policy holds half the context.
  CapacityInputs mean = in;
  mean.scheduler = SchedulerPolicy::Mean;
  EXPECT_DOUBLE_EQ(capacity_model(mean).kvbuffer.attn_bytes_per_request, attn / 2);
}

TEST(Capacity, VerifyScratchAddsTEntries) {
  CapacityInputs in = qwen3_next_inputs(2, 4, 16);
  const double without = capacity_model(in).kvbuffer.linear_bytes_per_request;
  in.count_verify_scratch = true;
  const CapacityResult r = capacity_model(in);
  const double entry = 8.0 * 128 * 2 + 16 * 128 * 2 + 16 * 4;  // tp 2
  EXPECT_DOUBLE_EQ(r.kvbuffer.linear_bytes_per_request - without, 36 * 4 * entry);
  EXPECT_DOUBLE_EQ(r.classic.linear_bytes_per_request,
                   capacity_model(qwen3_next_inputs(2, 4, 16)).classic.linear_bytes_per_request);
}

TEST(Capacity, WeightsLargerThanMemoryLeaveNoRoom) {
  const CapacityResult r =
      capacity_model(qwen3_next_inputs(1, 4, 16));  // 160 GB of weights > 141 GiB
  EXPECT_EQ(r.pool_bytes, 0);
  EXPECT_EQ(r.classic.max_requests_linear_pool, 0);
  EXPECT_EQ(r.kvbuffer.max_requests_whole_model, 0);
}

TEST(Capacity, RejectsBadInputs) {
  CapacityInputs in = qwen3_next_inputs(2, 4, 16);
  in.drafts = 17;
  EXPECT_THROW(capacity_model(in), std::invalid_argument);  // T > C
  in = qwen3_next_inputs(2, 4, 16);
  in.chunk = 0;
  EXPECT_THROW(capacity_model(in), std::invalid_argument);
  in = qwen3_next_inputs(2, 4, 16);
  in.context = 0;
  EXPECT_THROW(capacity_model(in), std::invalid_argument);
  in = qwen3_next_inputs(2, 4, 16);
  in.gpu_memory_bytes = -1;
  EXPECT_THROW(capacity_model(in), std::invalid_argument);
  EXPECT_THROW(parse_scheduler("fifo"), std::invalid_argument);
}

}  // namespace
}  // namespace kvbuf
