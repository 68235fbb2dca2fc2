// Classic speculative verify for Gated DeltaNet (what serving engines do today), chains and trees,
// and its commit: the baseline of shared/design/kvbuffer-math.md section 5.
//
// Math, per request and value head, per node t = 1..T with parent p(t) (S_0 = the committed state):
//   D = e^{g_t} S_p(t);  u_t = beta_t (v_t - D^T k_t);  S_t = D + k_t u_t^T;  o_t = S_t^T q_t
// and every S_t is written to a scratch pool (a state per node); the commit copies the state of
// the last accepted node into the state pool (m = 0 keeps the state).
// Layouts: S: [slots, HV, V, K] fp32, K contiguous; step_states [B, T, HV, V, K] fp32;
// q, k [B, T, H, K], v [B, T, HV, V] bf16; g, beta [B, T, HV] fp32; out [B, T, HV, V] bf16.
// A strong baseline: the state stays in registers across a chain (read once, written T times),
// every access is a 16-byte vector and each lane pair covers a full 32-byte sector per
// instruction, each thread keeps 2 x K/8 loads in flight, and a node whose parent is not the
// previous node (trees) reloads its parent's state (from the pool or the scratch it just wrote).
//
// Measured (NVIDIA H200, Qwen3-Next shapes, 36 layer pools in one CUDA graph, verify + commit per
// layer, commit cbece77d677e, results/verify_h200.csv): T = 5: 12.9 us at batch 1, 681.3 us at 128,
// 1352.1 us at 256, 75% of the copy bandwidth at batch >= 64 (T = 1: 84%).
#include <stdexcept>
#include <string>

#include "kernels/common.cuh"
#include "kernels/gdn_verify.h"
#include "kernels/gdn_verify_device.h"

