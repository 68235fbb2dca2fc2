// Where a kernel writes a state it stores each element rounded once to nearest (ties to even) in its
// StateType (sim/layout.h): the classic kernels after every token, the KVBuffer kernels at every fold.
// The reference rounds at exactly those places when it is given a type, so that a check compares like
// with like; without one (std::nullopt) it keeps exact arithmetic in T, the algebra's ground truth.
#pragma once
#include <Eigen/Dense>
#include <optional>
#include <vector>

#include "sim/layout.h"  // StateType

namespace kvbuf::ref {

using StateStore = std::optional<StateType>;

// x as a kernel stores it in t: rounded to a float (the kernel's fp32 value), then for 16-bit types
// to nearest even: bf16 (8 significant bits, fp32's exponent range, round_to_bf16) or fp16 (11
// significant bits, subnormals below 2^-14, +-inf from 65520 on). NaN and inf stay as they are.
double round_to_state(double x, StateType t);

// Every element of a state (one matrix per head) rounded to `store`'s type; nothing without one.
template <class T>
void round_state(std::vector<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>>& s, StateStore store) {
  if (!store) return;
  for (auto& m : s) m = m.unaryExpr([t = *store](T x) { return T(round_to_state(double(x), t)); });
}

}  // namespace kvbuf::ref
