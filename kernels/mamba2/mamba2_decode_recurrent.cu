// mamba2_decode_recurrent: the classic selective state update of Mamba-2 (vLLM's
// selective_state_update), one token per request, in place.
//
// Math (docs/kvbuffer-math.md section 8, reference/mamba2.h), per head h of group g = h / (NH / G):
//   dt = softplus(dt_raw + dt_bias)      (or dt_raw + dt_bias as given)
//   S[p,:] <- e^{dt A} S[p,:] + (dt x[p]) B          (S is P x N, computed in fp32)
//   y[p]    = S[p,:].C + D x[p],   y *= silu(z) when z is given
// Layouts: S [slots, NH, P, N] state dtype (fp32, bf16 or fp16), N contiguous, in place (a 16-bit
//   state is widened to fp32 on load and rounded to nearest once on store, after the token's
//   output is computed from the fp32 row); x, z, out [B, NH, P] bf16; B, C
//   [B, G, N] bf16; dt [B, NH] bf16; dt_bias, A, D [NH] fp32; slot [B] int32 (negative: padding,
//   output zeros only).
// Work split: warp rows (mamba2_decode_device.h): one warp per 8 state rows, lane l holds columns
//   [l N/32, (l+1) N/32) of the 8 rows in registers (the shape of gdn_decode_recurrent's one-warp
//   kernel, which reaches 97% of copy there); block = rows_per_block / 8 warps of one head, grid
//   (P / rows_per_block, NH, batch). The token's x, B, C, dt (and the output row's x and z) are
//   issued before the slot's round trip ends; then the 8 rows are loaded at once, updated, their 8
//   dot products with C reduced by halving exchanges (9 shuffles), the rows stored; lane 4 i writes
//   row i's output.
// Memory: the state is read and written once (2 P N sizeof(S) bytes per head and request);
//   everything else is < 1% of that at fp32. Target: the copy bandwidth at batch >= 64.
// rows_per_block (0 = chosen): 8 (one-warp blocks) for fp32, 16 (two warps) for a 16-bit state,
//   halved while the grid has fewer blocks than SMs; log in kernels/mamba2/notes/mamba2_decode.md.
//   The small-batch pair shape (2 rows per warp, up to batch 8) is gone: with its loads in order this
//   kernel is faster at every batch (9fb3a34, bf16 at batch 1 / 2 / 4 / 8: 2.15 / 3.78 / 4.93 / 6.84
//   us against the pair's 2.25 / 4.01 / 5.34 / 8.06; fp32 3.78 / 4.83 / 6.69 / 11.44 against 4.03 /
//   5.16 / 7.45 / 11.69; notes, "loads in order").
// A programmatic dependent of the kernel before (mamba2_decode.h, pools_ready_at_launch): with ready
//   pools each warp loads its rows before griddepcontrol.wait and the token's inputs after it.
// Results (b0b1180, results/decode16_h200.csv; H200, Nemotron-3 Nano, 23 layer pools per graph, per
//   layer, median): bf16 1.52 / 6.07 / 19.15 / 35.59 / 68.37 / 133.96 / 264.98 us at batch 1 / 8 /
//   32 / 64 / 128 / 256 / 512, 0.90 of copy at 64, 0.94-0.97 from 128; ahead of vLLM's recorded bf16
//   selective_state_update (2.49 / 6.63 / - / 40.27 / 74.58 / 146.87 / 289.48) at every batch. fp32 (the paper preset, 5050f52,
//   results/decode_h200.csv): 69.28 / 264.43 us at 64 / 256 (this kernel 68.31 / 262.15 in the notes'
//   A/B).
// Template parameters: d_state N in {64, 128} and the state element type S (float, __nv_bfloat16,
//   __half: Mamba2RecurrentParams::state_type through dispatch_state_type); P is a runtime multiple
//   of rows_per_block.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/common/common.cuh"
#include "kernels/mamba2/mamba2_decode.h"
#include "kernels/mamba2/mamba2_decode_device.h"

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
  int rows = kWarpRows;
  while (rows * 2 <= std::min(io.P, rule.max_rows) && io.P % (rows * 2) == 0) rows *= 2;
  if (rule.min_blocks_per_sm == 0) return rows;  // no grid to fill: no device query (host-side refusals need none)
  return halve_rows_to_fill(long(io.batch) * io.NH, io.P, rows, kWarpRows, rule.min_blocks_per_sm, device_limits());
}

