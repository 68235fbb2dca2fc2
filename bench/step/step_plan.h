// What one tensor-parallel rank's decode step of a catalog model runs and holds, in plain C++ (CPU
// builds and tests too): the order of its blocks, every weight tensor's shape, the server's memory
// (weights, paged full-attention KV, linear-attention pools, activations) and whether it fits.
// The GPU runner (bench/step/step_runner.cu) allocates exactly what this plan lists, so the
// accounting and the allocation agree by construction.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "bench/step/step_routing.h"
#include "sim/catalog.h"
#include "sim/layout.h"
#include "sim/step_model.h"

namespace kvbuf::step {

// Tokens of one KV-cache page (FlashInfer's paged layout [pages, kv heads, page, head dim]).
constexpr int kPageTokens = 16;
// Rotary dimensions of a full-attention head: Qwen3-Next / Qwen3.5 rotate a quarter of the head
// (partial_rotary_factor 0.25), Nemotron-H's attention layers the whole head.
int rotary_dim(const ModelSpec& model);

enum class Mixer { None, Linear, Attention };
enum class Ffn { None, Dense, MoE };
// One decoder block: a mixer, an MLP / MoE, or both (Qwen: every layer has both; Nemotron-H:
// each layer is one of Mamba-2, attention or MoE).
struct Block {
  Mixer mixer = Mixer::None;
  Ffn ffn = Ffn::None;
};
// The blocks in model order. Qwen3-Next / Qwen3.5: every (total / attention)-th layer is full
// attention (full_attention_interval 4). Nemotron-H: mixer and MoE layers alternate with the
// attention layers spread evenly among the mixers.
std::vector<Block> model_blocks(const ModelSpec& model);

// One weight tensor of a block, [rows, cols] bf16 (or fp32 for the small per-head vectors).
struct WeightTensor {
  std::string name;
  size_t rows = 1, cols = 1;
  int elem_bytes = 2;
  size_t bytes() const { return rows * cols * size_t(elem_bytes); }
};

// The per-rank sizes of a model at tensor-parallel degree tp: heads divided as the engines do
// (sim/catalog.h apply_tensor_parallel), MLP and expert intermediates and the LM head's
// vocabulary split across ranks, hidden size replicated.
struct RankShapes {
  ModelSpec model;  // after tensor parallelism
  int tp = 1;
  int hidden = 0, vocab = 0;  // vocab: this rank's LM-head rows
  int dense_ffn = 0, expert_ffn = 0, shared_ffn = 0, experts = 0, top_k = 0;
  bool gated_mlp = true;
  // GDN in-projection columns [q | k | v | z | b | a]; Mamba-2 [z | x | B | C | dt].
  size_t linear_in_width() const;
  size_t linear_conv_dim() const;   // the causal conv's channels (q, k, v / x, B, C)
  size_t linear_out_rows() const;   // HV x V / NH x P
  // Full attention: [q | gate (Qwen) | k | v] columns.
  size_t attn_q_width() const { return size_t(model.attn_q_heads) * model.attn_head_dim; }
  size_t attn_kv_width() const { return size_t(model.attn_kv_heads) * model.attn_head_dim; }
  bool attn_gate() const { return model.blocks.attn_output_gate; }
  size_t attn_in_width() const { return attn_q_width() * (attn_gate() ? 2 : 1) + 2 * attn_kv_width(); }
};
// Throws std::invalid_argument for a tp that does not divide the heads or intermediates.
RankShapes rank_shapes(const ModelSpec& catalog_model, int tp);

// The gated RMSNorm before a linear layer's out_proj: its weight's length (GDN: one head's V,
// shared by the heads; Mamba-2: every channel) and the channels normalised together (GDN: a head;
// Mamba-2: a group's heads, Nemotron-H's norm group size).
size_t linear_out_norm_width(const RankShapes& r);
size_t linear_out_norm_group(const RankShapes& r);

// The weights of one block's mixer and FFN (empty for None), and of the model's ends
// (embedding, final norm, LM head).
std::vector<WeightTensor> mixer_weights(const RankShapes& r, Mixer m);
std::vector<WeightTensor> ffn_weights(const RankShapes& r, Ffn f);
std::vector<WeightTensor> head_weights(const RankShapes& r);

// One measured point.
struct StepPoint {
  int batch = 1;
  long context = 256;  // tokens in every request's KV cache, the new one included
  DecodeMethod method = DecodeMethod::Classic;
  int chunk = 16;  // C (KVBuffer)
  StateType state = StateType::FP32;
  // Speculative decoding: T tokens verified per request and step (the last accepted token and
  // T - 1 drafts), m of them accepted (1 + the leading accepted drafts, each accepted with
  // probability `acceptance`); 0 = plain decode.
  int drafts = 0;
  double acceptance = 0.7;
  int tokens() const { return drafts > 0 ? drafts : 1; }
  Routing routing = Routing::Uniform;  // MoE layers
  // MoE experts' GEMMs: one cublasGemmGroupedBatchedEx per projection (each active expert a group),
  // or a loop of cublasGemmEx, one per active expert.
  bool grouped_expert_gemm = true;
};

// The linear-attention pools of one layer at a point. Decode: decode_pools (state; buffer and
// metadata for KVBuffer) and one conv window. Verify of T tokens: classic in place keeps 1 + T
// states (one "state" tensor of 1 + T states per request, addressed by slot r (1 + T) + j, as
// serving engines do) and 1 + T conv windows; KVBuffer speculative_pools (state, one conv window,
// buffer, metadata, the T-entry verify scratch).
std::vector<PoolTensor> linear_pool_tensors(const RankShapes& r, const StepPoint& p);
PoolLayout linear_pool_layout(const RankShapes& r, const StepPoint& p);

// Device bytes a server holds for a point, per category.
struct MemoryPlan {
  double weights = 0;       // every block's weights and the model's ends, this rank
  double kv_cache = 0;      // full-attention pages, batch x ceil(context / page) pages per layer
  double linear_pools = 0;  // PoolPlan of the linear layers (aligned as allocated)
  double activations = 0;   // the step's activation and workspace buffers
  double total() const { return weights + kv_cache + linear_pools + activations; }
};
MemoryPlan memory_plan(const RankShapes& r, const StepPoint& p);
// FlashInfer's workspaces (split-KV partials and index tables) budgeted for the full attention: the
// decode kernel's fixed 128 + 8 MiB fit; the multi-query kernel's partials follow its scheduler
// (the GPU's SM count, the query tiles), and the runner adds what would exceed this budget.
constexpr double kAttentionWorkspaceBytes = 256.0 * (1 << 20);
// Bytes kept free beyond the plan (cuBLAS and CUDA-graph internals, fragmentation).
constexpr double kMemoryHeadroomBytes = 1.5 * (1 << 30);
// Empty when the point fits in free_bytes, else why not (the sizes in GiB).
std::string memory_refusal(const MemoryPlan& m, double free_bytes);

}  // namespace kvbuf::step
