// `kvbuf capacity`: the largest number of concurrent requests, classic speculative decoding against
// KVBuffer, modelled (sim/capacity.h) and, with --measure in CUDA builds, measured on the GPU, for
// one or more state dtypes (--state-dtype fp32,bf16,fp16 or all: one table, and CSV rows, each).
#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "bench/cmd_common.h"
#include "bench/csv.h"
#include "sim/capacity.h"
#ifdef KVBUF_WITH_CUDA
#include "bench/gpu_commands.h"
#include "bench/gpu_timing.h"
#endif

namespace kvbuf::cli {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

struct CapacityOptions {
  ModelOptions model;
  double gpu_mem_gib = 141;
  double weights_gib = 0;
  CLI::Option* weights_option = nullptr;  // weights_gib counts only when given
  long context = 32768;
  std::string drafts = "4";
  int chunk = 16;
  std::string scheduler = "reserve";
  std::string variant = "cached-u";
  std::string state_dtypes = "fp32";  // comma-separated, or "all"
  std::string csv;
  bool measure = false;
  bool count_scratch = false;
};

std::vector<int> parse_drafts(const std::string& s) {
  if (s == "all") return {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t next = s.find(',', pos);
    const std::string item =
        s.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
    size_t used = 0;
    int value = 0;
    try {
      value = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size())
      throw UsageError("--drafts: expected 'all' or integers T, got '" + s + "'");
    require_positive("--drafts", value);
    out.push_back(value);
    if (next == std::string::npos) break;
    pos = next + 1;
  }
  return out;
}

// --state-dtype: "all" or comma-separated state dtypes, each once, in the order given.
std::vector<StateType> parse_state_dtypes(const std::string& s) {
  if (s == "all") return {StateType::FP32, StateType::BF16, StateType::FP16};
  std::vector<StateType> out;
  size_t pos = 0;
  while (true) {
    const size_t next = s.find(',', pos);
    const StateType t = parse_state_type_option(s.substr(pos, next == std::string::npos ? std::string::npos : next - pos));
    if (std::find(out.begin(), out.end(), t) == out.end()) out.push_back(t);
    if (next == std::string::npos) break;
    pos = next + 1;
  }
  return out;
}

std::string state_dtype_list(const std::vector<StateType>& states) {
  std::string s;
  for (StateType t : states) s += (s.empty() ? "" : ", ") + std::string(state_type_name(t));
  return s;
}

int run_capacity(const CapacityOptions& o) {
  const std::vector<ModelSpec> before_tp = o.model.selected();
  const std::vector<ModelSpec> models = o.model.selected_after_tp();
  const std::vector<int> drafts = parse_drafts(o.drafts);
  const bool weights_given = o.weights_option->count() > 0;
  for (int T : drafts)
    if (T > o.chunk)
      throw UsageError(fmt::format(
          "--drafts T = {} exceeds buffer capacity --chunk C = {} (need T <= C)", T, o.chunk));
  const SchedulerPolicy scheduler = parse_scheduler(o.scheduler);
  const BufferVariant variant = parse_variant(o.variant);
  const std::vector<StateType> states = parse_state_dtypes(o.state_dtypes);
#ifndef KVBUF_WITH_CUDA
  if (o.measure) throw UsageError("kvbuf capacity --measure requires a CUDA build");
#endif

  std::unique_ptr<CsvWriter> csv;
  if (!o.csv.empty()) {
    try {
      csv = std::make_unique<CsvWriter>(
          o.csv, std::vector<std::string>{"model",
                                          "tp",
                                          "kind",
                                          "drafts",
                                          "chunk",
                                          "variant",
                                          "state_dtype",
                                          "scheduler",
                                          "verify_scratch_counted",
                                          "context_tokens",
                                          "gpu_memory_bytes",
                                          "weight_bytes",
                                          "pool_bytes",
                                          "classic_linear_bytes_per_request",
                                          "kvbuffer_linear_bytes_per_request",
                                          "attn_kv_bytes_per_request",
                                          "classic_max_requests_linear",
                                          "kvbuffer_max_requests_linear",
                                          "ratio_linear",
                                          "classic_max_requests_whole",
                                          "kvbuffer_max_requests_whole",
                                          "ratio_whole",
                                          "measured_classic_max_requests",
                                          "measured_kvbuffer_max_requests",
                                          "measured_ratio",
                                          "ratio_linear_allocated",
                                          "measured_over_model",
                                          "gpu",
                                          "commit"});
    } catch (const std::runtime_error& e) {
      throw UsageError(fmt::format("--csv: {}", e.what()));
    }
  }

  fmt::print(
      "capacity: {:.1f} GiB GPU memory, context {} tokens, C = {}, {} buffer entries, {} states, scheduler {} "
      "({}), tp {}\n",
      o.gpu_mem_gib, o.context, o.chunk, variant_name(variant), state_dtype_list(states), scheduler_name(scheduler),
      scheduler == SchedulerPolicy::Reserve
          ? "full-attention KV of the whole context reserved per request"
          : "half the context's full-attention KV per request on average",
      o.model.tp);
  fmt::print(
      "per request and linear-attention pool: classic = (1 + T) states and conv windows per layer, "
      "kvbuffer = 1 state + 1 conv window + C entries per layer{}\n\n",
      o.count_scratch ? " + T verify-scratch entries" : "");
  for (const ModelSpec& m : models)
    if (m.kind == LayerKind::Mamba2 && o.variant != "cached-u")
      throw UsageError("--variant applies to GDN only (a Mamba-2 entry is always x, B, dt, G)");
  for (StateType state : states) {
    if (states.size() > 1) fmt::print("{} states\n", state_type_name(state));
    fmt::print(
        "{:<27} {:>2} {:>8} {:>9} {:>11} {:>11} {:>9} {:>9} {:>7} | {:>10} {:>8} {:>8} {:>7}{}\n",
        "model", "T", "weights", "pool", "classic/req", "kvbuf/req", "classic", "kvbuf", "ratio",
        "+attn/req", "classic", "kvbuf", "ratio",
        o.measure ? " | measured classic kvbuf  ratio  vs model" : "");
    for (size_t i = 0; i < models.size(); ++i) {
      const ModelSpec& m = models[i];
      for (int T : drafts) {
        CapacityInputs in;
        in.model = m;
        in.gpu_memory_bytes = o.gpu_mem_gib * kGiB;
        in.weight_bytes =
            weights_given ? o.weights_gib * kGiB : default_weight_bytes(before_tp[i], o.model.tp);
        in.context = o.context;
        in.drafts = T;
        in.chunk = o.chunk;
        in.variant = variant;
        in.precision.state = state;
        in.scheduler = scheduler;
        in.count_verify_scratch = o.count_scratch;
        const CapacityResult r = capacity_model(in);
        // What --measure allocates: the KVBuffer pools with the T verify-scratch entries per layer.
        CapacityInputs allocated = in;
        allocated.count_verify_scratch = true;
        const double ratio_allocated = capacity_model(allocated).ratio_linear_pool;
        std::string measured_cells, mc, mk, mr, over, gpu;
#ifdef KVBUF_WITH_CUDA
        if (o.measure) {
          CapacityMeasureArgs args;
          args.model = m;
          args.drafts = T;
          args.chunk = o.chunk;
          args.state = state;
          args.budget_bytes = r.pool_bytes;
          args.kvbuffer = false;
          const CapacityMeasured classic = measure_capacity_on_gpu(args);
          args.kvbuffer = true;
          const CapacityMeasured kvb = measure_capacity_on_gpu(args);
          gpu = gpu_name();
          mc = std::to_string(classic.max_requests);
          mk = std::to_string(kvb.max_requests);
          if (classic.max_requests) {
            const double measured_ratio = double(kvb.max_requests) / classic.max_requests;
            mr = fmt::format("{:.4f}", measured_ratio);
            over = fmt::format("{:.4f}", measured_ratio / ratio_allocated);
          }
          measured_cells = fmt::format(" | {:>16} {:>5} {:>6} {:>9}", mc, mk, mr.empty() ? "-" : mr + "x",
                                       over.empty() ? "-" : fmt::format("{:+.1f}%", 100 * (std::stod(over) - 1)));
          // The two runs share their conditions: one note unless they differ.
          if (!classic.note.empty()) measured_cells += " (" + classic.note + ")";
          if (!kvb.note.empty() && kvb.note != classic.note) measured_cells += " (" + kvb.note + ")";
        }
#endif
        fmt::print(
            "{:<27} {:>2} {:>8} {:>9} {:>11} {:>11} {:>9} {:>9} {:>6.3f}x | {:>10} {:>8} {:>8} "
            "{:>6.3f}x{}\n",
            m.name, T, fmt::format("{:.1f}G", in.weight_bytes / kGiB),
            fmt::format("{:.1f}G", r.pool_bytes / kGiB),
            fmt::format("{:.1f}M", r.classic.linear_bytes_per_request / (1024 * 1024)),
            fmt::format("{:.1f}M", r.kvbuffer.linear_bytes_per_request / (1024 * 1024)),
            r.classic.max_requests_linear_pool, r.kvbuffer.max_requests_linear_pool,
            r.ratio_linear_pool,
            fmt::format("{:.1f}M", r.kvbuffer.attn_bytes_per_request / (1024 * 1024)),
            r.classic.max_requests_whole_model, r.kvbuffer.max_requests_whole_model,
            r.ratio_whole_model, measured_cells);
        if (csv)
          csv->row({m.name,
                    std::to_string(m.tp),
                    layer_kind_name(m.kind),
                    std::to_string(T),
                    std::to_string(o.chunk),
                    variant_name(variant),
                    state_type_name(state),
                    scheduler_name(scheduler),
                    o.count_scratch ? "1" : "0",
                    std::to_string(o.context),
                    fmt::format("{:.0f}", in.gpu_memory_bytes),
                    fmt::format("{:.0f}", in.weight_bytes),
                    fmt::format("{:.0f}", r.pool_bytes),
                    fmt::format("{:.0f}", r.classic.linear_bytes_per_request),
                    fmt::format("{:.0f}", r.kvbuffer.linear_bytes_per_request),
                    fmt::format("{:.0f}", r.kvbuffer.attn_bytes_per_request),
                    std::to_string(r.classic.max_requests_linear_pool),
                    std::to_string(r.kvbuffer.max_requests_linear_pool),
                    fmt::format("{:.6f}", r.ratio_linear_pool),
                    std::to_string(r.classic.max_requests_whole_model),
                    std::to_string(r.kvbuffer.max_requests_whole_model),
                    fmt::format("{:.6f}", r.ratio_whole_model),
                    mc,
                    mk,
                    mr,
                    fmt::format("{:.6f}", ratio_allocated),
                    over,
                    gpu,
                    source_commit()});
      }
    }
    if (states.size() > 1 && state != states.back()) fmt::print("\n");
  }
  fmt::print(
      "\nratio: classic / kvbuffer bytes per request (exact, before rounding to whole requests); "
      "+attn/req: full-attention KV per request; weights default to params x 2 bytes / tp; "
      "a pool of 0 means the weights alone exceed the memory (raise --tp){}\n",
      o.measure ? "; measured: found by bisection on the GPU, vs model: measured ratio against the model's ratio "
                  "counting what --measure allocates (the T verify-scratch entries of our kernels per layer)"
                : "");
  if (csv) fmt::print("wrote {}\n", o.csv);
  return 0;
}

}  // namespace

