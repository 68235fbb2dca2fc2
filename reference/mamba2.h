// Mamba-2 reference model (Eigen, float64 or float32): the ground truth for every Mamba-2 mode.
// Function names mirror the GDN ones (gdn.h).
// Semantics (docs/kvbuffer-math.md section 8), per head h, group h / (NH/G):
//   S <- exp(dt A) S + dt x B^T;   y = S C + D x                (S is P x N)
// dt > 0 (already through softplus), A < 0, so every per-token decay exp(dt A) is in [0, 1).
// Buffered modes: with G_i = sum_{j<=i} dt_j A since the checkpoint S0 (state after the last fold),
//   y_t  = exp(G_t) S0 C_t + sum_{j<=t} exp(G_t - G_j) dt_j (B_j . C_t) x_j + D x_t
//   fold:  S0 <- exp(G_n) S0 + sum_{j<=n} exp(G_n - G_j) dt_j x_j B_j^T
// No delta rule, so no triangular solve. Decay factors are only ever formed as exp(G_i - G_j) with
// G_i - G_j <= 0 (never a quotient of cumulative products), so dt A <= -60 per token underflows to
// 0 instead of overflowing. Every function validates its arguments and throws std::invalid_argument
// with a clear message.
#pragma once
#include <Eigen/Dense>
#include <cstdint>
#include <random>
#include <vector>

#include "reference/cross_checks.h"
#include "reference/gdn.h"
#include "reference/random_inputs.h"

