// mamba2_verify_kvbuffer / mamba2_verify_kvbuffer_commit: KVBuffer speculative verify of Mamba-2,
// chains and trees (shared/design/kvbuffer-math.md sections 5, 6, 8), and its commit.
//
// Math, per request and head h (group g), checkpoint S0 (P x N), n buffered entries
// (x_j, B_j, dt_j, G_j), window nodes t with parents p(t), G_t = G_base + sum over the root path of
// dt_s A (G_base = G_{n-1}, or 0 after a fold or on an empty buffer):
//   y_t = e^{G_t} S0 C_t + sum_{j<n} e^{G_t-G_j} dt_j (C_t.B_j) x_j
//                        + sum_{s in anc(t)+t} e^{G_t-G_s} dt_s (C_t.B_s) x_s + D x_t,   y_t *= silu(z_t)
// No triangular solve (no delta rule): the T outputs are T (n + T) coefficients w[t][j] on the
// entries' x plus T products S0 C_t from ONE read of S0. Every exponent is <= 0. No state is
// written, except when n > 0 and n + depth >= C (gdn_verify.h's protocol): then the n entries are
// folded first, S0 <- e^{G_{n-1}} S0 + sum_j e^{G_{n-1}-G_j} dt_j x_j B_j^T, in registers (written
// back once, created in direct mode) and the window starts from an empty buffer.
// Commit: appends the m accepted nodes' (B, x, G, dt) at the fill after the verify's fold; the
// buffer becomes full only when T == C, and then the commit folds it (fill 0).
//
// Layouts (sim/layout.h, LayerKind::Mamba2): S [slots, NH, P, N] fp32; buf_k = B [slots, C, G, N],
// buf_val = x [slots, C, NH, P] bf16; buf_gcum = G, buf_beta = dt [slots, C, NH] fp32; token I/O
// as mamba2_verify.h; scratch win_k [B, T, G, N], win_u [B, T, NH, P] bf16, win_gcum, win_beta
// [B, T, NH] fp32, win_base [B, 2].
// Block: rows_per_block (64 for P = 64: the whole head) rows of one head, the decode kernels' warp
// rows (8 rows per warp, lane l holds columns [l N/32, (l+1) N/32)), on the KVBuffer decode
// kernel's skeleton (mamba2_decode_kvbuffer.cu): S0 in a shared-memory tile, not in registers.
// Phases, marked in the body:
//   1 issue: the window's B, C, x (cp.async) and warp 0's dt_t and parents, then the slot; then
//     each warp's 8 S0 rows by one bulk copy on its own mbarrier (issue_warp_rows) together with
//     fill and has_state; then the n buffer entries by cp.async: one round trip for everything after
//     the fill;
//   2 warp 0: the window's tree (ancestor masks, depth), the fold decision, dt_t and G_t, fold
//     weights; the other warps lay out the window's C in fp32 as phase 5's A operands;
//   3 fold into the tile when due, 4 rows at a time, written back to the pool;
//   4 on the tensor cores (m16n8k16 bf16): the (n_eff + T) x T dots C_t.B_e, 8 entries per warp,
//     turned into the coefficients W[t][e];
//   5 on the tensor cores (m16n8k8 TF32, tokens in m, the warp's 8 rows in n): e^{G_t} S0 C_t with
//     S0 split hi + lo (fp32 accuracy, mma.h), plus W on the entries' x; each lane writes one
//     token's outputs of two rows;
//   6 scratch for the commit: the window's B, x, G, dt and the row's base.
// Memory: S0 read once (P N 4 bytes per head), the buffer's x and B (n (P + N) 2), the window's
// scratch written (T (P + N) 2 + 8 T); a fold writes S0 once.
// Measured (the paper preset's Mamba-2 rows, commit f0e8dce8b91b, H200, Nemotron-3 Nano shapes, 23
// layer pools per CUDA graph, verify + commit per layer, results/verify_h200.csv): T = 5 [best C]
// 9.22 / 17.53 / 75.86 / 137.63 / 261.77 / 519.45 us at batch 1 / 8 / 64 / 128 / 256 / 512; T = 4
// at 128 131.12 us = 2.68x classic, 1.64x the decode step (1.22x / 1.32x faster at T = 4 / 5 than 28cea4f's).
// Bound by the block's fixed work and its dependent round trips at 4 blocks per SM (48% of the
// DRAM bandwidth), not by the S0 stream (kernels/notes/mamba2_verify.md runs 3-6). Open:
// racecheck's warp-level warnings on the warps' mbarriers (notes, run 6).
#include <stdexcept>
#include <string>

