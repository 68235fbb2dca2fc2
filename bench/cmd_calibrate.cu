// `kvbuf calibrate` (CUDA builds): measures on this GPU what the step model (sim/step_model.h)
// otherwise assumes, and writes it as the calibration JSON that `kvbuf simulate --calibration`
// reads (sim/gpus.h): cuBLAS bf16 GEMM throughput at the decode shapes (M = tokens in the step,
// a weight of N x K far above L2), the per-kernel launch + drain overhead inside a CUDA graph, and
// the device copy bandwidth. Every timing uses bench/gpu_timing.h (graph replay, CUDA events,
// median of samples).
#include <cublas_v2.h>
#include <fmt/format.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/cmd_common.h"
#include "bench/cublas_check.h"
#include "bench/gpu_timing.h"
#include "kernels/common/cuda_check.h"
#include "sim/gpus.h"

namespace kvbuf::cli {
namespace {

__global__ void empty_kernel() {}

struct CalibrateOptions {
  std::string out;
  std::vector<int> m = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192};
  int n = 8192, k = 8192;
  double budget_s = 0.2;
};

// Y[M x N] = X[M x K] W^T, W of N x K (a linear layer's weight), bf16 in and out, fp32 accumulate;
// column-major for cuBLAS: Y^T (N x M) = W (N x K, ld N) X^T (K x M, ld K).
double gemm_tflops(cublasHandle_t h, const DeviceBuffer& w, int m, int n, int k, double budget_s) {
  DeviceBuffer x(size_t(m) * k * 2), y(size_t(m) * n * 2);
  fill_uniform_bf16(x.as<void>(), size_t(m) * k, 2, -1.f, 1.f);
  KVB_CUDA_CHECK(cudaDeviceSynchronize());
  const float alpha = 1.f, beta = 0.f;
  constexpr int kGemmsPerStep = 8;
  GraphTiming how;
  how.layers = kGemmsPerStep;
  how.steps_per_sample = 4;
  how.budget_s = budget_s;
  const TimingStats t = time_graph_steps(
      [&](cudaStream_t s) {
        KVB_CUBLAS_CHECK(cublasSetStream(h, s));
        for (int i = 0; i < kGemmsPerStep; ++i)
          KVB_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha, w.as<void>(), CUDA_R_16BF, n,
                                        x.as<void>(), CUDA_R_16BF, k, &beta, y.as<void>(), CUDA_R_16BF, n,
                                        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      },
      how);
  return 2.0 * m * n * k / (t.median_us * 1e6);
}

// Per-kernel cost of a chain of empty kernels replayed from one graph: what each extra kernel of a
// decode step adds beyond its own work.
double kernel_overhead_us(double budget_s) {
  constexpr int kKernels = 200;
  GraphTiming how;
  how.layers = kKernels;
  how.steps_per_sample = 10;
  how.budget_s = budget_s;
  const TimingStats t = time_graph_steps(
      [](cudaStream_t s) {
        for (int i = 0; i < kKernels; ++i) {
          empty_kernel<<<1, 32, 0, s>>>();
          KVB_CUDA_CHECK_LAUNCH();
        }
      },
      how);
  return t.median_us;
}

int run_calibrate(const CalibrateOptions& o) {
  if (o.out.empty()) throw UsageError("--out FILE is required");
  require_positive("--m", o.m);
  for (size_t i = 1; i < o.m.size(); ++i)
    if (o.m[i] <= o.m[i - 1]) throw UsageError("--m must be ascending");
  if (!gpu_present()) throw std::runtime_error("no CUDA device answers");
  Calibration c;
  c.gpu_name = gpu_name();
  c.commit = source_commit();
  c.gemm_n = o.n;
  c.gemm_k = o.k;
  fmt::print("calibrate: {} | commit {}\n", c.gpu_name, c.commit);
  c.copy_gbps = measure_copy_gbps();
  fmt::print("copy bandwidth: {:.0f} GB/s (read + write)\n", c.copy_gbps);
  c.kernel_overhead_us = kernel_overhead_us(o.budget_s);
  fmt::print("kernel overhead in a graph: {:.3f} us per kernel\n", c.kernel_overhead_us);
  CublasHandle handle;
  DeviceBuffer workspace(size_t(32) << 20);  // a fixed workspace, so capture allocates nothing
  KVB_CUBLAS_CHECK(cublasSetWorkspace(handle.h, workspace.as<void>(), workspace.bytes()));
  DeviceBuffer w(size_t(o.n) * o.k * 2);
  fill_uniform_bf16(w.as<void>(), size_t(o.n) * o.k, 1, -1.f, 1.f);
  for (int m : o.m) {
    const double tflops = gemm_tflops(handle.h, w, m, o.n, o.k, o.budget_s);
    c.gemm_by_m.push_back({m, tflops});
    fmt::print("bf16 GEMM M = {:>5}, N = {}, K = {}: {:.1f} TFLOP/s\n", m, o.n, o.k, tflops);
  }
  write_calibration(o.out, c);
  fmt::print("wrote {}\n", o.out);
  return 0;
}

}  // namespace

Command add_calibrate_command(CLI::App& app) {
  auto o = std::make_shared<CalibrateOptions>();
  Command c;
  c.app = app.add_subcommand("calibrate", "measure GEMM throughput, kernel overhead and copy bandwidth on this GPU");
  c.app->add_option("--out", o->out, "calibration JSON to write (read by `kvbuf simulate --calibration`)")
      ->required();
  c.app->add_option("--m", o->m, "GEMM rows M (tokens per step), ascending")
      ->delimiter(',')
      ->check(positive_integer())
      ->capture_default_str();
  c.app->add_option("--n", o->n, "weight rows N")->check(positive_integer())->capture_default_str();
  c.app->add_option("--k", o->k, "weight columns K")->check(positive_integer())->capture_default_str();
  c.app->add_option("--budget-s", o->budget_s, "seconds of samples per measurement")
      ->check(positive_number())
      ->capture_default_str();
  c.run = [o] { return run_calibrate(*o); };
  return c;
}

}  // namespace kvbuf::cli
