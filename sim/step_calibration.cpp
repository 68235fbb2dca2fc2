#include "sim/step_calibration.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>

#include "sim/catalog.h"
#include "sim/csv.h"

namespace kvbuf {
namespace {

std::invalid_argument bad(const std::string& what) { return std::invalid_argument(what); }

const std::vector<std::string> kColumns = {
    "model", "tp", "batch", "context", "method", "state_dtype", "chunk", "drafts", "routing", "expert_gemm",
    "measured_step_us", "simulated_step_us", "measured_linear_us", "simulated_linear_us", "measured_attention_us",
    "measured_gemm_us", "measured_elementwise_us", "modelled_comm_us", "measured_speedup", "commit"};

// Solves A x = b (n x n, row-major) by Gaussian elimination with partial pivoting; false if singular
// (a pivot below 1e-12 of A's largest entry).
bool solve(std::vector<double> a, std::vector<double> b, int n, std::vector<double>* x) {
  double largest = 0;
  for (double v : a) largest = std::max(largest, std::abs(v));
  for (int c = 0; c < n; ++c) {
    int p = c;
    for (int r = c + 1; r < n; ++r)
      if (std::abs(a[r * n + c]) > std::abs(a[p * n + c])) p = r;
    if (!(std::abs(a[p * n + c]) > 1e-12 * largest)) return false;
    for (int k = 0; k < n; ++k) std::swap(a[c * n + k], a[p * n + k]);
    std::swap(b[c], b[p]);
    for (int r = c + 1; r < n; ++r) {
      const double f = a[r * n + c] / a[c * n + c];
      for (int k = c; k < n; ++k) a[r * n + k] -= f * a[c * n + k];
      b[r] -= f * b[c];
    }
  }
  x->assign(n, 0);
  for (int r = n - 1; r >= 0; --r) {
    double s = b[r];
    for (int k = r + 1; k < n; ++k) s -= a[r * n + k] * (*x)[k];
    (*x)[r] = s / a[r * n + r];
  }
  return true;
}

// min sum_i ((x_i . c - y_i) / y_i)^2 over c >= 0: every subset of free coefficients solved by least
// squares, the best non-negative solution kept (exact for the <= 4 coefficients of a term).
template <size_t N>
std::array<double, N> fit_relative(const std::vector<std::array<double, N>>& xs, const std::vector<double>& ys) {
  std::array<double, N> scale{};
  for (const auto& x : xs)
    for (size_t j = 0; j < N; ++j) scale[j] = std::max(scale[j], std::abs(x[j]));
  std::array<double, N> best{};
  double best_cost = std::numeric_limits<double>::infinity();
  for (unsigned mask = 1; mask < (1u << N); ++mask) {
    std::vector<size_t> cols;
    for (size_t j = 0; j < N; ++j)
      if ((mask >> j & 1) && scale[j] > 0) cols.push_back(j);
    if (cols.empty() || cols.size() != size_t(__builtin_popcount(mask))) continue;
    const int n = int(cols.size());
    std::vector<double> ata(n * n, 0), atb(n, 0), c;
    for (size_t i = 0; i < xs.size(); ++i) {
      for (int p = 0; p < n; ++p) {
        const double xp = xs[i][cols[p]] / scale[cols[p]] / ys[i];
        atb[p] += xp;  // y_i / y_i
        for (int q = 0; q < n; ++q) ata[p * n + q] += xp * xs[i][cols[q]] / scale[cols[q]] / ys[i];
      }
    }
    if (!solve(ata, atb, n, &c)) continue;
    if (std::any_of(c.begin(), c.end(), [](double v) { return v < 0; })) continue;
    std::array<double, N> coef{};
    for (int p = 0; p < n; ++p) coef[cols[p]] = c[p] / scale[cols[p]];
    double cost = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      double pred = 0;
      for (size_t j = 0; j < N; ++j) pred += coef[j] * xs[i][j];
      cost += std::pow(pred / ys[i] - 1, 2);
    }
    if (cost < best_cost) best_cost = cost, best = coef;
  }
  return best;
}

}  // namespace