#include "kernels/common.cuh"
#include "kernels/mamba2_verify.h"
#include "kernels/mamba2_verify_device.h"
#include "kernels/mma.h"

namespace kvbuf {
namespace mamba2_detail {
namespace {

constexpr int kTMax = kMamba2VerifyMaxTokens;
constexpr int kMaxCapacity = 64;
// Resident verify blocks per SM the register budget allows: 4 (64 registers, no spills) measured 3-4%
// faster than the decode tile kernel's 5 (48 registers, 60 bytes of spills at N = 128): the kernel
// is bound by its instructions per block, not by the S0 copies in flight (kernels/notes/
// mamba2_verify.md runs 3-4).
constexpr int kVerifyBlocksPerSM = 4;

// Dynamic shared memory of the verify block in bytes, for d_state N, capacity C, `rows` rows per
// block and T tokens: the S0 tile [rows, N] fp32 first (128-byte aligned for the bulk copies), then
// 16-byte aligned pieces, then one mbarrier per warp. The bf16 rows of B and C are padded to
// BS = N + 32 elements, so that the fragment loads of phase 4 (lane 4 g + c reads row g at column
// 8 c) are free of bank conflicts; the tile's rows are not padded (one bulk copy per warp), phase 5
// orders its loads instead. C_t in fp32 is kept as phase 5's A operands, one float4 per lane and
// step {C_t[k], 0, C_t[k + 4], 0} (mma.h's a0..a3 with the rows >= 8 zero): one load, no moves.
struct VerifySmem {
  int n_dim, c, rows, t;
  __host__ __device__ static int up16(int x) { return (x + 15) / 16 * 16; }
  __host__ __device__ int cqs() const { return n_dim / 2 + 4; }                      // A-operand float4s per token (64 B pad)
  __host__ __device__ int bs() const { return n_dim + 32; }                          // bf16 row stride
  __host__ __device__ int ws() const { return (c + kTMax + 31) / 32 * 32 + 4; }      // coefficient row stride
  __host__ __device__ int tile() const { return 0; }                                 // [rows, N] fp32
  __host__ __device__ int b_rows() const { return tile() + rows * n_dim * 4; }       // [C + T, BS] bf16: buffer, then window
  __host__ __device__ int c_win() const { return b_rows() + (c + t) * bs() * 2; }    // [T, BS] bf16
  __host__ __device__ int c_quads() const { return c_win() + t * bs() * 2; }         // [T, cqs] float4: C_t as A operands
  __host__ __device__ int x_buf() const { return c_quads() + t * cqs() * 16; }       // [warps, C] uint4: a warp's 8 rows
  __host__ __device__ int x_win() const { return x_buf() + c * rows * 2; }           // [T, rows] bf16
  __host__ __device__ int z_win() const { return x_win() + t * rows * 2; }           // [T, rows] bf16 gate
  __host__ __device__ int g_buf() const { return z_win() + up16(t * rows * 2); }     // [C] G_j
  __host__ __device__ int dt_buf() const { return g_buf() + up16(c * 4); }           // [C] dt_j
  __host__ __device__ int fold_w() const { return dt_buf() + up16(c * 4); }          // [C] fold weights
  __host__ __device__ int w() const { return fold_w() + up16(c * 4); }               // [8, WS] coefficients W[t][e]
  __host__ __device__ int bars() const { return w() + kTMax * ws() * 4; }            // [warps] mbarriers
  __host__ __device__ size_t bytes() const { return size_t(bars() + rows / kWarpRows * 8); }
};

template <int N>
__global__ void __launch_bounds__(kMaxRowsPerBlock * 4, kVerifyBlocksPerSM) mamba2_verify_kvbuffer_kernel(const Mamba2VerifyKVBufferParams p) {
  constexpr int NL = N / 32, R = kWarpRows, CH = N / 8, BS = N + 32, CQS = N / 2 + 4;
  const Mamba2VerifyIO& io = p.io;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5, rows = warps * R;
  const int fg = lane >> 2, fc = lane & 3;  // the lane's fragment row and column group (mma.h)
  const int tile = blockIdx.x, h = blockIdx.y, row = blockIdx.z;
  const int pb = tile * rows, p0 = pb + warp * R;  // the block's and the warp's first row
  // The head's group by fast float divisions, exact here: (a + 0.5) / b is >= 0.5 / b from an
  // integer and its error is ~2^-22 relative, for head counts far below 2^10.
  const int T = io.tokens, C = p.capacity, NH = io.NH, P = io.P, G = io.G;
  const int heads_per_group = int(__fdividef(float(NH) + 0.5f, float(G)));
  const int g = int(__fdividef(float(h) + 0.5f, float(heads_per_group)));
  const bool group_leader = h == g * heads_per_group;
  extern __shared__ __align__(128) unsigned char smem[];
  const VerifySmem L{N, C, rows, T};
  const int WS = L.ws();
  float* s_tile = reinterpret_cast<float*>(smem + L.tile());
  __nv_bfloat16* s_b = reinterpret_cast<__nv_bfloat16*>(smem + L.b_rows());  // B_j at j BS, window B_q at (C + q) BS
  __nv_bfloat16* s_cwin = reinterpret_cast<__nv_bfloat16*>(smem + L.c_win());
  float4* s_cq = reinterpret_cast<float4*>(smem + L.c_quads());
  uint4* s_xbuf = reinterpret_cast<uint4*>(smem + L.x_buf());
  __nv_bfloat16* s_xwin = reinterpret_cast<__nv_bfloat16*>(smem + L.x_win());
  __nv_bfloat16* s_zwin = reinterpret_cast<__nv_bfloat16*>(smem + L.z_win());
  float* s_gbuf = reinterpret_cast<float*>(smem + L.g_buf());
  float* s_dtbuf = reinterpret_cast<float*>(smem + L.dt_buf());
  float* s_fw = reinterpret_cast<float*>(smem + L.fold_w());
  float* s_w = reinterpret_cast<float*>(smem + L.w());
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem + L.bars()) + warp;
  __shared__ float s_gwin[kTMax], s_dtwin[kTMax], s_egwin[kTMax];
  __shared__ unsigned s_path[kTMax];  // node t's root path (ancestors and t) as a bitmask
  __shared__ int s_fold, s_neff;

