// Mamba-2 speculative verify kernels (chains and trees of T <= 8 tokens per request), on the
// serving layouts of sim/layout.h; the twins of gdn_verify.h, same names, shapes and protocol.
// Host-side Params structs and one dispatch function per kernel; each dispatch throws
// std::invalid_argument("unsupported ...") for shapes it has no instantiation for (N in {64, 128},
// P a multiple of 8, 1 <= T <= 8).
//   mamba2_verify_classic          (mamba2_verify_classic.cu)   walk the T tokens, write the state
//                                                               after every token in place into the
//                                                               request's T + 1 pool slots (commit
//                                                               by index, no kernel)
//   mamba2_verify_kvbuffer         (mamba2_verify_kvbuffer.cu)  all T outputs from one read of S0
//   mamba2_verify_kvbuffer_commit                               + the buffer; append the accepted
//                                                               entries
//
// Tokens of one request row: node i = 1..T with parent p(i) in 0..i-1 (0 = the committed state),
// as gdn_verify.h; a chain is p(i) = i - 1. Every node's output equals the recurrent output along
// its root path. KVBuffer protocol: exactly gdn_verify.h's (fold in the verify when n > 0 and
// n + depth >= C; the commit appends m entries at the fill after that fold and folds only when the
// buffer becomes full, which needs T == C), with Mamba-2 entries (B, x, G, dt).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/verify_accept.h"
#include "sim/layout.h"  // VerifyWindow, StateType

