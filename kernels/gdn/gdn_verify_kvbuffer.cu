// KVBuffer speculative verify for Gated DeltaNet, chains and trees (docs/kvbuffer-math.md
// sections 3, 5, 6), and its commit.
//
// Math, per request and value head, checkpoint S0 (K x V), n buffered entries (k_j, u_j, G_j),
// window nodes t = 1..T with parents p(t) (0 = the end of the buffer), G_t = G_p(t) + g_t:
//   a_t = S0^T k_t,  b_t = S0^T q_t                     (2T products from ONE read of S0)
//   u_t = beta_t (v_t - e^{G_t} a_t - sum_{j<=n} e^{G_t-G_j} (k_j.k_t) u_j
//                                   - sum_{s in anc(t)} e^{G_t-G_s} (k_s.k_t) u_s)
//   o_t = e^{G_t} b_t + sum_{j<=n} e^{G_t-G_j} (k_j.q_t) u_j + sum_{s in anc(t)+t} e^{G_t-G_s} (k_s.q_t) u_s
// The ancestor sums are a T x T forward substitution (a chain: anc(t) = 1..t-1). Every exponent is
// <= 0. No state is written, except when n > 0 and n + depth >= C: then the n entries are folded
// first, S0 <- e^{G_n} S0 + sum_j e^{G_n - G_j} k_j u_j^T, in registers (S0 written back once),
// and the window starts from an empty buffer.
// Commit: append the m accepted nodes' (k, u, G) at fill; the buffer can only become full when
// T == C (then all C entries are folded instead, fill 0), so 0 <= fill < C holds between steps as
// the decode kernel expects (protocol in gdn_verify.h).
//
// Layouts (sim/layout.h): S: [slots, HV, V, K] state dtype (fp32, bf16 or fp16), K contiguous;
// buf_k [slots, C, H, K], buf_val (u) [slots, C, HV, V] in the entry type E (bf16 or fp32);
// buf_gcum [slots, C, HV] fp32;
// q, k [B, T, H, K], v [B, T, HV, V] bf16; g, beta [B, T, HV] fp32; out [B, T, HV, V] bf16;
// scratch win_k [B, T, H, K] E, win_u [B, T, HV, V] E, win_gcum [B, T, HV] fp32, win_base [B, 2].
// Launch: grid (V / 64 tiles x value heads per key head, key heads, batch rows); block: 64 rows of
// one value head, 128 threads (4 lanes per row, 2 rows per thread: kernel below), 4 block
// barriers, shared memory VerifySmem (gdn_launch_shape.h: the (K, TMAX) regions at compile-time
// offsets, the C regions after them; buffer keys read as landed, in the entry type). Every warp
// computes the window's tree for itself. The key dot products, the row products S0^T [k | q], the
// fold and (bf16 entries) the buffer terms run on the tensor cores (m16n8k8 TF32, fp32 operands
// split hi + lo, 16-bit states exact in TF32: mma.h).
// State dtype (docs/kvbuffer-math.md section 11): S0 is read in its type and computed with in fp32;
// a fold (the verify's, the commit's) rounds S0 once to nearest where it writes it, and the
// verify's products after its fold use the rounded S0 (the registers take the value written), as
// the next step would read it. Template parameter S: float, __nv_bfloat16 or __half
// (GdnVerifyKVBufferParams::state_type through dispatch_state_type).
// Candidates' u are rounded to E before later nodes use them, so a verified window rounds where
// the same tokens would in successive decode steps. A model step runs every layer's verify, then
// one commit of all layers; each kernel is a programmatic dependent of the kernel before it.
//
// Current result (cd0cea7b8014, the paper preset's GDN KVBuffer rows, results/verify_h200.csv; H200,
// Qwen3-Next shapes H=16 HV=32 K=V=128, 36 layer pools in one CUDA graph, every layer's verify then
// one commit of all layers, median; the board at its 700 W cap from batch 128): T = 4 at batch 128
// 108.85 us [C = 16], 3.18x the in-place classic (345.88) and 4.42x classic verify + copy commit
// (481.66); T = 5 5.36 / 118.50 / 221.71 us at batch 1 / 128 / 256 [C = 16]. Earlier (d72f6732a6c6):
// T = 4 at 128 120.84 us; T = 5 6.53 / 132.54 / 259.42. Measured again at b577b47 (before v20, one
// call, log v19), C = 16, batch 1 / 8 / 64 / 128 / 256 / 512: T = 5 6.55 / 15.94 / 70.34 / 135.06 /
// 264.21 / 535.16 us, T = 4 5.38 / 14.16 / 60.78 / 119.22 / 230.87 / 458.87 us.
// This body (variant 3 of v21) measured at f6f64f7, C = 16, fp32 states: T = 5 6.00 / 126.03 /
// 251.71 / 498.12 us at batch 1 / 128 / 256 / 512, T = 4 112.40 / 215.50 us at 128 / 256; bf16
// states: T = 4 100.59 / 194.91 us, T = 5 120.35 / 235.12 us at 128 / 256 (geomean 0.986 of v20's
// body at fp32, batch >= 64; 0.944 with bf16 states). This single path at a4bcb6550146: test_gdn_verify 48 cases passed, memcheck and racecheck clean; T = 4 105.40 / 209.51 us, T = 5 122.83 / 241.37 us at batch 128 / 256 (another board).
// Batch 1-64 with ready pools (a step's layers after the first) read the pools before the wait
// (6f21914, one call, against 0408d15): T = 5 5.38 / 11.49 / 64.90 us at batch 1 / 8 / 64 (were
// 6.02 / 15.03 / 65.62), T = 4 4.13 / 9.74 / 54.57; the two orders are two instantiations since
// be3f7d5 (notes, "pools before the wait"; its pools-first kernels not yet run on a GPU).
// Split path (v22, DecodePath::Split; Auto from T = 5 where the grid is more than 8 waves): a
// coefficient kernel per (row, key head) computes the tree, norms, key dot products and every
// coefficient once (gdn_verify_kvbuffer_coef_kernel, a record per (row, value head)), and this kernel
// (kSplit) runs phases 1-3 and 6-8 on them. Measured before the rule (notes, v22): T = 5, fp32 states,
// 121.70 / 232.79 / 457.87 us at batch 128 / 256 / 512 against 126.71 / 249.93 / 497.00 for the single
// kernel in the same call; the coefficient kernel itself takes ~20 us of that at batch 128 (ncu).
// As the dispatch runs it at 58d2f8e (results/gdn_verify_paths_h200.csv, one call at the power cap,
// after v23's leaner coefficient kernel, ~19 us at ncu's clock): T = 5 115.36 / 224.24 / 441.99 us
// (fp32) and 109.53 / 207.66 / 407.48 (bf16) at batch 128 / 256 / 512; the single kernel 126.66 /
// 245.38 / 493.15 and 120.39 / 231.28 / 459.19 in the same call.
// Performance log v1..v25 (prediction first where one was made): kernels/gdn/notes/gdn_verify_kvbuffer.md
// ("log vN" in the comments below).
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/common/common.cuh"
#include "kernels/gdn/gdn_verify.h"
#include "kernels/gdn/gdn_verify_device.h"
#include "kernels/common/mma.h"

