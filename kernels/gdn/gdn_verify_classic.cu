// Classic speculative verify for Gated DeltaNet (what serving engines do today), chains and trees,
// and the commit of its copy variant: the baseline of docs/kvbuffer-math.md section 5.
//
// Math, per request and value head, per node t = 1..T with parent p(t) (S_0 = the committed state):
//   D = e^{g_t} S_p(t);  u_t = beta_t (v_t - D^T k_t);  S_t = D + k_t u_t^T;  o_t = S_t^T q_t
// and every S_t is written out. Two variants (gdn_verify.h):
//   in place  (step_slot set): S_t goes to pool slot step_slot[row, t], as vLLM's spec-decode state
//             cache does; the scheduler commits by index (slot <- step_slot[row, last accepted]).
//   copy      (step_states set): S_t goes to the scratch [B, T, HV, V, K]; the commit kernel copies
//             the last accepted node's state into the pool (m = 0 keeps the state).
// Layouts: S: [slots, HV, V, K] state dtype (fp32, bf16 or fp16), K contiguous; q, k [B, T, H, K],
// v [B, T, HV, V] bf16; g, beta [B, T, HV] fp32; out [B, T, HV, V] bf16.
// State dtype (docs/kvbuffer-math.md section 11): arithmetic in fp32; each node's state is rounded
// once to nearest where it is written, and the walk goes on from the rounded rows (the registers
// take the value written), so node t's output and state are those of t successive decode steps
// with a state of that type, whether the parent's rows stay in registers (chains) or are reloaded
// (trees). Template parameters: K in {64, 128} and the state element S (float, __nv_bfloat16,
// __half: GdnVerifyClassicParams::state_type through dispatch_state_type).
//
// Shape (log v2): one warp per block owns 8 consecutive rows of one value head of one request
// (grid V/8 x HV x B), as the recurrent decode's one-warp shape (kernels/gdn/notes/gdn_decode_recurrent.md, v4):
// lane l holds columns [l K/32, (l+1) K/32) of the 8 rows in registers (32 floats at K = 128), so a
// row is one coalesced 512-byte access per instruction and the whole tile is in flight after one
// round trip (the slot). The T tokens' k, q, v and gates are copied to shared memory (cp.async)
// while S0 loads, and the 3T norm sums (|k|^2, |q|^2, k.q) of the window are reduced together in
// one halving exchange (31 shuffles) before S0 lands. Per node, S_p.k and S_p.q of the 8 rows are
// reduced by halving exchanges (16 shuffles, as the decode kernel), the output is
// o = e^g S_p.q + (k.q) u, and the new rows are stored straight from registers. A node whose parent
// is not the previous node (trees) reloads its parent's rows (S0's slot or the node's output; the
// same lane wrote them, so program order suffices).
//
// Measured (H200, Qwen3-Next shapes, 36 layer pools in one CUDA graph, per layer, T = 5, commit
// 64d699c67cf7): in place 5.76 / 418.4 / 833.6 us at batch 1 / 128 / 256 (91% of copy), copy
// variant with its commit 8.57 / 554.3 / 1102.5; the public classic kernel (vLLM) 23.2 / 445 / 874.3.
// Performance log, prediction first: kernels/gdn/notes/gdn_verify_classic.md.
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/common/common.cuh"
#include "kernels/gdn/gdn_verify.h"
#include "kernels/gdn/gdn_verify_device.h"

