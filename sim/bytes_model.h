// The one bytes model: bytes read and written per linear-attention layer per decode step for one
// request, declared once per tensor with its own dtype (as nvbench's add_global_memory_reads).
// The CLI (`kvbuf bytes`), the sweeps (GB/s columns), the benchmarks and the plots all use it.
// The formulas are those of docs/kvbuffer-math.md section 9.
#pragma once
#include <string>
#include <vector>

#include "sim/catalog.h"
#include "sim/layout.h"

namespace kvbuf {

// One tensor's traffic in one step: count elements of elem_bytes each, read and/or written.
struct TensorTraffic {
  std::string tensor;  // "state", "buffer.keys", "q", "intermediate_states", ...
  std::string dtype;   // "fp32", "bf16", ...
  double read_bytes = 0;
  double write_bytes = 0;
};

struct StepBytes {
  std::string mode;  // "recurrent", "kvbuffer", "direct", "verify-classic", "verify-kvbuffer"
  std::vector<TensorTraffic> tensors;
  double read_bytes() const;
  double write_bytes() const;
  double total_bytes() const { return read_bytes() + write_bytes(); }
  StepBytes& scale(double factor);  // e.g. by batch
  // Adds to the tensor of that name (created on first use, in order of first use).
  void add(const std::string& tensor, const std::string& dtype, double read, double write);
  const TensorTraffic* find(const std::string& tensor) const;  // nullptr when absent
};
// Element-wise mean of steps (same tensors in the same order; the mode of the first).
StepBytes average(const std::vector<StepBytes>& steps);

// Buffer capacities C above this are refused (std::invalid_argument) by every function taking C.
constexpr int kMaxBufferCapacity = 65536;

// Bytes of one buffer entry (one token) for one request and one layer.
double buffer_entry_bytes(const LayerShape& s, const Precision& p, BufferVariant v);
// Bytes of one recurrent state for one request and one layer.
double state_bytes(const LayerShape& s, const Precision& p);
// Conv state (width-1 previous inputs) for one request and one layer.
double conv_state_bytes(const LayerShape& s, const Precision& p);

// Per layer, per step, per request:
StepBytes bytes_recurrent(const LayerShape& s, const Precision& p);
// Buffered decode at buffer fill n (0..C-1) before the step; when n == C-1 the step folds: state
// written, no entry written (the token goes into the state).
StepBytes bytes_kvbuffer_at_fill(const LayerShape& s, const Precision& p, BufferVariant v,
                                 int chunk, int fill);
// Buffered decode averaged over one whole flush cycle of C steps (what a staggered batch sees).
StepBytes bytes_kvbuffer_cycle(const LayerShape& s, const Precision& p, BufferVariant v, int chunk);
// Direct (stateless) mode at buffer fill n below the overflow: n entries read, 1 written, no state.
StepBytes bytes_direct_at_fill(const LayerShape& s, const Precision& p, int fill);
// Direct mode averaged over fills 0..C-1: fills below C-1 as above; at C-1 the overflow fold
// reads the C-1 entries and creates the state (written once, no entry written).
StepBytes bytes_direct_mean(const LayerShape& s, const Precision& p, int chunk);
// Classic verify of T tokens: state read + T intermediate states written, then (commit_copy)
// 1 state read + 1 state write.
StepBytes bytes_verify_classic(const LayerShape& s, const Precision& p, int tokens,
                               bool commit_copy);
// Buffered verify of T tokens at fill n (0..C-1) keeping `accepted` = m (0..T) entries, as our
// kernels do it (kernels/gdn/gdn_verify.h):
//   verify: state read, n buffer entries read, the T candidate entries written to a scratch area;
//           when n > 0 and n + T >= C the n entries are folded first (state written once), the
//           window then starts from an empty buffer (n0 = 0; else n0 = n). Folding already at
//           n + T == C (the design note says n + T > C) keeps every commit from filling the buffer
//           unless T == C, so fill stays < C between steps without a fold in the commit;
//   commit: the m accepted entries read from scratch; if n0 + m < C they are written into the
//           buffer, else (n0 = 0, m = T = C: the buffer is full) the commit folds instead: state
//           read and written, the n0 buffer entries read again, nothing written to the buffer.
// A window of `depth` nodes (T for a chain, a tree's longest root path) folds by its depth; where
// sim/layout.h's verify_window_in_buffer holds for the kernel's `window` (VerifyWindow::Buffer and
// a chain with n + T < C) the verify writes its T candidate entries into the buffer instead of the
// scratch, and the commit moves no entry.
StepBytes bytes_verify_kvbuffer(const LayerShape& s, const Precision& p, BufferVariant v, int chunk,
                                int tokens, int depth, int fill, int accepted, VerifyWindow window);
// The fill before the next verify round after this one (the protocol above).
int verify_kvbuffer_next_fill(int chunk, int tokens, int fill, int accepted);
// Chain verify rounds that always accept m entries, averaged over the periodic cycle of fills that the
// protocol settles into from an empty buffer (C = 16, T = 4, m = 3: fills 3, 6, 9, 12).
StepBytes bytes_verify_kvbuffer_cycle(const LayerShape& s, const Precision& p, BufferVariant v,
                                      int chunk, int tokens, int accepted, VerifyWindow window);
// The window placement the models assume where no kernel is asked (`kvbuf bytes`, the step and
// serving models, the sweep's time estimate): the GDN kernels' scratch; for Mamba-2 the buffer, as
// its head-group kernel does at the batches where a step's bytes matter (from ~1.5 waves of
// blocks, batch ~38 for Nemotron-3 Nano on an H200). A measured row takes its kernel's
// (mamba2_verify_kvbuffer_window).
VerifyWindow modelled_verify_window(LayerKind kind);

}  // namespace kvbuf
