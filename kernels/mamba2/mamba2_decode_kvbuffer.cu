// mamba2_decode_kvbuffer / mamba2_decode_direct: KVBuffer decode of Mamba-2, one token per request.
//
// Math (docs/kvbuffer-math.md section 8, reference/mamba2.h), per head h of group g: the request holds
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
// Layouts (sim/layout.h, LayerKind::Mamba2): S [slots, NH, P, N] state dtype (fp32, bf16 or fp16),
//   N contiguous, in place (a 16-bit state is widened to fp32 on load; the fold rounds each element
//   to nearest once as it writes it; every sum stays fp32);
//   buf_k = B [slots, C, G, N] bf16; buf_val = x [slots, C, NH, P] bf16; buf_gcum = G and
//   buf_beta = dt [slots, C, NH] fp32; fill, has_state, done_count [slots] int32; token I/O as
//   mamba2_decode_recurrent. Entries are bf16: the inputs x and B are bf16, so they are exact.
// Races: blocks of one request (heads x P tiles) read fill/has_state at entry; the last of them to
// finish (atomic count in done_count) advances them, so no block sees another's update within a
// launch. With scheduler metadata (row_fill, row_has_state per row) nothing is advanced in kernel.
// Entry n is written by this launch and only entries < n are read; B_t is written by the first
// block of the first head of its group.
// Work split: warp rows (mamba2_decode_device.h), R rows per warp (kvbuffer_warp_rows: 8, or 16 / 32
// for a 16-bit state from larger grids, without the tile), block = rows_per_block / R warps of one
// head, grid (P / rows_per_block, NH, batch). A programmatic dependent of the kernel before
// (mamba2_decode.h, pools_ready_at_launch): with ready pools phases 0 and 1 run before its wait, the
// token's inputs are read after it. Phases: (0) the slot and row metadata, then fill and has_state;
// (1) the pools' reads: the entries j < n by cp.async into shared
// memory (keys B_j by the block, x_j of its R rows by each warp, G_j, dt_j), then each warp's R
// contiguous S0 rows (R N sizeof(S) bytes) by one bulk copy on the warp's own mbarrier into a tile
// of S (mamba2_decode_kvbuffer at 8 rows per warp: kTile) or, in the tile-less instantiation, read
// from the pool where used (mamba2_decode_direct: its rows are mostly stateless, and without the 32
// KiB fp32 tile its blocks fit 6 per SM at every C; mamba2_decode_kvbuffer's 16-bit wide warps:
// each warp's loads of its 16 or 32 rows are in flight at once); (2) one
// barrier, the n dots c_j split over the warps, lane 0 forms w_j and a_j = w_j c_j, a barrier (n =
// 0 skips both); (3) outputs: lane j adds a_j x_j into the R partial sums of its S0 . (e^{G_t} C_t)
// slice, one halving reduction; (4) fold 4 rows at a time from shared memory, or append entry n.
// Registers, not bytes, set the pace (kernels/mamba2/notes/mamba2_decode.md runs 2-4): S0 rows held in
// registers allowed 3-4 blocks per SM; in the tile 5 (48 registers; 35 KiB of shared memory at C =
// 8); the token's x waits in shared memory, not registers.
// rows_per_block (0 = chosen): whole heads (64 rows: the c_j once per head) at every batch.
// Template: d_state N in {64, 128}, kTile, the state element type S (float, __nv_bfloat16, __half:
// Mamba2KVBufferParams::state_type through dispatch_state_type); P and C are runtime values. The
// register and shared-memory figures above and the result below are the fp32 state's. 16-bit states
// (b0b1180, results/decode16_h200.csv, bf16, best C): 15.69 / 26.70 / 48.02 / 84.73 / 162.96 us at
// batch 32 / 64 / 128 / 256 / 512 with 16 rows per warp from batch 13 and 32 from 99, tile-less (64
// registers; 8 rows in the tile: 127.25 at 256); at 256 1.58x our recurrent (133.96, the fastest
// 16-bit baseline known), 1.68x ReplaySSM's recorded bf16 buffered decode (142.17), 89% of copy
// (notes/mamba2_decode.md; e^{G_t} C_t and the head's group by float division: 2-5% from batch 64).
// Current result (28cea4f, the paper preset, results/decode_h200.csv, H200, Nemotron-3 Nano, 23
// layer pools per graph): KVBuffer at its best C (8) 4.24 / 9.25 / 43.30 / 80.04 / 155.31 / 305.00
// us at batch 1 / 8 / 64 / 128 / 256 / 512: 0.89x / 1.18x / 1.60x / 1.68x / 1.70x / 1.72x the
// recurrent kernel (at batch 1 the recurrent kernel is faster), faster than ReplaySSM at every batch.
// b0b1180 (the instruction cuts, notes) made the fp32 step at 256 1.8% slower than this (155.18 ->
// 157.98 us in an A/B of one session); ac16a2a gives the 8-row warps their per-row product back,
// not yet measured on an H200 (notes/mamba2_decode.md).
// Direct at C = 64 (split path): 26.46 / 63.35 / 100.33 us at batch 64 / 256 / 512, 0.38x / 0.24x /
// 0.19x recurrent (single kernel, a631d6a: 0.60x / 0.57x / 0.56x).
#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/common/common.cuh"
#include "kernels/mamba2/mamba2_decode.h"
#include "kernels/mamba2/mamba2_decode_device.h"

