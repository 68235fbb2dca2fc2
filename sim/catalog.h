// Model catalog: the linear-attention layer shapes of the models kvbuf knows by name.
// Interface owned by sim/; implemented in catalog.cpp.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "sim/state_type.h"

namespace kvbuf {

enum class LayerKind { GatedDeltaNet, Mamba2 };

// One linear-attention layer, as seen by one GPU (after tensor parallelism divides the heads).
// GDN:     key_heads = H, value_heads = HV, head_k = K, head_v = V; state per value head K x V.
// Mamba-2: key_heads = G (groups of B/C), value_heads = NH (heads), head_k = N (d_state),
//          head_v = P (head_dim); state per head P x N.
struct LayerShape {
  LayerKind kind = LayerKind::GatedDeltaNet;
  int key_heads = 16;
  int value_heads = 32;
  int head_k = 128;
  int head_v = 128;
  int conv_width = 4;
};

// The rest of a model around its linear-attention layers, before tensor parallelism: what a
// whole-model step reads and computes (sim/step_model.h). Sources per model in catalog.cpp.
struct BlockShapes {
  int hidden = 0;              // d_model
  int vocab = 0;               // embedding rows; the LM head reads vocab x hidden per step
  bool tied_embeddings = false;
  bool attn_output_gate = false;  // Qwen3-Next/3.5: q_proj also produces a sigmoid gate per head
  int mlp_layers = 0;          // layers with an MLP or MoE block
  bool gated_mlp = true;       // SwiGLU (gate, up, down); false: squared ReLU (up, down), Nemotron-H
  int dense_ffn = 0;           // dense MLP intermediate size (0 in MoE models)
  int experts = 0;             // routed experts per MoE layer (0: dense)
  int top_k = 0;               // routed experts per token
  int expert_ffn = 0;          // intermediate size of one routed expert
  int shared_ffn = 0;          // intermediate size of the shared expert(s), summed (0: none)
  int expert_input = 0;        // LatentMoE: experts work in a latent of this width (0: hidden)
};

// Parameter counts of one model (before tensor parallelism), from BlockShapes and the layers.
struct WeightCounts {
  double linear_attn_layer = 0;  // in/out projections, conv, gates of one linear-attention layer
  double attn_layer = 0;         // q (+ gate), k, v, o of one full-attention layer
  double dense_mlp_layer = 0;    // dense MLP, or the shared expert(s) + router (+ latent projections) of an MoE layer
  double expert = 0;             // one routed expert
  double lm_head = 0;            // vocab x hidden
  double embedding = 0;          // 0 when tied to the LM head
  double total() const;
  double active_per_token() const;  // what one token's forward pass multiplies with
  int experts = 0, top_k = 0, mlp_layers = 0, linear_layers = 0, attn_layers = 0;
};

struct ModelSpec {
  std::string name;
  LayerKind kind = LayerKind::GatedDeltaNet;
  int linear_layers = 0;  // layers with a recurrent state
  int total_layers = 0;   // linear + full attention (+ stateless MLP/MoE layers in Nemotron-H)
  int attn_layers = 0;    // full-attention layers (explicit: Nemotron-H also has MLP-only layers)
  LayerShape layer;       // before tensor parallelism
  int attn_q_heads = 0;   // full-attention layers
  int attn_kv_heads = 0;
  int attn_head_dim = 0;
  double params_billion = 0;  // total parameters, for weight memory (bf16 by default)
  int tp = 1;                 // tensor-parallel degree already applied to the heads
  BlockShapes blocks;         // never divided by tp (step_model divides the weights)
  // The state dtype serving engines keep for this model by default: vLLM's mamba-ssm cache dtype
  // defaults to the model dtype (bf16) for Qwen3-Next; Qwen3.5's configs ask for an fp32 state
  // (mamba_ssm_dtype: float32); vLLM forces fp32 for Nemotron-H, the only dtype "known to have no
  // accuracy issues".
  StateType engine_state = StateType::FP32;
  int full_attn_layers() const { return attn_layers; }
  // bf16 K and V of every full-attention layer for one token of context, on one GPU.
  double attn_kv_bytes_per_token() const {
    return 2.0 * attn_layers * attn_kv_heads * attn_head_dim * 2.0;
  }
};

const std::vector<ModelSpec>& model_catalog();

// Parameter counts from the shapes (bf16 weights: 2 bytes each); requires blocks.hidden > 0.
// The linear-attention and attention shapes are taken before tensor parallelism: pass the
// model as the catalog has it.
WeightCounts weight_counts(const ModelSpec& model);

// Throws std::invalid_argument("unknown model ...") listing the known names.
const ModelSpec& find_model(const std::string& name);

// Divides key/value heads (and attention heads) by tp; throws std::invalid_argument when a head
// count is not divisible by tp or tp < 1. Attention KV heads fewer than tp are replicated, as
// serving engines do (tp a multiple of kv heads leaves one KV head per GPU).
ModelSpec apply_tensor_parallel(const ModelSpec& model, int tp);

// Throws std::invalid_argument unless every size is positive, value heads are a multiple of key
// heads (GDN: GQA; Mamba-2: heads per group), attention sizes are non-negative and consistent.
void validate_model(const ModelSpec& model);

const char* layer_kind_name(LayerKind kind);          // "gdn" or "mamba2"
LayerKind parse_layer_kind(const std::string& name);  // throws on anything but gdn / mamba2

}  // namespace kvbuf
