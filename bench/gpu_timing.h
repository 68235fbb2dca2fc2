// The GPU timing library behind every measurement of kvbuf (decode and verify sweeps, capacity
// measurement): device fills, pools placed by sim/layout.h's PoolPlan, CUDA-graph capture and
// replay timed with events, telemetry, the copy-bandwidth ceiling and the device's name.
//
// Method (results/README.md): one state pool and one buffer pool per linear layer (36 for
// Qwen3-Next), so the states are not served from the 60 MB L2; all layers of one model step captured
// in one CUDA graph; samples of whole flush cycles (buffered kernels amortized over C steps with
// staggered fills), median / min / max over samples; latency per layer = sample time / (steps *
// layers). The device copy bandwidth (bytes read + bytes written by cudaMemcpyAsync D2D) is measured
// in the same run.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "bench/gpu_telemetry.h"
#include "kernels/common/device_buffer.h"
#include "sim/layout.h"

namespace kvbuf {

// Device fills with a counter-based hash (fresh values per seed, never zeros):
// uniform in [lo, hi) as fp32 or bf16.
void fill_uniform_f32(float* dst, size_t n, uint64_t seed, float lo, float hi, cudaStream_t s = 0);
void fill_uniform_bf16(void* dst, size_t n, uint64_t seed, float lo, float hi, cudaStream_t s = 0);
// A state pool's elements in its StateType (fp32, bf16 or fp16).
void fill_uniform_state(void* dst, size_t n, StateType t, uint64_t seed, float lo, float hi, cudaStream_t s = 0);
// fp32 or bf16 by element size (2 or 4 bytes).
void fill_uniform(void* dst, size_t n, int elem_bytes, uint64_t seed, float lo, float hi, cudaStream_t s = 0);

// The pools of a PoolPlan in one device allocation.
class DevicePools {
 public:
  explicit DevicePools(PoolPlan plan) : plan_(std::move(plan)), mem_(plan_.total_bytes()) {}
  const PoolPlan& plan() const { return plan_; }
  template <class T>
  T* at(int layer, const std::string& tensor) const {
    return reinterpret_cast<T*>(mem_.as<char>() + plan_.offset(layer, tensor));
  }
  size_t bytes() const { return mem_.bytes(); }

 private:
  PoolPlan plan_;
  DeviceBuffer mem_;
};

// Value ranges of a pool tensor's random contents (the sweeps and the step runner fill them
// alike): normalised keys are small, G <= 0, beta in (0, 1), the rest in [-1, 1).
std::pair<float, float> pool_value_range(const std::string& tensor);

struct TimingStats {
  double median_us = 0, min_us = 0, max_us = 0;  // per layer per step
  int samples = 0;
  TelemetryMean telemetry;  // SM clock and board power read after each timed sample
};

// Captures enqueue_step(stream) (all layers of one model step) into a CUDA graph and replays it.
// One sample = steps_per_sample replays timed by events around them; warm-up samples first. The
// number of samples is clamped to [min_samples, max_samples] so that sampling takes about
// budget_s. Returned times are per layer per step: sample_ms * 1000 / (steps_per_sample * layers).
struct GraphTiming {
  int layers = 1;
  int steps_per_sample = 1;
  int warmup_samples = 2;
  int min_samples = 5, max_samples = 50;
  double budget_s = 1.0;
};
TimingStats time_graph_steps(const std::function<void(cudaStream_t)>& enqueue_step, const GraphTiming& how);

// Device copy bandwidth in GB/s (1 GB = 1e9 B), counting bytes read + bytes written, from the median
// of repeated cudaMemcpyAsync device-to-device copies of `bytes` bytes (default 2 GiB, far above L2).
double measure_copy_gbps(size_t bytes = size_t(2) << 30);

// The device's name. The first call prints the GPU, its compute capability and the build's
// architectures to stderr and throws std::invalid_argument (kvbuf: exit 2) when the build has no
// code that runs on it; every GPU command calls it before its first kernel.
std::string gpu_name();
// Bytes of device memory free right now.
size_t gpu_free_bytes();
// Whether a CUDA device answers.
bool gpu_present();

}  // namespace kvbuf
