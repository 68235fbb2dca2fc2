// Device helpers shared by the GDN decode kernels (include from .cu files only).
//
// Row groups: a state row S[v, :] (K elements) is handled by a group of 8 consecutive lanes. Lane l
// of a group holds the K/32 chunks of 4 elements c = i*8 + l (i = 0 .. K/32-1), i.e. elements
// 4c .. 4c+3, so each load instruction of the group reads 8 x 16 (fp32) or 8 x 8 (bf16, fp16)
// contiguous bytes of the row. The same lane owns the same elements of k, q and of every buffered key.
// The state element type S (float, __nv_bfloat16 or __half) is a template parameter of the
// kernels; every value is converted to fp32 on load, and a store rounds once to nearest.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/common/arch.cuh"
#include "kernels/common/common.cuh"
#include "kernels/common/state_type.cuh"
#include "kernels/gdn/gdn_decode.h"
#include "kernels/gdn/gdn_launch_shape.h"  // kThreads, kGroups, kMaxChunks and the shared-memory sizes

namespace kvbuf::gdn_detail {

constexpr int kWarpRows = 8;                        // rows of the recurrent one-warp shape

// Sum over the 8 lanes of a group; every lane gets the total (xor masks < 8 stay in the group).
__device__ __forceinline__ float group_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  x += __shfl_xor_sync(0xffffffffu, x, 2);
  x += __shfl_xor_sync(0xffffffffu, x, 4);
  return x;
}

// Loads this lane's K/32 chunks of a K-vector of type E into x[4 * K/32].
template <int K>
__device__ __forceinline__ void load_slice(const float* p, int lane, float* x) {
#pragma unroll
  for (int i = 0; i < K / 32; ++i) {
    const float4 f = reinterpret_cast<const float4*>(p)[i * kGroupLanes + lane];
    x[4 * i] = f.x, x[4 * i + 1] = f.y, x[4 * i + 2] = f.z, x[4 * i + 3] = f.w;
  }
}
// 16-bit elements (bf16, fp16): 8 bytes per chunk.
template <int K, class E, class = std::enable_if_t<sizeof(E) == 2>>
__device__ __forceinline__ void load_slice(const E* p, int lane, float* x) {
#pragma unroll
  for (int i = 0; i < K / 32; ++i) {
    const uint2 raw = reinterpret_cast<const uint2*>(p)[i * kGroupLanes + lane];
    const float2 a = pair_to_float2<E>(raw.x), b = pair_to_float2<E>(raw.y);
    x[4 * i] = a.x, x[4 * i + 1] = a.y, x[4 * i + 2] = b.x, x[4 * i + 3] = b.y;
  }
}
template <int K>
__device__ __forceinline__ void store_slice(float* p, int lane, const float* x) {
#pragma unroll
  for (int i = 0; i < K / 32; ++i)
    reinterpret_cast<float4*>(p)[i * kGroupLanes + lane] =
        make_float4(x[4 * i], x[4 * i + 1], x[4 * i + 2], x[4 * i + 3]);
}
template <int K, class E, class = std::enable_if_t<sizeof(E) == 2>>
__device__ __forceinline__ void store_slice(E* p, int lane, const float* x) {
#pragma unroll
  for (int i = 0; i < K / 32; ++i)
    reinterpret_cast<uint2*>(p)[i * kGroupLanes + lane] =
        make_uint2(float2_to_pair<E>(x[4 * i], x[4 * i + 1]), float2_to_pair<E>(x[4 * i + 2], x[4 * i + 3]));
}

template <int N>
__device__ __forceinline__ float dot(const float* a, const float* b) {
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < N; ++i) s = fmaf(a[i], b[i], s);
  return s;
}

