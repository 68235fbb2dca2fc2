// Gated DeltaNet reference model: every mode of docs/kvbuffer-math.md sections 1-7.
// Plain Eigen, written for clarity over speed; every decay factor is exp(G_i - G_j) with
// G_i - G_j <= 0 (or exp(G_i) with G_i <= 0), so strong gates underflow to 0 and never overflow.
#include "reference/gdn.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace kvbuf::ref {
namespace {

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument(what); }

template <class T>
void validate_state(const GdnState<T>& s, const GdnDims& d, const char* who) {
  if (int(s.size()) != d.HV)
    fail(std::string(who) + ": state has " + std::to_string(s.size()) + " heads, expected HV = " +
         std::to_string(d.HV));
  for (const auto& m : s)
    if (m.rows() != d.K || m.cols() != d.V)
      fail(std::string(who) + ": state head is " + std::to_string(m.rows()) + " x " +
           std::to_string(m.cols()) + ", expected K x V = " + std::to_string(d.K) + " x " +
           std::to_string(d.V));
}

void validate_capacity(int capacity, const char* who) {
  if (capacity < 1)
    fail(std::string(who) + ": buffer capacity C must be >= 1, got " + std::to_string(capacity));
}

// Normalised key / query of token t, key head kh (section 1).
template <class T>
Vec<T> norm_k(const GdnTokens<T>& x, int t, int kh) {
  const int K = x.dims.K;
  Eigen::Map<const Vec<T>> k(&x.k[(size_t(t) * x.dims.H + kh) * K], K);
  return k / std::sqrt(k.squaredNorm() + T(1e-6));
}
template <class T>
Vec<T> norm_q(const GdnTokens<T>& x, int t, int kh) {
  const int K = x.dims.K;
  Eigen::Map<const Vec<T>> q(&x.q[(size_t(t) * x.dims.H + kh) * K], K);
  return q / std::sqrt(q.squaredNorm() + T(1e-6)) / std::sqrt(T(K));
}
template <class T>
Eigen::Map<const Vec<T>> raw_v(const GdnTokens<T>& x, int t, int h) {
  return Eigen::Map<const Vec<T>>(&x.v[(size_t(t) * x.dims.HV + h) * x.dims.V], x.dims.V);
}
inline int key_head(const GdnDims& d, int h) { return h / (d.HV / d.H); }

// One token of the recurrence on one value head; writes o (V values).
template <class T>
void recurrent_step(const GdnTokens<T>& x, int t, int h, Mat<T>& S, T* o) {
  const GdnDims& d = x.dims;
  const int kh = key_head(d, h);
  const Vec<T> k = norm_k(x, t, kh), q = norm_q(x, t, kh);
  const T g = x.g[size_t(t) * d.HV + h], beta = x.beta[size_t(t) * d.HV + h];
  S *= std::exp(g);
  const Vec<T> u = beta * (raw_v(x, t, h) - S.transpose() * k);
  S.noalias() += k * u.transpose();
  Eigen::Map<Vec<T>>(o, d.V) = S.transpose() * q;
}

}  // namespace

void gdn_validate_dims(const GdnDims& d) {
  if (d.H < 1 || d.HV < 1 || d.K < 1 || d.V < 1)
    fail("GDN dims must be positive, got H=" + std::to_string(d.H) + " HV=" + std::to_string(d.HV) +
         " K=" + std::to_string(d.K) + " V=" + std::to_string(d.V));
  if (d.HV % d.H != 0)
    fail("GDN value heads HV=" + std::to_string(d.HV) + " must be a multiple of key heads H=" +
         std::to_string(d.H));
}

