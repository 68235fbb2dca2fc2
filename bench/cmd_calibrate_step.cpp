// `kvbuf calibrate-step` (any build, no GPU: it reads a CSV): fits the step model's attention,
// GEMM/MoE and elementwise terms to the measured whole-step profiles that `kvbuf step --measure`
// wrote (sim/step_calibration.h) and stores the coefficients in the calibration JSON that
// `kvbuf step` and `kvbuf simulate` read; with --holdout it validates the fit on held-out points.
#include <fmt/format.h>

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

}  // namespace kvbuf::cli