// The token's key and query slices of key head kh as raw bf16 (issue the loads early, consume late).
template <int K>
struct TokenKQRaw {
  uint2 k[K / 32], q[K / 32];
};
template <int K>
__device__ __forceinline__ void issue_token_kq(const GdnStepIO& io, int row, int kh, int lane, TokenKQRaw<K>& raw) {
  const size_t off = (size_t(row) * io.H + kh) * K;
#pragma unroll
  for (int i = 0; i < K / 32; ++i) {
    raw.k[i] = reinterpret_cast<const uint2*>(io.k + off)[i * kGroupLanes + lane];
    raw.q[i] = reinterpret_cast<const uint2*>(io.q + off)[i * kGroupLanes + lane];
  }
}
// The key and query slices as fp32, not normalised, and their normalisation scales (q's also
// holds K^-0.5).
template <int K>
__device__ __forceinline__ void token_kq_slices(const TokenKQRaw<K>& raw, float* k, float* q, float& kinv,
                                                float& qinv) {
#pragma unroll
  for (int i = 0; i < K / 32; ++i) {
    const float2 k0 = bf16x2_to_float2(raw.k[i].x), k1 = bf16x2_to_float2(raw.k[i].y);
    const float2 q0 = bf16x2_to_float2(raw.q[i].x), q1 = bf16x2_to_float2(raw.q[i].y);
    k[4 * i] = k0.x, k[4 * i + 1] = k0.y, k[4 * i + 2] = k1.x, k[4 * i + 3] = k1.y;
    q[4 * i] = q0.x, q[4 * i + 1] = q0.y, q[4 * i + 2] = q1.x, q[4 * i + 3] = q1.y;
  }
  kinv = rsqrtf(group_sum(dot<K / 8>(k, k)) + 1e-6f);
  qinv = rsqrtf(group_sum(dot<K / 8>(q, q)) + 1e-6f) * rsqrtf(float(K));
}
// Normalised key and query slices (q also scaled by K^-0.5) and k.q from the raw slices.
template <int K>
__device__ __forceinline__ void finish_token_kq(const TokenKQRaw<K>& raw, float* k, float* q, float& kq) {
  float kinv, qinv;
  token_kq_slices<K>(raw, k, q, kinv, qinv);
#pragma unroll
  for (int i = 0; i < K / 8; ++i) k[i] *= kinv, q[i] *= qinv;
  kq = group_sum(dot<K / 8>(k, q));
}
// The slices left unnormalised, for kernels that apply the scales to a few sums instead of every
// element; kq is the normalised k.q.
template <int K>
__device__ __forceinline__ void finish_token_kq_unscaled(const TokenKQRaw<K>& raw, float* k, float* q, float& kinv,
                                                         float& qinv, float& kq) {
  token_kq_slices<K>(raw, k, q, kinv, qinv);
  kq = group_sum(dot<K / 8>(k, q)) * (kinv * qinv);
}
// Both at once, for kernels with nothing to overlap.
template <int K>
__device__ __forceinline__ void load_token_kq(const GdnStepIO& io, int row, int kh, int lane, float* k,
                                              float* q, float& kq) {
  TokenKQRaw<K> raw;
  issue_token_kq<K>(io, row, kh, lane, raw);
  finish_token_kq<K>(raw, k, q, kq);
}

// g (log decay) and beta of value head h for request row `row`: given, or from a, b, A_log, dt_bias.
__device__ __forceinline__ void load_gates(const GdnStepIO& io, int row, int h, float& g, float& beta) {
  const int idx = row * io.HV + h;
  if (io.g) {
    g = io.g[idx];
    beta = io.beta[idx];
    return;
  }
  const float x = __bfloat162float(io.a[idx]) + io.dt_bias[h];
  const float softplus = x > 20.f ? x : log1pf(expf(x));
  g = -expf(io.A_log[h]) * softplus;
  beta = 1.f / (1.f + expf(-__bfloat162float(io.b[idx])));
}

// Block decomposition shared by the decode kernels: grid (tiles x R, H, batch) with tiles =
// V / rows_per_block V tiles and R = HV / H value heads per key head: blockIdx.x = sub * tiles +
// tile, value head h = kh * R + sub. The block's coordinates are bit operations on its indices
// (rows_per_block is a power of 2): runtime integer divisions sat before the first loads, on the
// critical path at small batch. Blocks are scheduled tile-fastest, then value head, then row, as
// a flat (row, h, tile) index would be.
struct BlockCoords {
  int row, kh, h, tile, v0, sub;
};
template <int V>
__device__ __forceinline__ BlockCoords block_coords(int rows_per_block) {
  static_assert((V & (V - 1)) == 0, "V a power of 2");
  const int tile_shift = (__ffs(V) - 1) - (__ffs(rows_per_block) - 1);
  BlockCoords c;
  c.tile = blockIdx.x & ((1 << tile_shift) - 1);
  c.sub = blockIdx.x >> tile_shift;
  c.kh = blockIdx.y;
  c.h = c.kh * (gridDim.x >> tile_shift) + c.sub;
  c.row = blockIdx.z;
  c.v0 = c.tile * rows_per_block;
  return c;
}
inline dim3 decode_grid(const GdnStepIO& io, int rows_per_block) {
  return dim3(unsigned(io.V / rows_per_block * (io.HV / io.H)), unsigned(io.H), unsigned(io.batch));
}

__device__ __forceinline__ void write_zero_output(const GdnStepIO& io, const BlockCoords& c, int rows) {
  __nv_bfloat16* out = io.out + (size_t(c.row) * io.HV + c.h) * io.V + c.v0;
  for (int r = threadIdx.x; r < rows; r += blockDim.x) out[r] = __float2bfloat16_rn(0.f);
}

