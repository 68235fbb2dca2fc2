// GPU tests of the step runner (ctest label gpu): on small models of the real layer kinds, one
// block of each kind run by the runner matches the float64 reference of reference/decoder_layers.h
// on the same random weights, caches and states: a Gated DeltaNet block and a full-attention block
// (each with its SwiGLU MLP; the attention block also verifying T tokens per request), a Mamba-2
// block (squared-ReLU MLP), a GDN + MoE block with its routing and grouping against the host
// definitions. Whole steps of both methods leave no
// poisoned (NaN) activation, and a point that cannot fit is refused with its reason.
// Tolerances: the GPU keeps every activation in bf16 (2^-8 relative rounding): the residual stream
// is rounded twice per block (after the mixer and after the MLP), and each block's contribution
// passes about eight bf16 roundings (norm, projection, conv, gates, kernel output, gated norm, MLP
// up and activation): |gpu - ref| <= 2 * 2^-8 |ref| + 8 * 2^-8 |ref - before| (Frobenius norms).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/step/step_kernels.h"
#include "bench/step/step_routing.h"
#include "bench/step/step_runner.h"
#include "kernels/common/cuda_check.h"
#include "reference/decoder_layers.h"

namespace kvbuf::step {
namespace {

constexpr double kBf16 = 1.0 / 256;

uint64_t test_seed() {
  const char* s = std::getenv("KVBUF_TEST_SEED");
  return s ? std::strtoull(s, nullptr, 10) : 20261203;
}

// Qwen3.5's layer kinds at small sizes: 3 GDN blocks then 1 full-attention block, each with a
// SwiGLU MLP; GDN heads of 128 (the kernels' head dims), attention heads of 256, GQA group 4.
ModelSpec tiny_model() {
  ModelSpec m;
  m.name = "tiny-qwen";
  m.kind = LayerKind::GatedDeltaNet;
  m.linear_layers = 3, m.attn_layers = 1, m.total_layers = 4;
  m.layer = LayerShape{LayerKind::GatedDeltaNet, 1, 2, 128, 128, 4};
  m.attn_q_heads = 4, m.attn_kv_heads = 1, m.attn_head_dim = 256;
  m.blocks.hidden = 256, m.blocks.vocab = 512, m.blocks.tied_embeddings = true, m.blocks.attn_output_gate = true;
  m.blocks.mlp_layers = 4, m.blocks.dense_ffn = 384;
  return m;
}

ref::DVec bf16_to_double(const void* dev, size_t n) {
  std::vector<__nv_bfloat16> h(n);
  KVB_CUDA_CHECK(cudaMemcpy(h.data(), dev, n * 2, cudaMemcpyDeviceToHost));
  ref::DVec out(n);
  for (size_t i = 0; i < n; ++i) out[i] = double(__bfloat162float(h[i]));
  return out;
}
ref::DVec f32_to_double(const void* dev, size_t n) {
  std::vector<float> h(n);
  KVB_CUDA_CHECK(cudaMemcpy(h.data(), dev, n * 4, cudaMemcpyDeviceToHost));
  return ref::DVec(h.begin(), h.end());
}
double norm(const ref::DVec& a) {
  double s = 0;
  for (double x : a) s += x * x;
  return std::sqrt(s);
}
double distance(const ref::DVec& a, const ref::DVec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (a[i] - b[i]) * (a[i] - b[i]);
  return std::sqrt(s);
}
// The block bound of the file comment, with the measured error beside it on failure.
void expect_hidden_near(const ref::DVec& gpu, const ref::DVec& ref, const ref::DVec& before, const std::string& what) {
  const double err = distance(gpu, ref), delta = distance(ref, before);
  const double tol = 2 * kBf16 * norm(ref) + 8 * kBf16 * delta;
  ASSERT_GT(delta, 0.05 * norm(before)) << what << ": the block must change the residual stream measurably";
  EXPECT_LE(err, tol) << what << ": |gpu - ref| " << err << ", block output |ref - before| " << delta
                      << ", seed " << test_seed() << " (KVBUF_TEST_SEED=" << test_seed() << " reruns it)";
  for (double x : gpu) ASSERT_TRUE(std::isfinite(x)) << what << ": non-finite output";
}

ref::MlpWeights mlp_weights(const StepRunner& r, int block) {
  const RankShapes& s = r.shapes();
  const size_t d = s.hidden, F = s.dense_ffn;
  return {bf16_to_double(r.weight(block, "ffn.norm"), d), bf16_to_double(r.weight(block, "ffn.up_proj"), 2 * F * d),
          bf16_to_double(r.weight(block, "ffn.down_proj"), d * F)};
}

class StepLayers : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "no CUDA device";
    shapes_ = rank_shapes(tiny_model(), 1);
    runner_ = std::make_unique<StepRunner>(shapes_, test_seed());
    point_.batch = 3, point_.context = 37, point_.method = DecodeMethod::Classic, point_.state = StateType::FP32;
    std::string why;
    ASSERT_TRUE(runner_->prepare(point_, &why)) << why;
  }
  RankShapes shapes_;
  std::unique_ptr<StepRunner> runner_;
  StepPoint point_;
};

