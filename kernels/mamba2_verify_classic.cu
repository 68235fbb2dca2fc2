// mamba2_verify_classic: classic speculative verify of Mamba-2 as serving engines run it (vLLM's
// selective_state_update over T draft tokens with a state slot per token), chains and trees.
//
// Math, per request and head h (group g = h / (NH / G)), per node t = 1..T with parent p(t)
// (S_0 = the committed state), dt_t = softplus(dt_raw + dt_bias):
//   S_t = e^{dt_t A} S_p(t) + dt_t x_t B_t^T;   y_t = S_t C_t + D x_t,  y_t *= silu(z_t) when z is given
// and S_t is written to pool slot step_slot[row, t] (in place; the scheduler commits by index).
// Layouts: S [slots, NH, P, N] fp32, N contiguous; x, z, out [B, T, NH, P], B, C [B, T, G, N],
// dt [B, T, NH] bf16; dt_bias, A, D [NH] fp32; step_slot [B, T], parents [B, T] int32.
// Work split: the recurrent decode kernel's warp rows (mamba2_decode_device.h), one warp per block
// (its measured best shape): a warp owns 8 state rows of one head, lane l the columns
// [l N/32, (l+1) N/32) of each. The window's B, C (T x N) and x (T x 8 rows) are copied to shared
// memory (cp.async) while S0 loads; then per node the 8 rows are updated in registers, stored to the
// node's slot, and their 8 dot products with C_t reduced by halving exchanges (9 shuffles). A tree
// node whose parent is not the previous node reloads its parent's rows (the same lanes stored
// them, so program order suffices).
// Memory: S0 read once, T states written: (1 + T) P N 4 bytes per head and request.
// Measured (H200, Nemotron-3 Nano shapes, 23 layer pools in one CUDA graph, T = 5, commit
// a60e8adf74aa): 7.54 / 430.87 / 1709.2 us at batch 1 / 128 / 512, 90% of copy from batch 128
// (vLLM's 8.03 / 443.7 / 1803; kernels/notes/mamba2_verify.md).
#include <stdexcept>
#include <string>

#include "kernels/common.cuh"
#include "kernels/mamba2_verify.h"
#include "kernels/mamba2_verify_device.h"

namespace kvbuf {
namespace mamba2_detail {
namespace {

constexpr int kTMax = kMamba2VerifyMaxTokens;

template <int N>
__global__ void __launch_bounds__(32) mamba2_verify_classic_kernel(const Mamba2VerifyClassicParams p) {
  constexpr int NL = N / 32, R = kWarpRows;
  const Mamba2VerifyIO& io = p.io;
  const int lane = threadIdx.x, h = blockIdx.y, row = blockIdx.z, p0 = blockIdx.x * R;
  const int T = io.tokens, g = h / (io.NH / io.G);
  __shared__ __align__(16) __nv_bfloat16 s_B[kTMax][N], s_C[kTMax][N], s_x[kTMax][R];

  const int slot = io.slot[row];
  // Lane t < T: node t's slot, step size and parent.
  const int node_slot = lane < T ? p.step_slot[size_t(row) * T + lane] : 0;
  const float dt_lane = lane < T ? verify_token_dt(io, row, lane, h) : 0.f;
  const int par_lane = lane < T ? node_parent(io.parents ? io.parents + size_t(row) * T : nullptr, lane) : 0;
  // The window's inputs do not depend on the slot: issued before its round trip ends.
  constexpr int CH = N / 8;  // 16-byte chunks per vector
  for (int c = lane; c < 2 * T * CH; c += 32) {
    const int v = c / CH, e = (c % CH) * 8, t = v % T;
    const __nv_bfloat16* src = (v < T ? io.B : io.C) + ((size_t(row) * T + t) * io.G + g) * N + e;
    cp_async16((v < T ? s_B[t] : s_C[t]) + e, src);
  }
  if (lane < T) cp_async16(s_x[lane], io.x + ((size_t(row) * T + lane) * io.NH + h) * io.P + p0);
  const float A = io.A[h], D = io.D[h];
  if (slot < 0) {
    cp_async_wait_all();
    zero_padding_outputs(io, row, h, p0, R);
    return;
  }
  auto rows_of = [&](int s) { return p.state + ((size_t(s) * io.NH + h) * io.P + p0) * N + lane * NL; };
  float s[R][NL];
  auto load_rows = [&](const float* src) {
#pragma unroll
    for (int i = 0; i < R; ++i) load_row<N>(src + size_t(i) * N, s[i]);
  };
  load_rows(rows_of(slot));
  cp_async_wait_all();
  __syncwarp();

  for (int t = 0; t < T; ++t) {
    const int parent = __shfl_sync(0xffffffffu, par_lane, t);
    if (parent != t - 1) load_rows(rows_of(parent < 0 ? slot : __shfl_sync(0xffffffffu, node_slot, parent)));
    const float dt = __shfl_sync(0xffffffffu, dt_lane, t);
    const float decay = expf(dt * A);
    float Bv[NL], Cv[NL], x[R];
    bf16_slice<N>(load_bf16_raw<N>(s_B[t], lane), Bv);
    bf16_slice<N>(load_bf16_raw<N>(s_C[t], lane), Cv);
    bf16x8(*reinterpret_cast<const uint4*>(s_x[t]), x);
    float* dst = rows_of(__shfl_sync(0xffffffffu, node_slot, t));
    float y8[R];
    step_warp_rows<N, R>(s, x, Bv, Cv, dt, decay, dst, y8);
    const float y = row_sums8(y8, lane);
    const float x_own = __bfloat162float(s_x[t][(lane >> 2) & (R - 1)]);
    write_verify_output(io, row, t, h, p0, lane, fmaf(D, x_own, y));
  }
}

}  // namespace
}  // namespace mamba2_detail

void mamba2_verify_classic(const Mamba2VerifyClassicParams& p, cudaStream_t stream) {
  using namespace mamba2_detail;
  const char* who = "mamba2_verify_classic";
  validate_verify_io(p.io, who);
  if (p.io.batch > 0 && (!p.state || !p.step_slot))
    throw std::invalid_argument(std::string(who) + ": state and step_slot must be set");
  if (p.io.batch == 0) return;
  const dim3 grid(unsigned(p.io.P / kWarpRows), unsigned(p.io.NH), unsigned(p.io.batch));
  dispatch_verify_dims(p.io, who, [&](auto n) {
    launch_kernel(mamba2_verify_classic_kernel<decltype(n)::value>, grid, dim3(32), 0, stream, false, p);
  });
}

}  // namespace kvbuf