  // Phase 1, issue: the window (independent of the pools), the slot, S0, the buffer entries.
  // Every loop here and below divides only by constants.
  for (int c = threadIdx.x; c < 2 * T * CH; c += blockDim.x) {
    const int v = c / CH, e = (c % CH) * 8, t = v < T ? v : v - T;
    cp_async16((v < T ? s_b + (C + t) * BS : s_cwin + t * BS) + e, (v < T ? io.B : io.C) + ((size_t(row) * T + t) * G + g) * N + e);
  }
  // Each warp its own 8 rows of the window's x, and of the gate: read where the outputs are
  // written, each token's z would be one more dependent round trip (the stores to out may alias z).
  if (lane < T) {
    const int t = lane;
    const size_t o = ((size_t(row) * T + t) * NH + h) * P + p0;
    cp_async16(s_xwin + t * rows + warp * R, io.x + o);
    if (io.z) cp_async16(s_zwin + t * rows + warp * R, io.z + o);
  }
  const float A = io.A[h], D = io.D[h];
  // Warp 0, lane t < T: node t's step size and parent, also independent of the pools.
  float dt_lane = 0.f;
  int par_lane = -1;
  if (warp == 0 && lane < T) {
    dt_lane = verify_token_dt(io, row, lane, h);
    par_lane = node_parent(io.parents ? io.parents + size_t(row) * T : nullptr, lane);
  }
  const int slot = io.slot[row];
  if (slot < 0) {
    cp_async_wait_all();
    zero_padding_outputs(io, row, h, pb, rows);
    return;
  }
  // The warp's 8 S0 rows by one bulk copy, issued with fill and has_state (one round trip after
  // the slot, not two): a row in direct mode (no state) reads its slot's unused rows and ignores
  // them. Every warp waits for its copy before the block ends (phase 5).
  float* state_rows = p.state + ((size_t(slot) * NH + h) * P + p0) * N;
  float* tile_rows = s_tile + warp * R * N;
  issue_warp_rows<N>(tile_rows, state_rows, bar, lane);
  const int n = p.fill[slot];
  const bool has_state = p.has_state[slot] != 0;
  const __nv_bfloat16* bk = p.buf_k + (size_t(slot) * C * G + g) * N;          // B_j at + j G N
  const __nv_bfloat16* bx = p.buf_val + (size_t(slot) * C * NH + h) * P + pb;  // x_j at + j NH P
  for (int c = threadIdx.x; c < n * CH; c += blockDim.x) {
    const int j = c / CH, e = (c % CH) * 8;
    cp_async16(s_b + j * BS + e, bk + size_t(j) * G * N + e);
  }
  for (int j = lane; j < n; j += 32) cp_async16(s_xbuf + warp * C + j, bx + size_t(j) * NH * P + warp * R);
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    cp_async4(s_gbuf + j, p.buf_gcum + (size_t(slot) * C + j) * NH + h);
    cp_async4(s_dtbuf + j, p.buf_beta + (size_t(slot) * C + j) * NH + h);
  }
  cp_async_wait_all();
  __syncthreads();