// A GDN block's mixer weights, conv windows and states as the float64 reference takes them.
struct GdnMixerInputs {
  ref::GdnDims dims;
  ref::GdnMixerWeights w;
  ref::DVec windows;
  std::vector<ref::GdnState<double>> states;
};
size_t state_elems(const RankShapes& r, int batch) {
  const LayerShape& s = r.model.layer;
  return size_t(batch) * s.value_heads * s.head_v * s.head_k;
}
// The pool's state [B, HV, V, K] (K contiguous) as the reference's K x V matrices.
std::vector<ref::GdnState<double>> gdn_states(const RankShapes& r, int batch, const ref::DVec& pool) {
  const LayerShape& s = r.model.layer;
  const ref::GdnDims dims{s.key_heads, s.value_heads, s.head_k, s.head_v};
  std::vector<ref::GdnState<double>> st(batch, ref::gdn_zero_state<double>(dims));
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < s.value_heads; ++h)
      for (int v = 0; v < s.head_v; ++v)
        for (int k = 0; k < s.head_k; ++k)
          st[b][h](k, v) = pool[((size_t(b) * s.value_heads + h) * s.head_v + v) * s.head_k + k];
  return st;
}
GdnMixerInputs gdn_inputs(const StepRunner& r, int block, int batch) {
  const RankShapes& sh = r.shapes();
  const LayerShape& s = sh.model.layer;
  const size_t d = sh.hidden, conv_dim = sh.linear_conv_dim(), width = sh.linear_in_width();
  const size_t values = size_t(s.value_heads) * s.head_v;
  GdnMixerInputs in;
  in.dims = {s.key_heads, s.value_heads, s.head_k, s.head_v};
  in.w = {bf16_to_double(r.weight(block, "mixer.norm"), d),
          bf16_to_double(r.weight(block, "mixer.in_proj"), width * d),
          bf16_to_double(r.weight(block, "mixer.conv"), conv_dim * 4),
          f32_to_double(r.weight(block, "mixer.A"), s.value_heads),
          f32_to_double(r.weight(block, "mixer.dt_bias"), s.value_heads),
          bf16_to_double(r.weight(block, "mixer.out_norm"), s.head_v),
          bf16_to_double(r.weight(block, "mixer.out_proj"), d * values)};
  in.windows = bf16_to_double(r.linear_pool(block, "conv"), batch * conv_dim * 3);
  in.states = gdn_states(sh, batch, f32_to_double(r.linear_pool(block, "state"), state_elems(sh, batch)));
  return in;
}