namespace kvbuf {
namespace {

using namespace gdn_verify_detail;

constexpr int kWarpRows = 8;  // state rows per one-warp block
constexpr int kTMax = kGdnVerifyMaxTokens;
static_assert(3 * kTMax <= 32, "the window's norm sums fit one 32-value halving exchange");

// The kernels' parameter: GdnVerifyClassicParams less state_type, which the kernels have as their
// element type S. Appended to the kernel parameter block it would make 136 bytes of 128 (nvcc then
// reads the parameters differently: other SASS for the fp32 kernels); without it the block is what
// it was before 16-bit states. The state pointers stay float* (the kernels cast them to S*): as
// void* they changed the fp32 kernels' address arithmetic.
struct ClassicArgs {
  GdnVerifyIO io;
  float* state;
  const int32_t* step_slot;
  float* step_states;
  VerifyAccept accept;
};
ClassicArgs classic_args(const GdnVerifyClassicParams& p) {
  return {p.io, static_cast<float*>(p.state), p.step_slot, static_cast<float*>(p.step_states), p.accept};
}
static_assert(sizeof(ClassicArgs) == 128, "the parameter block of the fp32 kernels before 16-bit states");

// NL consecutive elements of a state row (one lane's share of a row) as one access (fp32: float4 /
// float2; 16-bit: 8 / 4 bytes), to fp32; store rounds s to S (16-bit: to nearest even), writes it
// and leaves the rounded values in s.
template <class S, int NL>
struct LaneRow {  // fp32
  using Vec = typename std::conditional<NL == 4, float4, float2>::type;
  __device__ __forceinline__ static void load(const float* src, float* s) {
    const Vec x = *reinterpret_cast<const Vec*>(src);
    s[0] = x.x, s[1] = x.y;
    if constexpr (NL == 4) s[2] = reinterpret_cast<const float4&>(x).z, s[3] = reinterpret_cast<const float4&>(x).w;
  }
  __device__ __forceinline__ static void store(float* dst, float* s) {
    Vec y;
    y.x = s[0], y.y = s[1];
    if constexpr (NL == 4) reinterpret_cast<float4&>(y).z = s[2], reinterpret_cast<float4&>(y).w = s[3];
    *reinterpret_cast<Vec*>(dst) = y;
  }
};
template <class S, int NL>
struct LaneRow16 {  // bf16, fp16
  using Vec = typename std::conditional<NL == 4, uint2, uint32_t>::type;
  __device__ __forceinline__ static void load(const S* src, float* s) {
    const Vec x = *reinterpret_cast<const Vec*>(src);
    const uint32_t* w = reinterpret_cast<const uint32_t*>(&x);
#pragma unroll
    for (int e = 0; e < NL / 2; ++e) {
      const float2 f = state2_to_f32(w[e], src);
      s[2 * e] = f.x, s[2 * e + 1] = f.y;
    }
  }
  __device__ __forceinline__ static void store(S* dst, float* s) {
    Vec x;
    uint32_t* w = reinterpret_cast<uint32_t*>(&x);
#pragma unroll
    for (int e = 0; e < NL / 2; ++e) {
      w[e] = f32_to_state2(s[2 * e], s[2 * e + 1], dst);
      const float2 f = state2_to_f32(w[e], dst);
      s[2 * e] = f.x, s[2 * e + 1] = f.y;
    }
    *reinterpret_cast<Vec*>(dst) = x;
  }
};
template <int NL>
struct LaneRow<__nv_bfloat16, NL> : LaneRow16<__nv_bfloat16, NL> {};
template <int NL>
struct LaneRow<__half, NL> : LaneRow16<__half, NL> {};

// Asynchronous global -> shared copy of 4 or 8 bytes (a lane's slice of a bf16 key or query).
template <int BYTES>
__device__ __forceinline__ void cp_async_small(void* smem_dst, const void* gsrc) {
  static_assert(BYTES == 4 || BYTES == 8, "4 or 8 bytes");
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;" ::"r"(s), "l"(gsrc), "n"(BYTES) : "memory");
}

// One halving-exchange step with the lane MASK apart: a lane keeps half of its first 2 HALF values
// and adds its partner's partial sums of that half (values, not addresses, selected: x stays in
// registers).
template <int HALF, int MASK = HALF, int N>
__device__ __forceinline__ void halving_step(float (&x)[N], int lane) {
  const bool upper = lane & MASK;
#pragma unroll
  for (int j = 0; j < HALF; ++j) {
    const float lo = x[j], hi = x[j + HALF];
    const float send = upper ? lo : hi, keep = upper ? hi : lo;
    x[j] = keep + __shfl_xor_sync(0xffffffffu, send, MASK);
  }
}
// Sums over the warp of 32 values per lane: lane l returns the sum of every lane's x[l] (31 shuffles).
__device__ __forceinline__ float halving_sum32(float (&x)[32], int lane) {
  halving_step<16>(x, lane);
  halving_step<8>(x, lane);
  halving_step<4>(x, lane);
  halving_step<2>(x, lane);
  halving_step<1>(x, lane);
  return x[0];
}

template <int KD, class S>
__global__ void __launch_bounds__(32) gdn_verify_classic_kernel(const ClassicArgs p) {
  static_assert(KD == 64 || KD == 128, "2 or 4 elements per lane per row");
  constexpr int NL = KD / 32, R = kWarpRows;  // elements per lane per row, rows per block
  using Lane = LaneRow<S, NL>;
  const GdnVerifyIO& io = p.io;
  const int lane = threadIdx.x, tile = blockIdx.x, h = blockIdx.y, row = blockIdx.z;
  const int v0 = tile * R, T = io.tokens, kh = h / (io.HV / io.H);
  __shared__ __align__(16) __nv_bfloat16 s_k[kTMax][KD], s_q[kTMax][KD];
  __shared__ __align__(16) __nv_bfloat16 s_v[kTMax][R];
  __shared__ float s_g[kTMax], s_beta[kTMax], s_norm[32];
  __shared__ int s_par[kTMax];

  const int slot = io.slot[row];
  // Lane t < T: the pool slot that receives node t's state (in place).
  const int node_slot = p.step_slot && lane < T ? p.step_slot[size_t(row) * T + lane] : 0;
  // The window's inputs do not depend on the slot: issued before its round trip ends.
  for (int t = 0; t < T; ++t) {
    const size_t kq = ((size_t(row) * T + t) * io.H + kh) * KD + lane * NL;
    cp_async_small<NL * 2>(&s_k[t][lane * NL], io.k + kq);
    cp_async_small<NL * 2>(&s_q[t][lane * NL], io.q + kq);
  }
  if (lane < T) {
    const size_t gate = (size_t(row) * T + lane) * io.HV + h;
    cp_async16(&s_v[lane][0], io.v + gate * io.V + v0);
    cp_async4(&s_g[lane], io.g + gate);
    cp_async4(&s_beta[lane], io.beta + gate);
    if (io.parents) cp_async4(&s_par[lane], io.parents + size_t(row) * T + lane);
  }
  if (slot < 0) {
    cp_async_wait_all();
    for (int i = lane; i < T * R; i += 32)
      io.out[((size_t(row) * T + i / R) * io.HV + h) * io.V + v0 + i % R] = __float2bfloat16_rn(0.f);
    return;
  }
  // This lane's slice of the 8 rows of node t's state (t = -1: the committed state S0).
  S* const state = reinterpret_cast<S*>(p.state);
  auto node_rows = [&](int t) -> S* {
    if (t < 0) return state + ((size_t(slot) * io.HV + h) * io.V + v0) * KD + lane * NL;
    if (p.step_slot)
      return state + ((size_t(__shfl_sync(0xffffffffu, node_slot, t)) * io.HV + h) * io.V + v0) * KD + lane * NL;
    return reinterpret_cast<S*>(p.step_states) + (((size_t(row) * T + t) * io.HV + h) * io.V + v0) * KD + lane * NL;
  };
  float s[R][NL];
  auto load_rows = [&](const S* src) {
#pragma unroll
    for (int i = 0; i < R; ++i) Lane::load(src + size_t(i) * KD, s[i]);
  };
  load_rows(node_rows(-1));
  cp_async_wait_all();
  __syncwarp();

  // Norm sums of the window while S0 is in flight: value t |k_t|^2, 8 + t |q_t|^2, 16 + t k_t.q_t
  // (raw), reduced together; lane l keeps value l in s_norm[l].
  {
    float sums[32];
#pragma unroll
    for (int t = 0; t < kTMax; ++t) {
      float kk = 0.f, qq = 0.f, kq = 0.f;
#pragma unroll
      for (int e = 0; e < NL; ++e) {
        // Rows t >= T hold no token: read (in bounds) and masked, so that sums stays in registers.
        const bool live = t < T;
        const float kf = live ? __bfloat162float(s_k[t][lane * NL + e]) : 0.f;
        const float qf = live ? __bfloat162float(s_q[t][lane * NL + e]) : 0.f;
        kk = fmaf(kf, kf, kk), qq = fmaf(qf, qf, qq), kq = fmaf(kf, qf, kq);
      }
      sums[t] = kk, sums[kTMax + t] = qq, sums[2 * kTMax + t] = kq;
    }
#pragma unroll
    for (int j = 3 * kTMax; j < 32; ++j) sums[j] = 0.f;
    s_norm[lane] = halving_sum32(sums, lane);
    __syncwarp();
  }

  for (int t = 0; t < T; ++t) {
    int parent = t - 1;
    if (io.parents) {
      parent = s_par[t] - 1;
      if (parent < -1 || parent >= t) parent = -1;  // out of range: the committed state
    }
    if (parent != t - 1) load_rows(node_rows(parent));
    const float kinv = window_norm_scale<KD>(s_norm[t], false);
    const float qinv = window_norm_scale<KD>(s_norm[kTMax + t], true);
    const float kq = s_norm[2 * kTMax + t] * kinv * qinv;
    const float decay = expf(s_g[t]), beta = s_beta[t];
    float k[NL], q[NL];
#pragma unroll
    for (int e = 0; e < NL; ++e) {
      k[e] = __bfloat162float(s_k[t][lane * NL + e]) * kinv;
      q[e] = __bfloat162float(s_q[t][lane * NL + e]) * qinv;
    }
    // S_p[i].k and S_p[i].q (value m = 2 i + {0, 1}) by halving exchanges over lanes 16 .. 2 and a
    // last pair sum: lanes 4 i .. 4 i + 3 hold row i, a_i on the first two, b_i on the last two.
    float p16[2 * R];
#pragma unroll
    for (int i = 0; i < R; ++i) {
      float a = 0.f, b = 0.f;
#pragma unroll
      for (int e = 0; e < NL; ++e) a = fmaf(s[i][e], k[e], a), b = fmaf(s[i][e], q[e], b);
      p16[2 * i] = a, p16[2 * i + 1] = b;
    }
    static_assert(R == 8, "16 values over lanes 16 .. 2");
    halving_step<8, 16>(p16, lane);
    halving_step<4, 8>(p16, lane);
    halving_step<2, 4>(p16, lane);
    halving_step<1, 2>(p16, lane);
    const float sum = p16[0] + __shfl_xor_sync(0xffffffffu, p16[0], 1);
    const int row_own = (lane >> 2) & (R - 1);
    const float a = sum, b = __shfl_xor_sync(0xffffffffu, sum, 2);  // on lanes 4 i, 4 i + 1
    const float u_own = beta * (__bfloat162float(s_v[t][row_own]) - decay * a);
    if ((lane & 3) == 0)
      io.out[((size_t(row) * T + t) * io.HV + h) * io.V + v0 + row_own] = __float2bfloat16_rn(decay * b + kq * u_own);
    S* dst = node_rows(t);
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const float u = __shfl_sync(0xffffffffu, u_own, 4 * i);
#pragma unroll
      for (int e = 0; e < NL; ++e) s[i][e] = fmaf(decay, s[i][e], u * k[e]);
      Lane::store(dst + size_t(i) * KD, s[i]);  // 16-bit: the walk goes on from the rounded rows
    }
  }
}

// Copy variant: one block per (row, head) copies the accepted node's V x K state (elements S) into
// the pool, 16 B per access.
constexpr int kCopyThreads = 256;
template <class S>
__global__ void __launch_bounds__(kCopyThreads) gdn_verify_classic_commit_kernel(const ClassicArgs p) {
  const GdnVerifyIO& io = p.io;
  const int row = blockIdx.x / io.HV, h = blockIdx.x % io.HV;
  const int slot = io.slot[row];
  const int m = min(p.accept.accept_len[row], io.tokens);
  if (slot < 0 || m <= 0) return;
  int node = p.accept.accept_nodes ? p.accept.accept_nodes[row * io.tokens + m - 1] - 1 : m - 1;
  node = min(max(node, 0), io.tokens - 1);
  const size_t n4 = size_t(io.V) * io.K / (16 / sizeof(S));  // 16-byte pieces
  const float4* src = reinterpret_cast<const float4*>(p.step_states) + ((size_t(row) * io.tokens + node) * io.HV + h) * n4;
  float4* dst = reinterpret_cast<float4*>(p.state) + (size_t(slot) * io.HV + h) * n4;
  constexpr int kUnroll = 8;
  for (size_t base = threadIdx.x; base < n4; base += kCopyThreads * kUnroll) {
    float4 x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (base + u * kCopyThreads < n4) x[u] = src[base + u * kCopyThreads];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (base + u * kCopyThreads < n4) dst[base + u * kCopyThreads] = x[u];
  }
}

void validate(const GdnVerifyClassicParams& p, const char* who) {
  validate_verify_io(p.io, who);
  if (p.io.batch > 65535)
    throw std::invalid_argument(std::string(who) + ": unsupported batch " + std::to_string(p.io.batch) +
                                " (at most 65535 rows per launch)");
  if (!known_state_type(p.state_type))
    throw std::invalid_argument(std::string(who) + ": unsupported state dtype " + std::to_string(int(p.state_type)));
  if (p.io.batch > 0 && !p.state) throw std::invalid_argument(std::string(who) + ": null state pool");
  if (p.io.batch > 0 && !p.step_states == !p.step_slot)
    throw std::invalid_argument(std::string(who) + ": set exactly one of step_states (copy) and step_slot (in place)");
}

}  // namespace