  // Phase 2, warp 0, lane t = node t: root path, depth, fold decision, dt_t, G_t, fold weights.
  if (warp == 0) {
    const int t = lane, par = par_lane;
    unsigned anc = 0u;
    int up = par;
#pragma unroll
    for (int it = 0; it < kTMax - 1; ++it) {  // one generation per step
      if (up >= 0) anc |= 1u << up;
      const int next = __shfl_sync(0xffffffffu, par, up < 0 ? 0 : up);
      up = up < 0 ? -1 : next;
    }
    const int depth = __reduce_max_sync(0xffffffffu, t < T ? __popc(anc) + 1 : 0);
    const bool fold = n > 0 && n + depth >= C;
    const int n_eff = fold ? 0 : n;
    const float dt = dt_lane;
    const unsigned path = t < T ? anc | 1u << t : 0u;
    float gsum = 0.f;
#pragma unroll
    for (int q = 0; q < kTMax; ++q) {
      const float a = __shfl_sync(0xffffffffu, dt * A, q);
      if (path >> q & 1u) gsum += a;
    }
    const float G_t = (n_eff > 0 ? s_gbuf[n_eff - 1] : 0.f) + gsum;
    if (t < T) {
      s_gwin[t] = G_t, s_dtwin[t] = dt, s_egwin[t] = expf(G_t), s_path[t] = path;
    }
    if (fold)
      for (int j = lane; j < n; j += 32) s_fw[j] = expf(s_gbuf[n - 1] - s_gbuf[j]) * s_dtbuf[j];
    if (lane == 0) s_fold = fold, s_neff = n_eff;
  }
  if (warp > 0 || warps == 1) {
    // The other warps meanwhile (a one-warp block after it) lay out the window's C_t as phase 5's
    // A operands: float4 (q 4 + u) 4 + c of token t holds columns 32 q + 8 c + u and its + 4.
    const int helpers = warps > 1 ? int(blockDim.x) - 32 : 32;
    for (int i = int(threadIdx.x) - (warps > 1 ? 32 : 0); i < T * N / 2; i += helpers) {
      const int t = i / (N / 2), r = i % (N / 2), col = (r >> 4) * 32 + (r & 3) * 8 + (r >> 2 & 3);
      s_cq[t * CQS + r] = make_float4(__bfloat162float(s_cwin[t * BS + col]), 0.f,
                                      __bfloat162float(s_cwin[t * BS + col + 4]), 0.f);
    }
  }
  __syncthreads();
  const bool fold = s_fold;
  const int n_eff = s_neff, ne = n_eff + T;  // entries: n_eff buffered, then the T window nodes
  const uint4* xw = s_xbuf + warp * C;        // x_j of the warp's 8 rows

  // Phase 3, fold: S0 <- e^{G_{n-1}} S0 + sum_j w_j x_j B_j^T from the tile and the staged entries,
  // 4 rows at a time (the decode kernel's fold), written back to the pool once and to the tile for
  // the outputs.
  if (fold) {
    const float eGn = expf(s_gbuf[n - 1]);
    gdn_detail::tile_wait(bar);
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      constexpr int H = R / 2;
      float s[H][NL];
#pragma unroll
      for (int i = 0; i < H; ++i) {
        float s0[NL];
        load_row<N>(tile_rows + (half * H + i) * N + lane * NL, s0);
#pragma unroll
        for (int e = 0; e < NL; ++e) s[i][e] = has_state ? eGn * s0[e] : 0.f;
      }
#pragma unroll 2
      for (int j = 0; j < n; ++j) {
        float Bj[NL];
        bf16_slice<N>(load_bf16_raw<N>(s_b + j * BS, lane), Bj);
        const uint2 xr = reinterpret_cast<const uint2*>(xw + j)[half];
        const float2 xa = bf16x2_to_float2(xr.x), xb = bf16x2_to_float2(xr.y);
        const float xj[H] = {xa.x, xa.y, xb.x, xb.y};
        const float w = s_fw[j];
#pragma unroll
        for (int i = 0; i < H; ++i) {
          const float wx = w * xj[i];
#pragma unroll
          for (int e = 0; e < NL; ++e) s[i][e] = fmaf(wx, Bj[e], s[i][e]);
        }
      }
#pragma unroll
      for (int i = 0; i < H; ++i) {
        store_row<N>(state_rows + size_t(half * H + i) * N + lane * NL, s[i]);
        store_row<N>(tile_rows + (half * H + i) * N + lane * NL, s[i]);
      }
    }
    __syncwarp();  // phase 5 reads the rows across lanes
  }