namespace kvbuf::ref {

struct Mamba2Dims {
  int G = 1;   // groups (B and C are per group)
  int NH = 1;  // heads (multiple of G); head h reads group h / (NH/G)
  int N = 16;  // d_state
  int P = 8;   // head_dim
};

// Throws std::invalid_argument unless G, NH, N, P > 0 and NH % G == 0.
void mamba2_validate_dims(const Mamba2Dims& d);

// One request's tokens in the kernel-level (and export) layout, row-major flat:
// x [T, NH, P]; B, C [T, G, N]; dt [T, NH] (> 0, after softplus); the layer's A (< 0) and D [NH].
template <class T>
struct Mamba2Tokens {
  Mamba2Dims dims;
  int steps = 0;
  std::vector<T> x, B, C, dt, A, D;
};

// Throws std::invalid_argument when dims are invalid, steps < 0, array sizes do not match dims and
// steps, some dt is not positive and finite, or some A is not negative and finite.
template <class T>
void mamba2_validate(const Mamba2Tokens<T>& x);

// Tokens [begin, begin + count) of `x` (same A, D).
template <class T>
Mamba2Tokens<T> mamba2_slice_tokens(const Mamba2Tokens<T>& x, int begin, int count);

// Per-request state: NH matrices of P x N (serving layout [NH, P, N], N contiguous).
template <class T>
using Mamba2State = std::vector<Mat<T>>;

template <class T>
Mamba2State<T> mamba2_zero_state(const Mamba2Dims& d);

// Decay distribution: dt ~ U(dt_min, dt_max), A ~ U(A_min, A_max); per-token log decay dt A.
struct Mamba2DecayRange {
  double dt_min = 0.01, dt_max = 0.5;
  double A_min = -4.0, A_max = -0.5;
  // dt A in about [-2, -0.005]: the usual regime of trained models.
  static Mamba2DecayRange typical() { return {}; }
  // dt A in [-0.05, -0.001]: long memory.
  static Mamba2DecayRange mild() { return {0.01, 0.05, -1.0, -0.1}; }
  // dt A in [-160, -60]: every cross-token factor underflows (exp(G) in float32 within two tokens).
  static Mamba2DecayRange extreme() { return {6.0, 10.0, -16.0, -10.0}; }
};

// x, B, C ~ N(0, 1); dt, A from `decay`; D ~ U(0.5, 1.5). Drawn in double and rounded to T, so
// the same rng state gives float tokens that are the rounded double tokens.
template <class T>
Mamba2Tokens<T> make_random_mamba2_tokens(const Mamba2Dims& d, int steps, std::mt19937_64& rng,
                                          const Mamba2DecayRange& decay = {});
// A random checkpoint: entries ~ N(0, scale^2).
template <class T>
Mamba2State<T> make_random_mamba2_state(const Mamba2Dims& d, std::mt19937_64& rng,
                                        double scale = 1.0);

// The inputs as a kernel would receive them: x, B, C rounded to bf16, dt, A, D to fp32; still held
// in T, so the float64 reference runs on exactly the kernel's inputs.
template <class T>
Mamba2Tokens<T> round_mamba2_tokens_to_bf16(const Mamba2Tokens<T>& x) {
  Mamba2Tokens<T> r = x;
  for (auto* a : {&r.x, &r.B, &r.C})
    for (auto& e : *a) e = round_to_bf16(e);
  for (auto* a : {&r.dt, &r.A, &r.D})
    for (auto& e : *a) e = T(float(e));
  return r;
}

// Element-wise conversion (float tokens to double, to run the float64 ground truth on exactly the
// inputs a float32 mode saw).
template <class To, class From>
Mamba2Tokens<To> mamba2_cast_tokens(const Mamba2Tokens<From>& x) {
  auto cast = [](const std::vector<From>& v) { return std::vector<To>(v.begin(), v.end()); };
  return {x.dims, x.steps, cast(x.x), cast(x.B), cast(x.C), cast(x.dt), cast(x.A), cast(x.D)};
}
template <class To, class From>
Mamba2State<To> mamba2_cast_state(const Mamba2State<From>& s) {
  Mamba2State<To> r;
  for (const auto& m : s) r.push_back(m.template cast<To>());
  return r;
}

// 1. Recurrent decode (ground truth): all tokens through the recurrence, `state` updated in place;
//    writes y [T, NH, P].
template <class T>
void mamba2_decode_recurrent(const Mamba2Tokens<T>& x, Mamba2State<T>& state, std::vector<T>& y,
                             StateStore store = {});

// 2. Chunkwise prefill, SSD form (chunk usually 16, 32 or 64; the last chunk may be shorter; any
//    chunk >= 1 is accepted). Per chunk of L tokens and head, G cumulative within the chunk,
//    X [L x P], B, C [L x N]:
//      Y = (M o C B^T) diag(dt) X + diag(exp(G)) C S^T + D X,   M[t,j] = exp(G_t - G_j), j <= t
//      S <- exp(G_L) S + X^T diag(exp(G_L - G_j) dt_j) B
//    `state` in place; writes y [T, NH, P].
template <class T>
void mamba2_prefill_chunk(const Mamba2Tokens<T>& x, int chunk, Mamba2State<T>& state,
                          std::vector<T>& y);

// The KV buffer of one request together with its checkpoint S0 (section 8).
// Per buffered token j: x_j [NH, P], B_j [G, N], dt_j [NH], G_j [NH] (cumulative dt A since S0).
// Invariant between calls: 0 <= fill() < capacity(); S0 is written only by fold().
// Direct mode (has_state() == false): S0 is absent (read as 0, never read); the first fold
// creates it.
template <class T>
class Mamba2KVBuffer {
 public:
  // Buffered mode from checkpoint s0 (NH matrices P x N).
  // With `store`, every fold rounds S0 to that type, as a KVBuffer kernel stores it.
  Mamba2KVBuffer(const Mamba2Dims& d, int capacity, Mamba2State<T> s0, StateStore store = {});
  // Direct mode: no state until the first fold.
  Mamba2KVBuffer(const Mamba2Dims& d, int capacity, StateStore store = {});