TEST_F(StepLayers, GatedDeltaNetBlockMatchesFloat64Reference) {
  StepRunner& r = *runner_;
  const int block = 0, B = point_.batch, d = shapes_.hidden;
  ASSERT_EQ(r.blocks()[block].mixer, Mixer::Linear);
  GdnMixerInputs in = gdn_inputs(r, block, B);
  const ref::DVec before = bf16_to_double(r.hidden(), size_t(B) * d);

  r.enqueue_blocks(nullptr, block, block + 1);
  KVB_CUDA_CHECK(cudaDeviceSynchronize());

  ref::DVec expected = before;
  ref::gdn_mixer_decode(in.dims, d, in.w, kRmsEps, expected, B, in.windows, in.states);
  ref::mlp_decode(d, shapes_.dense_ffn, true, mlp_weights(r, block), kRmsEps, expected, B);
  expect_hidden_near(bf16_to_double(r.hidden(), size_t(B) * d), expected, before, "GDN block");
  // The state update (fp32 state, bf16 q, k, v from the conv): within a few bf16 roundings.
  const std::vector<ref::GdnState<double>> got =
      gdn_states(shapes_, B, f32_to_double(r.linear_pool(block, "state"), state_elems(shapes_, B)));
  double err = 0, mag = 0;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < in.dims.HV; ++h)
      err += (got[b][h] - in.states[b][h]).squaredNorm(), mag += in.states[b][h].squaredNorm();
  EXPECT_LE(std::sqrt(err / mag), 4 * kBf16) << "GDN state after the step, seed " << test_seed();
  // The conv window took the token's projection (bf16 on both sides).
  const size_t conv_elems = B * shapes_.linear_conv_dim() * 3;
  EXPECT_LE(distance(bf16_to_double(r.linear_pool(block, "conv"), conv_elems), in.windows), kBf16 * norm(in.windows));
}

// The attention block `block` of a prepared runner against the float64 reference, and the new
// tokens' K and V in the paged cache. With drafts, the T token rows of a request (request-major)
// are its positions context - T .. context - 1; the reference runs them as T decode steps in
// order, each appending its K and V before the next attends (the causal verify).
void check_attention_block(StepRunner& r, const StepPoint& point, int block, const std::string& what) {
  const RankShapes& shapes = r.shapes();
  const int B = point.batch, d = shapes.hidden, T = point.tokens(), R = B * T;
  ASSERT_EQ(r.blocks()[block].mixer, Mixer::Attention);
  const ModelSpec& m = shapes.model;
  const int D = m.attn_head_dim, kvh = m.attn_kv_heads, pos = int(point.context - T), P = r.pages_per_row();
  const ref::AttentionDims a{m.attn_q_heads, kvh, D, rotary_dim(m), 1e7, true};
  const ref::AttentionMixerWeights w{bf16_to_double(r.weight(block, "mixer.norm"), d),
                                     bf16_to_double(r.weight(block, "mixer.qkv_proj"), shapes.attn_in_width() * d),
                                     bf16_to_double(r.weight(block, "mixer.q_norm"), D),
                                     bf16_to_double(r.weight(block, "mixer.k_norm"), D),
                                     bf16_to_double(r.weight(block, "mixer.o_proj"), size_t(d) * shapes.attn_q_width())};
  const size_t cache_elems = size_t(B) * P * kPageTokens * kvh * D;
  const std::vector<int32_t>& pages = r.kv_indices();
  // Token t of row b, head h in the paged cache [pages, kv heads, page tokens, head dim].
  auto at = [&](int b, int t, int h) {
    return ((size_t(pages[size_t(b) * P + t / kPageTokens]) * kvh + h) * kPageTokens + t % kPageTokens) * D;
  };
  auto cached = [&](const ref::DVec& cache, int tokens) {
    std::vector<ref::DVec> rows(B);
    for (int b = 0; b < B; ++b)
      for (int t = 0; t < tokens; ++t)
        for (int h = 0; h < kvh; ++h) rows[b].insert(rows[b].end(), &cache[at(b, t, h)], &cache[at(b, t, h)] + D);
    return rows;
  };
  const ref::DVec before = bf16_to_double(r.hidden(), size_t(R) * d);
  std::vector<ref::DVec> keys = cached(bf16_to_double(r.k_cache(block), cache_elems), pos);
  std::vector<ref::DVec> values = cached(bf16_to_double(r.v_cache(block), cache_elems), pos);

  r.enqueue_blocks(nullptr, block, block + 1);
  KVB_CUDA_CHECK(cudaDeviceSynchronize());

  ref::DVec expected = before;
  for (int t = 0; t < T; ++t) {
    ref::DVec rows(size_t(B) * d);  // token t of every request
    for (int b = 0; b < B; ++b)
      std::copy_n(&expected[(size_t(b) * T + t) * d], d, &rows[size_t(b) * d]);
    ref::attention_mixer_decode(a, d, w, kRmsEps, rows, B, pos + t, keys, values);
    for (int b = 0; b < B; ++b)
      std::copy_n(&rows[size_t(b) * d], d, &expected[(size_t(b) * T + t) * d]);
  }
  ref::mlp_decode(d, shapes.dense_ffn, true, mlp_weights(r, block), kRmsEps, expected, R);
  expect_hidden_near(bf16_to_double(r.hidden(), size_t(R) * d), expected, before, what);
  const std::vector<ref::DVec> k_after = cached(bf16_to_double(r.k_cache(block), cache_elems), pos + T);
  const std::vector<ref::DVec> v_after = cached(bf16_to_double(r.v_cache(block), cache_elems), pos + T);
  for (int b = 0; b < B; ++b) {
    EXPECT_LE(distance(k_after[b], keys[b]), 2 * kBf16 * norm(keys[b])) << what << ": K cache of row " << b;
    EXPECT_LE(distance(v_after[b], values[b]), 2 * kBf16 * norm(values[b])) << what << ": V cache of row " << b;
  }
}

