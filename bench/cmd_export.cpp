// `kvbuf export`: one mode's inputs and outputs from the reference model as NumPy .npy files
// (format 1.0, little endian, C order) plus manifest.json naming every array, its shape, dtype and
// meaning, so that anyone can cross-check the modes in another framework.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>

#include "bench/cmd_common.h"
#include "bench/npy.h"
#include "reference/gdn.h"
#include "reference/mamba2.h"
#include "reference/random_inputs.h"

namespace kvbuf::cli {
namespace {

using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

// Exports larger than this many values are refused (the reference model would take minutes).
constexpr double kMaxExportValues = 1 << 28;

struct ExportOptions {
  ModelOptions model;
  std::string mode;
  std::string variant = "cached-u";
  int batch = 1;
  int steps = 0;
  int chunk = 16;
  int drafts = 4;
  int accept = 0;  // 0: all T
  long long seed = 1;
  std::string dtype = "f64";
  std::string out;
};

const char* kModes[] = {"recurrent", "chunk", "kvbuffer", "verify", "direct"};

// Collects arrays in order and writes them with their manifest entries.
class Exporter {
 public:
  explicit Exporter(std::string dir) : dir_(std::move(dir)) {}
  template <class T>
  void add(const std::string& name, const std::vector<T>& values, const std::vector<size_t>& shape,
           const std::string& description) {
    const std::string file = name + ".npy";
    npy::write((fs::path(dir_) / file).string(), values, shape);
    arrays_.push_back(Json{{"name", name},
                           {"file", file},
                           {"shape", shape},
                           {"dtype", npy::descr<T>()},
                           {"description", description}});
  }
  Json arrays() const { return arrays_; }

