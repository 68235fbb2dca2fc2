// `kvbuf simulate`: the continuous-batching serving simulator (sim/serving.h) on the whole-model
// step model (sim/step_model.h); `kvbuf step`: the step model's terms per batch, classic against
// KVBuffer, (--held-out) the check of the measured tables' interpolation against points held out, and
// (--measure) the whole step run on the GPU next to the model's terms (bench/step/).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>

#include "bench/cmd_common.h"
#include "bench/csv.h"
#ifdef KVBUF_WITH_STEP_RUNNER
#include "bench/step/step_measure.h"
#include "bench/step/step_plan.h"
#endif
#include "sim/serving.h"
#include "sim/step_calibration.h"
#include "sim/step_model.h"

namespace kvbuf::cli {
namespace {

// Options both commands share: the model, GPU, method parameters and the measured tables.
struct StepOptions {
  std::string model;
  std::string gpu = "h200";
  int tp = 1;
  int chunk = 16;
  int drafts = 0;
  double accept_rate = 0.7;
  std::string calibration = "auto";
  std::string results_dir = KVBUF_RESULTS_DIR;
  std::string state_dtype = "fp32";
  std::string profile = "auto";

  void add_to(CLI::App* c, bool model_required) {
    auto* m = c->add_option("--model", model, "catalog model name (see `kvbuf models`)");
    if (model_required) m->required();
    c->add_option("--gpu", gpu, "catalog GPU: h200 (measured), the others from their datasheets until `kvbuf calibrate` runs there")
        ->check(CLI::IsMember(gpu_names()))
        ->capture_default_str();
    c->add_option("--tp", tp, "tensor-parallel degree")->check(positive_integer())->capture_default_str();
    c->add_option("--chunk", chunk, "KVBuffer capacity C")
        ->check(CLI::Range(1, kMaxBufferCapacity))
        ->capture_default_str();
    c->add_option("--drafts", drafts, "speculative decoding: tokens verified per step T (0: off)")
        ->check(non_negative_integer())
        ->capture_default_str();
    c->add_option("--accept-rate,--acceptance", accept_rate, "probability that each draft is accepted")
        ->check(CLI::Range(0.0, 1.0))
        ->capture_default_str();
    c->add_option("--calibration", calibration,
                  "JSON file written by `kvbuf calibrate` on the GPU; auto: <results>/calibrate_<gpu>.json where "
                  "it exists (the H200's is committed); none: the GPU table's values")
        ->capture_default_str();
    c->add_option("--results", results_dir, "directory of the measured tables (decode_h200.csv, verify_h200.csv)")
        ->capture_default_str();
    c->add_option("--state-dtype", state_dtype,
                  "the linear-attention state's element type, both methods (bf16, fp16: the tables decode16_h200.csv "
                  "and verify16_h200.csv)")
        ->capture_default_str()
        ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
    c->add_option("--profile", profile,
                  "operator profile: a step CSV (`kvbuf step --measure [--terms-only] --out`) whose measured attention, "
                  "GEMM/MoE and elementwise terms replace the parametric ones where it covers the configuration; auto: "
                  "<results>/step_<gpu>.csv where it exists (the H200's is committed), except under `step --measure`, "
                  "whose simulated columns stay independent of the measurement; none: the parametric terms")
        ->capture_default_str();
  }

  // The operator profile's file: --profile's, or under auto the GPU's committed step CSV where one exists
  // and the step is not being measured (its simulated columns must not be fitted to itself); "" for none.
  std::string profile_path(bool measuring = false) const {
    if (profile == "none" || profile.empty()) return "";
    if (profile != "auto") return profile;
    const std::string file = results_dir + "/step_" + gpu + ".csv";
    return !measuring && std::filesystem::is_regular_file(file) ? file : "";
  }
  // The operator profile (null when profile_path is empty).
  std::shared_ptr<const StepProfileTable> profile_table(bool measuring = false) const {
    const std::string file = profile_path(measuring);
    if (file.empty()) return nullptr;
    try {
      return std::make_shared<const StepProfileTable>(profile_points(read_step_profiles(file)));
    } catch (const std::exception& e) {
      throw UsageError(std::string("--profile: ") + e.what());
    }
  }

