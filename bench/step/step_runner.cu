#include "bench/step/step_runner.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <stdexcept>

#include "bench/cublas_check.h"
#include "bench/step/step_attention.h"
#include "bench/step/step_kernels.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/device_buffer.h"
#include "kernels/gdn/gdn_decode.h"
#include "kernels/gdn/gdn_launch_shape.h"  // verify_coef_bytes
#include "kernels/gdn/gdn_verify.h"
#include "kernels/mamba2/mamba2_decode.h"
#include "kernels/mamba2/mamba2_verify.h"

namespace kvbuf::step {
namespace {

constexpr size_t kCublasWorkspace = size_t(32) << 20;
// Qwen3-Next / Qwen3.5 rope_theta; Nemotron-H's attention layers use 10000.
float rope_theta(const ModelSpec& m) { return m.kind == LayerKind::GatedDeltaNet ? 1e7f : 1e4f; }

// Random values of a weight by what it is: matrices with variance 1 / fan-in (activations keep
// their scale through the layers), norms near 1, gates and decays in their models' ranges.
std::pair<float, float> weight_range(const std::string& name, const WeightTensor& t, LayerKind kind) {
  if (name.find("norm") != std::string::npos) return {0.8f, 1.2f};
  if (name == "mixer.conv") return {-0.5f, 0.5f};
  if (name == "mixer.dt_bias") return {-2.f, 0.f};
  if (name == "mixer.A") return kind == LayerKind::GatedDeltaNet ? std::pair{0.f, 1.5f} : std::pair{-4.f, -0.5f};
  if (name == "mixer.D") return {0.5f, 1.5f};
  const float a = std::sqrt(3.f / float(t.cols));
  return {-a, a};
}

void gemm(cublasHandle_t h, const bf16* x, const bf16* w, bf16* y, int rows, int n, int k, float beta) {
  // Y[rows x n] = X[rows x k] W^T + beta Y, W of n x k row-major; column-major for cuBLAS:
  // Y^T (n x rows) = W^T^T ... i.e. op(A) = W (A = W^T stored k x n, ld k), B = X^T (k x rows, ld k).
  const float alpha = 1.f;
  KVB_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, rows, k, &alpha, w, CUDA_R_16BF, k, x, CUDA_R_16BF, k,
                                &beta, y, CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

struct Weights {
  std::map<std::string, DeviceBuffer> t;
  template <class T = bf16>
  T* at(const std::string& name) const {
    auto it = t.find(name);
    if (it == t.end()) throw std::logic_error("step runner: no weight '" + name + "'");
    return it->second.as<T>();
  }
};

// A point's buffers.
struct PointState {
  StepPoint p;
  int rows = 0;  // token rows of the step: batch x T (T = 1 in plain decode)
  int pages_per_row = 0;
  std::vector<int32_t> kv_indices_h;  // each request's pages, [batch, pages_per_row]
  // slots: the linear kernels' pool slot per request (in-place classic verify: r (1 + T) + j);
  // conv_slot: the request's conv window; step_slot [batch, T]: in-place verify's node slots;
  // accept_len [batch]: the step's accepted tokens m per request (verify).
  DeviceBuffer ids, slots, conv_slot, step_slot, accept_len, pos;
  // The page table per request (its context's pages; the T token rows of a request are its last T
  // positions, context - T .. context - 1, the causal mask of the multi-query attention).
  DeviceBuffer kv_indptr, kv_indices, kv_last;
  std::vector<DeviceBuffer> k_cache, v_cache;  // per attention layer
  std::unique_ptr<DevicePools> pools;
  // scratch: the GDN split paths' workspace (decode: one step's r, s; KVBuffer verify: coefficient records).
  DeviceBuffer row_fill, row_has, scratch;
  // Activations.
  DeviceBuffer hidden, normed, proj, q, k, v, g, beta, z, dt, lin_out, gated, attn_q, attn_o, mlp_up, mlp_act, logits;
  // Full attention: the decode kernel for one token per request, the multi-query kernel for T > 1.
  std::unique_ptr<PagedDecodeAttention> decode_attention;
  std::unique_ptr<PagedMultiQueryAttention> verify_attention;
  // MoE: router logits, top-k, the grouping, the experts' rows in expert order, the shared expert.
  DeviceBuffer route_bias, router_logits, topk_ids, topk_w, offsets, order, position, x_sorted, up_sorted, act_sorted,
      y_sorted, shared_up, shared_act;
  std::unique_ptr<ExpertGrouping> grouping;
  // KVBuffer verify: each layer's parameters, for the commit of all layers after the step.
  std::vector<GdnVerifyKVBufferParams> gdn_verify;
  std::vector<Mamba2VerifyKVBufferParams> mamba2_verify;
};

// The experts' GEMMs of one MoE layer at the routing recorded when the point was prepared (the
// step's input is the same every replay: the embedding rewrites the residual stream, so the
// router picks the same experts): one group per active expert.
struct ExpertGemms {
  std::vector<int32_t> offsets;  // [experts + 1]
  std::vector<int> experts;      // the active ones
  // Per projection (up, down): cublasGemmGroupedBatchedEx's host arrays and device pointer arrays.
  struct Projection {
    std::vector<cublasOperation_t> ta, tb;
    std::vector<int> m, n, k, lda, ldb, ldc, group_size;
    std::vector<float> alpha, beta;
    std::vector<const void*> ha, hb;  // the problems' pointers, host copies (the loop of GEMMs)
    std::vector<void*> hc;
    DeviceBuffer a, b, c;  // the same, device arrays (the grouped GEMM)
  } up, down;
};

}  // namespace

struct StepRunner::Impl {
  RankShapes r;
  std::vector<Block> blocks;
  std::vector<Weights> block_w;  // per block
  Weights head;
  std::vector<int> linear_index, attn_index, moe_index;  // per block: its linear / attention / MoE layer, or -1
  double weight_bytes = 0;
  CublasHandle cublas;
  DeviceBuffer cublas_ws{kCublasWorkspace};
  std::unique_ptr<PointState> ps;
  std::vector<ExpertGemms> expert_gemms;  // per MoE layer, recorded by prepare()
  bool recording = false;  // the prepare() pass that records each MoE layer's routing
  // Whether cublasGemmGroupedBatchedEx captures into a CUDA graph here (tried once per runner);
  // where it does not, the experts' GEMMs run as the loop, and expert_gemm() says so.
  int grouped_capturable = -1;  // -1 not tried yet
  std::string grouped_failure;
  uint64_t seed = 1;

