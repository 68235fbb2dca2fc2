// The GPU timing library of bench/gpu_timing.h.
#include "bench/gpu_timing.h"

#include <cuda_bf16.h>
#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "bench/cuda_archs.h"
#include "kernels/common/common.cuh"
#include "kernels/common/state_type.cuh"

namespace kvbuf {

namespace {
__device__ __forceinline__ float hash_uniform(uint64_t i, uint64_t seed) {
  uint64_t x = i * 0x9E3779B97F4A7C15ull + seed * 0xD1B54A32D192ED03ull + 0x632BE59BD9B4E019ull;
  x ^= x >> 31, x *= 0xBF58476D1CE4E5B9ull, x ^= x >> 29, x *= 0x94D049BB133111EBull, x ^= x >> 32;
  return float(x >> 40) * (1.0f / 16777216.0f);  // [0, 1)
}
template <class E>
__global__ void fill_kernel(E* dst, size_t n, uint64_t seed, float lo, float hi) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = from_f32<E>(lo + (hi - lo) * hash_uniform(i, seed));
}
unsigned grid_for(size_t n) { return unsigned(std::min<size_t>((n + 255) / 256, 132 * 32)); }
template <class E>
void fill(void* dst, size_t n, uint64_t seed, float lo, float hi, cudaStream_t s) {
  if (!n) return;
  fill_kernel<E><<<grid_for(n), 256, 0, s>>>(static_cast<E*>(dst), n, seed, lo, hi);
  KVB_CUDA_CHECK_LAUNCH();
}
}  // namespace

void fill_uniform_f32(float* dst, size_t n, uint64_t seed, float lo, float hi, cudaStream_t s) {
  fill<float>(dst, n, seed, lo, hi, s);
}
void fill_uniform_bf16(void* dst, size_t n, uint64_t seed, float lo, float hi, cudaStream_t s) {
  fill<__nv_bfloat16>(dst, n, seed, lo, hi, s);
}
void fill_uniform_state(void* dst, size_t n, StateType t, uint64_t seed, float lo, float hi, cudaStream_t s) {
  dispatch_state_type("fill_uniform_state", t, [&](auto tag) { fill<typename decltype(tag)::type>(dst, n, seed, lo, hi, s); });
}
void fill_uniform(void* dst, size_t n, int elem_bytes, uint64_t seed, float lo, float hi, cudaStream_t s) {
  if (elem_bytes == 4)
    fill_uniform_f32(static_cast<float*>(dst), n, seed, lo, hi, s);
  else if (elem_bytes == 2)
    fill_uniform_bf16(dst, n, seed, lo, hi, s);
  else
    throw std::invalid_argument("fill_uniform: no fill for " + std::to_string(elem_bytes) + "-byte elements");
}

std::pair<float, float> pool_value_range(const std::string& tensor) {
  if (tensor == "buf_k") return {-0.2f, 0.2f};
  if (tensor == "buf_gcum") return {-2.f, 0.f};
  if (tensor == "buf_beta") return {0.1f, 0.9f};
  return {-1.f, 1.f};
}

namespace {
double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}
struct Stream {
  cudaStream_t s = nullptr;
  Stream() { KVB_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(s); }
};
struct Events {
  cudaEvent_t a = nullptr, b = nullptr;
  Events() {
    KVB_CUDA_CHECK(cudaEventCreate(&a));
    KVB_CUDA_CHECK(cudaEventCreate(&b));
  }
  ~Events() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  float ms() const {
    float t = 0;
    KVB_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    return t;
  }
};
}  // namespace