std::vector<StepProfile> read_step_profiles(const std::string& path) {
  std::vector<std::string> header;
  const std::vector<CsvRow> rows = read_csv_rows(path, &header);
  std::string missing;
  for (const std::string& c : kColumns)
    if (std::find(header.begin(), header.end(), c) == header.end()) missing += (missing.empty() ? "" : ", ") + c;
  if (!missing.empty()) throw bad("step CSV '" + path + "' lacks the columns " + missing);
  std::vector<StepProfile> out;
  int line = 1;
  for (const CsvRow& r : rows) {
    ++line;
    const std::string where = "step CSV '" + path + "' line " + std::to_string(line) + ": ";
    StepProfile p;
    try {
      auto num = [&](const char* c) {
        const std::string& v = r.at(c);
        const std::optional<double> d = csv_number(v);
        if (!d) throw bad(std::string(c) + " '" + v + "' is not a number");
        return *d;
      };
      // A point that did not run (memory, a shape that cannot launch): no measured terms, its reason
      // in the note. A row with neither is damaged.
      if (r.at("measured_linear_us").empty()) {
        const auto note = r.find("note");
        if (note != r.end() && !note->second.empty()) continue;
        throw bad("no measured terms and no reason in the note");
      }
      p.model = r.at("model");
      p.method = r.at("method");
      p.state_dtype = r.at("state_dtype");
      p.routing = r.at("routing");
      p.expert_gemm = r.at("expert_gemm");
      p.commit = r.at("commit");
      p.tp = int(num("tp"));
      p.batch = int(num("batch"));
      p.context = long(num("context"));
      p.chunk = int(num("chunk"));
      p.drafts = int(num("drafts"));
      p.measured_step_us = r.at("measured_step_us").empty() ? 0 : num("measured_step_us");
      p.simulated_step_us = num("simulated_step_us");
      p.measured_linear_us = num("measured_linear_us");
      p.simulated_linear_us = num("simulated_linear_us");
      p.measured_attention_us = num("measured_attention_us");
      p.measured_gemm_us = num("measured_gemm_us");
      p.measured_elementwise_us = num("measured_elementwise_us");
      p.modelled_comm_us = num("modelled_comm_us");
      p.measured_speedup = r.at("measured_speedup").empty() ? 0 : num("measured_speedup");
      if (p.batch < 1 || p.context < 1 || p.tp < 1 || p.measured_step_us < 0)
        throw bad("batch, context and tp must be positive, measured_step_us not negative");
      if (p.measured_linear_us < 0 || p.measured_attention_us < 0 || p.measured_gemm_us < 0 ||
          p.measured_elementwise_us < 0)
        throw bad("a measured term is negative");
      // The features count bytes, FLOPs and kernels: no GPU number enters them.
      p.features = StepModel(step_config(p, find_gpu("h200")), MeasuredLinearTable())
                       .features(std::vector<long>(size_t(p.batch), p.context));
    } catch (const std::invalid_argument& e) {
      throw bad(where + e.what());
    } catch (const std::out_of_range&) {
      throw bad(where + "a value is out of range");
    }
    out.push_back(std::move(p));
  }
  return out;
}

StepConfig step_config(const StepProfile& p, const GpuSpec& gpu) {
  StepConfig cfg;
  cfg.model = find_model(p.model);
  cfg.tp = p.tp;
  cfg.method = parse_method(p.method);
  cfg.drafts = p.drafts;
  cfg.chunk = std::max({1, p.chunk, p.drafts});
  cfg.state = parse_state_type(p.state_dtype);
  cfg.routing = p.routing;
  cfg.gpu = gpu;
  return cfg;
}

ProfileKey profile_key(const StepProfile& p) { return {p.model, p.tp, p.drafts, p.routing, p.expert_gemm}; }

std::vector<ProfilePoint> profile_points(const std::vector<StepProfile>& rows) {
  std::vector<ProfilePoint> out;
  for (const StepProfile& p : rows)
    out.push_back({profile_key(p), p.batch, p.context,
                   {p.measured_attention_us, p.measured_gemm_us, p.measured_elementwise_us}});
  return out;
}

