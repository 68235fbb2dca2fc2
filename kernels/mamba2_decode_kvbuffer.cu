// mamba2_decode_kvbuffer / mamba2_decode_direct: KVBuffer decode of Mamba-2, one token per request.
//
// Math (kvbuffer-math.md section 8, reference/mamba2.h), per head h of group g: the request holds
// n = fill buffered tokens j = 0..n-1 (x_j, B_j, dt_j, G_j = cumulative dt A since the checkpoint
// S0); the new token t has G_t = G_{n-1} + dt_t A (G_{-1} = 0).
//   c_j    = C_t . B_j                               (per block, over N; c_t = C_t . B_t)
//   w_j    = e^{G_t - G_j} dt_j                      (fold weight; output weight w_j c_j)
//   y[p]   = e^{G_t} S0[p,:].C_t + sum_{j<n} w_j c_j x_j[p] + (dt_t c_t + D) x_t[p]
//   y     *= silu(z) when z is given
// Append entry n = (x_t, B_t, dt_t, G_t). When n + 1 == C, fold in the same kernel (from the S0
// rows and entries already in shared memory) and empty the buffer; the state is written once per
// C tokens:
//   S0[p,:] <- e^{G_t} S0[p,:] + sum_{j<n} w_j x_j[p] B_j + dt_t x_t[p] B_t
// Direct mode (has_state == 0): no S0 read; the fold creates the state and sets has_state.
// Every decay is e^{G_t - G_j} with G_t - G_j <= 0 (G is a running sum of negative terms): dt A
// <= -60 per token underflows to 0, nothing overflows.
//
// Layouts (sim/layout.h, LayerKind::Mamba2): S [slots, NH, P, N] fp32 N contiguous, in place;
//   buf_k = B [slots, C, G, N] bf16; buf_val = x [slots, C, NH, P] bf16; buf_gcum = G and
//   buf_beta = dt [slots, C, NH] fp32; fill, has_state, done_count [slots] int32; token I/O as
//   mamba2_decode_recurrent. Entries are bf16: the inputs x and B are bf16, so they are exact.
// Races: blocks of one request (heads x P tiles) read fill/has_state at entry; the last of them to
// finish (atomic count in done_count) advances them, so no block sees another's update within a
// launch. With scheduler metadata (row_fill, row_has_state per row) nothing is advanced in kernel.
// Entry n is written by this launch and only entries < n are read; B_t is written by the first
// block of the first head of its group.
// Work split: warp rows (mamba2_decode_device.h), block = rows_per_block / 8 warps of one head,
// grid (P / rows_per_block, NH, batch). Phases: (0) the slot and row metadata with the token's
// inputs; (1) one round trip for everything else: the entries j < n by cp.async into shared memory
// (keys B_j by the block, x_j of its 8 rows by each warp, G_j, dt_j), then each warp's 8 contiguous
// S0 rows by one bulk copy on the warp's own mbarrier (mamba2_decode_kvbuffer: kTile) or, in the
// tile-less instantiation mamba2_decode_direct launches, read from the pool where used (its rows
// are mostly stateless, and without the 32 KiB tile its blocks fit 6 per SM at every C); (2) one
// barrier, the n dots c_j split over the warps, lane 0 forms w_j and a_j = w_j c_j, a barrier (n =
// 0 skips both); (3) outputs: lane j adds a_j x_j into the 8 partial sums of its S0 . C_t slice, one
// halving reduction; (4) fold 4 rows at a time from shared memory, or append entry n.
// Registers, not bytes, set the pace (kernels/notes/mamba2_decode.md runs 2-4): S0 rows held in
// registers allowed 3-4 blocks per SM; in the tile 5 (48 registers; 35 KiB of shared memory at C =
// 8); the token's x waits in shared memory, not registers.
// rows_per_block (0 = chosen): whole heads (64 rows: the c_j once per head) at every batch.
// Template: d_state N in {64, 128}, kTile; P and C are runtime values.
// Current result (cdbc414, results/decode_mamba2_h200.csv, H200, Nemotron-3 Nano, 23 layer pools
// per graph): KVBuffer at its best C 4.13 [C = 8] / 9.17 [8] / 42.97 [8] / 79.88 [8] / 154.70 [8] /
// 320.91 [8] us at batch 1 / 8 / 64 / 128 / 256 / 512: 1.09x / 1.23x / 1.60x / 1.68x / 1.70x /
// 1.63x the recurrent kernel, faster than ReplaySSM at every batch; direct at C = 64 0.60x / 0.58x /
// 0.57x / 0.56x recurrent from batch 64 (the issue asks <= 0.5x).
#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/common.cuh"
#include "kernels/mamba2_decode.h"
#include "kernels/mamba2_decode_device.h"

