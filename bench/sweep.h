// `kvbuf sweep` (GPU only): the decode and verify runners behind the one command of
// bench/cmd_sweep.cu, on the timing library of bench/gpu_timing.h and the kernel table of
// bench/sweep_kernels.h. Rows go to CSV row by row as measured; units in the column names.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "bench/gpu_timing.h"
#include "bench/sweep_kernels.h"
#include "sim/catalog.h"

namespace kvbuf {

struct SweepArgs {
  ModelSpec model;  // after tensor parallelism
  int layers = 0;   // layer pools per step (the model's linear layers when 0)
  std::vector<int> batches{1, 8, 32, 64, 128, 256, 512};
  std::vector<int> chunks{1, 2, 4, 8, 16, 32, 64};
  std::vector<const SweepKernel*> kernels;  // decode and verify rows, in command-line order
  int rows_per_block = 0;
  double budget_s = 0.5;
  double max_point_s = 20;
  uint64_t seed = 1;
  std::vector<int> drafts{1, 2, 3, 4, 5, 8};  // verify: T
  double acceptance = 0.7;                    // verify
  std::string decode_csv = "results/decode.csv";
  std::string verify_csv = "results/verify.csv";
  // Filled by the command: measured in the same run, the device, the commit.
  double copy_gbps = 0;
  std::string gpu, commit;
};

// A decode point's measured latency (per layer per step) at its capacity C (0 = not buffered).
struct DecodePoint {
  std::string kernel;
  int batch = 0, chunk = 0;
  double median_us = 0;
};

// The decode rows of `args.kernels`; every measured point is appended to `points`. Returns the
// number of failed points.
int run_decode_sweep(const SweepArgs& args, std::vector<DecodePoint>& points);

// The verify rows; for the verify-to-decode ratio it compares with the fastest KVBuffer decode
// step measured at each batch: from `decode_points` when the decode sweep measured "kvbuffer",
// otherwise it times that step itself (same dispatch and scheduler metadata as the decode sweep).
int run_verify_sweep(const SweepArgs& args, const std::vector<DecodePoint>& decode_points);

// Times one decode kernel point (all layers in one graph, whole flush cycles); the runner of
// run_decode_sweep, shared with the verify sweep. Returns false (with `why`) when the point cannot
// run (pools do not fit in free memory, or sampling would exceed args.max_point_s).
struct DecodeTiming {
  TimingStats t;
  double bytes_per_layer_step = 0;  // whole batch, from sim/bytes_model.h
  int rows_per_block = 0, row_groups = 0;
};
bool time_decode_point(const SweepArgs& args, const SweepKernel& kernel, int batch, int chunk, DecodeTiming& out,
                       std::string& why);

}  // namespace kvbuf
