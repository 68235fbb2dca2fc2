// Bytes per linear-attention layer per step per request: section 9 of
// docs/kvbuffer-math.md, with two corrections our kernels need (a raw GDN entry keeps
// G and beta: 2 HV 4 bytes of gates; verify writes all T candidate entries to scratch and the
// commit copies the m accepted ones into the buffer, except where the kernel writes a chain that
// fits after the fill into the buffer directly: sim/layout.h's VerifyWindow).
#include "sim/bytes_model.h"

#include <stdexcept>

namespace kvbuf {
namespace {

struct Part {
  std::string tensor;
  std::string dtype;
  double bytes;
};

void check_precision(const Precision& p) {
  if (p.entry_bytes <= 0 || p.io_bytes <= 0)
    throw std::invalid_argument("element sizes must be positive");
}

bool is_gdn(const LayerShape& s) { return s.kind == LayerKind::GatedDeltaNet; }

// One token's inputs (read) and output (written).
std::vector<Part> token_inputs(const LayerShape& s, const Precision& p) {
  const double H = s.key_heads, HV = s.value_heads, K = s.head_k, V = s.head_v, io = p.io_bytes;
  const std::string t = dtype_name(p.io_bytes);
  if (is_gdn(s))
    return {{"q", t, H * K * io},
            {"k", t, H * K * io},
            {"v", t, HV * V * io},
            {"gates", "fp32", 2 * HV * 4}};
  // Mamba-2: G = key_heads, NH = value_heads, N = head_k, P = head_v.
  return {
      {"x", t, HV * V * io}, {"B", t, H * K * io}, {"C", t, H * K * io}, {"dt", "fp32", HV * 4}};
}

Part token_output(const LayerShape& s, const Precision& p) {
  return {is_gdn(s) ? "o" : "y", dtype_name(p.io_bytes),
          double(s.value_heads) * s.head_v * p.io_bytes};
}

// One buffer entry split by tensor (sizes from sim/layout.h); `prefix` names the area ("buffer"
// or "scratch").
std::vector<Part> entry_parts(const LayerShape& s, const Precision& p, BufferVariant v,
                              const std::string& prefix) {
  const PoolLayout l{s, 1, v, p};
  const std::string t = dtype_name(p.entry_bytes);
  const double keys = double(l.entry_key_bytes()), values = double(l.entry_value_bytes()),
               scalars = double(l.entry_scalar_bytes());
  if (is_gdn(s)) {
    const bool cached_u = v == BufferVariant::CachedU;
    return {{prefix + ".keys", t, keys},
            {prefix + (cached_u ? ".u" : ".v"), t, values},
            {prefix + (cached_u ? ".G" : ".G_beta"), "fp32", scalars}};
  }
  return {{prefix + ".x", t, values}, {prefix + ".B", t, keys}, {prefix + ".dt_G", "fp32", scalars}};
}

void add_tokens(StepBytes& b, const LayerShape& s, const Precision& p, int tokens) {
  for (const Part& part : token_inputs(s, p))
    b.add(part.tensor, part.dtype, tokens * part.bytes, 0);
  const Part out = token_output(s, p);
  b.add(out.tensor, out.dtype, 0, tokens * out.bytes);
}

void add_entries(StepBytes& b, const LayerShape& s, const Precision& p, BufferVariant v,
                 const std::string& area, double read_entries, double write_entries) {
  for (const Part& part : entry_parts(s, p, v, area))
    b.add(part.tensor, part.dtype, read_entries * part.bytes, write_entries * part.bytes);
}

void add_state(StepBytes& b, const LayerShape& s, const Precision& p, double reads, double writes) {
  const double w = state_bytes(s, p);
  b.add("state", state_type_name(p.state), reads * w, writes * w);
}

void check_chunk(int chunk) {
  if (chunk < 1 || chunk > kMaxBufferCapacity)
    throw std::invalid_argument("buffer capacity C must be in 1.." +
                                std::to_string(kMaxBufferCapacity) + ", got " +
                                std::to_string(chunk));
}

}  // namespace

double StepBytes::read_bytes() const {
  double sum = 0;
  for (const auto& t : tensors) sum += t.read_bytes;
  return sum;
}

double StepBytes::write_bytes() const {
  double sum = 0;
  for (const auto& t : tensors) sum += t.write_bytes;
  return sum;
}

StepBytes& StepBytes::scale(double factor) {
  for (auto& t : tensors) {
    t.read_bytes *= factor;
    t.write_bytes *= factor;
  }
  return *this;
}

void StepBytes::add(const std::string& tensor, const std::string& dtype, double read,
                    double write) {
  for (auto& t : tensors)
    if (t.tensor == tensor) {
      t.read_bytes += read;
      t.write_bytes += write;
      return;
    }
  tensors.push_back({tensor, dtype, read, write});
}

const TensorTraffic* StepBytes::find(const std::string& tensor) const {
  for (const auto& t : tensors)
    if (t.tensor == tensor) return &t;
  return nullptr;
}

StepBytes average(const std::vector<StepBytes>& steps) {
  if (steps.empty()) throw std::invalid_argument("average of no steps");
  StepBytes mean;
  mean.mode = steps.front().mode;
  // Tensors that appear only on some steps (the fold's state write) count as zero elsewhere.
  for (const auto& step : steps)
    for (const auto& t : step.tensors) mean.add(t.tensor, t.dtype, t.read_bytes, t.write_bytes);
  return mean.scale(1.0 / steps.size());
}

double buffer_entry_bytes(const LayerShape& s, const Precision& p, BufferVariant v) {
  check_precision(p);
  return double(PoolLayout{s, 1, v, p}.entry_bytes());
}

double state_bytes(const LayerShape& s, const Precision& p) {
  check_precision(p);
  return double(PoolLayout{s, 0, BufferVariant::CachedU, p}.state_bytes());
}

double conv_state_bytes(const LayerShape& s, const Precision& p) {
  check_precision(p);
  return double(PoolLayout{s, 0, BufferVariant::CachedU, p}.conv_bytes());
}

StepBytes bytes_recurrent(const LayerShape& s, const Precision& p) {
  check_precision(p);
  StepBytes b;
  b.mode = "recurrent";
  add_tokens(b, s, p, 1);
  add_state(b, s, p, 1, 1);
  return b;
}

StepBytes bytes_kvbuffer_at_fill(const LayerShape& s, const Precision& p, BufferVariant v,
                                 int chunk, int fill) {
  check_precision(p);
  check_chunk(chunk);
  if (fill < 0 || fill >= chunk)
    throw std::invalid_argument("buffer fill must be in 0..C-1, got " + std::to_string(fill));
  StepBytes b;
  b.mode = "kvbuffer";
  add_tokens(b, s, p, 1);
  // The fold step writes the state instead of an entry: the token goes straight into it.
  const bool fold = fill == chunk - 1;
  add_state(b, s, p, 1, fold ? 1 : 0);
  add_entries(b, s, p, v, "buffer", fill, fold ? 0 : 1);
  return b;
}

StepBytes bytes_kvbuffer_cycle(const LayerShape& s, const Precision& p, BufferVariant v,
                               int chunk) {
  check_chunk(chunk);
  std::vector<StepBytes> steps;
  for (int n = 0; n < chunk; ++n) steps.push_back(bytes_kvbuffer_at_fill(s, p, v, chunk, n));
  return average(steps);
}

StepBytes bytes_direct_at_fill(const LayerShape& s, const Precision& p, int fill) {
  check_precision(p);
  if (fill < 0)
    throw std::invalid_argument("buffer fill must be non-negative, got " + std::to_string(fill));
  StepBytes b;
  b.mode = "direct";
  add_tokens(b, s, p, 1);
  add_entries(b, s, p, BufferVariant::CachedU, "buffer", fill, 1);
  return b;
}

StepBytes bytes_direct_mean(const LayerShape& s, const Precision& p, int chunk) {
  check_chunk(chunk);
  std::vector<StepBytes> steps;
  for (int n = 0; n + 1 < chunk; ++n) steps.push_back(bytes_direct_at_fill(s, p, n));
  StepBytes overflow;  // fill C-1: the fold creates the state from the C-1 entries and the token
  overflow.mode = "direct";
  add_tokens(overflow, s, p, 1);
  add_state(overflow, s, p, 0, 1);
  add_entries(overflow, s, p, BufferVariant::CachedU, "buffer", chunk - 1, 0);
  steps.push_back(overflow);
  return average(steps);
}

StepBytes bytes_verify_classic(const LayerShape& s, const Precision& p, int tokens,
                               bool commit_copy) {
  check_precision(p);
  if (tokens < 1)
    throw std::invalid_argument("verify needs at least 1 token, got " + std::to_string(tokens));
  StepBytes b;
  b.mode = commit_copy ? "verify-classic" : "verify-classic-inplace";
  add_tokens(b, s, p, tokens);
  add_state(b, s, p, 1, commit_copy ? 1 : 0);
  const double w = state_bytes(s, p);
  b.add("intermediate_states", state_type_name(p.state), commit_copy ? w : 0, tokens * w);
  return b;
}

namespace {
void check_verify(int chunk, int tokens, int fill, int accepted) {
  check_chunk(chunk);
  if (tokens < 1 || tokens > chunk)
    throw std::invalid_argument("verify tokens T must be in 1..C (C = " + std::to_string(chunk) +
                                "), got " + std::to_string(tokens));
  if (fill < 0 || fill >= chunk)
    throw std::invalid_argument("buffer fill must be in 0..C-1, got " + std::to_string(fill));
  if (accepted < 0 || accepted > tokens)
    throw std::invalid_argument("accepted entries must be in 0..T, got " +
                                std::to_string(accepted));
}
}  // namespace

int verify_kvbuffer_next_fill(int chunk, int tokens, int fill, int accepted) {
  check_verify(chunk, tokens, fill, accepted);
  const int n0 = verify_folds_first(chunk, tokens, fill) ? 0 : fill;
  return n0 + accepted < chunk ? n0 + accepted : 0;
}

StepBytes bytes_verify_kvbuffer(const LayerShape& s, const Precision& p, BufferVariant v, int chunk,
                                int tokens, int depth, int fill, int accepted, VerifyWindow window) {
  check_precision(p);
  check_verify(chunk, tokens, fill, accepted);
  if (depth < 1 || depth > tokens)
    throw std::invalid_argument("verify window depth must be in 1..T (T = " +
                                std::to_string(tokens) + "), got " + std::to_string(depth));
  if (accepted > depth)
    throw std::invalid_argument("accepted entries (" + std::to_string(accepted) +
                                ") exceed the window's depth " + std::to_string(depth));
  StepBytes b;
  b.mode = "verify-kvbuffer";
  add_tokens(b, s, p, tokens);
  if (verify_window_in_buffer(window, chunk, tokens, depth, fill)) {
    add_state(b, s, p, 1, 0);
    add_entries(b, s, p, v, "buffer", fill, tokens);
    return b;
  }
  const bool fold_first = verify_folds_first(chunk, depth, fill);
  const int n0 = fold_first ? 0 : fill;
  const bool commit_fold = n0 + accepted == chunk;
  add_state(b, s, p, 1 + (commit_fold ? 1 : 0), (fold_first ? 1 : 0) + (commit_fold ? 1 : 0));
  add_entries(b, s, p, v, "buffer", fill + (commit_fold ? n0 : 0), commit_fold ? 0 : accepted);
  add_entries(b, s, p, v, "scratch", accepted, tokens);
  return b;
}

StepBytes bytes_verify_kvbuffer_cycle(const LayerShape& s, const Precision& p, BufferVariant v,
                                      int chunk, int tokens, int accepted, VerifyWindow window) {
  check_verify(chunk, tokens, 0, accepted);
  // Follow the fills from an empty buffer until one repeats; the rounds from its first visit on
  // are the cycle.
  std::vector<int> fills{0};
  std::vector<int> visited_at(chunk, -1);
  visited_at[0] = 0;
  for (;;) {
    const int next = verify_kvbuffer_next_fill(chunk, tokens, fills.back(), accepted);
    if (visited_at[next] >= 0) {
      std::vector<StepBytes> rounds;
      for (size_t i = visited_at[next]; i < fills.size(); ++i)
        rounds.push_back(bytes_verify_kvbuffer(s, p, v, chunk, tokens, tokens, fills[i], accepted, window));
      return average(rounds);
    }
    visited_at[next] = int(fills.size());
    fills.push_back(next);
  }
}

VerifyWindow modelled_verify_window(LayerKind kind) {
  return kind == LayerKind::Mamba2 ? VerifyWindow::Buffer : VerifyWindow::Scratch;
}

}  // namespace kvbuf
