// gdn_decode_recurrent: the classic serving decode of Gated DeltaNet, one token per request.
//
// Math (docs/kvbuffer-math.md section 1, in the serving layout where row v of head h is S[v, :]):
//   k <- k / sqrt(|k|^2 + 1e-6),  q <- q / sqrt(|q|^2 + 1e-6) * K^-0.5
//   a_v = S[v,:].k,  b_v = S[v,:].q                         (one read of the row serves both)
//   u_v = beta (v_v - e^g a_v)
//   o_v = e^g b_v + (k.q) u_v                               (= S_new[v,:].q)
//   S_new[v,:] = e^g S[v,:] + u_v k
// Layouts: S_in, S_out [slots, HV, V, K] state dtype (fp32, bf16 or fp16), K contiguous (same
//          pointer = in place); arithmetic in fp32, each state write rounded once to nearest;
//          q, k [B, H, K] bf16; v, out [B, HV, V] bf16; g, beta [B, HV] fp32 (or a, b bf16 [B, HV]
//          + A_log, dt_bias [HV] fp32); slot [B] int32 (negative: padding, output zeros only).
// Work split (tile shape): block = (row, value head, tile of rows_per_block state rows), 128 threads = 16
// groups of 8 lanes (gdn_decode_device.h). The copy issuers start bulk copies (arch.cuh, 16 rows per
// chunk, one mbarrier each) of the block's contiguous S rows into shared memory, all in flight at
// once; meanwhile every group normalises k, q and the block stages v; then each group takes one
// row per chunk, as soon as its chunk lands, and stores the new row straight to global memory.
// rows_per_block: up to 64 (32 KiB tiles of an fp32 state, 16 KiB of a 16-bit one), smaller for small
// batches (8 blocks per SM wanted).
// One-warp shape (rows_per_block 8, from batch 32 up): one warp per 8 rows, the tile in registers
// (log v4).
// Template parameters: head dims K = V in {64, 128}, state element type S (float, __nv_bfloat16 or
// __half: GdnRecurrentParams::state_type through dispatch_state_type). The tile shape is a
// programmatic dependent of the kernel before (gdn_decode.h, pools_ready_at_launch: its state copies
// before the wait, the inputs after; log v8), the one-warp shape is launched plainly. 16-bit states
// (10d2068, results/decode16_h200.csv, full clock): in place bf16 2.29 / 6.63 / 20.23 / 36.86 / 70.01 /
// 136.33 / 269.09 us at the same batches, 87% of copy at 64 (out of place 88%) and 92-95% from 128,
// ahead of vLLM's packed bf16 decode (recorded, results/public_16bit_h200.csv) at every batch. The
// 16-bit warp shape runs two warps per block (b84ae85, log v11; A/B against one warp per block in
// one session, notes): bf16 1.3-2.1% faster from batch 32, fp16 within 2% either way.
//
// Current result (f831236, results/decode_h200.csv and fla_h200.csv; H200, Qwen3-Next shapes, 36
// layer pools in one CUDA graph, per layer, median): out of place 3.51 / 10.91 / 34.76 / 67.02 /
// 131.24 / 259.13 / 515.07 us at batch 1 / 8 / 32 / 64 / 128 / 256 / 512 (FLA in the same session
// 3.89 / 11.38 / 36.09 / 68.08 / 132.02 / 259.72 / 515.32); in place 3.53 / 10.44 / 34.90 / 67.42
// (95.3% of copy) / 132.16 / 261.23 / 519.61.
// Performance log v1..v7 (prediction first where one was made): kernels/gdn/notes/gdn_decode_recurrent.md
// ("log vN" in the comments below).
#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/common/common.cuh"
#include "kernels/gdn/gdn_decode.h"
#include "kernels/gdn/gdn_decode_device.h"