namespace kvbuf {
namespace mamba2_detail {
namespace {

constexpr int kMaxCapacity = 64;

// The block's dynamic shared memory, sized by C and the block's warps: the S0 rows [rows][N] fp32
// first (128-byte aligned for the bulk copies), then the staged entries j < n <= C - 1: keys
// [C-1][N] bf16 (B_j), x [warps][C-1] uint4 (x_j of the warp's 8 rows), fp32 [C-1] each: G_j, dt_j,
// w_j = e^{G_t - G_j} dt_j, a_j = w_j c_j; then one mbarrier per warp (its rows' bulk copy).
template <int N, bool kTile>
struct BlockSmem {
  float* tile;
  __nv_bfloat16* keys;
  uint4* x;
  float *G, *dt, *w, *a;
  uint4* xt;
  uint64_t* bars;
  __device__ BlockSmem(unsigned char* base, int entries, int warps) {
    tile = reinterpret_cast<float*>(base);
    keys = reinterpret_cast<__nv_bfloat16*>(tile + (kTile ? size_t(warps) * kWarpRows * N : 0));
    x = reinterpret_cast<uint4*>(keys + size_t(entries) * N);
    G = reinterpret_cast<float*>(x + size_t(warps) * entries);
    dt = G + entries, w = dt + entries, a = w + entries;
    xt = reinterpret_cast<uint4*>(a + entries);  // 16-byte aligned: entries (2N + 16 warps + 16) bytes above the tile
    bars = reinterpret_cast<uint64_t*>(xt + warps);
  }
  static size_t bytes(int entries, int warps) {
    return (kTile ? size_t(warps) * (kWarpRows * N * 4 + 8) : 0) + size_t(warps) * 16 +
           size_t(entries) * (N * 2 + size_t(warps) * 16 + 16);
  }
};

// Phase 1: every entry j < n of the request into shared memory, one cp.async round trip: the
// keys B_j by the whole block, each warp the x_j of its own 8 rows (lane j), G_j and dt_j.
template <int N, class Smem>
__device__ __forceinline__ void stage_entries(const Mamba2KVBufferParams& p, const WarpCoords& c, int slot, int n,
                                              const Smem& st) {
  const int NH = p.io.NH, G = p.io.G, C = p.capacity;
  constexpr int kChunks = N / 8;  // 16-byte chunks per key
  const __nv_bfloat16* keys = p.buf_k + (size_t(slot) * C * G + c.g) * N;  // B_j at keys[j G N]
  for (int i = threadIdx.x; i < n * kChunks; i += blockDim.x) {
    const int j = i / kChunks, k = i % kChunks;
    cp_async16(st.keys + j * N + k * 8, keys + size_t(j) * G * N + k * 8);
  }
  const __nv_bfloat16* xs = p.buf_val + (size_t(slot) * C * NH + c.h) * p.io.P + c.p0;  // x_j at xs[j NH P]
  for (int j = c.lane; j < n; j += 32) cp_async16(st.x + c.warp * (C - 1) + j, xs + size_t(j) * NH * p.io.P);
  const size_t sh = size_t(slot) * C * NH + c.h;  // G_j at buf_gcum[sh + j NH]
  for (int i = threadIdx.x; i < 2 * n; i += blockDim.x) {
    const int j = i < n ? i : i - n;
    cp_async4((i < n ? st.G : st.dt) + j, (i < n ? p.buf_gcum : p.buf_beta) + sh + size_t(j) * NH);
  }
}

template <int N, bool kTile>
__global__ void __launch_bounds__(kMaxRowsPerBlock * 4, kTile ? 5 : 6) mamba2_decode_kvbuffer_kernel(Mamba2KVBufferParams p) {
  constexpr int NL = N / 32, R = kWarpRows;
  extern __shared__ __align__(128) unsigned char smem[];
  const Mamba2StepIO& io = p.io;
  const WarpCoords c = warp_coords(io);
  const int lane = c.lane, warps = blockDim.x >> 5;
  const int NH = io.NH, P = io.P, G = io.G, C = p.capacity;
  const bool row_meta = p.row_fill != nullptr;
  // Phase 0: the slot with the scheduler's row metadata, and the token inputs (independent of
  // the slot), all issued before the slot's round trip ends.
  const int slot = io.slot[c.row];
  const int meta_fill = row_meta ? p.row_fill[c.row] : 0;
  const int meta_has = row_meta ? p.row_has_state[c.row] : 0;
  const size_t xo = (size_t(c.row) * NH + c.h) * P + c.p0;
  const uint4 xraw = *reinterpret_cast<const uint4*>(io.x + xo);
  const size_t bco = (size_t(c.row) * G + c.g) * N;
  const auto braw = load_bf16_raw<N>(io.B + bco, lane), craw = load_bf16_raw<N>(io.C + bco, lane);
  const float dt = token_dt(io, c.row, c.h);
  const float A = io.A[c.h], D = io.D[c.h];
  if (slot < 0) {
    if (lane < R) io.out[xo + lane] = __float2bfloat16_rn(0.f);
    return;
  }
  const int n = row_meta ? meta_fill : load_unsunk(p.fill + slot);
  const bool has_state = (row_meta ? meta_has : load_unsunk(p.has_state + slot)) != 0;
  const bool fold = n + 1 == C;
  const BlockSmem<N, kTile> st(smem, C - 1, warps);

  // Phase 1: the entries' small copies (the block waits for them at the first barrier), then the
  // warp's S0 rows by a bulk copy (waited for by the warp where they are used).
  if (n > 0) stage_entries<N>(p, c, slot, n, st);
  cp_async_commit();
  float* rows = p.state + ((size_t(slot) * NH + c.h) * P + c.p0) * N;
  // The warp's S0 rows: its part of the tile, or (no tile) the pool rows themselves.
  const float* s0rows = kTile ? st.tile + c.warp * kWarpRows * N : rows;
  uint64_t* bar = st.bars + c.warp;
  if (kTile && has_state) issue_warp_rows<N>(st.tile + c.warp * kWarpRows * N, rows, bar, lane);
  // The token's x (8 rows) waits in shared memory for the fold or the append, not in registers.
  if (lane == 0) st.xt[c.warp] = xraw;
  __syncwarp();
  float Bv[NL], Cv[NL];
  bf16_slice<N>(braw, Bv);
  bf16_slice<N>(craw, Cv);
  const float c_t = warp_sum(dot<NL>(Cv, Bv));

  // Phase 2: the n dots c_j = C_t . B_j (warp w takes j = w, w + warps, ...) and the weights.
  float G_t = dt * A;
  if (n > 0) {
    cp_async_wait_all();
    __syncthreads();
    G_t += st.G[n - 1];
    for (int j = c.warp; j < n; j += warps) {
      float Bj[NL];
      bf16_slice<N>(reinterpret_cast<const typename RowVec<N>::H*>(st.keys + j * N)[lane], Bj);
      const float cj = warp_sum(dot<NL>(Cv, Bj));
      if (lane == 0) {
        const float wj = expf(G_t - st.G[j]) * st.dt[j];
        st.w[j] = wj;
        st.a[j] = wj * cj;
      }
    }
    __syncthreads();
  }
  const float eG = expf(G_t);

  // Phase 3: the outputs. Lane l adds entries j = l, l + 32 to the 8 partial sums of its S0 . C_t
  // slice; one halving reduction sums both over the warp.
  float y8[R];
  if (kTile && has_state) gdn_detail::tile_wait(bar);
#pragma unroll
  for (int i = 0; i < R; ++i) {
    float s0[NL];
    if (has_state) load_row<N>(s0rows + i * N + lane * NL, s0);
    y8[i] = has_state ? eG * dot<NL>(s0, Cv) : 0.f;
  }
  const uint4* xw = st.x + c.warp * (C - 1);
  for (int j = lane; j < n; j += 32) {
    float xj[R];
    bf16x8(xw[j], xj);
    const float a = st.a[j];
#pragma unroll
    for (int i = 0; i < R; ++i) y8[i] = fmaf(a, xj[i], y8[i]);
  }
  const float y = row_sums8(y8, lane);
  const float x_own = __bfloat162float(io.x[xo + ((lane >> 2) & (R - 1))]);
  write_output(io, xo, lane, y, fmaf(dt, c_t, D), x_own);

  // Phase 4: fold from the tile and the staged entries, 4 rows at a time, or append entry n.
  if (fold) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      constexpr int H = R / 2;
      const uint2 xtr = reinterpret_cast<const uint2*>(st.xt + c.warp)[half];
      const float2 xta = bf16x2_to_float2(xtr.x), xtb = bf16x2_to_float2(xtr.y);
      const float xt[H] = {xta.x, xta.y, xtb.x, xtb.y};
      float s[H][NL];
#pragma unroll
      for (int i = 0; i < H; ++i) {
        float s0[NL];
        if (has_state) load_row<N>(s0rows + (half * H + i) * N + lane * NL, s0);
        const float dx = dt * xt[i];
#pragma unroll
        for (int e = 0; e < NL; ++e) s[i][e] = fmaf(dx, Bv[e], has_state ? eG * s0[e] : 0.f);
      }
#pragma unroll 2
      for (int j = 0; j < n; ++j) {
        float Bj[NL];
        bf16_slice<N>(reinterpret_cast<const typename RowVec<N>::H*>(st.keys + j * N)[lane], Bj);
        const uint2 xr = reinterpret_cast<const uint2*>(xw + j)[half];
        const float2 xa = bf16x2_to_float2(xr.x), xb = bf16x2_to_float2(xr.y);
        const float xj[H] = {xa.x, xa.y, xb.x, xb.y};
        const float w = st.w[j];
#pragma unroll
        for (int i = 0; i < H; ++i) {
          const float wx = w * xj[i];
#pragma unroll
          for (int e = 0; e < NL; ++e) s[i][e] = fmaf(wx, Bj[e], s[i][e]);
        }
      }
#pragma unroll
      for (int i = 0; i < H; ++i) store_row<N>(rows + size_t(half * H + i) * N + lane * NL, s[i]);
    }
  } else {
    if (lane == 0) *reinterpret_cast<uint4*>(p.buf_val + (size_t(slot) * C * NH + size_t(n) * NH + c.h) * P + c.p0) = st.xt[c.warp];
    if (blockIdx.x == 0 && c.warp == 0) {
      if (lane == 0) {
        p.buf_gcum[(size_t(slot) * C + n) * NH + c.h] = G_t;
        p.buf_beta[(size_t(slot) * C + n) * NH + c.h] = dt;
      }
      if (c.h % (NH / G) == 0)
        reinterpret_cast<typename RowVec<N>::H*>(p.buf_k + ((size_t(slot) * C + n) * G + c.g) * N)[lane] = braw;
    }
  }
  if (row_meta) return;  // the scheduler advances its own fill / has_state
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    const int blocks_per_request = int(gridDim.x * gridDim.y);
    if (atomicAdd(&p.done_count[slot], 1) == blocks_per_request - 1) {
      p.fill[slot] = fold ? 0 : n + 1;
      if (fold) p.has_state[slot] = 1;
      p.done_count[slot] = 0;
    }
  }
}

