// Mamba-2 reference model (Eigen, float64 or float32): the ground truth for every Mamba-2 mode.
// Semantics (../shared/design/kvbuffer-math.md section 8), per head h, group g = h / (NH/G):
//   S <- exp(dt A) S + dt x B^T;   y = S C + D x                (S is P x N)
// dt > 0 (already through softplus), A < 0, so every per-token decay exp(dt A) is in (0, 1].
// With G_i = sum_{j<=i} dt_j A since the checkpoint S0 (the state after the last fold):
//   y_t  = exp(G_t) S0 C_t + sum_{j<=t} exp(G_t - G_j) dt_j (B_j . C_t) x_j + D x_t
//   fold:  S0 <- exp(G_n) S0 + sum_{j<=n} exp(G_n - G_j) dt_j x_j B_j^T
// Decay factors are only ever exp(G_i - G_j) with G_i - G_j <= 0, never a quotient of cumulative
// products, so dt A <= -60 per token underflows to 0 instead of overflowing.
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <vector>

#include "reference/cross_checks.h"

namespace kvbuf::ref {

struct Mamba2Dims {
  int G = 1;   // groups (B and C are per group)
  int NH = 1;  // heads (multiple of G); head h reads group h / (NH/G)
  int N = 16;  // d_state
  int P = 8;   // head_dim
};

// One request's tokens in the kernel-level (and export) layout, row-major flat:
// x [T, NH, P]; B, C [T, G, N]; dt [T, NH] (> 0); plus the layer's A (< 0) and D, both [NH].
template <class T>
struct Mamba2Tokens {
  Mamba2Dims dims;
  int steps = 0;
  std::vector<T> x, B, C, dt, A, D;
};

// Per-request state: NH matrices of P x N. An empty vector means "no state" (direct mode).
template <class T>
using Mamba2State = std::vector<Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic>>;

template <class T>
Mamba2State<T> mamba2_zero_state(const Mamba2Dims& d);

// Random inputs: x, B, C ~ N(0, 1); dt ~ U(dt_min, dt_max); A ~ U(A_min, A_max); D ~ U(0.5, 1.5).
// The defaults give per-token decays exp(dt A) in about [0.13, 1); dt_min = 8, dt_max = 12 with
// A in [-16, -8] gives dt A <= -64 (every factor across a token underflows in float32).
struct Mamba2RandomOptions {
  double dt_min = 0.01, dt_max = 0.5;
  double A_min = -4.0, A_max = -0.5;
};
template <class T>
Mamba2Tokens<T> make_random_mamba2_tokens(const Mamba2Dims& d, int steps, uint64_t seed,
                                         const Mamba2RandomOptions& opt = {});
// State entries ~ N(0, 1).
template <class T>
Mamba2State<T> make_random_mamba2_state(const Mamba2Dims& d, uint64_t seed);

// Tokens [begin, begin + count) of `x` (same layer parameters A, D).
template <class T>
Mamba2Tokens<T> mamba2_slice_tokens(const Mamba2Tokens<T>& x, int begin, int count);

// Throws std::invalid_argument when dims are not positive, NH % G != 0, array sizes do not match
// dims and steps, some dt <= 0 or some A >= 0.
template <class T>
void mamba2_validate(const Mamba2Tokens<T>& x);

// 1. Recurrent decode (ground truth): all tokens through the recurrence, `state` updated in place;
//    writes y [T, NH, P].
template <class T>
void mamba2_decode_recurrent(const Mamba2Tokens<T>& x, Mamba2State<T>& state, std::vector<T>& y);

// 2. Chunkwise prefill, SSD form: per chunk of `chunk` tokens (16, 32 or 64; the last may be
//    shorter) Y = (L o C B^T diag(dt)) X + diag(exp(G)) C S^T + D X with L[t,j] = exp(G_t - G_j)
//    for j <= t, then one state update per chunk. `state` in place; writes y [T, NH, P].
template <class T>
void mamba2_prefill_chunk(const Mamba2Tokens<T>& x, int chunk, Mamba2State<T>& state,
                          std::vector<T>& y);

// The KV buffer of one request: up to `capacity` tokens since the checkpoint, per token
// x_j [NH, P], B_j [G, N], dt_j [NH] and G_j [NH] (cumulative dt A since the checkpoint).
template <class T>
class Mamba2Buffer {
 public:
  Mamba2Buffer(const Mamba2Dims& d, int capacity);  // throws std::invalid_argument if capacity < 1
  const Mamba2Dims& dims() const { return dims_; }
  int capacity() const { return capacity_; }
  int size() const { return size_; }
  bool full() const { return size_ == capacity_; }
  // G of the last buffered token for head h (0 when empty: the checkpoint).
  T last_G(int h) const;
  const T* x(int j) const { return &x_[size_t(j) * dims_.NH * dims_.P]; }
  const T* B(int j) const { return &B_[size_t(j) * dims_.G * dims_.N]; }
  const T* dt(int j) const { return &dt_[size_t(j) * dims_.NH]; }
  const T* G(int j) const { return &G_[size_t(j) * dims_.NH]; }
  // Appends token t of `tok` (G computed from last_G and dt A); throws std::logic_error when full.
  void append(const Mamba2Tokens<T>& tok, int t);
  void clear() { size_ = 0; }