  GpuSpec gpu_spec() const {
    GpuSpec g;
    try {
      g = find_gpu(gpu);
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("--gpu: ") + e.what());
    }
    std::string file = calibration;
    if (calibration == "auto") {
      file = results_dir + "/calibrate_" + g.name + ".json";
      if (!std::ifstream(file)) return g;
    }
    if (file == "none") return g;
    try {
      return apply_calibration(g, read_calibration(file));
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("--calibration: ") + e.what());
    }
  }
  // The measured tables of the model's layer family (GDN when no model is given).
  MeasuredLinearTable table() const {
    const LayerKind kind = model.empty() ? LayerKind::GatedDeltaNet : config_model().kind;
    if (!std::filesystem::is_directory(results_dir)) throw UsageError("--results: no directory '" + results_dir + "'");
    try {
      return MeasuredLinearTable::load(results_dir, kind, parse_state_type(state_dtype));
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("--results: ") + e.what());
    }
  }
  ModelSpec config_model() const {
    try {
      return find_model(model);
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("--model: ") + e.what());
    }
  }
  StepConfig config(DecodeMethod method, const GpuSpec& g) const {
    StepConfig c;
    c.model = config_model();
    c.tp = tp;
    c.gpu = g;
    c.method = method;
    c.chunk = chunk;
    c.drafts = drafts;
    c.acceptance = accept_rate;
    c.state = parse_state_type(state_dtype);
    return c;
  }
};