namespace kvbuf {
namespace {

using namespace gdn_verify_detail;

template <int KD>
__global__ void __launch_bounds__(kThreads) gdn_verify_classic_kernel(const GdnVerifyClassicParams p) {
  constexpr int NF = KD / 8, KP = KD + 4;
  const GdnVerifyIO& io = p.io;
  const VerifyBlock b = verify_block(io.HV, io.V);
  const int T = io.tokens;
  const int kh = b.h / (io.HV / io.H);
  const int slot = io.slot[b.row];
  if (slot < 0) {
    for (int t = 0; t < T; ++t)
      io.out[((size_t(b.row) * T + t) * io.HV + b.h) * io.V + b.v0 + threadIdx.x] = __float2bfloat16_rn(0.f);
    return;
  }
  __shared__ __align__(16) float s_k[kGdnVerifyMaxTokens * KP];
  __shared__ __align__(16) float s_q[kGdnVerifyMaxTokens * KP];
  __shared__ __align__(16) __nv_bfloat16 s_raw_kq[2 * kGdnVerifyMaxTokens * KD];
  __shared__ __align__(16) __nv_bfloat16 s_raw_v[kGdnVerifyMaxTokens * kRows];
  __shared__ float s_g[kGdnVerifyMaxTokens], s_beta[kGdnVerifyMaxTokens];
  __shared__ int s_parent[kGdnVerifyMaxTokens], s_praw[kGdnVerifyMaxTokens];
  __shared__ unsigned s_anc[kGdnVerifyMaxTokens];

  // Every global read is issued up front (tokens and gates by cp.async, the state into registers),
  // so the walk over the nodes waits on no global load.
  copy_window_kq_async<KD>(io, b.row, kh, s_raw_kq);
  copy_window_v_async(io, b.row, b.h, b.v0, s_raw_v);
  copy_window_gates_async(io, b.row, b.h, s_g, s_beta, s_praw);
  const size_t head_row0 = (size_t(slot) * io.HV + b.h) * io.V + b.v0;
  const float* s0A = p.state + (head_row0 + b.rA) * KD;
  const float* s0B = p.state + (head_row0 + b.rB) * KD;
  float4 xa[NF], xb[NF];
  load_row_halves<KD>(s0A, s0B, b.parity, xa, xb);
  cp_async_wait_all();
  __syncthreads();
  normalise_window_kq<KD>(T, s_raw_kq, s_k, s_q, KP);
  if (threadIdx.x == 0) window_tree(T, io.parents ? s_praw : nullptr, s_parent, s_anc);
  __syncthreads();

  // Scratch rows of node t for this thread's rows.
  auto step_row = [&](int t, int r) {
    return p.step_states + ((((size_t(b.row) * T + t) * io.HV + b.h) * io.V) + b.v0 + r) * KD;
  };
  for (int t = 0; t < T; ++t) {
    const int parent = s_parent[t];
    if (parent != t - 1) {
      if (parent < 0) load_row_halves<KD>(s0A, s0B, b.parity, xa, xb);
      else load_row_halves<KD>(step_row(parent, b.rA), step_row(parent, b.rB), b.parity, xa, xb);
    }
    const float decay = expf(s_g[t]), beta = s_beta[t];
    const size_t vrow = ((size_t(b.row) * T + t) * io.HV + b.h) * io.V + b.v0;
    const float va = __bfloat162float(s_raw_v[t * kRows + b.rA]), vb = __bfloat162float(s_raw_v[t * kRows + b.rB]);
    float ka = 0.f, kb = 0.f;
#pragma unroll
    for (int i = 0; i < NF; ++i) {
      xa[i] = scale4(decay, xa[i]);
      xb[i] = scale4(decay, xb[i]);
    }
    dot_row_halves<KD>(xa, xb, s_k + t * KP, b.parity, ka, kb);
    ka += __shfl_xor_sync(0xffffffffu, ka, 1);
    kb += __shfl_xor_sync(0xffffffffu, kb, 1);
    const float ua = beta * (va - ka), ub = beta * (vb - kb);
    const float4* kt = reinterpret_cast<const float4*>(s_k + t * KP);
#pragma unroll
    for (int i = 0; i < NF; ++i) {
      const float4 kf = kt[2 * i + b.parity];
      xa[i] = axpy4(ua, kf, xa[i]);
      xb[i] = axpy4(ub, kf, xb[i]);
    }
    float oa = 0.f, ob = 0.f;
    dot_row_halves<KD>(xa, xb, s_q + t * KP, b.parity, oa, ob);
    oa += __shfl_xor_sync(0xffffffffu, oa, 1);
    ob += __shfl_xor_sync(0xffffffffu, ob, 1);
    io.out[vrow + b.owned] = __float2bfloat16_rn(b.parity ? ob : oa);
    store_row_halves<KD>(step_row(t, b.rA), step_row(t, b.rB), b.parity, xa, xb);
  }
}

// One block per (row, head): copies the accepted node's V x K state into the pool, 16 B per access.
constexpr int kCopyThreads = 256;
__global__ void __launch_bounds__(kCopyThreads) gdn_verify_classic_commit_kernel(const GdnVerifyClassicParams p) {
  const GdnVerifyIO& io = p.io;
  const int row = blockIdx.x / io.HV, h = blockIdx.x % io.HV;
  const int slot = io.slot[row];
  const int m = min(p.accept.accept_len[row], io.tokens);
  if (slot < 0 || m <= 0) return;
  int node = p.accept.accept_nodes ? p.accept.accept_nodes[row * io.tokens + m - 1] - 1 : m - 1;
  node = min(max(node, 0), io.tokens - 1);
  const size_t n4 = size_t(io.V) * io.K / 4;
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
  if (p.io.batch > 0 && (!p.state || !p.step_states))
    throw std::invalid_argument(std::string(who) + ": null pointer among state pool or step states");
}

}  // namespace

void gdn_verify_classic(const GdnVerifyClassicParams& p, cudaStream_t stream) {
  validate(p, "gdn_verify_classic");
  if (p.io.batch == 0) return;
  const unsigned blocks = unsigned(p.io.batch) * p.io.HV * (p.io.V / kRows);
  switch (p.io.K) {
    case 64: gdn_verify_classic_kernel<64><<<blocks, kThreads, 0, stream>>>(p); break;
    case 128: gdn_verify_classic_kernel<128><<<blocks, kThreads, 0, stream>>>(p); break;
    default: throw std::invalid_argument("gdn_verify_classic: unsupported key head dim " + std::to_string(p.io.K));
  }
  KVB_CUDA_CHECK_LAUNCH();
}

void gdn_verify_classic_commit(const GdnVerifyClassicParams& p, cudaStream_t stream) {
  validate(p, "gdn_verify_classic_commit");
  if (!p.accept.accept_len) throw std::invalid_argument("gdn_verify_classic_commit: accept_len is null");
  if (p.io.batch == 0) return;
  gdn_verify_classic_commit_kernel<<<unsigned(p.io.batch) * p.io.HV, kCopyThreads, 0, stream>>>(p);
  KVB_CUDA_CHECK_LAUNCH();
}

}  // namespace kvbuf
