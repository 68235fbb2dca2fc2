// Gated DeltaNet speculative verify kernels (chains and trees of T <= 8 tokens per request), on the
// serving layouts of sim/layout.h. Host-side Params structs and one dispatch function
// per kernel; each dispatch throws std::invalid_argument("unsupported ...") for shapes it has no
// instantiation for (K in {64, 128}, V a multiple of 64, 1 <= T <= 8).
//   gdn_verify_classic          (gdn_verify_classic.cu)   walk the T tokens, write the state after
//   gdn_verify_classic_commit                             every token: in place into pool slots
//                                                         (commit by index, no kernel) or to a
//                                                         scratch (commit copies the accepted one)
//   gdn_verify_kvbuffer         (gdn_verify_kvbuffer.cu)  all T outputs from one read of S0 + the
//   gdn_verify_kvbuffer_commit                            buffer; append the accepted entries
//
// Tokens of one request row: node i = 1..T, with parent p(i) in 0..i-1 (0 = the committed state,
// i.e. the end of the buffer). A chain is p(i) = i - 1: the last accepted token, then T-1 drafts.
// Every node's output equals the recurrent output along its root path.
//
// KVBuffer protocol (one verify + one commit per step, fill/has_state as in gdn_decode.h):
//   verify: with n = fill[slot] and D the depth of the tree (T for a chain), if n > 0 and
//           n + D >= C (verify_folds_first, sim/layout.h) the n buffered entries are folded into
//           S0 first (S0 written back, created in direct mode) and the window starts from an
//           empty buffer. The T candidate entries (k, u, G) go to a per-row scratch area, never
//           into the buffer, which other blocks of the request read.
//   commit: copies the m accepted entries to the buffer at the fill after the verify's fold. By
//           the rule above n0 + m <= C - 1 unless n0 = 0 and m = T = C: only then is the buffer
//           full, and the commit folds it instead (fill 0), so 0 <= fill < C holds between steps,
//           as gdn_decode_kvbuffer expects. Folding at n + D = C already (rather than n + D > C,
//           design note section 5) costs one state write in the verify, which holds S0 in
//           registers anyway, instead of a state read + write in the commit when all T drafts
//           are accepted.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/verify_accept.h"
#include "kernels/gdn/gdn_decode.h"