namespace kvbuf {

constexpr int kMamba2VerifyMaxTokens = 8;

// One verify step's inputs and outputs: T tokens per request row, the token layouts of
// Mamba2StepIO with a T axis after the row. Head h reads group h / (NH / G) of B and C.
struct Mamba2VerifyIO {
  int batch = 0;                     // B request rows
  int tokens = 0;                    // T, 1..8
  int G = 0, NH = 0, P = 0, N = 0;   // groups, heads, head dim, d_state (set them: 0 is refused)
  const int32_t* slot = nullptr;     // [B] pool slot per row; negative = padding row (outputs zeros)
  const __nv_bfloat16* x = nullptr;  // [B, T, NH, P]
  const __nv_bfloat16* B = nullptr;  // [B, T, G, N]
  const __nv_bfloat16* C = nullptr;  // [B, T, G, N]
  // dt [B, T, NH] as the model produces it: dt + dt_bias (null: + 0), then softplus when
  // dt_softplus (Mamba2StepIO's convention).
  const __nv_bfloat16* dt = nullptr;
  const float* dt_bias = nullptr;    // [NH]
  bool dt_softplus = true;
  const float* A = nullptr;          // [NH] < 0
  const float* D = nullptr;          // [NH]
  const __nv_bfloat16* z = nullptr;  // [B, T, NH, P] optional gate: y *= silu(z)
  // Trees: [B, T], entry i-1 is p(i) in 0..i-1 (an out-of-range entry is read as 0). null = chain.
  const int32_t* parents = nullptr;
  __nv_bfloat16* out = nullptr;      // [B, T, NH, P]
};

// Classic verify as serving engines run it (vLLM's spec-decode state cache): S0 read from
// state[slot[row]], the state after node t written to state[step_slot[row, t]]; a tree node whose
// parent is not the previous node reads its parent's state from there. step_slot entries of a row
// are distinct and differ from slot[row] (padding rows' are not read). Commit by index, no kernel:
// slot[row] <- step_slot[row, last accepted node] (m = 0 keeps it).
// A 16-bit state (state_type bf16 or fp16): arithmetic stays fp32; each node's state is rounded to
// nearest once where it is written, a chain's next node continues from the fp32 registers, and a
// tree node whose parent is not the previous node reads its parent's rounded state back.
struct Mamba2VerifyClassicParams {
  Mamba2VerifyIO io;
  void* state = nullptr;               // [slots, NH, P, N] state_type, N contiguous
  const int32_t* step_slot = nullptr;  // [B, T]
  int rows_per_warp = 0;               // state rows per warp: 0 = chosen from the grid's size; else 2, 4 or 8
  // The state pool's element type, in the padding after rows_per_warp: the struct's size and its
  // fields' offsets (and the fp32 kernels' SASS) stay those of a float* state.
  StateType state_type = StateType::FP32;
};
void mamba2_verify_classic(const Mamba2VerifyClassicParams& p, cudaStream_t stream);

// KVBuffer verify and commit on the Mamba-2 pools of sim/layout.h, capacity C (T <= C <= 64).
// The state pool in fp32, bf16 or fp16 (state_type); arithmetic stays fp32.
struct Mamba2VerifyKVBufferParams {
  Mamba2VerifyIO io;
  int capacity = 16;
  // Heads per verify block (they share the staging, the tree and the dots): 0 = chosen from the
  // batch; else 1, 2, 4 or 8, dividing NH / G.
  int heads_per_block = 0;
  // Optional launch order of the rows, a permutation of 0..B-1 (null: 0..B-1), a hint that changes
  // no result: the head-group kernel starts its rows' blocks in this order (the one-head kernel
  // ignores it: reading it cost 2-4% there). mamba2_verify_kvbuffer_order puts the rows that fold
  // first: their blocks take about twice as long, and started first they leave the short ones for
  // the last wave.
  const int32_t* row_order = nullptr;
  // The kernel before this one in the stream (a programmatic dependency) writes none of the pools
  // below, row_order or io.slot, and was launched only once every kernel that writes them had
  // completed: true for every layer's verify but a step's first (the previous layer's verify; a
  // step's first layer, false, lets the next one launch only after it has waited for the previous
  // step's commit). The head-group kernel's blocks then read their slot, fill, has_state, buffered
  // entries and first S0 rows while that kernel finishes, and only the window's inputs after it.
  bool pools_ready_at_launch = false;
  // The state pool's element type (fp32, bf16 or fp16): S0 read in it, a fold rounds to it once per
  // write (in the verify and in the commit). Here, in the padding after the bool, the struct's size
  // and the offsets of every other field stay those of an fp32-only Params (the fp32 kernels' SASS
  // and the all-layers commit's layer table are unchanged).
  StateType state_type = StateType::FP32;
  void* state = nullptr;             // [slots, NH, P, N] state_type
  __nv_bfloat16* buf_k = nullptr;    // B  [slots, C, G, N]
  __nv_bfloat16* buf_val = nullptr;  // x  [slots, C, NH, P]
  float* buf_gcum = nullptr;         // G  [slots, C, NH] cumulative dt A since S0
  float* buf_beta = nullptr;         // dt [slots, C, NH] (softplus applied)
  int32_t* fill = nullptr;           // [slots]
  int32_t* has_state = nullptr;      // [slots]
  // Per-row scratch, written by the verify, read by the commit. Where the verify's kernel puts
  // windows in the buffer (mamba2_verify_kvbuffer_window), a chain with fill + T < C writes its
  // nodes' entries into the buffer at fill + t instead and the commit only moves the fill.
  __nv_bfloat16* win_k = nullptr;  // [B, T, G, N]  B of the T nodes
  __nv_bfloat16* win_u = nullptr;  // [B, T, NH, P] their x
  float* win_gcum = nullptr;       // [B, T, NH]    their G, relative to S0 after the verify's fold
  float* win_beta = nullptr;       // [B, T, NH]    their dt
  // [B, 2] the fill after the verify's fold; bit 0 has_state after it, bit 1 the nodes' entries
  // are in the buffer (kMamba2WindowInBuffer)
  int32_t* win_base = nullptr;
  VerifyAccept accept;       // commit only
};
inline constexpr int32_t kMamba2WindowInBuffer = 2;  // win_base[2 row + 1]'s bit: the window is in the buffer
void mamba2_verify_kvbuffer(const Mamba2VerifyKVBufferParams& p, cudaStream_t stream);
// Writes row_order [B]: the rows whose verify folds (n > 0 and n + depth >= C, from p.fill and the
// window's tree) first, then the others, each part in row order. One small kernel, run once per
// step ahead of the layers: a request's fill is the same in every layer.
void mamba2_verify_kvbuffer_order(const Mamba2VerifyKVBufferParams& p, int32_t* row_order, cudaStream_t stream);
// Whether the order pays for p: where the verify takes its head-group kernel (a grid of 4 or 8
// heads per block that fills 1.5 waves, or heads_per_block > 1); the one-head kernel does not read it.
bool mamba2_verify_kvbuffer_row_order_pays(const Mamba2VerifyKVBufferParams& p);
// Where the verify's kernel puts its windows (sim/layout.h's VerifyWindow): the head-group
// kernel's Buffer, the one-head kernel's Scratch; for the bytes model and the checks.
VerifyWindow mamba2_verify_kvbuffer_window(const Mamba2VerifyKVBufferParams& p);
void mamba2_verify_kvbuffer_commit(const Mamba2VerifyKVBufferParams& p, cudaStream_t stream);
// The commits of a model step's `count` layers in one launch (gdn_verify.h says why), their Params
// alike in batch, tokens and capacity (else std::invalid_argument).
void mamba2_verify_kvbuffer_commit(const Mamba2VerifyKVBufferParams* layers, int count, cudaStream_t stream);

}  // namespace kvbuf
