// Serving-capacity model: how many requests fit in GPU memory at once, classic speculative decoding
// (1 + T states and 1 + T conv windows per request per linear layer) against KVBuffer (1 state,
// 1 conv window and C >= T buffer entries per request per linear layer).
#pragma once
#include <string>

#include "sim/bytes_model.h"
#include "sim/catalog.h"

namespace kvbuf {

// How the scheduler holds the full-attention layers' KV cache per request.
//   reserve: the KV of the whole context is reserved for every request on admission (no
//            preemption ever needed): L tokens per request.
//   mean:    pages allocated on demand, requests spread evenly over their lifetime: L / 2 tokens
//            per request on average (an optimistic steady state, not a guarantee).
enum class SchedulerPolicy { Reserve, Mean };
const char* scheduler_name(SchedulerPolicy p);             // "reserve" / "mean"
SchedulerPolicy parse_scheduler(const std::string& name);  // throws std::invalid_argument

struct CapacityInputs {
  ModelSpec model;  // after tensor parallelism (per-GPU heads)
  double gpu_memory_bytes = 0;
  double weight_bytes = 0;  // on this GPU; default_weight_bytes() gives params x 2 / tp
  long context = 0;         // L tokens per request (full-attention KV)
  int drafts = 4;           // T tokens verified per step
  int chunk = 16;           // C, buffer capacity (C >= T)
  BufferVariant variant = BufferVariant::CachedU;
  Precision precision;
  SchedulerPolicy scheduler = SchedulerPolicy::Reserve;
  // Also count the T candidate entries per request and layer that our verify kernels write to a
  // scratch area (kernels/gdn/gdn_verify.h), as bench/capacity_measure.cu allocates them.
  bool count_verify_scratch = false;
};

struct MethodCapacity {
  double linear_bytes_per_request = 0;  // all linear layers: states, conv windows, buffer entries
  double attn_bytes_per_request = 0;    // full-attention KV under the scheduler policy
  long max_requests_linear_pool = 0;    // (memory - weights) / linear bytes
  long max_requests_whole_model = 0;    // (memory - weights) / (linear + attention bytes)
};

struct CapacityResult {
  double pool_bytes = 0;  // memory left for per-request state: GPU memory - weights (>= 0)
  MethodCapacity classic, kvbuffer;
  double ratio_linear_pool = 0;  // kvbuffer / classic per-request linear bytes (exact, unrounded)
  double ratio_whole_model = 0;  // same including the attention KV
};

// Linear-attention memory of one request over all linear layers of `model` (after tensor
// parallelism): classic keeps (1 + T) states and conv windows (T = 0: plain decode), KVBuffer one
// state, one conv window and C entries (+ T verify-scratch entries when counted).
double linear_bytes_per_request(const ModelSpec& model, const Precision& p, BufferVariant v,
                                bool kvbuffer, int drafts, int chunk, bool count_verify_scratch);

// params_billion x 1e9 x bytes_per_param / tp (the model before tensor parallelism, and tp).
double default_weight_bytes(const ModelSpec& model, int tp, double bytes_per_param = 2);

// Throws std::invalid_argument on non-positive memory, context, drafts or chunk, T > C, or
// negative weights.
CapacityResult capacity_model(const CapacityInputs& in);

}  // namespace kvbuf