StepTermFit fit_step_terms(const std::vector<StepProfile>& rows) {
  if (rows.size() < size_t(GemmFeatures::kCount))
    throw bad("fitting the step terms needs at least " + std::to_string(GemmFeatures::kCount) + " rows, got " +
              std::to_string(rows.size()));
  std::vector<std::array<double, StepFeatures::kAttentionCount>> xa;
  std::vector<std::array<double, GemmFeatures::kCount>> xg;
  std::vector<std::array<double, StepFeatures::kElementwiseCount>> xe;
  std::vector<double> ya, yg, ye;
  std::set<std::string> commits;
  for (const StepProfile& p : rows) {
    if (p.measured_attention_us > 0) xa.push_back(p.features.attention()), ya.push_back(p.measured_attention_us);
    if (p.measured_gemm_us > 0) xg.push_back(p.features.gemm().values()), yg.push_back(p.measured_gemm_us);
    if (p.measured_elementwise_us > 0)
      xe.push_back(p.features.elementwise()), ye.push_back(p.measured_elementwise_us);
    commits.insert(p.commit);
  }
  StepTermFit f;
  f.fitted = true;
  f.rows = int(rows.size());
  for (const std::string& c : commits) f.source += (f.source.empty() ? "" : "+") + c;
  const auto a = fit_relative(xa, ya);
  const auto g = fit_relative(xg, yg);
  const auto e = fit_relative(xe, ye);
  f.attn_layer_us = a[0], f.attn_token_us = a[1], f.attn_us_per_byte = a[2];
  f.gemm_kernel_us = g[0], f.gemm_us_per_dense_byte = g[1], f.gemm_us_per_expert_byte = g[2], f.gemm_us_per_flop = g[3];
  f.elementwise_kernel_us = e[0], f.elementwise_us_per_byte = e[1];
  return f;
}

PredictedStep predict_step(const StepTermFit& fit, const StepProfile& row) {
  PredictedStep s;
  s.linear_us = row.simulated_linear_us;
  s.attention_us = fitted_attention_us(fit, row.features);
  s.gemm_us = fitted_gemm_us(fit, row.features.gemm());
  s.elementwise_us = fitted_elementwise_us(fit, row.features);
  s.comm_us = row.modelled_comm_us;
  return s;
}

HoldOut parse_hold_out(const std::string& name) {
  if (name == "model") return HoldOut::Model;
  if (name == "batch") return HoldOut::Batch;
  throw bad("hold-out '" + name + "' is not one of model, batch");
}
const char* hold_out_name(HoldOut h) { return h == HoldOut::Model ? "model" : "batch"; }

std::string ValidationRow::worst_term() const {
  const std::pair<const char*, double> misses[] = {
      {"linear", std::abs(predicted.linear_us - row.measured_linear_us)},
      {"attention", std::abs(predicted.attention_us - row.measured_attention_us)},
      {"gemm", std::abs(predicted.gemm_us - row.measured_gemm_us)},
      {"elementwise", std::abs(predicted.elementwise_us - row.measured_elementwise_us)}};
  return std::max_element(std::begin(misses), std::end(misses),
                          [](const auto& a, const auto& b) { return a.second < b.second; })
      ->first;
}

std::vector<ValidationRow> validate_held_out(const std::vector<StepProfile>& rows, HoldOut by) {
  auto fold_of = [by](const StepProfile& p) { return by == HoldOut::Model ? p.model : std::to_string(p.batch); };
  std::vector<std::string> folds;
  for (const StepProfile& p : rows)
    if (std::find(folds.begin(), folds.end(), fold_of(p)) == folds.end()) folds.push_back(fold_of(p));
  std::vector<ValidationRow> out;
  for (const std::string& fold : folds) {
    std::vector<StepProfile> fit_rows, held;
    // A terms-only row (no whole step) fits but is not checked.
    for (const StepProfile& p : rows)
      if (fold_of(p) != fold) fit_rows.push_back(p);
      else if (p.measured_step_us > 0) held.push_back(p);
    if (held.empty()) continue;
    if (fit_rows.size() < size_t(GemmFeatures::kCount)) continue;
    const StepTermFit fit = fit_step_terms(fit_rows);
    // The classic row a kvbuffer row's speedup is against: same point, other method.
    auto key = [](const StepProfile& p) {
      return std::make_tuple(p.model, p.tp, p.batch, p.context, p.state_dtype, p.drafts, p.routing, p.expert_gemm);
    };
    std::map<decltype(key(held[0])), double> classic_us;
    for (const StepProfile& p : held)
      if (p.method == "classic") classic_us[key(p)] = predict_step(fit, p).total();
    for (const StepProfile& p : held) {
      ValidationRow v;
      v.row = p;
      v.fold = fold;
      v.fit_rows = int(fit_rows.size());
      v.predicted = predict_step(fit, p);
      const auto it = classic_us.find(key(p));
      if (p.method == "kvbuffer" && it != classic_us.end()) v.predicted_speedup = it->second / v.predicted.total();
      out.push_back(v);
    }
  }
  return out;
}

