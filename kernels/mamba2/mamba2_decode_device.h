// Device and dispatch helpers shared by the Mamba-2 decode kernels (include from .cu files only).
//
// Warp rows (the shape of gdn_decode_recurrent's one-warp kernel): a warp owns 8 consecutive
// state rows S[p0 .. p0+7, :] of one head; lane l holds columns [l NL, (l+1) NL), NL = N / 32, of
// every row (fp32 state: one float4 per row for N = 128, float2 for N = 64; 16-bit state: 8 or 4
// bytes), so each row is one coalesced 512 (256) byte access (half that for a 16-bit state) and the
// warp's 8 rows are all in flight after one round trip. The same lane holds the same columns of B
// and C. A block has rows_per_block / 8 such warps.
// State element type S (float, __nv_bfloat16 or __half; kernels/common/state_type.cuh): the row
// loads and stores below convert to and from fp32 registers, where all arithmetic happens; a 16-bit
// store rounds each element once to nearest even (as from_f32<S>).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/common/arch.cuh"
#include "kernels/common/common.cuh"
#include "kernels/common/state_type.cuh"
#include "kernels/mamba2/mamba2_decode.h"
#include "kernels/mamba2/mamba2_launch_shape.h"  // kWarpRows, kMaxRowsPerBlock and the shared-memory sizes

namespace kvbuf::mamba2_detail {


template <int N>
struct RowVec {
  static_assert(N == 64 || N == 128, "one float2 or float4 per lane per row");
  static constexpr int NL = N / 32;
  using F = typename std::conditional<NL == 4, float4, float2>::type;  // fp32 slice
  using H = typename std::conditional<NL == 4, uint2, uint32_t>::type;  // bf16 (16-bit) slice
};

// This lane's NL columns of a state row of S starting at `row` (already offset by lane * NL) as
// loaded (RowRaw: one float4 / float2 for fp32, one uint2 / uint32_t for a 16-bit S), as fp32, and
// both at once (load_row).
template <int N, class S>
using RowRaw = std::conditional_t<std::is_same_v<S, float>, typename RowVec<N>::F, typename RowVec<N>::H>;
template <int N, class S>
__device__ __forceinline__ RowRaw<N, S> load_row_raw(const S* row) {
  return *reinterpret_cast<const RowRaw<N, S>*>(row);
}
template <int N, class S>
__device__ __forceinline__ void row_to_f32(const RowRaw<N, S>& v, float* s) {
  if constexpr (std::is_same_v<S, float>) {
    s[0] = v.x, s[1] = v.y;
    if constexpr (N == 128) s[2] = reinterpret_cast<const float4&>(v).z, s[3] = reinterpret_cast<const float4&>(v).w;
  } else {
    if constexpr (N == 128) {
      const float2 a = pair_to_float2<S>(v.x), b = pair_to_float2<S>(v.y);
      s[0] = a.x, s[1] = a.y, s[2] = b.x, s[3] = b.y;
    } else {
      const float2 a = pair_to_float2<S>(v);
      s[0] = a.x, s[1] = a.y;
    }
  }
}
template <int N, class S>
__device__ __forceinline__ void load_row(const S* row, float* s) {
  row_to_f32<N, S>(load_row_raw<N>(row), s);
}
// The same columns stored (a 16-bit S: each rounded once to nearest even).
template <int N, class S>
__device__ __forceinline__ void store_row(S* row, const float* s) {
  if constexpr (std::is_same_v<S, float>) {
    typename RowVec<N>::F v;
    v.x = s[0], v.y = s[1];
    if constexpr (N == 128) reinterpret_cast<float4&>(v).z = s[2], reinterpret_cast<float4&>(v).w = s[3];
    *reinterpret_cast<typename RowVec<N>::F*>(row) = v;
  } else {
    typename RowVec<N>::H v;
    if constexpr (N == 128)
      v.x = float2_to_pair<S>(s[0], s[1]), v.y = float2_to_pair<S>(s[2], s[3]);
    else
      v = float2_to_pair<S>(s[0], s[1]);
    *reinterpret_cast<typename RowVec<N>::H*>(row) = v;
  }
}
// This lane's NL bf16 columns of an N-vector as raw bits (issue early) and as fp32.
template <int N>
__device__ __forceinline__ typename RowVec<N>::H load_bf16_raw(const __nv_bfloat16* v, int lane) {
  return reinterpret_cast<const typename RowVec<N>::H*>(v)[lane];
}
template <int N>
__device__ __forceinline__ void bf16_slice(typename RowVec<N>::H raw, float* f) {
  if constexpr (N == 128) {
    const float2 a = bf16x2_to_float2(raw.x), b = bf16x2_to_float2(raw.y);
    f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y;
  } else {
    const float2 a = bf16x2_to_float2(raw);
    f[0] = a.x, f[1] = a.y;
  }
}
// 8 consecutive bf16 (16 bytes: the x values of a warp's 8 rows) as fp32.
__device__ __forceinline__ void bf16x8(uint4 raw, float* f) {
  const float2 a = bf16x2_to_float2(raw.x), b = bf16x2_to_float2(raw.y);
  const float2 c = bf16x2_to_float2(raw.z), d = bf16x2_to_float2(raw.w);
  f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y, f[4] = c.x, f[5] = c.y, f[6] = d.x, f[7] = d.y;
}

template <int NL>
__device__ __forceinline__ float dot(const float* a, const float* b) {
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < NL; ++i) s = fmaf(a[i], b[i], s);
  return s;
}

