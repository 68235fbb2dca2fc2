#include "sim/step_model.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <stdexcept>

#include "sim/bytes_model.h"
#include "sim/capacity.h"
#include "sim/csv.h"

namespace kvbuf {
namespace {

// Kernels of an engine's decode layer besides the linear-attention kernel (timed in its own
// term): per mixer block input norm, in-projection, (attention kernel,) out-projection with the
// residual; per MLP block norm, up (+ gate), down; MoE adds the router and the combine.
constexpr int kKernelsPerMixer = 4;
constexpr int kKernelsPerMlp = 3;
constexpr int kKernelsPerMoe = 5;
constexpr int kKernelsLmHead = 2;
// Fixed cost of one NCCL all-reduce of a decode step's activations (assumed).
constexpr double kAllReduceLatencyUs = 5.0;
// Chunked linear-attention prefill (the chunk form of the design note, chunk 64).
constexpr double kPrefillChunk = 64;

std::invalid_argument bad(const std::string& what) { return std::invalid_argument(what); }

double us_for_bytes(double bytes, double gbps) { return bytes / (gbps * 1e3); }
double us_for_flops(double flops, double tflops) { return flops / (tflops * 1e6); }

// A results CSV as rows of named fields.
struct CsvTable {
  std::string path;
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
  std::vector<int> line_of_row;
  size_t column(const std::string& name) const {
    for (size_t i = 0; i < header.size(); ++i)
      if (header[i] == name) return i;
    throw bad(path + ": no column '" + name + "'");
  }
  double number(size_t row, const std::string& name) const {
    const std::string& s = rows[row][column(name)];
    const std::optional<double> v = csv_number(s);
    if (!v)
      throw bad(path + ":" + std::to_string(line_of_row[row]) + ": column '" + name + "' is not a number: '" + s + "'");
    return *v;
  }
  const std::string& text(size_t row, const std::string& name) const {
    return rows[row][column(name)];
  }
  bool has_column(const std::string& name) const {
    return std::find(header.begin(), header.end(), name) != header.end();
  }
};

CsvTable read_csv_table(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw bad("cannot read measured table '" + path + "'");
  CsvTable t;
  t.path = path;
  std::string line;
  int line_no = 0;
  size_t latency_column = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    std::vector<std::string> fields;
    try {
      fields = split_csv_line(line);
    } catch (const std::invalid_argument& e) {
      throw bad(path + ":" + std::to_string(line_no) + ": " + e.what());
    }
    if (t.header.empty()) {
      t.header = std::move(fields);
      latency_column = std::find(t.header.begin(), t.header.end(), "latency_us_median") - t.header.begin();
      continue;
    }
    if (fields.size() != t.header.size())
      throw bad(path + ":" + std::to_string(line_no) + ": " + std::to_string(fields.size()) +
                " fields, header has " + std::to_string(t.header.size()));
    // A point that did not run is a row without a latency, its note saying why (a measured row's
    // note may only explain, as Mamba-2's "z gate ... in the kernel").
    if (latency_column < fields.size() && fields[latency_column].empty()) continue;
    t.rows.push_back(std::move(fields));
    t.line_of_row.push_back(line_no);
  }
  if (t.rows.empty()) throw bad("measured table '" + path + "' has no rows");
  return t;
}

bool has_chunk(LinearKernel k) {
  return k == LinearKernel::KVBuffer || k == LinearKernel::Direct || k == LinearKernel::VerifyKVBuffer;
}
bool has_drafts(LinearKernel k) {
  return k == LinearKernel::VerifyClassic || k == LinearKernel::VerifyKVBuffer;
}

LinearSource worse(LinearSource a, LinearSource b) { return int(a) > int(b) ? a : b; }

}  // namespace

const char* method_name(DecodeMethod m) { return m == DecodeMethod::Classic ? "classic" : "kvbuffer"; }

DecodeMethod parse_method(const std::string& name) {
  if (name == "classic") return DecodeMethod::Classic;
  if (name == "kvbuffer") return DecodeMethod::KVBuffer;
  throw bad("unknown method '" + name + "' (known: classic, kvbuffer)");
}

