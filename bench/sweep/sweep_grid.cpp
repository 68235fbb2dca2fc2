// The grid of `kvbuf sweep` (bench/sweep/sweep_grid.h): expansion, shards, row columns, resume scan.
#include "bench/sweep/sweep_grid.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "bench/gpu_telemetry.h"
#include "sim/bytes_model.h"
#include "sim/csv.h"
#include "sim/layout.h"

namespace kvbuf {
namespace {

std::string fmt_g(double x) { return fmt::format("{:.6g}", x); }
std::string fmt_bytes(double x) { return fmt::format("{:.0f}", x); }

const char* family_name(LayerKind k) { return k == LayerKind::Mamba2 ? "Mamba-2" : "Gated DeltaNet"; }

// The table row that differs from k only in its entry type, or nullptr.
const SweepKernel* entry_twin(const SweepKernel& k, EntryType e) {
  if (k.entry == e) return &k;
  for (const SweepKernel& t : sweep_kernels())
    if (t.entry == e && t.family == k.family && t.kind == k.kind && t.buffered == k.buffered &&
        t.out_of_place == k.out_of_place && t.direct == k.direct && t.variant == k.variant &&
        t.pool_fill == k.pool_fill && t.path == k.path && t.tree == k.tree && t.in_place == k.in_place)
      return &t;
  return nullptr;
}

EntryType parse_entry_dtype(const std::string& name) {
  if (name == "bf16") return EntryType::BF16;
  if (name == "fp32") return EntryType::FP32;
  throw std::invalid_argument("--entry-dtype: " + name + " is not an entry type of the kernels (bf16, fp32)");
}

std::string join(const std::vector<std::string>& v, const char* sep = ", ") { return fmt::format("{}", fmt::join(v, sep)); }

// Why a model cannot run on the sweep's kernels at this tp ("" when it can), and the model after tp.
std::string shape_problem(const ModelSpec& catalog_model, int tp, ModelSpec& out) {
  try {
    out = apply_tensor_parallel(catalog_model, tp);
  } catch (const std::invalid_argument& e) {
    return fmt::format("tp {}: {}", tp, e.what());
  }
  const LayerShape& s = out.layer;
  if (s.kind == LayerKind::GatedDeltaNet && !(s.head_k == s.head_v && (s.head_k == 64 || s.head_k == 128)))
    return fmt::format("unsupported head dims K={} V={} (the kernels support 64x64 and 128x128)", s.head_k, s.head_v);
  return "";
}

}  // namespace

const std::vector<std::string>& default_sweep_kernels(LayerKind kind) {
  static const std::vector<std::string> gdn{"recurrent", "recurrent-oop", "kvbuffer", "kvbuffer-raw", "direct"};
  static const std::vector<std::string> mamba2{"mamba2-recurrent", "mamba2-kvbuffer", "mamba2-direct"};
  return kind == LayerKind::Mamba2 ? mamba2 : gdn;
}

SweepAxes paper_axes() {
  SweepAxes a;
  a.models = {"qwen3-next-80b-a3b", "nemotron-3-nano-30b-a3b"};
  // The entry-dtype studies (kvbuffer-fp32, kvbuffer-raw) stay out: the engine's step is bf16 cached-u.
  a.kernels = {"recurrent", "recurrent-oop", "kvbuffer", "direct",
               "verify-classic", "verify-classic-inplace", "verify-kvbuffer",
               "mamba2-recurrent", "mamba2-kvbuffer", "mamba2-direct"};
  // The Mamba-2 verify rows, where the kernel table has them.
  for (const char* k : {"mamba2-verify-classic", "mamba2-verify-kvbuffer"})
    if (find_sweep_kernel(k)) a.kernels.push_back(k);
  a.batches = {1, 8, 32, 64, 128, 256, 512};
  a.chunks = {1, 2, 4, 8, 16, 32, 64};
  a.contexts = {0, 2, 14, 62};
  a.drafts = {1, 4, 5, 8};  // 4: the paper's capacity claim; 5: the public kernels' figures
  // fp32, and the state dtype an engine keeps for the model by default (once where that is fp32).
  a.state_dtypes = {"fp32", kEngineStateDtype};
  return a;
}

std::string SweepPoint::label() const {
  std::string s = fmt::format("{} tp {} {} batch {} C {}", model, tp, kernel->name, batch, chunk);
  if (decode())
    s += fmt::format(" context {}", context);
  else
    s += fmt::format(" T {} a {}", drafts, fmt_g(acceptance));
  if (entry_dtype != "none") s += " entry " + entry_dtype;
  s += " state " + state_dtype;
  s += " [" + mode + "]";
  if (!note.empty()) s += " -- " + note;
  return s;
}

std::vector<SweepPoint> expand_grid(const SweepAxes& x) {
  auto require = [](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument(what);
  };
  require(!x.models.empty(), "--model: give at least one model");
  require(!x.batches.empty() && !x.chunks.empty() && !x.contexts.empty() && !x.tps.empty(),
          "every axis needs at least one value");
  for (int b : x.batches) require(b >= 1, fmt::format("--batch: must be a positive integer, got {}", b));
  for (int c : x.chunks) require(c >= 1 && c <= 64, fmt::format("--chunk: {} is not a buffer capacity of the kernels (1..64)", c));
  for (int c : x.contexts) require(c >= 0, fmt::format("--context: must be a non-negative integer, got {}", c));
  for (int t : x.drafts)
    require(t >= 1 && t <= kSweepMaxDrafts, fmt::format("--drafts: {} is not in 1..{}", t, kSweepMaxDrafts));
  for (double a : x.acceptances) require(a >= 0 && a <= 1, fmt::format("--acceptance: {} is not in [0, 1]", a));
  for (int tp : x.tps) require(tp >= 1, fmt::format("--tp: must be a positive integer, got {}", tp));
  require(!x.state_dtypes.empty(), "--state-dtype: give at least one state dtype");
  for (const std::string& d : x.state_dtypes) {
    if (d == kEngineStateDtype) continue;
    try {
      parse_state_type(d);
    } catch (const std::invalid_argument& e) {
      require(false, std::string("--state-dtype: ") + e.what());
    }
  }
  std::vector<EntryType> entries;
  for (const std::string& d : x.entry_dtypes) entries.push_back(parse_entry_dtype(d));

  std::vector<const ModelSpec*> models;
  for (const std::string& name : x.models) models.push_back(&find_model(name));
  // Kernels: given names pair with the models of their family; each must run on one of them.
  std::vector<const SweepKernel*> kernels;
  auto add_kernel = [&](const std::string& name) {
    const SweepKernel* k = find_sweep_kernel(name);
    require(k != nullptr, "--kernels: unknown kernel " + name);
    if (std::find(kernels.begin(), kernels.end(), k) == kernels.end()) kernels.push_back(k);
  };
  if (x.kernels.empty()) {
    for (const ModelSpec* m : models)
      for (const std::string& name : default_sweep_kernels(m->layer.kind)) add_kernel(name);
  } else {
    for (const std::string& name : x.kernels) add_kernel(name);
  }
  for (const SweepKernel* k : kernels) {
    const bool runs = std::any_of(models.begin(), models.end(), [&](const ModelSpec* m) { return m->layer.kind == k->kind; });
    if (runs) continue;
    const std::string have = models.size() == 1 ? models[0]->name + " is " + family_name(models[0]->layer.kind)
                                                : "no model of the grid is " + std::string(family_name(k->kind));
    throw std::invalid_argument("kvbuf sweep: kernel " + k->name + " runs " + family_name(k->kind) + " layers; " + have);
  }
  std::vector<double> acceptances = x.acceptances.empty() ? std::vector<double>{0.7} : x.acceptances;

  std::vector<SweepPoint> points;
  std::set<std::string> seen;
  auto push = [&](SweepPoint p) {
    if (seen.insert(point_key(p, "")).second) points.push_back(std::move(p));
  };
  for (const ModelSpec* catalog_model : models)
    for (int tp : x.tps) {
      ModelSpec m;
      const std::string problem = shape_problem(*catalog_model, tp, m);
      const LayerShape& s = catalog_model->layer;  // before tp: only its kind is read below
      const int layers = x.layer_pools > 0 ? x.layer_pools : catalog_model->linear_layers;
      // The kernels of this model, each at every entry type of the axis (its twin in the table).
      struct Run {
        const SweepKernel* kernel;
        std::string entry, note;
      };
      std::vector<Run> runs;
      for (const SweepKernel* k : kernels) {
        if (k->kind != s.kind) continue;
        if (entries.empty() || !k->buffered) {
          runs.push_back({k, k->buffered ? entry_type_name(k->entry) : "none", ""});
          continue;
        }
        for (EntryType e : entries) {
          const SweepKernel* twin = entry_twin(*k, e);
          runs.push_back({twin ? twin : k, entry_type_name(e),
                          twin ? "" : fmt::format("no {}-entry kernel for {} in the kernel table", entry_type_name(e),
                                                  k->name)});
        }
      }
      for (const std::string& requested : x.state_dtypes) {
        const std::string state_dtype =
            requested == kEngineStateDtype ? state_type_name(catalog_model->engine_state) : requested;
        SweepPoint base;
        base.model = catalog_model->name, base.tp = tp, base.state_dtype = state_dtype, base.layers = layers;
        base.note = problem;
        auto with_kernel = [&](const Run& r, int batch, int chunk) {
          SweepPoint p = base;
          p.kernel = r.kernel, p.batch = batch, p.chunk = r.kernel->buffered ? chunk : 0;
          p.entry_dtype = r.entry;
          if (p.note.empty()) p.note = r.note;
          return p;
        };
        for (int batch : x.batches)
          for (const auto& r : runs) {
            if (r.kernel->family != SweepFamily::Decode) continue;
            for (int chunk : r.kernel->buffered ? x.chunks : std::vector<int>{0})
              for (int context : x.contexts) {
                SweepPoint p = with_kernel(r, batch, chunk);
                p.context = context;
                const SweepKernel& k = *p.kernel;
                const bool short_context = context > 0 && context <= chunk - 2;
                if (!k.buffered) {
                  p.mode = "recurrent";
                } else if (short_context || k.direct) {
                  p.mode = "direct";
                  if (short_context) p.direct_fill = context;
                } else {
                  p.mode = "buffered";
                }
                if (p.note.empty() && k.direct && context > 0 && !short_context)
                  p.note = fmt::format("context {} does not fit a direct-mode buffer of C = {} (needs C >= {})", context,
                                       chunk, context + 2);
                if (p.note.empty() && k.pool_fill && short_context)
                  p.note = "the kernel advances the fill itself: no fixed-context run";
                if (p.note.empty() && k.variant == BufferVariant::Raw && short_context)
                  p.note = "direct mode is modelled for cached-u entries only (sim/bytes_model.h)";
                push(p);
              }
          }
        for (int batch : x.batches)
          for (int T : x.drafts)
            for (const auto& r : runs) {
              if (r.kernel->family != SweepFamily::Verify) continue;
              for (int chunk : r.kernel->buffered ? x.chunks : std::vector<int>{0})
                for (double acc : acceptances) {
                  SweepPoint p = with_kernel(r, batch, chunk);
                  p.drafts = T, p.acceptance = acc;
                  p.mode = r.kernel->buffered ? "verify-kvbuffer" : "verify-classic";
                  if (p.note.empty() && r.kernel->buffered && T > chunk)
                    p.note = fmt::format("T = {} drafts do not fit a buffer of C = {}", T, chunk);
                  push(p);
                }
            }
      }
    }
  return points;
}

std::vector<SweepPoint> shard_points(const std::vector<SweepPoint>& points, int index, int count) {
  if (count < 1 || index < 0 || index >= count)
    throw std::invalid_argument(fmt::format("--shard: part {} of {} does not exist (0 <= i < n)", index, count));
  std::vector<SweepPoint> part;
  for (size_t i = size_t(index); i < points.size(); i += size_t(count)) part.push_back(points[i]);
  return part;
}

std::pair<int, int> parse_shard(const std::string& text) {
  const size_t slash = text.find('/');
  size_t used_i = 0, used_n = 0;
  int i = -1, n = 0;
  try {
    if (slash == std::string::npos) throw std::invalid_argument("");
    i = std::stoi(text.substr(0, slash), &used_i);
    n = std::stoi(text.substr(slash + 1), &used_n);
  } catch (const std::exception&) {
    used_i = 0;
  }
  if (slash == std::string::npos || used_i != slash || used_n != text.size() - slash - 1 || used_i == 0)
    throw std::invalid_argument("--shard: expected i/n (part i of n, 0-based), got '" + text + "'");
  if (n < 1 || i < 0 || i >= n)
    throw std::invalid_argument(fmt::format("--shard: part {} of {} does not exist (0 <= i < n)", i, n));
  return {i, n};
}

double estimate_seconds(const std::vector<SweepPoint>& points, double budget_s, double rest_s) {
  // A sample is whole flush cycles (bench/sweep/sweep_decode.cu, sweep_verify.cu); its time is predicted
  // from the bytes model at an effective bandwidth. Sampling takes budget_s unless the minimum
  // number of samples takes longer; then warm-up samples, a probe step and the setup (pool
  // allocation and random fills, graph capture).
  constexpr double kBandwidth = 3.5e12;  // bytes/s, below the H200's measured copy bandwidth
  constexpr double kSetupS = 0.15;
  constexpr int kMinSamples = 5, kWarmupSamples = 2;
  std::set<std::string> timed;  // decode points sharing a measurement are timed once
  double total = 0;
  for (const SweepPoint& p : points) {
    if (!p.note.empty()) continue;
    if (p.decode() &&
        !timed.insert(fmt::format("{}|{}|{}|{}|{}|{}|{}|{}", p.model, p.tp, p.kernel->name, p.batch, p.chunk, p.mode,
                                  p.direct_fill, p.state_dtype))
             .second)
      continue;
    ModelSpec m;
    if (!shape_problem(find_model(p.model), p.tp, m).empty()) continue;
    const SweepKernel& k = *p.kernel;
    const Precision prec = precision_of(k.entry, parse_state_type(p.state_dtype));
    const int C = std::max(p.chunk, 1);
    double bytes = 0;  // per layer step, one request
    int steps = 0;     // per sample
    if (p.decode()) {
      steps = C * ((4 + C - 1) / C);
      bytes = p.direct_fill >= 0 ? bytes_direct_at_fill(m.layer, prec, p.direct_fill).total_bytes()
              : !k.buffered      ? bytes_recurrent(m.layer, prec).total_bytes()
              : k.direct         ? bytes_direct_mean(m.layer, prec, C).total_bytes()
                                 : bytes_kvbuffer_cycle(m.layer, prec, k.variant, C).total_bytes();
    } else {
      steps = k.buffered ? std::max(C, 4) : 4;
      bytes = k.buffered ? bytes_verify_kvbuffer_cycle(m.layer, prec, k.variant, C, p.drafts, (p.drafts + 1) / 2,
                                                      modelled_verify_window(m.layer.kind))
                               .total_bytes()
                         : bytes_verify_classic(m.layer, prec, p.drafts, true).total_bytes();
    }
    const double sample_s = bytes * p.batch / kBandwidth * steps * p.layers;
    total += std::max(budget_s, kMinSamples * sample_s) + (kWarmupSamples + 1) * sample_s + kSetupS + rest_s;
  }
  return total;
}

const std::vector<std::string>& decode_base_columns() {
  static const std::vector<std::string> c{
      "model",   "kernel",  "variant", "entry_dtype", "placement",     "batch",     "chunk",
      "layers",  "rows_per_block", "row_groups", "latency_us_median", "latency_us_min", "latency_us_max",
      "samples", "bytes_per_layer_step", "gbps", "frac_copy_bw", "copy_gbps", "sm_clock_mhz", "power_w",
      "gpu",     "commit",  "note"};
  return c;
}
const std::vector<std::string>& verify_base_columns() {
  static const std::vector<std::string> c{
      "model", "method", "batch", "drafts", "chunk", "layers", "acceptance", "tokens_per_step", "latency_us_median",
      "latency_us_min", "latency_us_max", "samples", "latency_us_per_token", "bytes_per_layer_step", "gbps",
      "frac_copy_bw", "copy_gbps", "sm_clock_mhz", "power_w", "gpu", "commit", "note"};
  return c;
}
// request_*_bytes: one request's linear-attention memory over all the model's linear layers on one
// GPU (sim/layout.h); attn_kv_bytes_per_layer_step: the bf16 K and V one full-attention layer
// reads per step for the batch at this context (the catalog's shapes after tp).
const std::vector<std::string>& decode_grid_columns() {
  static const std::vector<std::string> c{"tp",  "context_tokens", "mode", "state_dtype", "request_state_bytes",
                                          "request_entry_bytes", "attn_layers", "attn_kv_bytes_per_layer_step"};
  return c;
}
const std::vector<std::string>& verify_grid_columns() {
  static const std::vector<std::string> c{"tp", "context_tokens", "mode", "state_dtype", "entry_dtype",
                                          "request_state_bytes", "request_entry_bytes"};
  return c;
}
std::vector<std::string> decode_columns() {
  std::vector<std::string> c = decode_base_columns();
  c.insert(c.end(), decode_grid_columns().begin(), decode_grid_columns().end());
  return c;
}
std::vector<std::string> verify_columns() {
  std::vector<std::string> c = verify_base_columns();
  c.insert(c.end(), verify_grid_columns().begin(), verify_grid_columns().end());
  return c;
}
const std::vector<std::string>& decode_key_columns() {
  static const std::vector<std::string> c{"model", "kernel", "entry_dtype", "batch", "chunk", "layers",
                                          "tp", "context_tokens", "state_dtype", "commit"};
  return c;
}
const std::vector<std::string>& verify_key_columns() {
  static const std::vector<std::string> c{"model", "method", "entry_dtype", "batch", "drafts", "chunk", "layers",
                                          "acceptance", "tp", "context_tokens", "state_dtype", "commit"};
  return c;
}

std::map<std::string, std::string> point_columns(const SweepPoint& p, const std::string& gpu,
                                                 const std::string& commit) {
  std::map<std::string, std::string> c;
  c[p.decode() ? "kernel" : "method"] = p.kernel->name;
  c["model"] = p.model, c["batch"] = std::to_string(p.batch), c["chunk"] = std::to_string(p.chunk);
  c["layers"] = std::to_string(p.layers), c["tp"] = std::to_string(p.tp);
  c["context_tokens"] = std::to_string(p.context), c["mode"] = p.mode;
  c["state_dtype"] = p.state_dtype, c["entry_dtype"] = p.entry_dtype;
  c["gpu"] = gpu, c["commit"] = commit, c["note"] = p.note;
  if (p.decode()) {
    c["variant"] = p.kernel->buffered ? variant_name(p.kernel->variant) : "none";
    c["placement"] = p.kernel->out_of_place ? "out-of-place" : "in-place";
  } else {
    c["drafts"] = std::to_string(p.drafts), c["acceptance"] = fmt_g(p.acceptance);
  }
  ModelSpec m;
  if (!shape_problem(find_model(p.model), p.tp, m).empty()) return c;  // memory columns need the per-GPU shape
  Precision prec;
  prec.state = parse_state_type(p.state_dtype);
  if (p.kernel->buffered) prec.entry_bytes = entry_type_bytes(p.kernel->entry);
  const PoolLayout layout{m.layer, p.chunk, p.kernel->variant, prec};
  double states = 1, entries = 0;
  if (p.mode == "recurrent") {
    states = p.kernel->out_of_place ? 2 : 1;
  } else if (p.mode == "direct") {
    states = 0, entries = p.direct_fill >= 0 ? p.direct_fill : p.chunk;
  } else if (p.mode == "buffered") {
    entries = p.chunk;
  } else if (p.mode == "verify-classic") {
    states = 1 + p.drafts;
  } else {
    entries = p.chunk + p.drafts;  // the buffer and the verify scratch of T candidates
  }
  c["request_state_bytes"] = fmt_bytes(states * double(layout.state_bytes()) * m.linear_layers);
  c["request_entry_bytes"] = fmt_bytes(entries * double(layout.entry_bytes()) * m.linear_layers);
  if (p.decode()) {
    c["attn_layers"] = std::to_string(m.attn_layers);
    c["attn_kv_bytes_per_layer_step"] =
        m.attn_layers > 0 ? fmt_bytes(m.attn_kv_bytes_per_token() / m.attn_layers * p.context * p.batch) : "0";
  }
  return c;
}

std::vector<std::string> grid_fields(const SweepPoint& p) {
  const auto c = point_columns(p, "", "");
  std::vector<std::string> f;
  for (const std::string& name : p.decode() ? decode_grid_columns() : verify_grid_columns()) {
    const auto it = c.find(name);
    f.push_back(it == c.end() ? "" : it->second);
  }
  return f;
}

std::string point_key(const SweepPoint& p, const std::string& commit) {
  const auto c = point_columns(p, "", commit);
  std::vector<std::string> parts;
  for (const std::string& name : p.decode() ? decode_key_columns() : verify_key_columns()) parts.push_back(c.at(name));
  return join(parts, "\x1f");
}

CsvResume resume_csv(const std::string& path, const std::vector<std::string>& columns,
                     const std::vector<std::string>& key_columns, bool redo_clock_limited) {
  namespace fs = std::filesystem;
  CsvResume r;
  std::error_code ec;
  if (!fs::exists(path, ec)) return r;
  std::string text;
  {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw std::invalid_argument("cannot read " + path);
    text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (!text.empty() && text.back() != '\n') {
    // An interrupted write: the rows before it are whole lines.
    const size_t keep = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
    text.resize(keep);
    fs::resize_file(path, keep);
    r.dropped_torn_line = true;
  }
  if (text.empty()) return r;
  size_t pos = text.find('\n');
  const std::vector<std::string> header = split_csv_line(text.substr(0, pos));
  if (header != columns)
    throw std::invalid_argument(path + " has other columns than this sweep writes (an older sweep's file?): move it "
                                "away or give another output path");
  r.exists = true;
  const size_t note_at = size_t(std::find(header.begin(), header.end(), "note") - header.begin());
  std::vector<size_t> key_at;
  for (const std::string& k : key_columns)
    key_at.push_back(size_t(std::find(header.begin(), header.end(), k) - header.begin()));
  for (size_t start = pos + 1; start < text.size(); start = pos + 1) {
    pos = text.find('\n', start);
    const std::vector<std::string> f = split_csv_line(text.substr(start, pos - start));
    if (f.size() != header.size())
      throw std::invalid_argument(fmt::format("{}: a row has {} fields, the header {}", path, f.size(), header.size()));
    ++r.rows;
    if (note_at < f.size() && f[note_at].rfind("failed:", 0) == 0) continue;  // measured again
    if (redo_clock_limited && note_at < f.size() && f[note_at].find(kClockLimitedNote) != std::string::npos) continue;
    std::vector<std::string> parts;
    for (size_t i : key_at) parts.push_back(f.at(i));
    r.finished.insert(join(parts, "\x1f"));
  }
  return r;
}

}  // namespace kvbuf
