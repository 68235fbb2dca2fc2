// `kvbuf sweep` (GPU only) and the timing helpers every GPU sweep shares (decode rows in sweep.cu,
// verify rows in sweep_verify.cu, capacity in capacity_measure.cu).
//
// Method (issue 3): one state pool and one buffer pool per linear layer (36 for Qwen3-Next), so the
// states are not served from the 60 MB L2; all layers of one model step captured in one CUDA graph;
// samples of whole flush cycles (buffered kernels amortized over C steps with staggered fills),
// median / min / max over samples; latency per layer = sample time / (steps * layers). The device
// copy bandwidth (bytes read + bytes written by cudaMemcpyAsync D2D) is measured in the same run.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench/gpu_telemetry.h"
#include "sim/catalog.h"

namespace kvbuf {

// Owning device allocation (cudaMalloc / cudaFree); movable, not copyable.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Device fills with a counter-based hash (fresh values per seed, never zeros):
// uniform in [lo, hi) as fp32 or bf16.
void fill_uniform_f32(float* dst, size_t n, uint64_t seed, float lo, float hi, cudaStream_t s = 0);
void fill_uniform_bf16(void* dst, size_t n, uint64_t seed, float lo, float hi, cudaStream_t s = 0);

struct TimingStats {
  double median_us = 0, min_us = 0, max_us = 0;  // per layer per step
  int samples = 0;
  TelemetryMean telemetry;  // SM clock and board power read after each timed sample
};

// Captures enqueue_step(stream) (all layers of one model step) into a CUDA graph and replays it.
// One sample = steps_per_sample replays timed by events around them; warm-up samples first. The
// number of samples is clamped to [min_samples, max_samples] so that sampling takes about
// budget_s. Returned times are per layer per step: sample_ms * 1000 / (steps_per_sample * layers).
// `between_samples` (optional, not timed) runs on the stream before each sample.
struct GraphTiming {
  int layers = 1;
  int steps_per_sample = 1;
  int warmup_samples = 2;
  int min_samples = 5, max_samples = 50;
  double budget_s = 1.0;
};
TimingStats time_graph_steps(const std::function<void(cudaStream_t)>& enqueue_step,
                             const GraphTiming& how);

// Device copy bandwidth in GB/s (1 GB = 1e9 B), counting bytes read + bytes written, from the median
// of repeated cudaMemcpyAsync device-to-device copies of `bytes` bytes (default 2 GiB, far above L2).
double measure_copy_gbps(size_t bytes = size_t(2) << 30);

std::string gpu_name();
// Bytes of device memory free right now.
size_t gpu_free_bytes();

// What the decode sweep hands to the verify sweep (implemented by verify-gpu in
// bench/sweep_verify.cu). Rows go to their own CSV (results/verify*), written row by row.
struct VerifySweepArgs {
  ModelSpec model;           // after tensor parallelism
  int layers = 0;            // layer pools per step (the model's linear layers by default)
  std::vector<int> batches;  // e.g. 1,8,32,64,128,256
  std::vector<int> drafts;   // T, e.g. 1,2,3,4,5,8
  std::vector<int> chunks;   // C for the KVBuffer verify
  std::vector<std::string> methods;  // "verify-classic", "verify-kvbuffer", "verify-tree", ...
  double acceptance = 0.7;   // acceptance rate for per-accepted-token latency
  std::string out_csv;
  double copy_gbps = 0;      // measured in the same run
  std::string gpu;           // gpu_name()
  std::string commit;        // commit_id()
  uint64_t seed = 1;
};
// Returns the number of failed points (0 = all rows written).
int run_verify_sweep(const VerifySweepArgs& args);

}  // namespace kvbuf
