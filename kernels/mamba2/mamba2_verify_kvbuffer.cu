// mamba2_verify_kvbuffer / mamba2_verify_kvbuffer_commit: KVBuffer speculative verify of Mamba-2,
// chains and trees (docs/kvbuffer-math.md sections 5, 6, 8), and its commit.
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
// buffer becomes full only when T == C, and then the commit folds it (fill 0). In the head-group
// kernel (VerifyWindow::Buffer) a chain whose window fits after the fill (n + T < C: sim/layout.h's
// verify_window_in_buffer) has its T nodes' entries written into the buffer at n + t, and its
// commit only moves the fill to n + m (rollback drops the rejected entries past it); the other
// windows, and every window of the one-head kernel, go through the scratch.
//
// Layouts (sim/layout.h, LayerKind::Mamba2): S [slots, NH, P, N] in the state dtype (fp32, bf16 or
// fp16: the element S of every kernel that reads or writes it, through dispatch_state_type); buf_k = B [slots, C, G, N],
// buf_val = x [slots, C, NH, P] bf16; buf_gcum = G, buf_beta = dt [slots, C, NH] fp32; token I/O
// as mamba2_verify.h; scratch win_k [B, T, G, N], win_u [B, T, NH, P] bf16, win_gcum, win_beta
// [B, T, NH] fp32, win_base [B, 2].
// Two kernels, chosen by heads per SM (verify_heads_per_block; Params::heads_per_block forces one):
// * mamba2_verify_kvbuffer_kernel, one head per block (small batches): rows_per_block (64 for
//   P = 64: the whole head) rows, the decode kernels' warp rows (8 per warp), on the KVBuffer decode
//   kernel's skeleton (mamba2_decode_kvbuffer.cu): S0 in a shared-memory tile, each warp's 8 rows by
//   two bulk copies (warp tiles with a skew, tile_skew) issued with fill and has_state, 4
//   blocks per SM.
// * mamba2_verify_kvbuffer_group_kernel, heads_per_block (up to 8) heads of one group per block
//   (4 or 8 heads, the most with which the grid fills kGroupMinWaves waves; the one-head kernel
//   when 4 do not): the heads share the staging of B, C and the entries, the tree, the dots and the
//   coefficients; each warp streams its 8 rows of the heads' S0 through its own stage, refilled as
//   soon as it is read, no block barrier between heads; 3 blocks per SM. Its rows' blocks start in
//   Params::row_order when given (mamba2_verify_kvbuffer_order: the folding rows, ~2x longer, first).
// Phases, marked in the bodies: issue (the window, the slot, S0, the buffer); warp 0's tree (root
// paths, depth, fold decision) while the others lay out C_t as B pairs; the dots C_t . B_e on the
// tensor cores (m16n8k16 bf16) turned into coefficients W[t][e]; the fold when due (CUDA cores,
// written to the pool once); the outputs on the tensor cores (m16n8k8 TF32, a warp's 8 rows in m
// with each S0 value's hi and lo parts in the two row halves (fp32 accuracy, one product per 8
// columns), tokens in n): e^{G_t} S0 C_t, plus the entries' x times W (W split hi + lo); the
// scratch for the commit. A model step runs every layer's verify, then one commit of all layers
// (mamba2_verify.h); each kernel is a programmatic dependent of the kernel before it (the previous
// layer's verify, or the previous step's commit, which lets it launch once the verify it follows is
// complete). The one-head kernel waits for that kernel at its first instruction. The head-group
// kernel lets the next kernel launch at its first instruction; where the kernel before writes none
// of its pools (Params::pools_ready_at_launch: the previous layer's verify), it reads its slot,
// fill, buffered entries and first S0 rows before it waits, and a first-wave block of folding
// chains folds its first head then: a layer's first wave of blocks starts while the previous
// layer's last blocks run, and only the window's inputs wait for that layer.
// A 16-bit state: the S0 tiles and stages hold S (half the bytes per copy; the skew in S's elements,
// s0_product reading 8 of them per lane in one 16-byte load: tile_skew), every product and sum is fp32
// (s0_product widens S exactly to fp32 before its hi + lo split), and a fold rounds each element
// to nearest once: the value written to the pool is the one written back to the tile, so the
// outputs after a fold read the rounded S0, as a later verify would (the reference's StateStore).
// Memory: S0 read once (P N sizeof(S) bytes per head), the buffer's x and B (n (P + N) 2), the window's
// entries written (T (P + N) 2 + 8 T, into the buffer or the scratch); a fold writes S0 once.
// Measured (the paper preset restricted to this kernel, commit 26ee87c4107a, H200, Nemotron-3 Nano
// shapes, 23 layer pools per CUDA graph, every layer's verify then one commit of all layers, the
// head-group kernel from batch 38 with the folding rows first, results/verify_h200.csv): T = 5
// [best C] 5.82 / 14.67 / 56.71 / 104.05 / 201.28 / 392.79 us at batch 1 / 8 / 64 / 128 / 256 /
// 512; T = 4 at 128 100.73 us = 3.44x classic (83% of copy) and 1.26x the decode step (80.16), at
// 512 3.63x. Reading the pools before the wait took batch 64 / 128 from 61.5 / 109.5 to 56.9 /
// 104.9 us (T = 4, one call); the first head's early fold and the early launch of the next kernel
// about 2% more at 128; the windows in the buffer 1.6-2.5% more from batch 64. The head-group
// kernel issues 0.58 instructions per scheduler and cycle, but 7% fewer instructions did not make it
// faster: a third of its stall samples are exposed latency (its warps waiting for their S0 stage,
// 14%; the block prologue's dependent loads behind barriers, ~18%). From batch 256 both kernels run
// at the 700 W cap, where the same binary varies 1-6% between calls with the SM clock
// (kernels/mamba2/notes/mamba2_verify.md runs 7-15).
#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <cub/block/block_scan.cuh>

#include "kernels/common/arch.cuh"
#include "kernels/common/common.cuh"
#include "kernels/common/mma.h"
#include "kernels/mamba2/mamba2_verify.h"
#include "kernels/mamba2/mamba2_verify_device.h"