template <class T>
void gdn_validate(const GdnTokens<T>& x) {
  gdn_validate_dims(x.dims);
  const GdnDims& d = x.dims;
  if (x.steps < 0) fail("GDN tokens: steps must be >= 0, got " + std::to_string(x.steps));
  const size_t n = size_t(x.steps);
  auto check = [&](const std::vector<T>& a, size_t want, const char* name) {
    if (a.size() != want)
      fail(std::string("GDN tokens: ") + name + " has " + std::to_string(a.size()) +
           " elements, expected " + std::to_string(want));
    for (T e : a)
      if (!std::isfinite(e)) fail(std::string("GDN tokens: ") + name + " has a non-finite value");
  };
  check(x.q, n * d.H * d.K, "q");
  check(x.k, n * d.H * d.K, "k");
  check(x.v, n * d.HV * d.V, "v");
  check(x.g, n * d.HV, "g");
  check(x.beta, n * d.HV, "beta");
  for (T g : x.g)
    if (g > T(0)) fail("GDN tokens: g is a log decay and must be <= 0, got " + std::to_string(g));
  for (T b : x.beta)
    if (!(b >= T(0) && b <= T(1)))
      fail("GDN tokens: beta must be in [0, 1], got " + std::to_string(b));
}

template <class T>
GdnTokens<T> gdn_slice_tokens(const GdnTokens<T>& x, int begin, int count) {
  gdn_validate_dims(x.dims);
  if (begin < 0 || count < 0 || begin + count > x.steps)
    fail("gdn_slice_tokens: range [" + std::to_string(begin) + ", " +
         std::to_string(begin + count) + ") outside [0, " + std::to_string(x.steps) + ")");
  const GdnDims& d = x.dims;
  GdnTokens<T> s;
  s.dims = d;
  s.steps = count;
  auto cut = [&](const std::vector<T>& a, std::vector<T>& out, size_t per) {
    out.assign(a.begin() + begin * per, a.begin() + (begin + count) * per);
  };
  cut(x.q, s.q, size_t(d.H) * d.K);
  cut(x.k, s.k, size_t(d.H) * d.K);
  cut(x.v, s.v, size_t(d.HV) * d.V);
  cut(x.g, s.g, size_t(d.HV));
  cut(x.beta, s.beta, size_t(d.HV));
  return s;
}

template <class T>
GdnState<T> gdn_zero_state(const GdnDims& d) {
  gdn_validate_dims(d);
  return GdnState<T>(size_t(d.HV), Mat<T>::Zero(d.K, d.V));
}

template <class T>
T gdn_gate_g(T a, T A_log, T dt_bias) {
  const T z = a + dt_bias;
  const T softplus = z > T(20) ? z : std::log1p(std::exp(z));
  return -std::exp(A_log) * softplus;
}

template <class T>
T gdn_gate_beta(T b) {
  return T(1) / (T(1) + std::exp(-b));
}

template <class T>
void gdn_decode_recurrent(const GdnTokens<T>& x, GdnState<T>& state, std::vector<T>& o, StateStore store) {
  gdn_validate(x);
  validate_state(state, x.dims, "gdn_decode_recurrent");
  const GdnDims& d = x.dims;
  o.assign(size_t(x.steps) * d.HV * d.V, T(0));
  for (int t = 0; t < x.steps; ++t) {
    for (int h = 0; h < d.HV; ++h)
      recurrent_step(x, t, h, state[h], &o[(size_t(t) * d.HV + h) * d.V]);
    round_state(state, store);
  }
}

