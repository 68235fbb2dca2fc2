#include "bench/step/step_kernels.h"

#include <algorithm>
#include <cub/device/device_radix_sort.cuh>
#include <stdexcept>

#include "kernels/common/cuda_check.h"

namespace kvbuf::step {
namespace {

__device__ __forceinline__ float f(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ bf16 b(float x) { return __float2bfloat16(x); }
__device__ __forceinline__ float silu(float x) { return x / (1.f + __expf(-x)); }
__device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + __expf(-x)); }
__device__ __forceinline__ float softplus(float x) { return x > 20.f ? x : log1pf(__expf(x)); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// Sum over a block of blockDim.x (a multiple of 32, at most 1024) threads.
__device__ float block_sum(float v) {
  __shared__ float part[32];
  v = warp_sum(v);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) part[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / 32;
  v = lane < warps ? part[lane] : 0.f;
  return warp_sum(v);
}

unsigned blocks(size_t n, int threads) { return unsigned(std::min<size_t>((n + threads - 1) / threads, 1u << 20)); }

__global__ void rms_norm_kernel(const bf16* x, const bf16* w, bf16* out, int cols) {
  const bf16* xr = x + size_t(blockIdx.x) * cols;
  float ss = 0;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) ss += f(xr[c]) * f(xr[c]);
  const float inv = rsqrtf(block_sum(ss) / cols + kRmsEps);
  bf16* o = out + size_t(blockIdx.x) * cols;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) o[c] = b(f(xr[c]) * inv * f(w[c]));
}

__global__ void gather_kernel(const bf16* table, const int32_t* ids, bf16* hidden, int cols) {
  const bf16* src = table + size_t(ids[blockIdx.x]) * cols;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) hidden[size_t(blockIdx.x) * cols + c] = src[c];
}

__global__ void conv_kernel(ConvParams p) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= size_t(p.requests) * p.conv_dim) return;
  const int req = int(i / p.conv_dim), c = int(i % p.conv_dim);
  bf16* win = p.window + (size_t(p.slot[req]) * p.conv_dim + c) * 3;
  const bf16* w = p.weight + size_t(c) * 4;
  const float w0 = f(w[0]), w1 = f(w[1]), w2 = f(w[2]), w3 = f(w[3]);
  float s0 = f(win[0]), s1 = f(win[1]), s2 = f(win[2]);
  const int out2_width = p.conv_dim - p.w0 - p.w1;
  for (int t = 0; t < p.tokens; ++t) {
    const size_t r = size_t(req) * p.tokens + t;
    const bf16 xb = p.in[r * p.in_stride + p.in_offset + c];
    const float x = f(xb);
    const float y = silu(w0 * s0 + w1 * s1 + w2 * s2 + w3 * x);
    s0 = s1, s1 = s2, s2 = x;
    if (c < p.w0)
      p.out0[r * p.w0 + c] = b(y);
    else if (c < p.w0 + p.w1)
      p.out1[r * p.w1 + c - p.w0] = b(y);
    else
      p.out2[r * out2_width + c - p.w0 - p.w1] = b(y);
  }
  win[0] = b(s0), win[1] = b(s1), win[2] = b(s2);
}

__global__ void gdn_gates_kernel(const bf16* in, int in_stride, int b_offset, int rows, int HV, const float* A_log,
                                 const float* dt_bias, float* g, float* beta) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows * HV) return;
  const int r = i / HV, h = i % HV;
  const bf16* row = in + size_t(r) * in_stride + b_offset;
  beta[i] = sigmoid(f(row[h]));
  g[i] = -__expf(A_log[h]) * softplus(f(row[HV + h]) + dt_bias[h]);
}

__global__ void copy_columns_kernel(const bf16* src, int src_stride, int offset, int rows, int width, bf16* dst) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= size_t(rows) * width) return;
  const size_t r = i / width, c = i % width;
  dst[i] = src[r * src_stride + offset + c];
}

// One warp per (row, group).
__global__ void gated_rms_norm_kernel(const bf16* x, const bf16* w, int w_len, const bf16* z, int z_stride,
                                      int z_offset, bf16* out, int rows, int width, int group) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  const int groups = width / group;
  if (warp >= rows * groups) return;
  const int r = warp / groups, gi = warp % groups;
  const bf16* xr = x + size_t(r) * width + size_t(gi) * group;
  float ss = 0;
  for (int c = lane; c < group; c += 32) ss += f(xr[c]) * f(xr[c]);
  const float inv = rsqrtf(warp_sum(ss) / group + kRmsEps);
  bf16* o = out + size_t(r) * width + size_t(gi) * group;
  for (int c = lane; c < group; c += 32) {
    const int ch = gi * group + c;
    float y = f(xr[c]) * inv * f(w[ch % w_len]);
    if (z) y *= silu(f(z[size_t(r) * z_stride + z_offset + ch]));
    o[c] = b(y);
  }
}