TEST_F(StepLayers, FullAttentionBlockMatchesFloat64Reference) {
  check_attention_block(*runner_, point_, 3, "attention block, GQA group 4");
}

// GQA group 16 (Nemotron-H's 32 q heads over 2 KV heads) runs as two FlashInfer calls of group 8.
TEST_F(StepLayers, FullAttentionOfGroup16MatchesFloat64Reference) {
  ModelSpec m = tiny_model();
  m.attn_q_heads = 16, m.attn_head_dim = 128;
  StepRunner r(rank_shapes(m, 1), test_seed() + 1);
  std::string why;
  ASSERT_TRUE(r.prepare(point_, &why)) << why;
  check_attention_block(r, point_, 3, "attention block, GQA group 16");
}

// Verify of T = 3 tokens per request: the multi-query attention (FlashInfer's batch prefill kernel)
// after the T tokens' K and V are appended at the request's last T positions, against the T
// tokens decoded in order; a short context, so that a token seeing a later draft would show. GQA
// group 4 at head dim 256 and group 16 at 128.
TEST_F(StepLayers, FullAttentionVerifyOfDraftsMatchesSequentialReference) {
  StepPoint p = point_;
  p.drafts = 3, p.context = 7;
  std::string why;
  ASSERT_TRUE(runner_->prepare(p, &why)) << why;
  check_attention_block(*runner_, p, 3, "attention block verifying 3 tokens, GQA group 4");
  ModelSpec m = tiny_model();
  m.attn_q_heads = 16, m.attn_head_dim = 128;
  StepRunner r(rank_shapes(m, 1), test_seed() + 2);
  ASSERT_TRUE(r.prepare(p, &why)) << why;
  check_attention_block(r, p, 3, "attention block verifying 3 tokens, GQA group 16");
}

// Every activation is poisoned (NaN) when allocated: a whole step of either method that read one
// before writing it would leave NaN in the residual stream or the logits.
TEST_F(StepLayers, WholeStepsOfBothMethodsStayFinite) {
  for (DecodeMethod method : {DecodeMethod::Classic, DecodeMethod::KVBuffer})
    for (StateType st : {StateType::FP32, StateType::BF16}) {
      StepPoint p = point_;
      p.method = method, p.state = st, p.chunk = 4;
      std::string why;
      ASSERT_TRUE(runner_->prepare(p, &why)) << why;
      for (int step = 0; step < 6; ++step) runner_->enqueue(nullptr, kAllTerms);  // more than one flush cycle
      KVB_CUDA_CHECK(cudaDeviceSynchronize());
      for (double x : bf16_to_double(runner_->hidden(), size_t(p.batch) * shapes_.hidden))
        ASSERT_TRUE(std::isfinite(x)) << method_name(method) << " " << state_type_name(st);
      const MeasuredStep m = runner_->measure(0.02);
      EXPECT_GT(m.total.median_us, 0);
      EXPECT_GT(m.linear.median_us, 0);
      EXPECT_GT(m.attention.median_us, 0);
    }
}