namespace kvbuf {
namespace {

using namespace gdn_verify_detail;

// The kernels' parameter: GdnVerifyKVBufferParams less state_type (their element type S), so that
// the parameter block and the commit's layer table (192-byte layers) are what they were before
// 16-bit states, and so is the fp32 kernels' SASS. The state pointer stays float* (the kernels cast
// it to S*): as void* it changed the fp32 kernels' address arithmetic (so it did in the classic
// verify).
struct KVBufferArgs {
  GdnVerifyIO io;
  EntryType entry;
  int capacity;
  float* state;
  void* buf_k;
  void* buf_val;
  float* buf_gcum;
  int32_t* fill;
  int32_t* has_state;
  void* win_k;
  void* win_u;
  float* win_gcum;
  int32_t* win_base;
  VerifyAccept accept;
};
static_assert(sizeof(KVBufferArgs) == 192, "the parameter block before 16-bit states");
static_assert(LayerTable<KVBufferArgs>::kMaxLayers == kGdnVerifyCommitLayersPerLaunch, "layers per commit launch");
KVBufferArgs kvbuffer_args(const GdnVerifyKVBufferParams& p) {
  return {p.io,        p.entry, p.capacity, static_cast<float*>(p.state), p.buf_k,    p.buf_val, p.buf_gcum,
          p.fill,      p.has_state, p.win_k, p.win_u,                      p.win_gcum, p.win_base, p.accept};
}

// The launch shape (kVerifyThreads), operand B's tiles and the shared-memory carve-up (VerifySmem):
// kernels/gdn/gdn_launch_shape.h.

// Block: kRows = 64 rows of one value head of one request; LN = kLanesPerRow lanes share each
// row and every thread holds RPT = kRowsPerThread rows (NT = 64 LN / RPT threads): thread = lane
// group g (threadIdx.x / LN), part p (threadIdx.x % LN), rows r_k = g + k 64/RPT, each row's float4
// chunks f = LN i + p (i < K / 4LN) in registers. The LN lanes of a row read LN 16 B pieces side by
// side; every shared-memory key or query chunk a thread loads serves its RPT rows; each dot product
// is reduced over LN lanes (log2 LN shuffles). After the reduction the lanes of a group split its
// rows, LN/RPT lanes per row (row r_own), compute that row's outputs, and the first of them writes
// them.
// Phases, marked in the body (4 block barriers: after the window lands, after the buffer lands,
// after phase 5's partial sums, after the coefficients):
//   1 coordinates and slot (padding rows write zeros and exit);
//   2 issue: window tokens and gates (cp.async group 1), S0 rows into registers, buffer entries
//     (group 2);
//   3 window operand B and norm scales, while the buffer is in flight;
//   4 every warp: the window's tree, the fold decision, G_t (no barrier: each warp has its own);
//   5 key dot products (tensor cores, buffer keys read as landed) into the coefficients wu, wo
//     (buffer) and s_cu, s_co (window);
//   6 fold of the buffer into S0 when n + depth >= C (tensor cores for bf16), written back once;
//   7 row products S0^T [k | q] and buffer terms (tensor cores), merged, gathered per row;
//   8 the window's forward substitution: u_t, o_t per row, outputs and candidate u;
//   9 scratch for the commit: window keys, G_t, the row's base.
// The phases stay in the kernel body: as __device__ __forceinline__ functions they change the
// measured SASS (phase 9: registers and spills, "Readable rewrite" in the notes; v21's single path
// with phases 3 and 9 as functions: +12 to +38 instructions at the sweep's shapes, phase 3 alone
// +26 at T = 5 with a bf16 state: log v21).
// Every (K, TMAX, entry, state) instantiation has this one body and layout: the layout's regions
// sized by (K, TMAX) sit at compile-time offsets, those sized by the run-time C after them.
// Three choices of v21 (log v21) hold for every instantiation (K = 64, 128, every TMAX, both entry
// and all state dtypes):
//   phase 7, 16-bit states: a bf16 or fp16 S0 is exact in TF32, before and after a fold (the fold
//     leaves the rounded values in x), so it takes one product per k-step instead of the hi + lo
//     split's two (whose lo parts would be zeros);
//   phase 7's merge reads one factor per operand column, e^{G_t} times the column's norm scale (zero
//     for absent tokens and padding), written once by warp 0 in phase 4 (s_colf);
//   phase 8 reads the substitution's coefficients as rows of 16-byte vectors (row t: column t of the
//     window coefficients, s_cu for u (s < t), s_co for o (s <= t), padded to CP), written so by
//     phase 5's epilogue.
template <int KD, int TMAX, class E, class S, bool kPoolsFirst, bool kSplit>
__global__ void __launch_bounds__(kVerifyThreads, 5) gdn_verify_kvbuffer_kernel(const KVBufferArgs p, const float* coef) {
  static_assert(!(kPoolsFirst && kSplit), "the split path's state kernel waits for the coefficient kernel first");
  constexpr int LN = kLanesPerRow, RPT = kRowsPerThread;
  constexpr int NT = kVerifyThreads, NF = KD / (4 * LN), ROW_STEP = kRows / RPT;
  constexpr int ESZ = sizeof(E), E16 = 16 / ESZ;  // entries per 16-byte copy
  constexpr int NB = operand_cols(TMAX), NTILES = NB / 8, BP = operand_pitch(KD);  // tensor-core operand B
  const GdnVerifyIO& io = p.io;
  // Phase 1, coordinates. Grid (V tiles x value heads per key head, key heads, rows), so the coordinates take no runtime
  // division where the tile count is a power of 2 (V = 64, 128): five divisions had stood before
  // the first load of every block (log v16).
  const int tiles = io.V / kRows;
  int tile, sub, ratio;
  if ((tiles & (tiles - 1)) == 0) {
    const int tile_shift = __ffs(tiles) - 1;
    tile = blockIdx.x & (tiles - 1), sub = blockIdx.x >> tile_shift, ratio = gridDim.x >> tile_shift;
  } else {
    tile = blockIdx.x % tiles, sub = blockIdx.x / tiles, ratio = gridDim.x / tiles;
  }
  const int kh = blockIdx.y, h = kh * ratio + sub, row = blockIdx.z;
  const int v0 = tile * kRows;
  const int group = threadIdx.x / LN, part = threadIdx.x % LN;
  const int own = part / (LN / RPT), r = group + own * ROW_STEP;  // the row whose outputs this lane computes
  const bool writer = part % (LN / RPT) == 0;
  const int T = io.tokens, C = p.capacity;
  // A programmatic dependent of the kernel before it (the previous layer's verify or the previous
  // step's commit): launched while that kernel's last blocks run, it waits for its completion
  // before reading the window's inputs, and, unless that kernel writes none of the pools and the
  // dispatch took the pools-first instantiation (kPoolsFirst, where pools_ready_at_launch is set and
  // the grid is a few waves), before anything. The kernel after it (the next layer's verify, or the
  // commit) is in turn a programmatic dependent of this one: it starts as this grid's last wave runs
  // and waits (griddepcontrol.wait) for its completion.
  if constexpr (!kPoolsFirst) wait_prior_grid();
  allow_dependent_grids();
  const int slot = io.slot[row];
  if (slot < 0) {
    if constexpr (kPoolsFirst) wait_prior_grid();
    for (int i = threadIdx.x; i < T * kRows; i += NT)
      io.out[((size_t(row) * T + i / kRows) * io.HV + h) * io.V + v0 + i % kRows] = __float2bfloat16_rn(0.f);
    return;
  }
  extern __shared__ float4 smem4[];
  char* smem = reinterpret_cast<char*>(smem4);
  const VerifySmem L{KD, TMAX, C, ESZ};
  float* s_w = reinterpret_cast<float*>(smem + L.w());
  // The buffer keys as landed, in the entry type (padded rows), read so by phase 5 and the fold.
  constexpr int KEY_PITCH = VerifySmem::key_pitch(KD, ESZ);
  E* s_keys = reinterpret_cast<E*>(smem + L.keys());
  E* s_u = reinterpret_cast<E*>(smem + L.u());
  float *s_wu = reinterpret_cast<float*>(smem + L.wu()), *s_wo = reinterpret_cast<float*>(smem + L.wo());
  float *s_gbuf = reinterpret_cast<float*>(smem + L.gbuf()), *s_gwin = reinterpret_cast<float*>(smem + L.gwin());
  float* s_graw = reinterpret_cast<float*>(smem + L.graw());
  float* s_beta = reinterpret_cast<float*>(smem + L.beta());
  __nv_bfloat16* s_raw_kq = reinterpret_cast<__nv_bfloat16*>(smem + L.raw_kq());
  __nv_bfloat16* s_raw_v = reinterpret_cast<__nv_bfloat16*>(smem + L.raw_v());
  float* s_b = reinterpret_cast<float*>(smem + L.b());
  float* s_scale = reinterpret_cast<float*>(smem + L.scale());
  float* s_part = reinterpret_cast<float*>(smem + L.part());
  __shared__ int s_praw[TMAX];
  __shared__ unsigned s_anc[TMAX];
  // The window's substitution coefficients, row t = column t (s < t for u, s <= t for o) in
  // 16-byte rows of CP, and phase 7's column factors: static, sized by TMAX alone, as measured
  // (log v21; verify_static_smem_bytes bounds them with s_praw, s_anc).
  constexpr int CP = coef_pitch(TMAX);
  __shared__ __align__(16) float s_cu[TMAX * CP];
  __shared__ __align__(16) float s_co[TMAX * CP];
  __shared__ __align__(16) float s_colf[NB];
  // Split (kSplit, the state kernel after gdn_verify_kvbuffer_coef_kernel): the row's record
  // (VerifyCoefRecord) lands with the window, where phase 5's partial sums would be, and phases 7-8
  // read their coefficients from it; phases 4, 5 and 9 and phase 3's norms are that kernel's.
  constexpr VerifyCoefRecord kRec{TMAX, 0};
  const VerifyCoefRecord rec{TMAX, C};
  float* s_rec = s_part;
  const float* colf = kSplit ? s_rec + kRec.colf() : s_colf;
  const float* cu_rows = kSplit ? s_rec + kRec.cu() : s_cu;
  const float* co_rows = kSplit ? s_rec + kRec.co() : s_co;
  const float* wu_coef = kSplit ? s_rec + rec.wu() : s_wu;
  const float* wo_coef = kSplit ? s_rec + rec.wo() : s_wo;

  // Phase 2, issue. Every global read of the block is issued before the first one is consumed: the
  // window's tokens and gates (cp.async group 1, independent of the pools), then the state row
  // chunks (registers) and the n buffer entries (cp.async group 2); the window is prepared while
  // the buffer is still in flight. With ready pools the state and the entries go first, before the
  // wait for the kernel before, and the window after it (one group).
  if constexpr (!kPoolsFirst) {
    if constexpr (kSplit) {  // the record, in the window's copy group
      const float* src = coef + (size_t(row) * io.HV + h) * rec.floats();
      for (int c = threadIdx.x; c < rec.floats() / 4; c += NT) cp_async16(s_rec + 4 * c, src + 4 * c);
    }
    copy_window_kq_async<KD, NT>(io, row, kh, s_raw_kq);
    copy_window_v_async<NT>(io, row, h, v0, s_raw_v);
    copy_window_gates_async(io, row, h, s_graw, s_beta, s_praw);
    cp_async_commit();
  }
  const int n = p.fill[slot];
  const bool has_state = p.has_state[slot] != 0;
  S* state_rows = reinterpret_cast<S*>(p.state) + ((size_t(slot) * io.HV + h) * io.V + v0 + group) * KD;  // row k: + k ROW_STEP K
  float4 x[RPT][NF];
#pragma unroll
  for (int k = 0; k < RPT; ++k)
#pragma unroll
    for (int i = 0; i < NF; ++i)
      x[k][i] = has_state ? load_state4(state_rows + k * ROW_STEP * KD, LN * i + part)
                          : make_float4(0.f, 0.f, 0.f, 0.f);
  const E* buf_k = static_cast<const E*>(p.buf_k) + (size_t(slot) * C * io.H + kh) * KD;  // entry j: + j H K
  const E* buf_u = static_cast<const E*>(p.buf_val) + (size_t(slot) * C * io.HV + h) * io.V + v0;
  // Split: the keys serve only a fold, which needs n + depth >= C (depth <= T).
  const int keys_needed = !kSplit || n + T >= C ? n : 0;
  for (int c = threadIdx.x; c < keys_needed * (KD / E16); c += NT) {
    const int j = c / (KD / E16), e = (c % (KD / E16)) * E16;
    cp_async16(s_keys + j * KEY_PITCH + e, buf_k + size_t(j) * io.H * KD + e);
  }
  for (int c = threadIdx.x; c < n * (kRows / E16); c += NT) {
    const int j = c / (kRows / E16), e = (c % (kRows / E16)) * E16;
    cp_async16(s_u + j * kRows + e, buf_u + size_t(j) * io.HV * io.V + e);
  }
  if constexpr (!kSplit)
    for (int j = threadIdx.x; j < n; j += NT) cp_async4(s_gbuf + j, p.buf_gcum + (size_t(slot) * C + j) * io.HV + h);
  if constexpr (kPoolsFirst) {
    wait_prior_grid();
    copy_window_kq_async<KD, NT>(io, row, kh, s_raw_kq);
    copy_window_v_async<NT>(io, row, h, v0, s_raw_v);
    copy_window_gates_async(io, row, h, s_graw, s_beta, s_praw);
    cp_async_commit();
    cp_async_wait_group<0>();
  } else {
    cp_async_commit();
    cp_async_wait_group<1>();
  }
  __syncthreads();
  // Phase 3, window operand B. Tensor-core operand B and the norm scales in one pass: column c < T holds the raw key c,
  // column TMAX + t the raw query t (bf16 values, exact in TF32), the other columns zeros; the
  // products are scaled afterwards by s_scale (keys 0..T-1, then queries, q also by K^-0.5).
  // Warp w takes the columns w, w + 4, ... at once (independent shuffle reductions), lane l the
  // elements [l PL, (l + 1) PL). (It replaced normalised fp32 copies of the window and a separate
  // staging loop whose index arithmetic was half of this part's instructions: log v15.)
  {
    constexpr int PL = KD / 32, COLS = NB / kVerifyWarps;
    static_assert(NB % kVerifyWarps == 0 && (PL == 2 || PL == 4), "operand columns per warp, K = 64 or 128");
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float xs[COLS][PL], ss[COLS];
    int vec[COLS];
#pragma unroll
    for (int k = 0; k < COLS; ++k) {
      const int c = warp + k * kVerifyWarps;
      vec[k] = c < T ? c : (c >= TMAX && c < TMAX + T) ? T + c - TMAX : -1;
      ss[k] = 0.f;
#pragma unroll
      for (int i = 0; i < PL; ++i) xs[k][i] = 0.f;
      if (vec[k] >= 0) {
        const __nv_bfloat162* src = reinterpret_cast<const __nv_bfloat162*>(s_raw_kq + vec[k] * KD + lane * PL);
#pragma unroll
        for (int i = 0; i < PL / 2; ++i) {
          const float2 f = __bfloat1622float2(src[i]);
          xs[k][2 * i] = f.x, xs[k][2 * i + 1] = f.y;
        }
      }
#pragma unroll
      for (int i = 0; i < PL; ++i) ss[k] = fmaf(xs[k][i], xs[k][i], ss[k]);
    }
    if constexpr (!kSplit) {
#pragma unroll
      for (int off = 16; off > 0; off >>= 1)
#pragma unroll
        for (int k = 0; k < COLS; ++k) ss[k] += __shfl_xor_sync(0xffffffffu, ss[k], off);
    }
#pragma unroll
    for (int k = 0; k < COLS; ++k) {
      float* dst = s_b + (warp + k * kVerifyWarps) * BP + lane * PL;
      if constexpr (PL == 4) *reinterpret_cast<float4*>(dst) = make_float4(xs[k][0], xs[k][1], xs[k][2], xs[k][3]);
      else *reinterpret_cast<float2*>(dst) = make_float2(xs[k][0], xs[k][1]);
      if (!kSplit && vec[k] >= 0 && lane == 0) s_scale[vec[k]] = window_norm_scale<KD>(ss[k], vec[k] >= T);
    }
  }
  // Phase 4, the window's tree, the fold decision and G_t, lane t = node t, once the buffer has
  // landed: every warp computes them for itself, so no barrier follows; warp 0 stores them for the
  // phases after phase 5's barrier.
  cp_async_wait_group<0>();
  __syncthreads();
  // Split: the record says whether the buffer folds first and what stays buffered (n_eff); phases 4
  // and 5 are the coefficient kernel's, and the fold makes its weights where it reads them.
  int n_eff;
  bool fold;
  if constexpr (kSplit) {
    n_eff = __float_as_int(s_rec[0]);
    fold = __float_as_int(s_rec[1]) != 0;
  } else {
  const WindowNode node = window_node<TMAX>(T, io.parents ? s_praw : nullptr);
  fold = verify_folds_first(C, node.depth, n);
  {
    const int t = threadIdx.x & 31;
    const float g_base = (!fold && n > 0) ? s_gbuf[n - 1] : 0.f;
    const float G = window_gcum<TMAX>(g_base, t < T ? s_graw[t] : 0.f, node.anc);
    const float e_g = expf(G);
    if (threadIdx.x < T) {
      s_anc[t] = node.anc;
      s_gwin[t] = G;
    }
    {  // column c's factor e^{G_t} scale_c for phase 7's merge, c = t (key) or TMAX + t (query)
      const int tc = t < TMAX ? t : t - TMAX;
      const float e_gc = __shfl_sync(0xffffffffu, e_g, tc < TMAX ? tc : 0);
      if (threadIdx.x < NB)
        s_colf[t] = t < 2 * TMAX && tc < T ? e_gc * s_scale[t < TMAX ? tc : T + tc] : 0.f;
    }
  }
  n_eff = fold ? 0 : n;
  if (fold) {  // fold weights w_j[r] = e^{G_n - G_j} u_j[r]
    const float g_n = s_gbuf[n - 1];
    for (int idx = threadIdx.x; idx < n * kRows; idx += NT)
      s_w[idx] = expf(g_n - s_gbuf[idx / kRows]) * to_f32(s_u[idx]);
  }
  // Phase 5, key dot products on the tensor cores: D [rows, NB] = A [rows, K] x B [K, NB] with B the raw
  // window keys and queries of the row products below, and A's rows the n_eff buffer keys (bf16
  // entries are exact in TF32: one product; fp32 entries are split) then the T raw window keys,
  // in 16-row tiles. Split over K: warp w takes the 16-column chunks w, w + 4, ... of every tile
  // (a short chain of dependent products per warp, all warps busy), with the same K permutation
  // as the row products below (lane (g, t) loads 16-byte pieces of rows g and g + 8 at columns
  // 16 i + 4 t), and stores its partial sums; after the barrier each thread adds the partials of
  // a (row, column) pair, scales and decays them into wu, wo (buffer entry j, token t) or, row t
  // per token, s_cu, s_co (node s, token t, ancestors and s = t only).
  const int key_rows = n_eff + T, key_tiles = (key_rows + 15) / 16;
  {
    // Operand A's row R from column 16 i + 4 tq: a landed buffer key (R < n_eff) or a raw window
    // key (operand B's rows), read as fp32; rows past key_rows read zeros.
    struct ARows {
      const E* key[2];
      const float* win[2];
      bool live[2], buf[2];
    };
    const auto a_rows = [&](int mt, int g, int tq) {
      ARows a;
#pragma unroll
      for (int h8 = 0; h8 < 2; ++h8) {
        const int R = mt * 16 + g + 8 * h8;
        a.live[h8] = R < key_rows;
        a.buf[h8] = R < n_eff;
        a.key[h8] = s_keys + (a.buf[h8] ? R : 0) * KEY_PITCH + 4 * tq;
        a.win[h8] = s_b + (a.live[h8] && !a.buf[h8] ? R - n_eff : 0) * BP + 4 * tq;
      }
      return a;
    };
    const auto a_load = [](const ARows& a, int h8, int i) {
      return !a.live[h8] ? make_float4(0.f, 0.f, 0.f, 0.f) : a.buf[h8] ? load4(a.key[h8] + 16 * i) : load4(a.win[h8] + 16 * i);
    };
    constexpr bool kExactKeys = sizeof(E) == 2;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, tq = lane % 4;
    float* part = s_part + warp * L.key_rows_pad() * NB;
    for (int mt = 0; mt < key_tiles; ++mt) {
      const ARows a = a_rows(mt, g, tq);
      float d[NTILES][4];
#pragma unroll
      for (int nt = 0; nt < NTILES; ++nt) d[nt][0] = d[nt][1] = d[nt][2] = d[nt][3] = 0.f;
#pragma unroll
      for (int i = warp; i < NF; i += kVerifyWarps) {
        const float4 r0 = a_load(a, 0, i), r1 = a_load(a, 1, i);
#pragma unroll
        for (int nt = 0; nt < NTILES; ++nt) {
          const float4 bf = *reinterpret_cast<const float4*>(s_b + (nt * 8 + g) * BP + 4 * tq + 16 * i);
          // A window row (raw bf16 key) is exact either way; split only for fp32 buffer keys.
          mma_tf32_a<kExactKeys>(d[nt], r0.x, r1.x, r0.y, r1.y, bf.x, bf.y);
          mma_tf32_a<kExactKeys>(d[nt], r0.z, r1.z, r0.w, r1.w, bf.z, bf.w);
        }
      }
#pragma unroll
      for (int nt = 0; nt < NTILES; ++nt) {
        float* p0 = part + (mt * 16 + g) * NB + nt * 8 + 2 * tq;
        *reinterpret_cast<float2*>(p0) = make_float2(d[nt][0], d[nt][1]);
        *reinterpret_cast<float2*>(p0 + 8 * NB) = make_float2(d[nt][2], d[nt][3]);
      }
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < key_rows * 2 * TMAX; idx += NT) {
    const int R = idx / (2 * TMAX), c = idx % (2 * TMAX);
    const bool is_q = c >= TMAX;
    const int t = is_q ? c - TMAX : c;
    if (t >= T) continue;
    float dot = 0.f;
#pragma unroll
    for (int w = 0; w < kVerifyWarps; ++w) dot += s_part[(w * L.key_rows_pad() + R) * NB + c];
    dot *= s_scale[is_q ? T + t : t];
    if (R < n_eff) {
      const float decay = expf(s_gwin[t] - s_gbuf[R]);
      (is_q ? s_wo : s_wu)[R * TMAX + t] = decay * dot;
    } else {
      const int sn = R - n_eff;
      const bool needed = ((s_anc[t] >> sn) & 1u) || sn == t;
      const float v = needed ? expf(s_gwin[t] - s_gwin[sn]) * dot * s_scale[sn] : 0.f;
      if (is_q) s_co[t * CP + sn] = v;
      else s_cu[t * CP + sn] = sn != t ? v : 0.f;
    }
  }
  __syncthreads();
  }

  if (fold) {  // Phase 6, fold: S0 <- e^{G_n} S0 + sum_j w_j[r] k_j, written back once
    const float e_gn = kSplit ? s_rec[2] : expf(s_gbuf[n - 1]);
    // w_j[r] = e^{G_n - G_j} u_j[r]: made above (s_w), or here from the record's decays (split).
    const auto w_at = [&](int j, int r) {
      return kSplit ? s_rec[rec.fdecay() + j] * to_f32(s_u[j * kRows + r]) : s_w[j * kRows + r];
    };
#pragma unroll
    for (int k = 0; k < RPT; ++k)
#pragma unroll
      for (int i = 0; i < NF; ++i) x[k][i] = scale4(e_gn, x[k][i]);
    if constexpr (sizeof(E) == 2) {
      // On the tensor cores (bf16 keys are exact in TF32; the weights are split): per warp,
      // D [16 rows, K] = W [16 rows, n] x keys [n, K] in k-steps of 8 entries, added to x. n-tile
      // (i, hh) takes the columns 16 i + 4 (c / 2) + 2 hh + c % 2 (c = 0..7), so lane (g, t) gets
      // rows g (x[0]) and g + 8 of the fragment (x[1], block row + 32) at columns 16 i + 4 t + 2 hh,
      // + 1: the .x, .y (hh = 0) or .z, .w (hh = 1) of its own float4s. D starts from zero and is
      // added by FADDs: accumulating into x itself would ask ptxas for x's registers in fragment
      // order, against the float4 order of the state loads, and it then serialised those loads
      // (06afc09: T = 4 at batch 128, C = 8 138.5 -> 162.9 us).
      const int g = group % 8;
      for (int ks = 0; ks < (n + 7) / 8; ++ks) {
        const int j0 = 8 * ks + part, j1 = j0 + 4;
        const Tf32Split a = tf32_split(j0 < n ? w_at(j0, group) : 0.f, j0 < n ? w_at(j0, group + ROW_STEP) : 0.f,
                                       j1 < n ? w_at(j1, group) : 0.f, j1 < n ? w_at(j1, group + ROW_STEP) : 0.f);
        const E* key0 = s_keys + j0 * KEY_PITCH + 4 * (g / 2) + g % 2;
        const E* key1 = s_keys + j1 * KEY_PITCH + 4 * (g / 2) + g % 2;
#pragma unroll
        for (int i = 0; i < NF; ++i) {
          float d0[4] = {0.f, 0.f, 0.f, 0.f}, d1[4] = {0.f, 0.f, 0.f, 0.f};
          mma_tf32x2(d0, a, j0 < n ? to_f32(key0[16 * i]) : 0.f, j1 < n ? to_f32(key1[16 * i]) : 0.f);
          mma_tf32x2(d1, a, j0 < n ? to_f32(key0[16 * i + 2]) : 0.f, j1 < n ? to_f32(key1[16 * i + 2]) : 0.f);
          x[0][i].x += d0[0], x[0][i].y += d0[1], x[0][i].z += d1[0], x[0][i].w += d1[1];
          x[1][i].x += d0[2], x[1][i].y += d0[3], x[1][i].z += d1[2], x[1][i].w += d1[3];
        }
      }
    } else {
      for (int j = 0; j < n; ++j) {
        float wj[RPT];
#pragma unroll
        for (int k = 0; k < RPT; ++k) wj[k] = w_at(j, group + k * ROW_STEP);
        const float4* key = reinterpret_cast<const float4*>(s_keys + j * KEY_PITCH);
#pragma unroll
        for (int i = 0; i < NF; ++i) {
          const float4 kf = key[LN * i + part];
#pragma unroll
          for (int k = 0; k < RPT; ++k) x[k][i] = axpy4(wj[k], kf, x[k][i]);
        }
      }
    }
    // Written back once, rounded to S (16-bit); x keeps the rounded S0 for the products below.
#pragma unroll
    for (int k = 0; k < RPT; ++k)
#pragma unroll
      for (int i = 0; i < NF; ++i) store_state4(state_rows + k * ROW_STEP * KD, LN * i + part, x[k][i]);
  }
  const bool have_s0 = has_state || fold;

  // Phase 7, row products: a_t = S0^T k_t (column c = t) and b_t = S0^T q_t (c = TMAX + t) on the tensor cores: per warp
  // D [16 rows, NB columns] = S0 rows [16, K] x B [K, NB]. The thread layout above already is the
  // A fragment layout once K is permuted within each 16-column chunk i (the product sums over K,
  // so any permutation shared by A and B is exact): lane (g, t) holds float4 x[0][i] of row g and
  // x[1][i] of row g + 8 at columns 16 i + 4 t .. + 3; k-step 2i takes their .x, .y as logical
  // columns t, t + 4, k-step 2i + 1 their .z, .w, and the B fragment is the same float4 of the
  // B row g. The sums are scaled and merged with the buffer terms below, then each thread gathers
  // its own row's 2 TMAX values from its quad.
  static_assert(LN == 4 && RPT == 2 && ROW_STEP == 32, "the A fragment layout needs 4 lanes x 2 rows, rows g and g + 32");
  // The buffer terms su_t[r] = sum_j wu[j][t] u_j[r], so_t[r] = sum_j wo[j][t] u_j[r] for bf16
  // entries on the tensor cores as well, into the same fragment layout: per warp D [16 rows, NB] =
  // U [16 rows, n_eff] (the u tile, exact in TF32) x [wu | wo] [n_eff, NB] (split hi + lo), in
  // k-steps of 8 entries. Each lane then merges both products of its fragment columns,
  //   e_c = e^{G_t} scale_c (S0^T [k|q])_c + (su | so)_c,
  // so the gather below moves one value per column: xv_t = v - e_t, o_t = e_{TMAX+t} + ...
  constexpr bool kMmaBufferTerms = sizeof(E) == 2;
  float d[NTILES][4], db[NTILES][4];
#pragma unroll
  for (int nt = 0; nt < NTILES; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) d[nt][e] = db[nt][e] = 0.f;
  if (have_s0) {
    // The hi and lo products accumulate in separate fragments (db holds the lo sums until the
    // buffer terms): two chains of dependent products per n-tile instead of one of twice the length.
    const float* b_row = s_b + (group % 8) * BP + 4 * part;
#pragma unroll
    for (int i = 0; i < NF; ++i) {
#pragma unroll
      for (int nt = 0; nt < NTILES; ++nt) {
        const float4 bf = *reinterpret_cast<const float4*>(b_row + nt * 8 * BP + 16 * i);
        if constexpr (sizeof(S) == 2) {  // exact in TF32: one product, the two k-steps in the two chains
          mma_tf32(d[nt], __float_as_uint(x[0][i].x), __float_as_uint(x[1][i].x), __float_as_uint(x[0][i].y),
                   __float_as_uint(x[1][i].y), bf.x, bf.y);
          mma_tf32(db[nt], __float_as_uint(x[0][i].z), __float_as_uint(x[1][i].z), __float_as_uint(x[0][i].w),
                   __float_as_uint(x[1][i].w), bf.z, bf.w);
        } else {
          const Tf32Split a0 = tf32_split(x[0][i].x, x[1][i].x, x[0][i].y, x[1][i].y);
          const Tf32Split a1 = tf32_split(x[0][i].z, x[1][i].z, x[0][i].w, x[1][i].w);
          mma_tf32(db[nt], a0.lo[0], a0.lo[1], a0.lo[2], a0.lo[3], bf.x, bf.y);
          mma_tf32(d[nt], a0.hi[0], a0.hi[1], a0.hi[2], a0.hi[3], bf.x, bf.y);
          mma_tf32(db[nt], a1.lo[0], a1.lo[1], a1.lo[2], a1.lo[3], bf.z, bf.w);
          mma_tf32(d[nt], a1.hi[0], a1.hi[1], a1.hi[2], a1.hi[3], bf.z, bf.w);
        }
      }
    }
#pragma unroll
    for (int nt = 0; nt < NTILES; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) d[nt][e] += db[nt][e], db[nt][e] = 0.f;
  }
  if constexpr (kMmaBufferTerms) {
    const int g = group % 8;
    for (int ks = 0; ks < (n_eff + 7) / 8; ++ks) {
      const int j0 = 8 * ks + part, j1 = j0 + 4;
      const float a0 = j0 < n_eff ? to_f32(s_u[j0 * kRows + group]) : 0.f;
      const float a1 = j0 < n_eff ? to_f32(s_u[j0 * kRows + group + ROW_STEP]) : 0.f;
      const float a2 = j1 < n_eff ? to_f32(s_u[j1 * kRows + group]) : 0.f;
      const float a3 = j1 < n_eff ? to_f32(s_u[j1 * kRows + group + ROW_STEP]) : 0.f;
#pragma unroll
      for (int nt = 0; nt < NTILES; ++nt) {
        // Column c = 8 nt + g of [wu | wo]; columns of absent tokens (t >= T) and padding are zero.
        const int c = 8 * nt + g, t = c < TMAX ? c : c - TMAX;
        const bool live = c < 2 * TMAX && t < T;
        const float* bcoef = (c < TMAX ? wu_coef : wo_coef) + t;
        const float b0 = live && j0 < n_eff ? bcoef[j0 * TMAX] : 0.f;
        const float b1 = live && j1 < n_eff ? bcoef[j1 * TMAX] : 0.f;
        const float b0_hi = __uint_as_float(__float_as_uint(b0) & 0xffffe000u), b1_hi = __uint_as_float(__float_as_uint(b1) & 0xffffe000u);
        const uint32_t ua0 = __float_as_uint(a0), ua1 = __float_as_uint(a1), ua2 = __float_as_uint(a2), ua3 = __float_as_uint(a3);
        mma_tf32(db[nt], ua0, ua1, ua2, ua3, b0 - b0_hi, b1 - b1_hi);
        mma_tf32(db[nt], ua0, ua1, ua2, ua3, b0_hi, b1_hi);
      }
    }
  }
#pragma unroll
  for (int nt = 0; nt < NTILES; ++nt) {
    const float2 f = *reinterpret_cast<const float2*>(colf + 8 * nt + 2 * part);
    d[nt][0] = fmaf(f.x, d[nt][0], db[nt][0]);
    d[nt][2] = fmaf(f.x, d[nt][2], db[nt][2]);
    d[nt][1] = fmaf(f.y, d[nt][1], db[nt][1]);
    d[nt][3] = fmaf(f.y, d[nt][3], db[nt][3]);
  }
  float e_row[2 * TMAX];  // row r_own's merged sums
  const int quad = (threadIdx.x & 31) & ~3;
#pragma unroll
  for (int c = 0; c < 2 * TMAX; ++c) {
    const int nt = c / 8, src = quad + (c % 8) / 2, par = c % 2;
    const float row0 = __shfl_sync(0xffffffffu, d[nt][par], src);
    const float row1 = __shfl_sync(0xffffffffu, d[nt][2 + par], src);
    e_row[c] = own ? row1 : row0;
  }
  if constexpr (!kMmaBufferTerms) {
#pragma unroll 4
    for (int j = 0; j < n_eff; ++j) {
      const float uj = to_f32(s_u[j * kRows + r]);
#pragma unroll
      for (int t = 0; t < TMAX; ++t) {
        e_row[t] = fmaf(wu_coef[j * TMAX + t], uj, e_row[t]);
        e_row[TMAX + t] = fmaf(wo_coef[j * TMAX + t], uj, e_row[TMAX + t]);
      }
    }
  }
  // Phase 8, the window's forward substitution per row.
  E* win_u = static_cast<E*>(p.win_u);
  float u[TMAX];
  // Token t's output index as a base plus t strides (with the vector loads below ptxas recomputed
  // the full product per token: 37 more instructions at T = 5, log v21).
  const size_t tok0 = (size_t(row) * T * io.HV + h) * io.V + v0 + r, tok_stride = size_t(io.HV) * io.V;
#pragma unroll
  for (int t = 0; t < TMAX; ++t) {
    u[t] = 0.f;
    if (t < T) {
      const size_t tok = tok0 + t * tok_stride;
      float cu[CP], co[CP];  // coefficients of column t, s = 0 .. t - 1 (u) and 0 .. t (o)
#pragma unroll
      for (int q4 = 0; q4 < CP / 4; ++q4) {
        if (4 * q4 < t) *reinterpret_cast<float4*>(cu + 4 * q4) = *reinterpret_cast<const float4*>(cu_rows + t * CP + 4 * q4);
        if (4 * q4 <= t) *reinterpret_cast<float4*>(co + 4 * q4) = *reinterpret_cast<const float4*>(co_rows + t * CP + 4 * q4);
      }
      float xv = __bfloat162float(s_raw_v[t * kRows + r]) - e_row[t];
#pragma unroll
      for (int s = 0; s < t; ++s) xv = fmaf(-cu[s], u[s], xv);
      u[t] = round_to<E>(s_beta[t] * xv);
      float o = e_row[TMAX + t];
#pragma unroll
      for (int s = 0; s <= t; ++s) o = fmaf(co[s], u[s], o);
      if (writer) {
        io.out[tok] = __float2bfloat16_rn(o);
        win_u[tok] = from_f32<E>(u[t]);
      }
    }
  }

  if (!kSplit && tile == 0) {  // Phase 9, scratch for the commit (split: the coefficient kernel's)
    if (sub == 0) {
      E* win_k = static_cast<E*>(p.win_k);
      for (int idx = threadIdx.x; idx < T * KD; idx += NT)
        win_k[((size_t(row) * T + idx / KD) * io.H + kh) * KD + idx % KD] = from_f32<E>(s_b[(idx / KD) * BP + idx % KD] * s_scale[idx / KD]);
    }
    if (threadIdx.x < T) p.win_gcum[(size_t(row) * T + threadIdx.x) * io.HV + h] = s_gwin[threadIdx.x];
    if (h == 0 && threadIdx.x == 0) {
      p.win_base[2 * row] = n_eff;
      p.win_base[2 * row + 1] = have_s0 ? 1 : 0;
    }
  }
}

// Split path, first kernel: what every block of one (request row, key head) of the fused kernel
// computes alike (V / 64 tiles x HV / H value heads: 4 blocks at Qwen3-Next shapes), computed once:
// the tree and the fold decision, the norm scales, the dot products of the n_eff buffer keys and the
// T window keys with the window's keys and queries, and from them, per value head, G_t, the merge's
// column factors, the window coefficients (cu, co), the buffer coefficients (wu, wo) and the fold's
// decays, as one record per (row, value head) (VerifyCoefRecord, gdn_launch_shape.h); and the
// commit's scratch (normalised window keys, G_t, the row's base) as the fused kernel's phase 9.
// The same formulas, operand layouts and tensor-core products as the fused kernel's phases 3-5.
// Grid (key heads, rows), 128 threads: warp w takes the norms of vectors w, w + 4, ..., the
// (16-row, 8-column) tiles w, w + 4, ... of the dot products, then the items w, w + 4, ... of the
// value heads (two per head: the window's part, the buffer's part; lane t = node t).
// A programmatic dependent of the kernel before it: with ready pools (pools_first) it reads slot,
// fill, the buffer keys and G before its wait, the window's inputs after it. The state kernel after
// it waits for its completion before reading anything.
constexpr int kCoefThreads = 128;
template <int KD, int TMAX, class E>
__global__ void __launch_bounds__(kCoefThreads, 12)
    gdn_verify_kvbuffer_coef_kernel(const KVBufferArgs p, float* coef, bool pools_first) {
  constexpr int NT = kCoefThreads, NW = NT / 32, PL = KD / 32, DP = 2 * TMAX, CP = coef_pitch(TMAX);
  constexpr int NB = operand_cols(TMAX), NTILES = NB / 8;
  constexpr int E16 = 16 / int(sizeof(E)), KP = VerifySmem::key_pitch(KD, int(sizeof(E))), WP = coef_window_pitch(KD);
  const GdnVerifyIO& io = p.io;
  const int kh = blockIdx.x, row = blockIdx.y, R = io.HV / io.H, T = io.tokens, C = p.capacity;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (!pools_first) wait_prior_grid();
  const int slot = io.slot[row];
  if (slot < 0) {
    if (pools_first) wait_prior_grid();
    allow_dependent_grids();
    return;
  }
  const int n = p.fill[slot];
  const bool has_state = p.has_state[slot] != 0;
  // Shared memory (verify_coef_smem_bytes): raw window keys and queries [2 TMAX, WP] bf16, buffer
  // keys [C, KP] E (padded rows, as the fused kernel's), dot products [C + TMAX, DP] (row: buffer
  // key j or window key s; column t: key t, TMAX + t: query t), norm scales [2 TMAX], gates [R,
  // TMAX], buffer G [R, C], parents [TMAX].
  extern __shared__ float4 smem4[];
  char* smem = reinterpret_cast<char*>(smem4);
  __nv_bfloat16* s_raw = reinterpret_cast<__nv_bfloat16*>(smem);
  E* s_keys = reinterpret_cast<E*>(smem + 2 * TMAX * WP * 2);
  float* s_dot = reinterpret_cast<float*>(smem + 2 * TMAX * WP * 2 + size_t(C) * KP * sizeof(E));
  float* s_scale = s_dot + (C + TMAX) * DP;
  float* s_g = s_scale + 2 * TMAX;
  float* s_gbuf = s_g + R * TMAX;
  int* s_par = reinterpret_cast<int*>(s_gbuf + R * C);

  const E* buf_k = static_cast<const E*>(p.buf_k) + (size_t(slot) * C * io.H + kh) * KD;  // entry j: + j H K
  for (int c = threadIdx.x; c < n * (KD / E16); c += NT) {
    const int j = c / (KD / E16), e = (c % (KD / E16)) * E16;
    cp_async16(s_keys + j * KP + e, buf_k + size_t(j) * io.H * KD + e);
  }
  for (int r = 0; r < R; ++r)  // n <= C <= 64 < NT: one entry a thread
    if (threadIdx.x < n) cp_async4(s_gbuf + r * C + threadIdx.x, p.buf_gcum + (size_t(slot) * C + threadIdx.x) * io.HV + kh * R + r);
  if (pools_first) wait_prior_grid();
  allow_dependent_grids();
  // Rows 0..T-1 keys, T..2T-1 queries, as copy_window_kq_async but in padded rows (that helper with
  // a pitch parameter cost this kernel a 4-byte spill at 40 registers).
  for (int c = threadIdx.x; c < 2 * T * (KD / 8); c += NT) {
    const int vec = c / (KD / 8), e = (c % (KD / 8)) * 8, t = vec < T ? vec : vec - T;
    cp_async16(s_raw + vec * WP + e, (vec < T ? io.k : io.q) + ((size_t(row) * T + t) * io.H + kh) * KD + e);
  }
  for (int r = 0; r < R; ++r)
    if (threadIdx.x < T) cp_async4(s_g + r * TMAX + threadIdx.x, io.g + (size_t(row) * T + threadIdx.x) * io.HV + kh * R + r);
  if (io.parents && threadIdx.x < T) cp_async4(s_par + threadIdx.x, io.parents + size_t(row) * T + threadIdx.x);
  cp_async_commit();
  cp_async_wait_group<0>();
  __syncthreads();

  const WindowNode node = window_node<TMAX>(T, io.parents ? s_par : nullptr);
  const bool fold = verify_folds_first(C, node.depth, n);
  const int n_eff = fold ? 0 : n, key_rows = n_eff + T;
  for (int vec = warp; vec < 2 * T; vec += NW) {  // norm scales: keys 0..T-1, queries (also K^-0.5) T..2T-1
    const __nv_bfloat162* src = reinterpret_cast<const __nv_bfloat162*>(s_raw + vec * WP + lane * PL);
    float ss = 0.f;
#pragma unroll
    for (int i = 0; i < PL / 2; ++i) {
      const float2 f = __bfloat1622float2(src[i]);
      ss = fmaf(f.x, f.x, ss);
      ss = fmaf(f.y, f.y, ss);
    }
    ss = warp_sum(ss);
    if (lane == 0) s_scale[vec] = window_norm_scale<KD>(ss, vec >= T);
  }
  {  // raw dot products on the tensor cores, D [key rows, NB] = A [key rows, K] x B [K, NB]: each
     // lane loads 4 consecutive elements at 16 i + 4 tq of A's rows g, g + 8 and of B's column g
     // (the K permutation of phase 5, shared by A and B); bf16 keys as bf16 pairs (m16n8k16, exact
     // products), fp32 keys split for TF32 (m16n8k8) as phase 5's.
    const int g = lane / 4, tq = lane % 4;
    for (int item = warp; item < (key_rows + 15) / 16 * NTILES; item += NW) {
      const int mt = item / NTILES, nt = item % NTILES, c = nt * 8 + g, tc = c < TMAX ? c : c - TMAX;
      const bool b_live = c < 2 * TMAX && tc < T;
      const __nv_bfloat16* b_row = s_raw + (b_live ? (c < TMAX ? tc : T + tc) : 0) * WP + 4 * tq;
      bool a_live[2], a_buf[2];
      const E* a_key[2];
      const __nv_bfloat16* a_win[2];
#pragma unroll
      for (int h8 = 0; h8 < 2; ++h8) {
        const int kr = mt * 16 + g + 8 * h8;
        a_live[h8] = kr < key_rows, a_buf[h8] = kr < n_eff;
        a_key[h8] = s_keys + (a_buf[h8] ? kr : 0) * KP + 4 * tq;
        a_win[h8] = s_raw + (a_live[h8] && !a_buf[h8] ? kr - n_eff : 0) * WP + 4 * tq;
      }
      float d[4] = {0.f, 0.f, 0.f, 0.f};
      if constexpr (sizeof(E) == 2) {
        const auto a_pair = [&](int h8, int i) {
          const void* src = a_buf[h8] ? static_cast<const void*>(a_key[h8] + 16 * i) : static_cast<const void*>(a_win[h8] + 16 * i);
          return a_live[h8] ? *static_cast<const uint2*>(src) : make_uint2(0u, 0u);
        };
#pragma unroll 4
        for (int i = 0; i < KD / 16; ++i) {
          const uint2 r0 = a_pair(0, i), r1 = a_pair(1, i);
          const uint2 bf = b_live ? *reinterpret_cast<const uint2*>(b_row + 16 * i) : make_uint2(0u, 0u);
          mma_bf16(d, r0.x, r1.x, r0.y, r1.y, bf.x, bf.y);
        }
      } else {
        const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
        const auto a_at = [&](int h8, int i) {
          return !a_live[h8] ? zero : a_buf[h8] ? load4(a_key[h8] + 16 * i) : load4(a_win[h8] + 16 * i);
        };
#pragma unroll 2
        for (int i = 0; i < KD / 16; ++i) {
          const float4 r0 = a_at(0, i), r1 = a_at(1, i);
          const float4 bf = b_live ? load4(b_row + 16 * i) : zero;
          mma_tf32_a<false>(d, r0.x, r1.x, r0.y, r1.y, bf.x, bf.y);
          mma_tf32_a<false>(d, r0.z, r1.z, r0.w, r1.w, bf.z, bf.w);
        }
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int kr = mt * 16 + g + 8 * (e / 2), col = nt * 8 + 2 * tq + e % 2;
        if (kr < key_rows && col < DP) s_dot[kr * DP + col] = d[e];
      }
    }
  }
  __syncthreads();

  E* win_k = static_cast<E*>(p.win_k);  // the commit's scratch: normalised window keys, 8 elements a thread
  for (int c = threadIdx.x; c < T * (KD / 8); c += NT) {
    const int t = c / (KD / 8), e = (c % (KD / 8)) * 8;
    const uint4 raw = *reinterpret_cast<const uint4*>(s_raw + t * WP + e);
    const float scale = s_scale[t];
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
    E* dst = win_k + ((size_t(row) * T + t) * io.H + kh) * KD + e;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float2 f = bf16x2_to_float2(w[q]);
      dst[2 * q] = from_f32<E>(f.x * scale);
      dst[2 * q + 1] = from_f32<E>(f.y * scale);
    }
  }
  if (kh == 0 && threadIdx.x == 0) {
    p.win_base[2 * row] = n_eff;
    p.win_base[2 * row + 1] = has_state || fold ? 1 : 0;
  }
  const VerifyCoefRecord rec{TMAX, C};
  constexpr unsigned kAll = 0xffffffffu;
  for (int item = warp; item < 2 * R; item += NW) {  // value head r = item / 2; lane t = node t for G
    const int r = item / 2, h = kh * R + r, t = lane;
    float* out = coef + (size_t(row) * io.HV + h) * rec.floats();
    const float* gbuf = s_gbuf + r * C;
    const float g_t = t < T ? s_g[r * TMAX + t] : 0.f;
    const float G = window_gcum<TMAX>((!fold && n > 0) ? gbuf[n - 1] : 0.f, g_t, node.anc);
    if (item % 2 == 0) {  // the window's part: G_t for the commit, header, column factors, cu and co
      if (t < T) p.win_gcum[(size_t(row) * T + t) * io.HV + h] = G;
      if (t == 0) {
        out[0] = __int_as_float(n_eff);
        out[1] = __int_as_float(fold ? 1 : 0);
        out[2] = fold ? expf(gbuf[n - 1]) : 0.f;
        out[3] = 0.f;
      }
      {  // column c = t's factor e^{G_t'} scale_c (c = t' key, TMAX + t' query)
        const int tc = t < TMAX ? t : t - TMAX;
        const float e_gc = __shfl_sync(kAll, expf(G), tc < TMAX ? tc : 0);
        if (t < NB) out[rec.colf() + t] = t < 2 * TMAX && tc < T ? e_gc * s_scale[t < TMAX ? tc : T + tc] : 0.f;
      }
      for (int base = 0; base < TMAX * CP; base += 32) {  // (node tt, node s): ancestors and s = tt only
        const int idx = base + lane, tt = idx / CP, s = idx % CP;
        const float G_tt = __shfl_sync(kAll, G, tt < TMAX ? tt : 0), G_s = __shfl_sync(kAll, G, s < TMAX ? s : 0);
        const unsigned anc = __shfl_sync(kAll, node.anc, tt < TMAX ? tt : 0);
        if (idx < TMAX * CP) {
          float vu = 0.f, vo = 0.f;
          if (tt < T && s < T && (((anc >> s) & 1u) || s == tt)) {
            const float decay = expf(G_tt - G_s);
            const float* d = s_dot + (n_eff + s) * DP;
            vo = decay * (d[TMAX + tt] * s_scale[T + tt]) * s_scale[s];
            if (s != tt) vu = decay * (d[tt] * s_scale[tt]) * s_scale[s];
          }
          out[rec.cu() + idx] = vu;
          out[rec.co() + idx] = vo;
        }
      }
    } else {  // the buffer's part: wu, wo (entry j, token tt) and the fold's decays
      for (int base = 0; base < n_eff * TMAX; base += 32) {
        const int idx = base + lane, j = idx / TMAX, tt = idx % TMAX;
        const float G_tt = __shfl_sync(kAll, G, tt);
        if (idx < n_eff * TMAX) {
          float wu = 0.f, wo = 0.f;
          if (tt < T) {
            const float decay = expf(G_tt - gbuf[j]);
            wu = decay * (s_dot[j * DP + tt] * s_scale[tt]);
            wo = decay * (s_dot[j * DP + TMAX + tt] * s_scale[T + tt]);
          }
          out[rec.wu() + idx] = wu;
          out[rec.wo() + idx] = wo;
        }
      }
      if (fold)
        for (int j = lane; j < n; j += 32) out[rec.fdecay() + j] = expf(gbuf[n - 1] - gbuf[j]);
    }
  }
}

// Commit, gridDim.y blocks per request row (blockIdx.y splits its 16-byte pieces) and layer
// (grid z: the layer table's index): copies the m accepted nodes' entries (k per key head, u and G
// per value head) from the scratch to buffer positions n0 .. n0+m-1 in 16-byte pieces, all loads
// of a thread issued before its stores, and sets fill and has_state. It reads only the scratch the
// verify wrote (never fill/has_state, which it rewrites). A buffer that becomes full (n0 + m == C,
// possible only when T == C, see the verify's fold rule) is emptied here and folded by
// gdn_verify_kvbuffer_commit_fold_kernel, which reads the same scratch.
constexpr int kCommitThreads = 256;
constexpr int kMaxCommitSlices = 8;  // blocks per row and layer at most (commit_slices, kernels/common/common.cuh)
template <class E>
__global__ void __launch_bounds__(kCommitThreads)
    gdn_verify_kvbuffer_commit_kernel(const __grid_constant__ LayerTable<KVBufferArgs> layers) {
  const KVBufferArgs& p = layers.layer[blockIdx.z];
  const GdnVerifyIO& io = p.io;
  const int row = blockIdx.x, T = io.tokens, C = p.capacity;
  wait_prior_grid();  // the verify's scratch is complete
  // The next kernel (the next step's first) may launch now, the verify being complete.
  allow_dependent_grids();
  const int slot = io.slot[row];
  if (slot < 0) return;
  __shared__ int s_node[kGdnVerifyMaxTokens];
  const int n0 = p.win_base[2 * row];
  const bool has_state = p.win_base[2 * row + 1] != 0;
  const int m = min(max(p.accept.accept_len[row], 0), T);
  if (threadIdx.x < m) {
    const int node = p.accept.accept_nodes ? p.accept.accept_nodes[row * T + threadIdx.x] - 1 : int(threadIdx.x);
    s_node[threadIdx.x] = min(max(node, 0), T - 1);
  }
  __syncthreads();
  if (n0 + m >= C) {
    if (threadIdx.x == 0) {
      p.fill[slot] = 0;
      p.has_state[slot] = 1;
    }
    return;
  }
  constexpr int E16 = 16 / sizeof(E);
  const int u_chunks = io.HV * io.V / E16, k_chunks = io.H * io.K / E16;  // per entry
  const int total = m * (u_chunks + k_chunks);
  const uint4* win_u = static_cast<const uint4*>(p.win_u);
  const uint4* win_k = static_cast<const uint4*>(p.win_k);
  uint4* buf_u = static_cast<uint4*>(p.buf_val);
  uint4* buf_k = static_cast<uint4*>(p.buf_k);
  constexpr int kBatch = 4;
  const int stride = int(gridDim.y) * kCommitThreads;  // the row's slices share its chunks
  for (int base = blockIdx.y * kCommitThreads + threadIdx.x; base < total; base += kBatch * stride) {
    uint4 x[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int c = base + i * stride;
      if (c < total) {
        const int e = c / (u_chunks + k_chunks), w = c % (u_chunks + k_chunks);
        const size_t src = size_t(row) * T + s_node[e];
        x[i] = w < u_chunks ? win_u[src * u_chunks + w] : win_k[src * k_chunks + (w - u_chunks)];
      }
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int c = base + i * stride;
      if (c < total) {
        const int e = c / (u_chunks + k_chunks), w = c % (u_chunks + k_chunks);
        const size_t dst = size_t(slot) * C + n0 + e;
        if (w < u_chunks) buf_u[dst * u_chunks + w] = x[i];
        else buf_k[dst * k_chunks + (w - u_chunks)] = x[i];
      }
    }
  }
  if (blockIdx.y != 0) return;
  for (int c = threadIdx.x; c < m * io.HV; c += kCommitThreads) {
    const int e = c / io.HV, h = c % io.HV;
    p.buf_gcum[(size_t(slot) * C + n0 + e) * io.HV + h] = p.win_gcum[(size_t(row) * T + s_node[e]) * io.HV + h];
  }
  if (threadIdx.x == 0) {
    p.fill[slot] = n0 + m;
    p.has_state[slot] = has_state ? 1 : 0;
  }
}

// The commit's fold of a full buffer, one block per (row, head, 64-row tile) as the verify:
// S0 <- e^{G_C} S0 + sum_j e^{G_C - G_j} k_j u_j^T over the n0 buffered entries and the m accepted
// nodes (C in all); rows whose buffer is not full exit at once.
template <int KD, class E, class S>
__global__ void __launch_bounds__(kThreads) gdn_verify_kvbuffer_commit_fold_kernel(const KVBufferArgs p) {
  constexpr int NF = KD / 8, KP = KD + 4;
  const GdnVerifyIO& io = p.io;
  const VerifyBlock b = verify_block(io.HV, io.V);
  const int T = io.tokens, C = p.capacity;
  const int kh = b.h / (io.HV / io.H);
  wait_prior_grid();  // the verify's scratch is complete
  const int slot = io.slot[b.row];
  if (slot < 0) return;
  const int n0 = p.win_base[2 * b.row];
  const bool has_state = p.win_base[2 * b.row + 1] != 0;
  const int m = min(max(p.accept.accept_len[b.row], 0), T);
  if (n0 + m < C) return;
  __shared__ int s_node[kGdnVerifyMaxTokens];
  if (threadIdx.x < m) {
    const int node = p.accept.accept_nodes ? p.accept.accept_nodes[b.row * T + threadIdx.x] - 1 : int(threadIdx.x);
    s_node[threadIdx.x] = min(max(node, 0), T - 1);
  }
  __syncthreads();
  const E* win_k = static_cast<const E*>(p.win_k);
  const E* win_u = static_cast<const E*>(p.win_u);
  const E* buf_k = static_cast<const E*>(p.buf_k);
  const E* buf_u = static_cast<const E*>(p.buf_val);
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  float* s_keys = smem;           // [C, KP]
  float* s_w = s_keys + C * KP;   // [C, kRows]
  float* s_g = s_w + C * kRows;   // [C]
  for (int idx = threadIdx.x; idx < C * KD; idx += kThreads) {
    const int j = idx / KD, k = idx % KD;
    s_keys[j * KP + k] = to_f32(j < n0 ? buf_k[((size_t(slot) * C + j) * io.H + kh) * KD + k]
                                       : win_k[((size_t(b.row) * T + s_node[j - n0]) * io.H + kh) * KD + k]);
  }
  for (int j = threadIdx.x; j < C; j += kThreads)
    s_g[j] = j < n0 ? p.buf_gcum[(size_t(slot) * C + j) * io.HV + b.h]
                    : p.win_gcum[(size_t(b.row) * T + s_node[j - n0]) * io.HV + b.h];
  __syncthreads();
  const float g_c = s_g[C - 1];
  for (int idx = threadIdx.x; idx < C * kRows; idx += kThreads) {
    const int j = idx / kRows, r = idx % kRows;
    const size_t col = size_t(b.h) * io.V + b.v0 + r;
    const float uj = to_f32(j < n0 ? buf_u[(size_t(slot) * C + j) * io.HV * io.V + col]
                                   : win_u[(size_t(b.row) * T + s_node[j - n0]) * io.HV * io.V + col]);
    s_w[idx] = expf(g_c - s_g[j]) * uj;
  }
  __syncthreads();
  const size_t head_row0 = (size_t(slot) * io.HV + b.h) * io.V + b.v0;
  S* rowA = reinterpret_cast<S*>(p.state) + (head_row0 + b.rA) * KD;
  S* rowB = reinterpret_cast<S*>(p.state) + (head_row0 + b.rB) * KD;
  float4 xa[NF], xb[NF];
  if (has_state) {
    load_row_halves<KD>(rowA, rowB, b.parity, xa, xb);
  } else {
#pragma unroll
    for (int i = 0; i < NF; ++i) xa[i] = xb[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  fold_row_halves<KD>(xa, xb, expf(g_c), C, s_keys, KP, s_w, b);
  store_row_halves<KD>(rowA, rowB, b.parity, xa, xb);
}

void validate(const GdnVerifyKVBufferParams& p, const char* who) {
  const GdnVerifyIO& io = p.io;
  validate_verify_io(io, who);
  auto fail = [&](const std::string& what) { throw std::invalid_argument(std::string(who) + ": " + what); };
  if (p.capacity < io.tokens || p.capacity > 64)
    fail("unsupported capacity C = " + std::to_string(p.capacity) + " (T <= C <= 64)");
  if (!known_state_type(p.state_type)) fail("unsupported state dtype " + std::to_string(int(p.state_type)));
  if (io.batch > kMaxBatch) fail("batch " + std::to_string(io.batch) + " > " + std::to_string(kMaxBatch) + " (grid z)");
  if (io.batch > 0 && (!p.state || !p.buf_k ||
                       !p.buf_val || !p.buf_gcum || !p.fill || !p.has_state || !p.win_k || !p.win_u ||
                       !p.win_gcum || !p.win_base))
    fail("null pointer among pools or scratch");
  if (p.path == DecodePath::Split && io.batch > 0 && !p.coef) fail("the split path needs its coef workspace");
}

template <class Kernel>
void launch(Kernel kernel, const GdnVerifyKVBufferParams& p, size_t smem, dim3 blocks, int threads,
            cudaStream_t stream, bool programmatic_dependent = false) {
  launch_kernel(kernel, blocks, dim3(unsigned(threads)), smem, stream, programmatic_dependent, kvbuffer_args(p));
}

// Grids of at most this many waves of resident blocks are "a few waves" (batch <= 64 at Qwen3-Next
// shapes on the H200: 6.2 waves at 64, 12.4 at 128).
constexpr long kPoolsFirstMaxWaves = 8;
// The split path (Auto) from this many window tokens (TMAX) on, where the grid is more than a few
// waves: at T = 5 it is 4-9% faster from batch 128 (fp32 and bf16 states), at T = 4 within -3% /
// +4% of the single kernel (notes, v22): the coefficient kernel's fixed work pays once the window's
// T x T and (C + T) x 2T products are large enough.
constexpr int kSplitMinTokens = 5;
template <int KD, int TMAX, class E, class S>
void launch_tmax(const GdnVerifyKVBufferParams& p, dim3 blocks, cudaStream_t stream) {
  const size_t smem = VerifySmem{KD, TMAX, p.capacity, int(sizeof(E))}.bytes();
  const auto kernel = gdn_verify_kvbuffer_kernel<KD, TMAX, E, S, false, false>;
  const long grid = long(blocks.x) * blocks.y * blocks.z;
  const auto few_waves = [&] {
    return grid <= kPoolsFirstMaxWaves * long(resident_blocks(kernel, kVerifyThreads, smem)) * device_limits().sms;
  };
  // Split: the coefficient kernel, then the state kernel, each a programmatic dependent of the
  // kernel before it and waiting for it before reading anything it may have written.
  if (p.path == DecodePath::Split ||
      (p.path == DecodePath::Auto && p.coef && TMAX >= kSplitMinTokens && !few_waves())) {
    const size_t coef_smem = verify_coef_smem_bytes(KD, TMAX, p.capacity, int(sizeof(E)), p.io.HV / p.io.H);
    launch_kernel(gdn_verify_kvbuffer_coef_kernel<KD, TMAX, E>, dim3(unsigned(p.io.H), unsigned(p.io.batch)),
                  dim3(unsigned(kCoefThreads)), coef_smem, stream, true, kvbuffer_args(p), p.coef,
                  p.pools_ready_at_launch);
    launch_kernel(gdn_verify_kvbuffer_kernel<KD, TMAX, E, S, false, true>, blocks, dim3(unsigned(kVerifyThreads)), smem,
                  stream, true, kvbuffer_args(p), p.coef);
    return;
  }
  // Ready pools are read before the wait only where the grid is a few waves: there the first wave,
  // which starts while the kernel before finishes, is a large share (batch 1-64 at Qwen3-Next
  // shapes: 11-27% faster at 1 and 8, 1-6% at 64); from 12 waves on the order cost 1-5% (notes,
  // "pools before the wait"). Two instantiations, so that the window-first one keeps its SASS.
  const bool pools_first = p.pools_ready_at_launch && few_waves();
  launch_kernel(pools_first ? gdn_verify_kvbuffer_kernel<KD, TMAX, E, S, true, false> : kernel, blocks,
                dim3(unsigned(kVerifyThreads)), smem, stream, true, kvbuffer_args(p), p.coef);
}

template <int KD, class E, class S>
void dispatch_tokens(const GdnVerifyKVBufferParams& p, cudaStream_t stream) {
  const int T = p.io.tokens;
  const dim3 blocks(unsigned(p.io.V / kRows * (p.io.HV / p.io.H)), unsigned(p.io.H), unsigned(p.io.batch));
  switch (verify_tmax(T)) {
    case 2: return launch_tmax<KD, 2, E, S>(p, blocks, stream);
    case 4: return launch_tmax<KD, 4, E, S>(p, blocks, stream);
    case 5: return launch_tmax<KD, 5, E, S>(p, blocks, stream);
    case 6: return launch_tmax<KD, 6, E, S>(p, blocks, stream);
    case 8: return launch_tmax<KD, 8, E, S>(p, blocks, stream);
    default: throw std::invalid_argument("gdn_verify_kvbuffer: unsupported token count " + std::to_string(T));
  }
}

}  // namespace

void gdn_verify_kvbuffer(const GdnVerifyKVBufferParams& p, cudaStream_t stream) {
  validate(p, "gdn_verify_kvbuffer");
  if (p.io.batch == 0) return;
  const bool bf16 = p.entry == EntryType::BF16;
  dispatch_state_type("gdn_verify_kvbuffer", p.state_type, [&](auto tag) {
    using S = typename decltype(tag)::type;
    dispatch_head_dims<KeyHeadDims>("gdn_verify_kvbuffer", p.io.K, p.io.V, [&](auto K, auto) {
      bf16 ? dispatch_tokens<K, __nv_bfloat16, S>(p, stream) : dispatch_tokens<K, float, S>(p, stream);
    });
  });
}

void gdn_verify_kvbuffer_commit(const GdnVerifyKVBufferParams* layers, int count, cudaStream_t stream) {
  const char* who = "gdn_verify_kvbuffer_commit";
  using Params = GdnVerifyKVBufferParams;
  validate_commit_layers(layers, count, who, validate, [](const Params& q, const Params& p) {
    return q.io.batch == p.io.batch && q.io.tokens == p.io.tokens && q.capacity == p.capacity && q.entry == p.entry;
  });
  const Params& p = layers[0];
  if (p.io.batch == 0) return;
  const bool bf16 = p.entry == EntryType::BF16;
  // The buffer can become full at the commit only when T == C (the verify folds when n + depth >= C):
  // then the fold kernels run first, reading the scratch and buffer the copy kernel leaves untouched.
  if (p.io.tokens == p.capacity)
    for (int l = 0; l < count; ++l) {
      const Params& q = layers[l];
      const size_t smem = commit_fold_smem_bytes(q.io.K, q.capacity);
      const unsigned blocks = unsigned(q.io.batch) * q.io.HV * (q.io.V / kRows);
      dispatch_state_type(who, q.state_type, [&](auto tag) {
        using S = typename decltype(tag)::type;
        dispatch_head_dims<KeyHeadDims>(who, q.io.K, q.io.V, [&](auto K, auto) {
          bf16 ? launch(gdn_verify_kvbuffer_commit_fold_kernel<K, __nv_bfloat16, S>, q, smem, blocks, kThreads, stream, true)
               : launch(gdn_verify_kvbuffer_commit_fold_kernel<K, float, S>, q, smem, blocks, kThreads, stream, true);
        });
      });
    }
  // Programmatic dependent of the last verify (or of the fold kernels just above, which never
  // trigger early, so the copy still starts after the folds have finished).
  // The copy reads and writes entries only (no state): one kernel whatever the layers' state types.
  const int slices = commit_slices(long(p.io.batch) * count, kCommitThreads, kMaxCommitSlices);
  const dim3 grid(unsigned(p.io.batch), unsigned(slices));
  std::vector<KVBufferArgs> args(static_cast<size_t>(count));
  for (int l = 0; l < count; ++l) args[size_t(l)] = kvbuffer_args(layers[l]);
  if (bf16)
    launch_layers(gdn_verify_kvbuffer_commit_kernel<__nv_bfloat16>, args.data(), count, grid, dim3(kCommitThreads), stream, true);
  else
    launch_layers(gdn_verify_kvbuffer_commit_kernel<float>, args.data(), count, grid, dim3(kCommitThreads), stream, true);
}

void gdn_verify_kvbuffer_commit(const GdnVerifyKVBufferParams& p, cudaStream_t stream) {
  gdn_verify_kvbuffer_commit(&p, 1, stream);
}

}  // namespace kvbuf