  const Mamba2Dims& dims() const { return dims_; }
  int capacity() const { return capacity_; }
  int fill() const { return int(G_.size()); }
  bool has_state() const { return has_state_; }
  int folds() const { return folds_; }
  // S0 (zeros while !has_state()).
  const Mamba2State<T>& checkpoint() const { return s0_; }
  // The state after every token accepted so far: S0 folded with the buffer (nothing modified).
  Mamba2State<T> state() const;
  // Buffered entry j (0 <= j < fill()): x [NH, P], B [G, N], dt [NH], G [NH].
  const std::vector<T>& entry_x(int j) const { return x_[j]; }
  const std::vector<T>& entry_B(int j) const { return B_[j]; }
  const std::vector<T>& entry_dt(int j) const { return dt_[j]; }
  const std::vector<T>& entry_G(int j) const { return G_[j]; }

  // One decode step on token t of x: writes y[0 .. NH*P) for that token from S0 + buffer + the
  // token itself, appends the token and folds when the buffer becomes full.
  void decode(const Mamba2Tokens<T>& x, int t, T* y);
  // Chain verify of window.steps = T tokens: folds first when fill() + T > capacity(), then all T
  // outputs y [T, NH, P] at once from S0 + buffer + the earlier window tokens. Nothing is appended
  // until accept(). Throws when T > capacity() or T < 1.
  void verify(const Mamba2Tokens<T>& window, std::vector<T>& y);
  // After verify: keeps the first m window tokens (0 <= m <= T), folds if the buffer is full.
  void accept(int m);
  // S0 <- exp(G_n) S0 + sum_j exp(G_n - G_j) dt_j x_j B_j^T; empties the buffer. Creates the state
  // in direct mode. No-op on an empty buffer.
  void fold();

 private:
  void append(const Mamba2Tokens<T>& x, int t);
  void check_tokens(const Mamba2Tokens<T>& x) const;

