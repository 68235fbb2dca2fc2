// `kvbuf sweep`: GPU timing of the GDN decode kernels (and, through run_verify_sweep, the verify
// kernels), plus the timing helpers of bench/sweep.h. Method in sweep.h and results/README.md.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/cmd_common.h"
#include "bench/csv.h"
#include "bench/gpu_commands.h"
#include "bench/sweep.h"
#include "kernels/common.cuh"
#include "kernels/gdn_decode.h"
#include "sim/bytes_model.h"

namespace kvbuf {

// ---------------------------------------------------------------- helpers of sweep.h

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes) KVB_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
}
DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
  o.ptr_ = nullptr, o.bytes_ = 0;
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = o.ptr_, bytes_ = o.bytes_;
    o.ptr_ = nullptr, o.bytes_ = 0;
  }
  return *this;
}

namespace {
__device__ __forceinline__ float hash_uniform(uint64_t i, uint64_t seed) {
  uint64_t x = i * 0x9E3779B97F4A7C15ull + seed * 0xD1B54A32D192ED03ull + 0x632BE59BD9B4E019ull;
  x ^= x >> 31, x *= 0xBF58476D1CE4E5B9ull, x ^= x >> 29, x *= 0x94D049BB133111EBull, x ^= x >> 32;
  return float(x >> 40) * (1.0f / 16777216.0f);  // [0, 1)
}
__global__ void fill_f32_kernel(float* dst, size_t n, uint64_t seed, float lo, float hi) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = lo + (hi - lo) * hash_uniform(i, seed);
}
__global__ void fill_bf16_kernel(__nv_bfloat16* dst, size_t n, uint64_t seed, float lo, float hi) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    dst[i] = __float2bfloat16_rn(lo + (hi - lo) * hash_uniform(i, seed));
}
__global__ void stagger_fill_kernel(int32_t* fill, int32_t* has_state, int32_t* done, size_t n, int slots,
                                    int capacity, int state) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    fill[i] = int(i % slots) % capacity;
    has_state[i] = state;
    done[i] = 0;
  }
}
// Scheduler metadata for one step, shared by every layer: fill + 1, or 0 after the fold at C-1
// (when the request gets its state, unless the sweep keeps it in direct mode).
__global__ void advance_row_meta_kernel(int32_t* fill, int32_t* has_state, int n, int capacity, int keep_direct) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int f = fill[i] + 1;
  fill[i] = f == capacity ? 0 : f;
  if (f == capacity && !keep_direct) has_state[i] = 1;
}
unsigned grid_for(size_t n) { return unsigned(std::min<size_t>((n + 255) / 256, 132 * 32)); }
}  // namespace