template <class T>
void gdn_prefill_chunk(const GdnTokens<T>& x, int chunk, GdnState<T>& state, std::vector<T>& o) {
  gdn_validate(x);
  validate_state(state, x.dims, "gdn_prefill_chunk");
  if (chunk < 1) fail("gdn_prefill_chunk: chunk must be >= 1, got " + std::to_string(chunk));
  const GdnDims& d = x.dims;
  o.assign(size_t(x.steps) * d.HV * d.V, T(0));
  for (int c0 = 0; c0 < x.steps; c0 += chunk) {
    const int L = std::min(chunk, x.steps - c0);
    for (int h = 0; h < d.HV; ++h) {
      const int kh = key_head(d, h);
      Mat<T> Kc(L, d.K), Qc(L, d.K), Vc(L, d.V);
      Vec<T> beta(L), G(L);
      T acc = 0;
      for (int i = 0; i < L; ++i) {
        const int t = c0 + i;
        Kc.row(i) = norm_k(x, t, kh).transpose();
        Qc.row(i) = norm_q(x, t, kh).transpose();
        Vc.row(i) = raw_v(x, t, h).transpose();
        beta(i) = x.beta[size_t(t) * d.HV + h];
        acc += x.g[size_t(t) * d.HV + h];
        G(i) = acc;
      }
      // Decay mask M[i,j] = exp(G_i - G_j) for j <= i: only non-positive exponents are formed.
      Mat<T> M = Mat<T>::Zero(L, L);
      for (int i = 0; i < L; ++i)
        for (int j = 0; j <= i; ++j) M(i, j) = std::exp(G(i) - G(j));
      const Vec<T> expG = G.array().exp().matrix();
      const Mat<T> KKt = Kc * Kc.transpose();
      Mat<T> IA = Mat<T>::Identity(L, L);
      for (int i = 0; i < L; ++i)
        for (int j = 0; j < i; ++j) IA(i, j) = beta(i) * M(i, j) * KKt(i, j);
      // UT transform: Tm = (I + A)^-1 diag(beta); W and the S0-free part of U need no state.
      const Mat<T> Tm = IA.template triangularView<Eigen::UnitLower>().solve(
          Mat<T>(beta.asDiagonal()));
      const Mat<T> W = Tm * expG.asDiagonal() * Kc;
      const Mat<T>& S0 = state[h];
      const Mat<T> U = Tm * Vc - W * S0;
      const Mat<T> Oc = expG.asDiagonal() * (Qc * S0) +
                        (M.array() * (Qc * Kc.transpose()).array()).matrix() * U;
      for (int i = 0; i < L; ++i)
        Eigen::Map<Vec<T>>(&o[(size_t(c0 + i) * d.HV + h) * d.V], d.V) = Oc.row(i).transpose();
      // Fold the chunk: S <- exp(G_L) S0 + K^T diag(exp(G_L - G_j)) U.
      const Vec<T> tail = (G(L - 1) - G.array()).exp().matrix();
      state[h] = expG(L - 1) * S0 + Kc.transpose() * tail.asDiagonal() * U;
    }
  }
}


// ---- GdnKVBuffer -----------------------------------------------------------------------------

template <class T>
GdnKVBuffer<T>::GdnKVBuffer(const GdnDims& d, int capacity, BufferVariant variant, GdnState<T> s0, StateStore store)
    : dims_(d), capacity_(capacity), variant_(variant), has_state_(true), store_(store), s0_(std::move(s0)) {
  gdn_validate_dims(d);
  validate_capacity(capacity, "GdnKVBuffer");
  validate_state(s0_, d, "GdnKVBuffer");
}

template <class T>
GdnKVBuffer<T>::GdnKVBuffer(const GdnDims& d, int capacity, BufferVariant variant, StateStore store)
    : dims_(d), capacity_(capacity), variant_(variant), has_state_(false), store_(store) {
  gdn_validate_dims(d);
  validate_capacity(capacity, "GdnKVBuffer");
  s0_ = gdn_zero_state<T>(d);
}

// u_j of value head h for every buffered token, [fill, V]. CachedU: as stored. Raw: recomputed
// (section 4): (I + A) U = diag(beta) (V - diag(exp(G)) K S0), A[j,i] = beta_j exp(G_j - G_i) k_i.k_j.
template <class T>
Mat<T> GdnKVBuffer<T>::buffer_U(int h) const {
  const int n = fill(), K = dims_.K, V = dims_.V, kh = key_head(dims_, h);
  Mat<T> U(n, V);
  if (variant_ == BufferVariant::CachedU) {
    for (int j = 0; j < n; ++j)
      U.row(j) = Eigen::Map<const Vec<T>>(&u_[j][size_t(h) * V], V).transpose();
    return U;
  }
  Mat<T> Kb(n, K);
  Vec<T> G(n), beta(n);
  for (int j = 0; j < n; ++j) {
    Kb.row(j) = Eigen::Map<const Vec<T>>(&k_[j][size_t(kh) * K], K).transpose();
    U.row(j) = Eigen::Map<const Vec<T>>(&v_[j][size_t(h) * V], V).transpose();
    G(j) = G_[j][h];
    beta(j) = beta_[j][h];
  }
  if (has_state_) U -= G.array().exp().matrix().asDiagonal() * (Kb * s0_[h]);
  U = beta.asDiagonal() * U;
  Mat<T> IA = Mat<T>::Identity(n, n);
  const Mat<T> KKt = Kb * Kb.transpose();
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < j; ++i) IA(j, i) = beta(j) * std::exp(G(j) - G(i)) * KKt(j, i);
  IA.template triangularView<Eigen::UnitLower>().solveInPlace(U);
  return U;
}

