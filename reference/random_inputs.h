// Fresh random GDN inputs for the tests, the cross-checks, `kvbuf export` and the GPU tests, and
// the bf16 rounding that lets the float64 reference run on exactly a kernel's inputs.
#pragma once
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>

#include "reference/gdn.h"

namespace kvbuf::ref {

// Gate distribution: g ~ U(g_min, g_max) (log decay, g_max <= 0); beta ~ U(beta_min, beta_max),
// except that with probability p_beta_zero it is exactly 0 and with p_beta_one exactly 1.
struct GateRange {
  double g_min = -1.0, g_max = 0.0;
  double beta_min = 0.0, beta_max = 1.0;
  double p_beta_zero = 0.0, p_beta_one = 0.0;
  // Per-token decay exp(g) in about [0.37, 1): the usual regime of trained models.
  static GateRange typical() { return {}; }
  // Long memory: decays in [0.95, 1).
  static GateRange mild() { return {-0.05, 0.0, 0.0, 1.0, 0.0, 0.0}; }
  // g <= -60 per token (exp(G) underflows in float32 within two tokens, in float64 within 13),
  // beta exactly 0 or 1 half of the time.
  static GateRange extreme() { return {-100.0, -60.0, 0.0, 1.0, 0.25, 0.25}; }
};

inline void validate_gate_range(const GateRange& r) {
  if (!(r.g_min <= r.g_max && r.g_max <= 0.0))
    throw std::invalid_argument("GateRange: need g_min <= g_max <= 0");
  if (!(0.0 <= r.beta_min && r.beta_min <= r.beta_max && r.beta_max <= 1.0))
    throw std::invalid_argument("GateRange: need 0 <= beta_min <= beta_max <= 1");
  if (!(r.p_beta_zero >= 0 && r.p_beta_one >= 0 && r.p_beta_zero + r.p_beta_one <= 1.0))
    throw std::invalid_argument("GateRange: need p_beta_zero, p_beta_one >= 0 with sum <= 1");
}

// q, k, v ~ N(0, 1) (un-normalised, as a kernel receives them); gates from `gates`.
template <class T>
GdnTokens<T> make_random_gdn_tokens(const GdnDims& d, int steps, std::mt19937_64& rng,
                                    const GateRange& gates = {}) {
  gdn_validate_dims(d);
  if (steps < 0) throw std::invalid_argument("make_random_gdn_tokens: steps must be >= 0");
  validate_gate_range(gates);
  GdnTokens<T> x;
  x.dims = d;
  x.steps = steps;
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  auto fill_normal = [&](std::vector<T>& a, size_t n) {
    a.resize(n);
    for (auto& e : a) e = T(normal(rng));
  };
  fill_normal(x.q, size_t(steps) * d.H * d.K);
  fill_normal(x.k, size_t(steps) * d.H * d.K);
  fill_normal(x.v, size_t(steps) * d.HV * d.V);
  const size_t n_gates = size_t(steps) * d.HV;
  x.g.resize(n_gates);
  x.beta.resize(n_gates);
  for (size_t i = 0; i < n_gates; ++i) {
    x.g[i] = T(std::min(0.0, gates.g_min + (gates.g_max - gates.g_min) * unit(rng)));
    const double p = unit(rng);
    double b = gates.beta_min + (gates.beta_max - gates.beta_min) * unit(rng);
    if (p < gates.p_beta_zero) b = 0.0;
    else if (p < gates.p_beta_zero + gates.p_beta_one) b = 1.0;
    x.beta[i] = T(b);
  }
  return x;
}

// A random checkpoint: entries ~ N(0, scale^2).
template <class T>
GdnState<T> make_random_gdn_state(const GdnDims& d, std::mt19937_64& rng, double scale = 1.0) {
  gdn_validate_dims(d);
  std::normal_distribution<double> normal(0.0, scale);
  GdnState<T> s(size_t(d.HV), Mat<T>(d.K, d.V));
  for (auto& m : s)
    for (int i = 0; i < m.size(); ++i) m.data()[i] = T(normal(rng));
  return s;
}

// bf16 bits of a float, round-to-nearest-even (NaN stays a quiet NaN).
inline uint16_t float_to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
inline float bf16_bits_to_float(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// The value a bf16 store would keep: first to float (nearest), then to bf16 (nearest even).
template <class T>
T round_to_bf16(T x) {
  return T(bf16_bits_to_float(float_to_bf16_bits(float(x))));
}

// The inputs exactly as the kernels receive them (sim/layout.h): q, k, v rounded to
// bf16, g and beta to fp32; still held in T, so the float64 reference runs on the kernel's inputs.
template <class T>
GdnTokens<T> round_tokens_to_bf16(const GdnTokens<T>& x) {
  GdnTokens<T> r = x;
  for (auto* a : {&r.q, &r.k, &r.v})
    for (auto& e : *a) e = round_to_bf16(e);
  for (auto* a : {&r.g, &r.beta})
    for (auto& e : *a) e = T(float(e));
  return r;
}

}  // namespace kvbuf::ref
