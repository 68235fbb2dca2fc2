// Helpers shared by the Mamba-2 reference tests: inputs drawn once in float and held in double
// too (so the float32 run and the float64 ground truth see exactly the same values), the float64
// recurrent truth, and the comparison of a mode's y and final state with it.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "reference/cross_checks.h"
#include "reference/mamba2.h"

namespace kvbuf::ref::test_mamba2 {

struct Inputs {
  Mamba2Tokens<float> x32;
  Mamba2Tokens<double> x;
  Mamba2State<float> s32;  // random checkpoint (zero when made with zero_state)
  Mamba2State<double> s0;
};

inline Inputs make_inputs(const Mamba2Dims& d, int steps, uint64_t seed,
                          const Mamba2DecayRange& decay = {}, bool zero_state = false) {
  std::mt19937_64 rng(seed);
  Inputs in;
  in.x32 = make_random_mamba2_tokens<float>(d, steps, rng, decay);
  in.s32 = zero_state ? mamba2_zero_state<float>(d) : make_random_mamba2_state<float>(d, rng);
  in.x = mamba2_cast_tokens<double>(in.x32);
  in.s0 = mamba2_cast_state<double>(in.s32);
  return in;
}

template <class T>
const Mamba2Tokens<T>& tokens(const Inputs& in) {
  if constexpr (std::is_same_v<T, float>)
    return in.x32;
  else
    return in.x;
}
template <class T>
const Mamba2State<T>& state0(const Inputs& in) {
  if constexpr (std::is_same_v<T, float>)
    return in.s32;
  else
    return in.s0;
}

template <class T>
std::vector<double> flat(const Mamba2State<T>& s) {
  std::vector<double> f;
  for (const auto& m : s) f.insert(f.end(), m.data(), m.data() + m.size());
  return f;
}

// a followed by b (same layer parameters: a's A and D).
template <class T>
Mamba2Tokens<T> concat(const Mamba2Tokens<T>& a, const Mamba2Tokens<T>& b) {
  Mamba2Tokens<T> c = a;
  c.steps += b.steps;
  for (auto [dst, src] : {std::pair{&c.x, &b.x}, std::pair{&c.B, &b.B}, std::pair{&c.C, &b.C},
                          std::pair{&c.dt, &b.dt}})
    dst->insert(dst->end(), src->begin(), src->end());
  return c;
}

// Ground truth: the float64 recurrence from s0.
struct Truth {
  Mamba2Tokens<double> x;
  Mamba2State<double> s0;
  std::vector<double> y;
  Mamba2State<double> state;
};
inline Truth recurrent_truth(const Mamba2Tokens<double>& x, const Mamba2State<double>& s0) {
  Truth t{x, s0, {}, s0};
  mamba2_decode_recurrent(x, t.state, t.y);
  return t;
}

// Rows [begin, begin + count) of y [T, NH, P].
template <class T>
std::vector<T> rows(const std::vector<T>& y, const Mamba2Dims& d, int begin, int count) {
  const size_t row = size_t(d.NH) * d.P;
  return std::vector<T>(y.begin() + begin * row, y.begin() + (begin + count) * row);
}

inline std::string dims_str(const Mamba2Dims& d) {
  return "G=" + std::to_string(d.G) + " NH=" + std::to_string(d.NH) + " N=" + std::to_string(d.N) +
         " P=" + std::to_string(d.P);
}

// float64: 1e-12 relative (u = 1.1e-16 times the float32 bound's factors stays far below).
// float32: mamba2_f32_tolerance (derivation in reference/mamba2.h), which must stay meaningful
// (< 1e-2) so that the check cannot pass vacuously.
constexpr double kF64Tol = 1e-12;

template <class T>
void expect_matches(const std::vector<T>& y, const Mamba2State<T>& state, const Truth& truth,
                    int window, const std::string& what) {
  double tol_y = kF64Tol, tol_s = kF64Tol;
  if constexpr (std::is_same_v<T, float>) {
    const auto tol = mamba2_f32_tolerance(truth.x, truth.s0, window);
    tol_y = tol.y;
    tol_s = tol.state;
    EXPECT_LT(tol_y, 1e-2) << what;
    EXPECT_LT(tol_s, 1e-2) << what;
  }
  const char* type = std::is_same_v<T, float> ? " f32" : " f64";
  const std::string where = what + type + " (" + dims_str(truth.x.dims) + ", " +
                            std::to_string(truth.x.steps) + " tokens)";
  EXPECT_LE(max_rel_err(y, truth.y), tol_y) << "y of " << where;
  EXPECT_LE(max_rel_err(flat(state), flat(truth.state)), tol_s) << "final state of " << where;
}

// Every output is finite (extreme decays must underflow to 0, never produce inf or NaN).
template <class T>
bool all_finite(const std::vector<T>& v) {
  for (T e : v)
    if (!std::isfinite(e)) return false;
  return true;
}

}  // namespace kvbuf::ref::test_mamba2