  // Phase 4, coefficients W[t][e] on the tensor cores (m16n8k16 bf16, fp32 sums): the dots
  // C_t . B_e of the T tokens (A: the window's C rows, tokens in m, rows >= T zero) with 8 entries
  // at a time (B: buffered B_e for e < n_eff, then the window's B), one 8-entry tile per warp.
  // Columns map to k as 8 consecutive bf16 of lane c (mma.h: k pairs 2c and 2c + 8 of two steps).
  // Lane (fg, fc) ends with token fg's dots with entries 8 k + 2 fc, + 1.
  for (int et = warp; et * 8 < ne; et += warps) {
    const int eb = et * 8 + fg;  // the entry whose B this lane holds
    const bool a_ok = fg < T, b_ok = eb < ne;
    const __nv_bfloat16* arow = s_cwin + (a_ok ? fg : 0) * BS + 8 * fc;
    const __nv_bfloat16* brow = s_b + (eb < n_eff ? eb : b_ok ? C + eb - n_eff : 0) * BS + 8 * fc;
    float d[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int k = 0; k < N / 32; ++k) {
      const uint4 a = a_ok ? *reinterpret_cast<const uint4*>(arow + 32 * k) : make_uint4(0u, 0u, 0u, 0u);
      const uint4 b = b_ok ? *reinterpret_cast<const uint4*>(brow + 32 * k) : make_uint4(0u, 0u, 0u, 0u);
      mma_bf16(d, a.x, 0u, a.y, 0u, b.x, b.y);
      mma_bf16(d, a.z, 0u, a.w, 0u, b.z, b.w);
    }
    if (a_ok) {
      const int t = fg;
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int e = et * 8 + 2 * fc + i;
        if (e >= ne) continue;
        float w;
        if (e < n_eff) {
          w = expf(s_gwin[t] - s_gbuf[e]) * s_dtbuf[e] * d[i];
        } else {
          const int q = e - n_eff;
          w = s_path[t] >> q & 1u ? fmaf(expf(s_gwin[t] - s_gwin[q]) * s_dtwin[q], d[i], q == t ? D : 0.f) : 0.f;
        }
        s_w[t * WS + e] = w;
      }
    }
  }
  __syncthreads();

  // Phase 5, outputs on the tensor cores (m16n8k8 TF32, mma.h), tokens in m, the warp's 8 rows in
  // n: D[t][r] = e^{G_t} sum_k C_t[k] S0[r][k] (A = C_t, exact in TF32; B = S0 split hi + lo), then
  // + sum_e W[t][e] x_e[r] (A = W split, B = x exact; D x_t is the coefficient of the token
  // itself). Column 32 q + 8 c + u is k = c of step (q, u) and 32 q + 8 c + 4 + u is k = c + 4.
  // The lanes of odd rows load their second float4 of S0 first: the two rows of a quarter warp,
  // N floats apart, then read different banks. Lane (fg, fc) ends with token fg's outputs of rows
  // 2 fc, 2 fc + 1 and writes them as a pair.
  gdn_detail::tile_wait(bar);
  {
    const int t = fg < T ? fg : 0;  // rows >= T of A compute outputs that are dropped
    float d[4] = {0.f, 0.f, 0.f, 0.f}, d_odd[4] = {0.f, 0.f, 0.f, 0.f};  // two chains of products
    if (has_state || fold) {  // else S0 = 0
      const bool odd = fg & 1;
      const float* srow = tile_rows + fg * N + 8 * fc;
      const float4* cq = s_cq + t * CQS + fc;
#pragma unroll
      for (int q = 0; q < N / 32; ++q) {
        const float4 first = *reinterpret_cast<const float4*>(srow + 32 * q + (odd ? 4 : 0));
        const float4 second = *reinterpret_cast<const float4*>(srow + 32 * q + (odd ? 0 : 4));
        const float4 s_lo = odd ? second : first, s_hi = odd ? first : second;
        const float sl[4] = {s_lo.x, s_lo.y, s_lo.z, s_lo.w}, sh[4] = {s_hi.x, s_hi.y, s_hi.z, s_hi.w};
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const float4 a = cq[(q * 4 + u) * 4];
          mma_tf32x2_b(u % 2 ? d_odd : d, __float_as_uint(a.x), __float_as_uint(a.y), __float_as_uint(a.z),
                       __float_as_uint(a.w), sl[u], sh[u]);
        }
      }
      const float eg = s_egwin[t];
      d[0] = (d[0] + d_odd[0]) * eg, d[1] = (d[1] + d_odd[1]) * eg;
    }
    const __nv_bfloat16* xb = reinterpret_cast<const __nv_bfloat16*>(xw) + fg;  // x_e of row fg at xb[8 e]
    const float* wrow = s_w + t * WS;
    auto entry_x = [&](int e) {
      return e < n_eff ? __bfloat162float(xb[8 * e])
                       : e < ne ? __bfloat162float(s_xwin[(e - n_eff) * rows + warp * R + fg]) : 0.f;
    };
    for (int k = 0; k < ne; k += 8) {
      const int e0 = k + fc, e1 = e0 + 4;
      mma_tf32x2(d, e0 < ne ? wrow[e0] : 0.f, 0.f, e1 < ne ? wrow[e1] : 0.f, 0.f, entry_x(e0), entry_x(e1));
    }
    if (fg < T) {
      float y0 = d[0], y1 = d[1];
      if (io.z) {
        const float2 z = bf16x2_to_float2(*reinterpret_cast<const uint32_t*>(s_zwin + fg * rows + warp * R + 2 * fc));
        y0 *= silu(z.x), y1 *= silu(z.y);
      }
      *reinterpret_cast<__nv_bfloat162*>(io.out + ((size_t(row) * T + fg) * NH + h) * P + p0 + 2 * fc) =
          __floats2bfloat162_rn(y0, y1);
    }
  }

  // Phase 6, scratch for the commit.
  if (lane < T)
    *reinterpret_cast<uint4*>(p.win_u + ((size_t(row) * T + lane) * NH + h) * P + p0) =
        *reinterpret_cast<const uint4*>(s_xwin + lane * rows + warp * R);
  if (tile == 0) {
    if (group_leader)
      for (int c = threadIdx.x; c < T * CH; c += blockDim.x) {
        const int t = c / CH, e = (c % CH) * 8;
        *reinterpret_cast<uint4*>(p.win_k + ((size_t(row) * T + t) * G + g) * N + e) =
            *reinterpret_cast<const uint4*>(s_b + (C + t) * BS + e);
      }
    if (threadIdx.x < T) {
      p.win_gcum[(size_t(row) * T + threadIdx.x) * NH + h] = s_gwin[threadIdx.x];
      p.win_beta[(size_t(row) * T + threadIdx.x) * NH + h] = s_dtwin[threadIdx.x];
    }
    if (h == 0 && threadIdx.x == 0) {
      p.win_base[2 * row] = n_eff;
      p.win_base[2 * row + 1] = has_state || fold ? 1 : 0;
    }
  }
}

