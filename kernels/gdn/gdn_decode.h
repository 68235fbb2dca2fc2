// Gated DeltaNet decode kernels (one token per request per step), serving layouts of
// sim/layout.h. Host-side Params structs and one dispatch function per kernel; each
// dispatch throws std::invalid_argument("unsupported ...") for shapes it has no instantiation for.
//   gdn_decode_recurrent  (gdn_decode_recurrent.cu)  read S, update, write S (in or out of place)
//   gdn_decode_kvbuffer   (gdn_decode_kvbuffer.cu)   read S0 + buffer, append, fold when full
//   gdn_decode_direct     (gdn_decode_kvbuffer.cu)   the same kernel for stateless requests
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/decode_path.h"  // DecodePath
#include "sim/layout.h"         // BufferVariant, EntryType, StateType

namespace kvbuf {

// One step's token inputs and outputs, shared by every decode kernel.
struct GdnStepIO {
  int batch = 0;                     // B request rows
  int H = 0, HV = 0, K = 0, V = 0;   // key heads, value heads, head dims (set them: 0 is refused)
  const int32_t* slot = nullptr;     // [B] pool slot per row; negative = padding row
  const __nv_bfloat16* q = nullptr;  // [B, H, K] un-normalised
  const __nv_bfloat16* k = nullptr;  // [B, H, K] un-normalised
  const __nv_bfloat16* v = nullptr;  // [B, HV, V]
  // Gates given: g (log decay <= 0) and beta, fp32 [B, HV]. Leave both null to compute them in
  // kernel from a, b (bf16 [B, HV]), A_log and dt_bias (fp32 [HV]):
  //   g = -exp(A_log) * softplus(a + dt_bias),  beta = sigmoid(b).
  const float* g = nullptr;
  const float* beta = nullptr;
  const __nv_bfloat16* a = nullptr;
  const __nv_bfloat16* b = nullptr;
  const float* A_log = nullptr;
  const float* dt_bias = nullptr;
  __nv_bfloat16* out = nullptr;      // [B, HV, V]
  // V rows per thread block (16, 32, 64 or 128, dividing V; the recurrent kernel also takes 8: one
  // warp per 8 rows, state in registers, one such warp per block, two for a 16-bit state); 0 = chosen
  // per launch shape, from B x HV against the multiprocessor count (small batches split each head
  // over more blocks).
  int rows_per_block = 0;
};

// Recurrent decode: S [slots, HV, V, K] state dtype (fp32, bf16 or fp16), K contiguous.
// state_in == state_out is the in-place placement of serving engines; distinct pools are the
// out-of-place placement of FLA (every slot of state_out that a row addresses is fully written).
// Both pools hold state_type; arithmetic is fp32 and a state write rounds once to nearest.
//
// Every decode kernel of both families is a programmatic dependent of the kernel before it in the
// stream (but GDN's recurrent one-warp shape, launched plainly: gdn_decode_recurrent.cu says why):
// it may start while that kernel's last blocks run, and waits for its completion
// (griddepcontrol.wait) before reading anything that kernel may write. pools_ready_at_launch is
// the caller's promise that the kernel before writes none of this kernel's pools (state, buffer,
// fill, has_state, done_count), neither io.slot nor the scheduler metadata, and was launched only
// after every kernel that writes them had completed: true for a model step's layers after its first
// when nothing but these kernels lie between them (the previous layer's kernel writes its own pools).
// The blocks then read their slot, metadata, buffered entries and state before the wait and the
// token's inputs after it, so their state loads overlap the kernel before; false: they wait first.
// Either way a kernel lets the next one launch only after its own wait.
struct GdnRecurrentParams {
  GdnStepIO io;
  const void* state_in = nullptr;
  void* state_out = nullptr;
  StateType state_type = StateType::FP32;  // of state_in and state_out
  bool pools_ready_at_launch = false;      // above
};
void gdn_decode_recurrent(const GdnRecurrentParams& p, cudaStream_t stream);

// KVBuffer decode on pools of sim/layout.h, capacity C = `capacity` (1..64).
// Per row at fill n (read from `fill`): output from S0 (skipped when has_state == 0) and the n
// buffered entries; appends the token as entry n, or, when n + 1 == C, folds S0 and all C tokens
// into the state in the same kernel (creating it in direct mode) and empties the buffer. `fill`
// and `has_state` are advanced by the last block of each request to finish (counted in
// `done_count`, which must be zero before the first launch and is left zero).
struct GdnKVBufferParams {
  GdnStepIO io;
  BufferVariant variant = BufferVariant::CachedU;
  EntryType entry = EntryType::BF16;
  int capacity = 16;
  // S0 [slots, HV, V, K] state dtype (fp32, bf16 or fp16), K contiguous, in place; a fold computes
  // in fp32 and rounds once to nearest when it writes the state. (state_type sits here, in the
  // padding before the pointer: the other fields keep their offsets.)
  StateType state_type = StateType::FP32;
  void* state = nullptr;
  void* buf_k = nullptr;       // [slots, C, H, K] entry type
  void* buf_val = nullptr;     // [slots, C, HV, V] entry type: u (cached-u) or v (raw)
  float* buf_gcum = nullptr;   // [slots, C, HV]
  float* buf_beta = nullptr;   // [slots, C, HV] raw only
  int32_t* fill = nullptr;     // [slots]
  int32_t* has_state = nullptr;   // [slots]
  int32_t* done_count = nullptr;  // [slots] scratch
  // Scheduler metadata instead (both or neither): this step's fill and has_state per request row
  // [B], read-only; the kernel then neither reads nor advances fill/has_state/done_count, and the
  // caller advances its copy (fill + 1, or 0 and has_state = 1 after the fold at fill C - 1).
  const int32_t* row_fill = nullptr;
  const int32_t* row_has_state = nullptr;
  // The scheduler's promise that every row of this step has a state (no direct-mode request, as
  // in steady decoding): at capacity 1 the dispatch then runs the plain recurrent update, without
  // the per-row has_state load (gdn_decode_direct refuses it). No effect at other capacities.
  bool every_row_has_state = false;
  // As GdnRecurrentParams::pools_ready_at_launch (in the padding after the bool: the other fields
  // keep their offsets). The split path's kernels ignore it.
  bool pools_ready_at_launch = false;
  DecodePath path = DecodePath::Auto;
  // Split path only: fp32 workspace [B, HV, 2, V] (per row and value head, the buffered terms
  // r_v = sum_j c_j u_j[v] and s_v = sum_j d_j u_j[v]); without it Auto runs the single kernel.
  float* scratch = nullptr;
  // Split path of gdn_decode_direct only: the state kernel's grid holds this many row groups G,
  // each block taking every G-th row that has a state or folds (at most 1024 rows; G >= B: one
  // block row per request). 0 = the dispatch's choice (gdn_decode_kvbuffer.cu, kernel B).
  int split_row_groups = 0;
};
void gdn_decode_kvbuffer(const GdnKVBufferParams& p, cudaStream_t stream);

// Direct mode is a per-request property (has_state == 0): the KVBuffer kernel reads no state for
// such rows, so one launch serves a batch mixing direct and buffered requests. This entry point
// runs the same kernels, for batches of (mostly) stateless requests: its Auto path takes the
// split shape from C = 4 (kernel A finishes a stateless token without kernel B).
void gdn_decode_direct(const GdnKVBufferParams& p, cudaStream_t stream);

// The V rows per thread block each dispatch uses for these parameters (the sweep's CSV reports them).
int gdn_decode_recurrent_rows_per_block(const GdnStepIO& io);
int gdn_decode_kvbuffer_rows_per_block(const GdnKVBufferParams& p);
int gdn_decode_direct_rows_per_block(const GdnKVBufferParams& p);
// The row groups G of gdn_decode_direct's compacted state kernel for these parameters, 0 where it
// runs one block row per request or no state kernel (the sweep's CSV reports them).
int gdn_decode_direct_row_groups(const GdnKVBufferParams& p);

}  // namespace kvbuf