namespace {

// The kernels' argument: Mamba2RecurrentParams with the state typed and without its run-time type
// (each instantiation is compiled for one). 128 bytes, as the Params were before state_type: at
// 136 bytes nvcc no longer loads the struct into registers at entry but reads fields from
// parameter space where used, a different fp32 SASS.
template <class S>
struct RecurrentArgs {
  Mamba2StepIO io;
  S* state;
};

// The one-warp shape (rows_per_block / 8 warps of 8 rows), its 8 rows' loads all in flight at once
// (kernels/mamba2/notes/mamba2_decode.md, "loads in order"): with each row stored as soon as it was
// updated, ptxas issued rows 3-7's loads between the first rows' stores, after their data had
// arrived; with the stores after the reduction (as in gdn_decode_recurrent's warp kernel) it still
// issued 5, then 3 after the first rows' arithmetic, at 40 registers (a 16-bit state). A minimum of
// one block per SM in the launch bounds lets it take the registers to issue all 8 first (64 for a
// 16-bit state, 80 for fp32): bf16 at batch 256 136.3 us against 144.9, fp32 262.2 against 265.1.
template <int N, class S>
__global__ void __launch_bounds__(kMaxRowsPerBlock * 4, 1) mamba2_decode_recurrent_kernel(RecurrentArgs<S> p,
                                                                                             bool pools_ready) {
  constexpr int NL = N / 32, R = kWarpRows;
  const Mamba2StepIO& io = p.io;
  const WarpCoords c = warp_coords(io);
  const int lane = c.lane;
  // The slot and the state rows' loads (raw: converted after the wait), then (pools_ready) the wait
  // for the kernel before; the token's inputs after it (gdn_decode.h, pools_ready_at_launch).
  if (!pools_ready) wait_prior_grid();
  const int slot = io.slot[c.row];
  S* rows = p.state + ((size_t(slot) * io.NH + c.h) * io.P + c.p0) * N + lane * NL;
  RowRaw<N, S> sraw[R];
#pragma unroll
  for (int i = 0; i < R; ++i) sraw[i] = slot >= 0 ? load_row_raw<N>(rows + size_t(i) * N) : RowRaw<N, S>{};
  if (pools_ready) wait_prior_grid();
  allow_dependent_grids();
  const size_t xo = (size_t(c.row) * io.NH + c.h) * io.P + c.p0;
  const uint4 xraw = *reinterpret_cast<const uint4*>(io.x + xo);
  const OwnRowInputs own = own_row_inputs<R>(io, xo, lane);
  const size_t bco = (size_t(c.row) * io.G + c.g) * N;
  const auto braw = load_bf16_raw<N>(io.B + bco, lane), craw = load_bf16_raw<N>(io.C + bco, lane);
  const float dt = token_dt(io, c.row, c.h);
  const float A = io.A[c.h], D = io.D[c.h];
  if (slot < 0) {
    if (lane < R) io.out[xo + lane] = __float2bfloat16_rn(0.f);
    return;
  }
  float s[R][NL];
#pragma unroll
  for (int i = 0; i < R; ++i) row_to_f32<N, S>(sraw[i], s[i]);
  float x[R], Bv[NL], Cv[NL], y8[R];
  warp_x(xraw, x);
  bf16_slice<N>(braw, Bv);
  bf16_slice<N>(craw, Cv);
  const float decay = expf(dt * A);
#pragma unroll
  for (int i = 0; i < R; ++i) y8[i] = step_row(s[i], dt * x[i], Bv, Cv, decay);
  const float y = row_sums<R>(y8, lane);
#pragma unroll
  for (int i = 0; i < R; ++i) store_row<N>(rows + size_t(i) * N, s[i]);
  write_output(io, xo, lane, y, D, own);
}

}  // namespace

// rows_per_block from kRecurrentRows, whose rows are for a 4-byte state: a 16-bit state takes
// twice the rows, so a block keeps the bytes in flight of the fp32 shape (bf16 at batch 256, with
// the loads of f9ba9c9: 143.3 us with 2-warp blocks against 158.0 with one-warp blocks, 64: 39.0
// against 42.9; kernels/mamba2/notes/mamba2_decode.md, "16-bit states").
int recurrent_rows(const Mamba2StepIO& io, StateType state_type) {
  RowsRule rule = kRecurrentRows;
  rule.max_rows *= rows_per_fp32_row(state_type);
  return choose_rows_per_block(io, rule);
}

}  // namespace mamba2_detail

int mamba2_decode_recurrent_rows_per_block(const Mamba2RecurrentParams& p) {
  return mamba2_detail::recurrent_rows(p.io, p.state_type);
}

void mamba2_decode_recurrent(const Mamba2RecurrentParams& p, cudaStream_t stream) {
  using namespace mamba2_detail;
  const char* who = "mamba2_decode_recurrent";
  validate_step_io(p.io, who);
  if (!p.state) throw std::invalid_argument(std::string(who) + ": state must be set");
  if (p.io.batch == 0) return;
  dispatch_head_dims(p.io, who, [&](auto n) {
    constexpr int N = decltype(n)::value;
    dispatch_state_type(who, p.state_type, [&](auto tag) {
      using S = typename decltype(tag)::type;
      const RecurrentArgs<S> args{p.io, static_cast<S*>(p.state)};
      const int rows = recurrent_rows(p.io, p.state_type);
      launch_kernel(mamba2_decode_recurrent_kernel<N, S>, decode_grid(p.io, rows), decode_block(rows), 0, stream, true,
                    args, p.pools_ready_at_launch);
    });
  });
}

}  // namespace kvbuf
