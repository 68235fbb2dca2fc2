// Float64 reference of whole decoder blocks at decode (one token per request), the ground truth of
// the step runner's layers (bench/step/step_runner.h): a Gated DeltaNet mixer (RMSNorm,
// in-projection, short causal conv + SiLU, gates, the recurrent step of gdn.h, gated RMSNorm,
// out-projection), a full-attention mixer (RMSNorm, qkv projection, per-head q/k RMSNorm, NeoX
// rotary embedding of the first rot_dim dims, softmax attention over the cached tokens and the new
// one, sigmoid output gate, o-projection) and a dense MLP (RMSNorm, SwiGLU or squared ReLU). Each
// adds its output to `hidden` (the residual stream) in place. Matrices are row-major, a linear
// layer's weight [out, in] as engines store it. Sizes are checked (std::invalid_argument).
#pragma once
#include <vector>

#include "reference/gdn.h"
#include "reference/mamba2.h"

namespace kvbuf::ref {

using DVec = std::vector<double>;

// out[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w.
DVec rms_norm_rows(const DVec& x, int rows, const DVec& w, double eps);
// y[rows, out] = x[rows, in] W^T, W [out, in].
DVec linear_rows(const DVec& x, int rows, const DVec& W, int out);

struct GdnMixerWeights {
  DVec norm;      // [d]
  DVec in_proj;   // [2HK + 2HV V + 2HV, d]: q, k, v, z, b, a
  DVec conv;      // [2HK + HV V, 4]
  DVec A_log, dt_bias;  // [HV]
  DVec out_norm;  // [V]
  DVec out_proj;  // [d, HV V]
};
// windows [rows, conv_dim, 3] (oldest first) and states (one per row, K x V per value head) are
// updated in place.
void gdn_mixer_decode(const GdnDims& dims, int d, const GdnMixerWeights& w, double eps, DVec& hidden, int rows,
                      DVec& windows, std::vector<GdnState<double>>& states);

struct Mamba2MixerWeights {
  DVec norm;      // [d]
  DVec in_proj;   // [2 NH P + 2 G N + NH, d]: z, x, B, C, dt
  DVec conv;      // [NH P + 2 G N, 4] over x, B, C
  DVec dt_bias, A, D;  // [NH]
  DVec out_norm;  // [NH P]
  DVec out_proj;  // [d, NH P]
};
// Nemotron-H's Mamba-2 mixer: conv + SiLU over x, B, C; dt = softplus(dt + dt_bias); the
// recurrent step of mamba2.h (y = S C + D x); y *= silu(z); RMSNorm over groups of `norm_group`
// channels; out-projection. windows [rows, conv_dim, 3] and states (P x N per head) in place.
void mamba2_mixer_decode(const Mamba2Dims& dims, int d, int norm_group, const Mamba2MixerWeights& w, double eps,
                         DVec& hidden, int rows, DVec& windows, std::vector<Mamba2State<double>>& states);

struct AttentionDims {
  int q_heads = 0, kv_heads = 0, head_dim = 0, rot_dim = 0;
  double theta = 1e7;
  bool output_gate = true;
};
struct AttentionMixerWeights {
  DVec norm;      // [d]
  DVec qkv_proj;  // [q (+ gate) + 2 kv, d]
  DVec q_norm, k_norm;  // [head_dim]
  DVec o_proj;    // [d, q_heads head_dim]
};
// keys, values: per row the cached tokens [pos][kv_heads][head_dim] before this one; the new
// token (position pos) is appended to both.
void attention_mixer_decode(const AttentionDims& a, int d, const AttentionMixerWeights& w, double eps, DVec& hidden,
                            int rows, int pos, std::vector<DVec>& keys, std::vector<DVec>& values);

struct MlpWeights {
  DVec norm;  // [d]
  DVec up;    // gated: [2 F, d] (gate rows first, then up); else [F, d]
  DVec down;  // [d, F]
};
void mlp_decode(int d, int ffn, bool gated, const MlpWeights& w, double eps, DVec& hidden, int rows);

// A routed MoE block with an optional shared expert: RMSNorm, router logits [rows, experts], each
// row's experts `ids` [rows, k] (given: the choice at near-ties belongs to the routing test, not to
// the arithmetic), weights softmax over the k chosen logits, each expert an MLP of its own (up
// [experts][2 I or I, d], down [experts][d, I]), the shared expert an MLP of width shared_ffn
// (0: none).
struct MoeWeights {
  DVec norm, router;          // [d], [experts, d]
  DVec experts_up, experts_down;
  DVec shared_up, shared_down;
};
void moe_decode(int d, int experts, int k, int expert_ffn, int shared_ffn, bool gated, const MoeWeights& w,
                const std::vector<int>& ids, double eps, DVec& hidden, int rows);

}  // namespace kvbuf::ref