 private:
  Mamba2Dims dims_;
  int capacity_;
  int size_ = 0;
  std::vector<T> x_, B_, dt_, G_;
};

// Folds the buffer into the state and empties it (a rank-n update per head). An empty `state`
// (direct mode) is created here, as if it had been zero.
template <class T>
void mamba2_fold(Mamba2State<T>& state, Mamba2Buffer<T>& buf);

// 3. KV-buffered decode from checkpoint `state` and `buf` (possibly non-empty): each output reads
//    S0 and the buffer, S0 is never written until the buffer is full, then it is folded. The tokens
//    left in the buffer stay there (call mamba2_fold for the state after all tokens).
template <class T>
void mamba2_decode_kvbuffer(const Mamba2Tokens<T>& x, Mamba2State<T>& state, Mamba2Buffer<T>& buf,
                            std::vector<T>& y);
// Convenience: empty buffer of `capacity`, all tokens, remaining buffer folded at the end, so
// `state` is the state after all tokens.
template <class T>
void mamba2_decode_kvbuffer(const Mamba2Tokens<T>& x, int capacity, Mamba2State<T>& state,
                            std::vector<T>& y);

// 5. Short-context direct mode: `state` must start empty (no checkpoint); outputs come from the
//    buffer alone while the context fits; the first fold (buffer full) creates the state. Remaining
//    tokens stay in the buffer, as in mamba2_decode_kvbuffer.
template <class T>
void mamba2_decode_direct(const Mamba2Tokens<T>& x, Mamba2State<T>& state, Mamba2Buffer<T>& buf,
                          std::vector<T>& y);

// 4a. Classic speculative verify (baseline): the chain of T drafts through the recurrence from
//     `state`, writing T intermediate states; `accept` copies state m back (m = 0: unchanged).
template <class T>
struct Mamba2ClassicVerify {
  std::vector<T> y;                    // [T, NH, P]
  std::vector<Mamba2State<T>> states;  // states[i]: the state after draft i + 1
};
template <class T>
Mamba2ClassicVerify<T> mamba2_verify_classic(const Mamba2Tokens<T>& drafts,
                                             const Mamba2State<T>& state);
template <class T>
void mamba2_accept_classic(const Mamba2ClassicVerify<T>& v, int m, Mamba2State<T>& state);

// 4b. Buffered speculative verify: all T outputs at once from S0 + buffer + the drafts themselves;
//     no state or buffer entry is written, except that when size + T > capacity the buffer is folded
//     first. Throws std::invalid_argument when T > capacity. An empty `state` is read as zero.
template <class T>
void mamba2_verify_kvbuffer(const Mamba2Tokens<T>& drafts, Mamba2State<T>& state,
                            Mamba2Buffer<T>& buf, std::vector<T>& y);
// Appends the first m drafts (0 <= m <= T) to the buffer; folds when that fills it.
template <class T>
void mamba2_accept_kvbuffer(const Mamba2Tokens<T>& drafts, int m, Mamba2State<T>& state,
                            Mamba2Buffer<T>& buf);

// Every Mamba-2 mode against the recurrent ground truth on fresh random inputs (float64 and
// float32); under 2 s.
std::vector<CrossCheck> run_mamba2_cross_checks(uint64_t seed);

}  // namespace kvbuf::ref
