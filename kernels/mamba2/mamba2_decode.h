// Mamba-2 decode kernels (one token per request per step), serving layouts of sim/layout.h; the
// twins of gdn_decode.h, same names and shapes. Host-side Params structs and one dispatch function
// per kernel; each dispatch throws std::invalid_argument("unsupported ...") for shapes it has no
// instantiation for.
//   mamba2_decode_recurrent  (mamba2_decode_recurrent.cu)  read S, update, write S in place
//   mamba2_decode_kvbuffer   (mamba2_decode_kvbuffer.cu)   read S0 + buffer, append, fold when full
//   mamba2_decode_direct     (mamba2_decode_kvbuffer.cu)   the same, for stateless requests (split path)
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/decode_path.h"
#include "sim/layout.h"  // StateType

namespace kvbuf {

// One step's token inputs and outputs, shared by every Mamba-2 decode kernel. Head h reads group
// h / (NH / G) of B and C.
struct Mamba2StepIO {
  int batch = 0;                     // B request rows
  int G = 0, NH = 0, P = 0, N = 0;   // groups, heads, head dim, d_state (set them: 0 is refused)
  const int32_t* slot = nullptr;     // [B] pool slot per row; negative = padding row (output zeros)
  const __nv_bfloat16* x = nullptr;  // [B, NH, P]
  const __nv_bfloat16* B = nullptr;  // [B, G, N]
  const __nv_bfloat16* C = nullptr;  // [B, G, N]
  // dt [B, NH] as the model produces it: the kernel takes dt + dt_bias (dt_bias null: + 0), then
  // softplus when dt_softplus (false: the sum is already the positive step size).
  const __nv_bfloat16* dt = nullptr;
  const float* dt_bias = nullptr;    // [NH]
  bool dt_softplus = true;
  const float* A = nullptr;          // [NH] < 0
  const float* D = nullptr;          // [NH]
  const __nv_bfloat16* z = nullptr;  // [B, NH, P] optional gate: y *= silu(z)
  __nv_bfloat16* out = nullptr;      // [B, NH, P]
  // P rows per thread block: 8, 16, 32 or 64 (one warp per 8 rows), dividing P; 0 = chosen per
  // launch shape (mamba2_decode_recurrent.cu and mamba2_decode_kvbuffer.cu say how).
  int rows_per_block = 0;
};

// Recurrent decode: S [slots, NH, P, N] state dtype (fp32, bf16 or fp16), N contiguous, updated in
// place as serving engines keep it. Arithmetic is fp32; a 16-bit state is rounded to nearest once
// per write.
struct Mamba2RecurrentParams {
  Mamba2StepIO io;
  void* state = nullptr;  // elements of state_type
  StateType state_type = StateType::FP32;
  // The kernel before writes none of the pools nor io.slot (as GdnRecurrentParams, gdn_decode.h).
  bool pools_ready_at_launch = false;
};
void mamba2_decode_recurrent(const Mamba2RecurrentParams& p, cudaStream_t stream);

// KVBuffer decode on the Mamba-2 pools of sim/layout.h, capacity C = `capacity` (1..64). Entries
// are bf16: x and B arrive in bf16, so the buffer holds them exactly.
// Per row at fill n: output from S0 (skipped when has_state == 0) and the n buffered entries;
// appends the token as entry n, or, when n + 1 == C, folds S0 and all C tokens into the state in
// the same kernel (creating it in direct mode) and empties the buffer. `fill` and `has_state` are
// advanced by the last block of each request to finish (counted in `done_count`, which must be
// zero before the first launch and is left zero).
struct Mamba2KVBufferParams {
  Mamba2StepIO io;
  int capacity = 16;
  void* state = nullptr;              // [slots, NH, P, N] state dtype (fp32, bf16 or fp16), in place
  __nv_bfloat16* buf_k = nullptr;     // B  [slots, C, G, N]
  __nv_bfloat16* buf_val = nullptr;   // x  [slots, C, NH, P]
  float* buf_gcum = nullptr;          // G  [slots, C, NH] cumulative dt A since S0
  float* buf_beta = nullptr;          // dt [slots, C, NH] (softplus applied)
  int32_t* fill = nullptr;            // [slots]
  int32_t* has_state = nullptr;       // [slots]
  int32_t* done_count = nullptr;      // [slots] scratch
  // Scheduler metadata instead (both or neither): this step's fill and has_state per request row
  // [B], read-only; the kernel then neither reads nor advances fill/has_state/done_count, and the
  // caller advances its copy (fill + 1, or 0 and has_state = 1 after the fold at fill C - 1).
  const int32_t* row_fill = nullptr;
  const int32_t* row_has_state = nullptr;
  // mamba2_decode_direct's launch shape (mamba2_decode_kvbuffer.cu, "The split direct path"): Split
  // = a buffer kernel per (row, group) for the stateless rows that do not fold, then the single
  // kernel's body over compacted rows for the others (needs row_fill/row_has_state and P <= 64);
  // Single = one kernel; Auto = Split where possible from C = 4 and batch x C >= 256.
  // mamba2_decode_kvbuffer takes Auto or Single (one kernel).
  DecodePath path = DecodePath::Auto;
  // The scheduler's promise that every row has a state (a steady decode batch; with row_fill and
  // row_has_state): at capacity 1 mamba2_decode_kvbuffer then runs the plain recurrent update on
  // the state pool (every step folds its only token, so the buffer is never read). Refused by
  // mamba2_decode_direct.
  bool every_row_has_state = false;
  // As Mamba2RecurrentParams (in the padding after the bool: the other fields keep their offsets).
  // The split path's kernels (mamba2_decode_direct) ignore it.
  bool pools_ready_at_launch = false;
  // The state pool's element type (state above; the fold rounds to it once per write). Last, so that
  // the fp32 kernels' parameter offsets (and their SASS) stay those of a float* state.
  StateType state_type = StateType::FP32;
  // State rows per warp of mamba2_decode_kvbuffer's kernel: 0 = chosen (8; for a 16-bit state 16
  // or 32 by the grid's size, sim/launch_rules.h); 8 always (S0 staged in a shared-memory tile), or
  // 16 / 32 with a 16-bit state where they divide the block's rows (S0 read from the pool where
  // used). mamba2_decode_direct takes 0 or 8. (In the struct's padding: the size and every offset
  // are what they were without it.)
  int warp_rows = 0;
};
void mamba2_decode_kvbuffer(const Mamba2KVBufferParams& p, cudaStream_t stream);

// Direct mode is a per-request property (has_state == 0): the kernel reads no state for such rows,
// and their fold creates it, so one launch serves a batch mixing direct and buffered requests.
// This entry point is for batches of (mostly) stateless requests: with scheduler metadata it
// splits the step (path above), else it runs the same kernel without the S0 tile.
void mamba2_decode_direct(const Mamba2KVBufferParams& p, cudaStream_t stream);

// The P rows per thread block each dispatch uses for these parameters (the sweep's CSV reports them).
int mamba2_decode_recurrent_rows_per_block(const Mamba2RecurrentParams& p);
int mamba2_decode_kvbuffer_rows_per_block(const Mamba2KVBufferParams& p);

}  // namespace kvbuf