const char* linear_kernel_name(LinearKernel k) {
  switch (k) {
    case LinearKernel::Recurrent: return "recurrent";
    case LinearKernel::KVBuffer: return "kvbuffer";
    case LinearKernel::Direct: return "direct";
    case LinearKernel::VerifyClassic: return "verify-classic";
    case LinearKernel::VerifyKVBuffer: return "verify-kvbuffer";
  }
  return "?";
}

const char* linear_source_name(LinearSource s) {
  switch (s) {
    case LinearSource::Measured: return "measured";
    case LinearSource::Extrapolated: return "extrapolated";
    case LinearSource::Modelled: return "modelled";
  }
  return "?";
}

MeasuredLinearTable::MeasuredLinearTable(ModelSpec reference, std::vector<MeasuredPoint> points)
    : reference_(std::move(reference)), measured_rows_(points) {
  std::map<std::tuple<int, int, int, int>, std::string> method_of;  // (kernel, C, T, batch) -> the faster row's
  for (const MeasuredPoint& p : points) {
    if (p.batch < 1 || !(p.latency_us > 0))
      throw bad("measured point needs batch >= 1 and a positive latency");
    const int c = has_chunk(p.kernel) ? p.chunk : 0;
    const int t = has_drafts(p.kernel) ? p.drafts : 0;
    auto& s = by_series_[{int(p.kernel), c, t}];
    auto it = std::find_if(s.begin(), s.end(), [&](const auto& x) { return x.first == p.batch; });
    if (it == s.end()) {
      s.push_back({p.batch, p.latency_us});
    } else if (p.latency_us >= it->second) {
      continue;
    } else {
      it->second = p.latency_us;  // the faster of two methods at one point
    }
    method_of[{int(p.kernel), c, t, p.batch}] = p.method;
  }
  for (auto& [key, s] : by_series_) {
    std::sort(s.begin(), s.end());
    for (const auto& [batch, us] : s) {
      MeasuredPoint p;
      p.kernel = LinearKernel(std::get<0>(key));
      p.chunk = std::get<1>(key);
      p.drafts = std::get<2>(key);
      p.batch = batch;
      p.latency_us = us;
      p.method = method_of[{std::get<0>(key), p.chunk, p.drafts, batch}];
      points_.push_back(p);
    }
  }
}

