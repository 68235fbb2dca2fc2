// `kvbuf sweep` (GPU only): the decode and verify runners behind the grid driver of
// bench/sweep/sweep_run.cu, on the timing library of bench/gpu_timing.h and the kernel table of
// bench/sweep/sweep_kernels.h. Rows go to CSV row by row as measured; units in the column names.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bench/csv.h"
#include "bench/gpu_timing.h"
#include "bench/sweep/sweep_kernels.h"
#include "kernels/common/device_buffer.h"
#include "sim/catalog.h"

namespace kvbuf {

// What the runners need besides the point: the model after tensor parallelism, the method's
// settings, and (for the summaries and the verify sweep's loops) the grid's axes of this model.
struct SweepArgs {
  ModelSpec model;  // after tensor parallelism
  int layers = 0;   // layer pools per step (the model's linear layers when 0)
  std::vector<int> batches;
  std::vector<int> chunks;
  std::vector<const SweepKernel*> kernels;  // decode and verify rows of this model
  int rows_per_block = 0;
  double budget_s = 0.5;
  double max_point_s = 20;
  uint64_t seed = 1;
  std::vector<int> drafts;  // verify: T
  double acceptance = 0.7;  // verify
  StateType state = StateType::FP32;  // verify: the state type of the runner's points
  // Filled by the command: measured in the same run, the device, the commit.
  double copy_gbps = 0;
  std::string gpu, commit;
};

// A decode point's measured latency (per layer per step) at its capacity C (0 = not buffered).
struct DecodePoint {
  std::string kernel;
  StateType state = StateType::FP32;
  int batch = 0, chunk = 0;
  double median_us = 0;
};

// The model line printed before its decode rows, and the table of the best C per kernel and batch
// printed after them.
void print_decode_header(const SweepArgs& args);
void print_decode_summary(const SweepArgs& args, const std::vector<DecodePoint>& rows);

// Measures one decode point and returns its row (the columns of decode_base_columns() in
// bench/sweep/sweep_grid.h); a point that cannot run or fails is a row whose note says why (`failed`
// set for a failure). direct_fill >= 0: every request stateless at that fill (a short context).
// A steady-state measurement is appended to `points`.
std::vector<std::string> decode_row(const SweepArgs& args, const SweepKernel& kernel, int batch, int chunk,
                                    int direct_fill, StateType state, std::vector<DecodePoint>& points, bool& failed);

// The verify rows, point by point, into one CSV (verify_base_columns() of bench/sweep/sweep_grid.h); a
// point that cannot run is a row whose note says why. For the verify-to-decode ratio of the summary
// it compares with the fastest KVBuffer decode step measured at each batch (`decode_points`).
class VerifySweep;
class VerifyRunner {
 public:
  VerifyRunner(const SweepArgs& args, const std::vector<DecodePoint>& decode_points);
  ~VerifyRunner();
  VerifyRunner(const VerifyRunner&) = delete;
  VerifyRunner& operator=(const VerifyRunner&) = delete;
  // Returns false when the point failed (its row says how).
  bool run_point(const SweepKernel& kernel, int batch, int drafts, int chunk, CsvWriter& csv);
  void summary() const;

 private:
  std::unique_ptr<VerifySweep> impl_;
};

// The Mamba-2 token inputs of the decode and verify runners for `tokens` token rows (batch x T; G
// = key heads, NH = value heads, N = head_k, P = head_v), random from `seed`: raw dt, dt_bias,
// softplus and the z gate are left to the kernels, as serving engines call them. wire() points an
// IO's tensors (Mamba2StepIO, Mamba2VerifyIO) at them.
struct Mamba2TokenBuffers {
  DeviceBuffer x, B, C, dt, z, dt_bias, A, D, out;
  Mamba2TokenBuffers(const LayerShape& s, size_t tokens, uint64_t seed)
      : x(tokens * s.value_heads * s.head_v * 2),
        B(tokens * s.key_heads * s.head_k * 2),
        C(B.bytes()),
        dt(tokens * s.value_heads * 2),
        z(x.bytes()),
        dt_bias(size_t(s.value_heads) * 4),
        A(dt_bias.bytes()),
        D(dt_bias.bytes()),
        out(x.bytes()) {
    fill_uniform_bf16(x.as<void>(), x.bytes() / 2, seed + 1, -1.f, 1.f);
    fill_uniform_bf16(B.as<void>(), B.bytes() / 2, seed + 2, -1.f, 1.f);
    fill_uniform_bf16(C.as<void>(), C.bytes() / 2, seed + 3, -1.f, 1.f);
    fill_uniform_bf16(dt.as<void>(), dt.bytes() / 2, seed + 4, -2.f, 1.f);
    fill_uniform_bf16(z.as<void>(), z.bytes() / 2, seed + 5, -1.f, 1.f);
    fill_uniform_f32(dt_bias.as<float>(), s.value_heads, seed + 6, -2.f, 0.f);
    fill_uniform_f32(A.as<float>(), s.value_heads, seed + 7, -4.f, -0.5f);
    fill_uniform_f32(D.as<float>(), s.value_heads, seed + 8, 0.5f, 1.5f);
  }
  template <class IO>
  void wire(IO& io) const {
    io.x = x.as<__nv_bfloat16>(), io.B = B.as<__nv_bfloat16>(), io.C = C.as<__nv_bfloat16>();
    io.dt = dt.as<__nv_bfloat16>(), io.dt_bias = dt_bias.as<float>();
    io.A = A.as<float>(), io.D = D.as<float>(), io.z = z.as<__nv_bfloat16>();
    io.out = out.as<__nv_bfloat16>();
  }
};

// Times one decode kernel point (all layers in one graph, whole flush cycles); the runner of
// decode_row. Returns false (with `why`) when the point cannot run (pools do not fit in free
// memory, or sampling would exceed args.max_point_s). direct_fill as for decode_row.
struct DecodeTiming {
  TimingStats t;
  double bytes_per_layer_step = 0;  // whole batch, from sim/bytes_model.h
  int rows_per_block = 0, row_groups = 0;
};
bool time_decode_point(const SweepArgs& args, const SweepKernel& kernel, int batch, int chunk, StateType state,
                       DecodeTiming& out, std::string& why, int direct_fill = -1);

}  // namespace kvbuf
