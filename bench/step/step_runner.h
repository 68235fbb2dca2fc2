// One tensor-parallel rank's whole decode step of a catalog model on the GPU, with random weights
// of the real shapes (bench/step/step_plan.h): embedding, every block's RMSNorm, projections
// (cuBLAS bf16 GEMMs, fp32 accumulate, the residual added by the GEMM), the short causal conv and
// gates, the linear attention (our classic recurrent or KVBuffer decode kernels), full attention
// over a paged KV cache (FlashInfer), the MLP or the routed MoE block, the final norm and the LM
// head; with drafts, speculative verify of T tokens per request (and its commit); captured as one
// CUDA graph and timed with bench/gpu_timing.h over whole flush cycles (KVBuffer: staggered fills,
// the scheduler's metadata advanced in the graph, as the sweep does). bench/README.md says more.
// Per term, the same step's kernels of one kind are captured alone in their own graph and timed
// the same way: linear attention, full attention, GEMMs, elementwise.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench/gpu_timing.h"
#include "bench/step/step_plan.h"

namespace kvbuf::step {

// The kernels of a step by kind (a mask selects which run).
enum Term : unsigned { kLinear = 1, kAttention = 2, kGemm = 4, kElementwise = 8, kAllTerms = 15 };

struct MeasuredStep {
  TimingStats total, linear, attention, gemm, elementwise;  // us per step (not per layer)
  bool attention_split_kv = false;
};

class StepRunner {
 public:
  // Allocates and fills the weights; throws std::runtime_error when they do not fit.
  StepRunner(const RankShapes& shapes, uint64_t seed);
  ~StepRunner();
  StepRunner(const StepRunner&) = delete;
  StepRunner& operator=(const StepRunner&) = delete;
  const RankShapes& shapes() const;
  const std::vector<Block>& blocks() const;
  double weight_bytes() const;

  // Allocates and fills a point's KV cache, linear pools and activations (freeing the previous
  // point's). False, with the reason, when they do not fit in the free memory; nothing is left
  // allocated then.
  bool prepare(const StepPoint& p, std::string* why);
  // One decode step's kernels of the kinds in `terms`, on `stream` (capturable).
  void enqueue(cudaStream_t stream, unsigned terms);
  // Blocks [first, last) only, every kind, eagerly (not capturable: MoE layers record their
  // routing again, whatever their input), without the embedding, final norm and LM head: the layer
  // tests' entry point.
  void enqueue_blocks(cudaStream_t stream, int first, int last);
  // Each term alone and (whole_step) the whole step; total is empty without it.
  MeasuredStep measure(double budget_s, bool whole_step = true);
  // How the prepared point runs its experts' GEMMs: none (dense), grouped, or loop (asked for, or
  // with the reason the grouped call could not be captured).
  std::string expert_gemm() const;

  // Device tensors, for the layer tests.
  void* hidden() const;                                    // [batch, hidden] bf16, the residual stream
  // A step buffer by name: router_logits (bf16 [batch, experts]), topk_ids (int32 [batch, k]),
  // topk_w (fp32), offsets (int32 [experts + 1]), order, position (int32 [batch x k]).
  void* activation(const std::string& name) const;
  void* weight(int block, const std::string& name) const;  // of the block's mixer or FFN
  void* linear_pool(int block, const std::string& tensor) const;
  void* k_cache(int block) const;
  void* v_cache(int block) const;
  const std::vector<int32_t>& kv_indices() const;  // [batch x pages per row], host copy
  int pages_per_row() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvbuf::step