namespace kvbuf {
namespace gdn_detail {

void validate_step_io(const GdnStepIO& io, const char* who, bool warp_rows_allowed) {
  auto fail = [&](const std::string& m) { throw std::invalid_argument(std::string(who) + ": " + m); };
  if (io.batch < 0) fail("batch must be >= 0");
  if (io.batch > kMaxBatch)
    fail("unsupported batch " + std::to_string(io.batch) + " (at most " + std::to_string(kMaxBatch) + " rows per launch)");
  if (io.H <= 0 || io.HV <= 0 || io.HV % io.H != 0) fail("need H > 0 and HV a multiple of H");
  if (!io.slot || !io.q || !io.k || !io.v || !io.out) fail("slot, q, k, v and out must be set");
  const bool given = io.g || io.beta;
  if (given && !(io.g && io.beta)) fail("give both g and beta, or neither");
  if (!given && !(io.a && io.b && io.A_log && io.dt_bias))
    fail("without g/beta, a, b, A_log and dt_bias must all be set");
  if (io.rows_per_block != 0) {
    const int r = io.rows_per_block;
    const bool warp = warp_rows_allowed && r == kWarpRows;
    if (!(warp || r == 16 || r == 32 || r == 64 || r == 128) || r > io.V || io.V % r != 0)
      fail("unsupported rows_per_block " + std::to_string(r) + (warp_rows_allowed ? " (8, 16" : " (16") +
           ", 32, 64 or 128, dividing V)");
  }
}

int choose_rows_per_block(const GdnStepIO& io, RowsRule rule) {
  if (io.rows_per_block) return io.rows_per_block;
  return halve_rows_to_fill(long(io.batch) * io.HV, io.V, std::min(io.V, rule.max_rows), 16, rule.min_blocks_per_sm,
                            device_limits());
}

// The kernels' parameter: GdnRecurrentParams less state_type, which the kernels have as their
// element type S. Appending state_type to the kernel parameter block moved row_has_state and rows
// by 8 bytes (other constant-bank offsets in the fp32 kernels' SASS); without it the block is
// what it was before 16-bit states.
struct RecurrentArgs {
  GdnStepIO io;
  const void* state_in;
  void* state_out;
};

// STATE_FLAG (KVBuffer at capacity 1, below): row_has_state[row] == 0 marks a request without a
// state (direct mode): S = 0 is not read, and the step writes S = u k^T, creating the state.
template <int K, int V, class S, bool STATE_FLAG>
__global__ void __launch_bounds__(kThreads) gdn_decode_recurrent_kernel(RecurrentArgs p, const int32_t* row_has_state,
                                                                        int rows, bool pools_ready) {
  static_assert(K % 32 == 0 && V % 16 == 0, "head dims");
  constexpr int N = K / 8;  // elements per lane per row
  extern __shared__ __align__(128) float smem[];
  S* const tile = reinterpret_cast<S*>(smem);  // [rows, K]: this block's state rows
  __shared__ __align__(8) uint64_t bars[kMaxChunks];
  __shared__ float sv[kMaxChunks * kGroups];  // v of this block's rows
  const GdnStepIO& io = p.io;
  const BlockCoords c = block_coords<V>(rows);
  // The slot and the state's copies, then (pools_ready) the wait for the kernel before; the token's
  // inputs and every write after it (gdn_decode.h, pools_ready_at_launch).
  if (!pools_ready) wait_prior_grid();
  const int slot = io.slot[c.row];
  const bool has_state = !STATE_FLAG || load_unsunk(row_has_state + c.row) != 0;
  const size_t head = (size_t(slot) * io.HV + c.h) * V * K;
  const int chunks = rows / kGroups;
  if (slot >= 0 && has_state && copy_issuer(threadIdx.x))
    tile_issue<K>(tile, static_cast<const S*>(p.state_in) + head + size_t(c.v0) * K, chunks, bars);
  if (pools_ready) wait_prior_grid();
  allow_dependent_grids();
  if (slot < 0) {
    write_zero_output(io, c, rows);
    return;
  }

  const int group = threadIdx.x / kGroupLanes, lane = threadIdx.x % kGroupLanes;
  const int kh = c.kh;
  float k[N], q[N], kq;
  load_token_kq<K>(io, c.row, kh, lane, k, q, kq);
  float g, beta;
  load_gates(io, c.row, c.h, g, beta);
  const float decay = expf(g);
  S* s_out = static_cast<S*>(p.state_out) + head;
  const __nv_bfloat16* vin = io.v + (size_t(c.row) * io.HV + c.h) * V;
  __nv_bfloat16* out = io.out + (size_t(c.row) * io.HV + c.h) * V;
  for (int r = threadIdx.x; r < rows; r += kThreads) sv[r] = __bfloat162float(vin[c.v0 + r]);
  __syncthreads();  // barriers initialised, sv loaded

  for (int ch = 0; ch < chunks; ++ch) {
    const int rl = ch * kGroups + group, r = c.v0 + rl;
    const float v_r = sv[rl];
    float s[N];
    load_tile_row<K>(has_state, tile, bars, ch, rl, lane, s);
    const float a = group_sum(dot<N>(s, k));
    const float b = group_sum(dot<N>(s, q));
    const float uv = beta * (v_r - decay * a);
    if (lane == 0) out[r] = __float2bfloat16_rn(decay * b + kq * uv);
#pragma unroll
    for (int i = 0; i < N; ++i) s[i] = fmaf(decay, s[i], uv * k[i]);
    store_slice<K>(s_out + size_t(r) * K, lane, s);
  }
}

// NL consecutive elements of a state row (one lane's share in the one-warp shape) as one access:
// Vec is float4 / float2 for fp32 and 8 / 4 bytes for 16-bit states; to_f32 converts a load,
// update computes the new elements and rounds them to nearest even (16-bit) for the store.
template <class S, int NL>
struct LaneElems {  // fp32
  using Vec = typename std::conditional<NL == 4, float4, float2>::type;
  __device__ __forceinline__ static void to_f32(const Vec& x, float* s) {
    s[0] = x.x, s[1] = x.y;
    if constexpr (NL == 4) s[2] = reinterpret_cast<const float4&>(x).z, s[3] = reinterpret_cast<const float4&>(x).w;
  }
  // What the one-warp shape holds of a row between its load and its update (hold), and the row's
  // elements where they are used (widen): fp32 elements as floats.
  struct Held {
    float s[NL];
  };
  __device__ __forceinline__ static void hold(const Vec& x, Held& h) { to_f32(x, h.s); }
  __device__ __forceinline__ static const float* widen(const Held& h, float*) { return h.s; }
  // decay s + uv k (the row update) as one access. (Through an array of floats, ptxas ordered two
  // register zeroings of one fp32 instantiation differently.)
  __device__ __forceinline__ static Vec update(float decay, const float* s, float uv, const float* k) {
    Vec y;
    y.x = fmaf(decay, s[0], uv * k[0]), y.y = fmaf(decay, s[1], uv * k[1]);
    if constexpr (NL == 4) {
      reinterpret_cast<float4&>(y).z = fmaf(decay, s[2], uv * k[2]);
      reinterpret_cast<float4&>(y).w = fmaf(decay, s[3], uv * k[3]);
    }
    return y;
  }
};
template <class S, int NL>
struct LaneElems16 {  // bf16, fp16
  using Vec = typename std::conditional<NL == 4, uint2, uint32_t>::type;
  __device__ __forceinline__ static void to_f32(const Vec& x, float* s) {
    const uint32_t* w = reinterpret_cast<const uint32_t*>(&x);
#pragma unroll
    for (int e = 0; e < NL / 2; ++e) {
      const float2 f = pair_to_float2<S>(w[e]);
      s[2 * e] = f.x, s[2 * e + 1] = f.y;
    }
  }
  // 16-bit elements stay packed as loaded (half the registers of floats) and are widened at each use.
  using Held = Vec;
  __device__ __forceinline__ static void hold(const Vec& x, Held& h) { h = x; }
  __device__ __forceinline__ static const float* widen(const Held& h, float* s) {
    to_f32(h, s);
    return s;
  }
  __device__ __forceinline__ static Vec update(float decay, const float* s, float uv, const float* k) {
    Vec x;
    uint32_t* w = reinterpret_cast<uint32_t*>(&x);
#pragma unroll
    for (int e = 0; e < NL / 2; ++e)
      w[e] = float2_to_pair<S>(fmaf(decay, s[2 * e], uv * k[2 * e]), fmaf(decay, s[2 * e + 1], uv * k[2 * e + 1]));
    return x;
  }
};
template <int NL>
struct LaneElems<__nv_bfloat16, NL> : LaneElems16<__nv_bfloat16, NL> {};
template <int NL>
struct LaneElems<__half, NL> : LaneElems16<__half, NL> {};

// Warp-row shape (rows_per_block = kWarpRows, log v4): one warp owns 8 state rows (4 KiB of an fp32
// state); launched plainly, not as a programmatic dependent that loads its rows before the wait and
// its inputs after (log v8: that order made the bf16 shape 8-16% slower from batch 32, launched
// programmatically or not: its short blocks wait on the inputs' chain behind the wait);
// lane l holds columns [l K/32, (l+1) K/32) of all 8 rows in registers, so the warp's whole tile
// is in flight after one round trip (the slot). The 16 row sums are reduced by halving exchanges
// (log v6); lane 4 i writes row i's output. fp32 states: one warp per block, up to 32 blocks (the
// SM's limit) at 64 registers. 16-bit states (log v10): the rows stay packed (Held) and two warps
// share a block (16 rows) at their natural 56 registers, so that 18 blocks, 36 warps, share an SM
// instead of 32 one-warp blocks (bounds of 20 blocks, 48 registers and 42 warps, were 1-3% slower
// than one warp per block). No minimum in the bounds: a minimum of 1 gave fp32 72 registers.
template <class S>
constexpr int warp_shape_warps() { return sizeof(S) == 2 ? 2 : 1; }
template <int K, int V, class S, bool STATE_FLAG>
__global__ void __launch_bounds__(32 * warp_shape_warps<S>())
    gdn_decode_recurrent_warp_kernel(RecurrentArgs p, const int32_t* row_has_state) {
  constexpr int W = warp_shape_warps<S>();
  static_assert(K == 64 || K == 128, "2 or 4 elements per lane per row");
  constexpr int NL = K / 32, R = kWarpRows;  // elements per lane per row, rows per warp
  static_assert(V % (R * W) == 0, "a block's rows tile the value head");
  using Lane = LaneElems<S, NL>;
  using Vec = typename Lane::Vec;
  const GdnStepIO& io = p.io;
  BlockCoords c = block_coords<V>(R * W);
  if constexpr (W > 1) c.v0 += int(threadIdx.x >> 5) * R;
  const int lane = W == 1 ? int(threadIdx.x) : int(threadIdx.x & 31);
  const int slot = io.slot[c.row];
  const bool has_state = !STATE_FLAG || row_has_state[c.row] != 0;
  // The token's inputs do not depend on the slot: issued before its round trip ends.
  const size_t kq_off = (size_t(c.row) * io.H + c.kh) * K + lane * NL;
  __nv_bfloat162 kraw[NL / 2], qraw[NL / 2];
#pragma unroll
  for (int e = 0; e < NL / 2; ++e) {
    kraw[e] = reinterpret_cast<const __nv_bfloat162*>(io.k + kq_off)[e];
    qraw[e] = reinterpret_cast<const __nv_bfloat162*>(io.q + kq_off)[e];
  }
  float g, beta;
  load_gates(io, c.row, c.h, g, beta);
  const size_t vo = (size_t(c.row) * io.HV + c.h) * V + c.v0;
  const float v_row = __bfloat162float(io.v[vo + ((lane >> 2) & (R - 1))]);  // v of row (lane / 4) % 8
  if (slot < 0) {
    if (lane < R) io.out[vo + lane] = __float2bfloat16_rn(0.f);
    return;
  }
  const size_t head = ((size_t(slot) * io.HV + c.h) * V + c.v0) * K + lane * NL;
  typename Lane::Held rows[R];
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const Vec x = has_state ? *reinterpret_cast<const Vec*>(static_cast<const S*>(p.state_in) + head + size_t(i) * K) : Vec{};
    Lane::hold(x, rows[i]);
  }
  float k[NL], q[NL];
#pragma unroll
  for (int e = 0; e < NL / 2; ++e) {
    const float2 kf = __bfloat1622float2(kraw[e]), qf = __bfloat1622float2(qraw[e]);
    k[2 * e] = kf.x, k[2 * e + 1] = kf.y, q[2 * e] = qf.x, q[2 * e + 1] = qf.y;
  }
  // The three norms' sums are independent (k.q from the raw vectors, scaled after).
  const float kk = warp_sum(dot<NL>(k, k)), qq = warp_sum(dot<NL>(q, q)), kq_raw = warp_sum(dot<NL>(k, q));
  const float kinv = rsqrtf(kk + 1e-6f), qinv = rsqrtf(qq + 1e-6f) * rsqrtf(float(K));
#pragma unroll
  for (int e = 0; e < NL; ++e) k[e] *= kinv, q[e] *= qinv;
  const float kq = kq_raw * kinv * qinv;
  const float decay = expf(g);
  // The 16 row sums S[i].k, S[i].q (value m = 2 i + {0, 1}) reduced over the warp by halving
  // exchanges: at each step a lane keeps half of its values and receives its partner's partial
  // sums of that half (8 + 4 + 2 + 1 + 1 = 16 shuffles instead of 80); lane l ends with the
  // full sum of value m = (l >> 1) & 15, i.e. lanes 4 i .. 4 i + 3 hold row i: a_i in the first
  // two, b_i in the last two.
  float p16[2 * R];
#pragma unroll
  for (int i = 0; i < R; ++i) {
    float buf[NL];
    const float* si = Lane::widen(rows[i], buf);
    p16[2 * i] = dot<NL>(si, k), p16[2 * i + 1] = dot<NL>(si, q);
  }
#pragma unroll
  for (int half = R, mask = 16; half >= 1; half /= 2, mask /= 2) {
    const bool upper = lane & mask;
#pragma unroll
    for (int j = 0; j < half; ++j) {
      const float send = upper ? p16[j] : p16[j + half];
      const float keep = upper ? p16[j + half] : p16[j];
      p16[j] = keep + __shfl_xor_sync(0xffffffffu, send, mask);
    }
  }
  const float sum = p16[0] + __shfl_xor_sync(0xffffffffu, p16[0], 1);
  const int row_own = (lane >> 2) & (R - 1);
  const float a = sum, b = __shfl_xor_sync(0xffffffffu, sum, 2);  // on lanes 4 i, 4 i + 1
  const float uv_own = beta * (v_row - decay * a);
  if ((lane & 3) == 0) io.out[vo + row_own] = __float2bfloat16_rn(decay * b + kq * uv_own);
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const float uv = __shfl_sync(0xffffffffu, uv_own, 4 * i);
    float buf[NL];
    const float* si = Lane::widen(rows[i], buf);
    *reinterpret_cast<Vec*>(static_cast<S*>(p.state_out) + head + size_t(i) * K) = Lane::update(decay, si, uv, k);
  }
}