 private:
  std::string dir_;
  Json arrays_ = Json::array();
};

template <class T>
void append_state(std::vector<T>& flat, const std::vector<ref::Mat<T>>& state) {
  for (const auto& m : state)
    for (int r = 0; r < m.rows(); ++r)
      for (int c = 0; c < m.cols(); ++c) flat.push_back(m(r, c));
}

template <class T>
void append(std::vector<T>& flat, const std::vector<T>& part) {
  flat.insert(flat.end(), part.begin(), part.end());
}

std::string mode_semantics(const ExportOptions& o, int accept, bool gdn) {
  const std::string out = gdn ? "o" : "y";
  if (o.mode == "recurrent")
    return "recurrent decode from state0, one token at a time (the ground truth)";
  if (o.mode == "chunk")
    return fmt::format(
        "chunkwise prefill ({} form) from state0 in chunks of {} tokens (the last may be shorter); "
        "{} "
        "and state_final equal the recurrent ones up to rounding",
        gdn ? "WY/UT" : "SSD", o.chunk, out);
  if (o.mode == "kvbuffer")
    return fmt::format(
        "KVBuffer decode with buffer capacity C = {}{}: S0 = state0 is read, never written, until "
        "the "
        "buffer is full, then folded; state_final is the state after all tokens (remaining buffer "
        "folded); {} equals the recurrent output up to rounding",
        o.chunk, gdn ? fmt::format(", {} variant", o.variant) : "", out);
  if (o.mode == "verify")
    return fmt::format(
        "speculative verify on a KVBuffer of capacity C = {}{}: rounds of T = {} tokens (the last "
        "window may be shorter), all T outputs from one read of S0 plus the buffer; each round "
        "accepts "
        "m = {} tokens (fold first when fill + T > C) and the next round starts at the first "
        "rejected "
        "token; {}[t] is token t's output from the round that accepted it; state_final is the "
        "state "
        "after all tokens",
        o.chunk, gdn ? fmt::format(", {} variant", o.variant) : "", o.drafts, accept, out);
  return fmt::format(
      "short-context direct mode, buffer capacity C = {}{}: no state (state0 is zeros and never "
      "read) while the context fits in the buffer; on overflow the fold creates the state; "
      "state_final is the state after all tokens",
      o.chunk, gdn ? fmt::format(", {} variant", o.variant) : "");
}

template <class T>
Json export_gdn(const ExportOptions& o, const ModelSpec& m, int accept, Exporter& ex) {
  const ref::GdnDims d{m.layer.key_heads, m.layer.value_heads, m.layer.head_k, m.layer.head_v};
  const size_t N = o.batch, S = o.steps, H = d.H, HV = d.HV, K = d.K, V = d.V;
  std::mt19937_64 rng(uint64_t(o.seed));
  std::vector<T> q, k, v, g, beta, state0, state_final, out;
  for (size_t n = 0; n < N; ++n) {
    const ref::GdnTokens<T> x =
        ref::round_tokens_to_bf16(ref::make_random_gdn_tokens<T>(d, o.steps, rng));
    ref::GdnState<T> state =
        o.mode == "direct" ? ref::gdn_zero_state<T>(d) : ref::make_random_gdn_state<T>(d, rng);
    append(q, x.q), append(k, x.k), append(v, x.v), append(g, x.g), append(beta, x.beta);
    append_state(state0, state);
    std::vector<T> o_n;
    if (o.mode == "recurrent")
      ref::gdn_decode_recurrent(x, state, o_n);
    else if (o.mode == "chunk")
      ref::gdn_prefill_chunk(x, o.chunk, state, o_n);
    else if (o.mode == "kvbuffer")
      ref::gdn_decode_kvbuffer(x, o.chunk, parse_variant(o.variant), state, o_n);
    else if (o.mode == "verify")
      ref::gdn_verify_kvbuffer(x, o.chunk, parse_variant(o.variant), o.drafts, accept, state, o_n);
    else
      ref::gdn_decode_direct(x, o.chunk, parse_variant(o.variant), state, o_n);
    append(out, o_n);
    append_state(state_final, state);
  }
  ex.add("q", q, {N, S, H, K}, "queries, un-normalised (bf16-representable values)");
  ex.add("k", k, {N, S, H, K}, "keys, un-normalised (bf16-representable values)");
  ex.add("v", v, {N, S, HV, V}, "values (bf16-representable values)");
  ex.add("g", g, {N, S, HV}, "log decay per value head, <= 0 (fp32-representable)");
  ex.add("beta", beta, {N, S, HV},
         "delta-rule step size per value head, in [0, 1] (fp32-representable)");
  ex.add("state0", state0, {N, HV, K, V},
         "initial state S (K x V per value head); zeros in direct mode");
  ex.add("state_final", state_final, {N, HV, K, V}, "state after all tokens");
  ex.add("o", out, {N, S, HV, V}, "outputs");
  return Json{{"H", d.H}, {"HV", d.HV}, {"K", d.K}, {"V", d.V}};
}

template <class T>
Json export_mamba2(const ExportOptions& o, const ModelSpec& m, int accept, Exporter& ex) {
  const ref::Mamba2Dims d{m.layer.key_heads, m.layer.value_heads, m.layer.head_k, m.layer.head_v};
  const size_t N = o.batch, S = o.steps, G = d.G, NH = d.NH, Nst = d.N, P = d.P;
  std::mt19937_64 rng(uint64_t(o.seed));
  std::vector<T> xs, Bs, Cs, dts, A, D, state0, state_final, out;
  for (size_t n = 0; n < N; ++n) {
    ref::Mamba2Tokens<T> x =
        ref::round_mamba2_tokens_to_bf16(ref::make_random_mamba2_tokens<T>(d, o.steps, rng));
    if (n == 0) A = x.A, D = x.D;
    x.A = A, x.D = D;  // layer parameters, shared by the batch
    ref::Mamba2State<T> state = o.mode == "direct" ? ref::mamba2_zero_state<T>(d)
                                                   : ref::make_random_mamba2_state<T>(d, rng);
    append(xs, x.x), append(Bs, x.B), append(Cs, x.C), append(dts, x.dt);
    append_state(state0, state);
    std::vector<T> y_n;
    if (o.mode == "recurrent")
      ref::mamba2_decode_recurrent(x, state, y_n);
    else if (o.mode == "chunk")
      ref::mamba2_prefill_chunk(x, o.chunk, state, y_n);
    else if (o.mode == "kvbuffer")
      ref::mamba2_decode_kvbuffer(x, o.chunk, state, y_n);
    else if (o.mode == "verify")
      ref::mamba2_verify_kvbuffer(x, o.chunk, o.drafts, accept, state, y_n);
    else
      ref::mamba2_decode_direct(x, o.chunk, state, y_n);
    append(out, y_n);
    append_state(state_final, state);
  }
  ex.add("x", xs, {N, S, NH, P}, "head inputs (bf16-representable values)");
  ex.add("B", Bs, {N, S, G, Nst}, "input projections per group (bf16-representable values)");
  ex.add("C", Cs, {N, S, G, Nst}, "output projections per group (bf16-representable values)");
  ex.add("dt", dts, {N, S, NH},
         "time steps per head, > 0, already through softplus (fp32-representable)");
  ex.add("A", A, {NH}, "per-head decay rate, < 0 (the layer's, shared by the batch)");
  ex.add("D", D, {NH}, "per-head skip weight (the layer's, shared by the batch)");
  ex.add("state0", state0, {N, NH, P, Nst},
         "initial state S (P x N per head); zeros in direct mode");
  ex.add("state_final", state_final, {N, NH, P, Nst}, "state after all tokens");
  ex.add("y", out, {N, S, NH, P}, "outputs");
  return Json{{"G", d.G}, {"NH", d.NH}, {"N", d.N}, {"P", d.P}};
}

int run_export(const ExportOptions& o) {
  const std::vector<ModelSpec> models = o.model.selected_after_tp();
  const ModelSpec& m = models.front();
  const bool gdn = m.kind == LayerKind::GatedDeltaNet;
  if (!gdn && o.variant != "cached-u")
    throw UsageError("--variant applies to GDN only (a Mamba-2 entry is always x, B, dt, G)");
  const int accept = o.accept ? o.accept : o.drafts;
  if (o.mode == "verify") {
    if (o.drafts > o.chunk)
      throw UsageError(
          fmt::format("--drafts T = {} exceeds buffer capacity --chunk C = {} (need T <= C)",
                      o.drafts, o.chunk));
    if (accept < 1 || accept > o.drafts)
      throw UsageError(fmt::format("--accept must be in 1..T (T = {}), got {}", o.drafts, accept));
  }
  if (o.out.empty()) throw UsageError("--out DIR is required");
  const LayerShape& s = m.layer;
  const double values =
      double(o.batch) * (double(o.steps) * (2.0 * s.key_heads * s.head_k +
                                            2.0 * s.value_heads * s.head_v + 2.0 * s.value_heads) +
                         2.0 * s.value_heads * s.head_k * s.head_v);
  if (values > kMaxExportValues)
    throw UsageError(fmt::format(
        "export of {:.3g} values is too large (limit {:.3g}): lower --batch, --steps or the dims",
        values, kMaxExportValues));

  const fs::path manifest_path = fs::path(o.out) / "manifest.json";
  std::error_code ec;
  fs::create_directories(o.out, ec);
  std::ofstream manifest(manifest_path);
  if (ec || !manifest)
    throw UsageError("--out: cannot write to " + o.out + (ec ? ": " + ec.message() : ""));

  Exporter ex(o.out);
  Json dims;
  if (o.dtype == "f64")
    dims = gdn ? export_gdn<double>(o, m, accept, ex) : export_mamba2<double>(o, m, accept, ex);
  else
    dims = gdn ? export_gdn<float>(o, m, accept, ex) : export_mamba2<float>(o, m, accept, ex);

  Json j;
  j["format"] = "kvbuf export 1: NumPy .npy 1.0, little endian, C order";
  j["commit"] = source_commit();
  j["model"] =
      Json{{"name", m.name}, {"kind", layer_kind_name(m.kind)}, {"tp", m.tp}, {"dims", dims}};
  j["mode"] = o.mode;
  if (gdn && o.mode != "recurrent" && o.mode != "chunk") j["variant"] = o.variant;
  j["batch"] = o.batch;
  j["steps"] = o.steps;
  if (o.mode != "recurrent") j["chunk"] = o.chunk;
  if (o.mode == "verify") j["drafts"] = o.drafts, j["accept"] = accept;
  j["seed"] = o.seed;
  j["dtype"] = o.dtype;
  j["layer"] = gdn ? "Gated DeltaNet, per request and value head h (key head h / (HV/H)): k <- k / "
                     "sqrt(|k|^2 + 1e-6), "
                     "q <- q / sqrt(|q|^2 + 1e-6) * K^-0.5; per token S <- exp(g) S; u = beta (v - "
                     "S^T k); S <- S + k u^T; "
                     "o = S^T q, with S the K x V state"
                   : "Mamba-2, per request and head h (group h / (NH/G)): per token S <- exp(dt A) "
                     "S + dt x B^T; "
                     "y = S C + D x, with S the P x N state";
  j["semantics"] =
      mode_semantics(o, accept, gdn) +
      "; each request n runs its own steps tokens from state0[n]; the computation ran in " +
      (o.dtype == "f64" ? "float64" : "float32") + " on the exported values";
  j["arrays"] = ex.arrays();
  manifest << j.dump(2) << '\n';
  if (!manifest.flush()) throw std::runtime_error("write failed: " + manifest_path.string());
  fmt::print("wrote {} arrays and manifest.json to {}\n", j["arrays"].size(), o.out);
  return 0;
}

}  // namespace

Command add_export_command(CLI::App& app) {
  auto o = std::make_shared<ExportOptions>();
  Command c;
  c.app = app.add_subcommand(
      "export", "write one mode's reference inputs and outputs as .npy + manifest.json");
  o->model.add_to(c.app, false, false);
  c.app->add_option("--mode", o->mode, "which mode's reference")
      ->required()
      ->check(CLI::IsMember(std::vector<std::string>(std::begin(kModes), std::end(kModes))));
  c.app->add_option("--variant", o->variant, "GDN buffer variant")
      ->capture_default_str()
      ->check(CLI::IsMember({variant_name(BufferVariant::CachedU), variant_name(BufferVariant::Raw)}));
  c.app->add_option("--batch", o->batch, "requests N")->capture_default_str()->check(positive_integer());
  c.app->add_option("--steps", o->steps, "tokens per request T")->required()->check(positive_integer());
  c.app->add_option("--chunk", o->chunk, "buffer capacity C (prefill chunk for --mode chunk)")
      ->capture_default_str()
      ->check(CLI::Range(1, kMaxBufferCapacity));
  c.app->add_option("--drafts", o->drafts, "verify: tokens per round T")
      ->capture_default_str()
      ->check(positive_integer());
  c.app->add_option("--accept", o->accept, "verify: accepted per round m, 1..T (default T)");
  c.app->add_option("--seed", o->seed, "random seed")->capture_default_str()->check(non_negative_integer());
  c.app->add_option("--dtype", o->dtype, "computation precision")
      ->capture_default_str()
      ->check(CLI::IsMember({"f64", "f32"}));
  c.app->add_option("--out", o->out, "output folder (created if missing)")->required();
  c.run = [o] { return run_export(*o); };
  return c;
}

}  // namespace kvbuf::cli