// The accepted node (0-based) of position e of row `row`'s accepted path.
__device__ __forceinline__ int accepted_node(const Mamba2VerifyKVBufferParams& p, int row, int e) {
  const int T = p.io.tokens;
  const int node = p.accept.accept_nodes ? p.accept.accept_nodes[size_t(row) * T + e] - 1 : e;
  return min(max(node, 0), T - 1);
}
__device__ __forceinline__ int accepted_len(const Mamba2VerifyKVBufferParams& p, int row) {
  return min(max(p.accept.accept_len[row], 0), p.io.tokens);
}

// Commit, kCommitSlices blocks per request row: copies the m accepted nodes' entries (B per group,
// x, G and dt per head) from the scratch to buffer positions n0 .. n0+m-1 in 16-byte pieces, and
// sets fill and has_state. It reads only the scratch the verify wrote. A buffer that becomes full
// (n0 + m == C, only when T == C) is folded by mamba2_verify_kvbuffer_commit_fold_kernel instead.
constexpr int kCommitThreads = 256;
constexpr int kCommitSlices = 8;
__global__ void __launch_bounds__(kCommitThreads) mamba2_verify_kvbuffer_commit_kernel(const Mamba2VerifyKVBufferParams p) {
  const Mamba2VerifyIO& io = p.io;
  const int row = blockIdx.x, T = io.tokens, C = p.capacity;
  // Every per-row value in one round trip (the accepted nodes of all T positions, used below m; a
  // padding row's are read and dropped).
  const int slot = io.slot[row];
  const int n0 = p.win_base[2 * row];
  const bool has_state = p.win_base[2 * row + 1] != 0;
  const int m = accepted_len(p, row);
  const int node = threadIdx.x < T ? accepted_node(p, row, threadIdx.x) : 0;
  if (slot < 0) return;
  __shared__ int s_node[kTMax];
  if (threadIdx.x < m) s_node[threadIdx.x] = node;
  __syncthreads();
  if (n0 + m >= C) {
    if (blockIdx.y == 0 && threadIdx.x == 0) p.fill[slot] = 0, p.has_state[slot] = 1;
    return;
  }
  const int x_chunks = io.NH * io.P / 8, b_chunks = io.G * io.N / 8;  // per entry
  const int total = m * (x_chunks + b_chunks);
  const uint4* win_x = reinterpret_cast<const uint4*>(p.win_u);
  const uint4* win_b = reinterpret_cast<const uint4*>(p.win_k);
  uint4* buf_x = reinterpret_cast<uint4*>(p.buf_val);
  uint4* buf_b = reinterpret_cast<uint4*>(p.buf_k);
  constexpr int kBatch = 4;
  const int stride = kCommitSlices * kCommitThreads;
  for (int base = blockIdx.y * kCommitThreads + threadIdx.x; base < total; base += kBatch * stride) {
    uint4 v[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int c = base + i * stride;
      if (c < total) {
        const int e = c / (x_chunks + b_chunks), w = c % (x_chunks + b_chunks);
        const size_t src = size_t(row) * T + s_node[e];
        v[i] = w < x_chunks ? win_x[src * x_chunks + w] : win_b[src * b_chunks + (w - x_chunks)];
      }
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int c = base + i * stride;
      if (c < total) {
        const int e = c / (x_chunks + b_chunks), w = c % (x_chunks + b_chunks);
        const size_t dst = size_t(slot) * C + n0 + e;
        if (w < x_chunks) buf_x[dst * x_chunks + w] = v[i];
        else buf_b[dst * b_chunks + (w - x_chunks)] = v[i];
      }
    }
  }
  if (blockIdx.y != 0) return;
  for (int c = threadIdx.x; c < m * io.NH; c += kCommitThreads) {
    const int e = c / io.NH, h = c % io.NH;
    const size_t src = (size_t(row) * T + s_node[e]) * io.NH + h, dst = (size_t(slot) * C + n0 + e) * io.NH + h;
    p.buf_gcum[dst] = p.win_gcum[src];
    p.buf_beta[dst] = p.win_beta[src];
  }
  if (threadIdx.x == 0) {
    p.fill[slot] = n0 + m;
    p.has_state[slot] = has_state ? 1 : 0;
  }
}