namespace kvbuf {
namespace mamba2_detail {
namespace {

constexpr int kMaxCapacity = 64;

// The block's dynamic shared memory, sized by C and the block's warps of R rows: the S0 rows
// [rows][N] of S first (128-byte aligned for the bulk copies; each warp's R rows 1-4 KiB), then the
// staged entries j < n <= C - 1: keys [C-1][N] bf16 (B_j), x [warps][C-1] R / 8 uint4 (x_j of the
// warp's R rows), fp32 [C-1] each: G_j, dt_j, w_j = e^{G_t - G_j} dt_j, a_j = w_j c_j; the token's
// x [warps] R / 8 uint4; then one mbarrier per warp (its rows' bulk copy).
template <int N, bool kTile, class S, int R>
struct BlockSmem {
  static constexpr int kX = R / 8;  // uint4 per x row of a warp
  S* tile;
  __nv_bfloat16* keys;
  uint4* x;
  float *G, *dt, *w, *a;
  uint4* xt;
  uint64_t* bars;
  __device__ BlockSmem(unsigned char* base, int entries, int warps) {
    tile = reinterpret_cast<S*>(base);
    keys = reinterpret_cast<__nv_bfloat16*>(tile + (kTile ? size_t(warps) * R * N : 0));
    x = reinterpret_cast<uint4*>(keys + size_t(entries) * N);
    G = reinterpret_cast<float*>(x + size_t(warps) * entries * kX);
    dt = G + entries, w = dt + entries, a = w + entries;
    xt = reinterpret_cast<uint4*>(a + entries);  // 16-byte aligned: entries (2N + 2 R warps + 16) bytes above the tile
    bars = reinterpret_cast<uint64_t*>(xt + warps * kX);
  }
  static size_t bytes(int entries, int warps) {
    return kvbuffer_block_smem_bytes(N, kTile, int(sizeof(S)), entries, warps, R);
  }
};

// Phase 1: every entry j < n of the request into shared memory, one cp.async round trip: the
// keys B_j by the whole block, each warp the x_j of its own R rows (R / 8 lanes per j), G_j and dt_j.
template <int N, int R, class Smem>
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
  constexpr int kX = R / 8;
  for (int i = c.lane; i < n * kX; i += 32)
    cp_async16(st.x + (c.warp * (C - 1)) * kX + i, xs + size_t(i / kX) * NH * p.io.P + (i % kX) * 8);
  const size_t sh = size_t(slot) * C * NH + c.h;  // G_j at buf_gcum[sh + j NH]
  for (int i = threadIdx.x; i < 2 * n; i += blockDim.x) {
    const int j = i < n ? i : i - n;
    cp_async4((i < n ? st.G : st.dt) + j, (i < n ? p.buf_gcum : p.buf_beta) + sh + size_t(j) * NH);
  }
}

// One request row's step (phases 0-4 above) for the block's rows of head c.h: slot and, with
// scheduler metadata, meta_fill / meta_has were loaded by the caller. The pools' reads (fill,
// has_state, the entries, the tile) go out first; kDependent (the single kernel, a programmatic
// dependent of the kernel before): then, with ready pools, the wait for that kernel (gdn_decode.h,
// pools_ready_at_launch); the token's inputs after.
template <int N, bool kTile, class S, int R, bool kDependent>
__device__ __forceinline__ void decode_row(const Mamba2KVBufferParams& p, unsigned char* smem, const WarpCoords& c,
                                           int slot, int meta_fill, int meta_has) {
  constexpr int NL = N / 32, kX = R / 8;
  const Mamba2StepIO& io = p.io;
  const int lane = c.lane, warps = blockDim.x >> 5;
  const int NH = io.NH, P = io.P, G = io.G, C = p.capacity;
  const bool row_meta = p.row_fill != nullptr;
  const int n = slot < 0 ? 0 : row_meta ? meta_fill : load_unsunk(p.fill + slot);
  const bool has_state = slot >= 0 && (row_meta ? meta_has : load_unsunk(p.has_state + slot)) != 0;
  const bool fold = n + 1 == C;
  const BlockSmem<N, kTile, S, R> st(smem, C - 1, warps);

  // Phase 1: the entries' small copies (the block waits for them at the first barrier), then the
  // warp's S0 rows by a bulk copy (waited for by the warp where they are used).
  if (n > 0) stage_entries<N, R>(p, c, slot, n, st);
  cp_async_commit();
  S* rows = static_cast<S*>(p.state) + ((size_t(slot) * NH + c.h) * P + c.p0) * N;
  // The warp's S0 rows: its part of the tile, or (no tile) the pool rows themselves.
  const S* s0rows = kTile ? st.tile + c.warp * R * N : rows;
  uint64_t* bar = st.bars + c.warp;
  if (kTile && has_state) issue_warp_rows<N, R>(st.tile + c.warp * R * N, rows, bar, lane);
  if constexpr (kDependent) {
    if (p.pools_ready_at_launch) wait_prior_grid();
    allow_dependent_grids();
  }

  const size_t xo = (size_t(c.row) * NH + c.h) * P + c.p0;
  const uint4 xraw = lane < kX ? reinterpret_cast<const uint4*>(io.x + xo)[lane] : uint4{};
  // Phase 3's passes and their output rows' x and z, loaded here with the token's other inputs by
  // the wide warps (R >= 16, 64 registers); at 8 rows per warp (40-48 registers at the launch
  // bound) the registers held that long spilled, so those warps load them where the output is
  // written, and their fold (tiled, or direct mode's tile-less body) loads each pass's rows in it.
  constexpr int kPassRows = R < 16 ? R : 16, kPasses = R / kPassRows;
  constexpr bool kWide = R >= 16;
  OwnRowInputs own[kPasses];
  if constexpr (kWide) {
#pragma unroll
    for (int pass = 0; pass < kPasses; ++pass) own[pass] = own_row_inputs<kPassRows>(io, xo + pass * kPassRows, lane);
  }
  const size_t bco = (size_t(c.row) * G + c.g) * N;
  const auto braw = load_bf16_raw<N>(io.B + bco, lane), craw = load_bf16_raw<N>(io.C + bco, lane);
  const float dt = token_dt(io, c.row, c.h);
  const float A = io.A[c.h], D = io.D[c.h];
  if (slot < 0) {
    if (lane < R) io.out[xo + lane] = __float2bfloat16_rn(0.f);
    return;
  }
  // The token's x (R rows) waits in shared memory for the fold or the append, not in registers.
  if (lane < kX) st.xt[c.warp * kX + lane] = xraw;
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
  // Wide warps: e^{G_t} S0[p,:] . C_t as S0[p,:] . (e^{G_t} C_t), NL products per lane, not one per
  // row (C_t's other uses, the dots, are done). The 8-row warps (fp32 at every batch, at their
  // register bound) keep one product per row: with the scaled C_t the fp32 step ran 1.8% slower.
  if constexpr (kWide) {
#pragma unroll
    for (int e = 0; e < NL; ++e) Cv[e] *= eG;
  }

  // Phase 3: the outputs, in passes of up to 16 rows (32-row warps: two, each with its own
  // registers). Lane l adds entries j = l, l + 32 to the pass's partial sums of its S0 . C_t
  // slice; one halving reduction sums both over the warp.
  constexpr int kPassX = kPassRows / 8;
  if (kTile && has_state) tile_wait(bar);
  const uint4* xw = st.x + c.warp * (C - 1) * kX;
#pragma unroll 1
  for (int pass = 0; pass < kPasses; ++pass) {
    float y8[kPassRows];
#pragma unroll
    for (int i = 0; i < kPassRows; ++i) {
      float s0[NL];
      if (has_state) load_row<N>(s0rows + (pass * kPassRows + i) * N + lane * NL, s0);
      y8[i] = has_state ? (kWide ? dot<NL>(s0, Cv) : eG * dot<NL>(s0, Cv)) : 0.f;
    }
    for (int j = lane; j < n; j += 32) {
      float xj[kPassRows];
#pragma unroll
      for (int q = 0; q < kPassX; ++q) bf16x8(xw[j * kX + pass * kPassX + q], xj + 8 * q);
      const float a = st.a[j];
#pragma unroll
      for (int i = 0; i < kPassRows; ++i) y8[i] = fmaf(a, xj[i], y8[i]);
    }
    const float y = row_sums<kPassRows>(y8, lane);
    const size_t xp = xo + pass * kPassRows;
    // (pass is a run-time index: a select, not a local-memory array)
    const OwnRowInputs own_pass =
        kWide ? (pass == 0 ? own[0] : own[kPasses - 1]) : own_row_inputs<kPassRows>(io, xp, lane);
    write_output<kPassRows>(io, xp, lane, y, fmaf(dt, c_t, D), own_pass);
  }

  // Phase 4: fold from the tile (tile-less: the pool rows again) and the staged entries, 4 rows at a
  // time, or append entry n.
  if (fold) {
    constexpr int H = 4;
    // Wide warps (tile-less): S0 comes from the pool again (L2), so each pass's rows are loaded one
    // pass ahead (raw, 2 registers per row at 16 bits): one round trip per warp, not one per pass.
    RowRaw<N, S> ahead[H] = {};
    if constexpr (kWide) {
      if (has_state) {
#pragma unroll
        for (int i = 0; i < H; ++i) ahead[i] = load_row_raw<N>(s0rows + i * N + lane * NL);
      }
    }
#pragma unroll 4
    for (int pass = 0; pass < R / 4; ++pass) {
      const uint2 xtr = reinterpret_cast<const uint2*>(st.xt + c.warp * kX)[pass];
      const float2 xta = bf16x2_to_float2(xtr.x), xtb = bf16x2_to_float2(xtr.y);
      const float xt[H] = {xta.x, xta.y, xtb.x, xtb.y};
      RowRaw<N, S> cur[H];
      if constexpr (kWide) {
#pragma unroll
        for (int i = 0; i < H; ++i) cur[i] = ahead[i];
        if (has_state && pass + 1 < R / 4) {
#pragma unroll
          for (int i = 0; i < H; ++i) ahead[i] = load_row_raw<N>(s0rows + ((pass + 1) * H + i) * N + lane * NL);
        }
      }
      float s[H][NL];
#pragma unroll
      for (int i = 0; i < H; ++i) {
        float s0[NL];
        if constexpr (kWide) {
          row_to_f32<N, S>(cur[i], s0);
        } else {
          if (has_state) load_row<N>(s0rows + (pass * H + i) * N + lane * NL, s0);
        }
        const float dx = dt * xt[i];
#pragma unroll
        for (int e = 0; e < NL; ++e) s[i][e] = fmaf(dx, Bv[e], has_state ? eG * s0[e] : 0.f);
      }
      add_buffered_entries<N, R>(s, st.keys, xw, st.w, n, pass, lane);
#pragma unroll
      for (int i = 0; i < H; ++i) store_row<N>(rows + size_t(pass * H + i) * N + lane * NL, s[i]);
    }
  } else {
    if (lane < kX)
      reinterpret_cast<uint4*>(p.buf_val + (size_t(slot) * C * NH + size_t(n) * NH + c.h) * P + c.p0)[lane] =
          st.xt[c.warp * kX + lane];
    if (blockIdx.x == 0 && c.warp == 0) {
      if (lane == 0) {
        p.buf_gcum[(size_t(slot) * C + n) * NH + c.h] = G_t;
        p.buf_beta[(size_t(slot) * C + n) * NH + c.h] = dt;
      }
      if (c.group_first)
        reinterpret_cast<typename RowVec<N>::H*>(p.buf_k + ((size_t(slot) * C + n) * G + c.g) * N)[lane] = braw;
    }
  }
  if (row_meta) return;  // the scheduler advances its own fill / has_state
  advance_fill_last_block(p.fill, p.has_state, p.done_count, slot, n, fold);
}

// R rows per warp (kvbuffer_warp_rows): 8, whose 5 (tiled) or 6 blocks of 8 warps per SM were
// measured (notes, runs 2-4), or 16 / 32 for a 16-bit state (tile-less) at 64 registers per thread.
template <int R, bool kTile>
constexpr int kKVBufferMinBlocks = R == 8 ? (kTile ? 5 : 6) : R / 2;
template <int N, bool kTile, class S, int R>
__global__ void __launch_bounds__(kMaxRowsPerBlock / R * 32, kKVBufferMinBlocks<R, kTile>)
    mamba2_decode_kvbuffer_kernel(Mamba2KVBufferParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  const WarpCoords c = warp_coords<R>(p.io);
  const bool row_meta = p.row_fill != nullptr;
  // Phase 0: the slot with the scheduler's row metadata (after the wait for the kernel before
  // unless the pools are ready at launch).
  if (!p.pools_ready_at_launch) wait_prior_grid();
  const int slot = p.io.slot[c.row];
  const int meta_fill = row_meta ? p.row_fill[c.row] : 0;
  const int meta_has = row_meta ? p.row_has_state[c.row] : 0;
  decode_row<N, kTile, S, R, true>(p, smem, c, slot, meta_fill, meta_has);
}

// ---- The split direct path (mamba2_decode_direct with scheduler metadata, P <= 64; Auto: below)
// Kernel A, the buffer kernel: one block per (request row, group g, chunk of up to kSplitHeads heads of g), one
// warp per head, for the stateless rows that do not fold at this step (every other row exits at once, padding
// rows after writing their zero outputs): the 8 heads of a group share B and C, so the block computes the
// n + 1 dots c_j = C_t . B_j (and c_t) once, 4 threads per entry straight from global memory, while the x_j of
// all its heads (n contiguous runs of heads x P bf16), G_j and dt_j arrive by cp.async in one round trip.
// Lane l of head h's warp owns rows 2l, 2l + 1: y = sum_j a_j x_j + (dt c_t + D) x_t, a_j = e^{G_t - G_j} dt_j c_j,
// then appends entry n (B_t once per group).
// Kernel B, the state kernel: decode_row (the single kernel's tile-less body) for the rows with a state or a
// fold, over G_B row groups (gdn_decode_kvbuffer's COMPACT): every block ranks the rows that need it and takes
// ranks z, z + G_B, ... of its own (head, P tile); G_B = one wave's worth of blocks. B reads nothing A writes
// (other rows, other slots), so it starts early (programmatic launch) and waits for A only before it exits,
// which orders everything after it behind both kernels.
constexpr int kSplitThreads = kSplitHeads * 32;   // 4 threads per c_j: n + 1 <= C <= 64 dots at once
constexpr int kSplitMaxP = 64;                    // lane l owns the pair of rows 2l, 2l + 1
// Auto splits from C = 4 where batch x C >= kSplitMinRowEntries (log run 6, both forced: the
// second launch and kernel A's per-block start lose below it, e.g. 7.59 against 6.35 us at batch
// 8, C = 8 and 4.75 against 4.37 at batch 1, C = 64; they win at batch 8, C = 64 (7.14 / 8.18) and
// batch 64, C = 4 (19.4 / 30.0); batch 4, C = 64 is even).
constexpr int kSplitMinCapacity = 4;
constexpr int kSplitMinRowEntries = 256;

// Kernel A's dynamic shared memory: x_j [C-1][kSplitHeads * P] bf16, G_j and dt_j [C-1][kSplitHeads], c_j [C].
struct SplitBufferSmem {
  __nv_bfloat16* x;
  float *G, *dt, *c;
  __device__ SplitBufferSmem(unsigned char* base, int entries, int P) {
    x = reinterpret_cast<__nv_bfloat16*>(base);
    G = reinterpret_cast<float*>(x + size_t(entries) * kSplitHeads * P);
    dt = G + entries * kSplitHeads;
    c = dt + entries * kSplitHeads;
  }
  static size_t bytes(int entries, int P, int C) { return split_buffer_smem_bytes(entries, P, C); }
};

template <int N>
__global__ void __launch_bounds__(kSplitThreads, 4) mamba2_direct_buffer_kernel(Mamba2KVBufferParams p) {
  constexpr int kQuarter = N / 4;  // columns per thread of a c_j dot
  allow_dependent_grids();
  extern __shared__ __align__(16) unsigned char smem[];
  const Mamba2StepIO& io = p.io;
  const int NH = io.NH, P = io.P, G = io.G, C = p.capacity;
  const int row = blockIdx.z, g = blockIdx.y, heads_per_group = NH / G;
  const int h0 = g * heads_per_group + blockIdx.x * kSplitHeads;
  const int heads = min(kSplitHeads, heads_per_group - int(blockIdx.x) * kSplitHeads);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const bool head_warp = warp < heads, pair = head_warp && lane < P / 2;
  const int h = h0 + warp;
  // Phase 0: slot and metadata, with every token input (independent of the slot).
  const int slot = io.slot[row];
  const int n = p.row_fill[row];
  const int has_state = p.row_has_state[row];
  const int q = threadIdx.x & 3, jd = threadIdx.x >> 2;  // this thread's quarter of dot c_jd
  uint4 craw[kQuarter / 8];
  const __nv_bfloat16* ct = io.C + (size_t(row) * G + g) * N + q * kQuarter;
#pragma unroll
  for (int i = 0; i < kQuarter / 8; ++i) craw[i] = reinterpret_cast<const uint4*>(ct)[i];
  const size_t xo = (size_t(row) * NH + h) * P + 2 * lane;
  uint32_t xt_raw = 0, z_raw = 0;
  if (pair) {
    xt_raw = *reinterpret_cast<const uint32_t*>(io.x + xo);
    if (io.z) z_raw = *reinterpret_cast<const uint32_t*>(io.z + xo);
  }
  const float dt = head_warp ? token_dt(io, row, h) : 0.f;
  const float A = head_warp ? io.A[h] : 0.f, D = head_warp ? io.D[h] : 0.f;
  if (slot < 0) {
    if (pair) *reinterpret_cast<uint32_t*>(io.out + xo) = 0u;
    return;
  }
  if (has_state != 0 || n + 1 == C) return;  // kernel B's row

  // Phase 1: x_j of the block's heads, G_j, dt_j (cp.async, one round trip); the dots' keys by plain loads.
  const SplitBufferSmem st(smem, C - 1, P);
  const int S = kSplitHeads * P, chunks = heads * P / 8;
  const __nv_bfloat16* xg = p.buf_val + (size_t(slot) * C * NH + h0) * P;  // x_j at xg + j NH P
  for (int i = threadIdx.x; i < n * chunks; i += kSplitThreads) {
    const int j = i / chunks, k = i % chunks;
    cp_async16(st.x + j * S + k * 8, xg + size_t(j) * NH * P + k * 8);
  }
  for (int i = threadIdx.x; i < 2 * n * heads; i += kSplitThreads) {
    const bool second = i >= n * heads;
    const int e = second ? i - n * heads : i, j = e / heads, w = e % heads;
    cp_async4((second ? st.dt : st.G) + j * kSplitHeads + w,
              (second ? p.buf_beta : p.buf_gcum) + (size_t(slot) * C + j) * NH + h0 + w);
  }
  cp_async_commit();
  // Phase 2: c_j = C_t . B_j for j < n and c_n = c_t = C_t . B_t, a quarter of the columns per thread.
  float part = 0.f;
  if (jd <= n) {
    const __nv_bfloat16* bj = (jd < n ? p.buf_k + ((size_t(slot) * C + jd) * G + g) * N : io.B + (size_t(row) * G + g) * N) +
                              q * kQuarter;
    uint4 braw[kQuarter / 8];
#pragma unroll
    for (int i = 0; i < kQuarter / 8; ++i) braw[i] = reinterpret_cast<const uint4*>(bj)[i];
#pragma unroll
    for (int i = 0; i < kQuarter / 8; ++i) {
      float b8[8], c8[8];
      bf16x8(braw[i], b8);
      bf16x8(craw[i], c8);
#pragma unroll
      for (int e = 0; e < 8; ++e) part = fmaf(c8[e], b8[e], part);
    }
  }
  part += __shfl_xor_sync(0xffffffffu, part, 1);
  part += __shfl_xor_sync(0xffffffffu, part, 2);
  if (q == 0 && jd <= n) st.c[jd] = part;
  cp_async_wait_all();
  __syncthreads();
  if (!head_warp) return;

  // Phase 3: head h's weights a_j (lane j and j + 32), the outputs of rows 2 lane, 2 lane + 1.
  const float G_t = (n > 0 ? st.G[(n - 1) * kSplitHeads + warp] : 0.f) + dt * A;
  float a_lo = 0.f, a_hi = 0.f;
  if (lane < n) a_lo = expf(G_t - st.G[lane * kSplitHeads + warp]) * st.dt[lane * kSplitHeads + warp] * st.c[lane];
  if (lane + 32 < n)
    a_hi = expf(G_t - st.G[(lane + 32) * kSplitHeads + warp]) * st.dt[(lane + 32) * kSplitHeads + warp] * st.c[lane + 32];
  const uint32_t* xs = reinterpret_cast<const uint32_t*>(st.x + warp * P) + lane;
  float y0 = 0.f, y1 = 0.f;
#pragma unroll 4
  for (int j = 0; j < n; ++j) {
    const float a = __shfl_sync(0xffffffffu, j < 32 ? a_lo : a_hi, j & 31);
    if (pair) {
      const float2 xj = bf16x2_to_float2(xs[j * (S / 2)]);
      y0 = fmaf(a, xj.x, y0), y1 = fmaf(a, xj.y, y1);
    }
  }
  if (pair) {
    const float2 xt = bf16x2_to_float2(xt_raw);
    const float k = fmaf(dt, st.c[n], D);
    float o0 = fmaf(k, xt.x, y0), o1 = fmaf(k, xt.y, y1);
    if (io.z) {
      const float2 z = bf16x2_to_float2(z_raw);
      o0 *= silu(z.x), o1 *= silu(z.y);
    }
    *reinterpret_cast<__nv_bfloat162*>(io.out + xo) = __floats2bfloat162_rn(o0, o1);
    // Phase 4: append entry n (x_t of the head's rows, its G_t and dt; B_t once per group).
    *reinterpret_cast<uint32_t*>(p.buf_val + (size_t(slot) * C * NH + size_t(n) * NH + h) * P + 2 * lane) = xt_raw;
  }
  if (lane == 0) {
    p.buf_gcum[(size_t(slot) * C + n) * NH + h] = G_t;
    p.buf_beta[(size_t(slot) * C + n) * NH + h] = dt;
  }
  if (blockIdx.x == 0 && warp == 0)
    reinterpret_cast<typename RowVec<N>::H*>(p.buf_k + ((size_t(slot) * C + n) * G + g) * N)[lane] =
        load_bf16_raw<N>(io.B + (size_t(row) * G + g) * N, lane);
}

// Whether kernel B has work for a row: it exists and has a state or folds. Bitwise: ptxas turned
// `slot < 0 || ...` into a slot exit followed by the metadata loads (gdn log v21).
__device__ __forceinline__ bool state_kernel_row(int slot, int n, int has_state, int C) {
  return (slot >= 0) & ((has_state != 0) | (n + 1 == C));
}

template <int N, class S>
__global__ void __launch_bounds__(kMaxRowsPerBlock * 4, 4) mamba2_direct_state_kernel(Mamba2KVBufferParams p) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ uint32_t need_mask[kMaxRowsPerBlock * 4 / 32];
  const Mamba2StepIO& io = p.io;
  WarpCoords c = warp_coords(io);  // c.row set per row below (blockIdx.z is the row group)
  const int warps = blockDim.x >> 5, groups = int(gridDim.z), group = int(blockIdx.z);
  int rank = 0;
  for (int base = 0; base < io.batch; base += blockDim.x) {
    const int r = base + threadIdx.x;
    int slot = -1, n = 0, has_state = 0;
    if (r < io.batch) slot = io.slot[r], n = p.row_fill[r], has_state = p.row_has_state[r];
    const uint32_t mask = __ballot_sync(0xffffffffu, state_kernel_row(slot, n, has_state, p.capacity));
    if (c.lane == 0) need_mask[c.warp] = mask;
    __syncthreads();
    for (int w = 0; w < warps; ++w) {
      for (uint32_t m = need_mask[w]; m != 0; m &= m - 1, ++rank) {
        if (rank % groups != group) continue;
        c.row = base + w * 32 + __ffs(int(m)) - 1;
        decode_row<N, false, S, kWarpRows, false>(p, smem, c, io.slot[c.row], p.row_fill[c.row], p.row_has_state[c.row]);
        __syncthreads();  // the shared memory of this row before the next one's copies
      }
    }
    __syncthreads();  // need_mask before the next rows'
  }
  wait_prior_grid();  // complete only after kernel A
}

bool split_direct(const Mamba2KVBufferParams& p) {
  const bool possible = p.row_fill != nullptr && p.io.P <= kSplitMaxP;
  return p.path == DecodePath::Split || (p.path == DecodePath::Auto && possible && p.capacity >= kSplitMinCapacity &&
                                          long(p.io.batch) * p.capacity >= kSplitMinRowEntries);
}

template <int N, class S>
void launch_split_direct(const Mamba2KVBufferParams& p, cudaStream_t stream) {
  const int heads_per_group = p.io.NH / p.io.G;
  const dim3 grid_a(unsigned((heads_per_group + kSplitHeads - 1) / kSplitHeads), unsigned(p.io.G), unsigned(p.io.batch));
  launch_kernel(mamba2_direct_buffer_kernel<N>, grid_a, dim3(kSplitThreads),
                SplitBufferSmem::bytes(p.capacity - 1, p.io.P, p.capacity), stream, false, p);
  const int rows = choose_rows_per_block(p.io, kKVBufferRows);
  const size_t smem = BlockSmem<N, false, S, kWarpRows>::bytes(p.capacity - 1, rows / kWarpRows);
  dim3 grid_b = decode_grid(p.io, rows);
  const long per_wave = long(multiprocessor_count()) *
                        resident_blocks(mamba2_direct_state_kernel<N, S>, int(decode_block(rows).x), smem);
  grid_b.z = unsigned(std::clamp(per_wave / (long(grid_b.x) * grid_b.y), 1L, long(p.io.batch)));
  launch_kernel(mamba2_direct_state_kernel<N, S>, grid_b, decode_block(rows), smem, stream, true, p);
}

// Capacity 1 with every row stateful (Mamba2KVBufferParams::every_row_has_state): the step is the
// recurrent update, so the recurrent kernel runs it (10% faster than this kernel at batch 1 in the
// paper preset, with the pair shape it had then: kernels/mamba2/notes/mamba2_decode.md).
bool capacity1_route(const Mamba2KVBufferParams& p) {
  return p.capacity == 1 && p.every_row_has_state && p.row_fill && p.path == DecodePath::Auto;
}
// The recurrent update that capacity 1 runs on the state pool.
Mamba2RecurrentParams capacity1_params(const Mamba2KVBufferParams& p) {
  Mamba2RecurrentParams r;
  r.io = p.io, r.state = p.state, r.state_type = p.state_type, r.pools_ready_at_launch = p.pools_ready_at_launch;
  return r;
}

// State rows per warp of mamba2_decode_kvbuffer at `rows` rows per block (Mamba2KVBufferParams::warp_rows).
int kvbuffer_warp_rows(const Mamba2KVBufferParams& p, int rows) {
  if (p.warp_rows != 0) return p.warp_rows;
  if (state_type_bytes(p.state_type) != 2) return kWarpRows;
  return mamba2_kvbuffer16_warp_rows(long(p.io.batch) * p.io.NH * p.io.P, rows, device_limits());
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
  if (kTile && p.path == DecodePath::Split) fail("the split path is mamba2_decode_direct's");
  if (!kTile && p.path == DecodePath::Split && !(p.row_fill && p.io.P <= kSplitMaxP))
    fail("the split path needs row_fill/row_has_state and P <= " + std::to_string(kSplitMaxP));
  if (!kTile && p.every_row_has_state) fail("every_row_has_state contradicts direct mode");
  if (p.warp_rows != 0) {
    const int rows = choose_rows_per_block(p.io, kKVBufferRows), w = p.warp_rows;
    const bool wide = kTile && state_type_bytes(p.state_type) == 2;
    if (!(w == 8 || (wide && (w == 16 || w == 32) && rows % w == 0)))
      fail("unsupported warp_rows " + std::to_string(w) +
           " (8; 16 or 32 only for mamba2_decode_kvbuffer with a 16-bit state, dividing the " +
           std::to_string(rows) + " rows per block)");
  }
  if (p.io.batch == 0) return;
  // mamba2_decode_direct refused the promise above.
  if (capacity1_route(p)) return mamba2_decode_recurrent(capacity1_params(p), stream);
  dispatch_head_dims(p.io, who, [&](auto n) {
    constexpr int N = decltype(n)::value;
    dispatch_state_type(who, p.state_type, [&](auto tag) {
      using S = typename decltype(tag)::type;
      if (!kTile && split_direct(p)) return launch_split_direct<N, S>(p, stream);
      const int rows = choose_rows_per_block(p.io, kKVBufferRows);
      // Wide warps (16-bit state only) read S0 from the pool where used, as the tile-less body
      // does: at 16 and 32 rows per warp the tile's shared memory held the SM to 8-12 blocks, and
      // the loads in flight of the warps' own rows replace it (notes, "16 rows per warp").
      auto launch = [&](auto warp_rows) {
        constexpr int R = decltype(warp_rows)::value;
        constexpr bool kUseTile = kTile && R == kWarpRows;
        const size_t smem = BlockSmem<N, kUseTile, S, R>::bytes(p.capacity - 1, rows / R);
        launch_kernel(mamba2_decode_kvbuffer_kernel<N, kUseTile, S, R>, decode_grid(p.io, rows), decode_block(rows, R),
                      smem, stream, true, p);
      };
      if constexpr (kTile && sizeof(S) == 2) {
        switch (kvbuffer_warp_rows(p, rows)) {
          case 32: return launch(std::integral_constant<int, 32>{});
          case 16: return launch(std::integral_constant<int, 16>{});
        }
      }
      launch(std::integral_constant<int, kWarpRows>{});
    });
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
  using namespace mamba2_detail;
  if (capacity1_route(p)) return mamba2_decode_recurrent_rows_per_block(capacity1_params(p));
  return choose_rows_per_block(p.io, kKVBufferRows);
}

}  // namespace kvbuf
