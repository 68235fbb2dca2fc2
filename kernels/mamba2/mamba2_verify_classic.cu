// mamba2_verify_classic: classic speculative verify of Mamba-2 as serving engines run it (vLLM's
// selective_state_update over T draft tokens with a state slot per token), chains and trees.
//
// Math, per request and head h (group g = h / (NH / G)), per node t = 1..T with parent p(t)
// (S_0 = the committed state), dt_t = softplus(dt_raw + dt_bias):
//   S_t = e^{dt_t A} S_p(t) + dt_t x_t B_t^T;   y_t = S_t C_t + D x_t,  y_t *= silu(z_t) when z is given
// and S_t is written to pool slot step_slot[row, t] (in place; the scheduler commits by index).
// Layouts: S [slots, NH, P, N] in the state dtype (fp32, bf16 or fp16: the element S), N contiguous; x, z, out [B, T, NH, P], B, C [B, T, G, N],
// dt [B, T, NH] bf16; dt_bias, A, D [NH] fp32; step_slot [B, T], parents [B, T] int32.
// Work split: the recurrent decode kernel's warp rows (mamba2_decode_device.h): a warp owns R state
// rows of one head (2, 4 or 8 by the grid's size, classic_rows_per_warp), lane l the columns
// [l N/32, (l+1) N/32) of each; a block holds 8 rows (8 / R warps). The window's B, C (T x N) and x
// (T x 8 rows) are copied to shared memory (cp.async) once per block while S0 loads; then per node
// the warp's rows are updated in registers, stored to the node's slot, and their dot products with
// C_t reduced by halving exchanges (row_sums). A tree node whose parent is not the previous node
// reloads its parent's rows (the same lanes stored them, so program order suffices).
// A 16-bit state: the rows load and store in S and compute in fp32; each node's store rounds once to
// nearest, the node's output and the next node of a chain use the fp32 rows in registers, and a tree
// node whose parent is not the previous node reloads the parent's rounded rows (the reference does
// the same: mamba2_verify_classic_window's StateStore).
// Memory: S0 read once, T states written: (1 + T) P N sizeof(S) bytes per head and request.
// Measured (the paper preset, commit 33b750927806, H200, Nemotron-3 Nano shapes, 23 layer pools
// per CUDA graph, T = 5, results/verify_h200.csv): 6.70 / 30.00 / 212.07 / 419.74 / 834.54 / 1664.97
// us at batch 1 / 8 / 64 / 128 / 256 / 512, 90-91% of copy from batch 64 (vLLM's 8.03 / 30.1 / 222.4
// / 443.7 / 893.8 / 1803; kernels/mamba2/notes/mamba2_verify.md run 10).
#include <cstddef>
#include <stdexcept>
#include <string>

#include "kernels/common/common.cuh"
#include "kernels/mamba2/mamba2_verify.h"
#include "kernels/mamba2/mamba2_verify_device.h"