template <class T>
std::vector<T> GdnKVBuffer<T>::entry_u(int j) const {
  if (j < 0 || j >= fill())
    fail("GdnKVBuffer::entry_u: entry " + std::to_string(j) + " outside [0, " +
         std::to_string(fill()) + ")");
  std::vector<T> u(size_t(dims_.HV) * dims_.V);
  for (int h = 0; h < dims_.HV; ++h)
    Eigen::Map<Vec<T>>(&u[size_t(h) * dims_.V], dims_.V) = buffer_U(h).row(j).transpose();
  return u;
}

template <class T>
const std::vector<T>& GdnKVBuffer<T>::entry_v(int j) const {
  if (variant_ != BufferVariant::Raw)
    throw std::logic_error("GdnKVBuffer::entry_v: only the raw variant keeps v");
  return v_.at(j);
}

template <class T>
const std::vector<T>& GdnKVBuffer<T>::entry_beta(int j) const {
  if (variant_ != BufferVariant::Raw)
    throw std::logic_error("GdnKVBuffer::entry_beta: only the raw variant keeps beta");
  return beta_.at(j);
}

template <class T>
GdnState<T> GdnKVBuffer<T>::state() const {
  GdnState<T> s = s0_;
  const int n = fill();
  if (n == 0) return s;
  for (int h = 0; h < dims_.HV; ++h) {
    const int kh = key_head(dims_, h), K = dims_.K;
    const Mat<T> U = buffer_U(h);
    const T Gn = G_[n - 1][h];
    s[h] *= std::exp(Gn);
    for (int j = 0; j < n; ++j)
      s[h].noalias() += std::exp(Gn - G_[j][h]) *
                        Eigen::Map<const Vec<T>>(&k_[j][size_t(kh) * K], K) * U.row(j);
  }
  return s;
}

template <class T>
void GdnKVBuffer<T>::fold() {
  if (fill() == 0) return;
  s0_ = state();
  round_state(s0_, store_);
  has_state_ = true;
  ++folds_;
  k_.clear();
  u_.clear();
  v_.clear();
  beta_.clear();
  G_.clear();
}

template <class T>
void GdnKVBuffer<T>::fold_if_full() {
  if (fill() == capacity_) fold();
}

template <class T>
void GdnKVBuffer<T>::append(std::vector<T> k, std::vector<T> u, std::vector<T> v,
                            std::vector<T> beta, std::vector<T> G) {
  k_.push_back(std::move(k));
  G_.push_back(std::move(G));
  if (variant_ == BufferVariant::CachedU) {
    u_.push_back(std::move(u));
  } else {
    v_.push_back(std::move(v));
    beta_.push_back(std::move(beta));
  }
}