MeasuredLinearTable MeasuredLinearTable::load(const std::string& results_dir, LayerKind kind, StateType state) {
  // Mamba-2 rows name their kernels as GDN's with this prefix (bench/sweep/sweep_kernels.h).
  const std::string prefix = kind == LayerKind::Mamba2 ? "mamba2-" : "";
  auto unprefixed = [&](const std::string& name, std::string* out) {
    if (name.compare(0, prefix.size(), prefix) != 0) return false;
    *out = name.substr(prefix.size());
    return true;
  };
  auto exists = [](const std::string& path) { return bool(std::ifstream(path)); };
  std::vector<MeasuredPoint> points;
  std::string model;
  auto same_model = [&](const CsvTable& t, size_t r) {
    const std::string& m = t.text(r, "model");
    if (model.empty()) model = m;
    if (m != model)
      throw bad(t.path + ":" + std::to_string(t.line_of_row[r]) + ": model '" + m + "' differs from '" +
                model + "' (one reference shape per table)");
  };
  const bool fp32 = state == StateType::FP32;
  const std::string decode_file = fp32 ? "decode_h200.csv" : "decode16_h200.csv";
  const std::string verify_file = fp32 ? "verify_h200.csv" : "verify16_h200.csv";
  // A row of another state type (a column absent or empty: an fp32 row, as before the axis).
  auto other_state = [&](const CsvTable& t, size_t r) {
    const std::string d = t.has_column("state_dtype") ? t.text(r, "state_dtype") : "";
    return (d.empty() ? std::string("fp32") : d) != state_type_name(state);
  };
  if (exists(results_dir + "/" + decode_file)) {
    const CsvTable decode = read_csv_table(results_dir + "/" + decode_file);
    const bool has_context = decode.has_column("context_tokens");
    for (size_t r = 0; r < decode.rows.size(); ++r) {
      std::string kernel;
      if (!unprefixed(decode.text(r, "kernel"), &kernel) || other_state(decode, r)) continue;
      // The short-context sweep's rows (a request at a given context, direct below C) are not the
      // steady-state step the tables interpolate.
      if (has_context && decode.number(r, "context_tokens") > 0) continue;
      // GDN's entry variants: the bf16 cached-u rows are the step an engine runs.
      const bool gdn_default_entry = kind != LayerKind::GatedDeltaNet ||
                                     (decode.text(r, "variant") == "cached-u" && decode.text(r, "entry_dtype") == "bf16");
      MeasuredPoint p;
      if (kernel == "recurrent") {
        p.kernel = LinearKernel::Recurrent;
      } else if ((kernel == "kvbuffer" || kernel == "direct") && gdn_default_entry) {
        p.kernel = kernel == "kvbuffer" ? LinearKernel::KVBuffer : LinearKernel::Direct;
      } else {
        continue;
      }
      same_model(decode, r);
      p.batch = int(decode.number(r, "batch"));
      p.chunk = int(decode.number(r, "chunk"));
      p.latency_us = decode.number(r, "latency_us_median");
      p.method = decode.text(r, "kernel");
      points.push_back(p);
    }
  }
  if (exists(results_dir + "/" + verify_file)) {
    const CsvTable verify = read_csv_table(results_dir + "/" + verify_file);
    for (size_t r = 0; r < verify.rows.size(); ++r) {
      std::string method;
      if (!unprefixed(verify.text(r, "method"), &method) || other_state(verify, r)) continue;
      const bool tree = method.size() >= 5 && method.compare(method.size() - 5, 5, "-tree") == 0;
      MeasuredPoint p;
      if (method.rfind("verify-classic", 0) == 0 && !tree) {
        p.kernel = LinearKernel::VerifyClassic;  // the faster of copy-commit and in-place rows
      } else if (method == "verify-kvbuffer") {
        p.kernel = LinearKernel::VerifyKVBuffer;
      } else {
        continue;
      }
      same_model(verify, r);
      p.batch = int(verify.number(r, "batch"));
      p.chunk = int(verify.number(r, "chunk"));
      p.drafts = int(verify.number(r, "drafts"));
      p.latency_us = verify.number(r, "latency_us_median");
      p.method = verify.text(r, "method");
      points.push_back(p);
    }
  }
  if (points.empty()) return MeasuredLinearTable();
  return MeasuredLinearTable(find_model(model), std::move(points));
}

bool MeasuredLinearTable::series(LinearKernel k, int chunk, int drafts, double batch,
                                 LinearLookup* out) const {
  const auto it = by_series_.find({int(k), chunk, drafts});
  if (it == by_series_.end() || it->second.empty()) return false;
  const auto& s = it->second;
  if (batch <= s.front().first || s.size() == 1) {
    *out = {s.front().second, LinearSource::Measured};
    return true;
  }
  size_t hi = 1;
  while (hi + 1 < s.size() && s[hi].first < batch) ++hi;
  const auto& a = s[hi - 1];
  const auto& b = s[hi];
  const double t = (batch - a.first) / double(b.first - a.first);
  out->latency_us = a.second + t * (b.second - a.second);
  out->source = batch > s.back().first ? LinearSource::Extrapolated : LinearSource::Measured;
  return true;
}

