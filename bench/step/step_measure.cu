#include "bench/step/step_measure.h"

#include <fmt/format.h>

#include <map>
#include <memory>

#include "bench/csv.h"
#include "bench/gpu_telemetry.h"
#include "bench/gpu_timing.h"
#include "bench/step/step_runner.h"

namespace kvbuf::step {
namespace {

std::string us(double x) { return fmt::format("{:.3f}", x); }

// The simulator's terms grouped as the runner measures them: the projections, MLP / MoE and LM
// head are the GEMMs; its per-kernel overhead stands for the elementwise kernels (it has no
// elementwise term of its own).
struct SimGroups {
  double total = 0, linear = 0, attention = 0, gemm = 0, elementwise = 0, comm = 0;
};
SimGroups groups(const StepTerms& t) {
  return {t.total_us(), t.linear_attn_us, t.attn_kv_us, t.projections_us + t.mlp_us + t.lm_head_us, t.overhead_us,
          t.comm_us};
}

}  // namespace

std::vector<std::string> measure_columns() {
  return {"model", "tp", "batch", "context", "method", "state_dtype", "chunk", "drafts", "routing", "expert_gemm",
          "measured_step_us", "simulated_step_us",
          "measured_linear_us", "simulated_linear_us", "measured_attention_us", "simulated_attention_us",
          "measured_gemm_us", "simulated_gemm_us", "measured_elementwise_us", "simulated_elementwise_us",
          "modelled_comm_us", "measured_speedup", "simulated_speedup", "step_us_min", "step_us_max", "samples",
          "attention_split_kv", "weights_gib", "acceptance", "emitted_per_request", "tokens_per_s_per_request",
          "tokens_per_s_per_gpu", "gpu", "commit", "note"};
}

int run_step_measure(const MeasureArgs& a) {
  if (!gpu_present()) throw std::runtime_error("kvbuf step --measure: no CUDA device answers");
  const RankShapes shapes = rank_shapes(a.model, a.tp);
  const std::string gpu = gpu_name();
  std::unique_ptr<CsvWriter> csv;
  if (!a.out.empty()) csv = std::make_unique<CsvWriter>(a.out, measure_columns());
  auto chunk_of = [&](DecodeMethod m) { return m == DecodeMethod::KVBuffer ? a.chunk : 0; };
  auto row = [&](const StepPoint& p, const std::vector<std::string>& measured, const std::string& note,
                 const std::string& expert_gemm) {
    std::vector<std::string> r = {a.model.name, std::to_string(a.tp), std::to_string(p.batch),
                                  std::to_string(p.context), method_name(p.method), state_type_name(p.state),
                                  std::to_string(chunk_of(p.method)), std::to_string(p.drafts), routing_name(p.routing),
                                  expert_gemm};
    r.insert(r.end(), measured.begin(), measured.end());
    r.insert(r.end(), {gpu, a.commit, note});
    if (csv) csv->row(r);
  };
  const size_t measured_fields = measure_columns().size() - 13;
  auto asked_gemm = [&](const StepPoint& p) -> std::string {
    return shapes.experts == 0 ? "none" : p.grouped_expert_gemm ? "grouped" : "loop";
  };

  // Weights first: a model whose weights do not fit refuses every point.
  if (a.batches.empty() || a.contexts.empty() || a.methods.empty())
    throw std::invalid_argument("step --measure: give at least one batch, context and method");
  StepPoint first;
  first.batch = a.batches.front(), first.context = a.contexts.front(), first.state = a.state;
  first.drafts = a.drafts;
  const MemoryPlan weights_only = [&] {
    MemoryPlan m = memory_plan(shapes, first);
    m.kv_cache = m.linear_pools = m.activations = 0;
    return m;
  }();
  std::string no_weights = memory_refusal(weights_only, double(gpu_free_bytes()));
  std::unique_ptr<StepRunner> runner;
  if (no_weights.empty()) {
    try {
      runner = std::make_unique<StepRunner>(shapes, a.seed);
    } catch (const std::runtime_error& e) {
      no_weights = std::string("allocating them failed: ") + e.what();
      cudaGetLastError();
    }
  }
  fmt::print("step --measure: {} tp {} (this rank: {} blocks, {} linear + {} attention layers, weights {:.2f} GiB) on {}"
             " | commit {}\n",
             a.model.name, a.tp, model_blocks(shapes.model).size(), shapes.model.linear_layers,
             shapes.model.attn_layers, weights_only.weights / double(1 << 30), gpu, a.commit);
  fmt::print("us per step, measured (simulated); terms: linear attention, full attention, GEMMs, elementwise{}\n",
             a.terms_only ? "; terms only (no whole step): step = their sum + modelled comm" : "");
  if (a.drafts > 0)
    fmt::print("speculative T = {} at acceptance {}: E[m] = {:.3f} tokens per request and step\n", a.drafts,
               a.acceptance, a.emitted_per_request);
  fmt::print("{:>5} {:>7} {:<9} {:>19} {:>19} {:>19} {:>19} {:>19} {:>15} {:>11} {:>11}\n", "batch", "context",
             "method", "step", "linear", "attention", "gemm", "elementwise", "speedup", "tok/s/req", "tok/s/GPU");
  int failed = 0;
  for (long context : a.contexts)
    for (int batch : a.batches) {
      std::map<DecodeMethod, std::pair<double, double>> totals;  // measured, simulated
      for (DecodeMethod method : a.methods) {
        StepPoint p;
        p.batch = batch, p.context = context, p.method = method, p.chunk = a.chunk, p.state = a.state;
        p.routing = a.routing, p.grouped_expert_gemm = a.grouped_expert_gemm;
        p.drafts = a.drafts, p.acceptance = a.acceptance;
        const SimGroups sim = groups(a.simulate(method, batch, context));
        std::string why = no_weights.empty() ? "" : "weights: " + no_weights;
        try {
          if (runner && !runner->prepare(p, &why)) why = "memory: " + why;
          if (!why.empty()) {
            fmt::print("{:>5} {:>7} {:<9} skipped: {}\n", batch, context, method_name(method), why);
            row(p, std::vector<std::string>(measured_fields), "skipped: " + why, asked_gemm(p));
            continue;
          }
          const MeasuredStep m = runner->measure(a.budget_s, !a.terms_only);
          // tp > 1: the all-reduces are the simulator's, added to the measured rank. Terms only: their sum.
          const double step =
              (a.terms_only ? m.linear.median_us + m.attention.median_us + m.gemm.median_us + m.elementwise.median_us
                            : m.total.median_us) +
              sim.comm;
          const double per_request = a.emitted_per_request / (step * 1e-6);
          const double per_gpu = per_request * batch / a.tp;
          totals[method] = {step, sim.total};
          std::string speed_m, speed_s;
          if (method == DecodeMethod::KVBuffer && totals.count(DecodeMethod::Classic)) {
            speed_m = fmt::format("{:.4f}", totals[DecodeMethod::Classic].first / step);
            speed_s = fmt::format("{:.4f}", totals[DecodeMethod::Classic].second / sim.total);
          }
          auto cell = [](double meas, double simu) { return fmt::format("{:.1f} ({:.1f})", meas, simu); };
          fmt::print("{:>5} {:>7} {:<9} {:>19} {:>19} {:>19} {:>19} {:>19} {:>15} {:>11.1f} {:>11.0f}\n", batch,
                     context, method_name(method), cell(step, sim.total), cell(m.linear.median_us, sim.linear),
                     cell(m.attention.median_us, sim.attention), cell(m.gemm.median_us, sim.gemm),
                     cell(m.elementwise.median_us, sim.elementwise),
                     speed_m.empty() ? "" : fmt::format("{} ({})", speed_m.substr(0, 5), speed_s.substr(0, 5)),
                     per_request, per_gpu);
          // A terms-only row has no whole step: its step columns stay empty, the terms are the profile.
          const bool whole = !a.terms_only;
          TelemetryMean clocks = m.total.telemetry;  // every timed graph's readings
          for (const TimingStats* t : {&m.linear, &m.attention, &m.gemm, &m.elementwise}) clocks.merge(t->telemetry);
          if (const std::string limits = clocks.clock_limit_note(); !limits.empty()) fmt::print("  {}\n", limits);
          row(p,
              {whole ? us(step) : "", us(sim.total), us(m.linear.median_us), us(sim.linear), us(m.attention.median_us),
               us(sim.attention), us(m.gemm.median_us), us(sim.gemm), us(m.elementwise.median_us),
               us(sim.elementwise), us(sim.comm), whole ? speed_m : "", speed_s, whole ? us(m.total.min_us) : "",
               whole ? us(m.total.max_us) : "", whole ? std::to_string(m.total.samples) : "",
               m.attention_split_kv ? "1" : "0", fmt::format("{:.3f}", runner->weight_bytes() / double(1 << 30)),
               a.drafts > 0 ? fmt::format("{}", a.acceptance) : "", fmt::format("{:.4f}", a.emitted_per_request),
               whole ? fmt::format("{:.2f}", per_request) : "", whole ? fmt::format("{:.1f}", per_gpu) : ""},
              note_with_clock_limits(std::string(a.terms_only ? "terms only" : "") + (a.terms_only && a.tp > 1 ? "; " : "") +
                                         (a.tp > 1 ? "TP all-reduce modelled (modelled_comm_us), the rest measured" : ""),
                                     clocks),
              runner->expert_gemm());
        } catch (const std::invalid_argument& e) {
          cudaGetLastError();
          fmt::print("{:>5} {:>7} {:<9} cannot run: {}\n", batch, context, method_name(method), e.what());
          row(p, std::vector<std::string>(measured_fields), std::string("cannot run: ") + e.what(), asked_gemm(p));
        } catch (const std::exception& e) {
          ++failed;
          cudaGetLastError();
          fmt::print("{:>5} {:>7} {:<9} FAILED: {}\n", batch, context, method_name(method), e.what());
          row(p, std::vector<std::string>(measured_fields), std::string("failed: ") + e.what(), asked_gemm(p));
        }
      }
    }
  fmt::print("speedup: classic step / KVBuffer step at the same batch and context, measured (simulated)\n");
  if (csv) fmt::print("wrote {}\n", a.out);
  return failed ? 1 : 0;
}

}  // namespace kvbuf::step