// The x values of a warp's R rows (8: one uint4 of bf16, 4: a uint2, 2: one bf16 pair) as fp32.
__device__ __forceinline__ void warp_x(uint4 raw, float (&x)[8]) { bf16x8(raw, x); }
__device__ __forceinline__ void warp_x(uint2 raw, float (&x)[4]) {
  const float2 a = bf16x2_to_float2(raw.x), b = bf16x2_to_float2(raw.y);
  x[0] = a.x, x[1] = a.y, x[2] = b.x, x[3] = b.y;
}
__device__ __forceinline__ void warp_x(uint32_t raw, float (&x)[2]) {
  const float2 v = bf16x2_to_float2(raw);
  x[0] = v.x, x[1] = v.y;
}
// The raw bf16 x of R rows as warp_x takes them.
template <int R>
using WarpXRaw = std::conditional_t<R == 8, uint4, std::conditional_t<R == 4, uint2, uint32_t>>;

// The R per-row partial sums v[i] of every lane (R = 2, 4, 8 or 16) reduced over the warp by halving
// exchanges (R = 8: 4 + 2 + 1 shuffles, then 2 to finish: 9 instead of 40, gdn_decode_recurrent.cu
// log v6): lane l ends with the full sum of row l / kRowLanes<R>.
template <int R>
constexpr int kRowLanes = 32 / R;
// One halving exchange: lanes with bit `mask` set keep the upper half of v[0 .. 2 kHalf), the
// others the lower, each adding its partner's copy; then the next level (a compile-time recursion:
// ptxas unrolls a loop over the levels only partly at R = 16 and keeps v in local memory).
template <int kHalf, int R>
__device__ __forceinline__ void halve_row_sums(float (&v)[R], int lane, int mask) {
  const bool upper = lane & mask;
#pragma unroll
  for (int j = 0; j < kHalf; ++j) {
    const float send = upper ? v[j] : v[j + kHalf];
    const float keep = upper ? v[j + kHalf] : v[j];
    v[j] = keep + __shfl_xor_sync(0xffffffffu, send, mask);
  }
  if constexpr (kHalf > 1) halve_row_sums<kHalf / 2>(v, lane, mask / 2);
}
template <int R>
__device__ __forceinline__ float row_sums(float (&v)[R], int lane) {
  static_assert(R == 2 || R == 4 || R == 8 || R == 16, "2 to 16 rows per warp");
  halve_row_sums<R / 2>(v, lane, 16);
  float s = v[0];
#pragma unroll
  for (int mask = 1; mask < kRowLanes<R>; mask *= 2) s += __shfl_xor_sync(0xffffffffu, s, mask);
  return s;
}

// The step size of head h for request row `row`: dt + dt_bias, through softplus when asked
// (softplus(x) = x above 20, where log1p(e^x) rounds to x in fp32).
__device__ __forceinline__ float token_dt(const Mamba2StepIO& io, int row, int h) {
  float d = __bfloat162float(io.dt[size_t(row) * io.NH + h]);
  if (io.dt_bias) d += io.dt_bias[h];
  if (io.dt_softplus) d = d > 20.f ? d : log1pf(expf(d));
  return d;
}

// silu(z) = z sigmoid(z) with the fast exponential and division (relative error ~1e-6, far below
// the bf16 output's rounding; z << 0 gives -0).
__device__ __forceinline__ float silu(float z) { return __fdividef(z, 1.f + __expf(-z)); }