bool MeasuredLinearTable::lookup(LinearKernel k, double batch, int chunk, int drafts,
                                 LinearLookup* out) const {
  const int c = has_chunk(k) ? chunk : 0;
  const int t = has_drafts(k) ? drafts : 0;
  if (series(k, c, t, batch, out)) return true;
  if (!has_chunk(k)) return false;
  int lo = 0, hi = std::numeric_limits<int>::max();
  for (const auto& [key, s] : by_series_) {
    if (std::get<0>(key) != int(k) || std::get<2>(key) != t) continue;
    const int kc = std::get<1>(key);
    if (kc < c) lo = std::max(lo, kc);
    if (kc > c) hi = std::min(hi, kc);
  }
  if (lo == 0 || hi == std::numeric_limits<int>::max()) return false;
  LinearLookup a, b;
  series(k, lo, t, batch, &a);
  series(k, hi, t, batch, &b);
  const double f = double(c - lo) / (hi - lo);
  out->latency_us = a.latency_us + f * (b.latency_us - a.latency_us);
  out->source = worse(a.source, b.source);
  return true;
}

std::vector<HeldOutRow> held_out_check(const MeasuredLinearTable& full, const GpuSpec& gpu,
                                       const std::vector<int>& held_out_batches, StateType state) {
  auto held = [&](int b) {
    return std::find(held_out_batches.begin(), held_out_batches.end(), b) != held_out_batches.end();
  };
  // Each held-out row is predicted from the rows of its own method (the copy-commit classic verify
  // from copy-commit rows even where the in-place rows are faster elsewhere): like for like.
  std::map<std::string, MeasuredLinearTable> fitted_by_method;
  auto fitted_for = [&](const std::string& method) -> const MeasuredLinearTable& {
    auto it = fitted_by_method.find(method);
    if (it != fitted_by_method.end()) return it->second;
    std::vector<MeasuredPoint> fit;
    for (const MeasuredPoint& p : full.measured_rows())
      if (!held(p.batch) && (p.kernel != LinearKernel::VerifyClassic || p.method == method)) fit.push_back(p);
    return fitted_by_method.emplace(method, MeasuredLinearTable(full.reference(), fit)).first->second;
  };
  std::vector<HeldOutRow> rows;
  for (const MeasuredPoint& p : full.measured_rows()) {
    if (!held(p.batch)) continue;
    HeldOutRow r;
    r.measured = p;
    LinearLookup l;
    if (!fitted_for(p.method).lookup(p.kernel, p.batch, p.chunk, p.drafts, &l)) continue;
    r.predicted_us = l.latency_us;
    StepConfig cfg;
    cfg.model = full.reference();
    cfg.gpu = gpu;
    cfg.method = DecodeMethod::KVBuffer;
    cfg.chunk = std::max(1, std::max(p.chunk, p.drafts));
    cfg.drafts = p.drafts;
    cfg.state = state;
    r.modelled_us = StepModel(cfg, MeasuredLinearTable()).modelled_layer_us(p.kernel, p.batch);
    rows.push_back(r);
  }
  return rows;
}

StepModel::StepModel(const StepConfig& config, MeasuredLinearTable table,
                     std::shared_ptr<const StepProfileTable> profile)
    : cfg_(config), table_(std::move(table)), profile_(std::move(profile)) {
  if (cfg_.chunk < 1 || cfg_.chunk > kMaxBufferCapacity)
    throw bad("buffer capacity C must be in 1.." + std::to_string(kMaxBufferCapacity));
  if (cfg_.drafts < 0) throw bad("draft count T must be non-negative");
  if (cfg_.method == DecodeMethod::KVBuffer && cfg_.drafts > cfg_.chunk)
    throw bad("draft count T (" + std::to_string(cfg_.drafts) + ") exceeds buffer capacity C (" +
              std::to_string(cfg_.chunk) + ")");
  if (!(cfg_.acceptance >= 0 && cfg_.acceptance <= 1))
    throw bad("acceptance rate must be in [0, 1]");
  if (!(cfg_.gpu.read_gbps > 0 && cfg_.gpu.copy_gbps > 0 && cfg_.gpu.inplace_gbps > 0 &&
        cfg_.gpu.gemm_tflops > 0 && cfg_.gpu.kernel_overhead_us >= 0))
    throw bad("GPU '" + cfg_.gpu.name + "' needs positive bandwidths and GEMM throughput");
  if (cfg_.tp > 1 && !(cfg_.gpu.interconnect_gbps > 0))
    throw bad("GPU '" + cfg_.gpu.name + "' has no interconnect bandwidth for --tp > 1");
  weights_ = weight_counts(cfg_.model);
  per_gpu_ = apply_tensor_parallel(cfg_.model, cfg_.tp);
  table_applies_ = !table_.empty() && table_.reference().kind == cfg_.model.kind;
}

