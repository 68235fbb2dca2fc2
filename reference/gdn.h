// Gated DeltaNet reference model (Eigen, float64 or float32): the ground truth every kernel is
// compared to. Function names mirror the CUDA kernels (gdn_decode_recurrent in both).
// Semantics (docs/kvbuffer-math.md section 1), per value head h, key head h / (HV/H):
//   k <- k / sqrt(|k|^2 + 1e-6),  q <- q / sqrt(|q|^2 + 1e-6) * K^-0.5
//   S <- exp(g) S;  u = beta (v - S^T k);  S <- S + k u^T;  o = S^T q        (S is K x V)
// Buffered modes (sections 2-7): with G_i = g_1 + ... + g_i since the checkpoint S0,
//   S_i = exp(G_i) S0 + sum_{j<=i} exp(G_i - G_j) k_j u_j^T.
// Decay factors are only ever formed as exp(G_i - G_j) with G_i - G_j <= 0 (never exp(-G) or a
// quotient of cumulative products), so g <= -60 per token underflows to 0 instead of overflowing.
// Every function validates its arguments and throws std::invalid_argument with a clear message.
#pragma once
#include <Eigen/Dense>
#include <vector>

#include "reference/state_rounding.h"
#include "sim/layout.h"  // BufferVariant

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

// Throws std::invalid_argument unless H, HV, K, V > 0 and HV % H == 0.
void gdn_validate_dims(const GdnDims& d);

// One request's tokens, raw (un-normalised) inputs in the kernel-level layout:
// q, k [T, H, K]; v [T, HV, V]; g (log decay <= 0), beta in [0,1] [T, HV]; all row-major flat.
template <class T>
struct GdnTokens {
  GdnDims dims;
  int steps = 0;
  std::vector<T> q, k, v, g, beta;
};

// Throws std::invalid_argument when dims are invalid, steps < 0, array sizes do not match dims and
// steps, some g > 0 (or NaN), or some beta outside [0, 1].
template <class T>
void gdn_validate(const GdnTokens<T>& x);

// Tokens [begin, begin + count) of `x`.
template <class T>
GdnTokens<T> gdn_slice_tokens(const GdnTokens<T>& x, int begin, int count);

// Per-request state: HV matrices of K x V (math layout; serving layout [HV, V, K] is the transpose).
template <class T>
using GdnState = std::vector<Mat<T>>;

template <class T>
GdnState<T> gdn_zero_state(const GdnDims& d);

// The same tokens or state in another precision (e.g. float32 runs of float64-drawn inputs).
template <class To, class From>
GdnTokens<To> gdn_cast_tokens(const GdnTokens<From>& x) {
  auto cast = [](const std::vector<From>& v) { return std::vector<To>(v.begin(), v.end()); };
  return {x.dims, x.steps, cast(x.q), cast(x.k), cast(x.v), cast(x.g), cast(x.beta)};
}
template <class To, class From>
GdnState<To> gdn_cast_state(const GdnState<From>& s) {
  GdnState<To> r;
  for (const auto& m : s) r.push_back(m.template cast<To>());
  return r;
}

// Gates from a model's raw inputs: g = -exp(A_log) * softplus(a + dt_bias), beta = sigmoid(b).
// softplus is evaluated without overflow (x for x > 20); g <= 0 always.
template <class T>
T gdn_gate_g(T a, T A_log, T dt_bias);
template <class T>
T gdn_gate_beta(T b);

// 1. Recurrent decode: runs all tokens through the recurrence, updating `state` in place;
//    writes o [T, HV, V]. With `store`, the state is rounded to that type after every token (after
//    the token's output), as a classic kernel stores it.
template <class T>
void gdn_decode_recurrent(const GdnTokens<T>& x, GdnState<T>& state, std::vector<T>& o, StateStore store = {});

