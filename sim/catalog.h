// Model catalog: the linear-attention layer shapes of the models kvbuf knows by name.
// Interface owned by sim/; implemented in catalog.cpp.
#pragma once
#include <optional>
#include <string>
#include <vector>

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

struct ModelSpec {
  std::string name;
  LayerKind kind = LayerKind::GatedDeltaNet;
  int linear_layers = 0;  // layers with a recurrent state
  int total_layers = 0;   // linear + full attention
  LayerShape layer;       // before tensor parallelism
  int attn_q_heads = 0;   // full-attention layers
  int attn_kv_heads = 0;
  int attn_head_dim = 0;
  double params_billion = 0;  // total parameters, for weight memory (bf16 by default)
  int full_attn_layers() const { return total_layers - linear_layers; }
};

const std::vector<ModelSpec>& model_catalog();

// Throws std::invalid_argument("unknown model ...") listing the known names.
const ModelSpec& find_model(const std::string& name);

// Divides key/value heads (and attention heads) by tp; throws std::invalid_argument when a head
// count is not divisible by tp or tp < 1.
ModelSpec apply_tensor_parallel(const ModelSpec& model, int tp);

}  // namespace kvbuf