namespace kvbuf {
namespace mamba2_detail {
namespace {

constexpr int kTMax = kVerifyTMax;
static_assert(kVerifyTMax == kMamba2VerifyMaxTokens, "the verify's window tokens");
constexpr int kMaxCapacity = 64;
// state_type sits in the padding after pools_ready_at_launch: the fields' offsets and the struct's
// size are those of the fp32-only Params (the fp32 kernels' SASS, the commit's layer table).
static_assert(offsetof(Mamba2VerifyKVBufferParams, state_type) == 140 && offsetof(Mamba2VerifyKVBufferParams, state) == 144 &&
                  sizeof(Mamba2VerifyKVBufferParams) == 256,
              "Mamba2VerifyKVBufferParams' layout");
constexpr int kMaxHeadsPerBlock = 8;
// Resident blocks per SM the launch bounds ask for: the one-head kernel at 4 (64 registers, no
// spills, measured 3-4% faster than 5 with spills: kernels/mamba2/notes/mamba2_verify.md runs 3-4), the
// head-group kernel at 3 (80 registers; shared memory fits 3 blocks of 8 heads up to C = 16).
constexpr int kOneHeadBlocksPerSM = 4;
constexpr int kGroupBlocksPerSM = 3;
// The head-group kernel's warps stream S0 rows through a ring of kStages stages per warp, refilled
// as soon as the warp has read one. One stage and 3 blocks per SM measured 1-8% faster than two
// stages and 2 blocks (the kernel is bound by issue with few warps, not by copies in flight;
// kernels/mamba2/notes/mamba2_verify.md run 8).
constexpr int kStages = 1;
// The head-group kernel's blocks hold at least kGroupMinHeadsPerBlock heads (two heads per block
// measured 6-17% slower than the one-head kernel at every batch from 16 to 256: a prologue shared by
// two heads, 24 warps per SM against 32) and its grid fills at least kGroupMinWaves waves of
// kGroupBlocksPerSM blocks per SM, the most heads per block that do: with the folding rows launched
// first (Params::row_order), 8 heads per block at 1.9 waves (Nemotron-3 Nano, batch 96) measured 3.5%
// faster than 4 heads at 3.9, but at 1.3 waves (batch 64) 4.4% slower than 4 heads at 2.6; 4 heads at
// 1.3 waves (batch 32) 4% slower than the one-head kernel (kernels/mamba2/notes/mamba2_verify.md run 11).
constexpr int kGroupMinHeadsPerBlock = 4;
constexpr double kGroupMinWaves = 1.5;

// ---- Pieces shared by the two verify kernels.

// The warp tiles' skew, the staged pieces' strides and the one-head block's layout (VerifySmem):
// kernels/mamba2/mamba2_launch_shape.h.
template <int N, class S>
__host__ __device__ constexpr int warp_tile_elems() { return kWarpRows * N + tile_skew(int(sizeof(S))); }
template <int N, class F>
__device__ __forceinline__ F* tile_row(F* tile, int r) {
  return tile + r * N + (r >= kWarpRows / 2 ? tile_skew(int(sizeof(F))) : 0);
}
// The tile row that fragment row g (mma.h's lane / 4) holds: rows 2 i and 2 i + 1 are tile rows i
// and i + 4.
__device__ __forceinline__ int fragment_row(int g) { return (g >> 1) + (g & 1) * (kWarpRows / 2); }

// The warp's copy issuers (copy_issuer(lane)): its 8 S0 rows at src into its tile `dst` by two bulk
// copies (the halves) on `bar` (initialised by the block before a block barrier). The proxy fence
// orders the warp's earlier reads and writes of dst (a previous head's) before the copies' writes.
template <int N, class S>
__device__ __forceinline__ void issue_s0_rows(S* dst, const S* src, uint64_t* bar) {
  constexpr int kHalfRows = kWarpRows / 2;
  constexpr uint32_t kHalfBytes = kHalfRows * N * sizeof(S);
  static_assert(kHalfBytes % 16 == 0 && tile_skew(int(sizeof(S))) * sizeof(S) % 16 == 0, "bulk copies of 16-byte pieces");
  fence_before_copy_overwrite();
  expect_copy_bytes(bar, 2 * kHalfBytes);
#pragma unroll
  for (int half = 0; half < 2; ++half)
    bulk_copy(dst + half * (kHalfRows * N + tile_skew(int(sizeof(S)))), src + half * kHalfRows * N, kHalfBytes, bar);
  copies_issued(bar);
}

// The block's 16-byte cp.async pieces of group g's rows of bf16 B and C (bc_row_stride): the
// window's T rows of B at s_b row C + t and of C at s_cwin row t.
template <int N>
__device__ __forceinline__ void stage_window_bc(__nv_bfloat16* s_b, __nv_bfloat16* s_cwin, const Mamba2VerifyIO& io,
                                                int row, int g, int C, int T, int G) {
  constexpr int CH = N / 8, BS = bc_row_stride(N);
  for (int c = threadIdx.x; c < 2 * T * CH; c += blockDim.x) {
    const int v = c / CH, e = (c % CH) * 8, t = v < T ? v : v - T;
    cp_async16((v < T ? s_b + (C + t) * BS : s_cwin + t * BS) + e, (v < T ? io.B : io.C) + ((size_t(row) * T + t) * G + g) * N + e);
  }
}
// The same for the n buffered entries' B (bk: B_0 of the group, B_j at + j G N) at s_b rows 0..n-1.
template <int N>
__device__ __forceinline__ void stage_buffer_b(__nv_bfloat16* s_b, const __nv_bfloat16* bk, int n, int G) {
  constexpr int CH = N / 8, BS = bc_row_stride(N);
  for (int c = threadIdx.x; c < n * CH; c += blockDim.x) {
    const int j = c / CH, e = (c % CH) * 8;
    cp_async16(s_b + j * BS + e, bk + size_t(j) * G * N + e);
  }
}
// Where the window's nodes go as entries (x [e, NH, P], B [e, G, N], G and dt [e, NH]; node t is
// entry first + t): into the buffer at the fill n (sim/layout.h's verify_window_in_buffer), else
// into the scratch for the commit. The two areas share the entry layouts.
struct WindowEntries {
  __nv_bfloat16* x;
  __nv_bfloat16* b;
  float* g;
  float* dt;
  size_t first;
};
__device__ __forceinline__ WindowEntries window_entries(const Mamba2VerifyKVBufferParams& p, bool in_buffer, int row,
                                                        int slot, int n) {
  if (in_buffer) return {p.buf_val, p.buf_k, p.buf_gcum, p.buf_beta, size_t(slot) * p.capacity + n};
  return {p.win_u, p.win_k, p.win_gcum, p.win_beta, size_t(row) * p.io.tokens};
}
// By the block: the window's B rows (s_b rows C..C+T-1) of group g.
template <int N>
__device__ __forceinline__ void write_window_b(const WindowEntries& we, const __nv_bfloat16* s_b, int g, int C, int T,
                                               int G) {
  constexpr int CH = N / 8, BS = bc_row_stride(N);
  for (int c = threadIdx.x; c < T * CH; c += blockDim.x) {
    const int t = c / CH, e = (c % CH) * 8;
    *reinterpret_cast<uint4*>(we.b + ((we.first + t) * G + g) * N + e) =
        *reinterpret_cast<const uint4*>(s_b + (C + t) * BS + e);
  }
}

// Warp 0, lane t = node t: its root path (its ancestors and t) as a bitmask, and in every lane the
// window's depth (the longest root path, nodes t < T). par: lane t's parent (-1: the checkpoint).
__device__ __forceinline__ unsigned node_path(int par, int T, int lane, int& depth) {
  unsigned anc = 0u;
  int up = par;
#pragma unroll
  for (int it = 0; it < kTMax - 1; ++it) {  // one generation per step
    if (up >= 0) anc |= 1u << up;
    const int next = __shfl_sync(0xffffffffu, par, up < 0 ? 0 : up);
    up = up < 0 ? -1 : next;
  }
  depth = __reduce_max_sync(0xffffffffu, lane < T ? __popc(anc) + 1 : 0);
  return anc | 1u << lane;
}

// The window's C_t (bf16 rows of bc_row_stride) in fp32 as the S0 products' B operands, items
// first, first + stride, ...: float2 (q 4 + u) 4 + c of token t holds columns 32 q + 8 c + u and its
// + 4 (mma.h's b0, b1 of lane (t, c)). A token's N / 2 pairs are padded by 4 (32 bytes): the loads
// of 4 tokens by a half warp then hit distinct banks.
template <int N>
__device__ __forceinline__ void layout_c_pairs(float2* s_cp, const __nv_bfloat16* s_cwin, int T, int first, int stride) {
  constexpr int BS = bc_row_stride(N), CPS = c_pair_stride(N);
  for (int i = first; i < T * N / 2; i += stride) {
    const int t = i / (N / 2), r = i % (N / 2), col = (r >> 4) * 32 + (r & 3) * 8 + (r >> 2 & 3);
    s_cp[t * CPS + r] = make_float2(__bfloat162float(s_cwin[t * BS + col]), __bfloat162float(s_cwin[t * BS + col + 4]));
  }
}

// Lane (fg, fc)'s dots C_fg . B_e with entries e = 8 et + 2 fc, + 1 (d[0], d[1]) on the tensor cores
// (m16n8k16 bf16, fp32 sums; A: the window's C rows, tokens in m, rows >= T zero; B: 8 entries,
// buffered B_e (row e) for e < n_eff, then the window's B (row C + e - n_eff)). Columns map to k as
// 8 consecutive bf16 of lane c (mma.h: k pairs 2c and 2c + 8 of two steps).
template <int N>
__device__ __forceinline__ void entry_dots(const __nv_bfloat16* s_cwin, const __nv_bfloat16* s_b, int C, int n_eff,
                                           int ne, int T, int et, int fg, int fc, float (&d)[4]) {
  constexpr int BS = bc_row_stride(N);
  const int eb = et * 8 + fg;  // the entry whose B this lane holds
  const bool a_ok = fg < T, b_ok = eb < ne;
  const __nv_bfloat16* arow = s_cwin + (a_ok ? fg : 0) * BS + 8 * fc;
  const __nv_bfloat16* brow = s_b + (eb < n_eff ? eb : b_ok ? C + eb - n_eff : 0) * BS + 8 * fc;
#pragma unroll
  for (int i = 0; i < 4; ++i) d[i] = 0.f;
#pragma unroll
  for (int k = 0; k < N / 32; ++k) {
    const uint4 a = a_ok ? *reinterpret_cast<const uint4*>(arow + 32 * k) : make_uint4(0u, 0u, 0u, 0u);
    const uint4 b = b_ok ? *reinterpret_cast<const uint4*>(brow + 32 * k) : make_uint4(0u, 0u, 0u, 0u);
    mma_bf16(d, a.x, 0u, a.y, 0u, b.x, b.y);
    mma_bf16(d, a.z, 0u, a.w, 0u, b.z, b.w);
  }
}

// sum_k S0[r][k] C_t[k] on the tensor cores (m16n8k8 TF32, mma.h's mma_tf32_split_rows): the
// warp's 8 rows in m, each S0 value as hi (rows 0-7) + lo (rows 8-15), so one product per 8 columns
// keeps fp32 accuracy; tokens in n (B = C_t, exact in TF32; columns n >= T are dropped by the
// caller). Lane (fg, fc) gets the sums of tile row fragment_row(fg) for tokens 2 fc and 2 fc + 1.
// Column 32 q + 8 c + u is k = c of step (q, u) and 32 q + 8 c + 4 + u is k = c + 4. cp: the C pairs
// (layout_c_pairs) of the token whose B the lane supplies, + fc. A 16-bit S0 is widened exactly to
// fp32 first (its lo parts are then zero).
template <class S>
__device__ __forceinline__ void load_tile8(const S* src, float (&sl)[4], float (&sh)[4]) {  // 8 columns as 4 + 4
  if constexpr (std::is_same_v<S, float>) {
    const float4 s_lo = *reinterpret_cast<const float4*>(src);
    const float4 s_hi = *reinterpret_cast<const float4*>(src + 4);
    sl[0] = s_lo.x, sl[1] = s_lo.y, sl[2] = s_lo.z, sl[3] = s_lo.w;
    sh[0] = s_hi.x, sh[1] = s_hi.y, sh[2] = s_hi.z, sh[3] = s_hi.w;
  } else {
    const uint4 v = *reinterpret_cast<const uint4*>(src);
    const float2 a = pair_to_float2<S>(v.x), b = pair_to_float2<S>(v.y);
    const float2 c = pair_to_float2<S>(v.z), e = pair_to_float2<S>(v.w);
    sl[0] = a.x, sl[1] = a.y, sl[2] = b.x, sl[3] = b.y;
    sh[0] = c.x, sh[1] = c.y, sh[2] = e.x, sh[3] = e.y;
  }
}
template <int N, class S>
__device__ __forceinline__ float2 s0_product(const S* tile, const float2* cp, int fg, int fc) {
  float d[4] = {0.f, 0.f, 0.f, 0.f}, d_odd[4] = {0.f, 0.f, 0.f, 0.f};  // two chains of products
  const S* srow = tile_row<N>(tile, fragment_row(fg)) + 8 * fc;
#pragma unroll
  for (int q = 0; q < N / 32; ++q) {
    float sl[4], sh[4];
    load_tile8(srow + 32 * q, sl, sh);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const float2 b = cp[(q * 4 + u) * 4];
      mma_tf32_split_rows(u % 2 ? d_odd : d, sl[u], sh[u], b.x, b.y);
    }
  }
  return make_float2((d[0] + d[2]) + (d_odd[0] + d_odd[2]), (d[1] + d[3]) + (d_odd[1] + d_odd[3]));
}

// The fold of a warp's 8 rows, S[r] <- e^{G_{n-1}} S0[r] + sum_j x_j[r] (w_j B_j), RP rows per pass
// (lane l holds columns [l N/32, (l+1) N/32); B_j converted and scaled by w_j once per pass and
// entry), written to the pool and back to the tile. xw: the entries' x, a uint4 of the 8 rows each.
// RP = 8 (one pass, 32 accumulators) for the head-group kernel: 1-1.4% faster from batch 128 than
// two passes of 4; the one-head kernel (64 registers) keeps two passes of 4, 1% faster there
// (kernels/mamba2/notes/mamba2_verify.md run 10). On the tensor cores the fold measured slower twice: m =
// columns, n = rows, 13% (127 registers, scattered stores); m = the rows split hi + lo, B_j by
// ldmatrix .trans, 6% although 12% fewer instructions (bank conflicts on the tile and the B rows).
// A 16-bit S: the sums in fp32, each element rounded to nearest once, the same value to both.
template <int N, int RP, class S>
__device__ __forceinline__ void fold_warp_rows(S* tile_rows, S* state_rows, const __nv_bfloat16* s_b, const uint4* xw,
                                               const float* fw, float eGn, bool has_state, int n, int lane) {
  constexpr int NL = N / 32, BS = bc_row_stride(N);
  static_assert(RP == 4 || RP == 8, "a pass folds 4 or 8 of the warp's rows");
#pragma unroll
  for (int r0 = 0; r0 < kWarpRows; r0 += RP) {
    float sv[RP][NL];
#pragma unroll
    for (int i = 0; i < RP; ++i) {
      float s0[NL];
      load_row<N>(tile_row<N>(tile_rows, r0 + i) + lane * NL, s0);  // copied even without a state: ignored then
#pragma unroll
      for (int e = 0; e < NL; ++e) sv[i][e] = has_state ? eGn * s0[e] : 0.f;
    }
#pragma unroll 2
    for (int j = 0; j < n; ++j) {
      float Bj[NL], xj[RP];
      bf16_slice<N>(load_bf16_raw<N>(s_b + j * BS, lane), Bj);
      const float wj = fw[j];
#pragma unroll
      for (int e = 0; e < NL; ++e) Bj[e] *= wj;
      warp_x(reinterpret_cast<const WarpXRaw<RP>*>(xw + j)[r0 / RP], xj);
#pragma unroll
      for (int i = 0; i < RP; ++i)
#pragma unroll
        for (int e = 0; e < NL; ++e) sv[i][e] = fmaf(xj[i], Bj[e], sv[i][e]);
    }
#pragma unroll
    for (int i = 0; i < RP; ++i) {
      store_row<N>(state_rows + size_t(r0 + i) * N + lane * NL, sv[i]);
      store_row<N>(tile_row<N>(tile_rows, r0 + i) + lane * NL, sv[i]);
    }
  }
  __syncwarp();  // the outputs read the rows across lanes
}

// The fold's weight of buffered entry j of n, e^{G_{n-1} - G_j} dt_j (g, dt: one head's G_j, dt_j).
__device__ __forceinline__ float fold_weight(const float* g, const float* dt, int n, int j) {
  return expf(g[n - 1] - g[j]) * dt[j];
}

// W[t][e] = e^{G_t - G_e} dt_e (C_t . B_e) for entry e of node t (dot = C_t . B_e): buffered
// entries (e < n_eff) always, window node q = e - n_eff when on t's root path, + D for t itself.
__device__ __forceinline__ float entry_coefficient(float dot, int e, int n_eff, int t, unsigned path_t, float G_t,
                                                   const float* g_buf, const float* dt_buf, const float* g_win,
                                                   const float* dt_win, float D) {
  if (e < n_eff) return expf(G_t - g_buf[e]) * dt_buf[e] * dot;
  const int q = e - n_eff;
  return path_t >> q & 1u ? fmaf(expf(G_t - g_win[q]) * dt_win[q], dot, q == t ? D : 0.f) : 0.f;
}

// ---- The one-head kernel: a block verifies rows_per_block rows of one head.


template <int N, class S>
__global__ void __launch_bounds__(kMaxRowsPerBlock * 4, kOneHeadBlocksPerSM)
    mamba2_verify_kvbuffer_kernel(const Mamba2VerifyKVBufferParams p, const VerifySmem L) {
  constexpr int R = kWarpRows, CPS = c_pair_stride(N);
  const Mamba2VerifyIO& io = p.io;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5, rows = warps * R;
  const int fg = lane >> 2, fc = lane & 3;  // the lane's fragment row and column group (mma.h)
  const int tile = blockIdx.x, h = blockIdx.y, row = blockIdx.z;  // p.row_order ignored (mamba2_verify.h)
  const int pb = tile * rows, p0 = pb + warp * R;  // the block's and the warp's first row
  // A programmatic dependent of the kernel before it (the previous layer's verify or the previous
  // step's commit): launched and resident while that kernel finishes, it waits for its completion
  // before reading anything. The kernel after it (the next layer's verify, or the commit) is in turn
  // a programmatic dependent of this one: it starts while this grid's last blocks run and waits
  // (griddepcontrol.wait) for its completion.
  wait_prior_grid();
  allow_dependent_grids();
  const int T = io.tokens, C = p.capacity, NH = io.NH, P = io.P, G = io.G;
  const auto [g, group_leader] = head_group(h, NH, G);  // B's window rows: written by the group's first head
  extern __shared__ __align__(128) unsigned char smem[];
  const int WS = L.ws;
  S* s_tile = reinterpret_cast<S*>(smem + L.tile);
  __nv_bfloat16* s_b = reinterpret_cast<__nv_bfloat16*>(smem + L.b_rows);  // B_j at j BS, window B_q at (C + q) BS
  __nv_bfloat16* s_cwin = reinterpret_cast<__nv_bfloat16*>(smem + L.c_win);
  float2* s_cp = reinterpret_cast<float2*>(smem + L.c_pairs);
  uint4* s_xbuf = reinterpret_cast<uint4*>(smem + L.x_buf);
  __nv_bfloat16* s_xwin = reinterpret_cast<__nv_bfloat16*>(smem + L.x_win);
  __nv_bfloat16* s_zwin = reinterpret_cast<__nv_bfloat16*>(smem + L.z_win);
  float* s_gbuf = reinterpret_cast<float*>(smem + L.g_buf);
  float* s_dtbuf = reinterpret_cast<float*>(smem + L.dt_buf);
  float* s_fw = reinterpret_cast<float*>(smem + L.fold_w);
  float* s_w = reinterpret_cast<float*>(smem + L.w);
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem + L.bars) + warp;
  __shared__ float s_gwin[kTMax], s_dtwin[kTMax], s_egwin[kTMax];
  __shared__ unsigned s_path[kTMax];  // node t's root path (ancestors and t) as a bitmask
  __shared__ int s_fold, s_neff;

