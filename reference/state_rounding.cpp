#include "reference/state_rounding.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "reference/random_inputs.h"  // round_to_bf16

namespace kvbuf::ref {
namespace {

// A float rounded to fp16, nearest even: 11 significant bits, the spacing 2^-24 of the subnormals
// below 2^-14, +-inf from 65520 (halfway between 65504, the largest finite, and 2^16) on.
double round_fp16(float f) {
  const double x = f;
  if (!std::isfinite(x) || x == 0) return x;
  if (std::fabs(x) >= 65520.0) return std::copysign(std::numeric_limits<double>::infinity(), x);
  int e = 0;
  std::frexp(std::fabs(x), &e);  // |x| = m 2^e, m in [0.5, 1): the leading bit is 2^(e-1)
  const double ulp = std::ldexp(1.0, std::max(e - 1, -14) - 10);
  return std::copysign(std::nearbyint(std::fabs(x) / ulp) * ulp, x);  // ties to even (default mode)
}

}  // namespace

// As a kernel stores it: the fp32 value it computed, then (16-bit types) rounded to nearest even.
double round_to_state(double x, StateType t) {
  switch (t) {
    case StateType::FP32: return double(float(x));
    case StateType::BF16: return round_to_bf16(x);
    case StateType::FP16: return round_fp16(float(x));
  }
  return x;
}

}  // namespace kvbuf::ref
