// The elementwise and normalisation kernels of a whole-model decode step around the projections
// (cuBLAS), the full attention (FlashInfer) and the linear attention (kernels/): what an engine's
// decoder layer runs between its GEMMs. bf16 activations, fp32 arithmetic. Raw pointers; every
// launch is checked. They serve the step runner only (bench/step/step_runner.cu), so they live
// next to it rather than in kernels/, which holds the linear-attention kernels under study.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace kvbuf::step {

using bf16 = __nv_bfloat16;

// Epsilon of every RMSNorm of the Qwen3.5 / Nemotron-H configs (rms_norm_eps).
constexpr float kRmsEps = 1e-6f;

// out[r, :] = x[r, :] / rms(x[r, :]) * w, rows of `cols` (x and out row strides = cols).
void rms_norm(const bf16* x, const bf16* w, bf16* out, int rows, int cols, cudaStream_t s);

// hidden[r, :] = table[ids[r], :].
void embedding_gather(const bf16* table, const int32_t* ids, bf16* hidden, int rows, int cols, cudaStream_t s);

// The short causal conv of a linear-attention layer over `conv_dim` channels of each token row
// of `in` (row stride in_stride, channels from column in_offset), depthwise, kernel width 4 with
// window[slot] [conv_dim, 3] (bf16, oldest first), SiLU after; the window shifts in the token. A
// request's `tokens` rows (speculative verify: its T tokens, rows r T .. r T + T - 1) pass through
// its window in order, which keeps the last three. The output channels are split into three
// contiguous tensors: [0, w0) -> out0 [rows, w0], [w0, w0 + w1) -> out1, the rest -> out2 (GDN:
// q, k, v; Mamba-2: x, B, C).
struct ConvParams {
  const bf16* in = nullptr;
  int in_stride = 0, in_offset = 0;
  int requests = 0, tokens = 1, conv_dim = 0, w0 = 0, w1 = 0;
  const bf16* weight = nullptr;  // [conv_dim, 4]
  bf16* window = nullptr;        // [slots, conv_dim, 3]
  const int32_t* slot = nullptr; // [requests]
  bf16 *out0 = nullptr, *out1 = nullptr, *out2 = nullptr;
};
void causal_conv_update(const ConvParams& p, cudaStream_t s);

// GDN gates from the in-projection's b and a columns (row stride in_stride, b at b_offset, a at
// b_offset + HV): g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b), fp32 [rows, HV].
void gdn_gates(const bf16* in, int in_stride, int b_offset, int rows, int HV, const float* A_log,
               const float* dt_bias, float* g, float* beta, cudaStream_t s);

// dst[r, :width] = src[r * src_stride + offset + :width] (a column slice made contiguous).
void copy_columns(const bf16* src, int src_stride, int offset, int rows, int width, bf16* dst, cudaStream_t s);

// Gated RMSNorm of the linear-attention output before out_proj: per row and group of `group`
// channels, out = x / rms(group) * w[channel % w_len] * (z ? silu(z) : 1); z at column z_offset of
// rows of stride z_stride. x, out [rows, width].
void gated_rms_norm(const bf16* x, const bf16* w, int w_len, const bf16* z, int z_stride, int z_offset, bf16* out,
                    int rows, int width, int group, cudaStream_t s);

// Full-attention input of one token per row: from the qkv projection [q | gate | k | v]
// (row stride in_stride; gate present when gate_width > 0), RMSNorm of every q and k head (q_norm,
// k_norm [head_dim]), NeoX rotary embedding of the first rot_dim dims at position pos[r] (base
// theta), q to q_out [rows, q_heads, head_dim], k and v appended to the paged caches
// [pages, kv_heads, page_tokens, head_dim] at pos[r] of the row's request (rows are request-major,
// tokens_per_request each: decode 1, verify T): page kv_indices[kv_indptr[request] + pos /
// page_tokens], slot pos % page_tokens.
struct AttnPrepParams {
  const bf16* in = nullptr;
  int in_stride = 0, gate_width = 0;
  int rows = 0, q_heads = 0, kv_heads = 0, head_dim = 0, rot_dim = 0, page_tokens = 16;
  int tokens_per_request = 1;
  float theta = 1e7f;
  const bf16 *q_norm = nullptr, *k_norm = nullptr;
  const int32_t* pos = nullptr;
  const int32_t *kv_indptr = nullptr, *kv_indices = nullptr;
  bf16* q_out = nullptr;
  bf16 *k_cache = nullptr, *v_cache = nullptr;
};
void attention_prep(const AttnPrepParams& p, cudaStream_t s);

