#include "sim/step_profile.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace kvbuf {
namespace {

// Log-log between two values; linear where one is 0 (a term the configuration does not have).
double between(double a, double b, double f) {
  if (a > 0 && b > 0) return std::exp(std::log(a) + f * (std::log(b) - std::log(a)));
  return a + f * (b - a);
}

}  // namespace

const char* term_source_name(TermSource s) {
  switch (s) {
    case TermSource::Profile: return "profile";
    case TermSource::ProfileExtrapolated: return "profile-extrapolated";
    case TermSource::Parametric: return "parametric";
  }
  return "?";
}

const char* operator_term_name(OperatorTerm t) {
  switch (t) {
    case OperatorTerm::Attention: return "attention";
    case OperatorTerm::Gemm: return "gemm";
    case OperatorTerm::Elementwise: return "elementwise";
  }
  return "?";
}

StepProfileTable::StepProfileTable(const std::vector<ProfilePoint>& points) {
  // Per series: coordinate -> (sum of log values, count, the first point there).
  struct Acc {
    double sum = 0;
    int n = 0;
    int batch = 0;
    long context = 0;
  };
  using Series = std::map<double, Acc>;
  std::map<ProfileKey, std::array<Series, kOperatorTerms>> acc;
  std::map<ProfileKey, std::map<int, Series>> acc_by_batch;
  // Rounded so that equal products of batch and context meet whatever their floating error.
  auto coordinate = [](double v) { return std::round(std::log(v) * 1e9) / 1e9; };
  auto add = [](Acc& a, const ProfilePoint& p, double us) {
    if (a.n == 0) a.batch = p.batch, a.context = p.context;
    a.sum += us > 0 ? std::log(us) : -INFINITY;  // geometric mean of positive values; a zero term stays 0
    a.n += 1;
  };
  for (const ProfilePoint& p : points) {
    if (p.batch < 1 || p.context < 1)
      throw std::invalid_argument("profile point of " + p.key.model + ": batch and context must be positive");
    for (double us : p.us)
      if (!(us >= 0) || !std::isfinite(us))
        throw std::invalid_argument("profile point of " + p.key.model + ": a term time is negative or not finite");
    auto& terms = acc[p.key];
    for (int t = 0; t < kOperatorTerms; ++t) {
      const bool attention = OperatorTerm(t) == OperatorTerm::Attention;
      add(terms[t][coordinate(attention ? double(p.batch) * double(p.context) : double(p.batch))], p, p.us[t]);
    }
    add(acc_by_batch[p.key][p.batch][coordinate(double(p.context))], p, p.us[int(OperatorTerm::Attention)]);
    ++n_points_;
  }
  auto nodes = [](const Series& series) {
    std::vector<Node> out;
    for (const auto& [c, a] : series) out.push_back({c, a.sum / a.n, a.batch, a.context});
    return out;
  };
  for (const auto& [key, terms] : acc)
    for (int t = 0; t < kOperatorTerms; ++t) series_[key][t] = nodes(terms[t]);
  for (const auto& [key, batches] : acc_by_batch)
    for (const auto& [batch, series] : batches) attention_by_batch_[key][batch] = nodes(series);
}

TermLookup StepProfileTable::interpolate(const std::vector<Node>& s, double x,
                                         const std::function<double(int, long)>& parametric,
                                         double parametric_here, bool extrapolate) {
  auto us_of = [](const Node& n) { return std::isfinite(n.log_us) ? std::exp(n.log_us) : 0.0; };
  constexpr double kSame = 1e-9;
  const auto hi = std::lower_bound(s.begin(), s.end(), x - kSame,
                                   [](const Node& n, double v) { return n.coordinate < v; });
  if (hi != s.end() && std::abs(hi->coordinate - x) <= kSame) return {us_of(*hi), TermSource::Profile};
  if (hi != s.begin() && hi != s.end()) {
    // Between two profiled points: their measured / parametric ratios interpolated, times the
    // parametric term here, so that the parametric shape (the experts a batch touches, a fixed cost
    // per layer) carries the curvature between them; the values themselves where it has none.
    const Node& a = *(hi - 1);
    const double f = (x - a.coordinate) / (hi->coordinate - a.coordinate);
    const double pa = parametric(a.batch, a.context), pb = parametric(hi->batch, hi->context);
    if (pa > 0 && pb > 0 && parametric_here > 0)
      return {between(us_of(a) / pa, us_of(*hi) / pb, f) * parametric_here, TermSource::Profile};
    return {between(us_of(a), us_of(*hi), f), TermSource::Profile};
  }
  if (!extrapolate || s.empty()) return {-1, TermSource::Parametric};
  // Beyond the profiled range: the parametric term's change, scaled to the nearest profiled point
  // (holding the nearest time below the range misses MoE GEMMs, whose touched experts fall with
  // the batch: 2x at Nemotron-3 Nano batch 1 from batch 8).
  const Node& edge = hi == s.begin() ? s.front() : s.back();
  const double anchor = parametric(edge.batch, edge.context);
  if (!(anchor > 0)) return {us_of(edge), TermSource::ProfileExtrapolated};
  return {us_of(edge) * parametric_here / anchor, TermSource::ProfileExtrapolated};
}

TermLookup StepProfileTable::lookup(const ProfileKey& key, OperatorTerm term, double batch, double kv_tokens,
                                    const std::function<double(int, long)>& parametric,
                                    double parametric_here) const {
  const auto it = series_.find(key);
  if (it == series_.end() || batch <= 0) return {parametric_here, TermSource::Parametric};
  if (term == OperatorTerm::Attention) {
    // The requests' own batch where the profile has it on both sides of (or at) their context:
    // FlashInfer's split of a small batch's KV differs from a large one's at the same KV tokens.
    const auto& by_batch = attention_by_batch_.at(key);
    const auto b = by_batch.find(int(std::lround(batch)));
    if (b != by_batch.end() && std::abs(batch - b->first) < 1e-9) {
      const TermLookup l = interpolate(b->second, std::log(std::max(1.0, kv_tokens / batch)), parametric,
                                       parametric_here, false);
      if (l.source == TermSource::Profile) return l;
    }
  }
  const double x = term == OperatorTerm::Attention ? std::log(std::max(1.0, kv_tokens)) : std::log(batch);
  return interpolate(it->second[int(term)], x, parametric, parametric_here, true);
}

}  // namespace kvbuf