// The commit's fold of a full buffer, one warp per 8 state rows (the recurrent decode's shape):
// S0 <- e^{G_{C-1}} S0 + sum_j e^{G_{C-1}-G_j} dt_j x_j B_j^T over the n0 buffered entries and the
// m accepted nodes (C in all); rows whose buffer is not full exit at once.
template <int N>
__global__ void __launch_bounds__(32) mamba2_verify_kvbuffer_commit_fold_kernel(const Mamba2VerifyKVBufferParams p) {
  constexpr int NL = N / 32, R = kWarpRows;
  const Mamba2VerifyIO& io = p.io;
  const int lane = threadIdx.x, h = blockIdx.y, row = blockIdx.z, p0 = blockIdx.x * R;
  const int T = io.tokens, C = p.capacity, NH = io.NH, P = io.P, G = io.G, g = h / (NH / G);
  const int slot = io.slot[row];
  if (slot < 0) return;
  const int n0 = p.win_base[2 * row];
  const bool has_state = p.win_base[2 * row + 1] != 0;
  const int m = accepted_len(p, row);
  if (n0 + m < C) return;
  // Entry j: buffered (j < n0) or accepted node accepted_node(j - n0) of the scratch.
  auto entry_scalar = [&](const float* buf, const float* win, int j) {
    return j < n0 ? buf[(size_t(slot) * C + j) * NH + h] : win[(size_t(row) * T + accepted_node(p, row, j - n0)) * NH + h];
  };
  float* state_rows = p.state + ((size_t(slot) * NH + h) * P + p0) * N + lane * NL;
  float s[R][NL];
  const float G_last = entry_scalar(p.buf_gcum, p.win_gcum, C - 1), eGn = expf(G_last);
#pragma unroll
  for (int i = 0; i < R; ++i) {
    if (has_state) {
      load_row<N>(state_rows + size_t(i) * N, s[i]);
#pragma unroll
      for (int e = 0; e < NL; ++e) s[i][e] *= eGn;
    } else {
#pragma unroll
      for (int e = 0; e < NL; ++e) s[i][e] = 0.f;
    }
  }
  for (int j = 0; j < C; ++j) {
    const bool buffered = j < n0;
    const size_t win_entry = size_t(row) * T + (buffered ? 0 : accepted_node(p, row, j - n0));
    const __nv_bfloat16* Bsrc = buffered ? p.buf_k + ((size_t(slot) * C + j) * G + g) * N : p.win_k + (win_entry * G + g) * N;
    const __nv_bfloat16* xsrc = buffered ? p.buf_val + ((size_t(slot) * C + j) * NH + h) * P + p0
                                         : p.win_u + (win_entry * NH + h) * P + p0;
    float Bj[NL], xj[R];
    bf16_slice<N>(load_bf16_raw<N>(Bsrc, lane), Bj);
    bf16x8(*reinterpret_cast<const uint4*>(xsrc), xj);
    const float w = expf(G_last - entry_scalar(p.buf_gcum, p.win_gcum, j)) * entry_scalar(p.buf_beta, p.win_beta, j);
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const float wx = w * xj[i];
#pragma unroll
      for (int e = 0; e < NL; ++e) s[i][e] = fmaf(wx, Bj[e], s[i][e]);
    }
  }