  // Phase 1, issue: the warps' mbarriers (the copy issuers of warp 0; the block barrier below
  // publishes them, no memory round trip), then the window (independent of the pools), the slot, and at once each
  // warp's 8 S0 rows by one bulk copy, issued with fill and has_state (one round trip after the
  // slot, not two: a row in direct mode reads its slot's unused rows and ignores them); then the n
  // buffer entries by cp.async. Every loop here and below divides only by constants.
  if (copy_issuer(threadIdx.x)) tile_init(warps, bar - warp);
  stage_window_bc<N>(s_b, s_cwin, io, row, g, C, T, G);
  // Each warp its own 8 rows of the window's x, and of the gate: read where the outputs are
  // written, each token's z would be one more dependent round trip (the stores to out may alias z).
  if (lane < T) {
    const int t = lane;
    const size_t o = ((size_t(row) * T + t) * NH + h) * P + p0;
    cp_async16(s_xwin + t * rows + warp * R, io.x + o);
    if (io.z) cp_async16(s_zwin + t * rows + warp * R, io.z + o);
  }
  const float A = io.A[h], D = io.D[h];
  // Warp 0, lane t < T: node t's step size and parent, also independent of the pools, loaded into
  // registers and used only after the S0 copies are issued (the block barrier does not wait for
  // loads whose values are not used yet).
  RawTokenDt dt_raw{};
  int par_raw = 0;
  if (warp == 0 && lane < T) {
    dt_raw = load_token_dt(io, row, lane, h);
    par_raw = load_node_parent(io.parents ? io.parents + size_t(row) * T : nullptr, lane);
  }
  const int slot = io.slot[row];
  if (slot < 0) {
    cp_async_wait_all();
    zero_padding_outputs(io, row, h, pb, rows);
    return;
  }
  __syncthreads();  // the barriers' initialisation before any copy
  S* state_rows = static_cast<S*>(p.state) + ((size_t(slot) * NH + h) * P + p0) * N;
  S* tile_rows = s_tile + warp * warp_tile_elems<N, S>();
  if (copy_issuer(lane)) issue_s0_rows<N>(tile_rows, state_rows, bar);
  const float dt_lane = warp == 0 && lane < T ? token_step(io, dt_raw) : 0.f;
  const int par_lane = warp == 0 && lane < T ? parent_of(par_raw, lane) : -1;
  const int n = p.fill[slot];
  const bool has_state = p.has_state[slot] != 0;
  const __nv_bfloat16* bk = p.buf_k + (size_t(slot) * C * G + g) * N;          // B_j at + j G N
  const __nv_bfloat16* bx = p.buf_val + (size_t(slot) * C * NH + h) * P + pb;  // x_j at + j NH P
  stage_buffer_b<N>(s_b, bk, n, G);
  for (int j = lane; j < n; j += 32) cp_async16(s_xbuf + warp * C + j, bx + size_t(j) * NH * P + warp * R);
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    cp_async4(s_gbuf + j, p.buf_gcum + (size_t(slot) * C + j) * NH + h);
    cp_async4(s_dtbuf + j, p.buf_beta + (size_t(slot) * C + j) * NH + h);
  }
  cp_async_wait_all();
  __syncthreads();

