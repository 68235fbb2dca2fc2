// Gated DeltaNet reference model (Eigen, float64 or float32): the ground truth every kernel is
// compared to. Function names mirror the CUDA kernels (gdn_decode_recurrent in both).
// Semantics (../shared/design/kvbuffer-math.md section 1), per value head h, key head h / (HV/H):
//   k <- k / sqrt(|k|^2 + 1e-6),  q <- q / sqrt(|q|^2 + 1e-6) * K^-0.5
//   S <- exp(g) S;  u = beta (v - S^T k);  S <- S + k u^T;  o = S^T q        (S is K x V)
#pragma once
#include <Eigen/Dense>
#include <vector>

namespace kvbuf::ref {

template <class T>
using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>;
template <class T>
using Vec = Eigen::Matrix<T, Eigen::Dynamic, 1>;

struct GdnDims {
  int H = 1;   // key heads
  int HV = 1;  // value heads (multiple of H)
  int K = 16;  // key head dim
  int V = 16;  // value head dim
};

// One request's tokens, raw (un-normalised) inputs in the kernel-level layout:
// q, k [T, H, K]; v [T, HV, V]; g (log decay <= 0), beta in [0,1] [T, HV]; all row-major flat.
template <class T>
struct GdnTokens {
  GdnDims dims;
  int steps = 0;
  std::vector<T> q, k, v, g, beta;
};

// Per-request state: HV matrices of K x V (math layout; serving layout [HV, V, K] is the transpose).
template <class T>
using GdnState = std::vector<Mat<T>>;

template <class T>
GdnState<T> gdn_zero_state(const GdnDims& d);

// Gates from a model's raw inputs: g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b).
template <class T>
T gdn_gate_g(T a, T A_log, T dt_bias);
template <class T>
T gdn_gate_beta(T b);

// 1. Recurrent decode: runs all tokens through the recurrence, updating `state` in place;
//    writes o [T, HV, V].
template <class T>
void gdn_decode_recurrent(const GdnTokens<T>& x, GdnState<T>& state, std::vector<T>& o);

}  // namespace kvbuf::ref