double StepModel::expected_emitted() const {
  if (cfg_.drafts == 0) return 1;
  const double a = cfg_.acceptance;
  if (a >= 1) return cfg_.drafts;
  return (1 - std::pow(a, cfg_.drafts)) / (1 - a);
}

double StepModel::bytes_per_request(LinearKernel k, const LayerShape& s) const {
  Precision p;
  p.state = cfg_.state;
  const BufferVariant v = BufferVariant::CachedU;
  switch (k) {
    case LinearKernel::Recurrent: return bytes_recurrent(s, p).total_bytes();
    case LinearKernel::KVBuffer: return bytes_kvbuffer_cycle(s, p, v, cfg_.chunk).total_bytes();
    case LinearKernel::Direct: return bytes_direct_mean(s, p, cfg_.chunk).total_bytes();
    case LinearKernel::VerifyClassic:
      return bytes_verify_classic(s, p, std::max(1, cfg_.drafts), false).total_bytes();
    case LinearKernel::VerifyKVBuffer: {
      const int T = std::max(1, cfg_.drafts);
      const int m = std::clamp(int(std::lround(expected_emitted())), 1, T);
      return bytes_verify_kvbuffer_cycle(s, p, v, cfg_.chunk, T, m, modelled_verify_window(s.kind)).total_bytes();
    }
  }
  return 0;
}

double StepModel::modelled_layer_us(LinearKernel k, int batch) const {
  if (batch <= 0) return 0;
  const double gbps = k == LinearKernel::Recurrent       ? cfg_.gpu.inplace_gbps
                      : k == LinearKernel::VerifyClassic ? cfg_.gpu.copy_gbps
                                                         : cfg_.gpu.read_gbps;
  return cfg_.gpu.kernel_overhead_us + us_for_bytes(batch * bytes_per_request(k, per_gpu_.layer), gbps);
}

LinearLookup StepModel::linear_layer(LinearKernel k, int batch) const {
  if (batch <= 0) return {0, LinearSource::Measured};
  LinearLookup out;
  if (table_applies_) {
    // The model's layer as an equivalent batch of the measured layer, by the bytes each moves.
    const double scale = bytes_per_request(k, per_gpu_.layer) / bytes_per_request(k, table_.reference().layer);
    if (table_.lookup(k, batch * scale, cfg_.chunk, cfg_.drafts, &out)) return out;
  }
  return {modelled_layer_us(k, batch), LinearSource::Modelled};
}

StepModel::Roofline StepModel::gemm(double params, double rows, double rows_per_weight) const {
  const double bytes = 2.0 * params / cfg_.tp;
  const double flops = 2.0 * rows * params / cfg_.tp;
  const double memory_us = us_for_bytes(bytes, cfg_.gpu.read_gbps);
  const double compute_us = us_for_flops(flops, cfg_.gpu.gemm_tflops_at(rows_per_weight));
  return {std::max(memory_us, compute_us), compute_us > memory_us};
}

ProfileKey StepModel::profile_key() const {
  return {cfg_.model.name, cfg_.tp, cfg_.drafts, cfg_.routing, weights_.experts > 0 ? "grouped" : "none"};
}