// Sections 3, 5, 6 for a window of nodes with parents (a chain has parent i-1): per value head,
//   a_i = S0^T k_i, b_i = S0^T q_i                          (one read of S0, skipped in direct mode)
//   (I + A) U = R, A[i,j] = beta_i exp(G_i - G_j) k_j.k_i for j in anc(i)      (forward substitution)
//   R_i = beta_i (v_i - exp(G_i) a_i - sum_{j in buffer} exp(G_i - G_j) (k_j.k_i) u_j)
//   o_i = exp(G_i) b_i + sum_{j in buffer, anc(i), i} exp(G_i - G_j) (k_j.q_i) u_j
template <class T>
void GdnKVBuffer<T>::verify_nodes(const GdnTokens<T>& nodes, const std::vector<int>& parents,
                                  std::vector<T>& o) {
  gdn_validate(nodes);
  const GdnDims& d = dims_;
  if (nodes.dims.H != d.H || nodes.dims.HV != d.HV || nodes.dims.K != d.K || nodes.dims.V != d.V)
    fail("GdnKVBuffer::verify: token dims differ from the buffer's dims");
  const int T_ = nodes.steps;
  if (T_ < 1) fail("GdnKVBuffer::verify: need at least one token, got " + std::to_string(T_));
  if (int(parents.size()) != T_)
    fail("GdnKVBuffer::verify: " + std::to_string(parents.size()) + " parents for " +
         std::to_string(T_) + " nodes");
  std::vector<int> depth(T_ + 1, 0);
  int max_depth = 0;
  for (int i = 1; i <= T_; ++i) {
    const int p = parents[i - 1];
    if (p < 0 || p >= i)
      fail("GdnKVBuffer::verify: parent of node " + std::to_string(i) + " is " +
           std::to_string(p) + ", must be in 0.." + std::to_string(i - 1));
    depth[i] = depth[p] + 1;
    max_depth = std::max(max_depth, depth[i]);
  }
  if (max_depth > capacity_)
    fail("GdnKVBuffer::verify: " + std::to_string(max_depth) +
         " tokens on a path exceed the buffer capacity C=" + std::to_string(capacity_));
  if (fill() + max_depth > capacity_) fold();

  // anc[i][j]: node j (0-based) is a strict ancestor of node i.
  std::vector<std::vector<char>> anc(T_, std::vector<char>(T_, 0));
  for (int i = 0; i < T_; ++i)
    for (int p = parents[i]; p > 0; p = parents[p - 1]) anc[i][p - 1] = 1;

  const int n = fill(), K = d.K, V = d.V;
  pending_.assign(T_, Pending{});
  for (int i = 0; i < T_; ++i) {
    Pending& nd = pending_[i];
    nd.parent = parents[i];
    nd.k.resize(size_t(d.H) * K);
    for (int kh = 0; kh < d.H; ++kh)
      Eigen::Map<Vec<T>>(&nd.k[size_t(kh) * K], K) = norm_k(nodes, i, kh);
    nd.v.assign(nodes.v.begin() + size_t(i) * d.HV * V, nodes.v.begin() + size_t(i + 1) * d.HV * V);
    nd.beta.assign(nodes.beta.begin() + size_t(i) * d.HV, nodes.beta.begin() + size_t(i + 1) * d.HV);
    nd.G.resize(d.HV);
    nd.u.resize(size_t(d.HV) * V);
    for (int h = 0; h < d.HV; ++h) {
      const T G_parent = nd.parent > 0 ? pending_[nd.parent - 1].G[h] : (n > 0 ? G_[n - 1][h] : T(0));
      nd.G[h] = G_parent + nodes.g[size_t(i) * d.HV + h];
    }
  }

  o.assign(size_t(T_) * d.HV * V, T(0));
  for (int h = 0; h < d.HV; ++h) {
    const int kh = key_head(d, h);
    Mat<T> Kb(n, K);
    Vec<T> Gb(n);
    for (int j = 0; j < n; ++j) {
      Kb.row(j) = Eigen::Map<const Vec<T>>(&k_[j][size_t(kh) * K], K).transpose();
      Gb(j) = G_[j][h];
    }
    const Mat<T> Ub = buffer_U(h);
    Mat<T> Kn(T_, K), Qn(T_, K), Vn(T_, V);
    Vec<T> Gn(T_), beta(T_);
    for (int i = 0; i < T_; ++i) {
      Kn.row(i) = Eigen::Map<const Vec<T>>(&pending_[i].k[size_t(kh) * K], K).transpose();
      Qn.row(i) = norm_q(nodes, i, kh).transpose();
      Vn.row(i) = raw_v(nodes, i, h).transpose();
      Gn(i) = pending_[i].G[h];
      beta(i) = pending_[i].beta[h];
    }
    // Decay from buffered token j to node i, and between nodes (ancestors and self only).
    Mat<T> Db(T_, n), Dn = Mat<T>::Zero(T_, T_);
    for (int i = 0; i < T_; ++i) {
      for (int j = 0; j < n; ++j) Db(i, j) = std::exp(Gn(i) - Gb(j));
      for (int j = 0; j < i; ++j)
        if (anc[i][j]) Dn(i, j) = std::exp(Gn(i) - Gn(j));
      Dn(i, i) = T(1);
    }
    const Vec<T> expG = Gn.array().exp().matrix();
    Mat<T> R = Vn - (Db.array() * (Kn * Kb.transpose()).array()).matrix() * Ub;
    Mat<T> Out = (Db.array() * (Qn * Kb.transpose()).array()).matrix() * Ub;
    if (has_state_) {
      R -= expG.asDiagonal() * (Kn * s0_[h]);
      Out += expG.asDiagonal() * (Qn * s0_[h]);
    }
    R = beta.asDiagonal() * R;
    Mat<T> IA = Mat<T>::Identity(T_, T_);
    const Mat<T> KKt = Kn * Kn.transpose();
    for (int i = 0; i < T_; ++i)
      for (int j = 0; j < i; ++j)
        if (anc[i][j]) IA(i, j) = beta(i) * Dn(i, j) * KKt(i, j);
    IA.template triangularView<Eigen::UnitLower>().solveInPlace(R);  // R now holds U
    Out += (Dn.array() * (Qn * Kn.transpose()).array()).matrix() * R;
    for (int i = 0; i < T_; ++i) {
      Eigen::Map<Vec<T>>(&pending_[i].u[size_t(h) * V], V) = R.row(i).transpose();
      Eigen::Map<Vec<T>>(&o[(size_t(i) * d.HV + h) * V], V) = Out.row(i).transpose();
    }
  }
}