  Mamba2Dims dims_;
  int capacity_;
  bool has_state_;
  StateStore store_;
  int folds_ = 0;
  Mamba2State<T> s0_;
  std::vector<std::vector<T>> x_, B_, dt_, G_;
  Mamba2Tokens<T> pending_;  // the last verified window, until accept()
  bool has_pending_ = false;
};

// 3. KVBuffer decode: buffer of `capacity` from checkpoint `state`, all tokens of x (folding each
//    time the buffer fills), then the remaining buffer is folded, so `state` is the state after all
//    tokens. Writes y [T, NH, P].
template <class T>
void mamba2_decode_kvbuffer(const Mamba2Tokens<T>& x, int capacity, Mamba2State<T>& state,
                            std::vector<T>& y, StateStore store = {});

// 5. Short-context direct mode: no state while the context fits (the input value of `state` is
//    ignored: S0 = 0); the fold on overflow creates it. At the end `state` is the state after all
//    tokens (remaining buffer folded). Returns true when the buffer overflowed during the sequence
//    (a state was created before the end).
template <class T>
bool mamba2_decode_direct(const Mamba2Tokens<T>& x, int capacity, Mamba2State<T>& state,
                          std::vector<T>& y, StateStore store = {});

// 4a. Classic verify, one window of T tokens from `state`: writes y [T, NH, P] and the T
//     intermediate states (states[i] = state after token i), then commits the accepted one:
//     state <- states[accept - 1] (accept = 0 keeps state). 0 <= accept <= T.
//     With a StateStore, as mamba2_verify_classic (kernels/mamba2/mamba2_verify_classic.cu) keeps a
//     16-bit state: states[i] is the written copy, rounded once; the chain goes on from the
//     unrounded state (the kernel's fp32 registers), and every y comes from the unrounded state.
template <class T>
void mamba2_verify_classic_window(const Mamba2Tokens<T>& window, int accept, Mamba2State<T>& state,
                                  std::vector<T>& y, std::vector<Mamba2State<T>>& states,
                                  StateStore store = {});
// 4a. The same for a tree of T nodes: parents[i] is node i's parent, 0-based (-1: `state`,
//     i.e. the committed state), each < i. Node i starts from node i - 1's unrounded state when
//     that is its parent (the kernel keeps it in registers), else from its parent's written
//     (rounded) state, or from `state`. states[i] is node i's written state (rounded with a
//     StateStore); y [T, NH, P] from the unrounded states. Commits state <- states[accept_node]
//     (-1 keeps state). A chain (parents[i] = i - 1) is mamba2_verify_classic_window.
template <class T>
void mamba2_verify_classic_tree(const Mamba2Tokens<T>& window, const std::vector<int>& parents, int accept_node,
                                Mamba2State<T>& state, std::vector<T>& y, std::vector<Mamba2State<T>>& states,
                                StateStore store = {});

// Verify drivers over a whole sequence: rounds of windows of `drafts` tokens (the last window may
// be shorter); each round accepts min(accept, window) tokens (1 <= accept <= drafts) and the next
// window starts at the first rejected token. y [T, NH, P] holds each token's output from the round
// that accepted it; `state` ends as the state after all tokens.
// 4a. Classic: mamba2_verify_classic_window per round.
//     With a StateStore the committed state is the rounded written one (mamba2_verify_classic_window).
template <class T>
void mamba2_verify_classic(const Mamba2Tokens<T>& x, int drafts, int accept, Mamba2State<T>& state,
                           std::vector<T>& y, StateStore store = {});
// 4b. Buffered: Mamba2KVBuffer::verify + accept per round (fold first when n + T > C), then the
//     remaining buffer is folded. drafts <= capacity.
template <class T>
void mamba2_verify_kvbuffer(const Mamba2Tokens<T>& x, int capacity, int drafts, int accept,
                            Mamba2State<T>& state, std::vector<T>& y);

// float32 tolerances for comparing a mode against mamba2_decode_recurrent in float64 on the same
// (float-rounded) tokens x and checkpoint s0, as max_rel_err (max |err| / max |ref|) of y and of
// the final state. `window` is the most tokens a mode keeps since its checkpoint (1 for the
// recurrent and classic modes, the chunk for prefill, the capacity for buffered modes).
// Derivation, u = 2^-24: each output element is a sum of terms (S0 C_t, dt_j (B_j . C_t) x_j,
// D x_t) with products of decay factors; in floating point its error is at most
// u (N + L + W + E + 8) times the same sum taken over |terms| (Higham's gamma_n for a length-n
// sum): N for the B.C / S0 C dots; L for the accumulation through the state and its per-token
// decays, where an error made at token j is damped by every later decay, so L is the decay-weighted
// token count max_t sum_{j<=t} exp(G_t - G_j) (at most the number of tokens, about 1 / |dt A| in
// the steady state); W (`window`, at most the tokens) for the sums over buffered or chunk tokens (a
// fold, an output's buffer terms); 8 for the few products and exp per term; and E for the
// cumulative exponents of the windowed forms: exp(G_t - G_j) with G_t, G_j each a running sum
// rounded (t - j) times at the scale of |G| in the window, so E = max over j < t in a window of
// exp(G_t - G_j) (t - j) |G|_window (negligible when the decays are extreme: exp(-60) times it).
// The sum over |terms| is computed exactly (float64) by the recurrence on |x|, |B|, |C|, |D|,
// |S0|; dividing its max by max |ref| turns the elementwise bound into the normwise tolerance.
// A factor 2 covers the first-order approximation of gamma_n and libm's exp (< 1 ulp).
// The elementwise factor of that bound: |err| <= gamma (the same output or state element computed
// on |x|, |B|, |C|, |D|, |S0|), gamma = 2 u (N + L + W + E + 8).
double mamba2_f32_gamma(const Mamba2Tokens<double>& x, int window);
struct Mamba2Tolerance {
  double y = 0, state = 0;
};
Mamba2Tolerance mamba2_f32_tolerance(const Mamba2Tokens<double>& x, const Mamba2State<double>& s0,
                                     int window);

// Every Mamba-2 mode against mamba2_decode_recurrent on fresh random inputs, outputs and final
// state, float64 and float32 (float32 against the float64 recurrence on the same rounded inputs);
// under 2 s on one core. Part of run_reference_cross_checks.
std::vector<CrossCheck> run_mamba2_cross_checks(uint64_t seed);

}  // namespace kvbuf::ref
