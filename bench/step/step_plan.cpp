#include "bench/step/step_plan.h"

#include <fmt/format.h>

#include <stdexcept>

namespace kvbuf::step {
namespace {

std::invalid_argument bad(const std::string& what) { return std::invalid_argument(what); }

int divide(int n, int tp, const std::string& what, const std::string& model) {
  if (n % tp != 0) throw bad(fmt::format("{} ({}) of '{}' not divisible by --tp {}", what, n, model, tp));
  return n / tp;
}

// Activation rows of the step's widest buffers, bf16, and the fixed workspaces of the runner.
constexpr double kCublasWorkspaceBytes = 32.0 * (1 << 20);
}  // namespace

int rotary_dim(const ModelSpec& m) {
  return m.kind == LayerKind::GatedDeltaNet ? m.attn_head_dim / 4 : m.attn_head_dim;
}

std::vector<Block> model_blocks(const ModelSpec& m) {
  std::vector<Block> blocks;
  const int mixers = m.linear_layers + m.attn_layers;
  const int interval = m.attn_layers > 0 ? mixers / m.attn_layers : 0;
  auto mixer_at = [&](int i) {
    return interval > 0 && (i + 1) % interval == 0 && (i + 1) / interval <= m.attn_layers ? Mixer::Attention
                                                                                         : Mixer::Linear;
  };
  const Ffn ffn = m.blocks.experts > 0 ? Ffn::MoE : Ffn::Dense;
  if (m.blocks.mlp_layers == m.total_layers) {
    for (int i = 0; i < m.total_layers; ++i) blocks.push_back({mixer_at(i), ffn});
  } else {
    // Nemotron-H: a linear mixer is followed by an MoE layer while MoE layers remain.
    int ffns = m.blocks.mlp_layers;
    for (int i = 0; i < mixers; ++i) {
      const Mixer mx = mixer_at(i);
      blocks.push_back({mx, Ffn::None});
      if (mx == Mixer::Linear && ffns > 0) blocks.push_back({Mixer::None, ffn}), --ffns;
    }
    for (; ffns > 0; --ffns) blocks.push_back({Mixer::None, ffn});
  }
  int linear = 0, attn = 0;
  for (const Block& b : blocks) linear += b.mixer == Mixer::Linear, attn += b.mixer == Mixer::Attention;
  if (linear != m.linear_layers || attn != m.attn_layers)
    throw bad(fmt::format("model '{}': block order gives {} linear and {} attention layers, the catalog {} and {}",
                          m.name, linear, attn, m.linear_layers, m.attn_layers));
  return blocks;
}

size_t RankShapes::linear_in_width() const {
  const LayerShape& s = model.layer;
  const size_t keys = size_t(s.key_heads) * s.head_k, values = size_t(s.value_heads) * s.head_v;
  return s.kind == LayerKind::GatedDeltaNet ? 2 * keys + 2 * values + 2 * size_t(s.value_heads)
                                            : 2 * values + 2 * keys + size_t(s.value_heads);
}

size_t RankShapes::linear_conv_dim() const {
  PoolLayout l;
  l.shape = model.layer;
  return l.conv_dim();
}

size_t RankShapes::linear_out_rows() const { return size_t(model.layer.value_heads) * model.layer.head_v; }

RankShapes rank_shapes(const ModelSpec& catalog_model, int tp) {
  const BlockShapes& b = catalog_model.blocks;
  if (b.hidden <= 0) throw bad("model '" + catalog_model.name + "' has no whole-model shapes");
  RankShapes r;
  r.model = apply_tensor_parallel(catalog_model, tp);
  r.tp = tp;
  r.hidden = b.hidden;
  r.vocab = divide(b.vocab, tp, "vocabulary", catalog_model.name);
  r.dense_ffn = b.dense_ffn > 0 ? divide(b.dense_ffn, tp, "MLP intermediate size", catalog_model.name) : 0;
  r.expert_ffn = b.expert_ffn > 0 ? divide(b.expert_ffn, tp, "expert intermediate size", catalog_model.name) : 0;
  r.shared_ffn = b.shared_ffn > 0 ? divide(b.shared_ffn, tp, "shared expert size", catalog_model.name) : 0;
  r.experts = b.experts;
  r.top_k = b.top_k;
  r.gated_mlp = b.gated_mlp;
  if (b.expert_input > 0)
    throw bad("model '" + catalog_model.name + "': latent MoE (experts in a narrower latent) is not in the step runner");
  return r;
}

size_t linear_out_norm_width(const RankShapes& r) {
  const LayerShape& s = r.model.layer;
  return s.kind == LayerKind::GatedDeltaNet ? size_t(s.head_v) : r.linear_out_rows();
}

size_t linear_out_norm_group(const RankShapes& r) {
  const LayerShape& s = r.model.layer;
  return s.kind == LayerKind::GatedDeltaNet ? size_t(s.head_v) : r.linear_out_rows() / s.key_heads;
}

std::vector<WeightTensor> mixer_weights(const RankShapes& r, Mixer m) {
  const size_t d = size_t(r.hidden);
  const LayerShape& s = r.model.layer;
  switch (m) {
    case Mixer::None: return {};
    case Mixer::Linear: {
      std::vector<WeightTensor> w = {{"norm", 1, d},
                                     {"in_proj", r.linear_in_width(), d},
                                     {"conv", r.linear_conv_dim(), size_t(s.conv_width)},
                                     {"dt_bias", 1, size_t(s.value_heads), 4},
                                     {"A", 1, size_t(s.value_heads), 4},
                                     {"out_norm", 1, linear_out_norm_width(r)},
                                     {"out_proj", d, r.linear_out_rows()}};
      if (s.kind == LayerKind::Mamba2) w.push_back({"D", 1, size_t(s.value_heads), 4});
      return w;
    }
    case Mixer::Attention:
      return {{"norm", 1, d},
              {"qkv_proj", r.attn_in_width(), d},
              {"q_norm", 1, size_t(r.model.attn_head_dim)},
              {"k_norm", 1, size_t(r.model.attn_head_dim)},
              {"o_proj", d, r.attn_q_width()}};
  }
  return {};
}

std::vector<WeightTensor> ffn_weights(const RankShapes& r, Ffn f) {
  const size_t d = size_t(r.hidden);
  const size_t up = r.gated_mlp ? 2 : 1;  // gate and up in one matrix
  switch (f) {
    case Ffn::None: return {};
    case Ffn::Dense:
      return {{"norm", 1, d}, {"up_proj", up * r.dense_ffn, d}, {"down_proj", d, size_t(r.dense_ffn)}};
    case Ffn::MoE: {
      const size_t E = size_t(r.experts), I = size_t(r.expert_ffn);
      std::vector<WeightTensor> w = {{"norm", 1, d},
                                     {"router", E, d},
                                     {"experts_up", E * up * I, d},
                                     {"experts_down", E * d, I}};
      if (r.shared_ffn > 0) {
        w.push_back({"shared_up", up * r.shared_ffn, d});
        w.push_back({"shared_down", d, size_t(r.shared_ffn)});
      }
      return w;
    }
  }
  return {};
}

std::vector<WeightTensor> head_weights(const RankShapes& r) {
  const size_t d = size_t(r.hidden);
  std::vector<WeightTensor> w = {{"final_norm", 1, d}, {"lm_head", size_t(r.vocab), d}};
  // The embedding gathers rows of the whole vocabulary (engines split it too; the gather reads
  // only the batch's rows either way). Tied embeddings read the LM head's rows.
  if (!r.model.blocks.tied_embeddings) w.push_back({"embedding", size_t(r.vocab), d});
  return w;
}

PoolLayout linear_pool_layout(const RankShapes& r, const StepPoint& p) {
  PoolLayout l;
  l.shape = r.model.layer;
  l.capacity = p.method == DecodeMethod::KVBuffer ? p.chunk : 0;
  l.variant = BufferVariant::CachedU;
  l.precision = precision_of(EntryType::BF16, p.state);
  return l;
}

std::vector<PoolTensor> linear_pool_tensors(const RankShapes& r, const StepPoint& p) {
  const PoolLayout l = linear_pool_layout(r, p);
  const bool kvb = p.method == DecodeMethod::KVBuffer;
  if (p.drafts > 0) {
    if (kvb) return speculative_pools(l, p.drafts, true, true);
    PoolTensor states = l.state();
    states.elems_per_slot *= size_t(1 + p.drafts);
    return {states, l.conv(1 + p.drafts)};
  }
  std::vector<PoolTensor> t = decode_pools(l, false);
  t.push_back(l.conv(1));
  return t;
}

MemoryPlan memory_plan(const RankShapes& r, const StepPoint& p) {
  if (p.batch < 1 || p.context < 1) throw bad("batch and context must be positive");
  if (p.drafts < 0 || p.context < p.tokens()) throw bad("drafts must be >= 0 and the context hold the T verified tokens");
  MemoryPlan m;
  for (const WeightTensor& t : head_weights(r)) m.weights += double(t.bytes());
  for (const Block& b : model_blocks(r.model)) {
    for (const WeightTensor& t : mixer_weights(r, b.mixer)) m.weights += double(t.bytes());
    for (const WeightTensor& t : ffn_weights(r, b.ffn)) m.weights += double(t.bytes());
  }
  const double pages = double(p.batch) * double((p.context + kPageTokens - 1) / kPageTokens);
  m.kv_cache = r.model.attn_layers * pages * 2.0 * kPageTokens * r.attn_kv_width() * 2.0;
  m.linear_pools = double(PoolPlan(linear_pool_tensors(r, p), size_t(p.batch), r.model.linear_layers).total_bytes());
  // Per token row: hidden, normed input, the widest in-projection, the mixer's outputs, the MLP's
  // up and activated halves (MoE: top-k expert rows), logits; fp32 gates and router scores.
  const size_t up = r.gated_mlp ? 2 : 1;
  const size_t ffn_rows = r.experts > 0 ? size_t(r.top_k) * r.expert_ffn + r.shared_ffn : r.dense_ffn;
  const size_t in_width = std::max(r.linear_in_width(), r.model.attn_layers > 0 ? r.attn_in_width() : 0);
  const double per_row = 2.0 * (3 * size_t(r.hidden) + in_width + 3 * r.linear_conv_dim() + 2 * r.linear_out_rows() +
                                2 * r.attn_q_width() + (up + 1) * ffn_rows + 2 * size_t(r.top_k) * r.hidden + r.experts + r.vocab) +
                         4.0 * (2 * size_t(r.model.layer.value_heads) + 4 * size_t(r.top_k));
  m.activations = double(p.batch) * p.tokens() * per_row + kCublasWorkspaceBytes + kAttentionWorkspaceBytes;
  return m;
}

std::string memory_refusal(const MemoryPlan& m, double free_bytes) {
  const double gib = double(1 << 30);
  if (m.total() + kMemoryHeadroomBytes <= free_bytes) return "";
  return fmt::format("needs {:.2f} GiB (weights {:.2f}, full-attention KV {:.2f}, linear pools {:.2f}, activations "
                     "{:.2f}) + {:.1f} GiB headroom, {:.2f} GiB free",
                     m.total() / gib, m.weights / gib, m.kv_cache / gib, m.linear_pools / gib, m.activations / gib,
                     kMemoryHeadroomBytes / gib, free_bytes / gib);
}

}  // namespace kvbuf::step