// One warp per (row, head) over q heads then kv heads.
__global__ void attention_prep_kernel(AttnPrepParams p) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  const int heads = p.q_heads + p.kv_heads;
  if (warp >= p.rows * heads) return;
  const int r = warp / heads, h = warp % heads;
  const bool is_q = h < p.q_heads;
  const int D = p.head_dim;
  const size_t q_width = size_t(p.q_heads) * D, kv_width = size_t(p.kv_heads) * D;
  const bf16* row = p.in + size_t(r) * p.in_stride;
  const bf16* src = is_q ? row + size_t(h) * D : row + q_width + p.gate_width + size_t(h - p.q_heads) * D;
  const bf16* nw = is_q ? p.q_norm : p.k_norm;
  float ss = 0;
  for (int c = lane; c < D; c += 32) ss += f(src[c]) * f(src[c]);
  const float inv = rsqrtf(warp_sum(ss) / D + kRmsEps);
  const int pos = p.pos[r];
  bf16* dst;
  bf16* vdst = nullptr;
  const bf16* vsrc = nullptr;
  if (is_q) {
    dst = p.q_out + (size_t(r) * p.q_heads + h) * D;
  } else {
    const int kh = h - p.q_heads;
    const int page = p.kv_indices[p.kv_indptr[r / p.tokens_per_request] + pos / p.page_tokens];
    const size_t at = ((size_t(page) * p.kv_heads + kh) * p.page_tokens + pos % p.page_tokens) * D;
    dst = p.k_cache + at;
    vdst = p.v_cache + at;
    vsrc = row + q_width + p.gate_width + kv_width + size_t(kh) * D;
  }
  const int half = p.rot_dim / 2;
  for (int c = lane; c < D; c += 32) {
    const float x = f(src[c]) * inv * f(nw[c]);
    float y = x;
    if (c < p.rot_dim) {
      const int i = c < half ? c : c - half;
      const int pair = c < half ? c + half : c - half;
      const float xp = f(src[pair]) * inv * f(nw[pair]);
      const float angle = pos * powf(p.theta, -2.f * i / p.rot_dim);
      float sn, cs;
      sincosf(angle, &sn, &cs);
      y = c < half ? x * cs - xp * sn : x * cs + xp * sn;
    }
    dst[c] = b(y);
    if (vdst) vdst[c] = vsrc[c];
  }
}

__global__ void sigmoid_gate_kernel(const bf16* o, const bf16* in, int in_stride, int offset, int rows, int width,
                                    bf16* out) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= size_t(rows) * width) return;
  const size_t r = i / width, c = i % width;
  out[i] = b(f(o[i]) * sigmoid(f(in[r * in_stride + offset + c])));
}

__global__ void mlp_activation_kernel(const bf16* up, bf16* out, int rows, int ffn, bool gated) {
  const size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x;
  if (i >= size_t(rows) * ffn) return;
  const size_t r = i / ffn, c = i % ffn;
  if (gated) {
    out[i] = b(silu(f(up[r * 2 * ffn + c])) * f(up[r * 2 * ffn + ffn + c]));
  } else {
    const float x = fmaxf(f(up[i]), 0.f);
    out[i] = b(x * x);
  }
}

__global__ void stagger_kernel(int32_t* fill, int32_t* has_state, int rows, int capacity) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows) return;
  fill[i] = i % capacity;
  has_state[i] = 1;
}

__global__ void advance_kernel(int32_t* fill, int32_t* has_state, int rows, int capacity) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= rows) return;
  const int n = fill[i] + 1;
  fill[i] = n == capacity ? 0 : n;
  has_state[i] = 1;
}

__global__ void advance_inplace_kernel(int requests, int T, const int32_t* accept_len, int32_t* slot,
                                      int32_t* step_slot) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= requests) return;
  const int m = min(max(accept_len[r], 0), T);
  const int base = r * (T + 1), j = (slot[r] - base + m) % (T + 1);
  slot[r] = base + j;
  for (int t = 0; t < T; ++t) step_slot[r * T + t] = base + (j + 1 + t) % (T + 1);
}

}  // namespace

void advance_inplace_slots(int requests, int T, const int32_t* accept_len, int32_t* slot, int32_t* step_slot,
                           cudaStream_t s) {
  advance_inplace_kernel<<<blocks(requests, 128), 128, 0, s>>>(requests, T, accept_len, slot, step_slot);
  KVB_CUDA_CHECK_LAUNCH();
}

void rms_norm(const bf16* x, const bf16* w, bf16* out, int rows, int cols, cudaStream_t s) {
  rms_norm_kernel<<<rows, 256, 0, s>>>(x, w, out, cols);
  KVB_CUDA_CHECK_LAUNCH();
}

