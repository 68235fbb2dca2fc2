// Calibration of the step model's attention, GEMM/MoE and elementwise terms from measured
// whole-step profiles (the rows `kvbuf step --measure` writes), and its held-out validation.
// Each term is linear in its coefficients over StepModel::features(); the coefficients minimise the
// squared relative error of that term over the rows (weighted least squares, weight 1 / measured),
// constrained non-negative (every subset of free coefficients tried: at most 4 per term), so a
// coefficient the data does not support is 0 rather than negative.
#pragma once
#include <string>
#include <vector>

#include "sim/gpus.h"
#include "sim/step_model.h"

namespace kvbuf {

// One measured row of a step CSV with what the fit and the validation read.
struct StepProfile {
  std::string model, method, state_dtype, routing, expert_gemm, commit;
  int tp = 1, batch = 0, chunk = 0, drafts = 0;
  long context = 0;
  double measured_step_us = 0, measured_linear_us = 0, measured_attention_us = 0, measured_gemm_us = 0,
         measured_elementwise_us = 0;
  double simulated_step_us = 0;    // the simulator's step when the row was measured (bytes over bandwidth)
  double simulated_linear_us = 0;  // from the measured linear tables: the fit leaves it as it is
  double modelled_comm_us = 0;
  double measured_speedup = 0;     // kvbuffer rows: classic step / this step; 0 where absent
  StepFeatures features;           // filled by read_step_profiles
};

// The rows of a step CSV, each with its features (the catalog's model at its tp, method, C, T,
// state type). A point that did not run (its measured columns empty, its note saying why) is left
// out; a terms-only row (`kvbuf step --measure --terms-only`) has measured_step_us 0. Throws std::invalid_argument naming the file and the missing columns, a bad value
// (with its line) or an unknown model; std::runtime_error when the file cannot be read.
std::vector<StepProfile> read_step_profiles(const std::string& path);

// The step model's configuration of a row on `gpu`.
StepConfig step_config(const StepProfile& row, const GpuSpec& gpu);

// The rows' measured operator terms as profile points (sim/step_profile.h).
ProfileKey profile_key(const StepProfile& row);
std::vector<ProfilePoint> profile_points(const std::vector<StepProfile>& rows);

// The coefficients fitted on `rows`; throws std::invalid_argument with fewer rows than coefficients.
StepTermFit fit_step_terms(const std::vector<StepProfile>& rows);

// A step predicted with a fit: the row's simulated linear term and modelled comm as they are, the
// fitted attention, GEMM/MoE and elementwise terms.
struct PredictedStep {
  double linear_us = 0, attention_us = 0, gemm_us = 0, elementwise_us = 0, comm_us = 0;
  double total() const { return linear_us + attention_us + gemm_us + elementwise_us + comm_us; }
};
PredictedStep predict_step(const StepTermFit& fit, const StepProfile& row);

enum class HoldOut { Model, Batch };
HoldOut parse_hold_out(const std::string& name);  // "model" | "batch"; throws std::invalid_argument
const char* hold_out_name(HoldOut h);

struct ValidationRow {
  StepProfile row;
  std::string fold;  // the held-out value (model name or batch)
  int fit_rows = 0;  // rows the fit of this fold used
  PredictedStep predicted;
  double predicted_speedup = 0;  // kvbuffer rows with their classic row in the same fold; 0 otherwise
  double step_error() const { return predicted.total() / row.measured_step_us - 1; }
  double speedup_error() const {
    return row.measured_speedup > 0 && predicted_speedup > 0 ? predicted_speedup / row.measured_speedup - 1 : 0;
  }
  bool has_speedup() const { return row.measured_speedup > 0 && predicted_speedup > 0; }
  // The term whose prediction is furthest from its measurement (linear, attention, gemm, elementwise).
  std::string worst_term() const;
};

// Every row predicted by the fit on the rows outside its fold (folds: the distinct models or
// batches). A fold whose complement has too few rows to fit is skipped.
std::vector<ValidationRow> validate_held_out(const std::vector<StepProfile>& rows, HoldOut by);

// The profile-based step (sim/step_profile.h) against each measured whole step:
//   leave-point-out: the profile is every other row of the CSV, without the checked point's own
//       (batch, context) in any method or state type; the parametric terms (the fallback beyond the
//       profile's range) fitted on the same rows;
//   separate-run: the profile is another run's rows (`--terms-only`) at the same shapes, the
//       parametric terms fitted on them.
// The linear term is the simulator's from the measured kernel tables (the row's simulated_linear_us),
// the TP all-reduce the row's modelled one.
struct ProfileValidationRow {
  StepProfile row;
  std::string profile;     // leave-point-out | separate-run
  int profile_points = 0;  // rows the profile held
  double linear_us = 0, comm_us = 0;
  OperatorTimes predicted{};
  std::array<TermSource, kOperatorTerms> sources{};
  double predicted_speedup = 0;  // kvbuffer rows whose classic row was predicted too; 0 otherwise
  double total() const { return linear_us + comm_us + predicted[0] + predicted[1] + predicted[2]; }
  double step_error() const { return total() / row.measured_step_us - 1; }
  bool has_speedup() const { return row.measured_speedup > 0 && predicted_speedup > 0; }
  double speedup_error() const { return has_speedup() ? predicted_speedup / row.measured_speedup - 1 : 0; }
  double measured_term(int i) const;  // 0 linear, 1 attention, 2 gemm, 3 elementwise
  double predicted_term(int i) const;
  std::string worst_term() const;      // the term furthest from its measurement, in us
};
std::vector<ProfileValidationRow> validate_with_profiles(const std::vector<StepProfile>& steps,
                                                         const std::vector<StepProfile>* separate_run,
                                                         const GpuSpec& gpu);

}  // namespace kvbuf