void fill_uniform_f32(float* dst, size_t n, uint64_t seed, float lo, float hi, cudaStream_t s) {
  if (!n) return;
  fill_f32_kernel<<<grid_for(n), 256, 0, s>>>(dst, n, seed, lo, hi);
  KVB_CUDA_CHECK_LAUNCH();
}
void fill_uniform_bf16(void* dst, size_t n, uint64_t seed, float lo, float hi, cudaStream_t s) {
  if (!n) return;
  fill_bf16_kernel<<<grid_for(n), 256, 0, s>>>(static_cast<__nv_bfloat16*>(dst), n, seed, lo, hi);
  KVB_CUDA_CHECK_LAUNCH();
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

std::string gpu_name() {
  int dev = 0;
  KVB_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  KVB_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  return prop.name;
}

size_t gpu_free_bytes() {
  size_t free_b = 0, total = 0;
  KVB_CUDA_CHECK(cudaMemGetInfo(&free_b, &total));
  return free_b;
}

// ---------------------------------------------------------------- the decode sweep

namespace {

struct DecodeKernel {
  std::string name;      // as on the command line
  bool buffered;         // has a chunk axis
  bool out_of_place;     // recurrent only
  bool direct;           // every request stateless
  GdnBufferVariant variant;
  GdnEntryType entry;
  bool pool_fill = false;  // fill/has_state advanced in kernel (else scheduler metadata per step)
  GdnDecodePath path = GdnDecodePath::Auto;  // the dispatch's choice, or one path forced
};

const std::vector<DecodeKernel>& decode_kernels() {
  static const std::vector<DecodeKernel> k = {
      {"recurrent", false, false, false, GdnBufferVariant::CachedU, GdnEntryType::BF16},
      {"recurrent-oop", false, true, false, GdnBufferVariant::CachedU, GdnEntryType::BF16},
      {"kvbuffer", true, false, false, GdnBufferVariant::CachedU, GdnEntryType::BF16},
      {"kvbuffer-fp32", true, false, false, GdnBufferVariant::CachedU, GdnEntryType::FP32},
      {"kvbuffer-raw", true, false, false, GdnBufferVariant::Raw, GdnEntryType::BF16},
      {"direct", true, false, true, GdnBufferVariant::CachedU, GdnEntryType::BF16},
      {"kvbuffer-poolfill", true, false, false, GdnBufferVariant::CachedU, GdnEntryType::BF16, true},
      {"kvbuffer-single", true, false, false, GdnBufferVariant::CachedU, GdnEntryType::BF16, false, GdnDecodePath::Single},
      {"kvbuffer-split", true, false, false, GdnBufferVariant::CachedU, GdnEntryType::BF16, false, GdnDecodePath::Split},
      {"direct-single", true, false, true, GdnBufferVariant::CachedU, GdnEntryType::BF16, false, GdnDecodePath::Single},
      {"direct-split", true, false, true, GdnBufferVariant::CachedU, GdnEntryType::BF16, false, GdnDecodePath::Split},
  };
  return k;
}

struct SweepArgs {
  std::vector<int> batches{1, 8, 32, 64, 128, 256, 512};
  std::vector<int> chunks{1, 2, 4, 8, 16, 32, 64};
  std::vector<std::string> kernels{"recurrent", "recurrent-oop", "kvbuffer", "kvbuffer-raw", "direct"};
  std::string out = "results/decode.csv";
  int layers = 0;
  int rows_per_block = 0;
  double budget_s = 0.5;
  double max_point_s = 20;
  uint64_t seed = 1;
  // verify rows (bench/sweep_verify.cu)
  std::vector<int> drafts{1, 2, 3, 4, 5, 8};
  double acceptance = 0.7;
  std::string verify_out = "results/verify.csv";
};

std::string fmt_g(double x) { return fmt::format("{:.6g}", x); }

// The token inputs of one step (shared by all layers: they are a few KiB and live in L2 anyway).
struct StepInputs {
  DeviceBuffer slot, q, k, v, g, beta, out;
  GdnStepIO io;
  StepInputs(const LayerShape& s, int batch, uint64_t seed)
      : slot(size_t(batch) * 4),
        q(size_t(batch) * s.key_heads * s.head_k * 2),
        k(q.bytes()),
        v(size_t(batch) * s.value_heads * s.head_v * 2),
        g(size_t(batch) * s.value_heads * 4),
        beta(g.bytes()),
        out(v.bytes()) {
    std::vector<int32_t> slots(batch);
    for (int i = 0; i < batch; ++i) slots[i] = i;
    KVB_CUDA_CHECK(cudaMemcpy(slot.as<void>(), slots.data(), slots.size() * 4, cudaMemcpyHostToDevice));
    fill_uniform_bf16(q.as<void>(), q.bytes() / 2, seed + 1, -1.f, 1.f);
    fill_uniform_bf16(k.as<void>(), k.bytes() / 2, seed + 2, -1.f, 1.f);
    fill_uniform_bf16(v.as<void>(), v.bytes() / 2, seed + 3, -1.f, 1.f);
    fill_uniform_f32(g.as<float>(), g.bytes() / 4, seed + 4, -0.5f, -0.01f);
    fill_uniform_f32(beta.as<float>(), beta.bytes() / 4, seed + 5, 0.1f, 0.9f);
    io.batch = batch, io.H = s.key_heads, io.HV = s.value_heads, io.K = s.head_k, io.V = s.head_v;
    io.slot = slot.as<int32_t>();
    io.q = q.as<__nv_bfloat16>(), io.k = k.as<__nv_bfloat16>(), io.v = v.as<__nv_bfloat16>();
    io.g = g.as<float>(), io.beta = beta.as<float>(), io.out = out.as<__nv_bfloat16>();
  }
};

struct Row {
  std::string kernel;
  int batch, chunk;
  double median_us;
};

class DecodeSweep {
 public:
  DecodeSweep(const ModelSpec& m, const SweepArgs& a) : model_(m), args_(a), shape_(m.layer) {
    layers_ = a.layers > 0 ? a.layers : m.linear_layers;
    if (shape_.kind != LayerKind::GatedDeltaNet)
      throw std::invalid_argument("kvbuf sweep: decode kernels exist for Gated DeltaNet models only; " + m.name +
                                  " is Mamba-2");
  }

  int run() {
    gpu_ = gpu_name();
    commit_ = commit_id();
    fmt::print("GPU {} | commit {} | model {} (H={} HV={} K={} V={}) | {} layer pools per step\n", gpu_, commit_,
               model_.name, shape_.key_heads, shape_.value_heads, shape_.head_k, shape_.head_v, layers_);
    copy_gbps_ = measure_copy_gbps();
    fmt::print("measured copy bandwidth (read + write, cudaMemcpyAsync D2D 2 GiB): {:.0f} GB/s\n", copy_gbps_);
    CsvWriter csv(args_.out, {"model", "kernel", "variant", "entry_dtype", "placement", "batch", "chunk", "layers",
                              "rows_per_block", "row_groups", "latency_us_median", "latency_us_min",
                              "latency_us_max", "samples", "bytes_per_layer_step", "gbps", "frac_copy_bw",
                              "copy_gbps", "sm_clock_mhz", "power_w", "gpu", "commit"});
    int failed = 0;
    for (int batch : args_.batches) {
      for (const std::string& name : args_.kernels) {
        const DecodeKernel* kd = find_kernel(name);
        if (!kd) continue;  // verify kernels, handled after
        try {
          run_kernel(*kd, batch, csv);
        } catch (const std::invalid_argument&) {
          throw;
        } catch (const std::exception& e) {
          ++failed;
          fmt::print("FAILED {} batch {}: {}\n", name, batch, e.what());
          cudaGetLastError();
        }
      }
    }
    print_summary();
    return failed;
  }

  double copy_gbps() const { return copy_gbps_; }

  static const DecodeKernel* find_kernel(const std::string& name) {
    for (const auto& k : decode_kernels())
      if (k.name == name) return &k;
    return nullptr;
  }

 private:
  Precision precision(const DecodeKernel& kd) const {
    Precision p;
    p.state_bytes = 4, p.io_bytes = 2;
    p.entry_bytes = kd.entry == GdnEntryType::FP32 ? 4 : 2;
    return p;
  }

  // Bytes per layer per step for the whole batch, from sim/bytes_model.h.
  double step_bytes(const DecodeKernel& kd, int batch, int chunk) const {
    const Precision p = precision(kd);
    StepBytes b;
    if (!kd.buffered) {
      b = bytes_recurrent(shape_, p);
    } else if (kd.direct) {
      // Includes the overflow fold's state write once per cycle (the request would then leave
      // direct mode; the sweep keeps has_state 0 to go on measuring direct mode).
      b = bytes_direct_mean(shape_, p, chunk);
    } else {
      const BufferVariant v = kd.variant == GdnBufferVariant::Raw ? BufferVariant::Raw : BufferVariant::CachedU;
      b = bytes_kvbuffer_cycle(shape_, p, v, chunk);
    }
    return b.scale(batch).total_bytes();
  }

  void run_kernel(const DecodeKernel& kd, int batch, CsvWriter& csv) {
    const int L = layers_, H = shape_.key_heads, HV = shape_.value_heads, K = shape_.head_k, V = shape_.head_v;
    const size_t state_per_layer = size_t(batch) * HV * V * K * 4;
    std::vector<int> chunks = kd.buffered ? args_.chunks : std::vector<int>{0};
    const int cmax = *std::max_element(chunks.begin(), chunks.end());
    const size_t esz = kd.entry == GdnEntryType::FP32 ? 4 : 2;
    const size_t buf_per_layer =
        kd.buffered ? size_t(batch) * cmax * (size_t(H) * K * esz + size_t(HV) * V * esz + 2 * HV * 4) + 3 * batch * 4
                    : 0;
    const size_t need = L * (state_per_layer * (kd.out_of_place ? 2 : 1) + buf_per_layer);
    const size_t free_b = gpu_free_bytes();
    if (need + (size_t(1) << 30) > free_b) {
      fmt::print("skip {} batch {}: needs {:.1f} GiB of pools for {} layers, {:.1f} GiB free\n", kd.name, batch,
                 need / double(1 << 30), L, free_b / double(1 << 30));
      return;
    }
    StepInputs in(shape_, batch, args_.seed);
    in.io.rows_per_block = args_.rows_per_block;
    DeviceBuffer states(L * state_per_layer), states_out(kd.out_of_place ? L * state_per_layer : 0);
    const size_t k_elems = size_t(batch) * cmax * H * K, v_elems = size_t(batch) * cmax * HV * V,
                 s_elems = size_t(batch) * cmax * HV;
    DeviceBuffer bk(kd.buffered ? L * k_elems * esz : 0), bv(kd.buffered ? L * v_elems * esz : 0),
        bg(kd.buffered ? L * s_elems * 4 : 0), bb(kd.buffered ? L * s_elems * 4 : 0),
        fill(kd.buffered ? size_t(L) * batch * 4 : 0), has(fill.bytes()), done(fill.bytes()),
        row_fill(kd.buffered ? size_t(batch) * 4 : 0), row_has(row_fill.bytes()),
        scratch(kd.buffered ? size_t(batch) * HV * 2 * V * 4 : 0);  // split path: one step's r, s (layers reuse it)
    // Every point starts from the same random pool contents, so that a point sees the same data
    // whether it runs alone or after others (the token inputs repeat every step, and the states
    // drift as steps run). This does not remove the order effect results/README.md describes.
    auto fill_pools = [&] {
      fill_uniform_f32(states.as<float>(), states.bytes() / 4, args_.seed + 11, -1.f, 1.f);
      if (kd.out_of_place) fill_uniform_f32(states_out.as<float>(), states_out.bytes() / 4, args_.seed + 12, -1.f, 1.f);
      if (kd.buffered) {
        if (esz == 2) {
          fill_uniform_bf16(bk.as<void>(), L * k_elems, args_.seed + 13, -0.2f, 0.2f);
          fill_uniform_bf16(bv.as<void>(), L * v_elems, args_.seed + 14, -1.f, 1.f);
        } else {
          fill_uniform_f32(bk.as<float>(), L * k_elems, args_.seed + 13, -0.2f, 0.2f);
          fill_uniform_f32(bv.as<float>(), L * v_elems, args_.seed + 14, -1.f, 1.f);
        }
        fill_uniform_f32(bg.as<float>(), L * s_elems, args_.seed + 15, -2.f, 0.f);
        fill_uniform_f32(bb.as<float>(), L * s_elems, args_.seed + 16, 0.1f, 0.9f);
      }
      KVB_CUDA_CHECK(cudaDeviceSynchronize());
    };
    // Layer l's buffered-kernel parameters at capacity `chunk` (pools laid out inside the
    // cmax-sized allocations).
    auto layer_params = [&](int l, int chunk) {
      GdnKVBufferParams p;
      p.io = in.io;
      p.variant = kd.variant, p.entry = kd.entry, p.capacity = chunk;
      p.path = kd.path, p.scratch = scratch.as<float>();
      p.state = states.as<float>() + l * (state_per_layer / 4);
      p.buf_k = bk.as<char>() + l * k_elems * esz;
      p.buf_val = bv.as<char>() + l * v_elems * esz;
      p.buf_gcum = bg.as<float>() + l * s_elems;
      p.buf_beta = bb.as<float>() + l * s_elems;
      p.fill = fill.as<int32_t>() + size_t(l) * batch;
      p.has_state = has.as<int32_t>() + size_t(l) * batch;
      p.done_count = done.as<int32_t>() + size_t(l) * batch;
      if (!kd.pool_fill) {
        p.fill = p.has_state = p.done_count = nullptr;
        p.row_fill = row_fill.as<int32_t>(), p.row_has_state = row_has.as<int32_t>();
        // Every KVBuffer request of the sweep has a state (staggered fills from has_state 1), as
        // the scheduler of a steady decode batch knows: at C = 1 the plain recurrent update runs.
        p.every_row_has_state = !kd.direct;
      }
      return p;
    };

    for (int chunk : chunks) {
      fill_pools();
      std::function<void(cudaStream_t)> step;
      int rows_per_block = 0, row_groups = 0;
      if (!kd.buffered) {
        rows_per_block = gdn_decode_recurrent_rows_per_block(in.io);
        step = [&, L](cudaStream_t s) {
          for (int l = 0; l < L; ++l) {
            GdnRecurrentParams p;
            p.io = in.io;
            p.state_in = states.as<float>() + l * (state_per_layer / 4);
            p.state_out = kd.out_of_place ? states_out.as<float>() + l * (state_per_layer / 4)
                                          : const_cast<float*>(p.state_in);
            gdn_decode_recurrent(p, s);
          }
        };
      } else {
        const GdnKVBufferParams p0 = layer_params(0, chunk);
        rows_per_block = kd.direct ? gdn_decode_direct_rows_per_block(p0) : gdn_decode_kvbuffer_rows_per_block(p0);
        if (kd.direct) row_groups = gdn_decode_direct_row_groups(p0);
        stagger_fill_kernel<<<grid_for(size_t(L) * batch), 256>>>(fill.as<int32_t>(), has.as<int32_t>(),
                                                                  done.as<int32_t>(), size_t(L) * batch, batch, chunk,
                                                                  kd.direct ? 0 : 1);
        KVB_CUDA_CHECK_LAUNCH();
        stagger_fill_kernel<<<grid_for(batch), 256>>>(row_fill.as<int32_t>(), row_has.as<int32_t>(),
                                                     done.as<int32_t>(), batch, batch, chunk, kd.direct ? 0 : 1);
        KVB_CUDA_CHECK_LAUNCH();
        KVB_CUDA_CHECK(cudaDeviceSynchronize());
        step = [&, L, chunk](cudaStream_t s) {
          // Direct mode: requests stay stateless (the fold at fill C-1 would otherwise end it).
          if (kd.direct && kd.pool_fill) KVB_CUDA_CHECK(cudaMemsetAsync(has.as<void>(), 0, has.bytes(), s));
          for (int l = 0; l < L; ++l) {
            const GdnKVBufferParams p = layer_params(l, chunk);
            if (kd.direct)
              gdn_decode_direct(p, s);
            else
              gdn_decode_kvbuffer(p, s);
          }
          // At C = 1 the scheduler's metadata never changes (fill stays 0, every row folds).
          if (!kd.pool_fill && chunk > 1) {
            advance_row_meta_kernel<<<(batch + 255) / 256, 256, 0, s>>>(row_fill.as<int32_t>(), row_has.as<int32_t>(),
                                                                       batch, chunk, kd.direct ? 1 : 0);
            KVB_CUDA_CHECK_LAUNCH();
          }
        };
      }
      GraphTiming how;
      how.layers = L;
      const int cyc = std::max(chunk, 1);
      how.steps_per_sample = cyc * ((4 + cyc - 1) / cyc);
      how.budget_s = args_.budget_s;
      // Skip points whose minimum sampling would exceed max_point_s (raw at large C and batch).
      {
        GraphTiming probe = how;
        probe.steps_per_sample = 1, probe.warmup_samples = 1, probe.min_samples = 1, probe.max_samples = 1;
        const TimingStats t = time_graph_steps(step, probe);
        const double est_s = t.median_us * L * how.steps_per_sample * (how.warmup_samples + how.min_samples) * 1e-6;
        if (est_s > args_.max_point_s) {
          fmt::print("skip {} batch {} chunk {}: one step takes {:.0f} us per layer, {:.0f} s to sample (limit {:.0f} s)\n",
                     kd.name, batch, chunk, t.median_us, est_s, args_.max_point_s);
          continue;
        }
      }
      const TimingStats t = time_graph_steps(step, how);
      const double bytes = step_bytes(kd, batch, std::max(chunk, 1));
      const double gbps = bytes / (t.median_us * 1e-6) / 1e9;
      const bool bf16 = kd.entry == GdnEntryType::BF16;
      csv.row({model_.name, kd.name,
               kd.buffered ? (kd.variant == GdnBufferVariant::Raw ? "raw" : "cached-u") : "none",
               kd.buffered ? (bf16 ? "bf16" : "fp32") : "none", kd.out_of_place ? "out-of-place" : "in-place",
               std::to_string(batch), std::to_string(chunk), std::to_string(L), std::to_string(rows_per_block),
               std::to_string(row_groups), fmt_g(t.median_us), fmt_g(t.min_us), fmt_g(t.max_us),
               std::to_string(t.samples), fmt_g(bytes), fmt_g(gbps), fmt_g(gbps / copy_gbps_), fmt_g(copy_gbps_),
               t.telemetry.clock_mhz(), t.telemetry.power_w(), gpu_, commit_});
      fmt::print("{:<14} batch {:>4} chunk {:>3}: {:9.2f} us/layer (min {:.2f}, max {:.2f}, {} samples)  {:7.0f} GB/s  "
                 "{:5.1f}% of copy\n",
                 kd.name, batch, chunk, t.median_us, t.min_us, t.max_us, t.samples, gbps, 100 * gbps / copy_gbps_);
      rows_.push_back({kd.name, batch, chunk, t.median_us});
    }
  }

  void print_summary() const {
    std::vector<int> batches;
    std::vector<std::string> kernels;
    std::map<std::pair<std::string, int>, const Row*> best;
    for (const Row& r : rows_) {
      if (std::find(batches.begin(), batches.end(), r.batch) == batches.end()) batches.push_back(r.batch);
      if (std::find(kernels.begin(), kernels.end(), r.kernel) == kernels.end()) kernels.push_back(r.kernel);
      auto& b = best[{r.kernel, r.batch}];
      if (!b || r.median_us < b->median_us) b = &r;
    }
    fmt::print("\nSummary: latency per layer (us, median) at the best chunk C [C], speedup vs recurrent (in place); "
               "{} | commit {}\n",
               gpu_, commit_);
    fmt::print("{:>6}", "batch");
    for (const auto& k : kernels) fmt::print(" {:>22}", k);
    fmt::print("\n");
    for (int b : batches) {
      fmt::print("{:>6}", b);
      const auto rec = best.find({"recurrent", b});
      for (const auto& k : kernels) {
        const auto it = best.find({k, b});
        if (it == best.end()) {
          fmt::print(" {:>22}", "-");
          continue;
        }
        std::string cell = fmt::format("{:.2f}", it->second->median_us);
        if (it->second->chunk > 0) cell += fmt::format(" [{}]", it->second->chunk);
        if (rec != best.end() && k != "recurrent") cell += fmt::format(" {:.2f}x", rec->second->median_us / it->second->median_us);
        fmt::print(" {:>22}", cell);
      }
      fmt::print("\n");
    }
  }

  ModelSpec model_;
  SweepArgs args_;
  LayerShape shape_;
  int layers_ = 0;
  double copy_gbps_ = 0;
  std::string gpu_, commit_;
  std::vector<Row> rows_;
};

}  // namespace

void register_sweep_command(CLI::App& app) {
  auto args = std::make_shared<SweepArgs>();
  auto model = std::make_shared<cli::ModelOptions>();
  CLI::App* cmd = app.add_subcommand("sweep", "GPU timing sweep of the decode (and verify) kernels, CSV row by row");
  model->add_to(cmd, false, false);
  cmd->add_option("--batch", args->batches, "batch sizes (requests per step)")->delimiter(',')->capture_default_str();
  cmd->add_option("--chunk", args->chunks, "buffer capacities C of the buffered kernels (1..64)")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--kernels", args->kernels,
                  "recurrent, recurrent-oop, kvbuffer, kvbuffer-fp32, kvbuffer-raw, direct, kvbuffer-poolfill "
                  "(fill advanced in kernel instead of scheduler metadata), kvbuffer-single, kvbuffer-split, "
                  "direct-single, direct-split (one decode path forced), and verify methods (verify-...) "
                  "handled by the verify sweep")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--out", args->out, "decode CSV path")->capture_default_str();
  cmd->add_option("--layer-pools", args->layers, "layer pools per step (0 = the model's linear layers)")->capture_default_str();
  cmd->add_option("--rows-per-block", args->rows_per_block, "state rows per thread block (0 = auto; 16, 32, 64, 128; 8 = one warp per block, recurrent only)")
      ->capture_default_str();
  cmd->add_option("--budget-s", args->budget_s, "sampling time per point, seconds")->capture_default_str();
  cmd->add_option("--max-point-s", args->max_point_s, "skip points whose minimum sampling takes longer, seconds")
      ->capture_default_str();
  cmd->add_option("--seed", args->seed, "seed of the device-side random fills")->capture_default_str();
  cmd->add_option("--drafts", args->drafts, "verify: tokens per verify step T")->delimiter(',')->capture_default_str();
  cmd->add_option("--acceptance", args->acceptance, "verify: acceptance rate")->capture_default_str();
  cmd->add_option("--verify-out", args->verify_out, "verify CSV path")->capture_default_str();
  cmd->callback([args, model] {
    if (model->model.empty() && model->kind.empty()) model->model = "qwen3-next-80b-a3b";
    const std::vector<ModelSpec> models = model->selected_after_tp();
    if (models.size() != 1) throw cli::UsageError("kvbuf sweep: give exactly one model");
    cli::require_positive("--batch", args->batches);
    cli::require_positive("--chunk", args->chunks);
    for (int c : args->chunks)
      if (c > 64) throw cli::UsageError("--chunk: capacities above 64 are not supported, got " + std::to_string(c));
    if (args->layers < 0) throw cli::UsageError("--layer-pools must be >= 0");
    if (!(args->budget_s > 0) || !(args->max_point_s > 0)) throw cli::UsageError("--budget-s and --max-point-s must be > 0");
    if (!(args->acceptance >= 0 && args->acceptance <= 1)) throw cli::UsageError("--acceptance must be in [0, 1]");
    const int r = args->rows_per_block;
    if (!(r == 0 || r == 8 || r == 16 || r == 32 || r == 64 || r == 128))
      throw cli::UsageError("--rows-per-block must be 0, 8, 16, 32, 64 or 128");
    if (r == 8)
      for (const auto& k : args->kernels) {
        const DecodeKernel* kd = DecodeSweep::find_kernel(k);
        if (!kd || kd->buffered)
          throw cli::UsageError("--rows-per-block 8 (one warp per block) is for the recurrent kernels only, not " + k);
      }
    std::vector<std::string> verify;
    bool any_decode = false;
    for (const auto& k : args->kernels) {
      if (DecodeSweep::find_kernel(k)) {
        any_decode = true;
      } else if (k.rfind("verify-", 0) == 0) {
        verify.push_back(k);
      } else {
        throw cli::UsageError("--kernels: unknown kernel '" + k +
                              "' (recurrent, recurrent-oop, kvbuffer, kvbuffer-fp32, kvbuffer-raw, direct, kvbuffer-poolfill, "
                              "kvbuffer-single, kvbuffer-split, direct-single, direct-split, verify-...)");
      }
    }
    const LayerShape& shape = models[0].layer;
    if (any_decode && shape.kind == LayerKind::GatedDeltaNet &&
        !(shape.head_k == shape.head_v && (shape.head_k == 64 || shape.head_k == 128)))
      throw cli::UsageError("kvbuf sweep: unsupported head dims K=" + std::to_string(shape.head_k) +
                            " V=" + std::to_string(shape.head_v) + " (the decode kernels support 64x64 and 128x128)");
    if (any_decode && shape.kind != LayerKind::GatedDeltaNet)
      throw cli::UsageError("kvbuf sweep: the decode kernels are Gated DeltaNet kernels; " + models[0].name + " is Mamba-2");
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)
      throw std::runtime_error("kvbuf sweep: no CUDA device answers");
    DecodeSweep sweep(models[0], *args);
    int failed = 0;
    if (any_decode) failed += sweep.run();
    if (!verify.empty()) {
      VerifySweepArgs v;
      v.model = models[0];
      v.layers = args->layers > 0 ? args->layers : models[0].linear_layers;
      v.batches = args->batches, v.drafts = args->drafts, v.chunks = args->chunks, v.methods = verify;
      v.acceptance = args->acceptance, v.out_csv = args->verify_out;
      v.copy_gbps = any_decode ? sweep.copy_gbps() : measure_copy_gbps();
      v.gpu = gpu_name(), v.commit = commit_id(), v.seed = args->seed;
      failed += run_verify_sweep(v);
    }
    if (failed) throw std::runtime_error(std::to_string(failed) + " sweep points failed");
  });
}

}  // namespace kvbuf
