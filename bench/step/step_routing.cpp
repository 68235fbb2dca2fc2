#include "bench/step/step_routing.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace kvbuf::step {

Routing parse_routing(const std::string& name) {
  if (name == "uniform") return Routing::Uniform;
  if (name == "skewed") return Routing::Skewed;
  throw std::invalid_argument("unknown routing '" + name + "' (known: uniform, skewed)");
}

const char* routing_name(Routing r) { return r == Routing::Uniform ? "uniform" : "skewed"; }

std::vector<float> routing_bias(int experts, Routing r) {
  if (experts < 1) throw std::invalid_argument("routing_bias: experts must be positive");
  std::vector<float> bias(experts, 0.f);
  if (r == Routing::Skewed)
    for (int e = 0; e < experts; ++e) bias[e] = float(-kZipfAlpha * std::log(double(e + 1)));
  return bias;
}

void route_top_k(const std::vector<float>& logits, int rows, int experts, int k, const std::vector<float>& bias,
                 std::vector<int32_t>& ids, std::vector<float>& weights) {
  if (rows < 0 || experts < 1 || k < 1 || k > experts || logits.size() != size_t(rows) * experts ||
      bias.size() != size_t(experts))
    throw std::invalid_argument("route_top_k: sizes do not match rows x experts, or k outside 1..experts");
  ids.assign(size_t(rows) * k, 0);
  weights.assign(size_t(rows) * k, 0.f);
  std::vector<int> idx(experts);
  for (int r = 0; r < rows; ++r) {
    const float* l = &logits[size_t(r) * experts];
    for (int e = 0; e < experts; ++e) idx[e] = e;
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int a, int b) {
      const float sa = l[a] + bias[a], sb = l[b] + bias[b];
      return sa > sb || (sa == sb && a < b);
    });
    float top = l[idx[0]];
    for (int j = 1; j < k; ++j) top = std::max(top, l[idx[j]]);
    float sum = 0;
    for (int j = 0; j < k; ++j) sum += std::exp(l[idx[j]] - top);
    for (int j = 0; j < k; ++j) {
      ids[size_t(r) * k + j] = idx[j];
      weights[size_t(r) * k + j] = std::exp(l[idx[j]] - top) / sum;
    }
  }
}

ExpertGroups group_by_expert(const std::vector<int32_t>& ids, int experts) {
  if (experts < 1) throw std::invalid_argument("group_by_expert: experts must be positive");
  ExpertGroups g;
  g.offsets.assign(size_t(experts) + 1, 0);
  for (int32_t e : ids) {
    if (e < 0 || e >= experts) throw std::invalid_argument("group_by_expert: expert id outside 0..experts-1");
    ++g.offsets[size_t(e) + 1];
  }
  for (int e = 0; e < experts; ++e) g.offsets[e + 1] += g.offsets[e];
  std::vector<int32_t> next(g.offsets.begin(), g.offsets.end() - 1);
  g.order.resize(ids.size());
  g.position.resize(ids.size());
  for (size_t a = 0; a < ids.size(); ++a) {
    const int32_t p = next[ids[a]]++;
    g.order[p] = int32_t(a);
    g.position[a] = p;
  }
  return g;
}

}  // namespace kvbuf::step
