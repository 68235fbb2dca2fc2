// MoE routing and grouping of a decode step, the host definitions the GPU kernels of
// bench/step/step_kernels.h follow (and their tests compare against): top-k experts per token from
// the router's logits, and the token rows grouped by expert for the experts' GEMMs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace kvbuf::step {

// Uniform: the router's logits as they come (random weights route nearly uniformly). Skewed: a
// Zipf popularity over the experts, p_e ~ 1 / (e + 1)^alpha, added as log p_e to every logit, so
// that with exchangeable logits expert e is chosen in proportion to p_e (a few hot experts, as
// real routers show).
enum class Routing { Uniform, Skewed };
Routing parse_routing(const std::string& name);  // "uniform" | "skewed"; throws std::invalid_argument
const char* routing_name(Routing r);
constexpr double kZipfAlpha = 1.0;
// The bias added to the logits of each of `experts` (zeros for Uniform).
std::vector<float> routing_bias(int experts, Routing r);

// Per row of logits [rows, experts]: the k experts of the largest logit + bias (ties: the lower
// expert index first), in that order, and their weights softmax(logit) over the k chosen
// (Qwen's norm_topk_prob; the bias steers the choice only). ids, weights [rows, k].
void route_top_k(const std::vector<float>& logits, int rows, int experts, int k, const std::vector<float>& bias,
                 std::vector<int32_t>& ids, std::vector<float>& weights);

// The assignments (row r's j-th expert, index r * k + j) grouped by expert: offsets [experts + 1]
// (expert e's assignments at positions offsets[e] .. offsets[e + 1]), order [rows x k] the
// assignment index at each position (within an expert in increasing assignment index), position
// [rows x k] the inverse (the position of each assignment).
struct ExpertGroups {
  std::vector<int32_t> offsets, order, position;
};
ExpertGroups group_by_expert(const std::vector<int32_t>& ids, int experts);

}  // namespace kvbuf::step
