// The one description of a linear-attention layer's device memory, for both model families: the
// buffer variant, the entry type, every pool tensor with its shape, dtype and bytes per request,
// and the plan that places a layer stack's pools in one allocation. sim/ (bytes and capacity
// models), reference/, kernels/, bench/ (sweeps, capacity measurement) and the tests all use it.
// Plain C++, no CUDA types.
//
// Pools of one layer, indexed by slot (one request), capacity C:
//   GDN (H key heads, HV value heads, head dims K, V):
//     state      [slots, HV, V, K]  state dtype (StateType), K contiguous
//     buf_k      [slots, C, H, K]   entry dtype   normalised keys k / sqrt(|k|^2 + 1e-6)
//     buf_val    [slots, C, HV, V]  entry dtype   cached-u: corrected values u; raw: values v
//     buf_gcum   [slots, C, HV]     fp32          cumulative log decay G since S0
//     buf_beta   [slots, C, HV]     fp32          raw only: beta
//   Mamba-2 (G groups = key heads, NH heads = value heads, N = d_state = head_k, P = head_dim = head_v):
//     state      [slots, NH, P, N]  state dtype, N contiguous
//     buf_k      [slots, C, G, N]   entry dtype   B
//     buf_val    [slots, C, NH, P]  entry dtype   x
//     buf_gcum   [slots, C, NH]     fp32          cumulative log decay G
//     buf_beta   [slots, C, NH]     fp32          dt (softplus applied)
//   both: fill, has_state, done_count [slots] int32 (kernels/gdn/gdn_decode.h says who advances them);
//   conv       [slots, conv_dim, w - 1] io dtype, conv_dim = 2 H K + HV V (Mamba-2: NH P + 2 G N);
//   verify scratch of T candidates per request: win_k [T, H, K], win_u [T, HV, V] entry dtype,
//   win_gcum [T, HV] fp32 (+ win_beta [T, HV] where entries keep two scalars), win_base [2] int32; classic verify: step_states [T, HV, V, K] state dtype.
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

#include "sim/catalog.h"

namespace kvbuf {

// GDN buffer entry: cached-u keeps k, u and G; raw keeps k, v, G and beta (u recomputed).
// Mamba-2 has one entry kind (B, x, G, dt); the variant does not change it.
enum class BufferVariant { CachedU, Raw };
inline const char* variant_name(BufferVariant v) { return v == BufferVariant::Raw ? "raw" : "cached-u"; }
inline BufferVariant parse_variant(const std::string& name) {
  if (name == "cached-u") return BufferVariant::CachedU;
  if (name == "raw") return BufferVariant::Raw;
  throw std::invalid_argument("unknown buffer variant '" + name + "' (known: cached-u, raw)");
}

// Element types of buffer entries that the kernels instantiate.
enum class EntryType { BF16, FP32 };
inline int entry_type_bytes(EntryType e) { return e == EntryType::FP32 ? 4 : 2; }
inline const char* entry_type_name(EntryType e) { return e == EntryType::FP32 ? "fp32" : "bf16"; }

// The state's element type (StateType) is declared in sim/state_type.h.

// Element sizes in bytes (s, e, io of docs/kvbuffer-math.md section 9).
struct Precision {
  StateType state = StateType::FP32;
  int entry_bytes = 2;  // buffer element: k, u or v (GDN), B or x (Mamba-2) (bf16)
  int io_bytes = 2;     // token inputs and outputs (bf16)
  int state_bytes() const { return state_type_bytes(state); }
};
inline Precision precision_of(EntryType e, StateType state = StateType::FP32) {
  Precision p;
  p.state = state;
  p.entry_bytes = entry_type_bytes(e);
  return p;
}

// "fp32", "bf16", "fp64" or "fp8" for 8, 4, 2, 1 bytes; throws std::invalid_argument otherwise.
std::string dtype_name(int bytes);
int dtype_bytes(const std::string& name);  // inverse of dtype_name ("f32"/"f64" also accepted)

// One pool tensor: elements per slot (request) and element size. Metadata (int32 bookkeeping)
// is what the bytes and capacity models leave out.
struct PoolTensor {
  std::string name;
  size_t elems_per_slot = 0;
  int elem_bytes = 0;
  bool metadata = false;
  size_t bytes_per_slot() const { return elems_per_slot * size_t(elem_bytes); }
};

// One layer's pools at buffer capacity C (0 = no buffer).
struct PoolLayout {
  LayerShape shape;
  int capacity = 0;
  BufferVariant variant = BufferVariant::CachedU;
  Precision precision;