// 2. Chunkwise prefill, WY/UT form (section 4 applied per chunk; chunk is usually 16, 32 or 64, the
//    last chunk may be shorter; any chunk >= 1 is accepted). Per chunk of L tokens and value head,
//    with normalised keys K, queries Q [L x K], G cumulative within the chunk:
//      A[i,j] = beta_i exp(G_i - G_j) k_i.k_j  (j < i)     Tm = (I + A)^-1 diag(beta)
//      W = Tm diag(exp(G)) K,   U = Tm V - W S0
//      O = diag(exp(G)) Q S0 + (M o Q K^T) U,   M[i,j] = exp(G_i - G_j) for j <= i, else 0
//      S <- exp(G_L) S0 + K^T diag(exp(G_L - G_j)) U
//    `state` in place; writes o [T, HV, V].
template <class T>
void gdn_prefill_chunk(const GdnTokens<T>& x, int chunk, GdnState<T>& state, std::vector<T>& o);

// Which entries the KV buffer keeps (BufferVariant, sim/layout.h):
//   Raw:     k_j (normalised), v_j, G_j, beta_j; the corrected values u_j are recomputed from S0
//            by a forward substitution whenever needed (section 4);
//   CachedU: k_j (normalised), u_j, G_j (section 3).

// The KV buffer of one request together with its checkpoint S0 (sections 2-7).
// Invariant between calls: 0 <= fill() < capacity(); S0 is written only by fold().
// Direct mode (has_state() == false): S0 is absent (read as 0, never read); the first fold
// creates it.
template <class T>
class GdnKVBuffer {
 public:
  // Buffered mode from checkpoint s0 (HV matrices K x V). With `store`, every fold rounds S0 to
  // that type, as a KVBuffer kernel stores it (s0 itself is taken as given).
  GdnKVBuffer(const GdnDims& d, int capacity, BufferVariant variant, GdnState<T> s0, StateStore store = {});
  // Direct mode: no state until the first fold.
  GdnKVBuffer(const GdnDims& d, int capacity, BufferVariant variant, StateStore store = {});

  const GdnDims& dims() const { return dims_; }
  int capacity() const { return capacity_; }
  BufferVariant variant() const { return variant_; }
  int fill() const { return int(G_.size()); }
  bool has_state() const { return has_state_; }
  int folds() const { return folds_; }
  // S0 (zeros while !has_state()).
  const GdnState<T>& checkpoint() const { return s0_; }
  // The state after every token accepted so far: S0 folded with the buffer (nothing modified).
  GdnState<T> state() const;
  // Buffered entry j (0 <= j < fill()), what a kernel's pool row should hold: normalised keys
  // [H, K], G [HV], u [HV, V] (stored for CachedU, recomputed for Raw); Raw only (throws
  // std::logic_error for CachedU): the raw v [HV, V] and beta [HV].
  const std::vector<T>& entry_k(int j) const { return k_.at(j); }
  const std::vector<T>& entry_G(int j) const { return G_.at(j); }
  std::vector<T> entry_u(int j) const;
  const std::vector<T>& entry_v(int j) const;
  const std::vector<T>& entry_beta(int j) const;

  // One decode step on token t of x: writes o[0 .. HV*V) for that token, appends the token and
  // folds when the buffer becomes full.
  void decode(const GdnTokens<T>& x, int t, T* o);

  // Chain verify of window.steps = T tokens (the last accepted token then T-1 drafts): folds first
  // when fill() + T > capacity(), then computes all T outputs o [T, HV, V] from S0 + buffer with a
  // T x T forward substitution. Nothing is appended until accept(). Throws when T > capacity().
  void verify(const GdnTokens<T>& window, std::vector<T>& o);
  // Tree verify: node i (1-based) has parent parents[i-1] in 0..i-1 (0 = the end of the buffer).
  // Node i's output equals the recurrent output along its root path (buffer, then ancestors, then
  // i). Folds first when fill() + depth > capacity() (depth = longest root path); throws when
  // depth > capacity().
  void verify(const GdnTokens<T>& nodes, const std::vector<int>& parents, std::vector<T>& o);
  // After a chain verify: keeps the first m tokens (0 <= m <= T), folds if the buffer is full.
  void accept(int m);
  // After any verify: keeps the nodes of `path` (1-based, path[0] a root, each the parent of the
  // next), folds if the buffer is full. An empty path keeps nothing.
  void accept_path(const std::vector<int>& path);

  // S0 <- exp(G_n) S0 + sum_j exp(G_n - G_j) k_j u_j^T; empties the buffer. Creates the state in
  // direct mode. No-op on an empty buffer.
  void fold();