template <class T>
void GdnKVBuffer<T>::decode(const GdnTokens<T>& x, int t, T* o) {
  if (t < 0 || t >= x.steps)
    fail("GdnKVBuffer::decode: token " + std::to_string(t) + " outside [0, " +
         std::to_string(x.steps) + ")");
  std::vector<T> out;
  verify_nodes(gdn_slice_tokens(x, t, 1), {0}, out);
  std::copy(out.begin(), out.end(), o);
  accept_path({1});
}

template <class T>
void GdnKVBuffer<T>::verify(const GdnTokens<T>& window, std::vector<T>& o) {
  if (window.steps > capacity_)
    fail("GdnKVBuffer::verify: T=" + std::to_string(window.steps) +
         " tokens exceed the buffer capacity C=" + std::to_string(capacity_));
  std::vector<int> chain(std::max(window.steps, 0));
  for (int i = 0; i < int(chain.size()); ++i) chain[i] = i;
  verify_nodes(window, chain, o);
  pending_chain_ = true;
}

template <class T>
void GdnKVBuffer<T>::verify(const GdnTokens<T>& nodes, const std::vector<int>& parents,
                            std::vector<T>& o) {
  verify_nodes(nodes, parents, o);
  pending_chain_ = false;
}

template <class T>
void GdnKVBuffer<T>::accept(int m) {
  if (!pending_chain_) throw std::logic_error("GdnKVBuffer::accept: no chain verify to accept");
  if (m < 0 || m > int(pending_.size()))
    fail("GdnKVBuffer::accept: accepted length m=" + std::to_string(m) + " outside 0.." +
         std::to_string(pending_.size()));
  std::vector<int> path(m);
  for (int i = 0; i < m; ++i) path[i] = i + 1;
  accept_path(path);
}

