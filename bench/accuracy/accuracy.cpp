// The plain C++ half of `kvbuf accuracy` (bench/accuracy/accuracy.h says what each piece is).
#include "bench/accuracy/accuracy.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <exception>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "reference/random_inputs.h"
#include "reference/state_rounding.h"
#include "sim/gpus.h"

namespace kvbuf::accuracy {
namespace {

[[noreturn]] void bad(const std::string& what) { throw std::invalid_argument(what); }

// splitmix64 of (seed, stream, index): each token's generator (and the layer's) gets unrelated
// seeds for neighbouring seeds and indices.
uint64_t mix_seed(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + stream * 0xbf58476d1ce4e5b9ull + index * 0x94d049bb133111ebull + 1;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
constexpr uint64_t kLayerStream = 1, kTokenStream = 2;

// Token t's generator.
std::mt19937_64 token_rng(uint64_t seed, int t) { return std::mt19937_64(mix_seed(seed, kTokenStream, uint64_t(t))); }
float bf16_normal(std::mt19937_64& rng, std::normal_distribution<double>& normal) {
  return float(ref::round_to_bf16(normal(rng)));
}

double softplus(double x) { return x > 20 ? x : std::log1p(std::exp(x)); }

void check_tokens(int tokens) {
  if (tokens < 1) bad("accuracy inputs: tokens must be >= 1, got " + std::to_string(tokens));
}

}  // namespace

std::string Variant::label() const {
  if (!kvbuffer) return fmt::format("recurrent {}", state_type_name(state));
  std::string s = fmt::format("kvbuffer {} C {}", state_type_name(state), chunk);
  if (entry != EntryType::BF16) s += fmt::format(" {} entries", entry_type_name(entry));
  return s;
}

std::vector<Variant> make_variants(LayerKind kind, const std::vector<StateType>& states, const std::vector<int>& chunks,
                                   const std::vector<EntryType>& entries) {
  std::vector<Variant> out;
  auto add = [&](const Variant& v) {
    for (const Variant& o : out)
      if (o.kvbuffer == v.kvbuffer && o.state == v.state && o.entry == v.entry && o.chunk == v.chunk) return;
    out.push_back(v);
  };
  for (StateType s : states) {
    add(Variant{false, s, EntryType::BF16, 0});
    for (EntryType e : entries)
      for (int C : chunks) add(Variant{true, s, kind == LayerKind::Mamba2 ? EntryType::BF16 : e, C});
  }
  return out;
}

std::vector<int> sample_points(int tokens, int every) {
  if (tokens < 1) bad("sample_points: tokens must be >= 1, got " + std::to_string(tokens));
  if (every < 1) bad("sample_points: every must be >= 1, got " + std::to_string(every));
  std::vector<int> p;
  for (int t = every; t <= tokens; t += every) p.push_back(t);
  if (p.empty() || p.back() != tokens) p.push_back(tokens);
  return p;
}

bool state_in_pool(const Variant& v, int decoded) { return !v.kvbuffer || decoded % v.chunk == 0; }

// ---- inputs ---------------------------------------------------------------------------------------

ref::GdnDims gdn_dims(const LayerShape& s) { return {s.key_heads, s.value_heads, s.head_k, s.head_v}; }
ref::Mamba2Dims mamba2_dims(const LayerShape& s) { return {s.key_heads, s.value_heads, s.head_k, s.head_v}; }

GdnInputs make_gdn_inputs(const ref::GdnDims& d, int tokens, uint64_t seed, int threads) {
  ref::gdn_validate_dims(d);
  check_tokens(tokens);
  GdnInputs in;
  in.dims = d, in.tokens = tokens;
  // The layer: A_log ~ U(log 1, log 16); dt_bias from the head's median |g| (header).
  {
    std::mt19937_64 rng(mix_seed(seed, kLayerStream, 0));
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    const double lo = std::log(-std::log(0.999)), hi = std::log(std::log(2.0));
    for (int h = 0; h < d.HV; ++h) {
      const float A_log = float(std::log(16.0) * unit(rng));
      const double g_abs = std::exp(lo + (h + 0.5) / d.HV * (hi - lo));
      in.A_log.push_back(A_log);
      in.dt_bias.push_back(float(std::log(std::expm1(g_abs / std::exp(double(A_log))))));
    }
  }
  const size_t qk = size_t(d.H) * d.K, v = size_t(d.HV) * d.V, hv = size_t(d.HV);
  in.q.resize(tokens * qk), in.k.resize(tokens * qk), in.v.resize(tokens * v);
  in.a.resize(tokens * hv), in.b.resize(tokens * hv);
  parallel_for(tokens, resolve_threads(threads), [&](int t) {
    std::mt19937_64 rng = token_rng(seed, t);
    std::normal_distribution<double> normal(0.0, 1.0);
    for (size_t i = 0; i < qk; ++i) in.q[t * qk + i] = bf16_normal(rng, normal);
    for (size_t i = 0; i < qk; ++i) in.k[t * qk + i] = bf16_normal(rng, normal);
    for (size_t i = 0; i < v; ++i) in.v[t * v + i] = bf16_normal(rng, normal);
    for (size_t i = 0; i < hv; ++i) in.a[t * hv + i] = bf16_normal(rng, normal);
    for (size_t i = 0; i < hv; ++i) in.b[t * hv + i] = bf16_normal(rng, normal);
  });
  return in;
}

Mamba2Inputs make_mamba2_inputs(const ref::Mamba2Dims& d, int tokens, uint64_t seed, int threads) {
  ref::mamba2_validate_dims(d);
  check_tokens(tokens);
  Mamba2Inputs in;
  in.dims = d, in.tokens = tokens;
  // The layer as Mamba initialises it: A_log ~ U(log 1, log 16), softplus(dt_bias) ~ logU(1e-3, 1e-1), D = 1.
  {
    std::mt19937_64 rng(mix_seed(seed, kLayerStream, 0));
    std::uniform_real_distribution<double> unit(0.0, 1.0);
    for (int h = 0; h < d.NH; ++h) {
      in.A.push_back(float(-std::exp(std::log(16.0) * unit(rng))));
      const double dt0 = std::exp(std::log(1e-3) + unit(rng) * (std::log(1e-1) - std::log(1e-3)));
      in.dt_bias.push_back(float(dt0 + std::log(-std::expm1(-dt0))));
      in.D.push_back(1.0f);
    }
  }
  const size_t x = size_t(d.NH) * d.P, bc = size_t(d.G) * d.N, nh = size_t(d.NH);
  in.x.resize(tokens * x), in.B.resize(tokens * bc), in.C.resize(tokens * bc), in.dt_raw.resize(tokens * nh);
  parallel_for(tokens, resolve_threads(threads), [&](int t) {
    std::mt19937_64 rng = token_rng(seed, t);
    std::normal_distribution<double> normal(0.0, 1.0);
    for (size_t i = 0; i < x; ++i) in.x[t * x + i] = bf16_normal(rng, normal);
    for (size_t i = 0; i < bc; ++i) in.B[t * bc + i] = bf16_normal(rng, normal);
    for (size_t i = 0; i < bc; ++i) in.C[t * bc + i] = bf16_normal(rng, normal);
    for (size_t i = 0; i < nh; ++i) in.dt_raw[t * nh + i] = bf16_normal(rng, normal);
  });
  return in;
}

namespace {

void check_range(int tokens, int begin, int count, const char* who) {
  if (begin < 0 || count < 0 || begin + count > tokens)
    bad(fmt::format("{}: tokens [{}, {}) outside [0, {})", who, begin, begin + count, tokens));
}

// The value heads [first, first + n) of GDN tokens [begin, begin + count): whole key heads (first
// and n multiples of HV / H) or part of one key head (dims H = 1).
ref::GdnTokens<double> gdn_slice(const GdnInputs& in, int begin, int count, int first, int n) {
  const ref::GdnDims& d = in.dims;
  check_range(in.tokens, begin, count, "gdn_reference_tokens");
  const int r = d.HV / d.H;
  const bool whole = first % r == 0 && n % r == 0;
  if (first < 0 || n < 1 || first + n > d.HV || !(whole || first / r == (first + n - 1) / r))
    bad(fmt::format("gdn_reference_tokens: value heads [{}, {}) are neither whole key heads nor part of one",
                    first, first + n));
  ref::GdnTokens<double> x;
  const int kh0 = first / r, nk = whole ? n / r : 1;
  x.dims = {nk, n, d.K, d.V};
  x.steps = count;
  for (int t = begin; t < begin + count; ++t) {
    const size_t qk = (size_t(t) * d.H + kh0) * d.K;
    x.q.insert(x.q.end(), in.q.begin() + qk, in.q.begin() + qk + size_t(nk) * d.K);
    x.k.insert(x.k.end(), in.k.begin() + qk, in.k.begin() + qk + size_t(nk) * d.K);
    const size_t v = (size_t(t) * d.HV + first) * d.V;
    x.v.insert(x.v.end(), in.v.begin() + v, in.v.begin() + v + size_t(n) * d.V);
    for (int h = first; h < first + n; ++h) {
      const size_t i = size_t(t) * d.HV + h;
      x.g.push_back(ref::gdn_gate_g<double>(in.a[i], in.A_log[h], in.dt_bias[h]));
      x.beta.push_back(ref::gdn_gate_beta<double>(in.b[i]));
    }
  }
  return x;
}

// The heads [first, first + n) of Mamba-2 tokens, within one group or whole groups.
ref::Mamba2Tokens<double> mamba2_slice(const Mamba2Inputs& in, int begin, int count, int first, int n) {
  const ref::Mamba2Dims& d = in.dims;
  check_range(in.tokens, begin, count, "mamba2_reference_tokens");
  const int r = d.NH / d.G;
  const bool whole = first % r == 0 && n % r == 0;
  if (first < 0 || n < 1 || first + n > d.NH || !(whole || first / r == (first + n - 1) / r))
    bad(fmt::format("mamba2_reference_tokens: heads [{}, {}) are neither whole groups nor part of one", first,
                    first + n));
  ref::Mamba2Tokens<double> x;
  const int g0 = first / r, ng = whole ? n / r : 1;
  x.dims = {ng, n, d.N, d.P};
  x.steps = count;
  for (int h = first; h < first + n; ++h) x.A.push_back(in.A[h]), x.D.push_back(in.D[h]);
  for (int t = begin; t < begin + count; ++t) {
    const size_t xi = (size_t(t) * d.NH + first) * d.P;
    x.x.insert(x.x.end(), in.x.begin() + xi, in.x.begin() + xi + size_t(n) * d.P);
    const size_t bc = (size_t(t) * d.G + g0) * d.N;
    x.B.insert(x.B.end(), in.B.begin() + bc, in.B.begin() + bc + size_t(ng) * d.N);
    x.C.insert(x.C.end(), in.C.begin() + bc, in.C.begin() + bc + size_t(ng) * d.N);
    for (int h = first; h < first + n; ++h) {
      // The kernel sums dt_raw + dt_bias in fp32, then applies softplus (here in float64).
      const float z = in.dt_raw[size_t(t) * d.NH + h] + in.dt_bias[h];
      x.dt.push_back(softplus(double(z)));
    }
  }
  return x;
}

}  // namespace

ref::GdnTokens<double> gdn_reference_tokens(const GdnInputs& in, int begin, int count) {
  return gdn_slice(in, begin, count, 0, in.dims.HV);
}
ref::Mamba2Tokens<double> mamba2_reference_tokens(const Mamba2Inputs& in, int begin, int count) {
  return mamba2_slice(in, begin, count, 0, in.dims.NH);
}

std::vector<double> median_decays(const GdnInputs& in) {
  std::vector<double> r;
  for (int h = 0; h < in.dims.HV; ++h) r.push_back(std::exp(ref::gdn_gate_g<double>(0.0, in.A_log[h], in.dt_bias[h])));
  return r;
}
std::vector<double> median_decays(const Mamba2Inputs& in) {
  std::vector<double> r;
  for (int h = 0; h < in.dims.NH; ++h) r.push_back(std::exp(softplus(double(in.dt_bias[h])) * double(in.A[h])));
  return r;
}

std::string inputs_description(LayerKind kind) {
  if (kind == LayerKind::GatedDeltaNet)
    return "GDN inputs as Qwen3-Next computes them: q, k, v ~ N(0,1) bf16 (q, k normalised in kernel), gates in "
           "kernel from a, b ~ N(0,1): g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b); A_log ~ U(log 1, "
           "log 16); dt_bias puts the heads' median decays e^g log-spaced in |g| over 0.5..0.999; zero initial state";
  return "Mamba-2 inputs as Nemotron-H: x, B, C ~ N(0,1) bf16; dt = softplus(dt_raw + dt_bias), dt_raw ~ N(0,1), "
         "softplus(dt_bias) ~ logU(1e-3, 1e-1); A = -exp(A_log), A_log ~ U(log 1, log 16); D = 1; no z gate; zero "
         "initial state";
}

// ---- the float64 ground truth ---------------------------------------------------------------------

void parallel_for(int n, int threads, const std::function<void(int)>& fn) {
  threads = std::max(1, std::min(resolve_threads(threads), n));
  if (threads == 1) {
    for (int i = 0; i < n; ++i) fn(i);
    return;
  }
  std::vector<std::exception_ptr> errors(static_cast<size_t>(threads));
  std::vector<std::thread> pool;
  for (int w = 0; w < threads; ++w)
    pool.emplace_back([&, w] {
      try {
        for (int i = w; i < n; i += threads) fn(i);  // i = w, w + threads, ...
      } catch (...) {
        errors[size_t(w)] = std::current_exception();
      }
    });
  for (auto& t : pool) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

int resolve_threads(int threads) {
  if (threads > 0) return threads;
  return std::max(1, int(std::thread::hardware_concurrency()));
}

std::vector<std::pair<int, int>> head_slices(int key_heads, int value_heads, int threads) {
  if (key_heads < 1 || value_heads < key_heads || value_heads % key_heads != 0)
    bad(fmt::format("head_slices: {} value heads over {} key heads", value_heads, key_heads));
  const int r = value_heads / key_heads;
  const int parts = std::min(r, std::max(1, (resolve_threads(threads) + key_heads - 1) / key_heads));
  std::vector<std::pair<int, int>> s;
  for (int kh = 0; kh < key_heads; ++kh)
    for (int p = 0; p < parts; ++p) {
      const int lo = kh * r + p * r / parts, hi = kh * r + (p + 1) * r / parts;
      if (hi > lo) s.push_back({lo, hi - lo});
    }
  return s;
}

GdnReference::GdnReference(const GdnInputs& in, int threads) : in_(in), threads_(resolve_threads(threads)) {
  for (const auto& [first, n] : head_slices(in.dims.H, in.dims.HV, threads_)) {
    first_head_.push_back(first), heads_.push_back(n);
    state_.push_back(ref::gdn_zero_state<double>({1, n, in.dims.K, in.dims.V}));
  }
}

void GdnReference::step(int begin, int end, std::vector<double>& o) {
  if (begin != stepped_ || end < begin || end > in_.tokens)
    bad(fmt::format("GdnReference::step: tokens [{}, {}) after {} stepped of {}", begin, end, stepped_, in_.tokens));
  const ref::GdnDims& d = in_.dims;
  const int count = end - begin;
  o.assign(size_t(count) * d.HV * d.V, 0.0);
  parallel_for(int(state_.size()), threads_, [&](int s) {
    const ref::GdnTokens<double> x = gdn_slice(in_, begin, count, first_head_[s], heads_[s]);
    std::vector<double> os;
    ref::gdn_decode_recurrent(x, state_[s], os);
    const size_t per = size_t(heads_[s]) * d.V;
    for (int t = 0; t < count; ++t)
      std::copy(os.begin() + t * per, os.begin() + (t + 1) * per, o.begin() + (size_t(t) * d.HV + first_head_[s]) * d.V);
  });
  stepped_ = end;
}

ref::GdnState<double> GdnReference::state() const {
  ref::GdnState<double> s;
  for (const auto& part : state_) s.insert(s.end(), part.begin(), part.end());
  return s;
}

Mamba2Reference::Mamba2Reference(const Mamba2Inputs& in, int threads) : in_(in), threads_(resolve_threads(threads)) {
  for (const auto& [first, n] : head_slices(in.dims.G, in.dims.NH, threads_)) {
    first_head_.push_back(first), heads_.push_back(n);
    state_.push_back(ref::mamba2_zero_state<double>({1, n, in.dims.N, in.dims.P}));
  }
}

void Mamba2Reference::step(int begin, int end, std::vector<double>& y) {
  if (begin != stepped_ || end < begin || end > in_.tokens)
    bad(fmt::format("Mamba2Reference::step: tokens [{}, {}) after {} stepped of {}", begin, end, stepped_, in_.tokens));
  const ref::Mamba2Dims& d = in_.dims;
  const int count = end - begin;
  y.assign(size_t(count) * d.NH * d.P, 0.0);
  parallel_for(int(state_.size()), threads_, [&](int s) {
    const ref::Mamba2Tokens<double> x = mamba2_slice(in_, begin, count, first_head_[s], heads_[s]);
    std::vector<double> ys;
    ref::mamba2_decode_recurrent(x, state_[s], ys);
    const size_t per = size_t(heads_[s]) * d.P;
    for (int t = 0; t < count; ++t)
      std::copy(ys.begin() + t * per, ys.begin() + (t + 1) * per, y.begin() + (size_t(t) * d.NH + first_head_[s]) * d.P);
  });
  stepped_ = end;
}

ref::Mamba2State<double> Mamba2Reference::state() const {
  ref::Mamba2State<double> s;
  for (const auto& part : state_) s.insert(s.end(), part.begin(), part.end());
  return s;
}

// ---- error metrics --------------------------------------------------------------------------------

double relative(double err_sq, double ref_sq) {
  if (std::isnan(err_sq) || std::isnan(ref_sq)) return std::numeric_limits<double>::quiet_NaN();
  if (err_sq == 0) return 0;
  if (ref_sq == 0) return std::numeric_limits<double>::infinity();
  return std::sqrt(err_sq / ref_sq);
}

namespace {
// max that keeps a NaN once seen.
double nan_max(double a, double b) { return std::isnan(a) || std::isnan(b) ? std::numeric_limits<double>::quiet_NaN() : std::max(a, b); }
}  // namespace

void OutputError::add(const OutputError& o) {
  err_sq += o.err_sq, ref_sq += o.ref_sq, count += o.count;
  max_abs = nan_max(max_abs, o.max_abs);
}

OutputError output_error(const float* out, const double* ref, size_t n) {
  OutputError e;
  e.count = n;
  for (size_t i = 0; i < n; ++i) {
    const double d = double(out[i]) - ref[i];
    e.err_sq += d * d, e.ref_sq += ref[i] * ref[i];
    e.max_abs = nan_max(e.max_abs, std::abs(d));
  }
  return e;
}

StateError state_error(const std::vector<double>& pool, const std::vector<Eigen::MatrixXd>& ref, bool ref_transposed,
                       StateType type) {
  size_t total = 0;
  for (const auto& m : ref) total += size_t(m.size());
  if (pool.size() != total)
    bad(fmt::format("state_error: the pool holds {} values, the reference state {}", pool.size(), total));
  StateError e;
  double err_sq = 0, ref_sq = 0, round_sq = 0;
  size_t i = 0;
  for (const auto& m : ref) {
    const long rows = ref_transposed ? m.cols() : m.rows(), cols = ref_transposed ? m.rows() : m.cols();
    double head_err = 0, head_ref = 0;
    for (long r = 0; r < rows; ++r)
      for (long c = 0; c < cols; ++c, ++i) {
        const double x = ref_transposed ? m(c, r) : m(r, c);
        const double d = pool[i] - x, dr = ref::round_to_state(x, type) - x;
        head_err += d * d, head_ref += x * x, round_sq += dr * dr;
      }
    err_sq += head_err, ref_sq += head_ref;
    e.max_head_rel = nan_max(e.max_head_rel, relative(head_err, head_ref));
  }
  e.rel = relative(err_sq, ref_sq);
  e.one_rounding = relative(round_sq, ref_sq);
  e.ref_norm = std::sqrt(ref_sq);
  return e;
}

// ---- CSV ------------------------------------------------------------------------------------------

const std::vector<std::string>& csv_columns() {
  static const std::vector<std::string> c = {
      "family", "model", "method", "state_dtype", "entry_dtype", "chunk", "tokens", "out_rel_err", "out_max_abs_err",
      "window_tokens", "out_rel_err_window", "out_ref_rms", "state_rel_err", "state_rel_err_max_head",
      "state_rel_err_one_rounding", "state_ref_norm", "seed", "gpu", "commit", "note"};
  return c;
}

std::vector<std::string> csv_fields(const Row& r) {
  auto g = [](double x) { return fmt::format("{:.6g}", x); };
  const Variant& v = r.variant;
  std::vector<std::string> f = {r.family, r.model, v.method(), state_type_name(v.state),
                                v.kvbuffer ? entry_type_name(v.entry) : "none", std::to_string(v.chunk),
                                std::to_string(r.tokens), g(r.out.rel()), g(r.out.max_abs),
                                std::to_string(r.window_tokens), g(r.window.rel()), g(r.out.ref_rms())};
  if (r.state)
    for (double x : {r.state->rel, r.state->max_head_rel, r.state->one_rounding, r.state->ref_norm}) f.push_back(g(x));
  else
    f.insert(f.end(), 4, "");
  f.insert(f.end(), {std::to_string(r.seed), r.gpu, r.commit, r.note});
  return f;
}

std::string default_out_path(const std::string& gpu_name) {
  return "results/accuracy_" + gpu_file_key(gpu_name) + ".csv";
}

// ---- the command ----------------------------------------------------------------------------------

void validate(const Options& o) {
  if (o.models.empty()) bad("--model needs at least one catalog model");
  for (const std::string& m : o.models) find_model(m);  // throws for an unknown name
  if (o.tokens < 1 || o.tokens > kMaxTokens)
    bad(fmt::format("--tokens must be in 1..{}, got {}", kMaxTokens, o.tokens));
  if (o.every < 1) bad(fmt::format("--every must be a positive integer, got {}", o.every));
  if (o.chunks.empty()) bad("--chunk needs at least one capacity C");
  for (int C : o.chunks)
    if (C < 1 || C > 64) bad(fmt::format("--chunk: C must be in 1..64 (the kernels' capacities), got {}", C));
  if (o.states.empty()) bad("--state-dtype needs at least one state type");
  if (o.entries.empty()) bad("--entry-dtype needs at least one entry type");
  if (o.threads < 0) bad(fmt::format("--threads must be >= 0, got {}", o.threads));
}

size_t planned_rows(const Options& o) {
  size_t rows = 0;
  for (const std::string& m : o.models)
    rows += make_variants(find_model(m).kind, o.states, o.chunks, o.entries).size() *
            sample_points(o.tokens, o.every).size();
  return rows;
}

std::string sampling_note(const Options& o) {
  long lcm = 1;
  for (int C : o.chunks) lcm = std::lcm(lcm, long(C));
  if (o.every % lcm == 0 && o.tokens % lcm == 0) return "";
  return fmt::format("note: --every {} / --tokens {} not multiples of {} (the lcm of --chunk): a KVBuffer row whose token "
                     "count is not a multiple of its C holds no state (S0 between folds; empty state columns)",
                     o.every, o.tokens, lcm);
}

}  // namespace kvbuf::accuracy
