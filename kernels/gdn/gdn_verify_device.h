// Device helpers shared by the GDN verify kernels (include from .cu files only).
//
// Block of the KVBuffer commit's fold (the KVBuffer verify and the classic verify have their own
// shapes, described in gdn_verify_kvbuffer.cu and gdn_verify_classic.cu): 64 threads own 64
// consecutive rows S[v0 .. v0+63, :] of one value head of one request (blockIdx.x = (row * HV + h) * tiles + tile, tiles = V / 64). Rows are split over lane pairs:
// lanes 2r and 2r+1 of warp w hold rows rA = 32w + r and rB = rA + 16; lane parity p holds the
// float4 chunks f = 2i + p (i = 0 .. K/8-1) of both rows, so each load instruction of a pair reads
// one full 32-byte sector of a row, and a T-token verify reduces its 2T dot products per row over 2
// lanes only (one shuffle each), instead of the 8- or 32-lane reductions of a decode layout.
// After the reduction lane p owns row rA (p = 0) or rB (p = 1): one row per thread.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/common/common.cuh"
#include "kernels/common/state_type.cuh"
#include "kernels/gdn/gdn_launch_shape.h"  // kRows and the shared-memory sizes
#include "kernels/gdn/gdn_verify.h"

namespace kvbuf::gdn_verify_detail {

constexpr int kThreads = 64;  // one owned row per thread

// The value an entry of type E keeps.
template <class E>
__device__ __forceinline__ float round_to(float x) { return to_f32(from_f32<E>(x)); }

__device__ __forceinline__ float4 axpy4(float a, const float4 x, const float4 y) {
  return make_float4(fmaf(a, x.x, y.x), fmaf(a, x.y, y.y), fmaf(a, x.z, y.z), fmaf(a, x.w, y.w));
}
__device__ __forceinline__ float4 scale4(float a, const float4 x) {
  return make_float4(a * x.x, a * x.y, a * x.z, a * x.w);
}

struct VerifyBlock {
  int row, h, tile, v0;
  int warp, lane, parity;
  int rA, rB;   // block-local rows held (k-halves) by this thread
  int owned;    // block-local row owned after the pair reduction
};
__device__ __forceinline__ VerifyBlock verify_block(int HV, int V) {
  const int tiles = V / kRows;
  VerifyBlock b;
  b.tile = blockIdx.x % tiles;
  b.h = (blockIdx.x / tiles) % HV;
  b.row = blockIdx.x / (tiles * HV);
  b.v0 = b.tile * kRows;
  b.warp = threadIdx.x >> 5;
  b.lane = threadIdx.x & 31;
  b.parity = b.lane & 1;
  b.rA = b.warp * 32 + (b.lane >> 1);
  b.rB = b.rA + 16;
  b.owned = b.parity ? b.rB : b.rA;
  return b;
}

// Chunk c of four consecutive state elements of type S (elements 4c .. 4c+3 from `row`; fp32: one
// 16-byte access, bf16 and fp16: one 8-byte access) as fp32, and its store: a 16-bit store rounds
// each element once to nearest even and leaves x holding the rounded values, so that what follows
// computes with the state as written. (fp32 indexes float4s, as the kernels did before 16-bit
// states: indexing floats changed their SASS.)
__device__ __forceinline__ float4 load_state4(const float* row, int c) { return reinterpret_cast<const float4*>(row)[c]; }
__device__ __forceinline__ void store_state4(float* row, int c, float4& x) { reinterpret_cast<float4*>(row)[c] = x; }
// Two 16-bit state elements packed in 32 bits (low element first), to and from fp32.
__device__ __forceinline__ float2 state2_to_f32(uint32_t w, const __nv_bfloat16*) { return bf16x2_to_float2(w); }
__device__ __forceinline__ float2 state2_to_f32(uint32_t w, const __half*) {
  return __half22float2(reinterpret_cast<const __half2&>(w));
}
__device__ __forceinline__ uint32_t f32_to_state2(float a, float b, const __nv_bfloat16*) {
  const __nv_bfloat162 x = __floats2bfloat162_rn(a, b);
  return reinterpret_cast<const uint32_t&>(x);
}
__device__ __forceinline__ uint32_t f32_to_state2(float a, float b, const __half*) {
  const __half2 x = __floats2half2_rn(a, b);
  return reinterpret_cast<const uint32_t&>(x);
}
template <class S>
__device__ __forceinline__ float4 load_state4(const S* row, int c) {
  const uint2 raw = reinterpret_cast<const uint2*>(row)[c];
  const float2 a = state2_to_f32(raw.x, row), b = state2_to_f32(raw.y, row);
  return make_float4(a.x, a.y, b.x, b.y);
}
template <class S>
__device__ __forceinline__ void store_state4(S* row, int c, float4& x) {
  const uint2 raw = make_uint2(f32_to_state2(x.x, x.y, row), f32_to_state2(x.z, x.w, row));
  reinterpret_cast<uint2*>(row)[c] = raw;
  const float2 a = state2_to_f32(raw.x, row), b = state2_to_f32(raw.y, row);
  x = make_float4(a.x, a.y, b.x, b.y);
}

// This lane's K/8 chunks of 4 elements of rows rA and rB (row pointers to K contiguous elements of
// the state type S), as fp32; the store rounds to S (and leaves the rounded values in xa, xb).
template <int KD, class S>
__device__ __forceinline__ void load_row_halves(const S* rowA, const S* rowB, int parity,
                                                float4 (&xa)[KD / 8], float4 (&xb)[KD / 8]) {
#pragma unroll
  for (int i = 0; i < KD / 8; ++i) {
    xa[i] = load_state4(rowA, 2 * i + parity);
    xb[i] = load_state4(rowB, 2 * i + parity);
  }
}
template <int KD, class S>
__device__ __forceinline__ void store_row_halves(S* rowA, S* rowB, int parity, float4 (&xa)[KD / 8],
                                                 float4 (&xb)[KD / 8]) {
#pragma unroll
  for (int i = 0; i < KD / 8; ++i) {
    store_state4(rowA, 2 * i + parity, xa[i]);
    store_state4(rowB, 2 * i + parity, xb[i]);
  }
}

// The tree structure of one request row, computed by the calling warp, lane t = node t (lanes >= T:
// no node): its strict-ancestor bitmask (0-based), and the depth of the deepest node (every lane),
// from the 1-based parents p(i) of the row (null: a chain; out-of-range entries read as 0, the
// committed state). TMAX bounds T.
struct WindowNode {
  unsigned anc;
  int depth;
};
template <int TMAX>
__device__ __forceinline__ WindowNode window_node(int T, const int* parents) {
  const int t = threadIdx.x & 31;
  int par = -1;
  if (t < T) {
    par = parents ? parents[t] - 1 : t - 1;
    if (par < -1 || par >= t) par = -1;
  }
  unsigned anc = 0u;
  int up = par;
#pragma unroll
  for (int it = 0; it < TMAX - 1; ++it) {  // walk up to the root, one generation per step
    if (up >= 0) anc |= 1u << up;
    const int next = __shfl_sync(0xffffffffu, par, up < 0 ? 0 : up);
    up = up < 0 ? -1 : next;
  }
  const int depth = __reduce_max_sync(0xffffffffu, t < T ? __popc(anc) + 1 : 0);
  return WindowNode{anc, depth};
}

// Four consecutive elements of a shared row of type E as floats (8- or 16-byte aligned).
__device__ __forceinline__ float4 load4(const float* p) { return *reinterpret_cast<const float4*>(p); }
__device__ __forceinline__ float4 load4(const __nv_bfloat16* p) {
  const uint2 raw = *reinterpret_cast<const uint2*>(p);
  const float2 a = bf16x2_to_float2(raw.x), b = bf16x2_to_float2(raw.y);
  return make_float4(a.x, a.y, b.x, b.y);
}


// The window helpers below take the block's thread count NT (threadIdx.x in 0..NT-1).
// Issues the copies of the T tokens' raw keys and queries of key head kh (bf16) into
// s_raw [2T, KD]: rows 0..T-1 keys, T..2T-1 queries.
template <int KD, int NT = kThreads>
__device__ __forceinline__ void copy_window_kq_async(const GdnVerifyIO& io, int row, int kh, __nv_bfloat16* s_raw) {
  constexpr int CH = KD / 8;  // 16-byte chunks per row
  const int T = io.tokens;
  for (int c = threadIdx.x; c < 2 * T * CH; c += NT) {
    const int vec = c / CH, e = (c % CH) * 8;
    const bool is_k = vec < T;
    const int t = is_k ? vec : vec - T;
    const __nv_bfloat16* src = (is_k ? io.k : io.q) + ((size_t(row) * T + t) * io.H + kh) * KD + e;
    cp_async16(s_raw + vec * KD + e, src);
  }
}
// The norm scale of a raw window key, 1 / |k|, or query, K^-1/2 / |q|, from its sum of squares.
template <int KD>
__device__ __forceinline__ float window_norm_scale(float sum_sq, bool is_query) {
  return rsqrtf(sum_sq + 1e-6f) * (is_query ? rsqrtf(float(KD)) : 1.f);
}

// G_t of node t = this lane (T <= TMAX; lanes >= T pass g_t = 0): g_base (the buffer's last G, or
// 0) plus the gates of the node and of its ancestors (anc: its strict-ancestor bitmask).
template <int TMAX>
__device__ __forceinline__ float window_gcum(float g_base, float g_t, unsigned anc) {
  float G = g_base + g_t;
#pragma unroll
  for (int a = 0; a < TMAX; ++a) {
    const float g_a = __shfl_sync(0xffffffffu, g_t, a);
    if ((anc >> a) & 1u) G += g_a;
  }
  return G;
}

// Issues the copies of the T tokens' values of value head h, rows v0 .. v0+kRows-1: s_v [T, kRows].
template <int NT = kThreads>
__device__ __forceinline__ void copy_window_v_async(const GdnVerifyIO& io, int row, int h, int v0, __nv_bfloat16* s_v) {
  constexpr int CH = kRows / 8;
  for (int c = threadIdx.x; c < io.tokens * CH; c += NT) {
    const int t = c / CH, e = (c % CH) * 8;
    cp_async16(s_v + t * kRows + e, io.v + ((size_t(row) * io.tokens + t) * io.HV + h) * io.V + v0 + e);
  }
}
// Issues the copies of the T tokens' gates of value head h (and the parents, for trees).
__device__ __forceinline__ void copy_window_gates_async(const GdnVerifyIO& io, int row, int h, float* s_g,
                                                        float* s_beta, int* s_parents) {
  const int t = threadIdx.x;
  if (t < io.tokens) {
    const size_t gate = (size_t(row) * io.tokens + t) * io.HV + h;
    cp_async4(s_g + t, io.g + gate);
    cp_async4(s_beta + t, io.beta + gate);
    if (io.parents) cp_async4(s_parents + t, io.parents + size_t(row) * io.tokens + t);
  }
}
// Fold of n entries into this thread's row halves: x <- exp(G_n) x + sum_j w_j[row] k_j, with the
// keys in shared rows of `key_stride` elements and w_j[r] = exp(G_n - G_j) u_j[r] in s_w[j * kRows + r].
template <int KD, class KT>
__device__ __forceinline__ void fold_row_halves(float4 (&xa)[KD / 8], float4 (&xb)[KD / 8], float exp_gn, int n,
                                                const KT* s_keys, int key_stride, const float* s_w,
                                                const VerifyBlock& b) {
#pragma unroll
  for (int i = 0; i < KD / 8; ++i) {
    xa[i] = scale4(exp_gn, xa[i]);
    xb[i] = scale4(exp_gn, xb[i]);
  }
  for (int j = 0; j < n; ++j) {
    const float wa = s_w[j * kRows + b.rA], wb = s_w[j * kRows + b.rB];
    const KT* key = s_keys + j * key_stride;
#pragma unroll
    for (int i = 0; i < KD / 8; ++i) {
      const float4 kf = load4(key + 4 * (2 * i + b.parity));
      xa[i] = axpy4(wa, kf, xa[i]);
      xb[i] = axpy4(wb, kf, xb[i]);
    }
  }
}

// The state types the kernels are built for (a value outside StateType is refused before any
// launch, so that a commit that would not dispatch on it, the copy, refuses it too).
inline bool known_state_type(StateType t) {
  return t == StateType::FP32 || t == StateType::BF16 || t == StateType::FP16;
}

// Checks shared by every verify entry point: shapes the kernels are built for and the token I/O
// pointers; throws std::invalid_argument("<who>: ...").
inline void validate_verify_io(const GdnVerifyIO& io, const char* who) {
  auto fail = [&](const std::string& what) { throw std::invalid_argument(std::string(who) + ": " + what); };
  if (io.batch < 0) fail("batch must be >= 0");
  if (io.tokens < 1 || io.tokens > kGdnVerifyMaxTokens)
    fail("unsupported token count T = " + std::to_string(io.tokens) + " (1..8)");
  if (io.H < 1 || io.HV < 1 || io.HV % io.H != 0) fail("value heads must be a positive multiple of key heads");
  if (io.K != 64 && io.K != 128) fail("unsupported key head dim K = " + std::to_string(io.K) + " (64 or 128)");
  if (io.V < 64 || io.V % 64 != 0) fail("unsupported value head dim V = " + std::to_string(io.V) + " (multiple of 64)");
  if (io.batch > 0 && (!io.slot || !io.q || !io.k || !io.v || !io.g || !io.beta || !io.out))
    fail("null pointer among token inputs or outputs");
}

}  // namespace kvbuf::gdn_verify_detail