  // Phase 2, warp 0, lane t = node t: root path, depth, fold decision, dt_t, G_t, fold weights. The
  // other warps meanwhile (a one-warp block after it) lay out the window's C_t as phase 5's B pairs.
  if (warp == 0) {
    const int t = lane;
    int depth;
    const unsigned path = node_path(par_lane, T, lane, depth);
    const bool fold = verify_folds_first(C, depth, n);
    const int n_eff = fold ? 0 : n;
    float gsum = 0.f;
#pragma unroll
    for (int q = 0; q < kTMax; ++q) {
      const float a = __shfl_sync(0xffffffffu, dt_lane * A, q);
      if (path >> q & 1u) gsum += a;
    }
    const float G_t = (n_eff > 0 ? s_gbuf[n_eff - 1] : 0.f) + gsum;
    if (t < T) s_gwin[t] = G_t, s_dtwin[t] = dt_lane, s_egwin[t] = expf(G_t), s_path[t] = path;
    if (fold)
      for (int j = lane; j < n; j += 32) s_fw[j] = fold_weight(s_gbuf, s_dtbuf, n, j);
    if (lane == 0) s_fold = fold, s_neff = n_eff;
  }
  if (warp > 0 || warps == 1)
    layout_c_pairs<N>(s_cp, s_cwin, T, int(threadIdx.x) - (warps > 1 ? 32 : 0), warps > 1 ? int(blockDim.x) - 32 : 32);
  __syncthreads();
  const bool fold = s_fold;
  const int n_eff = s_neff, ne = n_eff + T;  // entries: n_eff buffered, then the T window nodes
  const uint4* xw = s_xbuf + warp * C;        // x_j of the warp's 8 rows

  // Phase 3, fold when due, written back to the pool once and to the tile for the outputs.
  if (fold) {
    tile_wait(bar);
    fold_warp_rows<N, kWarpRows / 2>(tile_rows, state_rows, s_b, xw, s_fw, expf(s_gbuf[n - 1]), has_state, n, lane);
  }

  // Phase 4, the coefficients W[t][e] from the dots (entry_dots), 8 entries per warp.
  for (int et = warp; et * 8 < ne; et += warps) {
    float d[4];
    entry_dots<N>(s_cwin, s_b, C, n_eff, ne, T, et, fg, fc, d);
    if (fg < T) {
      const int t = fg;
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int e = et * 8 + 2 * fc + i;
        if (e < ne)
          s_w[t * WS + e] = entry_coefficient(d[i], e, n_eff, t, s_path[t], s_gwin[t], s_gbuf, s_dtbuf, s_gwin, s_dtwin, D);
      }
    }
  }
  __syncthreads();

  // Phase 5, outputs: e^{G_t} s0_product, then + sum_e x_e[r] W[t][e] (m16n8k8 TF32, A = x exact,
  // rows >= 8 zero; B = W split; D x_t is the coefficient of the token itself). Lane (fg, fc)
  // supplies token fg's C and W (token T - 1's when fg >= T: those columns are dropped, and the
  // reads are broadcasts) and writes row r = fragment_row(fg)'s outputs of tokens 2 fc and 2 fc + 1.
  tile_wait(bar);
  {
    const int tok = min(fg, T - 1), t0 = 2 * fc, r = fragment_row(fg);
    float2 s0c = make_float2(0.f, 0.f);
    if (has_state || fold) s0c = s0_product<N>(tile_rows, s_cp + tok * CPS + fc, fg, fc);  // else S0 = 0
    float d[4] = {t0 < T ? s0c.x * s_egwin[t0] : 0.f, t0 + 1 < T ? s0c.y * s_egwin[t0 + 1] : 0.f, 0.f, 0.f};
    const __nv_bfloat16* xb = reinterpret_cast<const __nv_bfloat16*>(xw) + r;  // x_e of row r at xb[8 e]
    const float* wrow = s_w + tok * WS;
    auto entry_x = [&](int e) {
      return e < n_eff ? __bfloat162float(xb[8 * e])
                       : e < ne ? __bfloat162float(s_xwin[(e - n_eff) * rows + warp * R + r]) : 0.f;
    };
    for (int k = 0; k < ne; k += 8) {
      const int e0 = k + fc, e1 = e0 + 4;
      mma_tf32x2_b(d, __float_as_uint(entry_x(e0)), 0u, __float_as_uint(entry_x(e1)), 0u, e0 < ne ? wrow[e0] : 0.f,
                   e1 < ne ? wrow[e1] : 0.f);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int t = t0 + i;
      if (t < T) {
        float y = d[i];
        if (io.z) y *= silu(__bfloat162float(s_zwin[t * rows + warp * R + r]));
        io.out[((size_t(row) * T + t) * NH + h) * P + p0 + r] = __float2bfloat16_rn(y);
      }
    }
  }

  // Phase 6, the window's entries in the scratch (VerifyWindow::Scratch: in the buffer, this
  // kernel measured 1.5% slower) and the row's base for the commit.
  const WindowEntries we = window_entries(p, false, row, slot, n);
  if (lane < T)
    *reinterpret_cast<uint4*>(we.x + ((we.first + lane) * NH + h) * P + p0) =
        *reinterpret_cast<const uint4*>(s_xwin + lane * rows + warp * R);
  if (tile == 0) {
    if (group_leader) write_window_b<N>(we, s_b, g, C, T, G);
    if (threadIdx.x < T) {
      we.g[(we.first + threadIdx.x) * NH + h] = s_gwin[threadIdx.x];
      we.dt[(we.first + threadIdx.x) * NH + h] = s_dtwin[threadIdx.x];
    }
    if (h == 0 && threadIdx.x == 0) {
      p.win_base[2 * row] = n_eff;
      p.win_base[2 * row + 1] = has_state || fold ? 1 : 0;
    }
  }
}