StepTerms StepModel::step(const std::vector<long>& contexts) const {
  StepTerms t = parametric_step(contexts);
  if (!profile_ || profile_->empty() || contexts.empty()) return t;
  const ProfileKey key = profile_key();
  double kv_tokens = 0;
  for (long c : contexts) kv_tokens += double(c);
  const double batch = double(contexts.size());
  auto term_of = [](const StepTerms& s, OperatorTerm term) {
    switch (term) {
      case OperatorTerm::Attention: return s.attn_kv_us;
      case OperatorTerm::Gemm: return s.projections_us + s.mlp_us + s.lm_head_us;
      case OperatorTerm::Elementwise: return s.overhead_us;
    }
    return 0.0;
  };
  for (int i = 0; i < kOperatorTerms; ++i) {
    const OperatorTerm term = OperatorTerm(i);
    const double here = term_of(t, term);
    const TermLookup l = profile_->lookup(
        key, term, batch, kv_tokens,
        [&](int b, long c) { return term_of(parametric_step(std::vector<long>(size_t(b), c)), term); }, here);
    t.operator_sources[i] = l.source;
    if (term == OperatorTerm::Attention) t.attn_kv_us = l.us;
    if (term == OperatorTerm::Elementwise) t.overhead_us = l.us;
    if (term == OperatorTerm::Gemm) {
      // The profile times the GEMMs together: split as the parametric terms split them.
      const double f = here > 0 ? l.us / here : 0;
      t.projections_us *= f, t.mlp_us *= f, t.lm_head_us *= f;
      if (here <= 0) t.projections_us = l.us;
    }
  }
  return t;
}

StepTerms StepModel::parametric_step(const std::vector<long>& contexts) const {
  StepTerms t;
  const int batch = int(contexts.size());
  if (batch == 0) return t;
  const bool kvb = cfg_.method == DecodeMethod::KVBuffer;
  double context_sum = 0;
  int direct = 0;
  for (long c : contexts) {
    context_sum += double(c);
    if (kvb && cfg_.drafts == 0 && c < cfg_.chunk) ++direct;
  }
  LinearLookup layer;
  if (cfg_.drafts > 0) {
    layer = linear_layer(kvb ? LinearKernel::VerifyKVBuffer : LinearKernel::VerifyClassic, batch);
  } else if (!kvb) {
    layer = linear_layer(LinearKernel::Recurrent, batch);
  } else {
    const LinearLookup buffered = linear_layer(LinearKernel::KVBuffer, batch - direct);
    const LinearLookup stateless = linear_layer(LinearKernel::Direct, direct);
    layer = {buffered.latency_us + stateless.latency_us, worse(buffered.source, stateless.source)};
  }
  t.linear_attn_us = per_gpu_.linear_layers * layer.latency_us;
  t.linear_source = layer.source;

  const double rows = double(batch) * tokens_per_request();
  const WeightCounts& w = weights_;
  t.projections_us =
      gemm(w.linear_layers * w.linear_attn_layer + w.attn_layers * w.attn_layer, rows, rows).us;
  // KV cache read once per step for all T query tokens of a request (flash-decoding style).
  t.attn_kv_us = us_for_bytes(context_sum * per_gpu_.attn_kv_bytes_per_token(), cfg_.gpu.read_gbps);
  const Roofline dense = gemm(w.mlp_layers * w.dense_mlp_layer, rows, rows);
  t.mlp_us = dense.us;
  t.mlp_compute_bound = dense.compute_bound;
  if (w.experts > 0) {
    // Uniform routing: each expert is missed by a token with probability 1 - k / E.
    const double E = w.experts;
    t.experts_touched = E * (1 - std::pow(1 - w.top_k / E, rows));
    const double bytes = 2.0 * w.mlp_layers * t.experts_touched * w.expert / cfg_.tp;
    const double flops = 2.0 * rows * w.top_k * w.expert * w.mlp_layers / cfg_.tp;
    const double memory_us = us_for_bytes(bytes, cfg_.gpu.read_gbps);
    const double compute_us =
        us_for_flops(flops, cfg_.gpu.gemm_tflops_at(rows * w.top_k / t.experts_touched));
    t.mlp_us += std::max(memory_us, compute_us);
    t.mlp_compute_bound = t.mlp_compute_bound || compute_us > memory_us;
  }
  t.lm_head_us = gemm(w.lm_head, rows, rows).us;
  const int mixers = per_gpu_.linear_layers + per_gpu_.attn_layers;
  const int mlp_kernels = w.experts > 0 ? kKernelsPerMoe : kKernelsPerMlp;
  t.overhead_us = (mixers * kKernelsPerMixer + w.mlp_layers * mlp_kernels + kKernelsLmHead) *
                  cfg_.gpu.kernel_overhead_us;
  if (cfg_.tp > 1) {
    const double bytes = rows * cfg_.model.blocks.hidden * 2.0;
    const double ring = 2.0 * (cfg_.tp - 1) / cfg_.tp * us_for_bytes(bytes, cfg_.gpu.interconnect_gbps);
    t.comm_us = (mixers + w.mlp_layers) * (kAllReduceLatencyUs + ring);
  }
  const StepTermFit& fit = cfg_.gpu.step_terms;
  if (fit.fitted) {
    const StepFeatures x = features(contexts);
    t.fitted_terms = true;
    t.attn_kv_us = fitted_attention_us(fit, x);
    t.projections_us = fitted_gemm_us(fit, x.projections);
    t.mlp_us = fitted_gemm_us(fit, x.mlp);
    t.lm_head_us = fitted_gemm_us(fit, x.lm_head);
    t.overhead_us = fitted_elementwise_us(fit, x);
  }
  return t;
}

