// gdn_decode_kvbuffer / gdn_decode_direct: KVBuffer decode of Gated DeltaNet, one token per request.
//
// Math (docs/kvbuffer-math.md sections 2, 3, 4, 7), per value head, in the serving layout (row v of S0):
// the request holds n = fill buffered tokens j = 0..n-1 with cumulative log decays G_j since the
// checkpoint S0; the new token t has G_t = G_{n-1} + g (G_{-1} = 0).
//   a_v = S0[v,:].k_t,  b_v = S0[v,:].q_t                  (one read of the row; 0 in direct mode)
//   c_j = e^{G_t-G_j} (k_j.k_t),  d_j = e^{G_t-G_j} (k_j.q_t)          (per block, over K)
//   u_t[v] = beta (v_v - e^{G_t} a_v - sum_j c_j u_j[v])
//   o_v    = e^{G_t} b_v + sum_j d_j u_j[v] + (k_t.q_t) u_t[v]
// cached-u: u_j[v] read from the buffer.  raw: the buffer holds v_j, beta_j; per row the u_j are
// recomputed by the unit lower-triangular forward substitution
//   u_j[v] = beta_j (v_j[v] - e^{G_j} S0[v,:].k_j) - sum_{i<j} beta_j e^{G_j-G_i} (k_i.k_j) u_i[v].
// Append entry n = (k_t, u_t or v_t, G_t[, beta]). When n + 1 == C, fold in the same kernel (the
// S0 row is already in registers) and empty the buffer:
//   S0[v,:] <- e^{G_t} S0[v,:] + sum_{j<n} e^{G_t-G_j} u_j[v] k_j + u_t[v] k_t
// Direct mode (has_state == 0): no S0 read; the fold creates the state and sets has_state.
// Every exponent is G_t - G_j <= 0: no exp(-G), nothing overflows (section 2).
//
// Layouts (sim/layout.h): S [slots, HV, V, K] state dtype (fp32, bf16 or fp16) K contiguous, in
//   place (arithmetic in fp32; a fold rounds once to nearest when it writes S);
//   buf_k [slots, C, H, K] E; buf_val [slots, C, HV, V] E; buf_gcum, buf_beta [slots, C, HV] fp32;
//   fill, has_state, done_count [slots] int32; token I/O as gdn_decode_recurrent.
// Races: blocks of one request (value heads x V tiles) read fill/has_state at entry; the last of
// them to finish (atomic count in done_count) advances them, so no block sees another's update
// within a launch. With scheduler metadata (row_fill, row_has_state: step inputs per row, as a
// serving engine passes sequence positions to every layer) nothing is advanced in kernel: no
// atomics, and the fill is known one dependent load earlier. Entry n is written by this launch
// and only entries < n are read.
// Work split: block = (row, value head, tile of rows_per_block rows), 128 threads = 16 groups of 8
// lanes, one row per group per 16-row chunk. S0 rows arrive by bulk copies (as in
// gdn_decode_recurrent) started as soon as has_state is known; the buffered keys [n, K], the u tile
// [n, rows] and G_j reach shared memory in the same round trip (cp.async); per-block scalars
// (c_j, d_j, decays) come from shared memory. The token's k and q stay unnormalised in registers;
// their scales multiply the few sums that use them. Dynamic shared memory (single kernel): the S0
// tile at offset 0 (128-byte aligned), the buffer staging, then the per-row arrays (barriers, v,
// outputs, appended entries) at an offset the host computes. C is a runtime value (1..64): only
// buffer sizes and trip counts depend on it. Templates: K = V in {64, 128}, state element type S
// in {float, __nv_bfloat16, __half} (GdnKVBufferParams::state_type, dispatch_state_type; the S0
// tile in shared memory holds S, rows of K * sizeof(S) bytes), entry type E in {bf16, fp32},
// variant {cached-u, raw}, WG (below). The results below are the fp32 state's. 16-bit states: 128-row
// tiles from batch 64 (single_kvbuffer_rows, log v30); with the FMA row loop bf16 at C = 4 (b99c638)
// 28.05 / 48.98 / 90.52 / 175.37 us at batch 64 / 128 / 256 / 512, bound by instruction issue (log v30).
// WG (bf16 state, cached-u, 64- and 128-row tiles, this file built for sm_90a: kernels/CMakeLists.txt):
// the row products S0 [k | q] on the warpgroup tensor cores, one wgmma.m64n8k16 per 64 rows and 16
// elements of K with A = the S0 rows from registers and B = [k | q] from shared memory (wg_write_b);
// the rows' outputs and entries stored from registers; the fold a second pass over the tile
// (log v33). bf16 (b11345b, results/decode16_h200.csv): 27.14 [C 4] / 47.42 [4] / 87.01 [8] / 167.14
// [8] us at batch 64 / 128 / 256 / 512, 1.37x / 1.49x / 1.59x / 1.64x the bf16 recurrent kernel, 0.76-0.91
// of copy; no longer issue-bound (0.64 per scheduler), bound by each block's chain at 6 blocks per SM.
//
// Two launch shapes (GdnKVBufferParams::path), same math and layouts:
//   single: the kernel below, one block per (row, value head, V tile) does everything.
//   split: kernels A and B below (cached-u, scheduler row metadata and `scratch` only: the split
//     kernels have no in-kernel fill advance). Path Auto picks split by measurement (H200, 9a2eb43,
//     log v5b): from batch kSplitMinBatch = 8 (at batch 1 the second launch costs more than it
//     saves), for gdn_decode_direct from C = 4 (direct 256: 60.5 us [C=8] against 120.4 [C=4];
//     at C = 1 every row folds and the single kernel wins), for gdn_decode_kvbuffer only at
//     C = 64 (64: 78.0 against 83.4 us): with states, at the best C (4-8) the single kernel is
//     faster (256: 173.6 against 184.2), because B's blocks, which the whole S0 read passes
//     through, live as long as the single kernel's while A adds ~19 us (ncu) before B can finish.
//     Everything else (raw variant, pool fill counters, no scratch) runs the single kernel.
//   Capacity 1 (Auto, scheduler row metadata): no token outlives its step (fill is 0 before every
//     step and every step folds), so the step is the recurrent update of S0 in place; the dispatch
//     runs gdn_decode_recurrent's kernels on the state pool, with S0 = 0 and no read where
//     row_has_state is 0 (log v20), or, when the scheduler promises every_row_has_state, the plain
//     recurrent kernels without that per-row load (log v29). The buffer pools are not touched.
//   The split kernels:
//     kernel A per (row, key head) stages the n buffered keys, G_j and u_j rows once for the R
//     value heads sharing the key head, computes c_j, d_j (groups of lanes over j in parallel)
//     and r_v = sum_j c_j u_j[v], s_v = sum_j d_j u_j[v] per value head into scratch [B, HV, 2, V]
//     fp32, and finishes direct-mode tokens that do not fold (no state, nothing for kernel B).
//     Kernel B, shaped like gdn_decode_recurrent (same tiles, bulk copies, all chunks in flight),
//     streams S0 rows for rows with a state or a fold: a_v, b_v, then
//       u_t[v] = beta (v_v - e^{G_t} a_v - r_v),  o_v = e^{G_t} b_v + s_v + (k_t.q_t) u_t[v],
//     appends u_t, and writes S0 only when the request folds (fold inside B: the folding blocks,
//     1/C of the requests when fills are staggered, stage the keys and their u tile to shared
//     memory by cp.async, which every B block reserves: C K e + C (rows + 8) e bytes; a third
//     launch would cost one more dependent launch gap, ~2 us per layer, and a grid over every
//     row for work that is 1/C of them). B is launched with programmatic dependent launch: A
//     triggers at entry, B starts its S0 copies while A's last wave runs and waits
//     (griddepcontrol.wait) only before reading scratch.
//
// Current result (d6f2445, results/decode_h200.csv; H200, Qwen3-Next shapes H=16 HV=32 K=V=128,
// 36 layer pools in one CUDA graph, per layer, median, at the best C): 3.48 [C = 1] / 9.14 [4] /
// 24.02 / 41.90 / 78.49 / 149.34 / 305.47 us [C = 8] at batch 1 / 8 / 32 / 64 / 128 / 256 / 512:
// 1.003x / 1.14x / 1.45x / 1.60x / 1.68x / 1.74x / 1.69x the recurrent kernel.
// Performance log v1..v29 (prediction first where one was made): kernels/gdn/notes/gdn_decode_kvbuffer.md
// ("log vN" in the comments below).
#include <stdexcept>
#include <string>

