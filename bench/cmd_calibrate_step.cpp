// `kvbuf calibrate-step` (any build, no GPU: it reads a CSV): fits the step model's attention,
// GEMM/MoE and elementwise terms to the measured whole-step profiles that `kvbuf step --measure`
// wrote (sim/step_calibration.h) and stores the coefficients in the calibration JSON that
// `kvbuf step` and `kvbuf simulate` read; with --holdout it validates the fit on held-out points.
// `kvbuf validate-step`: the profile-based step (sim/step_profile.h) against every measured whole
// step, the profile excluding the point checked (and, with --profile, a separate terms-only run).
#include <fmt/format.h>

#include <array>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>

#include "bench/cmd_common.h"
#include "bench/csv.h"
#include "sim/step_calibration.h"

namespace kvbuf::cli {
namespace {

struct CalibrateStepOptions {
  std::string step_csv;
  std::string calibration;  // the calibration JSON to extend
  std::string out;          // where the extended JSON goes (default: --calibration itself)
  std::vector<std::string> holdout;
  std::string validation_csv;
};

void print_fit(const StepTermFit& f) {
  fmt::print("attention:   {:.3f} us/layer + {:.5f} us/(layer x token) + KV bytes / {:.0f} GB/s\n", f.attn_layer_us,
             f.attn_token_us, f.attn_us_per_byte > 0 ? 1e-3 / f.attn_us_per_byte : 0.0);
  fmt::print("gemm/moe:    {:.3f} us/GEMM + dense bytes / {:.0f} GB/s + expert bytes / {:.0f} GB/s + FLOPs / {:.0f} "
             "TFLOP/s (0: coefficient fitted to 0)\n",
             f.gemm_kernel_us, f.gemm_us_per_dense_byte > 0 ? 1e-3 / f.gemm_us_per_dense_byte : 0.0,
             f.gemm_us_per_expert_byte > 0 ? 1e-3 / f.gemm_us_per_expert_byte : 0.0,
             f.gemm_us_per_flop > 0 ? 1e-6 / f.gemm_us_per_flop : 0.0);
  fmt::print("elementwise: {:.3f} us/kernel + activation bytes / {:.0f} GB/s\n", f.elementwise_kernel_us,
             f.elementwise_us_per_byte > 0 ? 1e-3 / f.elementwise_us_per_byte : 0.0);
}

void report_validation(const std::vector<ValidationRow>& v, HoldOut by, CsvWriter* csv);

int run_validation(const std::vector<StepProfile>& rows, const CalibrateStepOptions& o) {
  std::unique_ptr<CsvWriter> csv;
  if (!o.validation_csv.empty()) {
    try {
      csv = std::make_unique<CsvWriter>(
          o.validation_csv,
          std::vector<std::string>{"holdout", "fold", "fit_rows", "model", "tp", "batch", "context", "method",
                                   "state_dtype", "chunk", "drafts", "routing", "expert_gemm", "measured_step_us",
                                   "predicted_step_us", "step_error", "bytes_model_step_us", "bytes_model_error",
                                   "measured_speedup", "predicted_speedup", "speedup_error", "measured_linear_us",
                                   "predicted_linear_us", "measured_attention_us", "predicted_attention_us",
                                   "measured_gemm_us", "predicted_gemm_us", "measured_elementwise_us",
                                   "predicted_elementwise_us", "modelled_comm_us", "worst_term", "measured_commit"});
    } catch (const std::runtime_error& e) {
      throw UsageError(fmt::format("--validation-csv: {}", e.what()));
    }
  }
  for (const std::string& name : o.holdout) {
    HoldOut by;
    try {
      by = parse_hold_out(name);
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("--holdout: ") + e.what());
    }
    report_validation(validate_held_out(rows, by), by, csv.get());
  }
  if (csv) fmt::print("wrote {}\n", o.validation_csv);
  return 0;
}

void report_validation(const std::vector<ValidationRow>& v, HoldOut by, CsvWriter* csv) {
  int steps_within = 0, speedups = 0, speedups_within = 0;
  std::map<std::string, std::pair<int, int>> by_method;  // within, all
  std::map<std::string, int> worst_terms;
  fmt::print("held out by {}: each row predicted by the fit on the rows outside its fold\n", hold_out_name(by));
  for (const ValidationRow& r : v) {
    const bool ok = std::abs(r.step_error()) <= 0.10;
    steps_within += ok;
    auto& m = by_method[r.row.method];
    m.first += ok, m.second += 1;
    if (!ok) ++worst_terms[r.worst_term()];
    if (r.has_speedup()) ++speedups, speedups_within += std::abs(r.speedup_error()) <= 0.10;
    if (csv) {
      const StepProfile& p = r.row;
      csv->row({hold_out_name(by), r.fold, std::to_string(r.fit_rows), p.model, std::to_string(p.tp),
                std::to_string(p.batch), std::to_string(p.context), p.method, p.state_dtype, std::to_string(p.chunk),
                std::to_string(p.drafts), p.routing, p.expert_gemm, fmt::format("{:.3f}", p.measured_step_us),
                fmt::format("{:.3f}", r.predicted.total()), fmt::format("{:.4f}", r.step_error()),
                fmt::format("{:.3f}", p.simulated_step_us), fmt::format("{:.4f}", p.simulated_step_us / p.measured_step_us - 1),
                p.measured_speedup > 0 ? fmt::format("{:.4f}", p.measured_speedup) : "",
                r.has_speedup() ? fmt::format("{:.4f}", r.predicted_speedup) : "",
                r.has_speedup() ? fmt::format("{:.4f}", r.speedup_error()) : "",
                fmt::format("{:.3f}", p.measured_linear_us), fmt::format("{:.3f}", r.predicted.linear_us),
                fmt::format("{:.3f}", p.measured_attention_us), fmt::format("{:.3f}", r.predicted.attention_us),
                fmt::format("{:.3f}", p.measured_gemm_us), fmt::format("{:.3f}", r.predicted.gemm_us),
                fmt::format("{:.3f}", p.measured_elementwise_us), fmt::format("{:.3f}", r.predicted.elementwise_us),
                fmt::format("{:.3f}", p.modelled_comm_us), ok ? "" : r.worst_term(), p.commit});
    }
  }
  fmt::print("step within 10%: {} of {}\n", steps_within, v.size());
  for (const auto& [method, n] : by_method) fmt::print("  {}: {} of {}\n", method, n.first, n.second);
  fmt::print("speedup within 10%: {} of {}\n", speedups_within, speedups);
  fmt::print("term furthest from its measurement where the step misses by > 10%:");
  for (const auto& [term, n] : worst_terms) fmt::print(" {} {}", term, n);
  fmt::print("\n\n");
}

int run_calibrate_step(const CalibrateStepOptions& o) {
  std::vector<StepProfile> rows;
  try {
    rows = read_step_profiles(o.step_csv);
  } catch (const std::exception& e) {
    throw UsageError(std::string("--step-csv: ") + e.what());
  }
  if (rows.size() < size_t(GemmFeatures::kCount))
    throw UsageError(fmt::format("--step-csv: {} measured rows, the fit needs at least {}", rows.size(),
                                 GemmFeatures::kCount));
  if (!o.holdout.empty()) return run_validation(rows, o);
  if (o.calibration.empty()) throw UsageError("--calibration FILE is required (the JSON the fit is added to)");
  Calibration c;
  try {
    c = read_calibration(o.calibration);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--calibration: ") + e.what());
  }
  c.step_terms = fit_step_terms(rows);
  fmt::print("step terms fitted to {} measured rows of {} (commit {}):\n", rows.size(), o.step_csv,
             c.step_terms.source);
  print_fit(c.step_terms);
  const std::string out = o.out.empty() ? o.calibration : o.out;
  write_calibration(out, c);
  fmt::print("wrote {}\n", out);
  return 0;
}

}  // namespace