 private:
  struct Pending {  // one verified, not yet accepted node
    std::vector<T> k, u, v, beta, G;
    int parent = 0;
  };
  void append(std::vector<T> k, std::vector<T> u, std::vector<T> v, std::vector<T> beta,
              std::vector<T> G);
  void fold_if_full();
  Mat<T> buffer_U(int h) const;  // [fill, V]: u_j of value head h
  void verify_nodes(const GdnTokens<T>& nodes, const std::vector<int>& parents,
                    std::vector<T>& o);

  GdnDims dims_;
  int capacity_;
  BufferVariant variant_;
  bool has_state_;
  StateStore store_;
  int folds_ = 0;
  GdnState<T> s0_;
  // Buffered entries, per token j: k [H*K], u [HV*V] (CachedU) or v [HV*V], beta [HV] (Raw), G [HV].
  std::vector<std::vector<T>> k_, u_, v_, beta_, G_;
  std::vector<Pending> pending_;
  bool pending_chain_ = false;
};

// 3. KVBuffer decode: buffer of `capacity` from checkpoint `state`, all tokens of x (folding each
//    time the buffer fills), then the remaining buffer is folded, so `state` is the state after all
//    tokens. Writes o [T, HV, V]. `store` as for GdnKVBuffer (the last fold rounds too).
template <class T>
void gdn_decode_kvbuffer(const GdnTokens<T>& x, int capacity, BufferVariant variant,
                         GdnState<T>& state, std::vector<T>& o, StateStore store = {});

// 5. Short-context direct mode: no state while the context fits (the input value of `state` is
//    ignored: S0 = 0); the fold on overflow creates it. At the end `state` is the state after all
//    tokens (remaining buffer folded). Returns true when the buffer overflowed during the sequence
//    (a state was created before the end).
template <class T>
bool gdn_decode_direct(const GdnTokens<T>& x, int capacity, BufferVariant variant,
                       GdnState<T>& state, std::vector<T>& o, StateStore store = {});

// 4a. Classic verify, one window of T tokens (last accepted + T-1 drafts) from `state`: writes
//     o [T, HV, V] and the T intermediate states (states[i] = state after token i), then commits the
//     accepted one: state <- states[accept - 1] (accept = 0 keeps state). 0 <= accept <= T.
//     With `store`, each token's state is rounded to that type after the token's output, as
//     gdn_verify_classic.cu writes it, and the next token starts from the rounded state (the kernel's
//     registers take the value written; a tree node reloads its parent's written state): states[i]
//     and o are those of gdn_decode_recurrent with the same store.
template <class T>
void gdn_verify_classic_window(const GdnTokens<T>& window, int accept, GdnState<T>& state,
                               std::vector<T>& o, std::vector<GdnState<T>>& states, StateStore store = {});

// Verify drivers over a whole sequence: rounds of windows of `drafts` tokens (the last window may
// be shorter); each round accepts min(accept, window) tokens (1 <= accept <= drafts) and the next
// window starts at the first rejected token. o [T, HV, V] holds each token's output from the round
// that accepted it; `state` ends as the state after all tokens.
// 4a. Classic: gdn_verify_classic_window per round (`store` as there).
template <class T>
void gdn_verify_classic(const GdnTokens<T>& x, int drafts, int accept, GdnState<T>& state,
                        std::vector<T>& o, StateStore store = {});
// 4b. Buffered (chain): GdnKVBuffer::verify + accept per round (fold first when n + T > C), then
//     the remaining buffer is folded. drafts <= capacity. `store` as for GdnKVBuffer (every fold,
//     the last one too, rounds S0).
template <class T>
void gdn_verify_kvbuffer(const GdnTokens<T>& x, int capacity, BufferVariant variant, int drafts,
                         int accept, GdnState<T>& state, std::vector<T>& o, StateStore store = {});
// 4c. Tree verify of one window on `buffer` (parents as in GdnKVBuffer::verify): o [T, HV, V];
//     follow with buffer.accept_path(path).
template <class T>
void gdn_verify_tree(GdnKVBuffer<T>& buffer, const GdnTokens<T>& nodes,
                     const std::vector<int>& parents, std::vector<T>& o);

}  // namespace kvbuf::ref