template <class T>
void GdnKVBuffer<T>::accept_path(const std::vector<int>& path) {
  if (pending_.empty()) throw std::logic_error("GdnKVBuffer::accept_path: nothing verified");
  int prev = 0;
  for (int node : path) {
    if (node < 1 || node > int(pending_.size()))
      fail("GdnKVBuffer::accept_path: node " + std::to_string(node) + " outside 1.." +
           std::to_string(pending_.size()));
    if (pending_[node - 1].parent != prev)
      fail("GdnKVBuffer::accept_path: node " + std::to_string(node) + " is not a child of " +
           (prev == 0 ? std::string("the buffer end") : "node " + std::to_string(prev)));
    prev = node;
  }
  for (int node : path) {
    Pending& nd = pending_[node - 1];
    append(nd.k, nd.u, nd.v, nd.beta, nd.G);
  }
  pending_.clear();
  pending_chain_ = false;
  fold_if_full();
}

// ---- drivers ---------------------------------------------------------------------------------

template <class T>
void gdn_decode_kvbuffer(const GdnTokens<T>& x, int capacity, BufferVariant variant,
                         GdnState<T>& state, std::vector<T>& o, StateStore store) {
  gdn_validate(x);
  validate_capacity(capacity, "gdn_decode_kvbuffer");
  validate_state(state, x.dims, "gdn_decode_kvbuffer");
  const GdnDims& d = x.dims;
  GdnKVBuffer<T> buf(d, capacity, variant, state, store);
  o.assign(size_t(x.steps) * d.HV * d.V, T(0));
  for (int t = 0; t < x.steps; ++t) buf.decode(x, t, &o[size_t(t) * d.HV * d.V]);
  buf.fold();
  state = buf.checkpoint();
}

template <class T>
bool gdn_decode_direct(const GdnTokens<T>& x, int capacity, BufferVariant variant,
                       GdnState<T>& state, std::vector<T>& o, StateStore store) {
  gdn_validate(x);
  validate_capacity(capacity, "gdn_decode_direct");
  const GdnDims& d = x.dims;
  GdnKVBuffer<T> buf(d, capacity, variant, store);
  o.assign(size_t(x.steps) * d.HV * d.V, T(0));
  for (int t = 0; t < x.steps; ++t) buf.decode(x, t, &o[size_t(t) * d.HV * d.V]);
  const bool overflowed = buf.has_state();
  buf.fold();
  state = buf.checkpoint();
  return overflowed;
}

template <class T>
void gdn_verify_classic_window(const GdnTokens<T>& window, int accept, GdnState<T>& state,
                               std::vector<T>& o, std::vector<GdnState<T>>& states, StateStore store) {
  gdn_validate(window);
  validate_state(state, window.dims, "gdn_verify_classic_window");
  const GdnDims& d = window.dims;
  if (window.steps < 1) fail("gdn_verify_classic_window: need at least one token");
  if (accept < 0 || accept > window.steps)
    fail("gdn_verify_classic_window: accepted length " + std::to_string(accept) + " outside 0.." +
         std::to_string(window.steps));
  o.assign(size_t(window.steps) * d.HV * d.V, T(0));
  states.assign(window.steps, GdnState<T>{});
  GdnState<T> S = state;
  for (int t = 0; t < window.steps; ++t) {
    for (int h = 0; h < d.HV; ++h) recurrent_step(window, t, h, S[h], &o[(size_t(t) * d.HV + h) * d.V]);
    round_state(S, store);  // as written; the next token starts from it
    states[t] = S;
  }
  if (accept > 0) state = states[accept - 1];
}

namespace {
void validate_rounds(int drafts, int accept, const char* who) {
  if (drafts < 1) fail(std::string(who) + ": drafts T must be >= 1, got " + std::to_string(drafts));
  if (accept < 1 || accept > drafts)
    fail(std::string(who) + ": accepted length per round must be in 1..T=" +
         std::to_string(drafts) + ", got " + std::to_string(accept));
}
}  // namespace

template <class T>
void gdn_verify_classic(const GdnTokens<T>& x, int drafts, int accept, GdnState<T>& state,
                        std::vector<T>& o, StateStore store) {
  gdn_validate(x);
  validate_rounds(drafts, accept, "gdn_verify_classic");
  validate_state(state, x.dims, "gdn_verify_classic");
  const size_t row = size_t(x.dims.HV) * x.dims.V;
  o.assign(size_t(x.steps) * row, T(0));
  std::vector<T> ow;
  std::vector<GdnState<T>> states;
  for (int pos = 0; pos < x.steps;) {
    const int W = std::min(drafts, x.steps - pos), m = std::min(accept, W);
    gdn_verify_classic_window(gdn_slice_tokens(x, pos, W), m, state, ow, states, store);
    std::copy(ow.begin(), ow.begin() + m * row, o.begin() + pos * row);
    pos += m;
  }
}

