// Reference cross-checks: every mode of the reference model against its recurrent ground truth on
// fresh random inputs, float64 and float32. Run by `kvbuf check` and by the reference tests.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace kvbuf::ref {

struct CrossCheck {
  std::string name;   // e.g. "gdn kvbuffer cached-u C=16 f32 (o)"
  double max_rel_err; // max |x - ref| / max |ref| over the compared array(s)
  double tol;         // the tolerance it must stay under
  bool ok;            // max_rel_err <= tol (false on NaN)
};

// Normwise relative error: max_i |x_i - ref_i| / max_i |ref_i| (denominator floored at the
// smallest normal double, so an all-zero reference compares absolutely). NaN or a size mismatch
// gives +inf, which fails every tolerance.
template <class A, class B>
double max_rel_err(const std::vector<A>& x, const std::vector<B>& ref) {
  if (x.size() != ref.size()) return INFINITY;
  double diff = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = std::abs(double(x[i]) - double(ref[i]));
    if (!(d == d)) return INFINITY;
    diff = std::max(diff, d);
    scale = std::max(scale, std::abs(double(ref[i])));
  }
  return diff / std::max(scale, 2.2250738585072014e-308);
}

// Tolerance for a GDN mode run in precision T against the float64 recurrence, as a normwise
// relative error (max_rel_err), for head dims K, V and a sequence of `steps` tokens.
// Derivation: with unit roundoff u (2^-53 for double, 2^-24 for float), one token's update computes
// dot products of length K (S^T k, S^T q) and, in the buffered forms, sums over at most `steps`
// buffered tokens and V-long rows, each with a relative error of at most about (K + V + steps) u
// of the magnitudes involved (the classical gamma_n bound for an n-term sum). The recurrence is
// non-expansive (S -> exp(g) (I - beta k k^T) S with |k| <= 1, beta in [0, 1], g <= 0), so earlier
// errors are not amplified, and terms are bounded by about the outputs' own scale (normalised k, q;
// K^-0.5 on q). Intermediate magnitudes may exceed the result (u = beta (v - S^T k) cancels), so
// we allow a factor of 16 over the first-order bound: tol = 16 (K + V + steps) u.
template <class T>
double gdn_rel_tolerance(int K, int V, int steps) {
  const double u = std::is_same_v<T, float> ? 0x1p-24 : 0x1p-53;
  return 16.0 * double(K + V + steps) * u;
}

// GDN: every mode (chunk prefill, kvbuffer raw and cached-u, direct, classic and buffered verify,
// tree verify) vs gdn_decode_recurrent, outputs and final state, float64 and float32, plus the
// Mamba-2 checks (run_mamba2_cross_checks). Under 5 s on one core.
std::vector<CrossCheck> run_reference_cross_checks(uint64_t seed);

}  // namespace kvbuf::ref
