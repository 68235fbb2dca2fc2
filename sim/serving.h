// Step-level continuous-batching simulator. Requests arrive (Poisson or a trace), wait in FIFO
// order, and are admitted while the GPU memory left after the weights holds them: each admitted
// request reserves its linear-attention pools (the method's, sim/capacity.h) and the full-attention
// KV of its whole context (prompt + output), so no request is ever preempted. Newly admitted
// prompts are prefilled first (the modelled prefill cost, decode paused: TTFT ends there, the first
// token comes from the prefill); then one decode step of every running request, timed by the step
// model; with speculative decoding a request emits m tokens per step, m = 1 + the leading drafts
// accepted, each draft accepted with probability a. Deterministic given the seed.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sim/step_model.h"

namespace kvbuf {

struct ServingRequest {
  double arrival_s = 0;
  long prompt_tokens = 0;
  long output_tokens = 0;
};

// A CSV trace with the header arrival_s,prompt_tokens,output_tokens (any column order) and one
// request per row: arrival >= 0 (any order; sorted by arrival), prompt >= 1, output >= 1. Throws
// std::invalid_argument naming the file and line of the first malformed row, or an empty trace.
std::vector<ServingRequest> read_trace(const std::string& path);

// Poisson arrivals at `rate` per second over [0, duration_s); prompt and output lengths uniform in
// [mean / 2, 3 mean / 2] (at least 1). Throws on rate <= 0, duration <= 0 or means < 1.
std::vector<ServingRequest> poisson_requests(double rate, double duration_s, long prompt_mean,
                                             long output_mean, uint64_t seed);

struct ServingConfig {
  double memory_fraction = 0.9;  // of GPU memory usable by weights and pools (vLLM's default)
  int max_batch = 0;             // running requests at most; 0: memory alone decides
  uint64_t seed = 1;             // acceptance draws
  double timeline_every_s = 0;   // one timeline row per this much simulated time; 0: every step
};

struct TimelineRow {
  double time_s = 0;      // simulated time at the end of the step
  double step_us = 0;     // decode step
  double prefill_us = 0;  // prefill charged before it
  int running = 0, waiting = 0;
  long tokens = 0;            // emitted in this step (prefill first tokens included)
  double memory_bytes = 0;    // weights + reserved pools and KV
};

struct Percentiles {
  double p50 = 0, p90 = 0, p99 = 0, mean = 0;
};

struct ServingResult {
  long requests = 0;
  long output_tokens = 0;
  double makespan_s = 0;       // first arrival to last completion
  double throughput_tok_s = 0;
  Percentiles ttft_s, tpot_s, queue_s;  // queue: arrival to admission
  int max_running = 0;
  double mean_running = 0;     // time-weighted over the decode steps
  double peak_memory_bytes = 0;
  double memory_limit_bytes = 0;
  double weight_bytes = 0;
  long steps = 0;
  StepTerms mean_step;         // decode-step terms averaged over steps
  LinearSource linear_source = LinearSource::Measured;  // the worst seen
  std::vector<TimelineRow> timeline;
};

// Throws std::invalid_argument when the weights do not fit, or a request alone does not fit in an
// empty GPU (naming it). `progress` (may be empty) is called about once a second of wall time with
// the requests finished so far.
ServingResult simulate_serving(const StepModel& model, const ServingConfig& config,
                               std::vector<ServingRequest> requests,
                               const std::function<void(long done, long total, double sim_s)>& progress = {});

}  // namespace kvbuf