StepModel make_model(const StepConfig& c, const MeasuredLinearTable& t,
                     std::shared_ptr<const StepProfileTable> profile = nullptr) {
  try {
    return StepModel(c, t, std::move(profile));
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
}

std::string gpu_line(const GpuSpec& g, const StepProfileTable* profile = nullptr, const std::string& profile_path = "") {
  const std::string profiled =
      profile ? fmt::format("\nprofile {}: {} measured points; attention, GEMM/MoE and elementwise from it where it covers "
                            "the model, tp, drafts and routing (log-log interpolation), else the terms above",
                            profile_path, profile->points())
              : std::string();
  return fmt::format("GPU {}: {:.0f} GiB, read {:.0f} GB/s, copy {:.0f} GB/s, bf16 GEMM {:.0f} TFLOP/s, "
                     "kernel overhead {:.1f} us ({}); {}",
                     g.name, g.memory_bytes / (1024.0 * 1024 * 1024), g.read_gbps, g.copy_gbps, g.gemm_tflops,
                     g.kernel_overhead_us, g.overhead_measured ? "calibrated" : "assumed", g.source) +
         (g.step_terms.fitted
              ? fmt::format("\nterms: linear attention from the measured kernel tables; full attention, GEMM/MoE and "
                            "elementwise (overhead) fitted to {} measured step profiles (commit {}); TP comm modelled",
                            g.step_terms.rows, g.step_terms.source)
              : std::string("\nterms: linear attention from the measured kernel tables; full attention and GEMM/MoE "
                            "bytes over bandwidth (GEMM rooflines), elementwise as per-kernel overhead; TP comm "
                            "modelled")) +
         profiled;
}

struct SimulateOptions {
  StepOptions step;
  std::string method;
  double rate = 0, duration = 0;
  std::string trace;
  long prompt_tokens = 1024, output_tokens = 256;
  uint64_t seed = 1;
  double mem_fraction = 0.9;
  int max_batch = 0;
  double timeline_every_s = 0;
  std::string csv;
  CLI::Option* rate_option = nullptr;
  CLI::Option* duration_option = nullptr;
};

int run_simulate(const SimulateOptions& o) {
  const bool poisson = o.rate_option->count() > 0;
  if (poisson == !o.trace.empty())
    throw UsageError("give either --rate R --duration S or --trace FILE");
  if (poisson && o.duration_option->count() == 0) throw UsageError("--rate needs --duration");
  if (!poisson && o.duration_option->count() > 0) throw UsageError("--duration goes with --rate");
  const DecodeMethod method = parse_method(o.method);
  const GpuSpec gpu = o.step.gpu_spec();
  const auto profile = o.step.profile_table();
  const StepModel model = make_model(o.step.config(method, gpu), o.step.table(), profile);
  std::vector<ServingRequest> requests;
  try {
    requests = poisson ? poisson_requests(o.rate, o.duration, o.prompt_tokens, o.output_tokens, o.seed)
                       : read_trace(o.trace);
  } catch (const std::invalid_argument& e) {
    throw UsageError(std::string(poisson ? "" : "--trace: ") + e.what());
  }
  if (requests.empty()) throw UsageError("no request arrives within --duration at this --rate");
  ServingConfig sc;
  sc.seed = o.seed;
  sc.memory_fraction = o.mem_fraction;
  sc.max_batch = o.max_batch;
  sc.timeline_every_s = o.timeline_every_s;
  ServingResult r;
  try {
    r = simulate_serving(model, sc, requests, [](long done, long total, double sim_s) {
      fmt::print(stderr, "simulate: {} / {} requests done, {:.1f} s simulated\n", done, total, sim_s);
    });
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }

  const StepConfig& c = model.config();
  fmt::print("simulate: {} on {} x tp {}, method {}{}{}, {} requests ({})\n", c.model.name, gpu.name, c.tp,
             method_name(method), method == DecodeMethod::KVBuffer ? fmt::format(" C = {}", c.chunk) : "",
             c.drafts ? fmt::format(", speculative T = {} at acceptance {} (E[m] = {:.3f})", c.drafts,
                                    c.acceptance, model.expected_emitted())
                      : "",
             r.requests, poisson ? fmt::format("Poisson {} /s over {} s, seed {}", o.rate, o.duration, o.seed)
                                 : o.trace);
  fmt::print("{}\n", gpu_line(gpu, profile.get(), o.step.profile_path()));
  fmt::print("memory: {:.1f} GB usable ({:.0f}% of the GPU), weights {:.1f} GB per GPU, peak {:.1f} GB\n",
             r.memory_limit_bytes / 1e9, 100 * o.mem_fraction, r.weight_bytes / 1e9, r.peak_memory_bytes / 1e9);
  fmt::print("throughput: {:.1f} output tokens/s ({} tokens in {:.2f} s), {} decode steps\n", r.throughput_tok_s,
             r.output_tokens, r.makespan_s, r.steps);
  fmt::print("concurrency: max {}, mean {:.1f} running requests\n", r.max_running, r.mean_running);
  auto pct = [](const char* what, const Percentiles& p, double scale, const char* unit) {
    fmt::print("{:<6} p50 {:.3f} {}, p90 {:.3f}, p99 {:.3f}, mean {:.3f}\n", what, p.p50 * scale, unit,
               p.p90 * scale, p.p99 * scale, p.mean * scale);
  };
  pct("TTFT", r.ttft_s, 1, "s");
  pct("TPOT", r.tpot_s, 1e3, "ms");
  pct("queue", r.queue_s, 1, "s");
  const StepTerms& m = r.mean_step;
  fmt::print("mean decode step {:.1f} us: linear attention {:.1f} ({}), full-attention KV {:.1f}, projections "
             "{:.1f}, MLP/MoE {:.1f}, LM head {:.1f}, overhead {:.1f}, TP comm {:.1f}\n",
             m.total_us(), m.linear_attn_us, linear_source_name(r.linear_source), m.attn_kv_us, m.projections_us,
             m.mlp_us, m.lm_head_us, m.overhead_us, m.comm_us);
  if (!o.csv.empty()) {
    std::unique_ptr<CsvWriter> csv;
    try {
      csv = std::make_unique<CsvWriter>(
          o.csv, std::vector<std::string>{"time_s", "step_us", "prefill_us", "running", "waiting", "tokens",
                                          "memory_bytes", "model", "gpu", "tp", "method", "chunk", "drafts",
                                          "acceptance", "state_dtype"});
    } catch (const std::runtime_error& e) {
      throw UsageError(fmt::format("--csv: {}", e.what()));
    }
    for (const TimelineRow& row : r.timeline)
      csv->row({fmt::format("{:.6f}", row.time_s), fmt::format("{:.3f}", row.step_us),
                fmt::format("{:.3f}", row.prefill_us), std::to_string(row.running), std::to_string(row.waiting),
                std::to_string(row.tokens), fmt::format("{:.0f}", row.memory_bytes), c.model.name, gpu.name,
                std::to_string(c.tp), method_name(method), std::to_string(c.chunk), std::to_string(c.drafts),
                fmt::format("{}", c.acceptance), state_type_name(c.state)});
    fmt::print("wrote {} ({} rows)\n", o.csv, r.timeline.size());
  }
  return 0;
}

struct StepCmdOptions {
  StepOptions step;
  std::vector<int> batches = {1, 8, 32, 64, 128, 256, 512};
  std::vector<long> contexts = {4096};
  bool held_out = false;
  std::string csv;
  bool measure = false;
  std::vector<std::string> methods = {"classic", "kvbuffer"};
  std::string out;
  double budget_s = 0.3;
  uint64_t seed = 1;
  std::string routing = "uniform";
  std::string expert_gemm = "grouped";
  bool terms_only = false;
};

int run_held_out(const StepCmdOptions& o) {
  const GpuSpec gpu = o.step.gpu_spec();
  const MeasuredLinearTable table = o.step.table();
  if (table.empty())
    throw UsageError("--held-out: no measured tables of this layer family in '" + o.step.results_dir + "'");
  const std::vector<int> held = {8, 64, 256};
  const StateType state = parse_state_type(o.step.state_dtype);
  const std::vector<HeldOutRow> rows = held_out_check(table, gpu, held, state);
  fmt::print("held-out check: {} measured per-layer latencies ({} shapes, {} states) at batches 8, 64, 256, predicted\n"
             "by the tables without them (interpolated over batch) and by the bytes model over {}'s bandwidth\n\n",
             rows.size(), table.reference().name, state_type_name(state), gpu.name);
  fmt::print("{:<16} {:>5} {:>3} {:>3} {:>11} {:>11} {:>7} {:>11} {:>7}\n", "kernel", "batch", "C", "T",
             "measured", "predicted", "error", "bytes/bw", "error");
  double worst = 0, worst_modelled = 0;
  for (const HeldOutRow& r : rows) {
    fmt::print("{:<16} {:>5} {:>3} {:>3} {:>11.2f} {:>11.2f} {:>+6.1f}% {:>11.2f} {:>+6.1f}%\n",
               linear_kernel_name(r.measured.kernel), r.measured.batch, r.measured.chunk, r.measured.drafts,
               r.measured.latency_us, r.predicted_us, 100 * r.error(), r.modelled_us, 100 * r.modelled_error());
    worst = std::max(worst, std::abs(r.error()));
    worst_modelled = std::max(worst_modelled, std::abs(r.modelled_error()));
  }
  fmt::print("\nlargest error: interpolated {:.1f}%, bytes model {:.1f}%\n", 100 * worst, 100 * worst_modelled);
  return 0;
}

int run_step_measure(const StepCmdOptions& o, const GpuSpec& gpu, const MeasuredLinearTable& table) {
#ifdef KVBUF_WITH_STEP_RUNNER
  if (o.step.drafts > 8) throw UsageError("--measure: --drafts at most 8 (the verify kernels' T)");
  step::MeasureArgs a;
  a.model = o.step.config_model();
  a.tp = o.step.tp;
  a.batches = o.batches;
  a.contexts = o.contexts;
  for (const std::string& m : o.methods) a.methods.push_back(parse_method(m));
  a.chunk = o.step.chunk;
  a.drafts = o.step.drafts;
  a.acceptance = o.step.accept_rate;
  a.terms_only = o.terms_only;
  a.state = parse_state_type(o.step.state_dtype);
  a.out = o.out;
  a.routing = step::parse_routing(o.routing);
  a.grouped_expert_gemm = o.expert_gemm == "grouped";
  a.budget_s = o.budget_s;
  a.seed = o.seed;
  a.commit = source_commit();
  const auto profile = o.step.profile_table(/*measuring=*/true);
  std::map<DecodeMethod, StepModel> models;
  for (DecodeMethod m : a.methods) {
    StepConfig sc = o.step.config(m, gpu);
    sc.routing = o.routing;
    models.emplace(m, make_model(sc, table, profile));
  }
  a.emitted_per_request = models.begin()->second.expected_emitted();
  a.simulate = [&models](DecodeMethod m, int batch, long context) { return models.at(m).step_uniform(batch, context); };
  try {
    step::rank_shapes(a.model, a.tp);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  if (!o.out.empty() && !std::ofstream(o.out, std::ios::app)) throw UsageError("--out: cannot write '" + o.out + "'");
  fmt::print("{}\n", gpu_line(gpu, profile.get(), o.step.profile_path(/*measuring=*/true)));
  return step::run_step_measure(a);
#else
  (void)o, (void)gpu, (void)table;
  throw UsageError("kvbuf step --measure requires a CUDA build with FlashInfer's headers (scripts/install_deps.sh)");
#endif
}

int run_step(const StepCmdOptions& o) {
  if (o.held_out) return run_held_out(o);
  if (o.step.model.empty()) throw UsageError("--model is required (unless --held-out)");
  require_positive("--batch", o.batches);
  const GpuSpec gpu = o.step.gpu_spec();
  const MeasuredLinearTable table = o.step.table();
  if (o.measure) return run_step_measure(o, gpu, table);
  if (!o.out.empty()) throw UsageError("--out goes with --measure (the simulated rows: --csv)");
  if (o.terms_only) throw UsageError("--terms-only goes with --measure");
  const auto profile = o.step.profile_table();
  const StepModel classic = make_model(o.step.config(DecodeMethod::Classic, gpu), table, profile);
  const StepModel kvb = make_model(o.step.config(DecodeMethod::KVBuffer, gpu), table, profile);
  const StepConfig& c = kvb.config();
  fmt::print("step model: {} on {} x tp {}, context {} tokens per request, {} states, KVBuffer C = {}{}\n",
             c.model.name, gpu.name, c.tp, fmt::join(o.contexts, ", "), state_type_name(c.state), c.chunk,
             c.drafts ? fmt::format(", speculative T = {} at acceptance {}", c.drafts, c.acceptance) : "");
  fmt::print("{}\n", gpu_line(gpu, profile.get(), o.step.profile_path()));
  if (c.drafts > 0)
    fmt::print("speculative T = {}: E[m] = {:.3f} tokens emitted per request and step at acceptance {}\n", c.drafts,
               kvb.expected_emitted(), c.acceptance);
  fmt::print("us per decode step: linear attention (source), full-attention KV, projections, MLP/MoE, LM head, "
             "overhead (elementwise), TP comm; terms: where attention / GEMM-MoE / elementwise came from (p profile, "
             "x profile-extrapolated beyond its range, m parametric)\n\n");
  fmt::print("{:>5} {:>7} {:<9} {:>9} {:>13} {:>8} {:>8} {:>8} {:>7} {:>8} {:>7} {:>9} {:>5} {:>7} {:>8} {:>10} {:>10}\n",
             "batch", "context", "method", "linear", "source", "attn KV", "proj", "mlp", "lmhead", "overhd", "comm",
             "total", "terms", "linear%", "speedup", "tok/s/req", "tok/s/GPU");
  std::unique_ptr<CsvWriter> csv;
  if (!o.csv.empty()) {
    try {
      csv = std::make_unique<CsvWriter>(
          o.csv, std::vector<std::string>{"model", "gpu", "tp", "method", "batch", "context", "chunk", "drafts",
                                          "acceptance", "linear_attn_us", "linear_source", "attn_kv_us",
                                          "projections_us", "mlp_us", "lm_head_us", "overhead_us", "comm_us",
                                          "total_us", "attention_source", "gemm_source", "elementwise_source",
                                          "emitted_per_request", "tokens_per_s_per_request", "tokens_per_s_per_gpu",
                                          "speedup_vs_classic", "state_dtype"});
    } catch (const std::runtime_error& e) {
      throw UsageError(fmt::format("--csv: {}", e.what()));
    }
  }
  for (long context : o.contexts) {
    for (int b : o.batches) {
      const StepTerms tc = classic.step_uniform(b, context);
      const StepTerms tk = kvb.step_uniform(b, context);
      for (const auto* pair : {&tc, &tk}) {
        const bool is_kvb = pair == &tk;
        const StepTerms& t = *pair;
        const double speedup = tc.total_us() / t.total_us();
        const StepModel& sm = is_kvb ? kvb : classic;
        const double per_request = sm.expected_emitted() / (t.total_us() * 1e-6);
        const double per_gpu = per_request * b / c.tp;
        std::string letters;
        for (TermSource s : t.operator_sources)
          letters += s == TermSource::Profile ? 'p' : s == TermSource::ProfileExtrapolated ? 'x' : 'm';
        fmt::print("{:>5} {:>7} {:<9} {:>9.1f} {:>13} {:>8.1f} {:>8.1f} {:>8.1f} {:>7.1f} {:>8.1f} {:>7.1f} {:>9.1f} "
                   "{:>5} {:>6.1f}% {:>7.3f}x {:>10.1f} {:>10.0f}\n",
                   b, context, is_kvb ? "kvbuffer" : "classic", t.linear_attn_us, linear_source_name(t.linear_source),
                   t.attn_kv_us, t.projections_us, t.mlp_us, t.lm_head_us, t.overhead_us, t.comm_us, t.total_us(),
                   letters, 100 * t.linear_attn_us / t.total_us(), speedup, per_request, per_gpu);
        if (csv)
          csv->row({c.model.name, gpu.name, std::to_string(c.tp), is_kvb ? "kvbuffer" : "classic", std::to_string(b),
                    std::to_string(context), std::to_string(c.chunk), std::to_string(c.drafts),
                    fmt::format("{}", c.acceptance), fmt::format("{:.3f}", t.linear_attn_us),
                    linear_source_name(t.linear_source), fmt::format("{:.3f}", t.attn_kv_us),
                    fmt::format("{:.3f}", t.projections_us), fmt::format("{:.3f}", t.mlp_us),
                    fmt::format("{:.3f}", t.lm_head_us), fmt::format("{:.3f}", t.overhead_us),
                    fmt::format("{:.3f}", t.comm_us), fmt::format("{:.3f}", t.total_us()),
                    term_source_name(t.operator_sources[0]), term_source_name(t.operator_sources[1]),
                    term_source_name(t.operator_sources[2]), fmt::format("{:.4f}", sm.expected_emitted()),
                    fmt::format("{:.2f}", per_request), fmt::format("{:.1f}", per_gpu),
                    fmt::format("{:.4f}", speedup), state_type_name(c.state)});
      }
    }
  }
  fmt::print("\nspeedup: classic step time / this step time (same batch, context, T); tokens per step = batch x "
             "E[m]; measured = interpolated from results/ (scaled to the model's layer by the bytes model), "
             "extrapolated = beyond the largest measured batch, modelled = bytes model / bandwidth\n");
  if (csv) fmt::print("wrote {}\n", o.csv);
  return 0;
}

}  // namespace

Command add_simulate_command(CLI::App& app) {
  auto o = std::make_shared<SimulateOptions>();
  Command c;
  c.app = app.add_subcommand("simulate", "continuous-batching serving simulation: throughput, TTFT, TPOT, memory");
  o->step.add_to(c.app, true);
  c.app->add_option("--method", o->method, "classic | kvbuffer")
      ->required()
      ->check(CLI::IsMember({"classic", "kvbuffer"}));
  o->rate_option = c.app->add_option("--rate", o->rate, "Poisson arrivals per second")->check(positive_number());
  o->duration_option =
      c.app->add_option("--duration", o->duration, "seconds of Poisson arrivals")->check(positive_number());
  c.app->add_option("--trace", o->trace, "CSV trace: arrival_s,prompt_tokens,output_tokens");
  c.app->add_option("--prompt-tokens", o->prompt_tokens, "Poisson: mean prompt length (uniform in [L/2, 3L/2])")
      ->check(positive_integer())
      ->capture_default_str();
  c.app->add_option("--output-tokens", o->output_tokens, "Poisson: mean output length (uniform in [L/2, 3L/2])")
      ->check(positive_integer())
      ->capture_default_str();
  c.app->add_option("--seed", o->seed, "seed of arrivals, lengths and acceptance draws")->capture_default_str();
  c.app->add_option("--mem-fraction", o->mem_fraction, "fraction of GPU memory for weights and pools")
      ->check(CLI::Range(0.01, 1.0))
      ->capture_default_str();
  c.app->add_option("--max-batch", o->max_batch, "most running requests (0: memory decides)")
      ->check(non_negative_integer())
      ->capture_default_str();
  c.app->add_option("--csv", o->csv, "write the timeline (one row per step) to this CSV file");
  c.app->add_option("--timeline-every-s", o->timeline_every_s,
                    "one timeline row per this many simulated seconds (tokens summed; 0: every step)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  c.run = [o] { return run_simulate(*o); };
  return c;
}

Command add_step_command(CLI::App& app) {
  auto o = std::make_shared<StepCmdOptions>();
  Command c;
  c.app = app.add_subcommand("step", "whole-model decode step, term by term: classic against KVBuffer");
  o->step.add_to(c.app, false);
  c.app->add_option("--batch", o->batches, "batch sizes")->delimiter(',')->check(positive_integer());
  c.app->add_option("--context", o->contexts, "context lengths of every request (tokens)")
      ->delimiter(',')
      ->check(positive_integer())
      ->capture_default_str();
  c.app->add_flag("--held-out", o->held_out,
                  "check the measured tables' interpolation against the points at batch 8, 64, 256 held out");
  c.app->add_option("--csv", o->csv, "also write the rows to this CSV file");
  c.app->add_flag("--measure", o->measure,
                  "run the whole step on the GPU (random weights of the model's shapes, one CUDA graph) and print each "
                  "term measured next to the simulated one (CUDA builds)");
  c.app->add_option("--method", o->methods, "--measure: methods, classic and/or kvbuffer")
      ->delimiter(',')
      ->check(CLI::IsMember({"classic", "kvbuffer"}))
      ->capture_default_str();
  c.app->add_option("--out", o->out, "--measure: write the measured rows to this CSV file");
  c.app->add_flag("--terms-only", o->terms_only,
                  "--measure: time each term's kernels alone, not the whole step (an operator profile for --profile "
                  "and `kvbuf validate-step --profile`; the step columns stay empty)");
  c.app->add_option("--budget-s", o->budget_s, "--measure: seconds of timed samples per graph")
      ->check(positive_number())
      ->capture_default_str();
  c.app->add_option("--seed", o->seed, "--measure: seed of the random weights, caches and pools")->capture_default_str();
  c.app->add_option("--routing", o->routing,
                    "--measure, MoE layers: uniform (the router's logits as they come) or skewed (Zipf popularity over "
                    "the experts added to the logits)")
      ->check(CLI::IsMember({"uniform", "skewed"}))
      ->capture_default_str();
  c.app->add_option("--expert-gemm", o->expert_gemm,
                    "--measure, MoE layers: grouped (one cublasGemmGroupedBatchedEx per projection) or loop (one "
                    "cublasGemmEx per active expert)")
      ->check(CLI::IsMember({"grouped", "loop"}))
      ->capture_default_str();
  c.run = [o] { return run_step(*o); };
  return c;
}

}  // namespace kvbuf::cli