TEST_F(StepLayers, RefusesAPointThatDoesNotFit) {
  StepPoint huge = point_;
  huge.batch = 4096, huge.context = 1 << 24;  // 2^36 tokens of KV
  std::string why;
  EXPECT_FALSE(runner_->prepare(huge, &why));
  EXPECT_NE(why.find("GiB free"), std::string::npos) << why;
}

}  // namespace
}  // namespace kvbuf::step

namespace kvbuf::step {
namespace {

// Qwen3.5-MoE's kinds at small sizes: GDN + MoE blocks (16 experts, top-4, a shared expert).
ModelSpec tiny_moe_model() {
  ModelSpec m = tiny_model();
  m.name = "tiny-qwen-moe";
  m.blocks.dense_ffn = 0, m.blocks.experts = 16, m.blocks.top_k = 4, m.blocks.expert_ffn = 64;
  m.blocks.shared_ffn = 128;
  return m;
}

class StepMoe : public ::testing::TestWithParam<std::tuple<Routing, bool>> {};

// The router's top-k and the grouping on the GPU equal the host definitions on the GPU's logits,
// and the block (GDN mixer + MoE) matches the float64 reference with the GPU's expert choice.
TEST_P(StepMoe, RoutingGroupingAndBlockMatchTheReference) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "no CUDA device";
  const auto [routing, grouped] = GetParam();
  const RankShapes shapes = rank_shapes(tiny_moe_model(), 1);
  StepRunner r(shapes, test_seed());
  StepPoint p;
  p.batch = 24, p.context = 20, p.routing = routing, p.grouped_expert_gemm = grouped;
  std::string why;
  ASSERT_TRUE(r.prepare(p, &why)) << why;
  const int block = 0, B = p.batch, d = shapes.hidden, E = shapes.experts, k = shapes.top_k;
  const int I = shapes.expert_ffn, S = shapes.shared_ffn;
  ASSERT_EQ(r.blocks()[block].ffn, Ffn::MoE);
  GdnMixerInputs in = gdn_inputs(r, block, B);
  const ref::DVec before = bf16_to_double(r.hidden(), size_t(B) * d);

  r.enqueue_blocks(nullptr, block, block + 1);
  KVB_CUDA_CHECK(cudaDeviceSynchronize());

  // Routing: the device's choice and weights against route_top_k on the device's logits.
  const ref::DVec logits_d = bf16_to_double(r.activation("router_logits"), size_t(B) * E);
  const std::vector<float> logits(logits_d.begin(), logits_d.end());
  std::vector<int32_t> ids;
  std::vector<float> weights;
  route_top_k(logits, B, E, k, routing_bias(E, routing), ids, weights);
  std::vector<int32_t> got_ids(size_t(B) * k);
  KVB_CUDA_CHECK(cudaMemcpy(got_ids.data(), r.activation("topk_ids"), got_ids.size() * 4, cudaMemcpyDeviceToHost));
  EXPECT_EQ(got_ids, ids);
  const ref::DVec got_w = f32_to_double(r.activation("topk_w"), size_t(B) * k);
  for (size_t i = 0; i < weights.size(); ++i) EXPECT_NEAR(got_w[i], weights[i], 1e-5) << "weight " << i;
  // Grouping: offsets, order and position as group_by_expert has them.
  const ExpertGroups g = group_by_expert(got_ids, E);
  auto download = [](void* dev, size_t count) {
    std::vector<int32_t> h(count);
    KVB_CUDA_CHECK(cudaMemcpy(h.data(), dev, count * 4, cudaMemcpyDeviceToHost));
    return h;
  };
  EXPECT_EQ(download(r.activation("offsets"), size_t(E) + 1), g.offsets);
  EXPECT_EQ(download(r.activation("order"), size_t(B) * k), g.order);
  EXPECT_EQ(download(r.activation("position"), size_t(B) * k), g.position);