namespace kvbuf {

constexpr int kGdnVerifyMaxTokens = 8;

// One verify step's inputs and outputs: T tokens per request row.
struct GdnVerifyIO {
  int batch = 0;   // B request rows
  int tokens = 0;  // T, 1..8
  int H = 0, HV = 0, K = 0, V = 0;  // key heads, value heads, head dims (set them: 0 is refused)
  const int32_t* slot = nullptr;     // [B] pool slot per row; negative = padding row
  const __nv_bfloat16* q = nullptr;  // [B, T, H, K] un-normalised
  const __nv_bfloat16* k = nullptr;  // [B, T, H, K] un-normalised
  const __nv_bfloat16* v = nullptr;  // [B, T, HV, V]
  const float* g = nullptr;          // [B, T, HV] log decay <= 0
  const float* beta = nullptr;       // [B, T, HV]
  // Trees: [B, T], entry i-1 is p(i) in 0..i-1 (an out-of-range entry is read as 0). null = chain.
  const int32_t* parents = nullptr;
  __nv_bfloat16* out = nullptr;      // [B, T, HV, V]
};

// Classic verify: S0 read from state[slot[row]], the state after every node t (0-based) written
// where exactly one of these says:
//  * in place (step_slot set), as serving engines' spec-decode state caches do: each request owns
//    T + 1 pool slots per layer; node t's state goes to state[step_slot[row, t]], and a tree node
//    whose parent is not the previous node reads its parent's state from there. step_slot entries
//    of a row are distinct and differ from slot[row] (padding rows' are not read). Commit by
//    index, no kernel: the scheduler sets slot[row] <- step_slot[row, last accepted node] (m = 0
//    keeps it); the row's other T slots receive the next round's states.
//  * copy (step_states set): node t's state goes to step_states[row, t]; gdn_verify_classic_commit
//    copies the accepted one into state[slot].
// States (the pool and step_states) hold state_type (fp32, bf16 or fp16); arithmetic is fp32 and
// every node's state is rounded once to nearest where it is written. The walk continues from the
// rounded value (as successive decode steps would, and as a tree node that reloads its parent's
// written state does), so chains and trees round alike.
struct GdnVerifyClassicParams {
  GdnVerifyIO io;
  void* state = nullptr;               // [slots, HV, V, K] state_type, K contiguous
  const int32_t* step_slot = nullptr;  // [B, T] in place: pool slot receiving the state after node t
  void* step_states = nullptr;         // [B, T, HV, V, K] state_type copy variant: the state after every node
  VerifyAccept accept;              // commit (copy variant) only
  // Appended: the fields above keep their offsets (the kernels take them without it, as their
  // element type S; see ClassicArgs in gdn_verify_classic.cu).
  StateType state_type = StateType::FP32;  // of state and step_states
};
// Writes out and the node states; reads state[slot] (and the parents' states of tree nodes).
void gdn_verify_classic(const GdnVerifyClassicParams& p, cudaStream_t stream);
// Copy variant: state[slot] <- step_states[row, last accepted node] (m = 0 keeps the state).
// Refuses the in-place variant (std::invalid_argument), which commits by index.
void gdn_verify_classic_commit(const GdnVerifyClassicParams& p, cudaStream_t stream);

struct GdnVerifyKVBufferParams {
  GdnVerifyIO io;
  EntryType entry = EntryType::BF16;  // buffer and scratch entries (cached-u variant)
  int capacity = 16;                        // C, T <= C <= 64
  void* state = nullptr;                    // [slots, HV, V, K] state_type (S0, rounded at every fold)
  void* buf_k = nullptr;                    // [slots, C, H, K]
  void* buf_val = nullptr;                  // [slots, C, HV, V] corrected values u
  float* buf_gcum = nullptr;                // [slots, C, HV]
  int32_t* fill = nullptr;                  // [slots]
  int32_t* has_state = nullptr;             // [slots]
  // Per-row scratch, written by the verify, read by the commit:
  void* win_k = nullptr;        // [B, T, H, K]  normalised keys of the T nodes
  void* win_u = nullptr;        // [B, T, HV, V] their corrected values u
  float* win_gcum = nullptr;    // [B, T, HV]    their G, relative to S0 after the verify's fold
  int32_t* win_base = nullptr;  // [B, 2]        fill and has_state after the verify's fold
  VerifyAccept accept;       // commit only
  // Appended (no padding above; the kernels take the fields above without it: KVBufferArgs in
  // gdn_verify_kvbuffer.cu). A fold, in the verify or in the commit, computes in fp32 and rounds S0
  // once to nearest when it writes it; the verify's outputs after its fold use the rounded S0.
  StateType state_type = StateType::FP32;  // of state
  // The kernel before this verify in the stream (a programmatic dependency) writes none of the pools
  // above nor io.slot, and was launched only once every kernel that writes them had completed: true
  // for a step's layers after its first (the previous layer's verify; a step's first layer follows
  // the previous step's commit). The blocks then read their slot, fill, has_state, S0 rows and
  // buffered entries while that kernel finishes, and the window's inputs after it. The commit
  // ignores it.
  bool pools_ready_at_launch = false;
  // The launch path (kernels/common/decode_path.h): Single = one kernel; Split = a coefficient
  // kernel per (row, key head), which writes `coef` and the scratch, then the state kernel, which
  // reads them; Auto = Split from T = 5 where the grid is more than a few waves and `coef` is set
  // (gdn_verify_kvbuffer.cu), Single elsewhere. The commit ignores both.
  DecodePath path = DecodePath::Auto;
  float* coef = nullptr;  // Split: workspace of gdn_verify_detail::verify_coef_bytes(B, HV, T, C) (gdn_launch_shape.h)
};
void gdn_verify_kvbuffer(const GdnVerifyKVBufferParams& p, cudaStream_t stream);
void gdn_verify_kvbuffer_commit(const GdnVerifyKVBufferParams& p, cudaStream_t stream);
// The commits of a model step's `count` layers in one launch, their Params alike in batch, tokens,
// capacity and entry type (else std::invalid_argument). The accepted lengths come from the step's
// sampling, after every layer's verify, so a serving engine commits all layers at once: one kernel's
// fixed cost per step instead of one per layer (LayerTable, kernels/common/common.cuh).
void gdn_verify_kvbuffer_commit(const GdnVerifyKVBufferParams* layers, int count, cudaStream_t stream);
// Layers per launch of that commit (one layer table of the kernels' 192-byte parameters; more
// layers take more launches).
constexpr int kGdnVerifyCommitLayersPerLaunch = 64;

}  // namespace kvbuf
