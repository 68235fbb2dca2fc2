// The GPU half of the kvbuf CLI, compiled only with CUDA (KVBUF_WITH_CUDA). kvbuf_main.cpp calls
// these when they exist; without CUDA the commands exit 2 with "requires a CUDA build".
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench/sweep/sweep_grid.h"
#include "sim/catalog.h"

namespace kvbuf {

namespace accuracy {
struct Options;
}

// GPU kernel checks against the reference, run by `kvbuf check` when a GPU answers.
// Prints one line per case; returns the number of failed cases.
int run_gpu_checks(uint64_t seed);

// `kvbuf capacity --measure`: largest number of concurrent requests whose pools fit in
// budget_bytes and run verify steps, found by bisection, for one method and state dtype.
struct CapacityMeasureArgs {
  ModelSpec model;  // after tensor parallelism
  int drafts = 4;   // T
  int chunk = 16;   // C (KVBuffer)
  StateType state = StateType::FP32;  // of the state pools (and classic's per-node states)
  double budget_bytes = 0;
  bool kvbuffer = true;  // false: classic (1 + T states per request)
};
struct CapacityMeasured {
  long max_requests = 0;
  std::string note;
};
CapacityMeasured measure_capacity_on_gpu(const CapacityMeasureArgs& args);

// `kvbuf sweep` (bench/sweep/sweep_run.cu): measures the points not yet in the CSVs, row by row, with
// progress on stderr; `on_device` runs once a device answers, before any row. Returns the exit
// status; throws std::runtime_error when points failed.
int run_sweep_on_gpu(const std::vector<SweepPoint>& points, const SweepSettings& settings,
                     const std::function<void()>& on_device);

// `kvbuf accuracy` (bench/accuracy/accuracy_run.cu): every variant of every model decodes options.tokens
// tokens of one request against the float64 reference; rows to options.out (default
// results/accuracy_<gpu>.csv) as measured. Returns the exit status; throws std::invalid_argument for
// bad options, std::runtime_error without a device.
int run_accuracy_on_gpu(const accuracy::Options& options, const std::string& commit);

}  // namespace kvbuf