double ProfileValidationRow::measured_term(int i) const {
  const double m[] = {row.measured_linear_us, row.measured_attention_us, row.measured_gemm_us,
                      row.measured_elementwise_us};
  return m[i];
}
double ProfileValidationRow::predicted_term(int i) const {
  const double p[] = {linear_us, predicted[0], predicted[1], predicted[2]};
  return p[i];
}
std::string ProfileValidationRow::worst_term() const {
  static const char* names[] = {"linear", "attention", "gemm", "elementwise"};
  int worst = 0;
  for (int i = 1; i < 4; ++i)
    if (std::abs(predicted_term(i) - measured_term(i)) > std::abs(predicted_term(worst) - measured_term(worst)))
      worst = i;
  return names[worst];
}

std::vector<ProfileValidationRow> validate_with_profiles(const std::vector<StepProfile>& steps,
                                                         const std::vector<StepProfile>* separate_run,
                                                         const GpuSpec& gpu) {
  auto point = [](const StepProfile& p) { return std::make_tuple(profile_key(p), p.batch, p.context); };
  // The fit beyond the profile's range: on the profile's rows where it has enough, else the GPU's own.
  auto parametric_gpu = [&gpu](const std::vector<StepProfile>& profile) {
    GpuSpec g = gpu;
    if (profile.size() >= size_t(GemmFeatures::kCount)) g.step_terms = fit_step_terms(profile);
    return g;
  };
  auto predict = [](const StepProfile& row, const GpuSpec& g, std::shared_ptr<const StepProfileTable> table,
                    const char* how, int points) {
    const StepModel model(step_config(row, g), MeasuredLinearTable(), std::move(table));
    const StepTerms t = model.step_uniform(row.batch, row.context);
    ProfileValidationRow v;
    v.row = row;
    v.profile = how;
    v.profile_points = points;
    v.linear_us = row.simulated_linear_us;
    v.comm_us = row.modelled_comm_us;
    v.predicted = {t.attn_kv_us, t.projections_us + t.mlp_us + t.lm_head_us, t.overhead_us};
    v.sources = t.operator_sources;
    return v;
  };
  std::vector<ProfileValidationRow> out;
  if (separate_run) {
    const auto table = std::make_shared<const StepProfileTable>(profile_points(*separate_run));
    const GpuSpec g = parametric_gpu(*separate_run);
    for (const StepProfile& row : steps)
      if (row.measured_step_us > 0) out.push_back(predict(row, g, table, "separate-run", int(separate_run->size())));
  } else {
    for (const StepProfile& row : steps) {
      if (!(row.measured_step_us > 0)) continue;
      std::vector<StepProfile> others;
      for (const StepProfile& p : steps)
        if (point(p) != point(row)) others.push_back(p);
      const auto table = std::make_shared<const StepProfileTable>(profile_points(others));
      out.push_back(predict(row, parametric_gpu(others), table, "leave-point-out", int(others.size())));
    }
  }
  // Speedups: a kvbuffer row against the classic row of the same point and state type.
  std::map<std::tuple<ProfileKey, int, long, std::string>, double> classic;
  for (const ProfileValidationRow& v : out)
    if (v.row.method == "classic") classic[{profile_key(v.row), v.row.batch, v.row.context, v.row.state_dtype}] = v.total();
  for (ProfileValidationRow& v : out) {
    if (v.row.method != "kvbuffer") continue;
    const auto it = classic.find({profile_key(v.row), v.row.batch, v.row.context, v.row.state_dtype});
    if (it != classic.end()) v.predicted_speedup = it->second / v.total();
  }
  return out;
}

}  // namespace kvbuf