// ---- State tiles by the architecture layer's copies (kernels/common/arch.cuh: one thread's
// cp.async.bulk on sm_90, warp 0's cp.async pieces before) of the block's contiguous state rows (K
// elements of the state type S, K * sizeof(S) bytes: 256 or 512 for fp32, 128 or 256 for 16-bit
// states, multiples of 16 as the copies need) into shared memory, 16 rows (kGroups: one per group)
// per chunk, each chunk completing on its own mbarrier, all chunks in flight at once. The copies
// overlap the block's other loads and arithmetic and put up to rows x K x sizeof(S) bytes in flight
// per block without holding registers.

// The copy issuers (copy_issuer(threadIdx.x)) only: start the copies of rows [0, 16 * chunks) of
// `src` (rows of K elements of S) into `tile` on initialised barriers. The block must pass a
// __syncthreads() after the initialisation and before any wait.
template <int K, class S>
__device__ __forceinline__ void tile_copy(S* tile, const S* src, int chunks, uint64_t* bars) {
  constexpr uint32_t kChunkBytes = kGroups * K * sizeof(S);
  for (int c = 0; c < chunks; ++c) {
    expect_copy_bytes(bars + c, kChunkBytes);
    bulk_copy(tile + size_t(c) * kGroups * K, src + size_t(c) * kGroups * K, kChunkBytes, bars + c);
    copies_issued(bars + c);
  }
}
// Both, for a block that fills its tile once.
template <int K, class S>
__device__ __forceinline__ void tile_issue(S* tile, const S* src, int chunks, uint64_t* bars) {
  tile_init(chunks, bars);
  tile_copy<K>(tile, src, chunks, bars);
}

// Row rl of the block's S0 tile (chunk ch) once its copy (phase parity) has landed, as fp32, or
// zeros for a request without a state (direct mode).
template <int K, class S>
__device__ __forceinline__ void load_tile_row(bool has_state, const S* tile, uint64_t* bars, int ch, int rl,
                                              int lane, float* s, uint32_t parity = 0) {
  if (has_state) {
    tile_wait(bars + ch, parity);
    load_slice<K>(tile + size_t(rl) * K, lane, s);
  } else {
#pragma unroll
    for (int i = 0; i < K / 8; ++i) s[i] = 0.f;
  }
}

// The fold of one state row (this lane's slice s) with the new token and the n buffered entries:
// s <- e^{G_t} s + u_t k + sum_j sw[j] u_j k_j, with u_j = u[j * u_stride] and the keys k_j in
// shared memory rows of K entries.
template <int K, class E, class U>
__device__ __forceinline__ void fold_row(float* s, float eG_t, float u_t, const float* k, int n, const float* sw,
                                         const U* u, int u_stride, const E* skeys, int lane) {
  constexpr int N = K / 8;
#pragma unroll
  for (int i = 0; i < N; ++i) s[i] = fmaf(eG_t, s[i], u_t * k[i]);
#pragma unroll 4
  for (int j = 0; j < n; ++j) {
    const float wj = sw[j] * to_f32(u[j * u_stride]);
    float kj[N];
    load_slice<K>(skeys + j * K, lane, kj);
#pragma unroll
    for (int i = 0; i < N; ++i) s[i] = fmaf(wj, kj[i], s[i]);
  }
}

// Validation shared by the dispatch functions.
// warp_rows_allowed: rows_per_block may be kWarpRows (the recurrent kernel's one-warp shape).
void validate_step_io(const GdnStepIO& io, const char* who, bool warp_rows_allowed);
// V rows per block of a launch shape (the rules: kernels/gdn/gdn_launch_shape.h).
int choose_rows_per_block(const GdnStepIO& io, RowsRule rule);
// The recurrent dispatch's rows per block (gdn_decode_recurrent.cu).
int recurrent_rows(const GdnStepIO& io);
// KVBuffer at capacity 1 with scheduler row metadata (gdn_decode_kvbuffer.cu, path Auto): every
// step folds its only token, so the step is the recurrent update of the state pool in place, with
// S0 = 0 (not read) for rows whose row_has_state is 0. Runs the recurrent kernels.
void run_kvbuffer_capacity1(const GdnKVBufferParams& p, cudaStream_t stream, const char* who);
// The single kernel's rows per block for a state type. A 16-bit state takes whole-head tiles (128
// rows at V = 128: the fp32 tile's 32 KiB) where the grid keeps twice the fp32 rule's blocks per SM,
// so the per-block work over the token and the buffered keys is spread over twice the state rows
// (bf16 at batch 256, C = 4: 94.6 us with 128 rows against 109.4 with 64); with fewer blocks it
// takes the fp32 rule (batch 32: 18.2 us with 64 rows, 19.6 with 128). notes/gdn_decode_kvbuffer.md,
// log v30.
int single_kvbuffer_rows(const GdnStepIO& io, StateType state_type);

}  // namespace kvbuf::gdn_detail
