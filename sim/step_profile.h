// Operator profiles of the decode step (Vidur's method): the full-attention, GEMM/MoE and elementwise
// terms as `kvbuf step --measure` measured them, each term's kernels captured alone, looked up by
// the step model instead of being modelled. The terms do not depend on the linear-attention method
// or its state type (the same kernels run in both; the measured rows agree within run-to-run
// spread), so a profile is keyed by model, tp, drafts, routing and expert GEMM, and pools the
// rows of both methods and every state type (geometric mean where several share a coordinate).
//   attention: along the context at the requests' own batch where the profile brackets it there,
//       else along the KV tokens read (batch x context summed over the requests): FlashInfer's decode
//       time follows the KV tokens whatever their split between batch and context (0.8B on the H200:
//       231.7 / 227.1 / 231.1 us at 8 x 4096, 32 x 1024, 128 x 256), batch 1 excepted;
//   GEMM/MoE and elementwise: along the batch (the step's tokens), a batch's rows averaged over
//       their contexts;
// between two profiled neighbours the ratio measured / parametric interpolated log-linearly in the
// coordinate's log, times the parametric term at the point ("profile"). Beyond the profile's range
// ("profile-extrapolated"): the parametric term scaled to the nearest profiled point. A configuration the profile lacks: the parametric term ("parametric"), the
// calibrated fit or bytes over bandwidth.
#pragma once
#include <array>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace kvbuf {

enum class TermSource { Profile, ProfileExtrapolated, Parametric };
const char* term_source_name(TermSource s);  // "profile", "profile-extrapolated", "parametric"

// The step's terms a profile holds, us per step.
enum class OperatorTerm { Attention, Gemm, Elementwise };
constexpr int kOperatorTerms = 3;
const char* operator_term_name(OperatorTerm t);  // "attention", "gemm", "elementwise"
using OperatorTimes = std::array<double, kOperatorTerms>;

struct ProfileKey {
  std::string model;
  int tp = 1;
  int drafts = 0;
  std::string routing = "uniform";
  std::string expert_gemm = "none";  // none (dense), grouped, loop
  auto tie() const { return std::tie(model, tp, drafts, routing, expert_gemm); }
  bool operator<(const ProfileKey& o) const { return tie() < o.tie(); }
  bool operator==(const ProfileKey& o) const { return tie() == o.tie(); }
};

// One profiled point: every request at `context`.
struct ProfilePoint {
  ProfileKey key;
  int batch = 0;
  long context = 0;
  OperatorTimes us{};  // measured, us per step
};

struct TermLookup {
  double us = 0;
  TermSource source = TermSource::Parametric;
};

class StepProfileTable {
 public:
  StepProfileTable() = default;
  // Throws std::invalid_argument on a point with a non-positive batch or context, or a negative time.
  explicit StepProfileTable(const std::vector<ProfilePoint>& points);
  bool empty() const { return series_.empty(); }
  size_t points() const { return n_points_; }
  bool covers(const ProfileKey& key) const { return series_.count(key) > 0; }
  // The term at a step of `batch` requests reading `kv_tokens` KV tokens in all. `parametric(batch,
  // context)` is the parametric term at a uniform point (the fallback and the extrapolation's shape);
  // `parametric_here` the parametric term at the step itself.
  TermLookup lookup(const ProfileKey& key, OperatorTerm term, double batch, double kv_tokens,
                    const std::function<double(int batch, long context)>& parametric,
                    double parametric_here) const;

 private:
  // One term's profiled values along its coordinate (log KV tokens, log batch or log context),
  // duplicates merged by the geometric mean; each with a uniform point there for the parametric term.
  struct Node {
    double coordinate = 0, log_us = 0;
    int batch = 0;
    long context = 0;
  };
  // At x in the sorted series; beyond its ends (extrapolate) as the header says, else source
  // Parametric with us -1.
  static TermLookup interpolate(const std::vector<Node>& s, double x, const std::function<double(int, long)>& parametric,
                                double parametric_here, bool extrapolate);
  std::map<ProfileKey, std::array<std::vector<Node>, kOperatorTerms>> series_;
  std::map<ProfileKey, std::map<int, std::vector<Node>>> attention_by_batch_;  // along log context
  size_t n_points_ = 0;
};

}  // namespace kvbuf