TimingStats time_graph_steps(const std::function<void(cudaStream_t)>& enqueue_step, const GraphTiming& how) {
  if (how.layers < 1 || how.steps_per_sample < 1 || how.min_samples < 1 || how.max_samples < how.min_samples)
    throw std::invalid_argument("time_graph_steps: bad GraphTiming");
  Stream st;
  // One eager step first: sets kernel attributes outside capture and surfaces launch errors.
  enqueue_step(st.s);
  KVB_CUDA_CHECK(cudaStreamSynchronize(st.s));
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  KVB_CUDA_CHECK(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeThreadLocal));
  try {
    enqueue_step(st.s);
  } catch (...) {
    cudaStreamEndCapture(st.s, &graph);
    if (graph) cudaGraphDestroy(graph);
    throw;
  }
  KVB_CUDA_CHECK(cudaStreamEndCapture(st.s, &graph));
  KVB_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  Events ev;
  auto sample_ms = [&] {
    KVB_CUDA_CHECK(cudaEventRecord(ev.a, st.s));
    for (int i = 0; i < how.steps_per_sample; ++i) KVB_CUDA_CHECK(cudaGraphLaunch(exec, st.s));
    KVB_CUDA_CHECK(cudaEventRecord(ev.b, st.s));
    KVB_CUDA_CHECK(cudaEventSynchronize(ev.b));
    return double(ev.ms());
  };
  for (int i = 0; i < how.warmup_samples; ++i) sample_ms();
  std::vector<double> per_layer_us;
  const double first = sample_ms();
  const int want = int(std::clamp(how.budget_s * 1e3 / std::max(first, 1e-3), double(how.min_samples),
                                  double(how.max_samples)));
  const double scale = 1e3 / (double(how.steps_per_sample) * how.layers);
  TimingStats t;
  per_layer_us.push_back(first * scale);
  t.telemetry.add(read_gpu_telemetry());
  while (int(per_layer_us.size()) < want) {
    per_layer_us.push_back(sample_ms() * scale);
    t.telemetry.add(read_gpu_telemetry());
  }
  KVB_CUDA_CHECK(cudaGraphExecDestroy(exec));
  KVB_CUDA_CHECK(cudaGraphDestroy(graph));
  t.median_us = median_of(per_layer_us);
  t.min_us = *std::min_element(per_layer_us.begin(), per_layer_us.end());
  t.max_us = *std::max_element(per_layer_us.begin(), per_layer_us.end());
  t.samples = int(per_layer_us.size());
  return t;
}

double measure_copy_gbps(size_t bytes) {
  DeviceBuffer src(bytes), dst(bytes);
  fill_uniform_f32(src.as<float>(), bytes / 4, 7, -1.f, 1.f);
  Stream st;
  Events ev;
  std::vector<double> gbps;
  for (int i = 0; i < 13; ++i) {
    KVB_CUDA_CHECK(cudaEventRecord(ev.a, st.s));
    KVB_CUDA_CHECK(cudaMemcpyAsync(dst.as<void>(), src.as<void>(), bytes, cudaMemcpyDeviceToDevice, st.s));
    KVB_CUDA_CHECK(cudaEventRecord(ev.b, st.s));
    KVB_CUDA_CHECK(cudaEventSynchronize(ev.b));
    if (i >= 3) gbps.push_back(2.0 * double(bytes) / (ev.ms() * 1e-3) / 1e9);
  }
  return median_of(gbps);
}

namespace {
// Compiled for the build's architectures like the kernels: whether the device has an image of it.
__global__ void kernel_image_probe() {}
}  // namespace

std::string gpu_name() {
  static const std::string name = [] {
    int dev = 0;
    KVB_CUDA_CHECK(cudaGetDevice(&dev));
    cudaDeviceProp prop{};
    KVB_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    fmt::print(stderr, "kvbuf: GPU {} (compute capability {}.{}); built for CUDA architectures {}\n", prop.name,
               prop.major, prop.minor, KVBUF_CUDA_ARCHITECTURES);
    cudaFuncAttributes attrs{};
    const cudaError_t probe = cudaFuncGetAttributes(&attrs, kernel_image_probe);
    if (!archs_run_on(KVBUF_CUDA_ARCHITECTURES, prop.major, prop.minor) || probe != cudaSuccess) {
      (void)cudaGetLastError();
      throw std::invalid_argument(fmt::format(
          "this kvbuf was built for CUDA architectures {}, which do not run on {} (compute capability {}.{}): "
          "rebuild with KVBUF_CUDA_ARCHITECTURES=native (or add {}-real to it)",
          KVBUF_CUDA_ARCHITECTURES, prop.name, prop.major, prop.minor, 10 * prop.major + prop.minor));
    }
    return std::string(prop.name);
  }();
  return name;
}

size_t gpu_free_bytes() {
  size_t free_b = 0, total = 0;
  KVB_CUDA_CHECK(cudaMemGetInfo(&free_b, &total));
  return free_b;
}


bool gpu_present() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
}

}  // namespace kvbuf