// Block decomposition: grid (P / rows_per_block, NH, batch), rows_per_block / R warps per block
// of R rows (8 unless a kernel says otherwise); warp w of block x owns rows p0 = (x * warps + w) R
// .. p0 + R - 1 of head blockIdx.y.
// Head h's group g = h / (NH / G) and whether h is the group's first head, by fast float divisions:
// two integer divisions took 48 of the 16-bit recurrent warp's 472 instructions
// (kernels/mamba2/notes/mamba2_decode.md). Exact: (a + 0.5) / b lies at least 0.5 / b from an
// integer, and __fdividef's relative error (~2^-22) moves the quotient by less than that while NH
// < 2^20 (a grid's y dimension holds at most 65535 heads).
struct HeadGroup {
  int g;
  bool first;
};
__device__ __forceinline__ HeadGroup head_group(int h, int NH, int G) {
  const int heads_per_group = int(__fdividef(float(NH) + 0.5f, float(G)));
  const int g = int(__fdividef(float(h) + 0.5f, float(heads_per_group)));
  return {g, h == g * heads_per_group};
}

struct WarpCoords {
  int row, h, g, p0, lane, warp;
  bool group_first;  // h is its group's first head
};
template <int R = kWarpRows>
__device__ __forceinline__ WarpCoords warp_coords(const Mamba2StepIO& io) {
  WarpCoords c;
  c.lane = threadIdx.x & 31;
  c.warp = threadIdx.x >> 5;
  c.row = blockIdx.z;
  c.h = blockIdx.y;
  const HeadGroup hg = head_group(c.h, io.NH, io.G);
  c.g = hg.g;
  c.group_first = hg.first;
  c.p0 = (blockIdx.x * (blockDim.x >> 5) + c.warp) * R;
  return c;
}
inline dim3 decode_grid(const Mamba2StepIO& io, int rows_per_block) {
  return dim3(unsigned(io.P / rows_per_block), unsigned(io.NH), unsigned(io.batch));
}
inline dim3 decode_block(int rows_per_block, int warp_rows = kWarpRows) {
  return dim3(unsigned(rows_per_block / warp_rows * 32));
}

// The token's x and z (0 without z) of this lane's output row, row lane / kRowLanes<R> of the R
// rows at xo, as fp32. Loaded with the token's other inputs: read where the output is written
// (after row_sums' shuffles, above which ptxas does not move a load), they were one more dependent
// round trip at the end of every warp (kernels/mamba2/notes/mamba2_decode.md, "loads in order").
struct OwnRowInputs {
  float x, z;
};
template <int R = kWarpRows>
__device__ __forceinline__ OwnRowInputs own_row_inputs(const Mamba2StepIO& io, size_t xo, int lane) {
  const size_t i = xo + lane / kRowLanes<R>;
  return {__bfloat162float(io.x[i]), io.z ? __bfloat162float(io.z[i]) : 0.f};
}

// Output of this lane's row of a warp's R (row_sums<R> leaves row i's sum in lanes i 32 / R ..;
// the first of them writes it): y + D x, times silu(z) when z is given.
template <int R = kWarpRows>
__device__ __forceinline__ void write_output(const Mamba2StepIO& io, size_t xo, int lane, float y, float D,
                                             OwnRowInputs own) {
  if (lane % kRowLanes<R> != 0) return;
  float o = fmaf(D, own.x, y);
  if (io.z) o *= silu(own.z);
  io.out[xo + lane / kRowLanes<R>] = __float2bfloat16_rn(o);
}

// One selective-state step of a state row held in registers (lane l's N / 32 columns):
// s <- decay s + (dt x) B, and this lane's part of the row's dot with C from the fp32 row (before a
// 16-bit store rounds it: the output of a token comes from its unrounded state).
template <int NL>
__device__ __forceinline__ float step_row(float (&s)[NL], float dx, const float* Bv, const float* Cv, float decay) {
#pragma unroll
  for (int e = 0; e < NL; ++e) s[e] = fmaf(decay, s[e], dx * Bv[e]);
  return dot<NL>(s, Cv);
}
// step_row for a warp's R rows, each stored to `dst` (rows N apart) after its step, and y[i] = this
// lane's part of row i's dot with C. Used by the classic verify kernel.
template <int N, int R, class S>
__device__ __forceinline__ void step_warp_rows(float (&s)[R][N / 32], const float (&x)[R], const float* Bv, const float* Cv,
                                               float dt, float decay, S* dst, float (&y)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) {
    y[i] = step_row(s[i], dt * x[i], Bv, Cv, decay);
    store_row<N>(dst + size_t(i) * N, s[i]);
  }
}