  void block_step(cudaStream_t st, int i, unsigned terms);
  void linear_mixer(cudaStream_t st, int i, unsigned terms);
  void attention_mixer(cudaStream_t st, int i, unsigned terms);
  void dense_ffn(cudaStream_t st, int i, unsigned terms);
  void moe_ffn(cudaStream_t st, int i, unsigned terms);
  void linear_verify(cudaStream_t st, int i);
  void commit_verify(cudaStream_t st);
  void record_expert_gemms(int i);
  // cuBLAS on `stream` with our workspace (cublasSetStream resets the workspace to cuBLAS's own
  // pool, which a graph capture must not allocate from).
  void use_stream(cudaStream_t stream) {
    KVB_CUBLAS_CHECK(cublasSetStream(cublas.h, stream));
    KVB_CUBLAS_CHECK(cublasSetWorkspace(cublas.h, cublas_ws.as<void>(), cublas_ws.bytes()));
  }
  void expert_gemm(const ExpertGemms::Projection& p);
};

StepRunner::StepRunner(const RankShapes& shapes, uint64_t seed) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.r = shapes;
  m.seed = seed;
  m.blocks = model_blocks(shapes.model);
  m.use_stream(nullptr);
  KVB_CUBLAS_CHECK(cublasSetMathMode(m.cublas.h, CUBLAS_DEFAULT_MATH));
  uint64_t s = seed * 1000003;
  auto alloc = [&](Weights& w, const std::string& prefix, const std::vector<WeightTensor>& list) {
    for (const WeightTensor& t : list) {
      const std::string name = prefix + t.name;
      DeviceBuffer buf(t.bytes());
      const auto [lo, hi] = weight_range(name, t, shapes.model.kind);
      fill_uniform(buf.as<void>(), t.rows * t.cols, t.elem_bytes, ++s, lo, hi);
      m.weight_bytes += double(t.bytes());
      w.t.emplace(name, std::move(buf));
    }
  };
  int linear = 0, attn = 0, moe = 0;
  for (const Block& b : m.blocks) {
    m.block_w.emplace_back();
    alloc(m.block_w.back(), "mixer.", mixer_weights(shapes, b.mixer));
    alloc(m.block_w.back(), "ffn.", ffn_weights(shapes, b.ffn));
    m.linear_index.push_back(b.mixer == Mixer::Linear ? linear++ : -1);
    m.attn_index.push_back(b.mixer == Mixer::Attention ? attn++ : -1);
    m.moe_index.push_back(b.ffn == Ffn::MoE ? moe++ : -1);
  }
  alloc(m.head, "", head_weights(shapes));
  KVB_CUDA_CHECK(cudaDeviceSynchronize());
}

StepRunner::~StepRunner() = default;
const RankShapes& StepRunner::shapes() const { return impl_->r; }
const std::vector<Block>& StepRunner::blocks() const { return impl_->blocks; }
double StepRunner::weight_bytes() const { return impl_->weight_bytes; }

bool StepRunner::prepare(const StepPoint& p, std::string* why) {
  Impl& m = *impl_;
  m.ps.reset();
  KVB_CUDA_CHECK(cudaDeviceSynchronize());
  const RankShapes& r = m.r;
  MemoryPlan plan = memory_plan(r, p);
  // Every request's pages: P of them, the last holding the rest of the context.
  const int P = int((p.context + kPageTokens - 1) / kPageTokens);
  const bool multi_query = r.model.attn_layers > 0 && p.tokens() > 1;
  std::vector<int32_t> indptr(size_t(p.batch) + 1);
  for (int i = 0; i <= p.batch; ++i) indptr[i] = i * P;
  const PagedMultiQueryShape mq_shape{p.batch, p.tokens(), r.model.attn_q_heads, r.model.attn_kv_heads,
                                      r.model.attn_head_dim, kPageTokens};
  // The multi-query kernel's split-KV partials follow FlashInfer's scheduler (and the GPU's SM
  // count), which the plan cannot see: what exceeds the plan's attention budget is added here.
  if (multi_query)
    plan.activations += std::max(0.0, double(PagedMultiQueryAttention::workspace_bytes(mq_shape, indptr)) -
                                          kAttentionWorkspaceBytes);
  // The weights are allocated already: compare the whole plan with what was free before them.
  const std::string refusal = memory_refusal(plan, double(gpu_free_bytes()) + m.weight_bytes);
  if (!refusal.empty()) {
    *why = refusal;
    return false;
  }
  auto ps = std::make_unique<PointState>();
  ps->p = p;
  const int B = p.batch;
  const LayerShape& s = r.model.layer;
  std::mt19937_64 rng(m.seed + 17);
  const int T = p.tokens(), R = B * T;
  ps->rows = R;
  const bool kvb = p.method == DecodeMethod::KVBuffer, verify = p.drafts > 0;
  // Token ids; row (r, t) at position context - T + t (decode: the last position of the context).
  std::vector<int32_t> ids(R), pos(R), slots(B), conv_slot(B), step_slot(size_t(B) * T), accept(B);
  std::uniform_int_distribution<int32_t> token(0, r.vocab - 1);
  std::uniform_real_distribution<double> draw(0, 1);
  for (int i = 0; i < R; ++i) ids[i] = token(rng), pos[i] = int32_t(p.context - T + i % T);
  for (int i = 0; i < B; ++i) {
    // In-place classic verify: 1 + T states and 1 + T conv windows per request (the step reads
    // the first window and writes it back after the T tokens).
    const bool in_place = verify && !kvb;
    slots[i] = in_place ? i * (T + 1) : i, conv_slot[i] = in_place ? i * (T + 1) : i;
    for (int t = 0; t < T; ++t) step_slot[size_t(i) * T + t] = i * (T + 1) + 1 + t;
    int accepted = 1;  // the last accepted token, then each draft with probability `acceptance` until one is rejected
    while (accepted < T && draw(rng) < p.acceptance) ++accepted;
    accept[i] = accepted;
  }
  auto upload = [](const std::vector<int32_t>& h) {
    DeviceBuffer d(std::max<size_t>(h.size(), 1) * 4);
    d.upload(h);
    return d;
  };
  ps->ids = upload(ids), ps->pos = upload(pos), ps->slots = upload(slots), ps->conv_slot = upload(conv_slot);
  ps->step_slot = upload(step_slot), ps->accept_len = upload(accept);
  // Paged KV: each request's pages scattered over the pool (a shuffled page table, as an
  // allocator's free list leaves it after a while).
  ps->pages_per_row = P;
  ps->kv_indices_h.resize(size_t(B) * P);
  std::iota(ps->kv_indices_h.begin(), ps->kv_indices_h.end(), 0);
  std::shuffle(ps->kv_indices_h.begin(), ps->kv_indices_h.end(), rng);
  const std::vector<int32_t> last(B, int32_t(p.context - int64_t(P - 1) * kPageTokens));
  ps->kv_indptr = upload(indptr), ps->kv_indices = upload(ps->kv_indices_h), ps->kv_last = upload(last);
  const size_t cache_elems = size_t(B) * P * kPageTokens * r.attn_kv_width();
  uint64_t fill_seed = m.seed * 7919 + 3;
  for (int l = 0; l < r.model.attn_layers; ++l) {
    ps->k_cache.emplace_back(cache_elems * 2);
    ps->v_cache.emplace_back(cache_elems * 2);
    fill_uniform_bf16(ps->k_cache.back().as<void>(), cache_elems, ++fill_seed, -1.f, 1.f);
    fill_uniform_bf16(ps->v_cache.back().as<void>(), cache_elems, ++fill_seed, -1.f, 1.f);
  }
  // Linear pools, filled as the sweep fills them.
  ps->pools = std::make_unique<DevicePools>(PoolPlan(linear_pool_tensors(r, p), size_t(B), r.model.linear_layers));
  const PoolPlan& pp = ps->pools->plan();
  for (int l = 0; l < r.model.linear_layers; ++l)
    for (const PoolTensor& t : pp.tensors()) {
      if (t.metadata) continue;
      const auto [lo, hi] = pool_value_range(t.name);
      const size_t n = t.elems_per_slot * B;
      if (t.name == "state")
        fill_uniform_state(ps->pools->at<void>(l, t.name), n, p.state, ++fill_seed, lo, hi);
      else
        fill_uniform(ps->pools->at<void>(l, t.name), n, t.elem_bytes, ++fill_seed, lo, hi);
    }
  if (kvb && verify) {
    // Every request buffered at a random fill, the same in every layer (one request's history).
    std::vector<int32_t> fill(B), ones(B, 1);
    for (int32_t& f : fill) f = int32_t(rng() % uint64_t(p.chunk));
    for (int l = 0; l < r.model.linear_layers; ++l) {
      KVB_CUDA_CHECK(cudaMemcpy(ps->pools->at<void>(l, "fill"), fill.data(), size_t(B) * 4, cudaMemcpyHostToDevice));
      KVB_CUDA_CHECK(cudaMemcpy(ps->pools->at<void>(l, "has_state"), ones.data(), size_t(B) * 4, cudaMemcpyHostToDevice));
      KVB_CUDA_CHECK(cudaMemset(ps->pools->at<void>(l, "done_count"), 0, size_t(B) * 4));
    }
    if (s.kind == LayerKind::GatedDeltaNet)  // the split path's coefficient records, one step's
      ps->scratch = DeviceBuffer(gdn_verify_detail::verify_coef_bytes(B, s.value_heads, T, p.chunk));
  } else if (kvb) {
    ps->row_fill = DeviceBuffer(size_t(B) * 4);
    ps->row_has = DeviceBuffer(size_t(B) * 4);
    ps->scratch = DeviceBuffer(size_t(B) * s.value_heads * 2 * s.head_v * 4);
    stagger_row_meta(ps->row_fill.as<int32_t>(), ps->row_has.as<int32_t>(), B, p.chunk, 0);
    for (int l = 0; l < r.model.linear_layers; ++l)
      KVB_CUDA_CHECK(cudaMemset(ps->pools->at<void>(l, "done_count"), 0, size_t(B) * 4));
  }
  if (kvb && verify && r.model.kind == LayerKind::GatedDeltaNet) ps->gdn_verify.resize(r.model.linear_layers);
  if (kvb && verify && r.model.kind == LayerKind::Mamba2) ps->mamba2_verify.resize(r.model.linear_layers);
  // Activations.
  const size_t d = size_t(r.hidden);
  const size_t in_width = std::max(r.linear_in_width(), r.model.attn_layers > 0 ? r.attn_in_width() : 0);
  const size_t up = r.gated_mlp ? 2 : 1;
  auto act = [&](size_t elems, int bytes = 2) {
    DeviceBuffer b(std::max<size_t>(elems, 1) * R * bytes);
    b.poison();
    return b;
  };
  ps->hidden = act(d), ps->normed = act(d), ps->proj = act(in_width);
  ps->q = act(r.linear_conv_dim()), ps->k = act(r.linear_conv_dim()), ps->v = act(r.linear_conv_dim());
  ps->g = act(s.value_heads, 4), ps->beta = act(s.value_heads, 4);
  ps->z = act(r.linear_out_rows()), ps->dt = act(s.value_heads);
  ps->lin_out = act(r.linear_out_rows()), ps->gated = act(std::max(r.linear_out_rows(), r.attn_q_width()));
  ps->attn_q = act(r.attn_q_width()), ps->attn_o = act(r.attn_q_width());
  ps->mlp_up = act(up * size_t(r.dense_ffn)), ps->mlp_act = act(r.dense_ffn);
  if (r.experts > 0) {
    const size_t k = size_t(r.top_k), I = size_t(r.expert_ffn);
    ps->route_bias = DeviceBuffer(size_t(r.experts) * 4);
    ps->route_bias.upload(routing_bias(r.experts, p.routing));
    ps->router_logits = act(r.experts), ps->topk_ids = act(k, 4), ps->topk_w = act(k, 4);
    ps->offsets = DeviceBuffer((size_t(r.experts) + 1) * 4), ps->order = act(k, 4), ps->position = act(k, 4);
    ps->x_sorted = act(k * d), ps->up_sorted = act(k * up * I), ps->act_sorted = act(k * I), ps->y_sorted = act(k * d);
    ps->shared_up = act(up * size_t(r.shared_ffn)), ps->shared_act = act(r.shared_ffn);
    ps->grouping = std::make_unique<ExpertGrouping>(R * r.top_k, r.experts);
  }
  ps->logits = act(r.vocab);
  fill_uniform_bf16(ps->hidden.as<void>(), size_t(R) * d, m.seed + 5, -1.f, 1.f);
  if (multi_query) {
    ps->verify_attention = std::make_unique<PagedMultiQueryAttention>(mq_shape, indptr, ps->kv_indptr.as<int32_t>(),
                                                                      ps->kv_indices.as<int32_t>(),
                                                                      ps->kv_last.as<int32_t>(), nullptr);
  } else if (r.model.attn_layers > 0) {
    PagedDecodeShape shape{B, r.model.attn_q_heads, r.model.attn_kv_heads, r.model.attn_head_dim, kPageTokens};
    ps->decode_attention = std::make_unique<PagedDecodeAttention>(
        shape, indptr, ps->kv_indptr.as<int32_t>(), ps->kv_indices.as<int32_t>(), ps->kv_last.as<int32_t>(), nullptr);
  }
  KVB_CUDA_CHECK(cudaDeviceSynchronize());
  m.ps = std::move(ps);
  m.expert_gemms.clear();
  m.expert_gemms.resize(r.experts > 0 ? size_t(r.model.blocks.mlp_layers) : 0);
  if (r.experts > 0) {
    // One eager step records each MoE layer's routing (and sizes its experts' GEMMs).
    m.recording = true;
    try {
      enqueue(nullptr, kAllTerms);
    } catch (...) {
      m.recording = false;
      throw;
    }
    m.recording = false;
    KVB_CUDA_CHECK(cudaDeviceSynchronize());
  }
  return true;
}

void StepRunner::Impl::linear_mixer(cudaStream_t st, int i, unsigned terms) {
  PointState& x = *ps;
  const Weights& w = block_w[i];
  const int B = x.p.batch, R = x.rows, T = x.p.tokens(), l = linear_index[i];
  const LayerShape& s = r.model.layer;
  const int W = int(r.linear_in_width());
  const bool gdn = s.kind == LayerKind::GatedDeltaNet;
  const int keys = s.key_heads * s.head_k, values = s.value_heads * s.head_v;
  const bool kvb = x.p.method == DecodeMethod::KVBuffer;
  DevicePools& pools = *x.pools;
  if (terms & kElementwise) rms_norm(x.hidden.as<bf16>(), w.at("mixer.norm"), x.normed.as<bf16>(), R, r.hidden, st);
  if (terms & kGemm) gemm(cublas.h, x.normed.as<bf16>(), w.at("mixer.in_proj"), x.proj.as<bf16>(), R, W, r.hidden, 0.f);
  if (terms & kElementwise) {
    ConvParams c;
    c.in = x.proj.as<bf16>(), c.in_stride = W, c.requests = B, c.tokens = T, c.conv_dim = int(r.linear_conv_dim());
    c.weight = w.at("mixer.conv"), c.window = pools.at<bf16>(l, "conv"), c.slot = x.conv_slot.as<int32_t>();
    c.out0 = x.q.as<bf16>(), c.out1 = x.k.as<bf16>(), c.out2 = x.v.as<bf16>();
    if (gdn) {
      // [q | k | v | z | b | a]
      c.in_offset = 0, c.w0 = keys, c.w1 = keys;
      causal_conv_update(c, st);
      gdn_gates(x.proj.as<bf16>(), W, 2 * keys + 2 * values, R, s.value_heads, w.at<float>("mixer.A"),
                w.at<float>("mixer.dt_bias"), x.g.as<float>(), x.beta.as<float>(), st);
    } else {
      // [z | x | B | C | dt]
      c.in_offset = values, c.w0 = values, c.w1 = keys;
      causal_conv_update(c, st);
      copy_columns(x.proj.as<bf16>(), W, 0, R, values, x.z.as<bf16>(), st);
      copy_columns(x.proj.as<bf16>(), W, 2 * values + 2 * keys, R, s.value_heads, x.dt.as<bf16>(), st);
    }
  }
  if ((terms & kLinear) && x.p.drafts > 0) linear_verify(st, i);
  // The decode kernels read their pools before waiting for the kernel before (pools_ready_at_launch):
  // the norm, projection, conv and gate kernels above write none of them, nor the slots, and the
  // step's row metadata advances after its last layer.
  if ((terms & kLinear) && x.p.drafts == 0) {
    if (gdn) {
      GdnStepIO io;
      io.batch = B, io.H = s.key_heads, io.HV = s.value_heads, io.K = s.head_k, io.V = s.head_v;
      io.slot = x.slots.as<int32_t>();
      io.q = x.q.as<bf16>(), io.k = x.k.as<bf16>(), io.v = x.v.as<bf16>();
      io.g = x.g.as<float>(), io.beta = x.beta.as<float>(), io.out = x.lin_out.as<bf16>();
      if (!kvb) {
        GdnRecurrentParams p;
        p.io = io;
        p.state_in = p.state_out = pools.at<void>(l, "state");
        p.state_type = x.p.state;
        p.pools_ready_at_launch = true;
        gdn_decode_recurrent(p, st);
      } else {
        GdnKVBufferParams p;
        p.io = io;
        p.capacity = x.p.chunk, p.state = pools.at<void>(l, "state"), p.state_type = x.p.state;
        p.buf_k = pools.at<void>(l, "buf_k"), p.buf_val = pools.at<void>(l, "buf_val");
        p.buf_gcum = pools.at<float>(l, "buf_gcum");
        p.row_fill = x.row_fill.as<int32_t>(), p.row_has_state = x.row_has.as<int32_t>();
        p.every_row_has_state = true, p.pools_ready_at_launch = true;
        p.scratch = x.scratch.as<float>();
        gdn_decode_kvbuffer(p, st);
      }
    } else {
      Mamba2StepIO io;
      io.batch = B, io.G = s.key_heads, io.NH = s.value_heads, io.N = s.head_k, io.P = s.head_v;
      io.slot = x.slots.as<int32_t>();
      io.x = x.q.as<bf16>(), io.B = x.k.as<bf16>(), io.C = x.v.as<bf16>();
      io.dt = x.dt.as<bf16>(), io.dt_bias = w.at<float>("mixer.dt_bias"), io.dt_softplus = true;
      io.A = w.at<float>("mixer.A"), io.D = w.at<float>("mixer.D"), io.z = x.z.as<bf16>();
      io.out = x.lin_out.as<bf16>();
      if (!kvb) {
        Mamba2RecurrentParams p;
        p.io = io, p.state = pools.at<void>(l, "state"), p.state_type = x.p.state;
        p.pools_ready_at_launch = true;
        mamba2_decode_recurrent(p, st);
      } else {
        Mamba2KVBufferParams p;
        p.io = io, p.capacity = x.p.chunk;
        p.state = pools.at<void>(l, "state"), p.state_type = x.p.state;
        p.buf_k = pools.at<bf16>(l, "buf_k"), p.buf_val = pools.at<bf16>(l, "buf_val");
        p.buf_gcum = pools.at<float>(l, "buf_gcum"), p.buf_beta = pools.at<float>(l, "buf_beta");
        p.row_fill = x.row_fill.as<int32_t>(), p.row_has_state = x.row_has.as<int32_t>();
        p.every_row_has_state = true, p.pools_ready_at_launch = true;
        mamba2_decode_kvbuffer(p, st);
      }
    }
  }
  if (terms & kElementwise)
    // GDN: per head, gated by silu(z) from the projection; Mamba-2: the kernel applied z already.
    gated_rms_norm(x.lin_out.as<bf16>(), w.at("mixer.out_norm"), int(linear_out_norm_width(r)),
                   gdn ? x.proj.as<bf16>() : nullptr, W, 2 * keys + values, x.gated.as<bf16>(), R, values,
                   int(linear_out_norm_group(r)), st);
  if (terms & kGemm) gemm(cublas.h, x.gated.as<bf16>(), w.at("mixer.out_proj"), x.hidden.as<bf16>(), R, r.hidden, values, 1.f);
}

void StepRunner::Impl::attention_mixer(cudaStream_t st, int i, unsigned terms) {
  PointState& x = *ps;
  const Weights& w = block_w[i];
  const int B = x.rows, l = attn_index[i];  // token rows
  const ModelSpec& md = r.model;
  const int W = int(r.attn_in_width()), qw = int(r.attn_q_width());
  if (terms & kElementwise) rms_norm(x.hidden.as<bf16>(), w.at("mixer.norm"), x.normed.as<bf16>(), B, r.hidden, st);
  if (terms & kGemm) gemm(cublas.h, x.normed.as<bf16>(), w.at("mixer.qkv_proj"), x.proj.as<bf16>(), B, W, r.hidden, 0.f);
  if (terms & kElementwise) {
    AttnPrepParams p;
    p.in = x.proj.as<bf16>(), p.in_stride = W, p.gate_width = r.attn_gate() ? qw : 0;
    p.rows = B, p.q_heads = md.attn_q_heads, p.kv_heads = md.attn_kv_heads, p.head_dim = md.attn_head_dim;
    p.rot_dim = rotary_dim(md), p.page_tokens = kPageTokens, p.tokens_per_request = x.p.tokens();
    p.theta = rope_theta(md);
    p.q_norm = w.at("mixer.q_norm"), p.k_norm = w.at("mixer.k_norm");
    p.pos = x.pos.as<int32_t>(), p.kv_indptr = x.kv_indptr.as<int32_t>(), p.kv_indices = x.kv_indices.as<int32_t>();
    p.q_out = x.attn_q.as<bf16>(), p.k_cache = x.k_cache[l].as<bf16>(), p.v_cache = x.v_cache[l].as<bf16>();
    attention_prep(p, st);
  }
  if ((terms & kAttention) && x.verify_attention)
    x.verify_attention->run(x.attn_q.as<bf16>(), x.k_cache[l].as<bf16>(), x.v_cache[l].as<bf16>(), x.attn_o.as<bf16>(),
                            st);
  if ((terms & kAttention) && x.decode_attention)
    x.decode_attention->run(x.attn_q.as<bf16>(), x.k_cache[l].as<bf16>(), x.v_cache[l].as<bf16>(), x.attn_o.as<bf16>(),
                            st);
  const bf16* o = x.attn_o.as<bf16>();
  if (r.attn_gate()) {
    if (terms & kElementwise) sigmoid_gate(x.attn_o.as<bf16>(), x.proj.as<bf16>(), W, qw, B, qw, x.gated.as<bf16>(), st);
    o = x.gated.as<bf16>();
  }
  if (terms & kGemm) gemm(cublas.h, o, w.at("mixer.o_proj"), x.hidden.as<bf16>(), B, r.hidden, qw, 1.f);
}

void StepRunner::Impl::dense_ffn(cudaStream_t st, int i, unsigned terms) {
  PointState& x = *ps;
  const Weights& w = block_w[i];
  const int B = x.rows, F = r.dense_ffn;  // token rows
  const int up = r.gated_mlp ? 2 : 1;
  if (terms & kElementwise) rms_norm(x.hidden.as<bf16>(), w.at("ffn.norm"), x.normed.as<bf16>(), B, r.hidden, st);
  if (terms & kGemm) gemm(cublas.h, x.normed.as<bf16>(), w.at("ffn.up_proj"), x.mlp_up.as<bf16>(), B, up * F, r.hidden, 0.f);
  if (terms & kElementwise) mlp_activation(x.mlp_up.as<bf16>(), x.mlp_act.as<bf16>(), B, F, r.gated_mlp, st);
  if (terms & kGemm) gemm(cublas.h, x.mlp_act.as<bf16>(), w.at("ffn.down_proj"), x.hidden.as<bf16>(), B, r.hidden, F, 1.f);
}

// Speculative verify of the T tokens of every request (chains): classic in place (each node's
// state into its slot, committed by index after the step) or KVBuffer (from S0 + buffer, the
// window into the scratch, committed for all layers after the step).
void StepRunner::Impl::linear_verify(cudaStream_t st, int i) {
  PointState& x = *ps;
  const Weights& w = block_w[i];
  const int B = x.p.batch, T = x.p.tokens(), l = linear_index[i];
  const LayerShape& s = r.model.layer;
  DevicePools& pools = *x.pools;
  const bool kvb = x.p.method == DecodeMethod::KVBuffer;
  const VerifyAccept accept{x.accept_len.as<int32_t>(), nullptr};
  if (s.kind == LayerKind::GatedDeltaNet) {
    const GdnVerifyIO io{B, T, s.key_heads, s.value_heads, s.head_k, s.head_v, x.slots.as<int32_t>(),
                         x.q.as<bf16>(), x.k.as<bf16>(), x.v.as<bf16>(), x.g.as<float>(), x.beta.as<float>(),
                         nullptr, x.lin_out.as<bf16>()};
    if (!kvb) {
      GdnVerifyClassicParams p;
      p.io = io;
      p.state = pools.at<void>(l, "state"), p.state_type = x.p.state;
      p.step_slot = x.step_slot.as<int32_t>();
      gdn_verify_classic(p, st);
      return;
    }
    GdnVerifyKVBufferParams p;
    p.io = io;
    p.entry = EntryType::BF16, p.capacity = x.p.chunk;
    p.state = pools.at<void>(l, "state"), p.state_type = x.p.state;
    p.buf_k = pools.at<void>(l, "buf_k"), p.buf_val = pools.at<void>(l, "buf_val");
    p.buf_gcum = pools.at<float>(l, "buf_gcum");
    p.fill = pools.at<int32_t>(l, "fill"), p.has_state = pools.at<int32_t>(l, "has_state");
    p.win_k = pools.at<void>(l, "win_k"), p.win_u = pools.at<void>(l, "win_u");
    p.win_gcum = pools.at<float>(l, "win_gcum"), p.win_base = pools.at<int32_t>(l, "win_base");
    p.accept = accept;
    p.coef = x.scratch.as<float>();
    gdn_verify_kvbuffer(p, st);
    x.gdn_verify.at(l) = p;
    return;
  }
  Mamba2VerifyIO io;
  io.batch = B, io.tokens = T, io.G = s.key_heads, io.NH = s.value_heads, io.N = s.head_k, io.P = s.head_v;
  io.slot = x.slots.as<int32_t>();
  io.x = x.q.as<bf16>(), io.B = x.k.as<bf16>(), io.C = x.v.as<bf16>();
  io.dt = x.dt.as<bf16>(), io.dt_bias = w.at<float>("mixer.dt_bias"), io.dt_softplus = true;
  io.A = w.at<float>("mixer.A"), io.D = w.at<float>("mixer.D"), io.z = x.z.as<bf16>();
  io.out = x.lin_out.as<bf16>();
  if (!kvb) {
    Mamba2VerifyClassicParams p;
    p.io = io;
    p.state = pools.at<void>(l, "state"), p.state_type = x.p.state;
    p.step_slot = x.step_slot.as<int32_t>();
    mamba2_verify_classic(p, st);
    return;
  }
  Mamba2VerifyKVBufferParams p;
  p.io = io;
  p.capacity = x.p.chunk;
  p.state = pools.at<void>(l, "state"), p.state_type = x.p.state;
  p.buf_k = pools.at<bf16>(l, "buf_k"), p.buf_val = pools.at<bf16>(l, "buf_val");
  p.buf_gcum = pools.at<float>(l, "buf_gcum"), p.buf_beta = pools.at<float>(l, "buf_beta");
  p.fill = pools.at<int32_t>(l, "fill"), p.has_state = pools.at<int32_t>(l, "has_state");
  p.win_k = pools.at<bf16>(l, "win_k"), p.win_u = pools.at<bf16>(l, "win_u");
  p.win_gcum = pools.at<float>(l, "win_gcum"), p.win_beta = pools.at<float>(l, "win_beta");
  p.win_base = pools.at<int32_t>(l, "win_base");
  p.accept = accept;
  mamba2_verify_kvbuffer(p, st);
  x.mamba2_verify.at(l) = p;
}

// After the step (the accepted lengths exist once the last layer has run): the scheduler's commit
// by index of the in-place classic states, or the KVBuffer commit of every layer.
void StepRunner::Impl::commit_verify(cudaStream_t st) {
  PointState& x = *ps;
  if (x.p.method == DecodeMethod::Classic) {
    advance_inplace_slots(x.p.batch, x.p.tokens(), x.accept_len.as<int32_t>(), x.slots.as<int32_t>(),
                          x.step_slot.as<int32_t>(), st);
  } else if (r.model.kind == LayerKind::GatedDeltaNet) {
    gdn_verify_kvbuffer_commit(x.gdn_verify.data(), int(x.gdn_verify.size()), st);
  } else {
    mamba2_verify_kvbuffer_commit(x.mamba2_verify.data(), int(x.mamba2_verify.size()), st);
  }
}

void StepRunner::Impl::record_expert_gemms(int i) {
  PointState& x = *ps;
  const Weights& w = block_w[i];
  ExpertGemms& g = expert_gemms.at(moe_index[i]);
  KVB_CUDA_CHECK(cudaDeviceSynchronize());
  g.offsets = x.offsets.download<int32_t>();
  g.offsets.resize(size_t(r.experts) + 1);
  g.experts.clear();
  for (int e = 0; e < r.experts; ++e)
    if (g.offsets[e + 1] > g.offsets[e]) g.experts.push_back(e);
  const int d = r.hidden, I = r.expert_ffn, up = r.gated_mlp ? 2 : 1;
  auto build = [&](ExpertGemms::Projection& p, int out, int in, const bf16* weights, const bf16* rows_in,
                   bf16* rows_out) {
    const size_t groups = g.experts.size();
    p = ExpertGemms::Projection{};
    std::vector<const void*> a, b;
    std::vector<void*> c;
    for (int e : g.experts) {
      const int n = g.offsets[e + 1] - g.offsets[e];
      p.ta.push_back(CUBLAS_OP_T), p.tb.push_back(CUBLAS_OP_N);
      p.m.push_back(out), p.n.push_back(n), p.k.push_back(in);
      p.lda.push_back(in), p.ldb.push_back(in), p.ldc.push_back(out), p.group_size.push_back(1);
      p.alpha.push_back(1.f), p.beta.push_back(0.f);
      a.push_back(weights + size_t(e) * out * in);
      b.push_back(rows_in + size_t(g.offsets[e]) * in);
      c.push_back(rows_out + size_t(g.offsets[e]) * out);
    }
    p.a = DeviceBuffer(std::max<size_t>(groups, 1) * sizeof(void*)), p.a.upload(a);
    p.b = DeviceBuffer(std::max<size_t>(groups, 1) * sizeof(void*)), p.b.upload(b);
    p.c = DeviceBuffer(std::max<size_t>(groups, 1) * sizeof(void*)), p.c.upload(c);
    p.ha = std::move(a), p.hb = std::move(b), p.hc = std::move(c);
  };
  build(g.up, up * I, d, w.at("ffn.experts_up"), x.x_sorted.as<bf16>(), x.up_sorted.as<bf16>());
  build(g.down, d, I, w.at("ffn.experts_down"), x.act_sorted.as<bf16>(), x.y_sorted.as<bf16>());
  if (grouped_capturable < 0 && x.p.grouped_expert_gemm && !g.experts.empty()) {
    // Try the grouped call inside a capture on a stream of its own; the graph is thrown away.
    cudaStream_t s = nullptr;
    KVB_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    use_stream(s);
    KVB_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    const ExpertGemms::Projection& p = g.up;
    const cublasStatus_t st = cublasGemmGroupedBatchedEx(
        cublas.h, p.ta.data(), p.tb.data(), p.m.data(), p.n.data(), p.k.data(), p.alpha.data(),
        p.a.as<const void*>(), CUDA_R_16BF, p.lda.data(), p.b.as<const void*>(), CUDA_R_16BF, p.ldb.data(),
        p.beta.data(), p.c.as<void*>(), CUDA_R_16BF, p.ldc.data(), int(p.m.size()), p.group_size.data(),
        CUBLAS_COMPUTE_32F);
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(s, &graph);
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    KVB_CUDA_CHECK(cudaStreamDestroy(s));
    use_stream(nullptr);
    grouped_capturable = st == CUBLAS_STATUS_SUCCESS && end == cudaSuccess;
    if (!grouped_capturable)
      grouped_failure = fmt::format("cublasGemmGroupedBatchedEx does not capture (cuBLAS status {}, {})", int(st),
                                    cudaGetErrorString(end));
  }
}

// On the stream cuBLAS was given (use_stream).
void StepRunner::Impl::expert_gemm(const ExpertGemms::Projection& p) {
  const int groups = int(p.m.size());
  if (groups == 0) return;
  if (ps->p.grouped_expert_gemm && grouped_capturable == 1) {
    KVB_CUBLAS_CHECK(cublasGemmGroupedBatchedEx(
        cublas.h, p.ta.data(), p.tb.data(), p.m.data(), p.n.data(), p.k.data(), p.alpha.data(),
        p.a.as<const void*>(), CUDA_R_16BF, p.lda.data(), p.b.as<const void*>(), CUDA_R_16BF, p.ldb.data(),
        p.beta.data(), p.c.as<void*>(), CUDA_R_16BF, p.ldc.data(), groups, p.group_size.data(), CUBLAS_COMPUTE_32F));
    return;
  }
  // The same problems, one cublasGemmEx each.
  for (int j = 0; j < groups; ++j)
    KVB_CUBLAS_CHECK(cublasGemmEx(cublas.h, CUBLAS_OP_T, CUBLAS_OP_N, p.m[j], p.n[j], p.k[j], &p.alpha[j], p.ha[j],
                                  CUDA_R_16BF, p.lda[j], p.hb[j], CUDA_R_16BF, p.ldb[j], &p.beta[j], p.hc[j],
                                  CUDA_R_16BF, p.ldc[j], CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// Routed experts (+ the shared expert): router GEMM, top-k, grouping by expert (CUB radix sort),
// the token rows gathered in expert order, the experts' up and down GEMMs, the activation, and
// the weighted combine into the residual stream. The routing, grouping and combine kernels count
// with the GEMMs (the MoE term).
void StepRunner::Impl::moe_ffn(cudaStream_t st, int i, unsigned terms) {
  PointState& x = *ps;
  const Weights& w = block_w[i];
  const int B = x.rows, d = r.hidden, k = r.top_k, n = B * k, I = r.expert_ffn, S = r.shared_ffn;  // B: token rows
  const int up = r.gated_mlp ? 2 : 1;
  if (terms & kElementwise) rms_norm(x.hidden.as<bf16>(), w.at("ffn.norm"), x.normed.as<bf16>(), B, d, st);
  if (terms & kGemm) {
    gemm(cublas.h, x.normed.as<bf16>(), w.at("ffn.router"), x.router_logits.as<bf16>(), B, r.experts, d, 0.f);
    router_top_k(x.router_logits.as<bf16>(), x.route_bias.as<float>(), B, r.experts, k, x.topk_ids.as<int32_t>(),
                 x.topk_w.as<float>(), st);
    x.grouping->run(x.topk_ids.as<int32_t>(), x.offsets.as<int32_t>(), x.order.as<int32_t>(),
                    x.position.as<int32_t>(), st);
    if (recording) record_expert_gemms(i);
    gather_rows(x.normed.as<bf16>(), x.order.as<int32_t>(), k, n, d, x.x_sorted.as<bf16>(), st);
    expert_gemm(expert_gemms.at(moe_index[i]).up);
  }
  if (terms & kElementwise) mlp_activation(x.up_sorted.as<bf16>(), x.act_sorted.as<bf16>(), n, I, r.gated_mlp, st);
  if (terms & kGemm) expert_gemm(expert_gemms.at(moe_index[i]).down);
  if (S > 0) {
    if (terms & kGemm) gemm(cublas.h, x.normed.as<bf16>(), w.at("ffn.shared_up"), x.shared_up.as<bf16>(), B, up * S, d, 0.f);
    if (terms & kElementwise) mlp_activation(x.shared_up.as<bf16>(), x.shared_act.as<bf16>(), B, S, r.gated_mlp, st);
    if (terms & kGemm) gemm(cublas.h, x.shared_act.as<bf16>(), w.at("ffn.shared_down"), x.hidden.as<bf16>(), B, d, S, 1.f);
  }
  if (terms & kGemm)
    moe_combine(x.y_sorted.as<bf16>(), x.position.as<int32_t>(), x.topk_w.as<float>(), B, k, d, x.hidden.as<bf16>(), st);
}

void StepRunner::Impl::block_step(cudaStream_t st, int i, unsigned terms) {
  const Block& b = blocks[i];
  if (b.mixer == Mixer::Linear) linear_mixer(st, i, terms);
  if (b.mixer == Mixer::Attention) attention_mixer(st, i, terms);
  if (b.ffn == Ffn::Dense) dense_ffn(st, i, terms);
  if (b.ffn == Ffn::MoE) moe_ffn(st, i, terms);
}

void StepRunner::enqueue_blocks(cudaStream_t st, int first, int last) {
  Impl& m = *impl_;
  if (!m.ps) throw std::logic_error("StepRunner: prepare a point first");
  m.use_stream(st);
  m.recording = true;
  try {
    for (int i = first; i < last; ++i) m.block_step(st, i, kAllTerms);
  } catch (...) {
    m.recording = false;
    throw;
  }
  m.recording = false;
}

void StepRunner::enqueue(cudaStream_t st, unsigned terms) {
  Impl& m = *impl_;
  if (!m.ps) throw std::logic_error("StepRunner: prepare a point first");
  PointState& x = *m.ps;
  const int B = x.rows;  // token rows
  m.use_stream(st);
  const bool tied = m.r.model.blocks.tied_embeddings;
  if (terms & kElementwise)
    embedding_gather(m.head.at(tied ? "lm_head" : "embedding"), x.ids.as<int32_t>(), x.hidden.as<bf16>(), B,
                     m.r.hidden, st);
  for (size_t i = 0; i < m.blocks.size(); ++i) m.block_step(st, int(i), terms);
  if ((terms & kLinear) && x.p.method == DecodeMethod::KVBuffer && x.p.drafts == 0 && x.p.chunk > 1)
    advance_row_meta(x.row_fill.as<int32_t>(), x.row_has.as<int32_t>(), x.p.batch, x.p.chunk, st);
  if ((terms & kLinear) && x.p.drafts > 0) m.commit_verify(st);
  if (terms & kElementwise) rms_norm(x.hidden.as<bf16>(), m.head.at("final_norm"), x.normed.as<bf16>(), B, m.r.hidden, st);
  if (terms & kGemm)
    gemm(m.cublas.h, x.normed.as<bf16>(), m.head.at("lm_head"), x.logits.as<bf16>(), B, m.r.vocab, m.r.hidden, 0.f);
}

MeasuredStep StepRunner::measure(double budget_s, bool whole_step) {
  Impl& m = *impl_;
  if (!m.ps) throw std::logic_error("StepRunner: prepare a point first");
  GraphTiming how;
  how.layers = 1;
  // Whole flush cycles: every request passes through every fill of the buffer (decode: C steps;
  // verify, whose fill moves by the accepted m: C steps, as the verify sweep samples).
  const StepPoint& p = m.ps->p;
  const int cycle = p.method == DecodeMethod::KVBuffer ? std::max(1, p.chunk) : 1;
  how.steps_per_sample = p.drafts > 0 ? std::max(cycle, 4) : cycle * ((4 + cycle - 1) / cycle);
  how.budget_s = budget_s;
  how.min_samples = 5, how.max_samples = 30;
  auto time = [&](unsigned terms) {
    return time_graph_steps([&](cudaStream_t st) { enqueue(st, terms); }, how);
  };
  MeasuredStep out;
  if (whole_step) out.total = time(kAllTerms);
  out.linear = time(kLinear);
  out.attention = m.r.model.attn_layers > 0 ? time(kAttention) : TimingStats{};
  out.gemm = time(kGemm);
  out.elementwise = time(kElementwise);
  out.attention_split_kv = (m.ps->decode_attention && m.ps->decode_attention->split_kv()) ||
                           (m.ps->verify_attention && m.ps->verify_attention->split_kv());
  return out;
}

std::string StepRunner::expert_gemm() const {
  const Impl& m = *impl_;
  if (m.r.experts == 0) return "none";
  if (!m.ps->p.grouped_expert_gemm) return "loop";
  return m.grouped_capturable == 1 ? "grouped" : "loop (" + m.grouped_failure + ")";
}

void* StepRunner::hidden() const { return impl_->ps->hidden.as<void>(); }
void* StepRunner::activation(const std::string& name) const {
  const PointState& x = *impl_->ps;
  if (name == "router_logits") return x.router_logits.as<void>();
  if (name == "topk_ids") return x.topk_ids.as<void>();
  if (name == "topk_w") return x.topk_w.as<void>();
  if (name == "offsets") return x.offsets.as<void>();
  if (name == "order") return x.order.as<void>();
  if (name == "position") return x.position.as<void>();
  throw std::invalid_argument("StepRunner::activation: no buffer '" + name + "'");
}
void* StepRunner::weight(int block, const std::string& name) const { return impl_->block_w.at(block).at<void>(name); }
void* StepRunner::linear_pool(int block, const std::string& tensor) const {
  const int l = impl_->linear_index.at(block);
  if (l < 0) throw std::invalid_argument("block " + std::to_string(block) + " is not a linear layer");
  return impl_->ps->pools->at<void>(l, tensor);
}
void* StepRunner::k_cache(int block) const { return impl_->ps->k_cache.at(impl_->attn_index.at(block)).as<void>(); }
void* StepRunner::v_cache(int block) const { return impl_->ps->v_cache.at(impl_->attn_index.at(block)).as<void>(); }
const std::vector<int32_t>& StepRunner::kv_indices() const { return impl_->ps->kv_indices_h; }
int StepRunner::pages_per_row() const { return impl_->ps->pages_per_row; }

}  // namespace kvbuf::step
