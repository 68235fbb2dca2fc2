// Helpers shared by the GDN reference tests: ground truth in float64, casts, concatenation.
#pragma once
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "reference/cross_checks.h"
#include "reference/gdn.h"
#include "reference/random_inputs.h"

namespace kvbuf::ref::test {

// The state's values in one vector, in its own precision (so the tolerance follows it).
template <class T>
std::vector<T> flat(const GdnState<T>& s) {
  std::vector<T> f;
  for (const auto& m : s) f.insert(f.end(), m.data(), m.data() + m.size());
  return f;
}

// a followed by b.
template <class T>
GdnTokens<T> concat(const GdnTokens<T>& a, const GdnTokens<T>& b) {
  GdnTokens<T> c = a;
  c.steps += b.steps;
  for (auto [dst, src] : {std::pair{&c.q, &b.q}, std::pair{&c.k, &b.k}, std::pair{&c.v, &b.v},
                          std::pair{&c.g, &b.g}, std::pair{&c.beta, &b.beta}})
    dst->insert(dst->end(), src->begin(), src->end());
  return c;
}

// Ground truth: the float64 recurrence from s0; o for every token and the final state.
struct Truth {
  std::vector<double> o;
  GdnState<double> state;
};
inline Truth recurrent_truth(const GdnTokens<double>& x, const GdnState<double>& s0) {
  Truth t{{}, s0};
  gdn_decode_recurrent(x, t.state, t.o);
  return t;
}

// Output rows [begin, begin + count) of o [T, HV, V].
template <class T>
std::vector<T> rows(const std::vector<T>& o, const GdnDims& d, int begin, int count) {
  const size_t row = size_t(d.HV) * d.V;
  return std::vector<T>(o.begin() + begin * row, o.begin() + (begin + count) * row);
}

inline const char* type_name(double) { return "f64"; }
inline const char* type_name(float) { return "f32"; }

inline std::string dims_str(const GdnDims& d) {
  return "H=" + std::to_string(d.H) + " HV=" + std::to_string(d.HV) + " K=" + std::to_string(d.K) +
         " V=" + std::to_string(d.V);
}

// Asserts a result (precision T) against the float64 truth with gdn_rel_tolerance.
template <class T>
void expect_close(const std::vector<T>& got, const std::vector<double>& want, const GdnDims& d,
                  int steps, const std::string& what) {
  const double tol = gdn_rel_tolerance<T>(d.K, d.V, steps);
  const double err = max_rel_err(got, want);
  EXPECT_LE(err, tol) << what << " (" << type_name(T{}) << ", " << dims_str(d) << ", " << steps
                      << " tokens)";
}

}  // namespace kvbuf::ref::test