// ---- The head-group kernel: a block verifies rows_per_block rows of heads_per_block heads of one
// group; the heads share the staging, the tree and the dots, and each warp streams its rows of
// the heads' S0 through its stage ring.

// Dynamic shared memory of the head-group block, byte offsets, for d_state N, capacity C, `rows` rows
// per block, T tokens and `heads` heads per block. First the S0 stages, [ring][warps], each a warp's
// 8 rows [8, N] of the state type (one bulk copy per half); then 16-byte aligned pieces; then the mbarriers, one per
// stage. The entries' x are kept per head and warp as a uint4 of the warp's 8 rows: the n buffered
// ones at 0.., the window's at C.. B and C rows and the C pairs as in VerifySmem. The coefficients
// W[t][e] are kept per head as each lane's B operand pair of each 8-entry step, written after the
// dots, in a region that holds the window's C rows until then (shared memory bounds the resident
// blocks). The gate z is not staged: each lane loads its pair one head ahead.
struct GroupSmem {
  int ws;       // dot row stride (floats)
  int ksteps;   // 8-entry steps, at most
  int ring;     // stages per warp in use
  int stages;   // [ring, warps] S0 rows (warp tiles)
  int x_all;    // [heads, warps, C + T] uint4
  int b_rows;   // [C + T, BS] bf16
  int c_pairs;  // [T, cps] float2
  int dots;     // [T, WS] C_t . B_e
  int w_frags;  // [heads, ksteps, 32] float2
  int c_win;    // [T, BS] bf16, until the dots (aliases w_frags)
  int g_buf;    // [heads, C] G_j
  int dt_buf;   // [heads, C] dt_j
  int fold_w;   // [heads, C] fold weights
  int bars;     // [ring, warps] mbarriers
  int bytes;
  // Resolved on the host and passed with the launch, as VerifySmem (48 of 3136 SASS instructions).
  GroupSmem(int n_dim, int c, int rows, int t, int heads, int state_bytes) {
    const int bs = bc_row_stride(n_dim), cps = c_pair_stride(n_dim), warps = rows / kWarpRows;
    ws = entry_row_stride(c);
    ksteps = (c + t + 7) / 8;
    ring = heads < kStages ? heads : kStages;
    stages = 0;
    x_all = stages + ring * warps * warp_tile_bytes(n_dim, state_bytes);
    b_rows = x_all + heads * warps * (c + t) * 16;
    c_pairs = b_rows + (c + t) * bs * 2;
    dots = c_pairs + t * cps * 8;
    w_frags = dots + t * ws * 4;
    c_win = w_frags;
    const int w_bytes = heads * ksteps * 32 * 8, cw_bytes = t * bs * 2;
    g_buf = w_frags + (w_bytes > cw_bytes ? w_bytes : cw_bytes);
    dt_buf = g_buf + up16(heads * c * 4);
    fold_w = dt_buf + up16(heads * c * 4);
    bars = fold_w + up16(heads * c * 4);
    bytes = bars + ring * warps * 8;
  }
};