template <int K, int V, class S, bool STATE_FLAG>
void launch_recurrent(const GdnRecurrentParams& p, const int32_t* row_has_state, int rows, cudaStream_t stream) {
  const RecurrentArgs a{p.io, p.state_in, p.state_out};
  if (rows == kWarpRows)
    return launch_kernel(gdn_decode_recurrent_warp_kernel<K, V, S, STATE_FLAG>,
                         decode_grid(p.io, kWarpRows * warp_shape_warps<S>()), dim3(32 * warp_shape_warps<S>()), 0, stream,
                         false, a, row_has_state);
  launch_kernel(gdn_decode_recurrent_kernel<K, V, S, STATE_FLAG>, decode_grid(p.io, rows), dim3(kThreads),
                size_t(rows) * K * sizeof(S), stream, true, a, row_has_state, rows, p.pools_ready_at_launch);
}

// The one-warp shape from this batch up (log v4), the shared-memory tiles below it.
constexpr int kWarpRowsMinBatch = 32;
int recurrent_rows(const GdnStepIO& io) {
  if (io.rows_per_block == 0 && io.batch >= kWarpRowsMinBatch && io.V % kWarpRows == 0) return kWarpRows;
  return choose_rows_per_block(io, kRecurrentRows);
}

void run_recurrent(const GdnRecurrentParams& p, const int32_t* row_has_state, cudaStream_t stream, const char* who) {
  const int rows = recurrent_rows(p.io);
  const bool flag = row_has_state != nullptr;
  dispatch_state_type(who, p.state_type, [&](auto tag) {
    using S = typename decltype(tag)::type;
    dispatch_head_dims(who, p.io.K, p.io.V, [&](auto K, auto V) {
      flag ? launch_recurrent<K, V, S, true>(p, row_has_state, rows, stream)
           : launch_recurrent<K, V, S, false>(p, row_has_state, rows, stream);
    });
  });
}

void run_kvbuffer_capacity1(const GdnKVBufferParams& p, cudaStream_t stream, const char* who) {
  GdnRecurrentParams r;
  r.io = p.io;
  r.state_in = r.state_out = p.state;
  r.state_type = p.state_type;
  r.pools_ready_at_launch = p.pools_ready_at_launch;
  run_recurrent(r, p.every_row_has_state ? nullptr : p.row_has_state, stream, who);
}
}  // namespace gdn_detail

int gdn_decode_recurrent_rows_per_block(const GdnStepIO& io) { return gdn_detail::recurrent_rows(io); }

void gdn_decode_recurrent(const GdnRecurrentParams& p, cudaStream_t stream) {
  using namespace gdn_detail;
  validate_step_io(p.io, "gdn_decode_recurrent", true);
  if (!p.state_in || !p.state_out) throw std::invalid_argument("gdn_decode_recurrent: state_in and state_out must be set");
  if (p.io.batch == 0) return;
  run_recurrent(p, nullptr, stream, "gdn_decode_recurrent");
}

}  // namespace kvbuf