  bool gdn() const { return shape.kind == LayerKind::GatedDeltaNet; }
  // Per-value-head fp32 scalars of an entry: G, plus beta (GDN raw) or dt (Mamba-2).
  int entry_scalars() const { return gdn() && variant == BufferVariant::CachedU ? 1 : 2; }
  size_t state_elems() const { return size_t(shape.value_heads) * shape.head_v * shape.head_k; }
  size_t entry_key_elems() const { return size_t(shape.key_heads) * shape.head_k; }
  size_t entry_value_elems() const { return size_t(shape.value_heads) * shape.head_v; }
  size_t conv_dim() const {
    return gdn() ? 2 * entry_key_elems() + entry_value_elems() : entry_value_elems() + 2 * entry_key_elems();
  }

  size_t state_bytes() const { return state_elems() * size_t(precision.state_bytes()); }
  size_t entry_key_bytes() const { return entry_key_elems() * size_t(precision.entry_bytes); }
  size_t entry_value_bytes() const { return entry_value_elems() * size_t(precision.entry_bytes); }
  size_t entry_scalar_bytes() const { return size_t(entry_scalars()) * shape.value_heads * 4; }
  size_t entry_bytes() const { return entry_key_bytes() + entry_value_bytes() + entry_scalar_bytes(); }
  size_t conv_bytes() const { return conv_dim() * size_t(shape.conv_width - 1) * size_t(precision.io_bytes); }