  ref::DVec expected = before;
  ref::gdn_mixer_decode(in.dims, d, in.w, kRmsEps, expected, B, in.windows, in.states);
  const ref::MoeWeights mw{bf16_to_double(r.weight(block, "ffn.norm"), d),
                           bf16_to_double(r.weight(block, "ffn.router"), size_t(E) * d),
                           bf16_to_double(r.weight(block, "ffn.experts_up"), size_t(E) * 2 * I * d),
                           bf16_to_double(r.weight(block, "ffn.experts_down"), size_t(E) * d * I),
                           bf16_to_double(r.weight(block, "ffn.shared_up"), size_t(2) * S * d),
                           bf16_to_double(r.weight(block, "ffn.shared_down"), size_t(d) * S)};
  ref::moe_decode(d, E, k, I, S, true, mw, std::vector<int>(got_ids.begin(), got_ids.end()), kRmsEps, expected, B);
  expect_hidden_near(bf16_to_double(r.hidden(), size_t(B) * d), expected, before,
                     std::string("GDN + MoE block, ") + routing_name(routing) + (grouped ? ", grouped" : ", loop"));
  // A whole step with the recorded routing, captured and timed.
  const MeasuredStep m = r.measure(0.02);
  EXPECT_GT(m.total.median_us, 0);
  EXPECT_GT(m.gemm.median_us, 0);
}

INSTANTIATE_TEST_SUITE_P(RoutingAndGemm, StepMoe,
                         ::testing::Combine(::testing::Values(Routing::Uniform, Routing::Skewed),
                                            ::testing::Bool()));

}  // namespace
}  // namespace kvbuf::step

namespace kvbuf::step {
namespace {

// Nemotron-H's kinds at small sizes: Mamba-2 (2 groups, 4 heads of 64, d_state 128) and a
// full-attention block (head dim 128), each with a squared-ReLU MLP.
ModelSpec tiny_mamba2_model() {
  ModelSpec m;
  m.name = "tiny-nemotron";
  m.kind = LayerKind::Mamba2;
  m.linear_layers = 3, m.attn_layers = 1, m.total_layers = 4;
  m.layer = LayerShape{LayerKind::Mamba2, 2, 4, 128, 64, 4};
  m.attn_q_heads = 4, m.attn_kv_heads = 1, m.attn_head_dim = 128;
  m.blocks.hidden = 256, m.blocks.vocab = 512, m.blocks.attn_output_gate = false, m.blocks.gated_mlp = false;
  m.blocks.mlp_layers = 4, m.blocks.dense_ffn = 384;
  return m;
}

TEST(StepMamba2, Mamba2BlockMatchesFloat64Reference) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "no CUDA device";
  const RankShapes sh = rank_shapes(tiny_mamba2_model(), 1);
  StepRunner r(sh, test_seed());
  StepPoint p;
  p.batch = 5, p.context = 30;
  std::string why;
  ASSERT_TRUE(r.prepare(p, &why)) << why;
  const int block = 0, B = p.batch, d = sh.hidden;
  ASSERT_EQ(r.blocks()[block].mixer, Mixer::Linear);
  const LayerShape& s = sh.model.layer;
  const ref::Mamba2Dims dims{s.key_heads, s.value_heads, s.head_k, s.head_v};
  const size_t values = sh.linear_out_rows(), conv_dim = sh.linear_conv_dim(), width = sh.linear_in_width();
  const ref::Mamba2MixerWeights w{bf16_to_double(r.weight(block, "mixer.norm"), d),
                                  bf16_to_double(r.weight(block, "mixer.in_proj"), width * d),
                                  bf16_to_double(r.weight(block, "mixer.conv"), conv_dim * 4),
                                  f32_to_double(r.weight(block, "mixer.dt_bias"), s.value_heads),
                                  f32_to_double(r.weight(block, "mixer.A"), s.value_heads),
                                  f32_to_double(r.weight(block, "mixer.D"), s.value_heads),
                                  bf16_to_double(r.weight(block, "mixer.out_norm"), values),
                                  bf16_to_double(r.weight(block, "mixer.out_proj"), size_t(d) * values)};
  ref::DVec windows = bf16_to_double(r.linear_pool(block, "conv"), B * conv_dim * 3);
  const size_t per_row = size_t(s.value_heads) * s.head_v * s.head_k;
  // The pool's state [B, NH, P, N] (N contiguous) as the reference's P x N matrices.
  auto to_states = [&](const ref::DVec& pool) {
    std::vector<ref::Mamba2State<double>> st(B, ref::mamba2_zero_state<double>(dims));
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < dims.NH; ++h)
        for (int i = 0; i < dims.P; ++i)
          for (int j = 0; j < dims.N; ++j) st[b][h](i, j) = pool[((size_t(b) * dims.NH + h) * dims.P + i) * dims.N + j];
    return st;
  };
  std::vector<ref::Mamba2State<double>> states = to_states(f32_to_double(r.linear_pool(block, "state"), B * per_row));
  const ref::DVec before = bf16_to_double(r.hidden(), size_t(B) * d);