// out[r, j] = o[r, j] * sigmoid(in[r * in_stride + offset + j]), j < width (Qwen's attention
// output gate).
void sigmoid_gate(const bf16* o, const bf16* in, int in_stride, int offset, int rows, int width, bf16* out,
                  cudaStream_t s);

// MLP activation: gated (SwiGLU) out[r, i] = silu(up[r, i]) * up[r, ffn + i] (up [rows, 2 ffn]);
// not gated (Nemotron-H's squared ReLU) out = relu(up)^2 (up [rows, ffn]).
void mlp_activation(const bf16* up, bf16* out, int rows, int ffn, bool gated, cudaStream_t s);

// The scheduler's per-row buffer metadata of KVBuffer decode: staggered fills (row i at i % C,
// every row with a state, as in a steady decode batch), and the advance after each step (fill
// + 1, or 0 after the fold at C - 1).
void stagger_row_meta(int32_t* fill, int32_t* has_state, int rows, int capacity, cudaStream_t s);
void advance_row_meta(int32_t* fill, int32_t* has_state, int rows, int capacity, cudaStream_t s);

// The scheduler's commit by index of in-place classic verify (chains), as the verify sweep does
// it: request r owns slots r (T + 1) + j, j = 0..T, its state in slot[r] and node t's in
// step_slot[r, t] = r (T + 1) + (j + 1 + t) mod (T + 1); accepting m tokens makes node m's slot the
// state and gives the other T slots to the next step's nodes.
void advance_inplace_slots(int requests, int T, const int32_t* accept_len, int32_t* slot, int32_t* step_slot,
                           cudaStream_t s);

}  // namespace kvbuf::step

namespace kvbuf::step {

// MoE routing on the device, as bench/step/step_routing.h defines it on the host: per row of the
// router's logits [rows, experts] (bf16) plus bias [experts], the k largest (ties: lower expert
// first) into ids [rows, k] and their softmax weights over the k into weights [rows, k]. One warp
// per row; experts at most 1024.
void router_top_k(const bf16* logits, const float* bias, int rows, int experts, int k, int32_t* ids, float* weights,
                  cudaStream_t s);

// The assignments grouped by expert (step_routing.h's ExpertGroups) with CUB's stable radix sort of
// (expert, assignment index): offsets [experts + 1], order and position [assignments]. Owns the
// sort's temporary storage, sized at construction for `assignments` and `experts`.
class ExpertGrouping {
 public:
  ExpertGrouping(int assignments, int experts);
  ~ExpertGrouping();
  ExpertGrouping(const ExpertGrouping&) = delete;
  ExpertGrouping& operator=(const ExpertGrouping&) = delete;
  void run(const int32_t* ids, int32_t* offsets, int32_t* order, int32_t* position, cudaStream_t s) const;

 private:
  int n_, experts_, end_bit_;
  size_t temp_bytes_ = 0;
  void *temp_ = nullptr, *iota_ = nullptr, *sorted_ids_ = nullptr;
};

// out[p, :] = x[order[p] / k, :], p < assignments (the rows each expert multiplies, grouped).
void gather_rows(const bf16* x, const int32_t* order, int k, int assignments, int cols, bf16* out, cudaStream_t s);
// hidden[r, :] += sum_j weights[r, j] y[position[r k + j], :] (the routed experts' outputs
// combined into the residual stream).
void moe_combine(const bf16* y, const int32_t* position, const float* weights, int rows, int k, int cols,
                 bf16* hidden, cudaStream_t s);

}  // namespace kvbuf::step