template <bool kTile>
void run_kvbuffer(const Mamba2KVBufferParams& p, cudaStream_t stream, const char* who) {
  validate_step_io(p.io, who);
  auto fail = [&](const std::string& m) { throw std::invalid_argument(std::string(who) + ": " + m); };
  if (p.capacity < 1 || p.capacity > kMaxCapacity)
    fail("unsupported capacity " + std::to_string(p.capacity) + " (1.." + std::to_string(kMaxCapacity) + ")");
  if (!p.state || !p.buf_k || !p.buf_val || !p.buf_gcum || !p.buf_beta)
    fail("state, buf_k, buf_val, buf_gcum and buf_beta must be set");
  if (bool(p.row_fill) != bool(p.row_has_state)) fail("give both row_fill and row_has_state, or neither");
  if (!p.row_fill && !(p.fill && p.has_state && p.done_count))
    fail("without row_fill/row_has_state, fill, has_state and done_count must be set");
  if (p.io.batch == 0) return;
  dispatch_head_dims(p.io, who, [&](auto n) {
    constexpr int N = decltype(n)::value;
    const int rows = choose_rows_per_block(p.io, kKVBufferRows);
    const size_t smem = BlockSmem<N, kTile>::bytes(p.capacity - 1, rows / kWarpRows);
    launch_kernel(mamba2_decode_kvbuffer_kernel<N, kTile>, decode_grid(p.io, rows), decode_block(rows), smem, stream, false,
                  p);
  });
}

}  // namespace
}  // namespace mamba2_detail

void mamba2_decode_kvbuffer(const Mamba2KVBufferParams& p, cudaStream_t stream) {
  mamba2_detail::run_kvbuffer<true>(p, stream, "mamba2_decode_kvbuffer");
}

void mamba2_decode_direct(const Mamba2KVBufferParams& p, cudaStream_t stream) {
  mamba2_detail::run_kvbuffer<false>(p, stream, "mamba2_decode_direct");
}

int mamba2_decode_kvbuffer_rows_per_block(const Mamba2KVBufferParams& p) {
  return mamba2_detail::choose_rows_per_block(p.io, mamba2_detail::kKVBufferRows);
}

}  // namespace kvbuf