void embedding_gather(const bf16* table, const int32_t* ids, bf16* hidden, int rows, int cols, cudaStream_t s) {
  gather_kernel<<<rows, 256, 0, s>>>(table, ids, hidden, cols);
  KVB_CUDA_CHECK_LAUNCH();
}

void causal_conv_update(const ConvParams& p, cudaStream_t s) {
  conv_kernel<<<blocks(size_t(p.requests) * p.conv_dim, 256), 256, 0, s>>>(p);
  KVB_CUDA_CHECK_LAUNCH();
}

void gdn_gates(const bf16* in, int in_stride, int b_offset, int rows, int HV, const float* A_log,
               const float* dt_bias, float* g, float* beta, cudaStream_t s) {
  gdn_gates_kernel<<<blocks(size_t(rows) * HV, 256), 256, 0, s>>>(in, in_stride, b_offset, rows, HV, A_log, dt_bias,
                                                                  g, beta);
  KVB_CUDA_CHECK_LAUNCH();
}

void copy_columns(const bf16* src, int src_stride, int offset, int rows, int width, bf16* dst, cudaStream_t s) {
  copy_columns_kernel<<<blocks(size_t(rows) * width, 256), 256, 0, s>>>(src, src_stride, offset, rows, width, dst);
  KVB_CUDA_CHECK_LAUNCH();
}

void gated_rms_norm(const bf16* x, const bf16* w, int w_len, const bf16* z, int z_stride, int z_offset, bf16* out,
                    int rows, int width, int group, cudaStream_t s) {
  const size_t warps = size_t(rows) * (width / group);
  gated_rms_norm_kernel<<<blocks(warps * 32, 256), 256, 0, s>>>(x, w, w_len, z, z_stride, z_offset, out, rows, width,
                                                               group);
  KVB_CUDA_CHECK_LAUNCH();
}

void attention_prep(const AttnPrepParams& p, cudaStream_t s) {
  const size_t warps = size_t(p.rows) * (p.q_heads + p.kv_heads);
  attention_prep_kernel<<<blocks(warps * 32, 256), 256, 0, s>>>(p);
  KVB_CUDA_CHECK_LAUNCH();
}

void sigmoid_gate(const bf16* o, const bf16* in, int in_stride, int offset, int rows, int width, bf16* out,
                  cudaStream_t s) {
  sigmoid_gate_kernel<<<blocks(size_t(rows) * width, 256), 256, 0, s>>>(o, in, in_stride, offset, rows, width, out);
  KVB_CUDA_CHECK_LAUNCH();
}

void mlp_activation(const bf16* up, bf16* out, int rows, int ffn, bool gated, cudaStream_t s) {
  mlp_activation_kernel<<<blocks(size_t(rows) * ffn, 256), 256, 0, s>>>(up, out, rows, ffn, gated);
  KVB_CUDA_CHECK_LAUNCH();
}

void stagger_row_meta(int32_t* fill, int32_t* has_state, int rows, int capacity, cudaStream_t s) {
  stagger_kernel<<<blocks(rows, 256), 256, 0, s>>>(fill, has_state, rows, capacity);
  KVB_CUDA_CHECK_LAUNCH();
}

void advance_row_meta(int32_t* fill, int32_t* has_state, int rows, int capacity, cudaStream_t s) {
  advance_kernel<<<blocks(rows, 256), 256, 0, s>>>(fill, has_state, rows, capacity);
  KVB_CUDA_CHECK_LAUNCH();
}

}  // namespace kvbuf::step

namespace kvbuf::step {
namespace {

constexpr int kMaxExpertsPerLane = 32;  // experts <= 1024

__global__ void router_top_k_kernel(const bf16* logits, const float* bias, int rows, int experts, int k, int32_t* ids,
                                    float* weights) {
  const int row = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;
  const bf16* l = logits + size_t(row) * experts;
  unsigned taken = 0;  // bit i: expert lane + 32 i chosen already
  float chosen_logit = 0, top = -INFINITY;
  for (int j = 0; j < k; ++j) {
    float best = -INFINITY;
    int best_e = experts;
    for (int i = 0; lane + 32 * i < experts; ++i) {
      const int e = lane + 32 * i;
      const float sc = f(l[e]) + bias[e];
      if (!(taken >> i & 1) && (sc > best || (sc == best && e < best_e))) best = sc, best_e = e;
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float ob = __shfl_xor_sync(0xffffffffu, best, o);
      const int oe = __shfl_xor_sync(0xffffffffu, best_e, o);
      if (ob > best || (ob == best && oe < best_e)) best = ob, best_e = oe;
    }
    if (best_e % 32 == lane) taken |= 1u << (best_e / 32);
    const float logit = f(l[best_e]);
    if (lane == j) chosen_logit = logit;
    if (lane == 0) ids[size_t(row) * k + j] = best_e;
    top = fmaxf(top, logit);
  }
  const float ex = lane < k ? __expf(chosen_logit - top) : 0.f;
  const float sum = warp_sum(ex);
  if (lane < k) weights[size_t(row) * k + lane] = ex / sum;
}

__global__ void iota_kernel(int32_t* v, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] = i;
}

// offsets[e] = first position of expert e in the sorted ids (lower bound), offsets[experts] = n.
__global__ void offsets_kernel(const int32_t* sorted_ids, int n, int experts, int32_t* offsets) {
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e > experts) return;
  int lo = 0, hi = n;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (sorted_ids[mid] < e) lo = mid + 1; else hi = mid;
  }
  offsets[e] = lo;
}