  r.enqueue_blocks(nullptr, block, block + 1);
  KVB_CUDA_CHECK(cudaDeviceSynchronize());

  ref::DVec expected = before;
  ref::mamba2_mixer_decode(dims, d, int(linear_out_norm_group(sh)), w, kRmsEps, expected, B, windows, states);
  const size_t F = sh.dense_ffn;
  const ref::MlpWeights mw{bf16_to_double(r.weight(block, "ffn.norm"), d),
                           bf16_to_double(r.weight(block, "ffn.up_proj"), F * d),
                           bf16_to_double(r.weight(block, "ffn.down_proj"), d * F)};
  ref::mlp_decode(d, int(F), false, mw, kRmsEps, expected, B);
  expect_hidden_near(bf16_to_double(r.hidden(), size_t(B) * d), expected, before, "Mamba-2 block");
  const std::vector<ref::Mamba2State<double>> got =
      to_states(f32_to_double(r.linear_pool(block, "state"), B * per_row));
  double err = 0, mag = 0;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < dims.NH; ++h)
      err += (got[b][h] - states[b][h]).squaredNorm(), mag += states[b][h].squaredNorm();
  EXPECT_LE(std::sqrt(err / mag), 4 * kBf16) << "Mamba-2 state after the step, seed " << test_seed();
  // A whole step of both methods, captured and timed, stays finite.
  for (DecodeMethod method : {DecodeMethod::Classic, DecodeMethod::KVBuffer}) {
    p.method = method, p.chunk = 4;
    ASSERT_TRUE(r.prepare(p, &why)) << why;
    const MeasuredStep m = r.measure(0.02);
    EXPECT_GT(m.linear.median_us, 0) << method_name(method);
    for (double x : bf16_to_double(r.hidden(), size_t(B) * d)) ASSERT_TRUE(std::isfinite(x)) << method_name(method);
  }
}

}  // namespace
}  // namespace kvbuf::step