template <class T>
void gdn_verify_kvbuffer(const GdnTokens<T>& x, int capacity, BufferVariant variant, int drafts,
                         int accept, GdnState<T>& state, std::vector<T>& o, StateStore store) {
  gdn_validate(x);
  validate_capacity(capacity, "gdn_verify_kvbuffer");
  validate_rounds(drafts, accept, "gdn_verify_kvbuffer");
  if (drafts > capacity)
    fail("gdn_verify_kvbuffer: T=" + std::to_string(drafts) +
         " drafts exceed the buffer capacity C=" + std::to_string(capacity));
  validate_state(state, x.dims, "gdn_verify_kvbuffer");
  const size_t row = size_t(x.dims.HV) * x.dims.V;
  GdnKVBuffer<T> buf(x.dims, capacity, variant, state, store);
  o.assign(size_t(x.steps) * row, T(0));
  std::vector<T> ow;
  for (int pos = 0; pos < x.steps;) {
    const int W = std::min(drafts, x.steps - pos), m = std::min(accept, W);
    buf.verify(gdn_slice_tokens(x, pos, W), ow);
    buf.accept(m);
    std::copy(ow.begin(), ow.begin() + m * row, o.begin() + pos * row);
    pos += m;
  }
  buf.fold();
  state = buf.checkpoint();
}

template <class T>
void gdn_verify_tree(GdnKVBuffer<T>& buffer, const GdnTokens<T>& nodes,
                     const std::vector<int>& parents, std::vector<T>& o) {
  buffer.verify(nodes, parents, o);
}

#define KVBUF_INSTANTIATE_GDN(T)                                                                  \
  template void gdn_validate<T>(const GdnTokens<T>&);                                             \
  template GdnTokens<T> gdn_slice_tokens<T>(const GdnTokens<T>&, int, int);                       \
  template GdnState<T> gdn_zero_state<T>(const GdnDims&);                                         \
  template T gdn_gate_g<T>(T, T, T);                                                              \
  template T gdn_gate_beta<T>(T);                                                                 \
  template void gdn_decode_recurrent<T>(const GdnTokens<T>&, GdnState<T>&, std::vector<T>&,       \
                                        StateStore);                                              \
  template void gdn_prefill_chunk<T>(const GdnTokens<T>&, int, GdnState<T>&, std::vector<T>&);    \
  template class GdnKVBuffer<T>;                                                                  \
  template void gdn_decode_kvbuffer<T>(const GdnTokens<T>&, int, BufferVariant, GdnState<T>&,     \
                                       std::vector<T>&, StateStore);                              \
  template bool gdn_decode_direct<T>(const GdnTokens<T>&, int, BufferVariant, GdnState<T>&,       \
                                     std::vector<T>&, StateStore);                                \
  template void gdn_verify_classic_window<T>(const GdnTokens<T>&, int, GdnState<T>&,              \
                                             std::vector<T>&, std::vector<GdnState<T>>&,          \
                                             StateStore);                                         \
  template void gdn_verify_classic<T>(const GdnTokens<T>&, int, int, GdnState<T>&,                \
                                      std::vector<T>&, StateStore);                               \
  template void gdn_verify_kvbuffer<T>(const GdnTokens<T>&, int, BufferVariant, int, int,         \
                                       GdnState<T>&, std::vector<T>&, StateStore);                \
  template void gdn_verify_tree<T>(GdnKVBuffer<T>&, const GdnTokens<T>&, const std::vector<int>&, \
                                   std::vector<T>&);

KVBUF_INSTANTIATE_GDN(double)
KVBUF_INSTANTIATE_GDN(float)

}  // namespace kvbuf::ref
