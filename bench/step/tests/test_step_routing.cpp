// MoE routing and grouping of the step runner on the CPU: top-k with its tie rule and weights,
// uniform and skewed routing's expert loads, grouping by expert and its inverse.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "bench/step/step_routing.h"

namespace kvbuf::step {
namespace {

TEST(StepRouting, TopKTakesTheLargestLowerIndexFirstOnTiesAndSoftmaxWeights) {
  // One row of 6 experts: 3 and 5 tie at the top, 1 next.
  const std::vector<float> logits = {0.f, 1.f, -2.f, 2.f, 0.5f, 2.f};
  std::vector<int32_t> ids;
  std::vector<float> w;
  route_top_k(logits, 1, 6, 3, std::vector<float>(6, 0.f), ids, w);
  EXPECT_EQ(ids, (std::vector<int32_t>{3, 5, 1}));
  const double z = 2 * std::exp(2.0) + std::exp(1.0);
  EXPECT_NEAR(w[0], std::exp(2.0) / z, 1e-6);
  EXPECT_NEAR(w[1], std::exp(2.0) / z, 1e-6);
  EXPECT_NEAR(w[2], std::exp(1.0) / z, 1e-6);
  // A bias steers the choice, not the weights: +10 on expert 2 makes it first.
  std::vector<float> bias(6, 0.f);
  bias[2] = 10.f;
  route_top_k(logits, 1, 6, 2, bias, ids, w);
  EXPECT_EQ(ids, (std::vector<int32_t>{2, 3}));
  EXPECT_NEAR(w[0], std::exp(-2.0) / (std::exp(-2.0) + std::exp(2.0)), 1e-6);
  EXPECT_THROW(route_top_k(logits, 1, 6, 7, std::vector<float>(6, 0.f), ids, w), std::invalid_argument);
  EXPECT_THROW(route_top_k(logits, 2, 6, 2, std::vector<float>(6, 0.f), ids, w), std::invalid_argument);
}

std::vector<int> loads(Routing routing, int rows, int experts, int k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.f, 1.f);
  std::vector<float> logits(size_t(rows) * experts);
  for (float& x : logits) x = n(rng);
  std::vector<int32_t> ids;
  std::vector<float> w;
  route_top_k(logits, rows, experts, k, routing_bias(experts, routing), ids, w);
  std::vector<int> count(experts, 0);
  for (size_t r = 0; r < size_t(rows); ++r) {
    std::vector<int32_t> row(ids.begin() + r * k, ids.begin() + (r + 1) * k);
    std::sort(row.begin(), row.end());
    EXPECT_EQ(std::adjacent_find(row.begin(), row.end()), row.end()) << "an expert twice in row " << r;
    for (int32_t e : row) ++count[e];
  }
  return count;
}

TEST(StepRouting, UniformRoutingLoadsEveryExpertAlike) {
  const int rows = 4096, experts = 64, k = 4;
  const std::vector<int> c = loads(Routing::Uniform, rows, experts, k, 11);
  const double mean = double(rows) * k / experts, sigma = std::sqrt(mean);
  for (int e = 0; e < experts; ++e) EXPECT_NEAR(c[e], mean, 5 * sigma) << "expert " << e;
}

TEST(StepRouting, SkewedRoutingFollowsTheZipfPopularity) {
  const int rows = 4096, experts = 64, k = 4;
  const std::vector<int> c = loads(Routing::Skewed, rows, experts, k, 12);
  EXPECT_GT(c[0], c[7]);
  EXPECT_GT(c[7], c[63]);
  EXPECT_GT(c[0], 5 * std::max(c[63], 1));
  EXPECT_EQ(std::accumulate(c.begin(), c.end(), 0), rows * k);
  EXPECT_THROW(parse_routing("zipf"), std::invalid_argument);
  EXPECT_EQ(parse_routing(routing_name(Routing::Skewed)), Routing::Skewed);
}

TEST(StepRouting, GroupingByExpertIsStableAndInvertible) {
  std::mt19937_64 rng(3);
  const int experts = 10;
  std::vector<int32_t> ids(57);
  for (int32_t& e : ids) e = int32_t(rng() % 7);  // experts 7..9 unused
  const ExpertGroups g = group_by_expert(ids, experts);
  ASSERT_EQ(g.offsets.size(), size_t(experts) + 1);
  EXPECT_EQ(g.offsets.front(), 0);
  EXPECT_EQ(g.offsets.back(), int32_t(ids.size()));
  for (int e = 0; e < experts; ++e) {
    EXPECT_LE(g.offsets[e], g.offsets[e + 1]);
    EXPECT_EQ(g.offsets[e + 1] - g.offsets[e], std::count(ids.begin(), ids.end(), e)) << "expert " << e;
    for (int p = g.offsets[e]; p < g.offsets[e + 1]; ++p) {
      EXPECT_EQ(ids[g.order[p]], e);
      if (p > g.offsets[e]) EXPECT_LT(g.order[p - 1], g.order[p]) << "stable within expert " << e;
    }
  }
  for (size_t a = 0; a < ids.size(); ++a) EXPECT_EQ(g.order[g.position[a]], int32_t(a));
  EXPECT_THROW(group_by_expert({0, 10}, experts), std::invalid_argument);
}

}  // namespace
}  // namespace kvbuf::step
