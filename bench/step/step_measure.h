// `kvbuf step --measure`: the measured whole-model decode step (bench/step/step_runner.h) next
// to the step model's prediction (sim/step_model.h), per term and in total, for each method, with
// the speedup of KVBuffer over classic; one CSV row per point as measured.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "bench/step/step_routing.h"
#include "sim/catalog.h"
#include "sim/step_model.h"

namespace kvbuf::step {

struct MeasureArgs {
  ModelSpec model;  // as the catalog has it
  int tp = 1;
  std::vector<int> batches;
  std::vector<long> contexts;
  std::vector<DecodeMethod> methods;
  int chunk = 16;
  int drafts = 0;  // T verified per request and step (0: plain decode)
  double acceptance = 0.7;
  double emitted_per_request = 1;  // tokens a request emits per step: 1, or E[m] at `acceptance` with drafts
  bool terms_only = false;         // each term alone, not the whole step (an operator profile)
  StateType state = StateType::FP32;
  Routing routing = Routing::Uniform;
  bool grouped_expert_gemm = true;
  std::string out;  // CSV path ("" = none)
  double budget_s = 0.3;
  uint64_t seed = 1;
  std::string commit;
  // The step model of a method (built by the CLI from its options and the measured tables).
  std::function<StepTerms(DecodeMethod, int batch, long context)> simulate;
};

// The CSV columns, in order.
std::vector<std::string> measure_columns();

// Returns the exit status (0; 1 when a point failed). A point the runner cannot run (memory, a shape
// its kernels lack) is a row whose note says why.
int run_step_measure(const MeasureArgs& args);

}  // namespace kvbuf::step