GemmFeatures& GemmFeatures::operator+=(const GemmFeatures& o) {
  kernels += o.kernels;
  dense_bytes += o.dense_bytes;
  expert_bytes += o.expert_bytes;
  flops += o.flops;
  return *this;
}

GemmFeatures StepFeatures::gemm() const {
  GemmFeatures g = projections;
  g += mlp;
  g += lm_head;
  return g;
}

std::array<double, StepFeatures::kAttentionCount> attention_coefficients(const StepTermFit& f) {
  return {f.attn_layer_us, f.attn_token_us, f.attn_us_per_byte};
}
std::array<double, GemmFeatures::kCount> gemm_coefficients(const StepTermFit& f) {
  return {f.gemm_kernel_us, f.gemm_us_per_dense_byte, f.gemm_us_per_expert_byte, f.gemm_us_per_flop};
}
std::array<double, StepFeatures::kElementwiseCount> elementwise_coefficients(const StepTermFit& f) {
  return {f.elementwise_kernel_us, f.elementwise_us_per_byte};
}

namespace {
template <size_t N>
double dot(const std::array<double, N>& a, const std::array<double, N>& b) {
  double s = 0;
  for (size_t i = 0; i < N; ++i) s += a[i] * b[i];
  return s;
}
}  // namespace

double fitted_attention_us(const StepTermFit& f, const StepFeatures& x) {
  return dot(attention_coefficients(f), x.attention());
}
double fitted_gemm_us(const StepTermFit& f, const GemmFeatures& x) { return dot(gemm_coefficients(f), x.values()); }
double fitted_elementwise_us(const StepTermFit& f, const StepFeatures& x) {
  return dot(elementwise_coefficients(f), x.elementwise());
}