void gdn_verify_classic(const GdnVerifyClassicParams& p, cudaStream_t stream) {
  validate(p, "gdn_verify_classic");
  if (p.io.batch == 0) return;
  const dim3 grid(unsigned(p.io.V / kWarpRows), unsigned(p.io.HV), unsigned(p.io.batch));
  const ClassicArgs a = classic_args(p);
  dispatch_state_type("gdn_verify_classic", p.state_type, [&](auto tag) {
    using S = typename decltype(tag)::type;
    dispatch_head_dims<KeyHeadDims>("gdn_verify_classic", p.io.K, p.io.V,
                                    [&](auto K, auto) { gdn_verify_classic_kernel<K, S><<<grid, 32, 0, stream>>>(a); });
  });
  KVB_CUDA_CHECK_LAUNCH();
}

void gdn_verify_classic_commit(const GdnVerifyClassicParams& p, cudaStream_t stream) {
  validate(p, "gdn_verify_classic_commit");
  if (p.step_slot)
    throw std::invalid_argument("gdn_verify_classic_commit: the in-place variant (step_slot) commits by index, no kernel");
  if (!p.accept.accept_len) throw std::invalid_argument("gdn_verify_classic_commit: accept_len is null");
  if (p.io.batch == 0) return;
  const ClassicArgs a = classic_args(p);
  dispatch_state_type("gdn_verify_classic_commit", p.state_type, [&](auto tag) {
    using S = typename decltype(tag)::type;
    gdn_verify_classic_commit_kernel<S><<<unsigned(p.io.batch) * p.io.HV, kCopyThreads, 0, stream>>>(a);
  });
  KVB_CUDA_CHECK_LAUNCH();
}

}  // namespace kvbuf