template <int N, class S>
__global__ void __launch_bounds__(kMaxRowsPerBlock * 4, kGroupBlocksPerSM)
    mamba2_verify_kvbuffer_group_kernel(const Mamba2VerifyKVBufferParams p, const int heads_per_block, const GroupSmem L,
                                        const int first_wave_blocks) {
  constexpr int R = kWarpRows, CPS = c_pair_stride(N);
  const Mamba2VerifyIO& io = p.io;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5, rows = warps * R;
  const int fg = lane >> 2, fc = lane & 3;  // the lane's fragment row and column group (mma.h)
  // A programmatic dependent of the kernel before it, as the one-head kernel; when that kernel
  // writes none of the pools (p.pools_ready_at_launch), the pools are read before the wait below.
  // The next kernel may launch once every block of this grid has passed this point (it waits for
  // this grid's completion before reading anything this grid writes): its first blocks then take
  // the SM slots this grid's last blocks free. Without ready pools, only after the wait: the next
  // kernel, another layer's verify that reads its pools before its own wait, must not launch while
  // a kernel that writes them (the previous step's commit) may still run.
  if (!p.pools_ready_at_launch) wait_prior_grid();
  allow_dependent_grids();
  const int tile = blockIdx.x, HB = heads_per_block, h0 = blockIdx.y * HB;
  const int row = p.row_order ? p.row_order[blockIdx.z] : int(blockIdx.z);
  const int pb = tile * rows, p0 = pb + warp * R;  // the block's and the warp's first row
  const int T = io.tokens, C = p.capacity, NH = io.NH, P = io.P, G = io.G;
  const int heads_per_group = NH / G, g = h0 / heads_per_group;  // the block's heads share group g
  extern __shared__ __align__(128) unsigned char smem[];
  const int WS = L.ws, KS = L.ksteps, CT = C + T;
  S* s_stages = reinterpret_cast<S*>(smem + L.stages);
  uint4* s_x = reinterpret_cast<uint4*>(smem + L.x_all);
  __nv_bfloat16* s_b = reinterpret_cast<__nv_bfloat16*>(smem + L.b_rows);  // B_j at j BS, window B_q at (C + q) BS
  __nv_bfloat16* s_cwin = reinterpret_cast<__nv_bfloat16*>(smem + L.c_win);
  float2* s_cp = reinterpret_cast<float2*>(smem + L.c_pairs);
  float* s_dot = reinterpret_cast<float*>(smem + L.dots);
  float2* s_wf = reinterpret_cast<float2*>(smem + L.w_frags);
  float* s_gbuf = reinterpret_cast<float*>(smem + L.g_buf);
  float* s_dtbuf = reinterpret_cast<float*>(smem + L.dt_buf);
  float* s_fw = reinterpret_cast<float*>(smem + L.fold_w);
  uint64_t* s_bars = reinterpret_cast<uint64_t*>(smem + L.bars);
  __shared__ float s_gwin[kMaxHeadsPerBlock][kTMax], s_dtwin[kMaxHeadsPerBlock][kTMax], s_egwin[kMaxHeadsPerBlock][kTMax];
  __shared__ float s_A[kMaxHeadsPerBlock], s_D[kMaxHeadsPerBlock];
  __shared__ unsigned s_path[kTMax];  // node t's root path (ancestors and t) as a bitmask
  __shared__ int s_fold, s_fold_from;  // the row folds; its heads' folds from s_fold_from on (head 0's may run early)
  __shared__ int s_in_buffer;          // the window's entries go into the buffer (window_entries)

  // Phase 1, issue: the stages' mbarriers (the copy issuers of warp 0, published by the block
  // barrier below), the slot, fill and has_state; at once each warp's S0 rows of the first heads by bulk copies, and by
  // cp.async the n buffered entries' B (the group's), x (the heads'), G_j and dt_j (the heads'): the
  // pools, read before the wait for the kernel before when it writes none of them. Then what the
  // kernel before may produce: by cp.async the window's B and C (the group's), x (the heads'); the
  // gates, warp 0's parents, the heads' A, D and window dt.
  if (copy_issuer(threadIdx.x)) tile_init(L.ring * warps, s_bars);
  const int slot = io.slot[row];
  int n = 0;
  bool has_state = false;
  if (slot >= 0) n = p.fill[slot], has_state = p.has_state[slot] != 0;
  __syncthreads();  // the barriers' initialisation before any copy
  auto stage = [&](int hh) { return s_stages + ((hh % kStages) * warps + warp) * warp_tile_elems<N, S>(); };
  auto stage_bar = [&](int hh) { return s_bars + (hh % kStages) * warps + warp; };
  auto s0_rows = [&](int hh) { return static_cast<S*>(p.state) + ((size_t(slot) * NH + h0 + hh) * P + p0) * N; };
  // The first wave's blocks (the lowest indices, dispatched first) of a layer whose pools are ready
  // at launch start while the kernel before runs its last blocks, and wait for it.
  const bool first_wave = p.pools_ready_at_launch &&
                          int(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z)) < first_wave_blocks;
  if (slot >= 0) {
    if (copy_issuer(lane))
      for (int hh = 0; hh < HB && hh < kStages; ++hh) issue_s0_rows<N>(stage(hh), s0_rows(hh), stage_bar(hh));
    const __nv_bfloat16* bk = p.buf_k + (size_t(slot) * C * G + g) * N;  // B_j at + j G N
    stage_buffer_b<N>(s_b, bk, n, G);
    for (int i = threadIdx.x; i < n * HB * warps; i += blockDim.x) {
      const int j = i / (HB * warps), hh = i / warps % HB, w = i % warps;
      cp_async16(s_x + (hh * warps + w) * CT + j, p.buf_val + ((size_t(slot) * C + j) * NH + h0 + hh) * P + pb + w * R);
    }
    for (int i = threadIdx.x; i < n * HB; i += blockDim.x) {
      const int j = i / HB, hh = i % HB;
      const size_t src = (size_t(slot) * C + j) * NH + h0 + hh;
      cp_async4(s_gbuf + hh * C + j, p.buf_gcum + src);
      cp_async4(s_dtbuf + hh * C + j, p.buf_beta + src);
    }
  }
  // A first-wave block of chains whose row folds: its first head's fold needs only the pools (a
  // chain's depth is T), so it runs while the kernel before finishes (the head loop folds the others).
  const bool early_fold = first_wave && slot >= 0 && !io.parents && verify_folds_first(C, T, n);
  if (early_fold) {
    cp_async_wait_all();
    __syncthreads();
    for (int j = threadIdx.x; j < n; j += blockDim.x) s_fw[j] = fold_weight(s_gbuf, s_dtbuf, n, j);
    __syncthreads();
    tile_wait(stage_bar(0), 0);
    fold_warp_rows<N, kWarpRows>(stage(0), s0_rows(0), s_b, s_x + warp * CT, s_fw, expf(s_gbuf[n - 1]), has_state, n, lane);
  }
  if (p.pools_ready_at_launch) wait_prior_grid();
  stage_window_bc<N>(s_b, s_cwin, io, row, g, C, T, G);
  for (int i = threadIdx.x; i < T * HB * warps; i += blockDim.x) {  // warps fastest: 16-byte pieces in order
    const int t = i / (HB * warps), hh = i / warps % HB, w = i % warps;
    cp_async16(s_x + (hh * warps + w) * CT + C + t, io.x + ((size_t(row) * T + t) * NH + h0 + hh) * P + pb + w * R);
  }
  // Lane (fg, fc)'s gates of row fragment_row(fg), tokens 2 fc and 2 fc + 1, of head h0 + hh (0
  // where unused), kept as loaded: combining them at once would wait for the loads.
  const int r = fragment_row(fg);
  struct GatePair {
    __nv_bfloat16 z[2];
  };
  const __nv_bfloat16* z_lane = io.z ? io.z + ((size_t(row) * T + 2 * fc) * NH + h0) * P + p0 + r : nullptr;
  auto load_gate = [&](int hh) {
    GatePair gate{};
#pragma unroll
    for (int i = 0; i < 2; ++i)
      if (z_lane && 2 * fc + i < T) gate.z[i] = z_lane[(i * NH + hh) * P];
    return gate;
  };
  GatePair gate_next = load_gate(0);
  int par_raw = 0;  // used after the window's copies are issued (the one-head kernel's reason)
  if (warp == 0 && lane < T) par_raw = load_node_parent(io.parents ? io.parents + size_t(row) * T : nullptr, lane);
  if (slot < 0) {
    cp_async_wait_all();
    for (int hh = 0; hh < HB; ++hh) zero_padding_outputs(io, row, h0 + hh, pb, rows);
    return;
  }
  const int par_lane = warp == 0 && lane < T ? parent_of(par_raw, lane) : -1;
  for (int i = threadIdx.x; i < HB * T; i += blockDim.x) s_dtwin[i / T][i % T] = verify_token_dt(io, row, i % T, h0 + i / T);
  if (threadIdx.x < HB) s_A[threadIdx.x] = io.A[h0 + threadIdx.x], s_D[threadIdx.x] = io.D[h0 + threadIdx.x];
  cp_async_wait_all();
  __syncthreads();

  // Phase 2, warp 0: the root paths, the depth and the fold decision (the same for every head). The
  // other warps meanwhile (a one-warp block after it) lay out the window's C_t as the outputs' B
  // pairs.
  if (warp == 0) {
    int depth;
    const unsigned path = node_path(par_lane, T, lane, depth);
    if (lane < T) s_path[lane] = path;
    if (lane == 0) {
      s_fold = verify_folds_first(C, depth, n), s_fold_from = early_fold ? 1 : 0;
      s_in_buffer = verify_window_in_buffer(VerifyWindow::Buffer, C, T, depth, n);
    }
  }
  if (warp > 0 || warps == 1)
    layout_c_pairs<N>(s_cp, s_cwin, T, int(threadIdx.x) - (warps > 1 ? 32 : 0), warps > 1 ? int(blockDim.x) - 32 : 32);
  __syncthreads();
  const bool fold = s_fold;
  const int n_eff = fold ? 0 : n, ne = n_eff + T;  // entries: n_eff buffered, then the T window nodes

  // Phase 3, per head: G_t = G_base + sum over t's root path of dt_s A (G_base = G_{n_eff - 1}, 0
  // after a fold), e^{G_t}, the fold weights e^{G_{n-1} - G_j} dt_j. Meanwhile the warps compute the
  // dots C_t . B_e (entry_dots), shared by the heads of the group.
  for (int i = threadIdx.x; i < HB * T; i += blockDim.x) {
    const int hh = i / T, t = i % T;
    const unsigned path = s_path[t];
    const float A = s_A[hh];
    float gsum = 0.f;
    for (int q = 0; q < T; ++q)
      if (path >> q & 1u) gsum += s_dtwin[hh][q] * A;
    const float G_t = (n_eff > 0 ? s_gbuf[hh * C + n_eff - 1] : 0.f) + gsum;
    s_gwin[hh][t] = G_t, s_egwin[hh][t] = expf(G_t);
  }
  if (fold)
    for (int i = threadIdx.x; i < HB * n; i += blockDim.x) {
      const int hh = i / n, j = i % n;
      s_fw[hh * C + j] = fold_weight(s_gbuf + hh * C, s_dtbuf + hh * C, n, j);
    }
  for (int et = warp; et * 8 < ne; et += warps) {
    float d[4];
    entry_dots<N>(s_cwin, s_b, C, n_eff, ne, T, et, fg, fc, d);
    if (fg < T) {
      const int e = et * 8 + 2 * fc;
      if (e < ne) s_dot[fg * WS + e] = d[0];
      if (e + 1 < ne) s_dot[fg * WS + e + 1] = d[1];
    }
  }
  __syncthreads();

  // Phase 4, the coefficients of every head (entry_coefficient) as lane (fg, fc)'s B pair of 8-entry
  // step k: W[fg][8 k + fc], W[fg][8 k + fc + 4] (rows fg >= T: zero, dropped outputs).
  const int ks_used = (ne + 7) / 8;
  for (int i = threadIdx.x; i < HB * ks_used * 32; i += blockDim.x) {
    const int hh = i / (ks_used * 32), k = i / 32 % ks_used, l = i % 32, t = l >> 2;
    float w[2] = {0.f, 0.f};
    if (t < T)
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int e = 8 * k + (l & 3) + 4 * u;
        if (e < ne)
          w[u] = entry_coefficient(s_dot[t * WS + e], e, n_eff, t, s_path[t], s_gwin[hh][t], s_gbuf + hh * C,
                                   s_dtbuf + hh * C, s_gwin[hh], s_dtwin[hh], s_D[hh]);
      }
    s_wf[(hh * KS + k) * 32 + l] = make_float2(w[0], w[1]);
  }
  __syncthreads();

  // Phases 5-6, per head hh, each warp on its own rows (no block barrier): S0 rows from the stage
  // ring, the next head's copy issued as soon as the warp has read the stage.
  const int tok = min(fg, T - 1), t0 = 2 * fc;  // the token whose C and W the lane supplies; its outputs' first
  for (int hh = 0; hh < HB; ++hh) {
    const int h = h0 + hh;
    const GatePair gate = gate_next;
    if (hh + 1 < HB) gate_next = load_gate(hh + 1);
    S* tile_rows = stage(hh);
    const uint4* xw = s_x + (hh * warps + warp) * CT;  // x_j of the warp's rows at j, window x_t at C + t
    tile_wait(stage_bar(hh), (hh / kStages) & 1);

    // Phase 5, fold when due, written to the pool once and to the stage for the outputs.
    if (fold && hh >= s_fold_from)
      fold_warp_rows<N, kWarpRows>(tile_rows, static_cast<S*>(p.state) + ((size_t(slot) * NH + h) * P + p0) * N, s_b, xw, s_fw + hh * C,
                        expf(s_gbuf[hh * C + n - 1]), has_state, n, lane);

    // Phase 6, outputs: e^{G_t} s0_product, then + sum_e x_e[r] W[t][e] (m16n8k8 TF32, A = x exact,
    // rows >= 8 zero; B = W split). Lane (fg, fc) writes row r's outputs of tokens 2 fc, 2 fc + 1.
    float2 s0c = make_float2(0.f, 0.f);
    if (has_state || fold) s0c = s0_product<N>(tile_rows, s_cp + tok * CPS + fc, fg, fc);  // else S0 = 0
    __syncwarp();  // every lane's reads of the stage before its refill
    if (copy_issuer(lane) && hh + kStages < HB) issue_s0_rows<N>(tile_rows, s0_rows(hh + kStages), stage_bar(hh));
    float d[4] = {t0 < T ? s0c.x * s_egwin[hh][t0] : 0.f, t0 + 1 < T ? s0c.y * s_egwin[hh][t0 + 1] : 0.f, 0.f, 0.f};
    const __nv_bfloat16* xb = reinterpret_cast<const __nv_bfloat16*>(xw) + r;  // x_e of row r at xb[8 e]
    const float2* wf = s_wf + hh * KS * 32 + lane;
    // Entry e's x: buffered at e, window node e - n_eff at C + e - n_eff; loaded unconditionally
    // (the index capped at the last window node) and selected: the conditional loads compiled to
    // branches, measured 1% slower at batches 64 and 256 (kernels/mamba2/notes/mamba2_verify.md run 13).
    auto entry_x = [&](int e) {
      const float x = __bfloat162float(xb[8 * min(e < n_eff ? e : C + e - n_eff, CT - 1)]);
      return e < ne ? x : 0.f;
    };
    for (int k = 0; k < ks_used; ++k) {
      const int e0 = 8 * k + fc, e1 = e0 + 4;
      const float2 w = wf[k * 32];
      mma_tf32x2_b(d, __float_as_uint(entry_x(e0)), 0u, __float_as_uint(entry_x(e1)), 0u, w.x, w.y);
    }
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int t = t0 + i;
      if (t < T) {
        const float y = io.z ? d[i] * silu(__bfloat162float(gate.z[i])) : d[i];
        io.out[((size_t(row) * T + t) * NH + h) * P + p0 + r] = __float2bfloat16_rn(y);
      }
    }
  }

  // Phase 7, the window's entries (window_entries): the heads' x of the block's rows in whole lines
  // (consecutive threads, consecutive rows), the window's B (the group's first head), G and dt per
  // head, the row's base.
  const WindowEntries we = window_entries(p, s_in_buffer, row, slot, n);
  for (int i = threadIdx.x; i < T * HB * warps; i += blockDim.x) {
    const int w = i % warps, hh = i / warps % HB, t = i / (warps * HB);
    *reinterpret_cast<uint4*>(we.x + ((we.first + t) * NH + h0 + hh) * P + pb + w * R) = s_x[(hh * warps + w) * CT + C + t];
  }
  if (tile == 0) {
    if (h0 % heads_per_group == 0) write_window_b<N>(we, s_b, g, C, T, G);
    for (int i = threadIdx.x; i < HB * T; i += blockDim.x) {
      const int hh = i / T, t = i % T;
      const size_t o = (we.first + t) * NH + h0 + hh;
      we.g[o] = s_gwin[hh][t];
      we.dt[o] = s_dtwin[hh][t];
    }
    if (h0 == 0 && threadIdx.x == 0) {
      p.win_base[2 * row] = n_eff;
      p.win_base[2 * row + 1] = (has_state || fold ? 1 : 0) | (s_in_buffer ? kMamba2WindowInBuffer : 0);
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

// Commit, gridDim.y blocks per request row and layer (grid z: the layer table's index): copies
// the m accepted nodes' entries (B per group, x, G and dt per head) from the scratch to buffer
// positions n0 .. n0+m-1 in 16-byte pieces, and sets fill and has_state; a row whose verify wrote
// its window into the buffer (a chain, n0 + T < C) only sets them. It reads only what the verify
// wrote. A buffer that becomes full (n0 + m == C, only when T == C) is folded by
// mamba2_verify_kvbuffer_commit_fold_kernel instead.
constexpr int kCommitThreads = 256;
constexpr int kMaxCommitSlices = 8;  // blocks per row and layer at most (commit_slices, kernels/common/common.cuh)
__global__ void __launch_bounds__(kCommitThreads)
    mamba2_verify_kvbuffer_commit_kernel(const __grid_constant__ LayerTable<Mamba2VerifyKVBufferParams> layers) {
  const Mamba2VerifyKVBufferParams& p = layers.layer[blockIdx.z];
  const Mamba2VerifyIO& io = p.io;
  const int row = blockIdx.x, T = io.tokens, C = p.capacity;
  // The inputs the verify does not write in one round trip before waiting for the verify's grid (a
  // programmatic dependent: launched while the verify's last blocks run), then its scratch: the
  // accepted nodes of all T positions (used below m; a padding row's are read and dropped).
  const int slot = io.slot[row];
  const int m = accepted_len(p, row);
  const int node = threadIdx.x < T ? accepted_node(p, row, threadIdx.x) : 0;
  wait_prior_grid();
  // The next kernel (the next step's first) may launch now, the verify being complete: earlier, its
  // waiting blocks would hold resources the verify's last blocks need.
  allow_dependent_grids();
  if (slot < 0) return;
  const int n0 = p.win_base[2 * row], flags = p.win_base[2 * row + 1];
  const bool has_state = flags & 1;
  if (flags & kMamba2WindowInBuffer) {  // the accepted nodes 0..m-1 of a chain are in place
    if (blockIdx.y == 0 && threadIdx.x == 0) p.fill[slot] = n0 + m, p.has_state[slot] = has_state ? 1 : 0;
    return;
  }
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
  const int stride = int(gridDim.y) * kCommitThreads;
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
// m accepted nodes (C in all); rows whose buffer is not full exit at once. A 16-bit S: read and
// widened to fp32, each element rounded to nearest once at the store.
template <int N, class S>
__global__ void __launch_bounds__(32) mamba2_verify_kvbuffer_commit_fold_kernel(const Mamba2VerifyKVBufferParams p) {
  constexpr int NL = N / 32, R = kWarpRows;
  const Mamba2VerifyIO& io = p.io;
  const int lane = threadIdx.x, h = blockIdx.y, row = blockIdx.z, p0 = blockIdx.x * R;
  const int T = io.tokens, C = p.capacity, NH = io.NH, P = io.P, G = io.G, g = h / (NH / G);
  const int slot = io.slot[row];
  const int m = accepted_len(p, row);
  wait_prior_grid();  // the verify's scratch is complete
  if (slot < 0) return;
  const int n0 = p.win_base[2 * row];
  const bool has_state = p.win_base[2 * row + 1] & 1;
  if (n0 + m < C) return;
  // Entry j: buffered (j < n0) or accepted node accepted_node(j - n0) of the scratch.
  auto entry_scalar = [&](const float* buf, const float* win, int j) {
    return j < n0 ? buf[(size_t(slot) * C + j) * NH + h] : win[(size_t(row) * T + accepted_node(p, row, j - n0)) * NH + h];
  };
  S* state_rows = static_cast<S*>(p.state) + ((size_t(slot) * NH + h) * P + p0) * N + lane * NL;
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
  if (p.heads_per_block != 0 && (p.heads_per_block > kMaxHeadsPerBlock || (p.heads_per_block & (p.heads_per_block - 1)) ||
                              (p.io.NH / p.io.G) % p.heads_per_block != 0))
    fail("unsupported heads_per_block " + std::to_string(p.heads_per_block) + " (1, 2, 4 or 8, dividing NH / G)");
  if (p.state_type != StateType::FP32 && p.state_type != StateType::BF16 && p.state_type != StateType::FP16)
    fail("unsupported state dtype " + std::to_string(int(p.state_type)));
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

// Heads per block: p.heads_per_block when set; else the most heads (8 or 4, dividing NH / G) with
// which kGroupBlocksPerSM head-group blocks fit on an SM and the grid fills kGroupMinWaves waves of
// them; else 1 (the one-head kernel).
template <class Kernel>
int verify_heads_per_block(const Mamba2VerifyKVBufferParams& p, int rows, Kernel group_kernel) {
  if (p.heads_per_block) return p.heads_per_block;
  const long heads_total = long(p.io.batch) * p.io.NH * (p.io.P / rows);
  const double wave_blocks = double(kGroupBlocksPerSM) * multiprocessor_count();
  const int threads = int(decode_block(rows).x);
  auto fits = [&](int hb) {
    const GroupSmem layout(p.io.N, p.capacity, rows, p.io.tokens, hb, state_type_bytes(p.state_type));
    return resident_blocks(group_kernel, threads, size_t(layout.bytes)) >=
           kGroupBlocksPerSM;
  };
  for (int heads = kMaxHeadsPerBlock; heads >= kGroupMinHeadsPerBlock; heads /= 2)
    if ((p.io.NH / p.io.G) % heads == 0 && fits(heads) && double(heads_total / heads) >= kGroupMinWaves * wave_blocks)
      return heads;
  return 1;
}

// ---- The launch order (mamba2_verify_kvbuffer_order): one block; thread i classifies a run of
// consecutive rows by the verify's fold rule, a block scan places them, the folding rows first.
constexpr int kOrderThreads = 1024;

__device__ bool row_folds(const Mamba2VerifyKVBufferParams& p, int row) {
  const int slot = p.io.slot[row], T = p.io.tokens;
  if (slot < 0) return false;  // padding: the shortest block
  const int32_t* parents = p.io.parents ? p.io.parents + size_t(row) * T : nullptr;
  int node_depth[kTMax], depth = 0;
  for (int t = 0; t < T; ++t) {
    const int up = node_parent(parents, t);
    node_depth[t] = up < 0 ? 1 : node_depth[up] + 1;
    depth = max(depth, node_depth[t]);
  }
  return verify_folds_first(p.capacity, depth, p.fill[slot]);
}

__global__ void __launch_bounds__(kOrderThreads)
    mamba2_verify_kvbuffer_order_kernel(const Mamba2VerifyKVBufferParams p, int32_t* row_order) {
  using Scan = cub::BlockScan<int, kOrderThreads>;
  __shared__ typename Scan::TempStorage scan;
  const int B = p.io.batch, per = (B + kOrderThreads - 1) / kOrderThreads;  // <= 64: kMaxBatch
  const int first = min(B, int(threadIdx.x) * per), last = min(B, first + per);
  uint64_t folds = 0;  // bit i: row first + i folds
  for (int r = first; r < last; ++r)
    if (row_folds(p, r)) folds |= 1ull << (r - first);
  int folds_before, folds_total;
  Scan(scan).ExclusiveSum(__popcll(folds), folds_before, folds_total);
  int at_fold = folds_before, at_rest = folds_total + first - folds_before;
  for (int r = first; r < last; ++r) row_order[(folds >> (r - first) & 1) ? at_fold++ : at_rest++] = r;
}

}  // namespace
}  // namespace mamba2_detail

void mamba2_verify_kvbuffer(const Mamba2VerifyKVBufferParams& p, cudaStream_t stream) {
  using namespace mamba2_detail;
  const char* who = "mamba2_verify_kvbuffer";
  validate(p, who);
  if (p.io.batch == 0) return;
  const int rows = verify_rows(p.io.P);
  dispatch_state_type(who, p.state_type, [&](auto tag) {
    using S = typename decltype(tag)::type;
    dispatch_verify_dims(p.io, who, [&](auto n) {
      constexpr int N = decltype(n)::value;
      const int heads = verify_heads_per_block(p, rows, mamba2_verify_kvbuffer_group_kernel<N, S>);
      if (heads == 1) {
        const dim3 grid(unsigned(p.io.P / rows), unsigned(p.io.NH), unsigned(p.io.batch));
        const VerifySmem layout(p.io.N, p.capacity, rows, p.io.tokens, int(sizeof(S)));
        launch_kernel(mamba2_verify_kvbuffer_kernel<N, S>, grid, decode_block(rows), size_t(layout.bytes), stream, true, p,
                      layout);
      } else {
        const dim3 grid(unsigned(p.io.P / rows), unsigned(p.io.NH / heads), unsigned(p.io.batch));
        const GroupSmem layout(p.io.N, p.capacity, rows, p.io.tokens, heads, int(sizeof(S)));
        const int first_wave = resident_blocks(mamba2_verify_kvbuffer_group_kernel<N, S>, int(decode_block(rows).x),
                                               size_t(layout.bytes)) * multiprocessor_count();
        launch_kernel(mamba2_verify_kvbuffer_group_kernel<N, S>, grid, decode_block(rows), size_t(layout.bytes), stream,
                      true, p, heads, layout, first_wave);
      }
    });
  });
}

void mamba2_verify_kvbuffer_order(const Mamba2VerifyKVBufferParams& p, int32_t* row_order, cudaStream_t stream) {
  using namespace mamba2_detail;
  const char* who = "mamba2_verify_kvbuffer_order";
  validate(p, who);
  if (!row_order) throw std::invalid_argument(std::string(who) + ": row_order is null");
  if (p.io.batch == 0) return;
  static_assert((kMaxBatch + kOrderThreads - 1) / kOrderThreads <= 64, "a thread's rows in one 64-bit mask");
  launch_kernel(mamba2_verify_kvbuffer_order_kernel, dim3(1), dim3(kOrderThreads), 0, stream, false, p, row_order);
}

namespace mamba2_detail {
namespace {
bool takes_group_kernel(const Mamba2VerifyKVBufferParams& p, const char* who) {
  validate(p, who);
  bool group = false;
  dispatch_state_type(who, p.state_type, [&](auto tag) {
    using S = typename decltype(tag)::type;
    dispatch_verify_dims(p.io, who, [&](auto n) {
      constexpr int N = decltype(n)::value;
      group = verify_heads_per_block(p, verify_rows(p.io.P), mamba2_verify_kvbuffer_group_kernel<N, S>) > 1;
    });
  });
  return group;
}
}  // namespace
}  // namespace mamba2_detail

bool mamba2_verify_kvbuffer_row_order_pays(const Mamba2VerifyKVBufferParams& p) {
  return mamba2_detail::takes_group_kernel(p, "mamba2_verify_kvbuffer_row_order_pays");
}

VerifyWindow mamba2_verify_kvbuffer_window(const Mamba2VerifyKVBufferParams& p) {
  return mamba2_detail::takes_group_kernel(p, "mamba2_verify_kvbuffer_window") ? VerifyWindow::Buffer
                                                                                : VerifyWindow::Scratch;
}

void mamba2_verify_kvbuffer_commit(const Mamba2VerifyKVBufferParams* layers, int count, cudaStream_t stream) {
  using namespace mamba2_detail;
  const char* who = "mamba2_verify_kvbuffer_commit";
  using Params = Mamba2VerifyKVBufferParams;
  validate_commit_layers(layers, count, who, validate, [](const Params& q, const Params& p) {
    return q.io.batch == p.io.batch && q.io.tokens == p.io.tokens && q.capacity == p.capacity;
  });
  const Params& p = layers[0];
  if (p.io.batch == 0) return;
  // The buffer can become full at the commit only when T == C: the fold reads the scratch and the
  // buffer, which the copy kernel then leaves untouched for such rows.
  if (p.io.tokens == p.capacity)
    for (int l = 0; l < count; ++l) {
      const Params& q = layers[l];
      const dim3 grid(unsigned(q.io.P / kWarpRows), unsigned(q.io.NH), unsigned(q.io.batch));
      dispatch_state_type(who, q.state_type, [&](auto tag) {
        using S = typename decltype(tag)::type;
        dispatch_verify_dims(q.io, who, [&](auto n) {
          constexpr int N = decltype(n)::value;
          launch_kernel(mamba2_verify_kvbuffer_commit_fold_kernel<N, S>, grid, dim3(32), 0, stream, true, q);
        });
      });
    }
  // Programmatic dependent of the last verify (or of the fold kernels just above, which never
  // trigger early, so the copy still starts after the folds have finished).
  const int slices = commit_slices(long(p.io.batch) * count, kCommitThreads, kMaxCommitSlices);
  launch_layers(mamba2_verify_kvbuffer_commit_kernel, layers, count, dim3(unsigned(p.io.batch), unsigned(slices)),
                dim3(kCommitThreads), stream, true);
}

void mamba2_verify_kvbuffer_commit(const Mamba2VerifyKVBufferParams& p, cudaStream_t stream) {
  mamba2_verify_kvbuffer_commit(&p, 1, stream);
}

}  // namespace kvbuf