#pragma unroll
  for (int i = 0; i < R; ++i) store_row<N>(state_rows + size_t(i) * N, s[i]);
}

void validate(const Mamba2VerifyKVBufferParams& p, const char* who) {
  validate_verify_io(p.io, who);
  auto fail = [&](const std::string& m) { throw std::invalid_argument(std::string(who) + ": " + m); };
  if (p.capacity < p.io.tokens || p.capacity > kMaxCapacity)
    fail("unsupported capacity C = " + std::to_string(p.capacity) + " (T <= C <= 64)");
  if (p.io.batch > 0 && (!p.state || !p.buf_k || !p.buf_val || !p.buf_gcum || !p.buf_beta || !p.fill || !p.has_state ||
                         !p.win_k || !p.win_u || !p.win_gcum || !p.win_beta || !p.win_base))
    fail("null pointer among pools or scratch");
}

// Rows per block: the whole head up to 64 rows (the largest of 64, 32, 16, 8 dividing P), as the
// KVBuffer decode kernel's measured rule: the block's warps share the dots and coefficients.
int verify_rows(int P) {
  int rows = kMaxRowsPerBlock;
  while (P % rows != 0) rows /= 2;
  return rows;
}

}  // namespace
}  // namespace mamba2_detail

void mamba2_verify_kvbuffer(const Mamba2VerifyKVBufferParams& p, cudaStream_t stream) {
  using namespace mamba2_detail;
  const char* who = "mamba2_verify_kvbuffer";
  validate(p, who);
  if (p.io.batch == 0) return;
  const int rows = verify_rows(p.io.P);
  const size_t smem = VerifySmem{p.io.N, p.capacity, rows, p.io.tokens}.bytes();
  const dim3 grid(unsigned(p.io.P / rows), unsigned(p.io.NH), unsigned(p.io.batch));
  dispatch_verify_dims(p.io, who, [&](auto n) {
    launch_kernel(mamba2_verify_kvbuffer_kernel<decltype(n)::value>, grid, decode_block(rows), smem, stream, false, p);
  });
}

void mamba2_verify_kvbuffer_commit(const Mamba2VerifyKVBufferParams& p, cudaStream_t stream) {
  using namespace mamba2_detail;
  const char* who = "mamba2_verify_kvbuffer_commit";
  validate(p, who);
  if (!p.accept.accept_len) throw std::invalid_argument(std::string(who) + ": accept_len is null");
  if (p.io.batch == 0) return;
  // The buffer can become full at the commit only when T == C: the fold reads the scratch and the
  // buffer, which the copy kernel then leaves untouched for such rows.
  if (p.io.tokens == p.capacity) {
    const dim3 grid(unsigned(p.io.P / kWarpRows), unsigned(p.io.NH), unsigned(p.io.batch));
    dispatch_verify_dims(p.io, who, [&](auto n) {
      launch_kernel(mamba2_verify_kvbuffer_commit_fold_kernel<decltype(n)::value>, grid, dim3(32), 0, stream, false, p);
    });
  }
  launch_kernel(mamba2_verify_kvbuffer_commit_kernel, dim3(unsigned(p.io.batch), kCommitSlices), dim3(kCommitThreads), 0,
                stream, false, p);
}

}  // namespace kvbuf
