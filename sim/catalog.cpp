// The model catalog of issue 2: linear-attention layer shapes before tensor parallelism.
// Mamba-2 maps groups -> key_heads, heads -> value_heads, d_state -> head_k, head_dim -> head_v.
#include "sim/catalog.h"

#include <stdexcept>

namespace kvbuf {
namespace {

ModelSpec gdn(const char* name, int linear, int total, int value_heads, int attn_q, int attn_kv,
              double params_billion) {
  ModelSpec m;
  m.name = name;
  m.kind = LayerKind::GatedDeltaNet;
  m.linear_layers = linear;
  m.total_layers = total;
  m.attn_layers = total - linear;
  m.layer = LayerShape{LayerKind::GatedDeltaNet, 16, value_heads, 128, 128, 4};
  m.attn_q_heads = attn_q;
  m.attn_kv_heads = attn_kv;
  m.attn_head_dim = 256;
  m.params_billion = params_billion;
  return m;
}

ModelSpec mamba2(const char* name, int linear, int total, int attn_layers, int heads,
                 double params_billion) {
  ModelSpec m;
  m.name = name;
  m.kind = LayerKind::Mamba2;
  m.linear_layers = linear;
  m.total_layers = total;
  m.attn_layers = attn_layers;
  m.layer = LayerShape{LayerKind::Mamba2, 8, heads, 128, 64, 4};
  m.attn_q_heads = 32;
  m.attn_kv_heads = 2;
  m.attn_head_dim = 128;
  m.params_billion = params_billion;
  return m;
}

std::invalid_argument bad(const std::string& what) { return std::invalid_argument(what); }

}  // namespace

const std::vector<ModelSpec>& model_catalog() {
  static const std::vector<ModelSpec> catalog = {
      gdn("qwen3-next-80b-a3b", 36, 48, 32, 16, 2, 80),
      gdn("qwen3.5-0.8b", 18, 24, 16, 8, 2, 0.8),
      gdn("qwen3.5-2b", 18, 24, 16, 8, 2, 2),
      gdn("qwen3.5-4b", 24, 32, 32, 16, 4, 4),
      gdn("qwen3.5-9b", 24, 32, 32, 16, 4, 9),
      gdn("qwen3.5-27b", 48, 64, 48, 24, 4, 27),
      gdn("qwen3.5-35b-a3b", 30, 40, 32, 16, 2, 35),
      gdn("qwen3.5-122b-a10b", 36, 48, 64, 32, 2, 122),
      gdn("qwen3.5-397b-a17b", 45, 60, 64, 32, 2, 397),
      mamba2("nemotron-3-nano-30b-a3b", 23, 52, 6, 64, 30),
      mamba2("nemotron-3-super-120b-a12b", 40, 88, 8, 128, 120),
  };
  return catalog;
}

const ModelSpec& find_model(const std::string& name) {
  std::string known;
  for (const auto& m : model_catalog()) {
    if (m.name == name) return m;
    known += (known.empty() ? "" : ", ") + m.name;
  }
  throw bad("unknown model '" + name + "' (known: " + known + ")");
}

const char* layer_kind_name(LayerKind kind) {
  return kind == LayerKind::GatedDeltaNet ? "gdn" : "mamba2";
}

LayerKind parse_layer_kind(const std::string& name) {
  if (name == "gdn") return LayerKind::GatedDeltaNet;
  if (name == "mamba2") return LayerKind::Mamba2;
  throw bad("unknown layer kind '" + name + "' (known: gdn, mamba2)");
}

void validate_model(const ModelSpec& m) {
  const LayerShape& s = m.layer;
  const bool gdn_kind = s.kind == LayerKind::GatedDeltaNet;
  const char* kh = gdn_kind ? "key heads" : "groups";
  const char* vh = gdn_kind ? "value heads" : "heads";
  if (s.kind != m.kind) throw bad("model '" + m.name + "': layer kind differs from model kind");
  if (s.key_heads <= 0) throw bad(std::string(kh) + " must be positive");
  if (s.value_heads <= 0) throw bad(std::string(vh) + " must be positive");
  if (s.head_k <= 0)
    throw bad(gdn_kind ? "head-k (K) must be positive" : "d_state (N) must be positive");
  if (s.head_v <= 0)
    throw bad(gdn_kind ? "head-v (V) must be positive" : "head_dim (P) must be positive");
  if (s.conv_width < 1) throw bad("conv width must be at least 1");
  if (s.value_heads % s.key_heads != 0)
    throw bad(std::string(vh) + " (" + std::to_string(s.value_heads) + ") must be a multiple of " +
              kh + " (" + std::to_string(s.key_heads) + ")");
  if (m.linear_layers <= 0) throw bad("linear layers must be positive");
  if (m.attn_layers < 0) throw bad("attention layers must be non-negative");
  if (m.total_layers < m.linear_layers + m.attn_layers)
    throw bad("total layers must be at least linear + attention layers");
  if (m.attn_layers > 0 && (m.attn_q_heads <= 0 || m.attn_kv_heads <= 0 || m.attn_head_dim <= 0))
    throw bad("attention heads and head dim must be positive when there are attention layers");
  if (m.attn_kv_heads > 0 && m.attn_q_heads % m.attn_kv_heads != 0)
    throw bad("attention q heads must be a multiple of kv heads");
  if (m.params_billion < 0) throw bad("parameter count must be non-negative");
  if (m.tp < 1) throw bad("tensor-parallel degree must be at least 1");
}

ModelSpec apply_tensor_parallel(const ModelSpec& model, int tp) {
  if (tp < 1) throw bad("--tp must be at least 1, got " + std::to_string(tp));
  if (model.tp != 1) throw bad("tensor parallelism already applied to '" + model.name + "'");
  auto divide = [&](int heads, const char* what) {
    if (heads % tp != 0)
      throw bad(std::string(what) + " (" + std::to_string(heads) + ") of '" + model.name +
                "' not divisible by --tp " + std::to_string(tp));
    return heads / tp;
  };
  const bool gdn_kind = model.kind == LayerKind::GatedDeltaNet;
  ModelSpec m = model;
  m.tp = tp;
  m.layer.key_heads = divide(model.layer.key_heads, gdn_kind ? "key heads" : "groups");
  m.layer.value_heads = divide(model.layer.value_heads, gdn_kind ? "value heads" : "heads");
  if (model.attn_layers > 0) {
    m.attn_q_heads = divide(model.attn_q_heads, "attention q heads");
    if (model.attn_kv_heads >= tp) {
      m.attn_kv_heads = divide(model.attn_kv_heads, "attention kv heads");
    } else if (tp % model.attn_kv_heads == 0) {
      m.attn_kv_heads = 1;  // replicated: each GPU keeps the KV of one head
    } else {
      throw bad("attention kv heads (" + std::to_string(model.attn_kv_heads) + ") of '" +
                model.name + "' neither divide nor are divisible by --tp " + std::to_string(tp));
    }
  }
  return m;
}

}  // namespace kvbuf
