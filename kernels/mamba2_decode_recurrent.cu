// mamba2_decode_recurrent: the classic selective state update of Mamba-2 (vLLM's
// selective_state_update), one token per request, in place.
//
// Math (kvbuffer-math.md section 8, reference/mamba2.h), per head h of group g = h / (NH / G):
//   dt = softplus(dt_raw + dt_bias)      (or dt_raw + dt_bias as given)
//   S[p,:] <- e^{dt A} S[p,:] + (dt x[p]) B          (S is P x N, fp32)
//   y[p]    = S[p,:].C + D x[p],   y *= silu(z) when z is given
// Layouts: S [slots, NH, P, N] fp32, N contiguous, in place; x, z, out [B, NH, P] bf16; B, C
//   [B, G, N] bf16; dt [B, NH] bf16; dt_bias, A, D [NH] fp32; slot [B] int32 (negative: padding,
//   output zeros only).
// Work split: warp rows (mamba2_decode_device.h): one warp per 8 state rows, lane l holds columns
//   [l N/32, (l+1) N/32) of the 8 rows in registers (the shape of gdn_decode_recurrent's one-warp
//   kernel, which reaches 97% of copy there); block = rows_per_block / 8 warps of one head, grid
//   (P / rows_per_block, NH, batch). The token's x, B, C, dt are issued before the slot's round
//   trip ends; then the 8 rows are loaded at once, updated, stored, and their 8 dot products with
//   C reduced by halving exchanges (9 shuffles); lane 4 i writes row i's output.
// Memory: the state is read and written once (2 P N 4 bytes per head and request); everything
//   else is < 1% of that. Target: the copy bandwidth at batch >= 64.
// rows_per_block (0 = chosen): 8 by default (one-warp blocks, log in kernels/notes/mamba2_decode.md).
// Template parameter: d_state N in {64, 128}; P is a runtime multiple of rows_per_block.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/common.cuh"
#include "kernels/mamba2_decode.h"
#include "kernels/mamba2_decode_device.h"

namespace kvbuf {
namespace mamba2_detail {

void validate_step_io(const Mamba2StepIO& io, const char* who) {
  auto fail = [&](const std::string& m) { throw std::invalid_argument(std::string(who) + ": " + m); };
  if (io.batch < 0) fail("batch must be >= 0");
  if (io.batch > kMaxBatch)
    fail("unsupported batch " + std::to_string(io.batch) + " (at most " + std::to_string(kMaxBatch) + " rows per launch)");
  if (io.G <= 0 || io.NH <= 0 || io.NH % io.G != 0) fail("need G > 0 and NH a multiple of G");
  // N is checked by dispatch_head_dims, the one list of instantiated d_state values.
  if (io.P <= 0 || io.P % kWarpRows != 0)
    fail("unsupported head dims P=" + std::to_string(io.P) + " (P a multiple of 8)");
  if (!io.slot || !io.x || !io.B || !io.C || !io.dt || !io.A || !io.D || !io.out)
    fail("slot, x, B, C, dt, A, D and out must be set");
  if (io.rows_per_block != 0) {
    const int r = io.rows_per_block;
    if (!(r == 8 || r == 16 || r == 32 || r == 64) || io.P % r != 0)
      fail("unsupported rows_per_block " + std::to_string(r) + " (8, 16, 32 or 64, dividing P)");
  }
}

int choose_rows_per_block(const Mamba2StepIO& io, RowsRule rule) {
  if (io.rows_per_block) return io.rows_per_block;
  static const int sms = [] {
    int dev = 0, n = 0;
    KVB_CUDA_CHECK(cudaGetDevice(&dev));
    KVB_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    return n;
  }();
  int rows = kWarpRows;
  while (rows * 2 <= std::min(io.P, rule.max_rows) && io.P % (rows * 2) == 0) rows *= 2;
  const long heads = long(io.batch) * io.NH;
  while (rows > kWarpRows && heads * (io.P / rows) < long(rule.min_blocks_per_sm) * sms) rows /= 2;
  return rows;
}

namespace {

template <int N>
__global__ void __launch_bounds__(kMaxRowsPerBlock * 4) mamba2_decode_recurrent_kernel(Mamba2RecurrentParams p) {
  constexpr int NL = N / 32, R = kWarpRows;
  const Mamba2StepIO& io = p.io;
  const WarpCoords c = warp_coords(io);
  const int lane = c.lane;
  const int slot = io.slot[c.row];
  // The token's inputs do not depend on the slot: issued before its round trip ends.
  const size_t xo = (size_t(c.row) * io.NH + c.h) * io.P + c.p0;
  const uint4 xraw = *reinterpret_cast<const uint4*>(io.x + xo);
  const size_t bco = (size_t(c.row) * io.G + c.g) * N;
  const auto braw = load_bf16_raw<N>(io.B + bco, lane), craw = load_bf16_raw<N>(io.C + bco, lane);
  const float dt = token_dt(io, c.row, c.h);
  const float A = io.A[c.h], D = io.D[c.h];
  if (slot < 0) {
    if (lane < R) io.out[xo + lane] = __float2bfloat16_rn(0.f);
    return;
  }
  float* rows = p.state + ((size_t(slot) * io.NH + c.h) * io.P + c.p0) * N + lane * NL;
  float s[R][NL];
#pragma unroll
  for (int i = 0; i < R; ++i) load_row<N>(rows + size_t(i) * N, s[i]);
  float x[R], Bv[NL], Cv[NL];
  bf16x8(xraw, x);
  bf16_slice<N>(braw, Bv);
  bf16_slice<N>(craw, Cv);
  const float decay = expf(dt * A);
  float y8[R];
#pragma unroll
  for (int i = 0; i < R; ++i) {
    const float dx = dt * x[i];
#pragma unroll
    for (int e = 0; e < NL; ++e) s[i][e] = fmaf(decay, s[i][e], dx * Bv[e]);
    store_row<N>(rows + size_t(i) * N, s[i]);
    y8[i] = dot<NL>(s[i], Cv);
  }
  const float y = row_sums8(y8, lane);
  // x of this lane's row (lane >> 2) & 7 without a dynamically indexed register array.
  const float x_own = __bfloat162float(io.x[xo + ((lane >> 2) & (R - 1))]);
  write_output(io, xo, lane, y, D, x_own);
}

}  // namespace

int recurrent_rows(const Mamba2StepIO& io) { return choose_rows_per_block(io, kRecurrentRows); }

}  // namespace mamba2_detail

int mamba2_decode_recurrent_rows_per_block(const Mamba2StepIO& io) { return mamba2_detail::recurrent_rows(io); }

void mamba2_decode_recurrent(const Mamba2RecurrentParams& p, cudaStream_t stream) {
  using namespace mamba2_detail;
  const char* who = "mamba2_decode_recurrent";
  validate_step_io(p.io, who);
  if (!p.state) throw std::invalid_argument(std::string(who) + ": state must be set");
  if (p.io.batch == 0) return;
  dispatch_head_dims(p.io, who, [&](auto n) {
    const int rows = recurrent_rows(p.io);
    launch_kernel(mamba2_decode_recurrent_kernel<decltype(n)::value>, decode_grid(p.io, rows), decode_block(rows), 0,
                  stream, false, p);
  });
}

}  // namespace kvbuf
