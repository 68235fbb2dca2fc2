// The model catalog: linear-attention layer shapes before tensor parallelism.
// Mamba-2 maps groups -> key_heads, heads -> value_heads, d_state -> head_k, head_dim -> head_v.
#include "sim/catalog.h"

#include "sim/layout.h"

#include <stdexcept>

namespace kvbuf {
namespace {

ModelSpec gdn(const char* name, int linear, int total, int value_heads, int attn_q, int attn_kv,
              double params_billion, BlockShapes blocks) {
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
  m.blocks = blocks;
  return m;
}

ModelSpec mamba2(const char* name, int linear, int total, int attn_layers, int heads,
                 double params_billion, BlockShapes blocks) {
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
  m.blocks = blocks;
  return m;
}

ModelSpec with_engine_state(ModelSpec m, StateType t) {
  m.engine_state = t;
  return m;
}

std::invalid_argument bad(const std::string& what) { return std::invalid_argument(what); }


// Whole-model shapes, from the models' public Hugging Face config.json files as remembered (this
// project cannot download them): hidden_size, vocab_size, tie_word_embeddings, intermediate_size
// (dense), num_experts / n_routed_experts, num_experts_per_tok, moe_intermediate_size,
// shared_expert_intermediate_size. Each model's parameter count from these shapes agrees with its
// name within 10% (sim/tests/test_step_model.cpp checks it), which rules out a wrong hidden size or
// expert count but not a small error in one of them. "?" marks a number remembered with less
// confidence.
//   Qwen3-Next-80B-A3B: hidden 2048, vocab 151936, 512 experts, top-10, expert 512, shared 512,
//     attention output gate.
//   Qwen3.5 (same family; vocab 248320?): dense 0.8B hidden 1024 / ffn 3584?, 2B 2048 / 6144?,
//     4B 2560 / 9216?, 9B 4096 / 12288?, 27B 5120 / 17408?; the three small ones tie embeddings?;
//     MoE 35B-A3B hidden 2048, 256 experts, top-8, expert 512, shared 512; 122B-A10B hidden 3072?,
//     256 experts, top-8, expert 1024, shared 1024?; 397B-A17B hidden 4096, 512 experts, top-10,
//     expert 1024, shared 1024.
//   Nemotron-3 Nano 30B-A3B: hidden 2688, vocab 131072, 23 MoE layers of 128 experts, top-6,
//     expert 1856, one shared expert of 3712, squared-ReLU experts (up, down).
//   Nemotron-3 Super 120B-A12B (LatentMoE): hidden 4096, vocab 131072, 40 MoE layers of 512
//     experts?, top-22?, expert 2688? in a latent of 1024?, shared expert 5376?.
BlockShapes qwen_dense(int hidden, int ffn, int layers, bool tied) {
  BlockShapes b;
  b.hidden = hidden;
  b.vocab = 248320;
  b.tied_embeddings = tied;
  b.attn_output_gate = true;
  b.mlp_layers = layers;
  b.dense_ffn = ffn;
  return b;
}

BlockShapes qwen_moe(int hidden, int vocab, int layers, int experts, int top_k, int expert_ffn,
                     int shared_ffn) {
  BlockShapes b;
  b.hidden = hidden;
  b.vocab = vocab;
  b.attn_output_gate = true;
  b.mlp_layers = layers;
  b.experts = experts;
  b.top_k = top_k;
  b.expert_ffn = expert_ffn;
  b.shared_ffn = shared_ffn;
  return b;
}

BlockShapes nemotron_moe(int hidden, int layers, int experts, int top_k, int expert_ffn,
                         int shared_ffn, int expert_input) {
  BlockShapes b = qwen_moe(hidden, 131072, layers, experts, top_k, expert_ffn, shared_ffn);
  b.attn_output_gate = false;
  b.gated_mlp = false;
  b.expert_input = expert_input;
  return b;
}

}  // namespace

const std::vector<ModelSpec>& model_catalog() {
  static const std::vector<ModelSpec> catalog = {
      with_engine_state(gdn("qwen3-next-80b-a3b", 36, 48, 32, 16, 2, 80,
                            qwen_moe(2048, 151936, 48, 512, 10, 512, 512)),
                        StateType::BF16),
      gdn("qwen3.5-0.8b", 18, 24, 16, 8, 2, 0.8, qwen_dense(1024, 3584, 24, true)),
      gdn("qwen3.5-2b", 18, 24, 16, 8, 2, 2, qwen_dense(2048, 6144, 24, true)),
      gdn("qwen3.5-4b", 24, 32, 32, 16, 4, 4, qwen_dense(2560, 9216, 32, true)),
      gdn("qwen3.5-9b", 24, 32, 32, 16, 4, 9, qwen_dense(4096, 12288, 32, false)),
      gdn("qwen3.5-27b", 48, 64, 48, 24, 4, 27, qwen_dense(5120, 17408, 64, false)),
      gdn("qwen3.5-35b-a3b", 30, 40, 32, 16, 2, 35, qwen_moe(2048, 248320, 40, 256, 8, 512, 512)),
      gdn("qwen3.5-122b-a10b", 36, 48, 64, 32, 2, 122,
          qwen_moe(3072, 248320, 48, 256, 8, 1024, 1024)),
      gdn("qwen3.5-397b-a17b", 45, 60, 64, 32, 2, 397,
          qwen_moe(4096, 248320, 60, 512, 10, 1024, 1024)),
      mamba2("nemotron-3-nano-30b-a3b", 23, 52, 6, 64, 30,
             nemotron_moe(2688, 23, 128, 6, 1856, 3712, 0)),
      mamba2("nemotron-3-super-120b-a12b", 40, 88, 8, 128, 120,
             nemotron_moe(4096, 40, 512, 22, 2688, 5376, 1024)),
  };
  return catalog;
}

double WeightCounts::total() const {
  return linear_layers * linear_attn_layer + attn_layers * attn_layer +
         mlp_layers * (dense_mlp_layer + double(experts) * expert) + lm_head + embedding;
}

double WeightCounts::active_per_token() const {
  return linear_layers * linear_attn_layer + attn_layers * attn_layer +
         mlp_layers * (dense_mlp_layer + double(top_k) * expert) + lm_head;
}

WeightCounts weight_counts(const ModelSpec& m) {
  const BlockShapes& b = m.blocks;
  if (m.tp != 1) throw bad("weight_counts: pass '" + m.name + "' before tensor parallelism");
  if (b.hidden <= 0 || b.vocab <= 0 || b.mlp_layers < 0)
    throw bad("model '" + m.name + "' has no whole-model shapes (hidden size, vocabulary)");
  if ((b.experts > 0) == (b.dense_ffn > 0))
    throw bad("model '" + m.name + "' needs either a dense MLP or routed experts");
  if (b.experts > 0 && (b.top_k <= 0 || b.top_k > b.experts || b.expert_ffn <= 0))
    throw bad("model '" + m.name + "': top-k must be in 1..experts and the expert size positive");
  const double d = b.hidden;
  const LayerShape& s = m.layer;
  const double mats = b.gated_mlp ? 3 : 2;
  WeightCounts w;
  PoolLayout layout;
  layout.shape = s;
  const double conv_dim = double(layout.conv_dim());
  if (m.kind == LayerKind::GatedDeltaNet) {
    // in_proj_qkvz (q, k, v, output gate z), in_proj_ba (beta, a), out_proj; conv1d weights.
    const double qkvz = 2.0 * s.key_heads * s.head_k + 2.0 * s.value_heads * s.head_v;
    w.linear_attn_layer = d * (qkvz + 2.0 * s.value_heads) + double(s.value_heads) * s.head_v * d +
                          conv_dim * s.conv_width;
  } else {
    // in_proj (z, x, B, C, dt), out_proj; conv1d over x, B, C.
    const double in = 2.0 * s.value_heads * s.head_v + 2.0 * s.key_heads * s.head_k + s.value_heads;
    w.linear_attn_layer = d * in + double(s.value_heads) * s.head_v * d + conv_dim * s.conv_width;
  }
  const double q_out = double(m.attn_q_heads) * m.attn_head_dim;
  w.attn_layer = d * q_out * (b.attn_output_gate ? 2 : 1) +
                 2.0 * d * m.attn_kv_heads * m.attn_head_dim + q_out * d;
  if (b.experts > 0) {
    const double width = b.expert_input > 0 ? b.expert_input : d;
    w.expert = mats * width * b.expert_ffn;
    w.dense_mlp_layer = mats * d * b.shared_ffn + d * b.experts +
                        (b.expert_input > 0 ? 2.0 * d * b.expert_input : 0.0);
  } else {
    w.dense_mlp_layer = mats * d * b.dense_ffn;
  }
  w.lm_head = double(b.vocab) * d;
  w.embedding = b.tied_embeddings ? 0 : w.lm_head;
  w.experts = b.experts;
  w.top_k = b.top_k;
  w.mlp_layers = b.mlp_layers;
  w.linear_layers = m.linear_layers;
  w.attn_layers = m.attn_layers;
  return w;
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
