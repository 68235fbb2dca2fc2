// The step runner's plan without a GPU: block order, weight shapes against the catalog's
// parameter counts, the memory accounting against the capacity model, and the refusal.
#include <gtest/gtest.h>

#include <cmath>

#include "bench/step/step_plan.h"
#include "sim/capacity.h"

namespace kvbuf::step {
namespace {

double weights_of(const RankShapes& r) {
  StepPoint p;
  return memory_plan(r, p).weights;
}

TEST(StepPlan, QwenBlocksPutFullAttentionEveryFourthLayer) {
  const ModelSpec& m = find_model("qwen3.5-0.8b");
  const std::vector<Block> blocks = model_blocks(m);
  ASSERT_EQ(int(blocks.size()), m.total_layers);
  for (size_t i = 0; i < blocks.size(); ++i) {
    EXPECT_EQ(blocks[i].mixer, (i + 1) % 4 == 0 ? Mixer::Attention : Mixer::Linear) << "block " << i;
    EXPECT_EQ(blocks[i].ffn, Ffn::Dense) << "block " << i;
  }
  for (const Block& b : model_blocks(find_model("qwen3.5-35b-a3b"))) EXPECT_EQ(b.ffn, Ffn::MoE);
}

TEST(StepPlan, NemotronBlocksAreSingleMixersAndMoELayers) {
  const ModelSpec& m = find_model("nemotron-3-nano-30b-a3b");
  const std::vector<Block> blocks = model_blocks(m);
  ASSERT_EQ(int(blocks.size()), m.total_layers);
  int linear = 0, attn = 0, moe = 0;
  for (const Block& b : blocks) {
    EXPECT_TRUE((b.mixer == Mixer::None) != (b.ffn == Ffn::None)) << "one of mixer or MoE per layer";
    linear += b.mixer == Mixer::Linear, attn += b.mixer == Mixer::Attention, moe += b.ffn == Ffn::MoE;
  }
  EXPECT_EQ(linear, m.linear_layers);
  EXPECT_EQ(attn, m.attn_layers);
  EXPECT_EQ(moe, m.blocks.mlp_layers);
}

// Every tensor the runner allocates, summed, is the catalog's parameter count (the norms, gates and
// decays it adds are below 0.1%): the runner holds the model's real weight bytes.
TEST(StepPlan, WeightsMatchTheCatalogParameterCounts) {
  for (const ModelSpec& m : model_catalog()) {
    if (m.blocks.expert_input > 0) {
      EXPECT_THROW(rank_shapes(m, 1), std::invalid_argument) << m.name << ": latent MoE is refused";
      continue;
    }
    const double expected = 2.0 * weight_counts(m).total();
    const double got = weights_of(rank_shapes(m, 1));
    EXPECT_NEAR(got / expected, 1.0, 1e-3) << m.name;
  }
}

TEST(StepPlan, TensorParallelRankHoldsItsShare) {
  const ModelSpec& m = find_model("qwen3-next-80b-a3b");
  const RankShapes r2 = rank_shapes(m, 2);
  EXPECT_EQ(r2.model.layer.value_heads, m.layer.value_heads / 2);
  EXPECT_EQ(r2.expert_ffn, m.blocks.expert_ffn / 2);
  EXPECT_EQ(r2.vocab, m.blocks.vocab / 2);
  EXPECT_EQ(r2.model.attn_kv_heads, 1);
  // Replicated: norms, the router, one KV head of two; everything else halves.
  EXPECT_NEAR(weights_of(r2) / weights_of(rank_shapes(m, 1)), 0.5, 0.01);
  EXPECT_THROW(rank_shapes(m, 3), std::invalid_argument);
}

// The KV cache is whole pages of the model's KV bytes per token; the linear pools are the
// capacity model's bytes per request (state, conv window, buffer) plus the buffer metadata
// (aligned allocations only round up).
TEST(StepPlan, MemoryMatchesTheKvAndCapacityModels) {
  const ModelSpec& m = find_model("qwen3.5-4b");
  const RankShapes r = rank_shapes(m, 1);
  for (DecodeMethod method : {DecodeMethod::Classic, DecodeMethod::KVBuffer})
    for (StateType st : {StateType::FP32, StateType::BF16}) {
      StepPoint p;
      p.batch = 64, p.context = 4096, p.method = method, p.chunk = 16, p.state = st;
      const MemoryPlan plan = memory_plan(r, p);
      EXPECT_DOUBLE_EQ(plan.kv_cache, p.batch * double(p.context) * r.model.attn_kv_bytes_per_token());
      const bool kvb = method == DecodeMethod::KVBuffer;
      const Precision prec = precision_of(EntryType::BF16, st);
      const double model_bytes =
          p.batch * linear_bytes_per_request(r.model, prec, BufferVariant::CachedU, kvb, 0, p.chunk, false);
      const double metadata = kvb ? 3.0 * 4 * p.batch * r.model.linear_layers : 0.0;
      const double lower = model_bytes + metadata;
      EXPECT_GE(plan.linear_pools, lower - 1) << method_name(method) << " " << state_type_name(st);
      EXPECT_LE(plan.linear_pools, lower + 256.0 * 8 * r.model.linear_layers)
          << method_name(method) << " " << state_type_name(st);
    }
  StepPoint odd;
  odd.context = 17;  // two pages
  EXPECT_DOUBLE_EQ(memory_plan(r, odd).kv_cache, 32.0 * r.model.attn_kv_bytes_per_token());
}

// Speculative verify of T tokens: in-place classic holds 1 + T states and conv windows per
// request, KVBuffer the state, one window, the buffer and the T-entry scratch: the capacity model's
// bytes with the scratch counted (plus metadata); the activations grow T-fold.
TEST(StepPlan, VerifyPoolsMatchTheCapacityModel) {
  const RankShapes r = rank_shapes(find_model("qwen3.5-0.8b"), 1);
  for (DecodeMethod method : {DecodeMethod::Classic, DecodeMethod::KVBuffer}) {
    StepPoint p;
    p.batch = 32, p.context = 1024, p.method = method, p.chunk = 8, p.drafts = 4;
    const bool kvb = method == DecodeMethod::KVBuffer;
    const double model_bytes =
        p.batch * linear_bytes_per_request(r.model, precision_of(EntryType::BF16, p.state), BufferVariant::CachedU, kvb,
                                           p.drafts, p.chunk, true);
    const double metadata = kvb ? 5.0 * 4 * p.batch * r.model.linear_layers : 0.0;  // fill, has_state, done, win_base
    const MemoryPlan plan = memory_plan(r, p);
    EXPECT_GE(plan.linear_pools, model_bytes + metadata - 1) << method_name(method);
    EXPECT_LE(plan.linear_pools, model_bytes + metadata + 256.0 * 16 * r.model.linear_layers) << method_name(method);
    StepPoint decode = p;
    decode.drafts = 0;
    EXPECT_GT(plan.activations - memory_plan(r, decode).activations, 2.9 * (memory_plan(r, decode).activations - 288.0 * (1 << 20)));
  }
  StepPoint short_context;
  short_context.context = 3, short_context.drafts = 4;
  EXPECT_THROW(memory_plan(r, short_context), std::invalid_argument);
}

TEST(StepPlan, RefusesWhatDoesNotFitAndSaysWhy) {
  const RankShapes r = rank_shapes(find_model("qwen3.5-4b"), 1);
  StepPoint small, huge;
  small.batch = 8, small.context = 4096;
  huge.batch = 512, huge.context = 32768;
  const double h200 = 141e9;
  EXPECT_EQ(memory_refusal(memory_plan(r, small), h200), "");
  const std::string why = memory_refusal(memory_plan(r, huge), h200);
  EXPECT_NE(why.find("full-attention KV"), std::string::npos) << why;
  EXPECT_NE(why.find("GiB free"), std::string::npos) << why;
  // Exactly at the edge: the plan plus the headroom fits, a byte less does not.
  const MemoryPlan m = memory_plan(r, small);
  EXPECT_EQ(memory_refusal(m, m.total() + kMemoryHeadroomBytes), "");
  EXPECT_NE(memory_refusal(m, m.total() + kMemoryHeadroomBytes - 1), "");
  EXPECT_THROW(memory_plan(r, StepPoint{0, 256}), std::invalid_argument);
}

}  // namespace
}  // namespace kvbuf::step