namespace kvbuf::step {
namespace {

// Speculative verify, classic in place: the GDN block's T token rows of each request match the
// reference stepping the request's tokens one after another (conv window and state carried), and
// node T's slot holds the state after all T tokens.
TEST(StepVerify, ClassicGdnVerifyBlockMatchesSequentialReference) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "no CUDA device";
  const RankShapes sh = rank_shapes(tiny_model(), 1);
  StepRunner r(sh, test_seed());
  StepPoint p;
  p.batch = 3, p.context = 37, p.drafts = 3, p.method = DecodeMethod::Classic;
  std::string why;
  ASSERT_TRUE(r.prepare(p, &why)) << why;
  const int block = 0, B = p.batch, T = p.drafts, R = B * T, d = sh.hidden;
  const LayerShape& s = sh.model.layer;
  const size_t state_elems = size_t(s.value_heads) * s.head_v * s.head_k, window = sh.linear_conv_dim() * 3;
  const GdnMixerInputs in = gdn_inputs(r, block, 0);  // the weights (the pools hold 1 + T per request)
  // Request b's state in slot b (T + 1), its conv window the first of its 1 + T.
  const ref::DVec pool = f32_to_double(r.linear_pool(block, "state"), B * (T + 1) * state_elems);
  const ref::DVec conv_pool = bf16_to_double(r.linear_pool(block, "conv"), B * (1 + T) * window);
  std::vector<ref::GdnState<double>> states;
  ref::DVec windows;
  for (int b = 0; b < B; ++b) {
    const auto state0 = pool.begin() + size_t(b) * (T + 1) * state_elems;
    states.push_back(gdn_states(sh, 1, ref::DVec(state0, state0 + state_elems))[0]);
    const auto window0 = conv_pool.begin() + size_t(b) * (1 + T) * window;
    windows.insert(windows.end(), window0, window0 + window);
  }
  const ref::DVec before = bf16_to_double(r.hidden(), size_t(R) * d);

  r.enqueue_blocks(nullptr, block, block + 1);
  KVB_CUDA_CHECK(cudaDeviceSynchronize());

  ref::DVec expected = before;  // rows (b, t) at b T + t
  for (int t = 0; t < T; ++t) {
    ref::DVec rows(size_t(B) * d);
    for (int b = 0; b < B; ++b) std::copy_n(&expected[(size_t(b) * T + t) * d], d, &rows[size_t(b) * d]);
    ref::gdn_mixer_decode(in.dims, d, in.w, kRmsEps, rows, B, windows, states);
    ref::mlp_decode(d, sh.dense_ffn, true, mlp_weights(r, block), kRmsEps, rows, B);
    for (int b = 0; b < B; ++b) std::copy_n(&rows[size_t(b) * d], d, &expected[(size_t(b) * T + t) * d]);
  }
  expect_hidden_near(bf16_to_double(r.hidden(), size_t(R) * d), expected, before, "GDN verify block, T = 3");
  const ref::DVec after = f32_to_double(r.linear_pool(block, "state"), B * (T + 1) * state_elems);
  for (int b = 0; b < B; ++b) {
    const auto node_T = after.begin() + (size_t(b) * (T + 1) + T) * state_elems;
    const ref::GdnState<double> got = gdn_states(sh, 1, ref::DVec(node_T, node_T + state_elems))[0];
    double err = 0, mag = 0;
    for (int h = 0; h < in.dims.HV; ++h)
      err += (got[h] - states[b][h]).squaredNorm(), mag += states[b][h].squaredNorm();
    EXPECT_LE(std::sqrt(err / mag), 4 * kBf16) << "node T's state of request " << b << ", seed " << test_seed();
  }
}

// Whole verify steps of both methods and both families (and MoE) run, stay finite and are timed.
TEST(StepVerify, WholeVerifyStepsStayFinite) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) GTEST_SKIP() << "no CUDA device";
  for (const ModelSpec& m : {tiny_model(), tiny_mamba2_model(), tiny_moe_model()}) {
    const RankShapes sh = rank_shapes(m, 1);
    StepRunner r(sh, test_seed());
    for (DecodeMethod method : {DecodeMethod::Classic, DecodeMethod::KVBuffer}) {
      StepPoint p;
      p.batch = 5, p.context = 40, p.drafts = 3, p.chunk = 4, p.method = method;
      std::string why;
      ASSERT_TRUE(r.prepare(p, &why)) << why;
      for (int step = 0; step < 5; ++step) r.enqueue(nullptr, kAllTerms);
      KVB_CUDA_CHECK(cudaDeviceSynchronize());
      for (double x : bf16_to_double(r.hidden(), size_t(p.batch) * p.drafts * sh.hidden))
        ASSERT_TRUE(std::isfinite(x)) << m.name << " " << method_name(method);
      const MeasuredStep t = r.measure(0.02);
      EXPECT_GT(t.linear.median_us, 0) << m.name << " " << method_name(method);
    }
  }
}

}  // namespace
}  // namespace kvbuf::step