  PoolTensor state() const { return {"state", state_elems(), precision.state_bytes()}; }
  // buf_k, buf_val, buf_gcum (+ buf_beta): C entries.
  std::vector<PoolTensor> buffer() const {
    const size_t C = size_t(capacity), HV = size_t(shape.value_heads);
    std::vector<PoolTensor> t = {{"buf_k", C * entry_key_elems(), precision.entry_bytes},
                                 {"buf_val", C * entry_value_elems(), precision.entry_bytes},
                                 {"buf_gcum", C * HV, 4}};
    if (entry_scalars() == 2) t.push_back({"buf_beta", C * HV, 4});
    return t;
  }
  // fill, has_state, done_count.
  std::vector<PoolTensor> buffer_metadata() const {
    return {{"fill", 1, 4, true}, {"has_state", 1, 4, true}, {"done_count", 1, 4, true}};
  }
  // `copies` conv windows per request (1 + T for classic speculative decoding).
  PoolTensor conv(int copies) const { return {"conv", size_t(copies) * conv_dim() * (shape.conv_width - 1), precision.io_bytes}; }
  // KVBuffer verify: the T candidate entries and the row's base (fill, has_state after the fold).
  std::vector<PoolTensor> verify_scratch(int tokens) const {
    const size_t T = size_t(tokens);
    std::vector<PoolTensor> t = {{"win_k", T * entry_key_elems(), precision.entry_bytes},
                                 {"win_u", T * entry_value_elems(), precision.entry_bytes},
                                 {"win_gcum", T * shape.value_heads, 4}};
    if (entry_scalars() == 2) t.push_back({"win_beta", T * shape.value_heads, 4});
    t.push_back({"win_base", 2, 4, true});
    return t;
  }
  // Classic verify: the state after each of the T nodes.
  PoolTensor step_states(int tokens) const { return {"step_states", size_t(tokens) * state_elems(), precision.state_bytes()}; }
};

// Bytes of one request's tensors in `t`, metadata left out unless asked for.
inline size_t bytes_per_slot(const std::vector<PoolTensor>& t, bool with_metadata = false) {
  size_t b = 0;
  for (const PoolTensor& x : t)
    if (with_metadata || !x.metadata) b += x.bytes_per_slot();
  return b;
}

// The buffered verify's fold rule (kernels/gdn/gdn_verify.h's protocol, both families): a verify whose
// window is `depth` nodes deep (T for a chain) at fill n folds the n buffered entries into the
// state first when n > 0 and n + depth >= C. constexpr, so the kernels use it too.
constexpr bool verify_folds_first(int chunk, int depth, int fill) { return fill > 0 && fill + depth >= chunk; }

// Where a buffered verify kernel puts its window's T candidate entries:
//   Scratch: a per-row scratch area, from which the commit copies the m accepted entries into the
//            buffer (the GDN kernels; Mamba-2's one-head kernel, small batches);
//   Buffer:  a chain (depth T) that fits after the fill (n + T < C: no fold first, no full buffer
//            at the commit) writes them into the buffer at n + t, which no block of the verify
//            reads, and the commit only moves the fill to n + m (a rejected entry lies past it:
//            rollback drops it); every other window goes to the scratch (Mamba-2's head-group
//            kernel, from ~1.5 waves of blocks: 1-2% faster there; the one-head kernel measured
//            1.5% slower so at batches 1-32, kernels/mamba2/notes/mamba2_verify.md run 15).
// constexpr: the kernels and the bytes model use it.
enum class VerifyWindow { Scratch, Buffer };
constexpr bool verify_window_in_buffer(VerifyWindow window, int chunk, int tokens, int depth, int fill) {
  return window == VerifyWindow::Buffer && depth == tokens && fill + tokens < chunk;
}

// The pools each measurement allocates per layer and request, so that the bytes and capacity
// models and the GPU code agree by construction (sim/tests/test_layout.cpp checks the sums):
//   decode: the state (a second one out of place) and, at capacity C > 0, the buffer and its
//           metadata (bench/sweep/sweep_decode.cu);
std::vector<PoolTensor> decode_pools(const PoolLayout& l, bool out_of_place);
//   speculative decoding of T tokens: classic keeps the state, T step states and 1 + T conv
//           windows; KVBuffer the state, 1 conv window, the buffer and its metadata and the verify
//           scratch of T entries (bench/capacity_measure.cu; bench/sweep/sweep_verify.cu without conv).
std::vector<PoolTensor> speculative_pools(const PoolLayout& l, int tokens, bool kvbuffer, bool with_conv);

// The placement of `layers` copies of a list of pool tensors for `slots` requests in one
// allocation, each tensor aligned to `align` bytes (what an engine's allocator does). Both GPU
// sweeps and the capacity measurement allocate through it.
class PoolPlan {
 public:
  PoolPlan(std::vector<PoolTensor> tensors, size_t slots, int layers, size_t align = 256);
  size_t total_bytes() const { return total_; }
  size_t slots() const { return slots_; }
  int layers() const { return layers_; }
  const std::vector<PoolTensor>& tensors() const { return tensors_; }
  bool has(const std::string& name) const;
  // Byte offset of tensor `name` of layer l; throws std::invalid_argument for an unknown name.
  size_t offset(int layer, const std::string& name) const;
  size_t tensor_bytes(const std::string& name) const;  // one layer's, all slots

 private:
  size_t index_of(const std::string& name) const;
  std::vector<PoolTensor> tensors_;
  size_t slots_;
  int layers_;
  std::vector<size_t> offsets_;  // [layer * tensors + i]
  size_t total_ = 0;
};

}  // namespace kvbuf
