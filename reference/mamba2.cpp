// Mamba-2 reference model: see mamba2.h for the semantics of every mode.
#include "reference/mamba2.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>

namespace kvbuf::ref {
namespace {

template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
// rows x cols view of a row-major array with `stride` elements per row: one head's (or group's)
// slice of a [tokens, heads, dim] array.
template <class T>
using ConstRows = Eigen::Map<const RowMat<T>, 0, Eigen::OuterStride<>>;
template <class T>
using Rows = Eigen::Map<RowMat<T>, 0, Eigen::OuterStride<>>;

[[noreturn]] void fail(const std::string& msg) { throw std::invalid_argument("mamba2: " + msg); }

std::string str(double v) { return std::to_string(v); }
std::string str(int v) { return std::to_string(v); }

int group_of(const Mamba2Dims& d, int h) { return h / (d.NH / d.G); }

bool same_dims(const Mamba2Dims& a, const Mamba2Dims& b) {
  return a.G == b.G && a.NH == b.NH && a.N == b.N && a.P == b.P;
}

template <class T>
void check_size(const std::vector<T>& v, size_t expected, const char* name) {
  if (v.size() != expected)
    fail(std::string(name) + " has " + std::to_string(v.size()) + " elements, expected " +
         std::to_string(expected));
}

template <class T>
void check_dt(T dt, size_t i) {
  if (!(dt > 0) || !std::isfinite(dt))
    fail("dt must be positive and finite (after softplus); dt[" + std::to_string(i) +
         "] = " + str(double(dt)));
}

template <class T>
void validate_state(const Mamba2Dims& d, const Mamba2State<T>& s) {
  if (s.size() != size_t(d.NH))
    fail("state has " + std::to_string(s.size()) + " heads, expected NH = " + str(d.NH));
  for (const auto& m : s)
    if (m.rows() != d.P || m.cols() != d.N)
      fail("state head is " + str(int(m.rows())) + " x " + str(int(m.cols())) +
           ", expected P x N = " + str(d.P) + " x " + str(d.N));
}

template <class T>
ConstRows<T> head_rows(const std::vector<T>& x, const Mamba2Dims& d, int t0, int count, int h) {
  return ConstRows<T>(x.data() + (size_t(t0) * d.NH + h) * d.P, count, d.P,
                      Eigen::OuterStride<>(d.NH * d.P));
}
template <class T>
ConstRows<T> group_rows(const std::vector<T>& bc, const Mamba2Dims& d, int t0, int count, int g) {
  return ConstRows<T>(bc.data() + (size_t(t0) * d.G + g) * d.N, count, d.N,
                      Eigen::OuterStride<>(d.G * d.N));
}

// G_t = G0 + sum of dt A over tokens [t0, t]: a running sum of negative terms, so it is
// nonincreasing also after rounding and every G_t - G_j (j <= t) is <= 0.
template <class T>
Vec<T> cumulative_G(const Mamba2Tokens<T>& x, int t0, int count, int h, T G0) {
  Vec<T> G(count);
  T acc = G0;
  for (int t = 0; t < count; ++t) {
    acc += x.dt[size_t(t0 + t) * x.dims.NH + h] * x.A[h];
    G(t) = acc;
  }
  return G;
}

// S <- exp(G_n) S + X^T diag(exp(G_n - G_j) dt_j) B over the n rows j of X [n, P], B [n, N].
template <class T, class XMat, class BMat>
void rank_update(Mat<T>& S, const XMat& X, const BMat& B, const Vec<T>& dt, const Vec<T>& G) {
  const int n = int(G.size());
  const T G_n = G(n - 1);
  Vec<T> w(n);
  for (int j = 0; j < n; ++j) w(j) = std::exp(G_n - G(j)) * dt(j);
  S = std::exp(G_n) * S + X.transpose() * (w.asDiagonal() * B);
}

// Buffered entries of one head (or its group) as matrices: X [n, P], B [n, N], dt, G [n].
template <class T>
struct HeadEntries {
  Mat<T> X, B;
  Vec<T> dt, G;
};

// Outputs y [count, NH, P] of tokens [t0, t0 + count) of x that follow checkpoint S0 (nullptr: no
// state) and the buffered entries (entries[h], may be empty), each token also seeing the earlier
// tokens of its own window:
//   y_t = exp(G_t) S0 C_t + sum_{j in buffer, window, j<=t} exp(G_t - G_j) dt_j (B_j . C_t) x_j + D
//   x_t
template <class T>
void outputs_after_checkpoint(const Mamba2Tokens<T>& x, int t0, int count, const Mamba2State<T>* S0,
                              const std::vector<HeadEntries<T>>* entries, T* y) {
  const auto& d = x.dims;
  for (int h = 0; h < d.NH; ++h) {
    const int g = group_of(d, h);
    const HeadEntries<T>* e = entries ? &(*entries)[h] : nullptr;
    const int n = e ? int(e->G.size()) : 0;
    const Vec<T> G = cumulative_G(x, t0, count, h, n > 0 ? e->G(n - 1) : T(0));
    const auto X = head_rows(x.x, d, t0, count, h);
    const auto B = group_rows(x.B, d, t0, count, g);
    const auto C = group_rows(x.C, d, t0, count, g);
    Mat<T> Y = x.D[h] * X;
    if (S0) Y += G.array().exp().matrix().asDiagonal() * (C * (*S0)[h].transpose());
    if (n > 0) {
      Mat<T> M = C * e->B.transpose();
      for (int j = 0; j < n; ++j)
        for (int t = 0; t < count; ++t) M(t, j) *= std::exp(G(t) - e->G(j)) * e->dt(j);
      Y += M * e->X;
    }
    Mat<T> M = C * B.transpose();
    for (int j = 0; j < count; ++j) {
      const T dt_j = x.dt[size_t(t0 + j) * d.NH + h];
      for (int t = 0; t < count; ++t)
        M(t, j) = t < j ? T(0) : M(t, j) * std::exp(G(t) - G(j)) * dt_j;
    }
    Y += M * X;
    Rows<T>(y + size_t(h) * d.P, count, d.P, Eigen::OuterStride<>(d.NH * d.P)) = Y;
  }
}

// One token through the recurrence: S <- exp(dt A) S + dt x B^T; y = S C + D x (y: [NH, P]).
template <class T>
void recurrent_step(const Mamba2Tokens<T>& x, int t, Mamba2State<T>& state, T* y) {
  const auto& d = x.dims;
  for (int h = 0; h < d.NH; ++h) {
    const int g = group_of(d, h);
    const T dt = x.dt[size_t(t) * d.NH + h];
    const Eigen::Map<const Vec<T>> xt(&x.x[(size_t(t) * d.NH + h) * d.P], d.P);
    const Eigen::Map<const Vec<T>> Bt(&x.B[(size_t(t) * d.G + g) * d.N], d.N);
    const Eigen::Map<const Vec<T>> Ct(&x.C[(size_t(t) * d.G + g) * d.N], d.N);
    Mat<T>& S = state[h];
    S = std::exp(dt * x.A[h]) * S + (dt * xt) * Bt.transpose();
    Eigen::Map<Vec<T>>(y + size_t(h) * d.P, d.P) = S * Ct + x.D[h] * xt;
  }
}

}  // namespace

void mamba2_validate_dims(const Mamba2Dims& d) {
  if (d.G < 1 || d.NH < 1 || d.N < 1 || d.P < 1)
    fail("dims must be positive (G = " + str(d.G) + ", NH = " + str(d.NH) + ", N = " + str(d.N) +
         ", P = " + str(d.P) + ")");
  if (d.NH % d.G != 0) fail("heads NH = " + str(d.NH) + " not divisible by groups G = " + str(d.G));
}

namespace {
// Everything but the dt values (checked per token by the buffer's decode, for all tokens here).
template <class T>
void validate_sizes_and_A(const Mamba2Tokens<T>& x) {
  const auto& d = x.dims;
  mamba2_validate_dims(d);
  if (x.steps < 0) fail("steps must be >= 0, got " + str(x.steps));
  const size_t steps = size_t(x.steps);
  check_size(x.x, steps * d.NH * d.P, "x [T, NH, P]");
  check_size(x.B, steps * d.G * d.N, "B [T, G, N]");
  check_size(x.C, steps * d.G * d.N, "C [T, G, N]");
  check_size(x.dt, steps * d.NH, "dt [T, NH]");
  check_size(x.A, size_t(d.NH), "A [NH]");
  check_size(x.D, size_t(d.NH), "D [NH]");
  for (int h = 0; h < d.NH; ++h)
    if (!(x.A[h] < 0) || !std::isfinite(x.A[h]))
      fail("A must be negative and finite; A[" + str(h) + "] = " + str(double(x.A[h])));
}
}  // namespace

template <class T>
void mamba2_validate(const Mamba2Tokens<T>& x) {
  validate_sizes_and_A(x);
  for (size_t i = 0; i < x.dt.size(); ++i) check_dt(x.dt[i], i);
}

template <class T>
Mamba2Tokens<T> mamba2_slice_tokens(const Mamba2Tokens<T>& x, int begin, int count) {
  mamba2_validate(x);
  if (begin < 0 || count < 0 || begin + count > x.steps)
    fail("token slice [" + str(begin) + ", " + str(begin + count) + ") outside [0, " +
         str(x.steps) + ")");
  const auto& d = x.dims;
  auto cut = [&](const std::vector<T>& v, size_t per_token) {
    return std::vector<T>(v.begin() + begin * per_token, v.begin() + (begin + count) * per_token);
  };
  Mamba2Tokens<T> s;
  s.dims = d;
  s.steps = count;
  s.x = cut(x.x, size_t(d.NH) * d.P);
  s.B = cut(x.B, size_t(d.G) * d.N);
  s.C = cut(x.C, size_t(d.G) * d.N);
  s.dt = cut(x.dt, size_t(d.NH));
  s.A = x.A;
  s.D = x.D;
  return s;
}

template <class T>
Mamba2State<T> mamba2_zero_state(const Mamba2Dims& d) {
  mamba2_validate_dims(d);
  return Mamba2State<T>(size_t(d.NH), Mat<T>::Zero(d.P, d.N));
}

template <class T>
Mamba2Tokens<T> make_random_mamba2_tokens(const Mamba2Dims& d, int steps, std::mt19937_64& rng,
                                          const Mamba2DecayRange& decay) {
  mamba2_validate_dims(d);
  if (steps < 0) fail("make_random_mamba2_tokens: steps must be >= 0, got " + str(steps));
  if (!(decay.dt_min > 0 && decay.dt_min <= decay.dt_max))
    fail("Mamba2DecayRange: need 0 < dt_min <= dt_max");
  if (!(decay.A_min <= decay.A_max && decay.A_max < 0))
    fail("Mamba2DecayRange: need A_min <= A_max < 0");
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> dt_dist(decay.dt_min, decay.dt_max);
  std::uniform_real_distribution<double> A_dist(decay.A_min, decay.A_max), D_dist(0.5, 1.5);
  auto fill = [&](std::vector<T>& v, size_t n, auto& dist) {
    v.resize(n);
    for (auto& e : v) e = T(dist(rng));
  };
  Mamba2Tokens<T> x;
  x.dims = d;
  x.steps = steps;
  fill(x.x, size_t(steps) * d.NH * d.P, normal);
  fill(x.B, size_t(steps) * d.G * d.N, normal);
  fill(x.C, size_t(steps) * d.G * d.N, normal);
  fill(x.dt, size_t(steps) * d.NH, dt_dist);
  fill(x.A, size_t(d.NH), A_dist);
  fill(x.D, size_t(d.NH), D_dist);
  return x;
}

template <class T>
Mamba2State<T> make_random_mamba2_state(const Mamba2Dims& d, std::mt19937_64& rng, double scale) {
  Mamba2State<T> s = mamba2_zero_state<T>(d);
  std::normal_distribution<double> normal(0.0, scale);
  for (auto& m : s)
    for (Eigen::Index i = 0; i < m.size(); ++i) m.data()[i] = T(normal(rng));
  return s;
}

template <class T>
void mamba2_decode_recurrent(const Mamba2Tokens<T>& x, Mamba2State<T>& state, std::vector<T>& y,
                             StateStore store) {
  mamba2_validate(x);
  validate_state(x.dims, state);
  const size_t per_token = size_t(x.dims.NH) * x.dims.P;
  y.assign(size_t(x.steps) * per_token, T(0));
  for (int t = 0; t < x.steps; ++t) {
    recurrent_step(x, t, state, y.data() + t * per_token);
    round_state(state, store);
  }
}

template <class T>
void mamba2_prefill_chunk(const Mamba2Tokens<T>& x, int chunk, Mamba2State<T>& state,
                          std::vector<T>& y) {
  mamba2_validate(x);
  const auto& d = x.dims;
  validate_state(d, state);
  if (chunk < 1) fail("chunk must be >= 1, got " + str(chunk));
  const size_t per_token = size_t(d.NH) * d.P;
  y.assign(size_t(x.steps) * per_token, T(0));
  for (int c0 = 0; c0 < x.steps; c0 += chunk) {
    const int len = std::min(chunk, x.steps - c0);
    outputs_after_checkpoint<T>(x, c0, len, &state, nullptr, y.data() + c0 * per_token);
    for (int h = 0; h < d.NH; ++h) {
      Vec<T> dt(len);
      for (int j = 0; j < len; ++j) dt(j) = x.dt[size_t(c0 + j) * d.NH + h];
      rank_update(state[h], head_rows(x.x, d, c0, len, h),
                  group_rows(x.B, d, c0, len, group_of(d, h)), dt,
                  cumulative_G(x, c0, len, h, T(0)));
    }
  }
}

// ---- Mamba2KVBuffer ----

template <class T>
Mamba2KVBuffer<T>::Mamba2KVBuffer(const Mamba2Dims& d, int capacity, Mamba2State<T> s0, StateStore store)
    : dims_(d), capacity_(capacity), has_state_(true), store_(store), s0_(std::move(s0)) {
  mamba2_validate_dims(d);
  if (capacity < 1) fail("buffer capacity must be >= 1, got " + str(capacity));
  validate_state(d, s0_);
}

template <class T>
Mamba2KVBuffer<T>::Mamba2KVBuffer(const Mamba2Dims& d, int capacity, StateStore store)
    : dims_(d), capacity_(capacity), has_state_(false), store_(store) {
  mamba2_validate_dims(d);
  if (capacity < 1) fail("buffer capacity must be >= 1, got " + str(capacity));
  s0_ = mamba2_zero_state<T>(d);
}

template <class T>
Mamba2State<T> Mamba2KVBuffer<T>::state() const {
  Mamba2KVBuffer<T> copy = *this;
  copy.fold();
  return copy.s0_;
}

template <class T>
void Mamba2KVBuffer<T>::check_tokens(const Mamba2Tokens<T>& x) const {
  if (!same_dims(dims_, x.dims))
    fail("tokens have dims (G, NH, N, P) = (" + str(x.dims.G) + ", " + str(x.dims.NH) + ", " +
         str(x.dims.N) + ", " + str(x.dims.P) + "), the buffer (" + str(dims_.G) + ", " +
         str(dims_.NH) + ", " + str(dims_.N) + ", " + str(dims_.P) + ")");
}

template <class T>
void Mamba2KVBuffer<T>::append(const Mamba2Tokens<T>& x, int t) {
  const auto& d = dims_;
  const T* xt = &x.x[size_t(t) * d.NH * d.P];
  const T* Bt = &x.B[size_t(t) * d.G * d.N];
  const T* dt = &x.dt[size_t(t) * d.NH];
  std::vector<T> G(size_t(d.NH));
  for (int h = 0; h < d.NH; ++h) G[h] = (fill() > 0 ? G_.back()[h] : T(0)) + dt[h] * x.A[h];
  x_.emplace_back(xt, xt + d.NH * d.P);
  B_.emplace_back(Bt, Bt + d.G * d.N);
  dt_.emplace_back(dt, dt + d.NH);
  G_.push_back(std::move(G));
}

namespace {
template <class T>
std::vector<HeadEntries<T>> gather_entries(const Mamba2KVBuffer<T>& buf) {
  const auto& d = buf.dims();
  const int n = buf.fill();
  std::vector<HeadEntries<T>> e(size_t(d.NH));
  for (int h = 0; h < d.NH; ++h) {
    const int g = group_of(d, h);
    e[h].X.resize(n, d.P);
    e[h].B.resize(n, d.N);
    e[h].dt.resize(n);
    e[h].G.resize(n);
    for (int j = 0; j < n; ++j) {
      for (int p = 0; p < d.P; ++p) e[h].X(j, p) = buf.entry_x(j)[size_t(h) * d.P + p];
      for (int k = 0; k < d.N; ++k) e[h].B(j, k) = buf.entry_B(j)[size_t(g) * d.N + k];
      e[h].dt(j) = buf.entry_dt(j)[h];
      e[h].G(j) = buf.entry_G(j)[h];
    }
  }
  return e;
}
}  // namespace

template <class T>
void Mamba2KVBuffer<T>::decode(const Mamba2Tokens<T>& x, int t, T* y) {
  check_tokens(x);
  if (t < 0 || t >= x.steps) fail("decode: token " + str(t) + " outside 0.." + str(x.steps - 1));
  validate_sizes_and_A(x);
  for (int h = 0; h < dims_.NH; ++h)
    check_dt(x.dt[size_t(t) * dims_.NH + h], size_t(t) * dims_.NH + h);
  has_pending_ = false;
  const auto entries = gather_entries(*this);
  outputs_after_checkpoint(x, t, 1, has_state_ ? &s0_ : nullptr, &entries, y);
  append(x, t);
  if (fill() == capacity_) fold();
}

template <class T>
void Mamba2KVBuffer<T>::verify(const Mamba2Tokens<T>& window, std::vector<T>& y) {
  mamba2_validate(window);
  check_tokens(window);
  if (window.steps < 1) fail("verify needs at least one token");
  if (window.steps > capacity_)
    fail("verify window T = " + str(window.steps) +
         " exceeds buffer capacity C = " + str(capacity_));
  if (fill() + window.steps > capacity_) fold();
  y.assign(size_t(window.steps) * dims_.NH * dims_.P, T(0));
  const auto entries = gather_entries(*this);
  outputs_after_checkpoint(window, 0, window.steps, has_state_ ? &s0_ : nullptr, &entries,
                           y.data());
  pending_ = window;
  has_pending_ = true;
}

template <class T>
void Mamba2KVBuffer<T>::accept(int m) {
  if (!has_pending_) fail("accept without a preceding verify");
  if (m < 0 || m > pending_.steps)
    fail("accepted length " + str(m) + " outside 0.." + str(pending_.steps));
  for (int t = 0; t < m; ++t) append(pending_, t);
  has_pending_ = false;
  if (fill() == capacity_) fold();
}

template <class T>
void Mamba2KVBuffer<T>::fold() {
  if (fill() == 0) return;
  const auto entries = gather_entries(*this);
  for (int h = 0; h < dims_.NH; ++h)
    rank_update(s0_[h], entries[h].X, entries[h].B, entries[h].dt, entries[h].G);
  round_state(s0_, store_);
  has_state_ = true;
  ++folds_;
  x_.clear();
  B_.clear();
  dt_.clear();
  G_.clear();
}

// ---- drivers ----

template <class T>
void mamba2_decode_kvbuffer(const Mamba2Tokens<T>& x, int capacity, Mamba2State<T>& state,
                            std::vector<T>& y, StateStore store) {
  mamba2_validate(x);
  Mamba2KVBuffer<T> buf(x.dims, capacity, state, store);
  const size_t per_token = size_t(x.dims.NH) * x.dims.P;
  y.assign(size_t(x.steps) * per_token, T(0));
  for (int t = 0; t < x.steps; ++t) buf.decode(x, t, y.data() + t * per_token);
  buf.fold();
  state = buf.checkpoint();
}

template <class T>
bool mamba2_decode_direct(const Mamba2Tokens<T>& x, int capacity, Mamba2State<T>& state,
                          std::vector<T>& y, StateStore store) {
  mamba2_validate(x);
  Mamba2KVBuffer<T> buf(x.dims, capacity, store);
  const size_t per_token = size_t(x.dims.NH) * x.dims.P;
  y.assign(size_t(x.steps) * per_token, T(0));
  for (int t = 0; t < x.steps; ++t) buf.decode(x, t, y.data() + t * per_token);
  const bool overflowed = buf.folds() > 0;
  buf.fold();
  state = buf.checkpoint();
  return overflowed;
}

template <class T>
void mamba2_verify_classic_window(const Mamba2Tokens<T>& window, int accept, Mamba2State<T>& state,
                                  std::vector<T>& y, std::vector<Mamba2State<T>>& states, StateStore store) {
  mamba2_validate(window);
  if (window.steps < 1) fail("verify needs at least one token");
  if (accept < 0 || accept > window.steps)
    fail("accepted length " + str(accept) + " outside 0.." + str(window.steps));
  std::vector<int> chain(size_t(window.steps));
  for (int t = 0; t < window.steps; ++t) chain[size_t(t)] = t - 1;
  mamba2_verify_classic_tree(window, chain, accept - 1, state, y, states, store);
}

template <class T>
void mamba2_verify_classic_tree(const Mamba2Tokens<T>& window, const std::vector<int>& parents, int accept_node,
                                Mamba2State<T>& state, std::vector<T>& y, std::vector<Mamba2State<T>>& states,
                                StateStore store) {
  mamba2_validate(window);
  validate_state(window.dims, state);
  if (window.steps < 1) fail("verify needs at least one token");
  if (int(parents.size()) != window.steps) fail("parents: " + str(int(parents.size())) + " for " + str(window.steps) + " nodes");
  for (int t = 0; t < window.steps; ++t)
    if (parents[size_t(t)] < -1 || parents[size_t(t)] >= t)
      fail("parent " + str(parents[size_t(t)]) + " of node " + str(t) + " outside -1.." + str(t - 1));
  if (accept_node < -1 || accept_node >= window.steps)
    fail("accepted node " + str(accept_node) + " outside -1.." + str(window.steps - 1));
  const size_t per_token = size_t(window.dims.NH) * window.dims.P;
  y.assign(size_t(window.steps) * per_token, T(0));
  states.clear();
  Mamba2State<T> s = state;  // the unrounded state of the previous node (the kernel's registers)
  for (int t = 0; t < window.steps; ++t) {
    const int par = parents[size_t(t)];
    if (par != t - 1) s = par < 0 ? state : states[size_t(par)];  // a reload of the written state
    recurrent_step(window, t, s, y.data() + t * per_token);
    states.push_back(s);
    round_state(states.back(), store);
  }
  if (accept_node >= 0) state = states[size_t(accept_node)];
}

namespace {
void check_drafts(int drafts, int accept) {
  if (drafts < 1) fail("drafts must be >= 1, got " + str(drafts));
  if (accept < 1 || accept > drafts)
    fail("accept must be in 1..drafts = 1.." + str(drafts) + ", got " + str(accept));
}

// Rounds of windows of `drafts` tokens, each accepting min(accept, window) tokens; `round` computes
// a window's outputs and commits the accepted prefix.
template <class T, class Round>
void verify_rounds(const Mamba2Tokens<T>& x, int drafts, int accept, std::vector<T>& y,
                   Round round) {
  const size_t per_token = size_t(x.dims.NH) * x.dims.P;
  y.assign(size_t(x.steps) * per_token, T(0));
  std::vector<T> yw;
  for (int pos = 0; pos < x.steps;) {
    const int len = std::min(drafts, x.steps - pos);
    const int keep = std::min(accept, len);
    round(mamba2_slice_tokens(x, pos, len), keep, yw);
    std::copy_n(yw.begin(), keep * per_token, y.begin() + pos * per_token);
    pos += keep;
  }
}
}  // namespace

template <class T>
void mamba2_verify_classic(const Mamba2Tokens<T>& x, int drafts, int accept, Mamba2State<T>& state,
                           std::vector<T>& y, StateStore store) {
  mamba2_validate(x);
  validate_state(x.dims, state);
  check_drafts(drafts, accept);
  std::vector<Mamba2State<T>> states;
  verify_rounds(x, drafts, accept, y, [&](const Mamba2Tokens<T>& w, int keep, std::vector<T>& yw) {
    mamba2_verify_classic_window(w, keep, state, yw, states, store);
  });
}

template <class T>
void mamba2_verify_kvbuffer(const Mamba2Tokens<T>& x, int capacity, int drafts, int accept,
                            Mamba2State<T>& state, std::vector<T>& y) {
  mamba2_validate(x);
  check_drafts(drafts, accept);
  Mamba2KVBuffer<T> buf(x.dims, capacity, state);
  if (drafts > capacity)
    fail("drafts T = " + str(drafts) + " exceed buffer capacity C = " + str(capacity));
  verify_rounds(x, drafts, accept, y, [&](const Mamba2Tokens<T>& w, int keep, std::vector<T>& yw) {
    buf.verify(w, yw);
    buf.accept(keep);
  });
  buf.fold();
  state = buf.checkpoint();
}

// ---- float32 tolerance ----

double mamba2_f32_gamma(const Mamba2Tokens<double>& x, int window) {
  mamba2_validate(x);
  if (window < 1) fail("tolerance window must be >= 1, got " + str(window));
  const auto& d = x.dims;
  // E: worst exp(G_t - G_j) (t - j) |G|_window over j < t within `window` tokens, with |G|_window
  // the decay accumulated over the window ending at t (an upper bound on the running sum's scale).
  // L: the decay-weighted count of tokens feeding the state, max over t of
  // sum_{j<=t} exp(G_t - G_j) (w_t = exp(-a_t) w_{t-1} + 1), since an error made at token j is
  // multiplied by every later decay; at most the number of tokens.
  double E = 0, L = 0;
  for (int h = 0; h < d.NH; ++h) {
    std::vector<double> a(size_t(x.steps));
    for (int t = 0; t < x.steps; ++t) a[t] = -x.dt[size_t(t) * d.NH + h] * x.A[h];
    double w = 0;
    for (int t = 0; t < x.steps; ++t) {
      w = std::exp(-a[t]) * w + 1;
      L = std::max(L, w);
    }
    for (int t = 0; t < x.steps; ++t) {
      double G_window = 0;
      for (int j = t; j >= 0 && j > t - window; --j) G_window += a[j];
      double decay = 0;  // sum of a over (j, t]
      for (int j = t - 1; j >= 0 && j > t - window; --j) {
        decay += a[j + 1];
        E = std::max(E, std::exp(-decay) * (t - j) * G_window);
      }
    }
  }
  const double u = std::ldexp(1.0, -24);
  return 2 * u * (d.N + L + std::min(window, x.steps) + E + 8);
}

Mamba2Tolerance mamba2_f32_tolerance(const Mamba2Tokens<double>& x, const Mamba2State<double>& s0,
                                     int window) {
  const double gamma = mamba2_f32_gamma(x, window);
  validate_state(x.dims, s0);
  auto abs_all = [](std::vector<double> v) {
    for (auto& e : v) e = std::abs(e);
    return v;
  };
  Mamba2Tokens<double> x_abs = x;
  x_abs.x = abs_all(x.x);
  x_abs.B = abs_all(x.B);
  x_abs.C = abs_all(x.C);
  x_abs.D = abs_all(x.D);
  Mamba2State<double> s_abs;
  for (const auto& m : s0) s_abs.push_back(m.cwiseAbs());
  Mamba2State<double> s_ref = s0;
  std::vector<double> y_abs, y_ref;
  mamba2_decode_recurrent(x_abs, s_abs, y_abs);
  mamba2_decode_recurrent(x, s_ref, y_ref);
  auto max_abs = [](const std::vector<double>& v) {
    double m = 0;
    for (double e : v) m = std::max(m, std::abs(e));
    return m;
  };
  auto state_max = [](const Mamba2State<double>& s) {
    double m = 0;
    for (const auto& e : s) m = std::max(m, e.cwiseAbs().maxCoeff());
    return m;
  };
  const double tiny = std::numeric_limits<double>::min();
  Mamba2Tolerance tol;
  tol.y = gamma * max_abs(y_abs) / std::max(max_abs(y_ref), tiny);
  tol.state = gamma * state_max(s_abs) / std::max(state_max(s_ref), tiny);
  return tol;
}

// ---- cross-checks ----

namespace {

template <class T>
std::vector<double> flatten(const Mamba2State<T>& s) {
  std::vector<double> v;
  for (const auto& m : s) v.insert(v.end(), m.data(), m.data() + m.size());
  return v;
}

template <class T>
struct ModeRun {
  std::string name;
  int window;
  std::function<void(const Mamba2Tokens<T>&, Mamba2State<T>&, std::vector<T>&)> run;
};

template <class T>
std::vector<ModeRun<T>> all_modes() {
  using Tok = Mamba2Tokens<T>;
  using St = Mamba2State<T>;
  std::vector<ModeRun<T>> modes;
  for (int chunk : {16, 64})
    modes.push_back({"prefill chunk=" + std::to_string(chunk), chunk,
                     [chunk](const Tok& x, St& s, std::vector<T>& y) {
                       mamba2_prefill_chunk(x, chunk, s, y);
                     }});
  for (int cap : {3, 16})
    modes.push_back(
        {"kvbuffer C=" + std::to_string(cap), cap,
         [cap](const Tok& x, St& s, std::vector<T>& y) { mamba2_decode_kvbuffer(x, cap, s, y); }});
  modes.push_back({"verify classic T=4 accept=2", 1, [](const Tok& x, St& s, std::vector<T>& y) {
                     mamba2_verify_classic(x, 4, 2, s, y);
                   }});
  modes.push_back(
      {"verify kvbuffer C=16 T=4 accept=3", 16,
       [](const Tok& x, St& s, std::vector<T>& y) { mamba2_verify_kvbuffer(x, 16, 4, 3, s, y); }});
  return modes;
}

}  // namespace

std::vector<CrossCheck> run_mamba2_cross_checks(uint64_t seed) {
  std::mt19937_64 rng(seed);
  const Mamba2Dims d{2, 4, 64, 32};
  const int steps = 67;
  const auto x32 = make_random_mamba2_tokens<float>(d, steps, rng);
  const auto s32 = make_random_mamba2_state<float>(d, rng);
  const auto x = mamba2_cast_tokens<double>(x32);
  const auto s0 = mamba2_cast_state<double>(s32);
  std::vector<CrossCheck> checks;
  auto add = [&](const std::string& name, double err, double tol) {
    checks.push_back({"mamba2 " + name, err, tol, err <= tol});
  };

  Mamba2State<double> s_ref = s0;
  std::vector<double> y_ref;
  mamba2_decode_recurrent(x, s_ref, y_ref);
  const auto state_ref = flatten(s_ref);
  {  // direct mode starts from no state: its ground truth is the recurrence from zero.
    const int cap = 16;
    const auto zero = mamba2_zero_state<double>(d);
    Mamba2State<double> s_zero = zero, s64;
    std::vector<double> y_zero, y64;
    mamba2_decode_recurrent(x, s_zero, y_zero);
    mamba2_decode_direct(x, cap, s64, y64);
    add("direct C=16 f64 (y)", max_rel_err(y64, y_zero), 1e-12);
    add("direct C=16 f64 (state)", max_rel_err(flatten(s64), flatten(s_zero)), 1e-12);
    const auto tol = mamba2_f32_tolerance(x, zero, cap);
    Mamba2State<float> s32d;
    std::vector<float> y32;
    mamba2_decode_direct(x32, cap, s32d, y32);
    add("direct C=16 f32 (y)", max_rel_err(y32, y_zero), tol.y);
    add("direct C=16 f32 (state)", max_rel_err(flatten(s32d), flatten(s_zero)), tol.state);
  }
  {
    const auto tol = mamba2_f32_tolerance(x, s0, 1);
    Mamba2State<float> s = s32;
    std::vector<float> y;
    mamba2_decode_recurrent(x32, s, y);
    add("recurrent f32 (y)", max_rel_err(y, y_ref), tol.y);
    add("recurrent f32 (state)", max_rel_err(flatten(s), state_ref), tol.state);
  }
  const auto modes64 = all_modes<double>();
  const auto modes32 = all_modes<float>();
  for (size_t i = 0; i < modes64.size(); ++i) {
    Mamba2State<double> s = s0;
    std::vector<double> y;
    modes64[i].run(x, s, y);
    add(modes64[i].name + " f64 (y)", max_rel_err(y, y_ref), 1e-12);
    add(modes64[i].name + " f64 (state)", max_rel_err(flatten(s), state_ref), 1e-12);
    const auto tol = mamba2_f32_tolerance(x, s0, modes32[i].window);
    Mamba2State<float> s_f = s32;
    std::vector<float> y_f;
    modes32[i].run(x32, s_f, y_f);
    add(modes32[i].name + " f32 (y)", max_rel_err(y_f, y_ref), tol.y);
    add(modes32[i].name + " f32 (state)", max_rel_err(flatten(s_f), state_ref), tol.state);
  }
  return checks;
}

#define KVBUF_MAMBA2_INSTANTIATE(T)                                                               \
  template void mamba2_validate<T>(const Mamba2Tokens<T>&);                                       \
  template Mamba2Tokens<T> mamba2_slice_tokens<T>(const Mamba2Tokens<T>&, int, int);              \
  template Mamba2State<T> mamba2_zero_state<T>(const Mamba2Dims&);                                \
  template Mamba2Tokens<T> make_random_mamba2_tokens<T>(const Mamba2Dims&, int, std::mt19937_64&, \
                                                        const Mamba2DecayRange&);                 \
  template Mamba2State<T> make_random_mamba2_state<T>(const Mamba2Dims&, std::mt19937_64&,        \
                                                      double);                                    \
  template void mamba2_decode_recurrent<T>(const Mamba2Tokens<T>&, Mamba2State<T>&,               \
                                           std::vector<T>&, StateStore);                          \
  template void mamba2_prefill_chunk<T>(const Mamba2Tokens<T>&, int, Mamba2State<T>&,             \
                                        std::vector<T>&);                                         \
  template class Mamba2KVBuffer<T>;                                                               \
  template void mamba2_decode_kvbuffer<T>(const Mamba2Tokens<T>&, int, Mamba2State<T>&,           \
                                          std::vector<T>&, StateStore);                           \
  template bool mamba2_decode_direct<T>(const Mamba2Tokens<T>&, int, Mamba2State<T>&,             \
                                        std::vector<T>&, StateStore);                             \
  template void mamba2_verify_classic_window<T>(const Mamba2Tokens<T>&, int, Mamba2State<T>&,     \
                                                std::vector<T>&, std::vector<Mamba2State<T>>&,    \
                                                StateStore);                                      \
  template void mamba2_verify_classic_tree<T>(const Mamba2Tokens<T>&, const std::vector<int>&, int, \
                                              Mamba2State<T>&, std::vector<T>&,                   \
                                              std::vector<Mamba2State<T>>&, StateStore);          \
  template void mamba2_verify_classic<T>(const Mamba2Tokens<T>&, int, int, Mamba2State<T>&,       \
                                         std::vector<T>&, StateStore);                            \
  template void mamba2_verify_kvbuffer<T>(const Mamba2Tokens<T>&, int, int, int, Mamba2State<T>&, \
                                          std::vector<T>&);

KVBUF_MAMBA2_INSTANTIATE(double)
KVBUF_MAMBA2_INSTANTIATE(float)
#undef KVBUF_MAMBA2_INSTANTIATE

}  // namespace kvbuf::ref