// The buffered entries' part of a fold, for rows 4 pass .. 4 pass + 3 of a warp's R:
// s[i] += sum_{j < n} (w[j] x_j[4 pass + i]) B_j over this lane's NL columns, B_j the bf16 row at
// keys + j N, x_j the R bf16 of the warp's rows (R / 8 uint4 at xw + j R / 8). Used by the
// KVBuffer decode's fold (the verify's, fold_warp_rows in mamba2_verify_kvbuffer.cu, has its own
// row passes and B stride).
template <int N, int R>
__device__ __forceinline__ void add_buffered_entries(float (&s)[4][N / 32], const __nv_bfloat16* keys,
                                                     const uint4* xw, const float* w, int n, int pass, int lane) {
  constexpr int NL = N / 32, H = 4;
#pragma unroll 2
  for (int j = 0; j < n; ++j) {
    float Bj[NL];
    bf16_slice<N>(load_bf16_raw<N>(keys + j * N, lane), Bj);
    const uint2 xr = reinterpret_cast<const uint2*>(xw + j * (R / 8))[pass];
    const float2 xa = bf16x2_to_float2(xr.x), xb = bf16x2_to_float2(xr.y);
    const float xj[H] = {xa.x, xa.y, xb.x, xb.y};
    const float wj = w[j];
#pragma unroll
    for (int i = 0; i < H; ++i) {
      const float wx = wj * xj[i];
#pragma unroll
      for (int e = 0; e < NL; ++e) s[i][e] = fmaf(wx, Bj[e], s[i][e]);
    }
  }
}

// Every lane of a warp (its copy issuers take part): the warp's R contiguous S0 rows (R N sizeof(S)
// bytes: 1-4 KiB, a multiple of 16 as the bulk copy needs) into its part of a shared-memory tile of
// S by one bulk copy on the warp's own mbarrier (wait with tile_wait); the S0 bytes are then in flight without holding
// registers. Used by the KVBuffer decode kernel.
template <int N, int R, class S>
__device__ __forceinline__ void issue_warp_rows(S* tile_rows, const S* src, uint64_t* bar, int lane) {
  constexpr uint32_t kBytes = R * N * sizeof(S);
  static_assert(kBytes % 16 == 0, "bulk copies move multiples of 16 bytes");
  if (copy_issuer(lane)) {
    tile_init(1, bar);
    expect_copy_bytes(bar, kBytes);
    bulk_copy(tile_rows, src, kBytes, bar);
    copies_issued(bar);
  }
  __syncwarp();  // the barrier's initialisation before any lane waits on it
}

// Validation shared by the dispatch functions (throws std::invalid_argument naming `who`).
void validate_step_io(const Mamba2StepIO& io, const char* who);
// P rows per block: io.rows_per_block when set, else the largest power of 2 <= min(P, max_rows)
// dividing P, halved (down to 8) while the grid would have fewer than min_blocks_per_sm blocks
// per SM.
struct RowsRule {
  int max_rows, min_blocks_per_sm;
};
int choose_rows_per_block(const Mamba2StepIO& io, RowsRule rule);
// The rules, measured (kernels/mamba2/notes/mamba2_decode.md, run 1): the recurrent kernel keeps
// one-warp blocks (within 3% of every other shape at every batch); the KVBuffer kernel takes whole
// heads at every batch (its blocks share the C_t . B_j dots over their rows: 64 rows beat 32, 16
// and 8 at batch 1, 8, 64 and 256, C = 16).
constexpr RowsRule kRecurrentRows{8, 1};
constexpr RowsRule kKVBufferRows{64, 0};

// The one dispatch on the head dims: calls f(std::integral_constant<int, N>{}) for a supported
// d_state N (P is a runtime multiple of 8), else throws "unsupported head dims".
template <class F>
void dispatch_head_dims(const Mamba2StepIO& io, const char* who, F&& f) {
  switch (io.N) {
    case 128:
      return f(std::integral_constant<int, 128>{});
    case 64:
      return f(std::integral_constant<int, 64>{});
    default:
      throw std::invalid_argument(std::string(who) + ": unsupported head dims P=" + std::to_string(io.P) +
                                  " N=" + std::to_string(io.N) + " (supported: N in {64, 128}, P a multiple of 8)");
  }
}

}  // namespace kvbuf::mamba2_detail