StepFeatures StepModel::features(const std::vector<long>& contexts) const {
  StepFeatures x;
  const double batch = double(contexts.size());
  if (batch == 0) return x;
  double context_sum = 0;
  for (long c : contexts) context_sum += double(c);
  const double rows = batch * tokens_per_request();
  const WeightCounts& w = weights_;
  const double tp = cfg_.tp;
  x.attn_layers = per_gpu_.attn_layers;
  x.attn_layer_tokens = per_gpu_.attn_layers * rows;
  x.kv_bytes = context_sum * per_gpu_.attn_kv_bytes_per_token();
  auto dense = [&](double params, double kernels) {
    return GemmFeatures{kernels, 2.0 * params / tp, 0, 2.0 * rows * params / tp};
  };
  // Fused in-projection and out-projection per mixer.
  x.projections = dense(w.linear_layers * w.linear_attn_layer + w.attn_layers * w.attn_layer,
                        2.0 * (per_gpu_.linear_layers + per_gpu_.attn_layers));
  // Dense MLP: gate-up and down; MoE: router, shared expert's two, the routed experts' two grouped GEMMs.
  x.mlp = dense(w.mlp_layers * w.dense_mlp_layer, w.mlp_layers * (w.experts > 0 ? 5.0 : 2.0));
  if (w.experts > 0) {
    const double E = w.experts;
    const double touched = E * (1 - std::pow(1 - w.top_k / E, rows));
    x.mlp.expert_bytes = 2.0 * w.mlp_layers * touched * w.expert / tp;
    x.mlp.flops += 2.0 * rows * w.top_k * w.expert * w.mlp_layers / tp;
  }
  x.lm_head = dense(w.lm_head, 1);
  const int mixers = per_gpu_.linear_layers + per_gpu_.attn_layers;
  x.elementwise_kernels =
      mixers * kKernelsPerMixer + w.mlp_layers * (w.experts > 0 ? kKernelsPerMoe : kKernelsPerMlp) + kKernelsLmHead;
  x.elementwise_bytes = rows * cfg_.model.blocks.hidden * 2.0 * 2.0 * (mixers + w.mlp_layers);
  return x;
}

StepTerms StepModel::step_uniform(int batch, long context) const {
  return step(std::vector<long>(size_t(std::max(0, batch)), context));
}

double StepModel::prefill_us(long tokens) const {
  if (tokens <= 0) return 0;
  const double n = double(tokens);
  const WeightCounts& w = weights_;
  double us = gemm(w.linear_layers * w.linear_attn_layer + w.attn_layers * w.attn_layer, n, n).us;
  us += gemm(w.mlp_layers * w.dense_mlp_layer, n, n).us;
  if (w.experts > 0) {
    const double E = w.experts;
    const double touched = E * (1 - std::pow(1 - w.top_k / E, n));
    const double memory_us = us_for_bytes(2.0 * w.mlp_layers * touched * w.expert / cfg_.tp, cfg_.gpu.read_gbps);
    const double compute_us = us_for_flops(2.0 * n * w.top_k * w.expert * w.mlp_layers / cfg_.tp,
                                           cfg_.gpu.gemm_tflops_at(n * w.top_k / touched));
    us += std::max(memory_us, compute_us);
  }
  us += gemm(w.lm_head, 1, 1).us;  // logits of the last prompt token only
  // Causal attention: QK^T and PV over half the n x n scores, per query head on this GPU.
  const double attn_flops =
      per_gpu_.attn_layers * 4.0 * per_gpu_.attn_q_heads * per_gpu_.attn_head_dim * n * n / 2;
  // Chunked linear attention: per token the state update and output (~6 flops per state element)
  // and the intra-chunk products over keys and values.
  const LayerShape& s = per_gpu_.layer;
  const PoolLayout layout{s, 0, BufferVariant::CachedU, Precision{}};
  const double linear_flops =
      per_gpu_.linear_layers * n *
      (6.0 * layout.state_elems() + 4.0 * kPrefillChunk * s.value_heads * (s.head_k + s.head_v));
  us += us_for_flops(attn_flops + linear_flops, cfg_.gpu.gemm_tflops);
  const int mixers = per_gpu_.linear_layers + per_gpu_.attn_layers;
  us += (mixers * (kKernelsPerMixer + 1) + w.mlp_layers * (w.experts > 0 ? kKernelsPerMoe : kKernelsPerMlp) +
         kKernelsLmHead) * cfg_.gpu.kernel_overhead_us;
  return us;
}

double StepModel::request_bytes(long context_tokens) const {
  const bool kvb = cfg_.method == DecodeMethod::KVBuffer;
  Precision p;
  p.state = cfg_.state;
  return linear_bytes_per_request(per_gpu_, p, BufferVariant::CachedU, kvb, cfg_.drafts,
                                  cfg_.chunk, false) +
         double(context_tokens) * per_gpu_.attn_kv_bytes_per_token();
}

}  // namespace kvbuf