namespace kvbuf {
namespace mamba2_detail {
namespace {

constexpr int kTMax = kMamba2VerifyMaxTokens;
// state_type sits in the padding after rows_per_warp: the fields' offsets and the struct's size are
// those of the fp32-only Params (the fp32 kernels' SASS).
static_assert(offsetof(Mamba2VerifyClassicParams, rows_per_warp) == 136 && offsetof(Mamba2VerifyClassicParams, state_type) == 140 &&
                  sizeof(Mamba2VerifyClassicParams) == 144,
              "Mamba2VerifyClassicParams' layout");

// R state rows per warp (2, 4 or 8; kWarpRows / R warps per block): a block holds 8 rows of one
// head and stages the window once for its warps.
template <int N, int R, class S>
__global__ void __launch_bounds__(kWarpRows / R * 32) mamba2_verify_classic_kernel(const Mamba2VerifyClassicParams p) {
  constexpr int NL = N / 32;
  const Mamba2VerifyIO& io = p.io;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, h = blockIdx.y, row = blockIdx.z;
  const int pb = blockIdx.x * kWarpRows, p0 = pb + warp * R;  // the block's and the warp's first row
  const int T = io.tokens, g = head_group(h, io.NH, io.G).g;
  __shared__ __align__(16) __nv_bfloat16 s_B[kTMax][N], s_C[kTMax][N], s_x[kTMax][kWarpRows];

  const int slot = io.slot[row];
  // Lane t < T: node t's slot, step size and parent.
  const int node_slot = lane < T ? p.step_slot[size_t(row) * T + lane] : 0;
  const float dt_lane = lane < T ? verify_token_dt(io, row, lane, h) : 0.f;
  const int par_lane = lane < T ? node_parent(io.parents ? io.parents + size_t(row) * T : nullptr, lane) : 0;
  // The window's inputs do not depend on the slot: issued before its round trip ends.
  constexpr int CH = N / 8;  // 16-byte chunks per vector
  for (int c = threadIdx.x; c < 2 * T * CH; c += blockDim.x) {
    const int v = c / CH, e = (c % CH) * 8, t = v % T;
    const __nv_bfloat16* src = (v < T ? io.B : io.C) + ((size_t(row) * T + t) * io.G + g) * N + e;
    cp_async16((v < T ? s_B[t] : s_C[t]) + e, src);
  }
  if (threadIdx.x < T) cp_async16(s_x[threadIdx.x], io.x + ((size_t(row) * T + threadIdx.x) * io.NH + h) * io.P + pb);
  const float A = io.A[h], D = io.D[h];
  if (slot < 0) {
    cp_async_wait_all();
    zero_padding_outputs(io, row, h, pb, kWarpRows);
    return;
  }
  auto rows_of = [&](int s) { return static_cast<S*>(p.state) + ((size_t(s) * io.NH + h) * io.P + p0) * N + lane * NL; };
  float s[R][NL];
  auto load_rows = [&](const S* src) {
#pragma unroll
    for (int i = 0; i < R; ++i) load_row<N>(src + size_t(i) * N, s[i]);
  };
  load_rows(rows_of(slot));
  cp_async_wait_all();
  __syncthreads();

  for (int t = 0; t < T; ++t) {
    const int parent = __shfl_sync(0xffffffffu, par_lane, t);
    if (parent != t - 1) load_rows(rows_of(parent < 0 ? slot : __shfl_sync(0xffffffffu, node_slot, parent)));
    const float dt = __shfl_sync(0xffffffffu, dt_lane, t);
    const float decay = expf(dt * A);
    float Bv[NL], Cv[NL], x[R];
    bf16_slice<N>(load_bf16_raw<N>(s_B[t], lane), Bv);
    bf16_slice<N>(load_bf16_raw<N>(s_C[t], lane), Cv);
    S* dst = rows_of(__shfl_sync(0xffffffffu, node_slot, t));
    float y[R];
    warp_x(*reinterpret_cast<const WarpXRaw<R>*>(s_x[t] + warp * R), x);
    step_warp_rows<N, R>(s, x, Bv, Cv, dt, decay, dst, y);
    const float y_row = row_sums<R>(y, lane);
    if (lane % kRowLanes<R> == 0) {  // the first lane of row i's sum writes it
      const int i = lane / kRowLanes<R>;
      const float x_own = __bfloat162float(s_x[t][warp * R + i]);
      const size_t o = ((size_t(row) * T + t) * io.NH + h) * io.P + p0 + i;
      store_verify_output(io, row, t, h, p0 + i, fmaf(D, x_own, y_row), io.z ? io.z + o : nullptr);
    }
  }
}

// Rows per warp, measured (kernels/mamba2/notes/mamba2_verify.md run 10): the fewest of 2, 4 and 8 whose
// grid of warps fits one wave of one-warp blocks (a short chain per warp while the grid still fits at
// once: batch 1-2 at 2 rows, 4 at 4, 8 at 8 for Nemotron-3 Nano on the H200); a larger grid runs 4
// rows in two-warp blocks, since one-warp blocks reach only the SM's block limit in warps
// (sim/launch_rules.h: classic_verify_rows_per_warp).
int classic_rows_per_warp(const Mamba2VerifyClassicParams& p) {
  if (p.rows_per_warp) return p.rows_per_warp;
  const Mamba2VerifyIO& io = p.io;
  return classic_verify_rows_per_warp(long(io.batch) * io.NH * io.P, device_limits());
}

}  // namespace
}  // namespace mamba2_detail

void mamba2_verify_classic(const Mamba2VerifyClassicParams& p, cudaStream_t stream) {
  using namespace mamba2_detail;
  const char* who = "mamba2_verify_classic";
  validate_verify_io(p.io, who);
  if (p.io.batch > 0 && (!p.state || !p.step_slot))
    throw std::invalid_argument(std::string(who) + ": state and step_slot must be set");
  if (p.state_type != StateType::FP32 && p.state_type != StateType::BF16 && p.state_type != StateType::FP16)
    throw std::invalid_argument(std::string(who) + ": unsupported state dtype " + std::to_string(int(p.state_type)));
  if (!(p.rows_per_warp == 0 || p.rows_per_warp == 2 || p.rows_per_warp == 4 || p.rows_per_warp == 8))
    throw std::invalid_argument(std::string(who) + ": unsupported rows_per_warp " + std::to_string(p.rows_per_warp) +
                                " (0 = chosen, 2, 4 or 8)");
  if (p.io.batch == 0) return;
  const dim3 grid(unsigned(p.io.P / kWarpRows), unsigned(p.io.NH), unsigned(p.io.batch));
  dispatch_state_type(who, p.state_type, [&](auto tag) {
    using S = typename decltype(tag)::type;
    dispatch_verify_dims(p.io, who, [&](auto n) {
      constexpr int N = decltype(n)::value;
      switch (classic_rows_per_warp(p)) {
        case 2: return launch_kernel(mamba2_verify_classic_kernel<N, 2, S>, grid, dim3(kWarpRows / 2 * 32), 0, stream, false, p);
        case 4: return launch_kernel(mamba2_verify_classic_kernel<N, 4, S>, grid, dim3(kWarpRows / 4 * 32), 0, stream, false, p);
        default: return launch_kernel(mamba2_verify_classic_kernel<N, 8, S>, grid, dim3(32), 0, stream, false, p);
      }
    });
  });
}

}  // namespace kvbuf