Command add_capacity_command(CLI::App& app) {
  auto o = std::make_shared<CapacityOptions>();
  Command c;
  c.app = app.add_subcommand(
      "capacity", "largest number of concurrent requests: classic speculative vs KVBuffer");
  o->model.add_to(c.app, true, true);
  c.app->add_option("--gpu-mem-gib", o->gpu_mem_gib, "GPU memory in GiB")
      ->capture_default_str()
      ->check(positive_number());
  o->weights_option = c.app->add_option("--weights-gib", o->weights_gib,
                                        "weight memory per GPU in GiB (default params x 2 bytes / tp)")
                          ->check(CLI::Range(0.0, 1e9));
  c.app->add_option("--context", o->context, "context length L in tokens")
      ->capture_default_str()
      ->check(positive_integer());
  c.app->add_option("--drafts", o->drafts, "tokens verified per step T: N[,N..] or 'all' (1..8)")
      ->capture_default_str();
  c.app->add_option("--chunk", o->chunk, "KVBuffer capacity C (C >= T)")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxBufferCapacity));
  c.app->add_option("--scheduler", o->scheduler, "full-attention KV policy")
      ->capture_default_str()
      ->check(CLI::IsMember({scheduler_name(SchedulerPolicy::Reserve), scheduler_name(SchedulerPolicy::Mean)}));
  c.app->add_option("--variant", o->variant, "GDN buffer variant")
      ->capture_default_str()
      ->check(CLI::IsMember({variant_name(BufferVariant::CachedU), variant_name(BufferVariant::Raw)}));
  c.app->add_option("--state-dtype", o->state_dtypes,
                    "state element types: fp32, bf16, fp16, comma-separated, or all (a table each)")
      ->capture_default_str();
  c.app->add_option("--csv", o->csv, "also write the rows to this CSV file");
  c.app->add_flag("--count-scratch", o->count_scratch,
                  "count the T verify-scratch entries per request and layer our kernels allocate "
                  "(as --measure does)");
  c.app->add_flag("--measure", o->measure, "also measure on the GPU by bisection (CUDA builds)");
  c.run = [o] { return run_capacity(*o); };
  return c;
}

}  // namespace kvbuf::cli
