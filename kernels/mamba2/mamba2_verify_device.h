// Device and host helpers shared by the Mamba-2 verify kernels (include from .cu files only). The
// warp-row layout, dot products and reductions are the decode kernels' (mamba2_decode_device.h).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/mamba2/mamba2_decode_device.h"
#include "kernels/mamba2/mamba2_verify.h"

namespace kvbuf::mamba2_detail {

// The step size of head h for token t of request row `row` (token_dt's rule on the [B, T, NH]
// layout), in two halves: the loads (a kernel can issue them early and hold them in registers past
// a barrier) and the arithmetic.
struct RawTokenDt {
  __nv_bfloat16 dt;
  float bias;
};
__device__ __forceinline__ RawTokenDt load_token_dt(const Mamba2VerifyIO& io, int row, int t, int h) {
  return {io.dt[(size_t(row) * io.tokens + t) * io.NH + h], io.dt_bias ? io.dt_bias[h] : 0.f};
}
__device__ __forceinline__ float token_step(const Mamba2VerifyIO& io, RawTokenDt raw) {
  const float d = __bfloat162float(raw.dt) + raw.bias;
  return io.dt_softplus && d <= 20.f ? log1pf(expf(d)) : d;
}
__device__ __forceinline__ float verify_token_dt(const Mamba2VerifyIO& io, int row, int t, int h) {
  return token_step(io, load_token_dt(io, row, t, h));
}

// Output of row p of head h for token t of request row `row`: y (the D x term folded in by the
// caller) times silu(*z) when a gate is given (global or shared memory).
__device__ __forceinline__ void store_verify_output(const Mamba2VerifyIO& io, int row, int t, int h, int p, float y,
                                                    const __nv_bfloat16* z) {
  if (z) y *= silu(__bfloat162float(*z));
  io.out[((size_t(row) * io.tokens + t) * io.NH + h) * io.P + p] = __float2bfloat16_rn(y);
}
// Zeros for every output of a padding row's rows p0 .. p0 + rows - 1 of head h (threads 0 .. n-1).
__device__ __forceinline__ void zero_padding_outputs(const Mamba2VerifyIO& io, int row, int h, int p0, int rows) {
  for (int i = threadIdx.x; i < io.tokens * rows; i += blockDim.x)
    io.out[((size_t(row) * io.tokens + i / rows) * io.NH + h) * io.P + p0 + i % rows] = __float2bfloat16_rn(0.f);
}

// The parent of node t (0-based; -1 = the committed state) from the 1-based parents of a row
// (null: a chain); out-of-range entries read as 0. In two halves as the step size: the raw 1-based
// entry (t for a chain), then the parent.
__device__ __forceinline__ int load_node_parent(const int32_t* row_parents, int t) { return row_parents ? row_parents[t] : t; }
__device__ __forceinline__ int parent_of(int raw, int t) {
  const int par = raw - 1;
  return par < -1 || par >= t ? -1 : par;
}
__device__ __forceinline__ int node_parent(const int32_t* row_parents, int t) {
  return parent_of(load_node_parent(row_parents, t), t);
}

// Checks shared by every verify entry point (throws std::invalid_argument naming `who`).
inline void validate_verify_io(const Mamba2VerifyIO& io, const char* who) {
  auto fail = [&](const std::string& m) { throw std::invalid_argument(std::string(who) + ": " + m); };
  if (io.batch < 0) fail("batch must be >= 0");
  if (io.batch > kMaxBatch)
    fail("unsupported batch " + std::to_string(io.batch) + " (at most " + std::to_string(kMaxBatch) + " rows per launch)");
  if (io.tokens < 1 || io.tokens > kMamba2VerifyMaxTokens)
    fail("unsupported token count T = " + std::to_string(io.tokens) + " (1..8)");
  if (io.G <= 0 || io.NH <= 0 || io.NH % io.G != 0) fail("need G > 0 and NH a multiple of G");
  if (io.N != 64 && io.N != 128)
    fail("unsupported head dims P=" + std::to_string(io.P) + " N=" + std::to_string(io.N) +
         " (supported: N in {64, 128}, P a multiple of 8)");
  if (io.P <= 0 || io.P % kWarpRows != 0)
    fail("unsupported head dims P=" + std::to_string(io.P) + " (P a multiple of 8)");
  if (io.batch > 0 && (!io.slot || !io.x || !io.B || !io.C || !io.dt || !io.A || !io.D || !io.out))
    fail("slot, x, B, C, dt, A, D and out must be set");
}

// Calls f(std::integral_constant<int, N>{}) for the supported d_state (validate_verify_io refused
// the others).
template <class F>
void dispatch_verify_dims(const Mamba2VerifyIO& io, const char* who, F&& f) {
  Mamba2StepIO dims;
  dims.P = io.P, dims.N = io.N;
  dispatch_head_dims(dims, who, f);
}

}  // namespace kvbuf::mamba2_detail