Command add_calibrate_step_command(CLI::App& app) {
  auto o = std::make_shared<CalibrateStepOptions>();
  Command c;
  c.app = app.add_subcommand("calibrate-step",
                             "fit the step model's attention, GEMM/MoE and elementwise terms to a measured step CSV "
                             "(`kvbuf step --measure --out`); no GPU needed");
  c.app->add_option("--step-csv", o->step_csv, "measured step rows")->required();
  c.app->add_option("--calibration", o->calibration,
                    "calibration JSON (`kvbuf calibrate`) the fitted coefficients are added to");
  c.app->add_option("--out", o->out, "write the extended JSON here (default: --calibration)");
  c.app->add_option("--holdout", o->holdout,
                    "validate instead: model and/or batch; every row predicted by the fit without its model / batch")
      ->delimiter(',')
      ->check(CLI::IsMember({"model", "batch"}));
  c.app->add_option("--validation-csv", o->validation_csv, "--holdout: write the rows to this CSV file");
  c.run = [o] { return run_calibrate_step(*o); };
  return c;
}

namespace {

struct ValidateStepOptions {
  std::string step_csv, profile_csv, out, gpu = "h200";
  double require_within = 0;
};

std::vector<StepProfile> read_rows(const std::string& option, const std::string& path) {
  try {
    return read_step_profiles(path);
  } catch (const std::exception& e) {
    throw UsageError(option + ": " + e.what());
  }
}

// Prints the summary of one profile source; returns the points outside `limit` (step or speedup).
int summarize(const std::vector<ProfileValidationRow>& v, double limit) {
  if (v.empty()) return 0;
  std::map<std::string, std::pair<int, int>> by_method;  // within, all
  int speedups = 0, speedups_within = 0, outside = 0;
  const ProfileValidationRow* worst = &v.front();
  const ProfileValidationRow* worst_speedup = nullptr;
  std::map<std::string, int> worst_terms;
  std::array<std::map<std::string, int>, kOperatorTerms> sources;
  for (const ProfileValidationRow& r : v) {
    const bool ok = std::abs(r.step_error()) <= 0.10;
    auto& m = by_method[r.row.method];
    m.first += ok, m.second += 1;
    if (!ok) ++worst_terms[r.worst_term()];
    if (std::abs(r.step_error()) > std::abs(worst->step_error())) worst = &r;
    if (r.has_speedup()) {
      ++speedups, speedups_within += std::abs(r.speedup_error()) <= 0.10;
      if (!worst_speedup || std::abs(r.speedup_error()) > std::abs(worst_speedup->speedup_error())) worst_speedup = &r;
    }
    for (int t = 0; t < kOperatorTerms; ++t) ++sources[t][term_source_name(r.sources[t])];
    if (limit > 0 && (std::abs(r.step_error()) > limit || std::abs(r.speedup_error()) > limit)) ++outside;
  }
  auto where = [](const ProfileValidationRow& r) {
    return fmt::format("{} {} batch {} context {} T {} {}", r.row.model, r.row.method, r.row.batch, r.row.context,
                       r.row.drafts, r.row.state_dtype);
  };
  int within = 0;
  for (const auto& [method, n] : by_method) within += n.first;
  fmt::print("profile {} ({} points in the profile of the first row):\n", v.front().profile, v.front().profile_points);
  fmt::print("  step within 10%: {} of {} (", within, v.size());
  bool first = true;
  for (const auto& [method, n] : by_method)
    fmt::print("{}{} {} of {}", first ? "" : ", ", method, n.first, n.second), first = false;
  fmt::print("); worst {:+.1f}% ({})\n", 100 * worst->step_error(), where(*worst));
  fmt::print("  speedup within 10%: {} of {}", speedups_within, speedups);
  if (worst_speedup) fmt::print("; worst {:+.1f}% ({})", 100 * worst_speedup->speedup_error(), where(*worst_speedup));
  fmt::print("\n  term sources:");
  for (int t = 0; t < kOperatorTerms; ++t) {
    fmt::print(" {}", operator_term_name(OperatorTerm(t)));
    for (const auto& [name, n] : sources[t]) fmt::print(" {} {}", name, n);
    fmt::print(t + 1 < kOperatorTerms ? ";" : "\n");
  }
  if (!worst_terms.empty()) {
    fmt::print("  term furthest from its measurement where the step misses by > 10%:");
    for (const auto& [term, n] : worst_terms) fmt::print(" {} {}", term, n);
    fmt::print("\n");
  }
  return outside;
}

int run_validate_step(const ValidateStepOptions& o) {
  GpuSpec gpu;
  try {
    gpu = find_gpu(o.gpu);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string("--gpu: ") + e.what());
  }
  const std::vector<StepProfile> steps = read_rows("--step-csv", o.step_csv);
  int with_step = 0;
  for (const StepProfile& p : steps) with_step += p.measured_step_us > 0;
  if (with_step == 0) throw UsageError("--step-csv: no row with a measured whole step (measured_step_us)");
  std::vector<std::vector<ProfileValidationRow>> runs;
  runs.push_back(validate_with_profiles(steps, nullptr, gpu));
  if (!o.profile_csv.empty()) {
    const std::vector<StepProfile> separate = read_rows("--profile", o.profile_csv);
    if (separate.empty()) throw UsageError("--profile: no measured rows");
    runs.push_back(validate_with_profiles(steps, &separate, gpu));
  }
  std::unique_ptr<CsvWriter> csv;
  if (!o.out.empty()) {
    try {
      csv = std::make_unique<CsvWriter>(
          o.out, std::vector<std::string>{
                     "profile", "profile_points", "model", "tp", "batch", "context", "method", "state_dtype", "chunk",
                     "drafts", "routing", "expert_gemm", "measured_step_us", "predicted_step_us", "step_error",
                     "measured_speedup", "predicted_speedup", "speedup_error", "measured_linear_us",
                     "predicted_linear_us", "linear_error", "measured_attention_us", "predicted_attention_us",
                     "attention_error", "attention_source", "measured_gemm_us", "predicted_gemm_us", "gemm_error",
                     "gemm_source", "measured_elementwise_us", "predicted_elementwise_us", "elementwise_error",
                     "elementwise_source", "modelled_comm_us", "worst_term", "measured_commit"});
    } catch (const std::runtime_error& e) {
      throw UsageError(fmt::format("--out: {}", e.what()));
    }
  }
  fmt::print("validate-step: {} measured steps of {}; predicted step = linear (measured kernel tables) + attention + "
             "GEMM/MoE + elementwise (profile) + TP comm (modelled)\n",
             with_step, o.step_csv);
  // --require-within checks the separate run where there is one (the profile at the same shapes), else
  // the leave-point-out profiles.
  int outside = 0;
  for (size_t i = 0; i < runs.size(); ++i) {
    const auto& v = runs[i];
    const int missed = summarize(v, o.require_within);
    if (i + 1 == runs.size()) outside = missed;
    if (!csv) continue;
    for (const ProfileValidationRow& r : v) {
      const StepProfile& p = r.row;
      auto f3 = [](double x) { return fmt::format("{:.3f}", x); };
      auto err = [](double pred, double meas) { return meas > 0 ? fmt::format("{:.4f}", pred / meas - 1) : ""; };
      std::vector<std::string> cells = {
          r.profile, std::to_string(r.profile_points), p.model, std::to_string(p.tp), std::to_string(p.batch),
          std::to_string(p.context), p.method, p.state_dtype, std::to_string(p.chunk), std::to_string(p.drafts),
          p.routing, p.expert_gemm, f3(p.measured_step_us), f3(r.total()), fmt::format("{:.4f}", r.step_error()),
          p.measured_speedup > 0 ? fmt::format("{:.4f}", p.measured_speedup) : "",
          r.has_speedup() ? fmt::format("{:.4f}", r.predicted_speedup) : "",
          r.has_speedup() ? fmt::format("{:.4f}", r.speedup_error()) : ""};
      for (int t = 0; t < 4; ++t) {
        cells.push_back(f3(r.measured_term(t)));
        cells.push_back(f3(r.predicted_term(t)));
        cells.push_back(err(r.predicted_term(t), r.measured_term(t)));
        if (t > 0) cells.push_back(term_source_name(r.sources[t - 1]));
      }
      cells.insert(cells.end(), {f3(r.comm_us), r.worst_term(), p.commit});
      csv->row(cells);
    }
  }
  if (csv) fmt::print("wrote {}\n", o.out);
  if (o.require_within > 0 && outside > 0) {
    fmt::print("FAILED: {} point(s) with a step or speedup error above {:.1f}%\n", outside, 100 * o.require_within);
    return 1;
  }
  return 0;
}

}  // namespace

Command add_validate_step_command(CLI::App& app) {
  auto o = std::make_shared<ValidateStepOptions>();
  Command c;
  c.app = app.add_subcommand("validate-step",
                             "check the profile-based step (attention, GEMM/MoE, elementwise from measured operator "
                             "profiles) against every measured whole step; no GPU needed");
  c.app->add_option("--step-csv", o->step_csv, "measured step rows (`kvbuf step --measure --out`)")->required();
  c.app->add_option("--profile", o->profile_csv,
                    "also predict from this separate run's terms (`kvbuf step --measure --terms-only --out`)");
  c.app->add_option("--out", o->out, "write every checked point to this CSV file");
  c.app->add_option("--gpu", o->gpu, "catalog GPU of the parametric terms beyond the profile's range")
      ->check(CLI::IsMember(gpu_names()))
      ->capture_default_str();
  c.app->add_option("--require-within", o->require_within,
                    "exit 1 when a step or speedup error exceeds this fraction (0: report only); with --profile "
                    "checks the separate run's predictions, else the leave-point-out ones")
      ->check(CLI::Range(0.0, 10.0))
      ->capture_default_str();
  c.run = [o] { return run_validate_step(*o); };
  return c;
}

}  // namespace kvbuf::cli