#include "kernels/common/common.cuh"
#include "kernels/gdn/gdn_decode.h"
#include "kernels/gdn/gdn_decode_device.h"

namespace kvbuf {
namespace gdn_detail {

constexpr int kMaxCapacity = 64;
// Auto picks the split path from kSplitMinBatch request rows and, per entry point, from this
// capacity C (measured on the H200, 9a2eb43: log v5b).
constexpr int kSplitMinBatch = 8;
constexpr int kSplitMinCapacityKVBuffer = 64;
constexpr int kSplitMinCapacityDirect = 4;

// ---- Single kernel: one block per (row, value head, V tile) does the whole step, in phases:
//   1 prologue: row metadata and slot, the S0 pointer (padding rows exit here);
//   2 issue: keys, u tile, G_j by cp.async, then the S0 tile by bulk copies or zeros
//     (single_issue_tile); with ready pools all before the wait for the kernel before
//     (gdn_decode.h, pools_ready_at_launch), then the token loads and v by cp.async;
//   3 wait: k, q finished while the copies fly, one wait, G_t;
//   4 key scalars: c_j, d_j, e^{G_t - G_j} (raw: L) over the buffered keys;
//   5 row loop: per row u_t, o, then the fold of the row or its appended entry;
//   6 store (single_store): outputs and the appended entry by 16-byte vectors, k_t, G_t;
//   7 fill advance (advance_fill_last_block, common.cuh), only without scheduler row metadata.
// Phases 6, 7 and the tile part of 2 are functions; the rest stays in the kernel body, because
// moving any of it into a function changed ptxas's output (registers and up to 2% of the
// instructions of some instantiations; kernels/gdn/notes/gdn_decode_kvbuffer.md, "Readable rewrite").

// The appended entry n's key, normalised here (k stays unnormalised until its last use), once per key head.
template <int K, class E>
__device__ __forceinline__ void store_appended_key(E* bk, int n, int H, int kh, int lane, float* k, float kinv) {
#pragma unroll
  for (int i = 0; i < K / 8; ++i) k[i] *= kinv;
  store_slice<K>(bk + (size_t(n) * H + kh) * K, lane, k);
}

// The appended entry n's G_t (and raw: beta), once per value head.
template <bool RAW>
__device__ __forceinline__ void store_appended_gate(const GdnKVBufferParams& p, float* gcum, int slot, int C, int n,
                                                    int HV, int h, float G_t, float beta) {
  gcum[n * HV + h] = G_t;
  if (RAW) p.buf_beta[(size_t(slot) * C + n) * HV + h] = beta;
}

// Phase 6: the rows' outputs and (unless the block folded) the appended entry n: values by
// 16-byte vectors from shared memory, the key and G_t (and beta).
template <int K, class E, bool RAW>
__device__ __forceinline__ void single_store(const GdnKVBufferParams& p, const BlockCoords& c, int rows, int C, int H,
                                             int HV, int slot, int n, bool fold, const __nv_bfloat16* s_out,
                                             const E* s_entry, __nv_bfloat16* out, E* entry_n, E* bk, float* gcum,
                                             float* k, float kinv, float G_t, float beta, int group, int lane) {
  const int kh = c.kh;
  __syncthreads();
  if (threadIdx.x < rows / 8)
    reinterpret_cast<uint4*>(out + c.v0)[threadIdx.x] = reinterpret_cast<const uint4*>(s_out)[threadIdx.x];
  if (!fold) {
    for (int i = threadIdx.x; i < rows * int(sizeof(E)) / 16; i += kThreads)
      reinterpret_cast<uint4*>(entry_n + c.v0)[i] = reinterpret_cast<const uint4*>(s_entry)[i];
    if (c.tile == 0) {
      if (c.sub == 0 && group == 0) store_appended_key<K>(bk, n, H, kh, lane, k, kinv);
      if (threadIdx.x == 0) store_appended_gate<RAW>(p, gcum, slot, C, n, HV, c.h, G_t, beta);
    }
  }
}

// Phase 2, second part: the S0 tile by bulk copies (the copy issuers, one barrier per chunk), or, without a
// state, a zero tile for the cached-u row loop.
template <int K, bool RAW, class S>
__device__ __forceinline__ void single_issue_tile(bool has_state, S* tile, const S* state,
                                                  const BlockCoords& c, int rows, int chunks, uint64_t* bars) {
  if (has_state) {
    if (copy_issuer(threadIdx.x)) tile_issue<K>(tile, state + size_t(c.v0) * K, chunks, bars);
  } else if (!RAW) {
    constexpr int kPerVec = 16 / int(sizeof(S));  // elements per 16-byte store
    for (int i = threadIdx.x; i < rows * K / kPerVec; i += kThreads)
      reinterpret_cast<float4*>(tile)[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
}

// ---- Row products on Hopper's warpgroup tensor cores (log v33; sm_90a only): D [64 rows, 8] +=
// A [64 rows, 16] x B [16, 8] per k-step, A (the S0 rows) from registers in mma.m16n8k16's fragment
// layout (warp w holds rows 16 w .. 16 w + 15), B from shared memory in the no-swizzle K-major
// layout with both core-matrix strides 32 bytes: core matrix c (k-positions 8 c .. 8 c + 7) holds
// column 0 (k) at bytes 32 c .. + 15 and column 1 (q) at 32 c + 16 .. + 31; its columns 2-7 are
// whatever follows (the next core matrices), whose products land in D columns never read.
constexpr int kWgCoreBytes = 32;
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
__device__ __forceinline__ uint64_t wg_desc_b(uint32_t smem_byte_addr) {
  // start >> 4 in bits 0-13; the leading and stride byte offsets (bits 16-29, 32-45) both 32 >> 4;
  // layout type 0 (no swizzle, bits 62-63).
  constexpr uint64_t kOffsets = (uint64_t(kWgCoreBytes >> 4) << 16) | (uint64_t(kWgCoreBytes >> 4) << 32);
  return uint64_t((smem_byte_addr >> 4) & 0x3fffu) | kOffsets;
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wg_wait_all() { asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory"); }
__device__ __forceinline__ void wg_mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint64_t desc_b,
                                            bool accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc_b), "r"(int(accumulate)));
}
#endif

// B of the row products from the token's raw k, q as issue_token_kq loaded them (lane l of group 0
// holds elements 4 (8 i + l) .. + 3 of each): k-step s = 2 i + l % 2 takes them at k-positions
// 2 t, 2 t + 1 (core matrix 2 s) and 2 t + 8, 2 t + 9 (core matrix 2 s + 1), t = l / 2: the
// permutation of the A fragments (wg rows: lane t holds bytes [64 m + 16 t, + 16) of its rows).
template <int K>
__device__ __forceinline__ void wg_write_b(char* sB, const TokenKQRaw<K>& raw, int group, int lane) {
  if (group == 0) {
#pragma unroll
    for (int i = 0; i < K / 32; ++i) {
      char* core = sB + 2 * (2 * i + lane % 2) * kWgCoreBytes + 4 * (lane / 2);
      *reinterpret_cast<uint32_t*>(core) = raw.k[i].x;
      *reinterpret_cast<uint32_t*>(core + 16) = raw.q[i].x;
      *reinterpret_cast<uint32_t*>(core + kWgCoreBytes) = raw.k[i].y;
      *reinterpret_cast<uint32_t*>(core + kWgCoreBytes + 16) = raw.q[i].y;
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // generic writes -> the tensor cores' reads
  }
}

template <int K, int V, class S, class E, bool RAW, bool WG = false>
__global__ void __launch_bounds__(kThreads, 6) gdn_decode_kvbuffer_kernel(GdnKVBufferParams p, int rows, int rows_offset) {
  static_assert(K % 32 == 0 && V % 16 == 0, "head dims");
  constexpr int N = K / 8;
  extern __shared__ __align__(128) float smem[];
  // Dynamic shared memory: the S0 tile first (128-byte aligned for the bulk copies), the buffer
  // staging, then the per-row arrays at rows_offset bytes (kvbuffer_smem_layout). The per-row
  // arrays were static arrays once: their addresses took ~5 instructions (the CTA id of the shared
  // window) every time ptxas rematerialised one in the row loop; ahead of the tile they cost the
  // tile its alignment (log v26).
  const int C = p.capacity;
  const int ustride = rows + kUtilePad;
  S* const tile = reinterpret_cast<S*>(smem);                        // [rows, K] S0 rows
  const int staged = staged_entries(C, WG);
  E* const skeys = reinterpret_cast<E*>(tile + rows * K);            // [staged][K] keys k_j
  E* const utile = skeys + staged * K;                               // cached: [staged][ustride] u_j
  float* const sG = reinterpret_cast<float*>(utile + (RAW ? 0 : staged * ustride));  // G_j
  float* const sc = sG + C;                                          // c_j
  float* const sd = sc + C;                                          // d_j
  float* const sw = sd + C;                                          // e^{G_t - G_j}
  float* const L = sw + C;      // raw: [C][C], L[j][i] = beta_j e^{G_j-G_i} k_i.k_j (i < j < n)
  float* const eG = L + C * C;  // raw: e^{G_j}
  float* const bj = eG + C;     // raw: beta_j
  float* const scratch = bj + C;  // raw: [kGroups][C] per-group a_j, then u_j
  uint64_t* const bars = reinterpret_cast<uint64_t*>(reinterpret_cast<char*>(smem) + rows_offset);  // [kMaxChunks]
  __nv_bfloat16* const sv = reinterpret_cast<__nv_bfloat16*>(bars + kMaxChunks);  // [rows] v
  // The rows' outputs and appended entries, stored to global memory by 16-byte vectors after the
  // row loop (one store per row from lane 0 cost ~35 instructions of address arithmetic each).
  __nv_bfloat16* const s_out = sv + rows;                                        // [rows]
  E* const s_entry = reinterpret_cast<E*>(s_out + rows);                         // [rows]
  // WG: B of the row products (16-byte aligned), then u_t of the folding rows (fp32 [rows]).
  char* const sB = reinterpret_cast<char*>(smem) + (WG ? wg_b_offset(rows_offset, rows) : 0);
  // Phase 1, prologue.
  const GdnStepIO& io = p.io;
  const BlockCoords c = block_coords<V>(rows);
  const int group = threadIdx.x / kGroupLanes, lane = threadIdx.x % kGroupLanes;
  const int H = io.H, HV = io.HV;
  const int kh = c.kh;
  // A programmatic dependent of the kernel before (gdn_decode.h, pools_ready_at_launch): with
  // ready pools the slot, metadata, entries and S0 copies go out before the wait for that kernel;
  // the token's inputs are read, and anything is written, after it.
  if (!p.pools_ready_at_launch) wait_prior_grid();
  auto wait_for_inputs = [&] {
    if (p.pools_ready_at_launch) wait_prior_grid();
    allow_dependent_grids();
  };
  // Scheduler row metadata is indexed by row, not slot: loaded with the slot, so the S0 copies
  // start one round trip after entry, as in gdn_decode_recurrent.
  const bool row_meta = p.row_fill != nullptr;
  int n = 0, has_state_flag = 0;
  if (row_meta) n = p.row_fill[c.row], has_state_flag = p.row_has_state[c.row];
  const int slot = io.slot[c.row];
  if (slot < 0) {
    wait_for_inputs();
    write_zero_output(io, c, rows);
    return;
  }
  if (!row_meta) n = p.fill[slot], has_state_flag = p.has_state[slot];
  const bool has_state = has_state_flag != 0;
  const bool fold = n + 1 == C;
  const int chunks = rows / kGroups;
  const size_t head = (size_t(slot) * HV + c.h) * V * K;
  S* state = static_cast<S*>(p.state) + head;

  // Phase 2, issue. Everything else the block reads goes to shared memory in one round trip by
  // cp.async (no registers held): keys [n][K], (cached-u) the u tile [n][rows], G_j (and beta_j),
  // and v of the block's rows, all issued before the first wait.
  E* bk = static_cast<E*>(p.buf_k) + size_t(slot) * C * H * K;       // [C, H, K]
  E* bval = static_cast<E*>(p.buf_val) + size_t(slot) * C * HV * V;  // [C, HV, V]
  float* gcum = p.buf_gcum + size_t(slot) * C * HV;                  // [C, HV]
  constexpr int kVec = 16 / sizeof(E);
  {
    const int kvecs = K / kVec;
    for (int idx = threadIdx.x; idx < n * kvecs; idx += kThreads) {
      const int j = idx / kvecs, x = idx % kvecs;
      cp_async16(skeys + j * K + x * kVec, bk + (size_t(j) * H + kh) * K + x * kVec);
    }
    if (!RAW) {
      const int uvecs = rows / kVec, ushift = __ffs(uvecs) - 1;  // rows and kVec are powers of 2
      for (int idx = threadIdx.x; idx < n * uvecs; idx += kThreads) {
        const int j = idx >> ushift, x = idx & (uvecs - 1);
        cp_async16(utile + j * ustride + x * kVec, bval + (size_t(j) * HV + c.h) * V + c.v0 + x * kVec);
      }
    }
    for (int j = threadIdx.x; j < n; j += kThreads) {
      cp_async4(sG + j, gcum + j * HV + c.h);
      if (RAW) cp_async4(bj + j, p.buf_beta + (size_t(slot) * C + j) * HV + c.h);
    }
  }
  // The S0 tile after the small copies, which the block waits for first. Without a state the
  // cached-u tile is zeros (S0 = 0), so its row loop reads rows the same way in both modes (the raw
  // variant's row loop, at the register limit, keeps load_tile_row's zero registers).
  single_issue_tile<K, RAW>(has_state, tile, state, c, rows, chunks, bars);
  // The token's inputs: v of the block's rows into shared memory with the copies above (one wait).
  wait_for_inputs();
  TokenKQRaw<K> kq_raw;
  issue_token_kq<K>(io, c.row, kh, lane, kq_raw);
  float g, beta;
  load_gates(io, c.row, c.h, g, beta);
  if (threadIdx.x < rows / 8) cp_async16(sv + threadIdx.x * 8, io.v + (size_t(c.row) * HV + c.h) * V + c.v0 + threadIdx.x * 8);
  // Phase 3, wait. k and q stay unnormalised (kinv, qinv): the scales go on the sums that use them.
  float k[N], q[N], kinv, qinv, kq;
  finish_token_kq_unscaled<K>(kq_raw, k, q, kinv, qinv, kq);  // while the copies are in flight
  if constexpr (WG) wg_write_b<K>(sB, kq_raw, group, lane);
  cp_async_wait_all();
  __syncthreads();
  const float G_t = (n > 0 ? sG[n - 1] : 0.f) + g;
  const float eG_t = expf(G_t);
  const float eG_k = eG_t * kinv, eG_q = eG_t * qinv;

  // Phase 4, key scalars over the buffered keys (shuffle loops: same trip count on every group of
  // a warp; a warp whose groups hold no entry of the round skips it).
  constexpr int kWarpGroups = 32 / kGroupLanes;
  for (int base = 0; base < n; base += kGroups) {
    if (!RAW && base + (threadIdx.x / 32) * kWarpGroups >= n) continue;
    const int j = base + group;
    float kj[N];
    if (j < n) {
      load_slice<K>(skeys + j * K, lane, kj);
    } else {
#pragma unroll
      for (int i = 0; i < N; ++i) kj[i] = 0.f;
    }
    const float dk = group_sum(dot<N>(kj, k)) * kinv;
    const float dq = group_sum(dot<N>(kj, q)) * qinv;
    if (j < n && lane == 0) {
      const float e = expf(G_t - sG[j]);
      sc[j] = e * dk;
      sd[j] = e * dq;
      sw[j] = e;
      if (RAW) eG[j] = expf(sG[j]);
    }
  }
  if (RAW) {
    for (int base = 0; base < n * n; base += kGroups) {
      const int idx = base + group, j = idx / n, i = idx % n;
      const bool lower = idx < n * n && i < j;
      float ki[N], kj[N];
      if (lower) {
        load_slice<K>(skeys + i * K, lane, ki);
        load_slice<K>(skeys + j * K, lane, kj);
      } else {
#pragma unroll
        for (int e = 0; e < N; ++e) ki[e] = kj[e] = 0.f;
      }
      const float d = group_sum(dot<N>(ki, kj));
      if (lower && lane == 0) L[j * C + i] = bj[j] * expf(sG[j] - sG[i]) * d;
    }
  }
  if (n > 0) __syncthreads();  // n is block-uniform; with no entries nothing above was written

  // Phase 5, row loop: each group takes one row per 16-row chunk as soon as its chunk lands.
  __nv_bfloat16* out = io.out + (size_t(c.row) * HV + c.h) * V;
  if constexpr (WG) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    // The appended key now, so k's registers are free.
    if (!fold && c.tile == 0 && c.sub == 0 && group == 0) store_appended_key<K>(bk, n, H, kh, lane, k, kinv);
    // Per 64-row M tile: warp w's rows R1 = 64 mt + 16 w + g and R2 = R1 + 8 (g = lane / 4, t = lane % 4)
    // as A fragments (lane t holds bytes [64 m + 16 t, + 16) of each: B's K permutation), the
    // products a (column 0) and b (column 1) in lane t = 0's d; the cached-u sums over j = t, t + 4, ...
    constexpr int M = K / 32;
    const int w = threadIdx.x / 32, wl = threadIdx.x % 32, g = wl / 4, t = wl % 4;
    __nv_bfloat16* const out_rows = out + c.v0;
    E* const entry_rows = bval + (size_t(n) * HV + c.h) * V + c.v0;
    float ut_own[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
#pragma unroll
    for (int mt = 0; mt < 2; ++mt) {
      if (64 * mt >= rows) break;
      const int R1 = 64 * mt + 16 * w + g, R2 = R1 + 8;
      float d[4] = {0.f, 0.f, 0.f, 0.f};
      if (has_state) {
        tile_wait(bars + 4 * mt + w);
        uint4 x1[M], x2[M];
#pragma unroll
        for (int m = 0; m < M; ++m) {
          x1[m] = reinterpret_cast<const uint4*>(tile + size_t(R1) * K)[4 * m + t];
          x2[m] = reinterpret_cast<const uint4*>(tile + size_t(R2) * K)[4 * m + t];
        }
        wg_fence();
        const uint32_t b0 = smem_addr(sB);
#pragma unroll
        for (int m = 0; m < M; ++m) {
          wg_mma_bf16(d, x1[m].x, x2[m].x, x1[m].y, x2[m].y, wg_desc_b(b0 + 4 * m * kWgCoreBytes), m > 0);
          wg_mma_bf16(d, x1[m].z, x2[m].z, x1[m].w, x2[m].w, wg_desc_b(b0 + (4 * m + 2) * kWgCoreBytes), true);
        }
        wg_commit();
        wg_wait_all();
      }
      float pc1 = 0.f, pd1 = 0.f, pc2 = 0.f, pd2 = 0.f;
      for (int j = t; j < n; j += 4) {
        const float u1 = to_f32(utile[j * ustride + R1]), u2 = to_f32(utile[j * ustride + R2]);
        pc1 = fmaf(sc[j], u1, pc1), pd1 = fmaf(sd[j], u1, pd1);
        pc2 = fmaf(sc[j], u2, pc2), pd2 = fmaf(sd[j], u2, pd2);
      }
#pragma unroll
      for (int x = 1; x <= 2; x *= 2) {
        pc1 += __shfl_xor_sync(0xffffffffu, pc1, x), pd1 += __shfl_xor_sync(0xffffffffu, pd1, x);
        pc2 += __shfl_xor_sync(0xffffffffu, pc2, x), pd2 += __shfl_xor_sync(0xffffffffu, pd2, x);
      }
      if (t == 0) {
        const float u1 = beta * (__bfloat162float(sv[R1]) - fmaf(eG_k, d[0], pc1));
        const float u2 = beta * (__bfloat162float(sv[R2]) - fmaf(eG_k, d[2], pc2));
        out_rows[R1] = __float2bfloat16_rn(fmaf(eG_q, d[1], pd1) + kq * u1);
        out_rows[R2] = __float2bfloat16_rn(fmaf(eG_q, d[3], pd2) + kq * u2);
        if (!fold) entry_rows[R1] = from_f32<E>(u1), entry_rows[R2] = from_f32<E>(u2);
        ut_own[mt][0] = u1, ut_own[mt][1] = u2;
      }
    }
    if (fold) {  // a second pass over the landed tile (1 / C of the blocks), each row as the FMA loop folds it
      __syncthreads();  // every warp's products have read B
      float* s_ut = reinterpret_cast<float*>(sB);
      if (t == 0)
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
          if (64 * mt < rows) s_ut[64 * mt + 16 * w + g] = ut_own[mt][0], s_ut[64 * mt + 16 * w + g + 8] = ut_own[mt][1];
      __syncthreads();
      TokenKQRaw<K> raw;
      issue_token_kq<K>(io, c.row, kh, lane, raw);
      float kf[N], qf[N], ki, qi;
      token_kq_slices<K>(raw, kf, qf, ki, qi);
      for (int ch = 0; ch < chunks; ++ch) {
        const int rl = ch * kGroups + group;
        float sr[N];
        load_slice<K>(tile + size_t(rl) * K, lane, sr);
        fold_row<K>(sr, eG_t, s_ut[rl] * kinv, kf, n, sw, utile + rl, ustride, skeys, lane);
        store_slice<K>(state + size_t(c.v0 + rl) * K, lane, sr);
      }
    }
    if (!fold && c.tile == 0 && threadIdx.x == 0) store_appended_gate<false>(p, gcum, slot, C, n, HV, c.h, G_t, beta);
    if (!row_meta) advance_fill_last_block(p.fill, p.has_state, p.done_count, slot, n, fold);
    return;
#else
    __trap();  // WG kernels are launched only where sm_90a code exists
#endif
  }
  E* const entry_n = bval + (size_t(n) * HV + c.h) * V;  // this head's values of the appended entry
  float* ua = scratch + group * C;
  const int leader = (threadIdx.x & 31) & ~(kGroupLanes - 1);
  const float sc_lane = !RAW && lane < n ? sc[lane] : 0.f, sd_lane = !RAW && lane < n ? sd[lane] : 0.f;
  const E* const u_lane = utile + lane * ustride;

  for (int ch = 0; ch < chunks; ++ch) {
    const int rl = ch * kGroups + group, r = c.v0 + rl;
    const float v_r = __bfloat162float(sv[rl]);
    float s[N];
    if constexpr (RAW) {
      load_tile_row<K>(has_state, tile, bars, ch, rl, lane, s);
    } else {
      if (has_state) tile_wait(bars + ch);
      load_slice<K>(tile + size_t(rl) * K, lane, s);
    }
    const float pa = dot<N>(s, k), pb = dot<N>(s, q);
    float u_t, o;
    if (!RAW) {
      // Lane l takes entries l, l + 8, ...: one predicated round per 8 entries, the first with its
      // scalars held in registers.
      float pc = 0.f, pd = 0.f;
      if (lane < n) {
        const float uj = to_f32(u_lane[rl]);
        pc = sc_lane * uj;
        pd = sd_lane * uj;
      }
#pragma unroll 1
      for (int j0 = kGroupLanes; j0 < n; j0 += kGroupLanes) {
        const int j = j0 + lane;
        if (j < n) {
          const float uj = to_f32(utile[j * ustride + rl]);
          pc = fmaf(sc[j], uj, pc);
          pd = fmaf(sd[j], uj, pd);
        }
      }
      const float s1 = group_sum(fmaf(eG_k, pa, pc));
      const float s2 = group_sum(fmaf(eG_q, pb, pd));
      u_t = beta * (v_r - s1);
      o = s2 + kq * u_t;
    } else {
      for (int j = 0; j < n; ++j) {
        float aj = 0.f;
        if (has_state) {
          float kj[N];
          load_slice<K>(skeys + j * K, lane, kj);
          aj = group_sum(dot<N>(s, kj));
        }
        if (lane == 0) ua[j] = aj;
      }
      const float a_t = group_sum(pa) * kinv, b_t = group_sum(pb) * qinv;
      __syncwarp();
      u_t = 0.f, o = 0.f;
      if (lane == 0) {
        float corr = 0.f, outb = 0.f;
        for (int j = 0; j < n; ++j) {
          float x = bj[j] * (to_f32(bval[(size_t(j) * HV + c.h) * V + r]) - eG[j] * ua[j]);
          for (int i = 0; i < j; ++i) x = fmaf(-L[j * C + i], ua[i], x);
          ua[j] = x;
          corr = fmaf(sc[j], x, corr);
          outb = fmaf(sd[j], x, outb);
        }
        u_t = beta * (v_r - eG_t * a_t - corr);
        o = eG_t * b_t + outb + kq * u_t;
      }
      u_t = __shfl_sync(0xffffffffu, u_t, leader);
      __syncwarp();
    }
    if (lane == 0) s_out[rl] = __float2bfloat16_rn(o);
    if (fold) {
      if constexpr (RAW) fold_row<K>(s, eG_t, u_t * kinv, k, n, sw, ua, 1, skeys, lane);
      else fold_row<K>(s, eG_t, u_t * kinv, k, n, sw, utile + rl, ustride, skeys, lane);
      store_slice<K>(state + size_t(r) * K, lane, s);
    } else if (lane == 0) {
      s_entry[rl] = from_f32<E>(RAW ? v_r : u_t);
    }
    if (RAW) __syncwarp();  // ua is rewritten by the next row
  }
  single_store<K, E, RAW>(p, c, rows, C, H, HV, slot, n, fold, s_out, s_entry, out, entry_n, bk, gcum, k, kinv, G_t, beta,
                          group, lane);
  if (row_meta) return;  // the scheduler advances its own fill / has_state
  advance_fill_last_block(p.fill, p.has_state, p.done_count, slot, n, fold);
}

// ---- Split path (cached-u, scheduler row metadata): kernel A then kernel B in one stream.

// Kernel A, the buffer kernel: one block per (row, key head), covering the R = HV/H value heads
// that share the key head's buffered keys. Every read is issued before the first wait: the u rows
// [R, n, V] by cp.async into shared memory, G_j per (head, j), and each group's keys j (8 lanes
// per key, groups over j in parallel) for k_j.k_t and k_j.q_t; the keys are read once per key
// head, not per value head and V tile. Then one thread per (value head, v) sums
// r_v = sum_j c_j u_j[v] and s_v = sum_j d_j u_j[v] from shared memory. Rows with a state or a
// fold get r, s in `scratch` for kernel B; a direct-mode token with no fold is finished here
// (u_t, o, append). Appends k_t and G_t unless the row folds. Triggers kernel B's launch at once
// (programmatic dependent launch): B starts streaming S0 while A runs and waits for A only
// before it reads `scratch`.
template <int K, int V, class E>
__global__ void __launch_bounds__(kThreads) gdn_kvbuffer_split_buffer_kernel(GdnKVBufferParams p) {
  static_assert(K % 32 == 0 && V % 16 == 0, "head dims");
  constexpr int N = K / 8;
  constexpr int kVec = 16 / sizeof(E);
  extern __shared__ __align__(128) float smem[];
  const GdnStepIO& io = p.io;
  const int H = io.H, HV = io.HV, R = HV / H;
  const int row = blockIdx.x / H, kh = blockIdx.x % H;
  const int slot = io.slot[row], n = p.row_fill[row];
  const bool has_state = p.row_has_state[row] != 0;
  allow_dependent_grids();
  __nv_bfloat16* out = io.out + (size_t(row) * HV + size_t(kh) * R) * V;  // [R, V]: this key head's value heads
  if (slot < 0) {
    for (int i = threadIdx.x; i < R * V; i += kThreads) out[i] = __float2bfloat16_rn(0.f);
    return;
  }
  const int C = p.capacity;
  const bool fold = n + 1 == C;
  const bool finish_here = !has_state && !fold;
  const int group = threadIdx.x / kGroupLanes, lane = threadIdx.x % kGroupLanes;
  E* bk = static_cast<E*>(p.buf_k) + size_t(slot) * C * H * K;       // [C, H, K]
  E* bval = static_cast<E*>(p.buf_val) + size_t(slot) * C * HV * V;  // [C, HV, V]
  float* gcum = p.buf_gcum + size_t(slot) * C * HV;                  // [C, HV]
  E* su = reinterpret_cast<E*>(smem);                                // [R][C][V] u_j rows
  float* sdk = reinterpret_cast<float*>(su + size_t(R) * C * V);     // [C] k_j.k_t
  float* sdq = sdk + C;       // [C] k_j.q_t
  float* sG = sdq + C;        // [R][C] G_j, then c_j
  float* sd = sG + R * C;     // [R][C] d_j
  float* sGt = sd + R * C;    // [R] G_t
  float* sbeta = sGt + R;     // [R] beta

  const int vvecs = V / kVec;
  for (int idx = threadIdx.x; idx < R * n * vvecs; idx += kThreads) {
    const int x = idx % vvecs, ij = idx / vvecs, i = ij / n, j = ij % n;
    cp_async16(su + (size_t(i) * C + j) * V + x * kVec, bval + (size_t(j) * HV + kh * R + i) * V + x * kVec);
  }
  for (int idx = threadIdx.x; idx < R * n; idx += kThreads) {
    const int i = idx / n, j = idx % n;
    sG[i * C + j] = gcum[j * HV + kh * R + i];
  }
  for (int i = threadIdx.x; i < R; i += kThreads) {
    const int h = kh * R + i;
    float g, beta;
    load_gates(io, row, h, g, beta);
    const float G_t = (n > 0 ? gcum[(n - 1) * HV + h] : 0.f) + g;
    sGt[i] = G_t, sbeta[i] = beta;
    if (!fold) store_appended_gate<false>(p, gcum, slot, C, n, HV, h, G_t, beta);
  }
  float k[N], q[N], kq;
  load_token_kq<K>(io, row, kh, lane, k, q, kq);
  for (int base = 0; base < n; base += kGroups) {  // same trip count on every group (shuffles)
    const int j = base + group;
    float kj[N];
    if (j < n) {
      load_slice<K>(bk + (size_t(j) * H + kh) * K, lane, kj);
    } else {
#pragma unroll
      for (int i = 0; i < N; ++i) kj[i] = 0.f;
    }
    const float dk = group_sum(dot<N>(kj, k));
    const float dq = group_sum(dot<N>(kj, q));
    if (j < n && lane == 0) sdk[j] = dk, sdq[j] = dq;
  }
  if (!fold && group == 0) store_slice<K>(bk + (size_t(n) * H + kh) * K, lane, k);
  __syncthreads();
  for (int idx = threadIdx.x; idx < R * n; idx += kThreads) {
    const int i = idx / n, j = idx % n;
    const float e = expf(sGt[i] - sG[i * C + j]);
    sG[i * C + j] = e * sdk[j];  // c_j
    sd[i * C + j] = e * sdq[j];
  }
  cp_async_wait_all();
  __syncthreads();
  for (int idx = threadIdx.x; idx < R * V; idx += kThreads) {
    const int i = idx / V, v = idx % V, h = kh * R + i;
    const E* uj = su + size_t(i) * C * V + v;  // u_j[v] at uj[j * V]
    const float* ci = sG + i * C;
    const float* di = sd + i * C;
    float r = 0.f, s = 0.f;
#pragma unroll 8
    for (int j = 0; j < n; ++j) {
      const float u = to_f32(uj[j * V]);
      r = fmaf(ci[j], u, r);
      s = fmaf(di[j], u, s);
    }
    if (finish_here) {
      const float u_t = sbeta[i] * (__bfloat162float(io.v[(size_t(row) * HV + h) * V + v]) - r);
      out[idx] = __float2bfloat16_rn(s + kq * u_t);
      bval[(size_t(n) * HV + h) * V + v] = from_f32<E>(u_t);
    } else {
      float* rs = p.scratch + (size_t(row) * HV + h) * 2 * V;
      rs[v] = r;
      rs[V + v] = s;
    }
  }
}

// Kernel B, the state kernel: the recurrent kernel's shape (block = (row, value head, V tile),
// S0 rows by bulk copies, all chunks in flight) for rows with a state or a fold; other rows exit
// at once (kernel A finished them). u_t and o from S0 plus kernel A's r, s; appends u_t, or folds
// (keys and u tile staged to shared memory by the folding blocks only: 1/C of the requests).
// COMPACT (the direct entry point, batch <= kCompactMaxBatch): the grid has G row groups instead
// of one block row per request; every block finds the rows that need kernel B (a state or a fold)
// and takes those of rank g, g + G, ... in row order, one after another (log v21: in direct mode
// almost every block of the one-row-per-block grid only read its row's metadata and exited).
constexpr int kCompactMaxBatch = 1024;
constexpr int kCompactMinCapacity = 16;
constexpr int kCompactMinWaves = 12;

// Whether kernel B has work for a request row: it exists (slot >= 0) and has a state or folds.
// Bitwise, not short-circuit: ptxas split `slot < 0 || ...` into a slot exit followed by the
// metadata loads, a second dependent round trip (log v21).
__device__ __forceinline__ bool state_kernel_row(int slot, int n, bool has_state, int C) {
  return (slot >= 0) & (has_state | (n + 1 == C));
}

struct SplitStateShared {
  uint64_t bars[kMaxChunks];
  float sr[kMaxChunks * kGroups], ss[kMaxChunks * kGroups];  // kernel A's r, s of the block's rows
  __nv_bfloat16 sv[kMaxChunks * kGroups];                   // v of the block's rows
  float sw[kMaxCapacity];                                   // G_j, then e^{G_t - G_j}: folds only
  float gprev;                                              // G_{n-1}
};
static_assert(sizeof(SplitStateShared) + sizeof(int) * kCompactMaxBatch / 32 + sizeof(int16_t) * kCompactMaxBatch <=
                  kSplitStateStaticSmemBound,
              "kernel B's static shared memory (the compact variant's s_count and s_rows included)");

// Kernel B's work for request row c.row (slot, fill n, has_state): its S0 tile copies go out on
// barriers initialised by the caller and complete phase `parity`.
template <int K, int V, class S, class E>
__device__ __forceinline__ void split_state_row(const GdnKVBufferParams& p, int rows, const BlockCoords& c, int slot,
                                                int n, bool has_state, uint32_t parity, S* tile,
                                                SplitStateShared& sh) {
  constexpr int N = K / 8;
  const GdnStepIO& io = p.io;
  const int C = p.capacity;
  const bool fold = n + 1 == C;
  const int H = io.H, HV = io.HV, kh = c.kh;
  const int chunks = rows / kGroups;
  S* state = static_cast<S*>(p.state) + (size_t(slot) * HV + c.h) * V * K;
  if (has_state && copy_issuer(threadIdx.x)) tile_copy<K>(tile, state + size_t(c.v0) * K, chunks, sh.bars);
  const int group = threadIdx.x / kGroupLanes, lane = threadIdx.x % kGroupLanes;
  TokenKQRaw<K> kq_raw;
  issue_token_kq<K>(io, c.row, kh, lane, kq_raw);
  float g, beta;
  load_gates(io, c.row, c.h, g, beta);
  const E* bk = static_cast<const E*>(p.buf_k) + size_t(slot) * C * H * K;
  E* bval = static_cast<E*>(p.buf_val) + size_t(slot) * C * HV * V;
  const float* gcum = p.buf_gcum + size_t(slot) * C * HV;
  // Everything else by cp.async, consumed after one wait: G_{n-1}, v of the block's rows and, in
  // folding blocks, the keys [n, K], their u tile [n, rows] and G_j (read from global memory per
  // row and key, the fold was a chain of dependent loads: ncu measured 91 us for the folding
  // blocks of one request at C = 64).
  constexpr int kVec = 16 / sizeof(E);
  const int ustride = rows + kUtilePad;
  E* skeys = reinterpret_cast<E*>(tile + rows * K);  // [C][K]
  E* utile = skeys + C * K;                          // [C][ustride]
  if (fold) {
    const int kvecs = K / kVec, uvecs = rows / kVec;
    for (int idx = threadIdx.x; idx < n * kvecs; idx += kThreads) {
      const int j = idx / kvecs, x = idx % kvecs;
      cp_async16(skeys + j * K + x * kVec, bk + (size_t(j) * H + kh) * K + x * kVec);
    }
    for (int idx = threadIdx.x; idx < n * uvecs; idx += kThreads) {
      const int j = idx / uvecs, x = idx % uvecs;
      cp_async16(utile + j * ustride + x * kVec, bval + (size_t(j) * HV + c.h) * V + c.v0 + x * kVec);
    }
    for (int j = threadIdx.x; j < n; j += kThreads) cp_async4(sh.sw + j, gcum + j * HV + c.h);
  }
  if (n > 0 && threadIdx.x == 0) cp_async4(&sh.gprev, gcum + (n - 1) * HV + c.h);
  if (threadIdx.x < rows / 8)
    cp_async16(sh.sv + threadIdx.x * 8, io.v + (size_t(c.row) * HV + c.h) * V + c.v0 + threadIdx.x * 8);
  // Kernel A's r, s: wait for A's grid (a no-op when launched without programmatic dependence).
  // Nothing above reads what A writes (scratch, entry n of k and G) or writes what A reads.
  wait_prior_grid();
  const float* rs = p.scratch + (size_t(c.row) * HV + c.h) * 2 * V;
  if (threadIdx.x < rows / 4) {
    cp_async16(sh.sr + threadIdx.x * 4, rs + c.v0 + threadIdx.x * 4);
    cp_async16(sh.ss + threadIdx.x * 4, rs + V + c.v0 + threadIdx.x * 4);
  }
  float k[N], q[N], kq;
  finish_token_kq<K>(kq_raw, k, q, kq);  // while the copies are in flight
  cp_async_wait_all();
  __syncthreads();  // barriers initialised, every cp.async above landed
  const float G_t = (n > 0 ? sh.gprev : 0.f) + g;
  const float eG_t = expf(G_t);
  if (fold) {  // block-uniform
    for (int j = threadIdx.x; j < n; j += kThreads) sh.sw[j] = expf(G_t - sh.sw[j]);
    __syncthreads();
  }

  __nv_bfloat16* out = io.out + (size_t(c.row) * HV + c.h) * V;
  E* const entry_n = bval + (size_t(n) * HV + c.h) * V;  // this head's values of the appended entry
  for (int ch = 0; ch < chunks; ++ch) {
    const int rl = ch * kGroups + group, r = c.v0 + rl;
    float s[N];
    load_tile_row<K>(has_state, tile, sh.bars, ch, rl, lane, s, parity);
    const float a = group_sum(dot<N>(s, k));
    const float b = group_sum(dot<N>(s, q));
    const float u_t = beta * (__bfloat162float(sh.sv[rl]) - fmaf(eG_t, a, sh.sr[rl]));
    if (lane == 0) out[r] = __float2bfloat16_rn(fmaf(eG_t, b, sh.ss[rl]) + kq * u_t);
    if (fold) {
      fold_row<K>(s, eG_t, u_t, k, n, sh.sw, utile + rl, ustride, skeys, lane);
      store_slice<K>(state + size_t(r) * K, lane, s);
    } else if (lane == 0) {
      entry_n[r] = from_f32<E>(u_t);
    }
  }
}

template <int K, int V, class S, class E, bool COMPACT>
__global__ void __launch_bounds__(kThreads, 6) gdn_kvbuffer_split_state_kernel(GdnKVBufferParams p, int rows) {
  static_assert(K % 32 == 0 && V % 16 == 0, "head dims");
  // [rows, K] S0 rows of S, then the fold's keys and u tile. (Declared float and named `tile` as
  // before 16-bit states: renaming this extern array changed ptxas's schedule of another kernel in
  // this file, gdn_decode_kvbuffer_kernel<128, 128, float, float, true>, from identical PTX.)
  extern __shared__ __align__(128) float tile[];
  S* const s0_tile = reinterpret_cast<S*>(tile);
  __shared__ __align__(16) SplitStateShared sh;
  const GdnStepIO& io = p.io;
  BlockCoords c = block_coords<V>(rows);
  const int chunks = rows / kGroups;
  const int C = p.capacity;
  if constexpr (!COMPACT) {
    const int slot = io.slot[c.row], n = p.row_fill[c.row];
    const bool has_state = p.row_has_state[c.row] != 0;
    if (!state_kernel_row(slot, n, has_state, C)) return;  // kernel A wrote the zero output / finished the token
    if (has_state && copy_issuer(threadIdx.x)) tile_init(chunks, sh.bars);
    split_state_row<K, V, S, E>(p, rows, c, slot, n, has_state, 0, s0_tile, sh);
  } else {
    constexpr int kPer = kCompactMaxBatch / kThreads, kWarps = kThreads / 32;
    __shared__ int s_count[kPer][kWarps];       // rows needing kernel B per (chunk of rows, warp)
    __shared__ int16_t s_rows[kCompactMaxBatch];  // this block's rows, in rank order
    const int B = io.batch, G = gridDim.z, g = blockIdx.z;
    const int warp = threadIdx.x / 32, wl = threadIdx.x % 32;
    // Every row's metadata is loaded before any is tested (one round trip, not a chain).
    int slot_of[kPer], fill_of[kPer], has_of[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int row = i * kThreads + threadIdx.x;
      slot_of[i] = -1, fill_of[i] = 0, has_of[i] = 0;
      if (row < B) slot_of[i] = io.slot[row], fill_of[i] = p.row_fill[row], has_of[i] = p.row_has_state[row];
    }
    unsigned work = 0;  // bit i: row i * kThreads + threadIdx.x needs kernel B
#pragma unroll
    for (int i = 0; i < kPer; ++i)
      if (state_kernel_row(slot_of[i], fill_of[i], has_of[i] != 0, C)) work |= 1u << i;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const unsigned m = __ballot_sync(0xffffffffu, (work >> i) & 1u);
      if (wl == 0) s_count[i][warp] = __popc(m);
    }
    if (copy_issuer(threadIdx.x)) tile_init(chunks, sh.bars);
    __syncthreads();
    int before = 0;  // rows needing kernel B ahead of chunk i
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const unsigned m = __ballot_sync(0xffffffffu, (work >> i) & 1u);
      int rank = before + __popc(m & ((1u << wl) - 1u));
      for (int w = 0; w < warp; ++w) rank += s_count[i][w];
      if (((work >> i) & 1u) && rank % G == g) s_rows[rank / G] = int16_t(i * kThreads + threadIdx.x);
      for (int w = 0; w < kWarps; ++w) before += s_count[i][w];
    }
    __syncthreads();
    const int mine = before > g ? (before - g + G - 1) / G : 0;
    uint32_t parity = 0;
    for (int t = 0; t < mine; ++t) {
      if (t > 0) {
        __syncthreads();  // the previous row's tile, sv, sr, ss and sw are consumed
        // Generic-proxy reads of the tile precede the next bulk (async-proxy) writes to it.
        if (copy_issuer(threadIdx.x)) fence_before_copy_overwrite();
      }
      c.row = s_rows[t];
      const int slot = io.slot[c.row], n = p.row_fill[c.row];
      const bool has_state = p.row_has_state[c.row] != 0;
      split_state_row<K, V, S, E>(p, rows, c, slot, n, has_state, parity, s0_tile, sh);
      if (has_state) parity ^= 1u;
    }
  }
}

size_t entry_bytes(const GdnKVBufferParams& p) { return p.entry == EntryType::FP32 ? 4 : 2; }
SingleSmemLayout kvbuffer_smem_layout(const GdnKVBufferParams& p, int rows, bool wg = false) {
  return kvbuffer_smem_layout(p.io.K, p.capacity, rows, state_type_bytes(p.state_type), entry_bytes(p),
                              p.variant == BufferVariant::Raw, wg);
}

// Whether the warpgroup-product variant runs (log v33): bf16 state, cached-u, 64 or 128 rows, on a
// compute capability 9.0 device with this file built for sm_90a (kernels/CMakeLists.txt).
bool use_wg_rows(int rows) {
#ifdef KVBUF_GDN_WGMMA
  return (rows == 64 || rows == 128) && device_limits().cc_major == 9 && device_limits().cc_minor == 0;
#else
  (void)rows;
  return false;
#endif
}

template <int K, int V, class S, class E, bool RAW>
void launch_kvbuffer(const GdnKVBufferParams& p, int rows, cudaStream_t stream) {
  const dim3 grid = decode_grid(p.io, rows);
  if constexpr (std::is_same_v<S, __nv_bfloat16> && !RAW) {
    if (use_wg_rows(rows)) {
      const SingleSmemLayout wl = kvbuffer_smem_layout(p, rows, true);
      const size_t bytes = wg_b_offset(wl.rows_offset, rows) + wg_b_bytes(K, rows);
      launch_kernel(gdn_decode_kvbuffer_kernel<K, V, S, E, RAW, true>, grid, dim3(kThreads), bytes, stream, true, p, rows,
                    int(wl.rows_offset));
      return;
    }
  }
  const SingleSmemLayout layout = kvbuffer_smem_layout(p, rows);
  launch_kernel(gdn_decode_kvbuffer_kernel<K, V, S, E, RAW>, grid, dim3(kThreads), layout.bytes, stream, true, p, rows,
                int(layout.rows_offset));
}

template <int K, class S, class E>
size_t split_state_smem_bytes(const GdnKVBufferParams& p, int rows) {
  return split_state_smem_bytes(K, p.capacity, rows, sizeof(S), sizeof(E));
}

// Kernel B's row groups G, or 0 for one block row per request (the plain kernel). compact_allowed:
// the direct entry point, for at most kCompactMaxBatch rows. split_row_groups, or as many groups as one wave of blocks holds, taken
// from C = kCompactMinCapacity where the plain grid would run kCompactMinWaves waves or more
// (B / G: its blocks mostly exit; log v21).
template <int K, int V, class S, class E>
int split_state_row_groups(const GdnKVBufferParams& p, int rows, bool compact_allowed) {
  if (!compact_allowed || p.io.batch > kCompactMaxBatch) return 0;
  long groups = p.split_row_groups;
  if (!groups && p.capacity >= kCompactMinCapacity) {
    const dim3 grid = decode_grid(p.io, rows);
    const int per_sm = resident_blocks(gdn_kvbuffer_split_state_kernel<K, V, S, E, true>, kThreads,
                                       split_state_smem_bytes<K, S, E>(p, rows));
    groups = long(multiprocessor_count()) * per_sm / (long(grid.x) * grid.y);
    if (p.io.batch < kCompactMinWaves * groups) groups = 0;
  }
  return groups > 0 && groups < p.io.batch ? int(groups) : 0;
}

template <int K, int V, class S, class E>
void launch_split(const GdnKVBufferParams& p, int rows, bool compact_allowed, cudaStream_t stream) {
  const size_t smem_a = split_buffer_smem_bytes(p.io.HV / p.io.H, p.capacity, V, sizeof(E));
  launch_kernel(gdn_kvbuffer_split_buffer_kernel<K, V, E>, dim3(unsigned(long(p.io.batch) * p.io.H)), dim3(kThreads),
                smem_a, stream, false, p);
  const size_t smem_b = split_state_smem_bytes<K, S, E>(p, rows);
  // Programmatic dependent launch: B may start once every block of A has started (A triggers at
  // entry); B's griddepcontrol.wait orders its reads of A's scratch.
  dim3 grid = decode_grid(p.io, rows);
  const int groups = split_state_row_groups<K, V, S, E>(p, rows, compact_allowed);
  if (!groups)
    return launch_kernel(gdn_kvbuffer_split_state_kernel<K, V, S, E, false>, grid, dim3(kThreads), smem_b, stream, true,
                         p, rows);
  grid.z = unsigned(groups);
  launch_kernel(gdn_kvbuffer_split_state_kernel<K, V, S, E, true>, grid, dim3(kThreads), smem_b, stream, true, p, rows);
}

template <int K, int V, class S>
void dispatch_entry(const GdnKVBufferParams& p, int rows, bool split, bool compact_allowed, cudaStream_t stream) {
  const bool raw = p.variant == BufferVariant::Raw;
  if (split) {
    switch (p.entry) {
      case EntryType::BF16:
        return launch_split<K, V, S, __nv_bfloat16>(p, rows, compact_allowed, stream);
      case EntryType::FP32:
        return launch_split<K, V, S, float>(p, rows, compact_allowed, stream);
      default:
        throw std::invalid_argument("gdn_decode_kvbuffer: unsupported entry type");
    }
  }
  switch (p.entry) {
    case EntryType::BF16:
      return raw ? launch_kvbuffer<K, V, S, __nv_bfloat16, true>(p, rows, stream)
                 : launch_kvbuffer<K, V, S, __nv_bfloat16, false>(p, rows, stream);
    case EntryType::FP32:
      return raw ? launch_kvbuffer<K, V, S, float, true>(p, rows, stream)
                 : launch_kvbuffer<K, V, S, float, false>(p, rows, stream);
    default:
      throw std::invalid_argument("gdn_decode_kvbuffer: unsupported entry type");
  }
}

int single_kvbuffer_rows(const GdnStepIO& io, StateType state_type) {
  const int scale = rows_per_fp32_row(state_type);
  if (scale > 1) {
    const RowsRule wide{kSingleKVBufferRows.max_rows * scale, kSingleKVBufferRows.min_blocks_per_sm * scale};
    const int rows = choose_rows_per_block(io, wide);
    if (rows == wide.max_rows) return rows;
  }
  return choose_rows_per_block(io, kSingleKVBufferRows);
}

// Whether this launch takes the split path, and its rows per block.
struct LaunchShape {
  bool split;
  int rows;
};
bool split_possible(const GdnKVBufferParams& p) {
  return p.variant == BufferVariant::CachedU && p.row_fill && p.scratch;
}
// Capacity 1 (header, "Capacity 1"): the recurrent kernels, where the row metadata gives has_state.
bool capacity1_route(const GdnKVBufferParams& p) {
  return p.capacity == 1 && p.row_has_state && p.path == DecodePath::Auto;
}
LaunchShape launch_shape(const GdnKVBufferParams& p, int split_min_capacity) {
  const bool split = p.path == DecodePath::Split ||
                     (p.path == DecodePath::Auto && split_possible(p) && p.io.batch >= kSplitMinBatch &&
                      p.capacity >= split_min_capacity);
  // Rows per block that fit the device's shared memory per block (sim/launch_rules.h:
  // rows_within_smem; an explicit io.rows_per_block is kept as given).
  const DeviceLimits& d = device_limits();
  if (split) {
    const int rows = choose_rows_per_block(p.io, split_state_rows(p.capacity));
    if (p.io.rows_per_block) return {split, rows};
    return {split, rows_within_smem(rows, 16, [&](int r) {
              return split_state_smem_bytes(p.io.K, p.capacity, r, state_type_bytes(p.state_type), entry_bytes(p)) +
                     kSplitStateStaticSmemBound;
            }, d)};
  }
  const int rows = single_kvbuffer_rows(p.io, p.state_type);
  if (p.io.rows_per_block) return {split, rows};
  return {split, rows_within_smem(rows, 16, [&](int r) { return kvbuffer_smem_layout(p, r).bytes; }, d)};
}

void run_kvbuffer(const GdnKVBufferParams& p, cudaStream_t stream, const char* who, int split_min_capacity,
                  bool direct_entry) {
  validate_step_io(p.io, who, false);
  auto fail = [&](const std::string& m) { throw std::invalid_argument(std::string(who) + ": " + m); };
  if (p.capacity < 1 || p.capacity > kMaxCapacity)
    fail("unsupported capacity " + std::to_string(p.capacity) + " (1.." + std::to_string(kMaxCapacity) + ")");
  if (!p.state || !p.buf_k || !p.buf_val || !p.buf_gcum)
    fail("state, buf_k, buf_val and buf_gcum must be set");
  if (bool(p.row_fill) != bool(p.row_has_state)) fail("give both row_fill and row_has_state, or neither");
  if (!p.row_fill && !(p.fill && p.has_state && p.done_count))
    fail("without row_fill/row_has_state, fill, has_state and done_count must be set");
  if (p.variant == BufferVariant::Raw && !p.buf_beta) fail("the raw variant needs buf_beta");
  if (p.path == DecodePath::Split && !split_possible(p))
    fail("the split path needs the cached-u variant, row_fill/row_has_state and scratch");
  if (p.split_row_groups < 0) fail("split_row_groups must be >= 0");
  if (direct_entry && p.every_row_has_state) fail("every_row_has_state contradicts direct mode");
  if (p.io.batch == 0) return;
  if (capacity1_route(p)) return run_kvbuffer_capacity1(p, stream, who);
  const LaunchShape shape = launch_shape(p, split_min_capacity);
  dispatch_state_type(who, p.state_type, [&](auto tag) {
    using S = typename decltype(tag)::type;
    dispatch_head_dims(who, p.io.K, p.io.V, [&](auto K, auto V) {
      dispatch_entry<K, V, S>(p, shape.rows, shape.split, direct_entry, stream);
    });
  });
}

}  // namespace gdn_detail

void gdn_decode_kvbuffer(const GdnKVBufferParams& p, cudaStream_t stream) {
  gdn_detail::run_kvbuffer(p, stream, "gdn_decode_kvbuffer", gdn_detail::kSplitMinCapacityKVBuffer, false);
}

void gdn_decode_direct(const GdnKVBufferParams& p, cudaStream_t stream) {
  gdn_detail::run_kvbuffer(p, stream, "gdn_decode_direct", gdn_detail::kSplitMinCapacityDirect, true);
}

int gdn_decode_kvbuffer_rows_per_block(const GdnKVBufferParams& p) {
  if (gdn_detail::capacity1_route(p)) return gdn_detail::recurrent_rows(p.io);
  return gdn_detail::launch_shape(p, gdn_detail::kSplitMinCapacityKVBuffer).rows;
}

int gdn_decode_direct_rows_per_block(const GdnKVBufferParams& p) {
  if (gdn_detail::capacity1_route(p)) return gdn_detail::recurrent_rows(p.io);
  return gdn_detail::launch_shape(p, gdn_detail::kSplitMinCapacityDirect).rows;
}

int gdn_decode_direct_row_groups(const GdnKVBufferParams& p) {
  using namespace gdn_detail;
  if (capacity1_route(p)) return 0;
  const LaunchShape shape = launch_shape(p, kSplitMinCapacityDirect);
  if (!shape.split) return 0;
  const bool bf16 = p.entry == EntryType::BF16;
  const char* who = "gdn_decode_direct_row_groups";
  return dispatch_state_type(who, p.state_type, [&](auto tag) {
    using S = typename decltype(tag)::type;
    return dispatch_head_dims(who, p.io.K, p.io.V, [&](auto K, auto V) {
      return bf16 ? split_state_row_groups<K, V, S, __nv_bfloat16>(p, shape.rows, true)
                  : split_state_row_groups<K, V, S, float>(p, shape.rows, true);
    });
  });
}

}  // namespace kvbuf