__global__ void position_kernel(const int32_t* order, int n, int32_t* position) {
  const int p = blockIdx.x * blockDim.x + threadIdx.x;
  if (p < n) position[order[p]] = p;
}

__global__ void gather_rows_kernel(const bf16* x, const int32_t* order, int k, int cols, bf16* out) {
  const bf16* src = x + size_t(order[blockIdx.x] / k) * cols;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) out[size_t(blockIdx.x) * cols + c] = src[c];
}

__global__ void moe_combine_kernel(const bf16* y, const int32_t* position, const float* weights, int k, int cols,
                                   bf16* hidden) {
  const int r = blockIdx.x;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    float acc = f(hidden[size_t(r) * cols + c]);
    for (int j = 0; j < k; ++j) acc += weights[size_t(r) * k + j] * f(y[size_t(position[size_t(r) * k + j]) * cols + c]);
    hidden[size_t(r) * cols + c] = b(acc);
  }
}

}  // namespace

void router_top_k(const bf16* logits, const float* bias, int rows, int experts, int k, int32_t* ids, float* weights,
                  cudaStream_t s) {
  if (experts > 32 * kMaxExpertsPerLane || k > 32 || k > experts)
    throw std::invalid_argument("router_top_k: at most 1024 experts and k <= min(32, experts)");
  router_top_k_kernel<<<blocks(size_t(rows) * 32, 256), 256, 0, s>>>(logits, bias, rows, experts, k, ids, weights);
  KVB_CUDA_CHECK_LAUNCH();
}

ExpertGrouping::ExpertGrouping(int assignments, int experts) : n_(assignments), experts_(experts), end_bit_(1) {
  if (assignments < 1 || experts < 1) throw std::invalid_argument("ExpertGrouping: sizes must be positive");
  while ((1 << end_bit_) < experts) ++end_bit_;
  KVB_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes_, static_cast<const int32_t*>(nullptr),
                                                 static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                 static_cast<int32_t*>(nullptr), n_, 0, end_bit_));
  KVB_CUDA_CHECK(cudaMalloc(&temp_, std::max<size_t>(temp_bytes_, 1)));
  KVB_CUDA_CHECK(cudaMalloc(&iota_, size_t(n_) * 4));
  KVB_CUDA_CHECK(cudaMalloc(&sorted_ids_, size_t(n_) * 4));
  iota_kernel<<<blocks(n_, 256), 256>>>(static_cast<int32_t*>(iota_), n_);
  KVB_CUDA_CHECK_LAUNCH();
}

ExpertGrouping::~ExpertGrouping() {
  cudaFree(temp_);
  cudaFree(iota_);
  cudaFree(sorted_ids_);
}

void ExpertGrouping::run(const int32_t* ids, int32_t* offsets, int32_t* order, int32_t* position, cudaStream_t s) const {
  size_t bytes = temp_bytes_;
  KVB_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp_, bytes, ids, static_cast<int32_t*>(sorted_ids_),
                                                 static_cast<const int32_t*>(iota_), order, n_, 0, end_bit_, s));
  offsets_kernel<<<blocks(size_t(experts_) + 1, 256), 256, 0, s>>>(static_cast<const int32_t*>(sorted_ids_), n_,
                                                                  experts_, offsets);
  KVB_CUDA_CHECK_LAUNCH();
  position_kernel<<<blocks(n_, 256), 256, 0, s>>>(order, n_, position);
  KVB_CUDA_CHECK_LAUNCH();
}

void gather_rows(const bf16* x, const int32_t* order, int k, int assignments, int cols, bf16* out, cudaStream_t s) {
  gather_rows_kernel<<<assignments, 256, 0, s>>>(x, order, k, cols, out);
  KVB_CUDA_CHECK_LAUNCH();
}

void moe_combine(const bf16* y, const int32_t* position, const float* weights, int rows, int k, int cols,
                 bf16* hidden, cudaStream_t s) {
  moe_combine_kernel<<<rows, 256, 0, s>>>(y, position, weights, k, cols, hidden);
  KVB_CUDA_CHECK_LAUNCH();
}

}  // namespace kvbuf::step
