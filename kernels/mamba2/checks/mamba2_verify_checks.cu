// The Mamba-2 verify kernel checks of mamba2_verify_checks.h: mamba2_verify_kvbuffer + its commit,
// and mamba2_verify_classic in place with the commit by index, against the float64 reference
// ref::mamba2_decode_recurrent of the accepted token sequence, on the same bf16 inputs.
//
// A case runs rounds on a batch of requests in scattered pool slots, with padding rows (slot -1,
// outputs must be exactly zero) at random positions. Each round draws fresh random tokens per row
// (and, for trees, random parents), poisons the outputs and the scratch (NaN), verifies, checks
// every node's output against the recurrence along its root path from the row's committed state,
// then accepts a random root path (chains: a prefix of random length 1..T; one time in 8 nothing)
// and commits. Fills stagger by themselves; every other request starts in direct mode (no state:
// its slot holds NaN, which a read would show).
// KVBuffer: after the verify, the state slot of every row that did not fold must be bitwise
// unchanged (S0 is read only), the S0 of a row that folded must equal the reference state and the
// window's x must lie bitwise where sim/layout.h's verify_window_in_buffer puts it for the
// kernel's VerifyWindow (mamba2_verify_kvbuffer_window); after
// the commit, fill and has_state must follow gdn_verify.h's protocol, and the state each row has
// accepted so far, recomputed in float64 from the pools (e^{G_{n-1}} S0 + sum_j e^{G_{n-1}-G_j}
// dt_j x_j B_j^T), must equal the reference state: this checks the state after every fold (n = 0)
// and the buffer entries.
// Classic (in place): each request owns T + 1 slots; per round the T free ones, in a random order,
// receive the nodes' states (poisoned before); every node's state must equal the reference along
// its root path, every other slot must be bitwise unchanged, and the committed state after the
// commit by index must equal the reference.
//
// Tolerances, elementwise, from the precisions (reference/mamba2.h, mamba2_f32_gamma; the same
// derivation as the decode checks, kernels/mamba2/tests/test_mamba2_decode_cases.h):
//   fp32 arithmetic: |err| <= gamma (the same element computed in float64 on |x|, |B|, |C|, |D|,
//     |S0|), gamma = 2 u (N + L + W + E + 8), u = 2^-24, over the request's accepted tokens and
//     the node's path, W = C + T (1 for classic).
//   output: the bf16 store rounds by at most 2^-8 of the computed value:
//     |out - ref| <= 2^-8 |ref| + (1 + 2^-8) |silu(z)| gamma y_abs.
//   state: fp32 throughout, entries hold the bf16 inputs exactly: |S - S_ref| <= gamma S_abs.
// 16-bit states (VerifyCase::state bf16 or fp16; kernels/mamba2/checks/mamba2_decode_checks.cu
// derives the same bounds for the decode kernels): the initial pool is drawn, rounded to the type
// and uploaded in it, read back in its bytes (the "unchanged" checks compare those) and compared as
// float64. The reference rounds where the kernel writes (reference/state_rounding.h):
//   KVBuffer: S0 at every fold, at the kernel's fold points (the verify's fold first, the commit's
//     fold of a full buffer): the request's float64 state is rounded there, and the window's outputs
//     and every later state go on from the rounded S0 as the kernel's do.
//   classic: ref::mamba2_verify_classic_tree with the StateStore: each node's written state rounded
//     once, a chain going on from the unrounded state, a node whose parent is not the previous node
//     starting from its parent's rounded state, the commit by index keeping the rounded state.
// Everything else is fp32 arithmetic as above, so what remains is that error crossing a rounding
// boundary. The type keeps p significant bits (bf16 8, fp16 11), u_t = 2^-p; one ulp of a normal x
// is <= 2 u_t |x|; below fp16's normal range (2^-14) an ulp is 2^-24 (floor_t; bf16's 2^-133 never
// matters).
//   state: the kernel's fp32 value and the reference's may straddle a rounding boundary and round
//     one ulp apart (<= 2 u_t |S_ref| + floor_t); such a difference carried from an earlier write
//     (an earlier fold, node or round) is scaled by the decay since, so bounded by
//     2 u_t S_abs + floor_t. With the fp32 error of the values before rounding:
//     |S - S_ref| <= gamma S_abs + 2 u_t (|S_ref| + S_abs) + 2 floor_t (one ulp here, one carried).
//   output: computed from a state whose elements differ by at most <= 4 u_t S_abs + 2 floor_t,
//     scaled by the decay and dotted with C_t: at most 4 u_t y_abs + 2 floor_t sum |C_t|, added to
//     the fp32 term: |out - ref| <= 2^-8 |ref| + (1 + 2^-8) |silu(z)| ((gamma + 4 u_t) y_abs +
//     2 floor_t sum |C_t|).
//   (u_t = floor_t = 0 for fp32: the bounds above, unchanged.)
// NaN never passes (comparisons are written as !(err <= tol)).
#include "kernels/mamba2/checks/mamba2_verify_checks.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>

#include "kernels/common/cuda_check.h"
#include "kernels/common/device_buffer.h"
#include "kernels/mamba2/mamba2_verify.h"
#include "reference/mamba2.h"
#include "reference/state_rounding.h"

namespace kvbuf::mamba2_verify_check {

std::string qualified_name(const VerifyCase& c) {
  return (c.method == VerifyMethod::KVBuffer ? "mamba2-kvbuffer/" : "mamba2-classic/") + c.name;
}

std::string describe(const VerifyCase& c) {
  std::ostringstream s;
  s << qualified_name(c) << ": G=" << c.G << " NH=" << c.NH << " P=" << c.P << " N=" << c.N;
  if (c.method == VerifyMethod::KVBuffer)
    s << " C=" << c.C << " heads_per_block=" << c.heads_per_block << " row_order=" << c.row_order
      << " pools_ready_at_launch=" << c.pools_ready_at_launch;
  if (c.method == VerifyMethod::Classic) s << " rows_per_warp=" << c.rows_per_warp;
  s << " T=" << c.T << " " << (c.tree ? "tree" : "chain") << " batch=" << c.batch << " pad_rows=" << c.pad_rows
    << " z=" << (c.z_gate ? "on" : "off") << " dt=" << checks::dt_regime_name(c.dt) << " rounds=" << c.rounds;
  if (c.state != StateType::FP32) s << " state=" << state_type_name(c.state);
  return s.str();
}

void PrintTo(const VerifyCase& c, std::ostream* os) { *os << describe(c); }

std::string VerifyResult::line(const std::string& name) const {
  std::ostringstream s;
  s.precision(3);
  s << "worst out err / tol " << max_out_ratio << " (" << outputs_checked << " node outputs), worst state err / tol "
    << max_state_ratio << " (" << states_checked << " states";
  if (verify_folds + commit_folds > 0) s << ", " << verify_folds << " verify folds + " << commit_folds << " commit folds";
  s << ")";
  return checks::result_line(passed, name, s.str(), message);
}

namespace {

using ref::Mamba2Dims;
using ref::Mamba2State;
using ref::Mamba2Tokens;

uint16_t bf16_bits(double x) { return ref::float_to_bf16_bits(float(x)); }
double bf16_value(uint16_t b) { return ref::bf16_bits_to_float(b); }
double softplus(double x) { return x > 30 ? x : std::log1p(std::exp(x)); }

// The pool as values (rounded to the type first, NaN kept) in its bytes, and its bytes as float64.
std::vector<unsigned char> encode_pool(StateType t, std::vector<float>& pool) {
  const size_t sb = size_t(state_type_bytes(t));
  std::vector<unsigned char> bytes(pool.size() * sb);
  for (size_t i = 0; i < pool.size(); ++i) {
    if (t != StateType::FP32 && !std::isnan(pool[i])) pool[i] = float(ref::round_to_state(pool[i], t));
    checks::encode_state(t, pool[i], bytes.data() + i * sb);
  }
  return bytes;
}
std::vector<double> decode_pool(StateType t, const std::vector<unsigned char>& bytes) {
  const size_t sb = size_t(state_type_bytes(t));
  std::vector<double> v(bytes.size() / sb);
  for (size_t i = 0; i < v.size(); ++i) v[i] = checks::decode_state(t, bytes.data() + i * sb);
  return v;
}
double silu(double z) { return z / (1 + std::exp(-z)); }

// One layer's A, D and dt_bias per head.
struct Layer {
  std::vector<float> A, D, dt_bias;
};
Layer draw_layer(const VerifyCase& c, std::mt19937_64& rng) {
  const bool steep = c.dt == DtRegime::Large;
  std::uniform_real_distribution<float> a(steep ? -16.f : -4.f, steep ? -6.f : -0.5f), d(0.5f, 1.5f), b(-3.f, 0.f);
  Layer l;
  for (int h = 0; h < c.NH; ++h) l.A.push_back(a(rng)), l.D.push_back(d(rng)), l.dt_bias.push_back(b(rng));
  return l;
}

// One row's window: the reference tokens (dt after the kernel's fp32 sum and a float64 softplus),
// z values and parents (0-based, -1 = the committed state).
struct Window {
  Mamba2Tokens<double> tok;
  std::vector<double> z;
  std::vector<int> par0;
};

// The token inputs of all rows of one round, host side, in the kernels' layouts.
struct RoundInputs {
  std::vector<uint16_t> x, B, C, z, dt;
  std::vector<int32_t> parents;
};

Window draw_window(const VerifyCase& c, const Layer& layer, std::mt19937_64& rng, RoundInputs& in) {
  const int T = c.T;
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  Window w;
  Mamba2Tokens<double>& t = w.tok;
  t.dims = Mamba2Dims{c.G, c.NH, c.N, c.P};
  t.steps = T;
  t.A.assign(layer.A.begin(), layer.A.end());
  t.D.assign(layer.D.begin(), layer.D.end());
  auto draw = [&](size_t count, std::vector<uint16_t>& bits, std::vector<double>& vals) {
    for (size_t i = 0; i < count; ++i) {
      bits.push_back(bf16_bits(normal(rng)));
      vals.push_back(bf16_value(bits.back()));
    }
  };
  draw(size_t(T) * c.NH * c.P, in.x, t.x);
  draw(size_t(T) * c.G * c.N, in.B, t.B);
  draw(size_t(T) * c.G * c.N, in.C, t.C);
  draw(size_t(T) * c.NH * c.P, in.z, w.z);
  for (int i = 0; i < T * c.NH; ++i) {
    const int h = i % c.NH;
    double raw = 0;
    switch (c.dt) {
      case DtRegime::Typical: raw = 2.0 * normal(rng); break;
      case DtRegime::NearZero: raw = -16.0 + u01(rng) - layer.dt_bias[h]; break;
      case DtRegime::Large: raw = 10.5 + 4.0 * u01(rng) - layer.dt_bias[h]; break;
      case DtRegime::Given: raw = 0.01 + 0.49 * u01(rng); break;
    }
    in.dt.push_back(bf16_bits(raw));
    const bool given = c.dt == DtRegime::Given;
    const float sum = float(bf16_value(in.dt.back())) + (given ? 0.f : layer.dt_bias[h]);
    t.dt.push_back(given ? double(sum) : softplus(double(sum)));
  }
  for (int i = 1; i <= T; ++i) {
    int par = i - 1;
    if (c.tree) par = int(std::uniform_int_distribution<int>(0, i - 1)(rng));
    if (c.tree && i == T && T > 1 && rng() % 4 == 0) par = T - 1;  // some deep chains in trees too
    in.parents.push_back(par);
    w.par0.push_back(par - 1);
  }
  return w;
}

// Tokens `nodes` of a window, in that order; and a token sequence appended to another.
Mamba2Tokens<double> select_tokens(const Mamba2Tokens<double>& w, const std::vector<int>& nodes) {
  const Mamba2Dims& d = w.dims;
  Mamba2Tokens<double> r;
  r.dims = d, r.A = w.A, r.D = w.D, r.steps = int(nodes.size());
  auto take = [](std::vector<double>& dst, const std::vector<double>& src, int t, size_t per) {
    dst.insert(dst.end(), src.begin() + size_t(t) * per, src.begin() + size_t(t + 1) * per);
  };
  for (int t : nodes) {
    take(r.x, w.x, t, size_t(d.NH) * d.P);
    take(r.B, w.B, t, size_t(d.G) * d.N);
    take(r.C, w.C, t, size_t(d.G) * d.N);
    take(r.dt, w.dt, t, size_t(d.NH));
  }
  return r;
}
void append_tokens(Mamba2Tokens<double>& dst, const Mamba2Tokens<double>& src) {
  if (dst.steps == 0) {
    dst = src;
    return;
  }
  dst.steps += src.steps;
  auto cat = [](std::vector<double>& a, const std::vector<double>& b) { a.insert(a.end(), b.begin(), b.end()); };
  cat(dst.x, src.x), cat(dst.B, src.B), cat(dst.C, src.C), cat(dst.dt, src.dt);
}
Mamba2Tokens<double> abs_tokens(Mamba2Tokens<double> t) {
  for (auto* v : {&t.x, &t.B, &t.C, &t.D})
    for (auto& e : *v) e = std::abs(e);
  return t;
}

// One request: its committed reference state, the |.| twin for the tolerance, and every token it
// has accepted (for gamma).
struct Request {
  Mamba2State<double> ref, abs;
  Mamba2Tokens<double> history;
  int slot = -1;
  bool has_state = true;  // KVBuffer
  int fill = 0;           // KVBuffer
  std::vector<int> owned;  // classic: the T + 1 slots
};

class Checker {
 public:
  Checker(const VerifyCase& c, VerifyResult& res)
      : c_(c), res_(res), u_t_(checks::state_unit(c.state)), floor_t_(checks::state_floor(c.state)) {}

  void fail(const std::string& m) {
    if (res_.passed) res_.message = m;
    res_.passed = false;
  }
  // The outputs of node t of a request (out_row: the row's [T, NH, P] bf16) against the recurrence
  // along its root path; returns the path's state and |.| state and the gamma used. y_node and
  // s_node (16-bit classic: the reference's node outputs [NH, P] and written state) replace the
  // path's where the kernel's rounding makes them differ.
  void node(const Request& q, const Window& w, int t, const uint16_t* out_row, int window, Mamba2State<double>& s,
            Mamba2State<double>& s_abs, double& gamma, const std::string& where, const double* y_node = nullptr,
            const Mamba2State<double>* s_node = nullptr) {
    const auto tok = select_tokens(w.tok, checks::root_path(w.par0, t));
    s = q.ref, s_abs = q.abs;
    std::vector<double> y, y_abs;
    ref::mamba2_decode_recurrent<double>(tok, s, y);
    ref::mamba2_decode_recurrent<double>(abs_tokens(tok), s_abs, y_abs);
    Mamba2Tokens<double> seq = q.history;
    append_tokens(seq, tok);
    gamma = ref::mamba2_f32_gamma(seq, window);
    if (s_node) s = *s_node;
    const size_t per = size_t(c_.NH) * c_.P, last = size_t(tok.steps - 1) * per;
    double worst = 0;
    for (size_t i = 0; i < per; ++i) {
      const double gate = c_.z_gate ? silu(w.z[size_t(t) * per + i]) : 1.0;
      const double ref_o = (y_node ? y_node[i] : y[last + i]) * gate;
      const double err = std::abs(bf16_value(out_row[size_t(t) * per + i]) - ref_o);
      double tol = std::ldexp(std::abs(ref_o), -8) + (1 + std::ldexp(1.0, -8)) * std::abs(gate) * gamma * y_abs[last + i];
      if (u_t_ > 0) {  // a 16-bit state (header comment)
        const int g = int(i / c_.P) / (c_.NH / c_.G);
        double c_abs = 0;
        for (int n = 0; n < c_.N; ++n) c_abs += std::abs(w.tok.C[(size_t(t) * c_.G + g) * c_.N + n]);
        tol += (1 + std::ldexp(1.0, -8)) * std::abs(gate) * (4 * u_t_ * y_abs[last + i] + 2 * floor_t_ * c_abs);
      }
      worst = std::max(worst, std::isnan(err) ? INFINITY : err / std::max(tol, kTiny));
      if (!(err <= tol)) {
        fail("output of node " + std::to_string(t + 1) + " " + where + ", element " + std::to_string(i) + ": " +
             std::to_string(bf16_value(out_row[size_t(t) * per + i])) + " against " + std::to_string(ref_o) +
             " (tol " + std::to_string(tol) + ")");
        break;
      }
    }
    res_.max_out_ratio = std::max(res_.max_out_ratio, worst);
    ++res_.outputs_checked;
  }
  // A state [NH, P, N] (fp32 from the pool, or float64 recomputed) against its reference.
  template <class F>
  void state(const F* S, const Mamba2State<double>& ref_s, const Mamba2State<double>& abs_s, double gamma,
             const std::string& what) {
    double worst = 0;
    for (int h = 0; h < c_.NH; ++h)
      for (int p = 0; p < c_.P; ++p)
        for (int n = 0; n < c_.N; ++n) {
          const double err = std::abs(double(S[(size_t(h) * c_.P + p) * c_.N + n]) - ref_s[h](p, n));
          double tol = gamma * abs_s[h](p, n);
          if (u_t_ > 0) tol += 2 * u_t_ * (std::abs(ref_s[h](p, n)) + abs_s[h](p, n)) + 2 * floor_t_;
          worst = std::max(worst, std::isnan(err) ? INFINITY : err / std::max(tol, kTiny));
        }
    res_.max_state_ratio = std::max(res_.max_state_ratio, worst);
    ++res_.states_checked;
    if (!(worst <= 1)) fail(what + ": worst err / tol " + std::to_string(worst));
  }
  // The outputs of padding row `row` (out: all rows' [T, NH, P]) must be exactly zero.
  void padding(const std::vector<uint16_t>& out, int row, int round) {
    const size_t per = size_t(c_.T) * c_.NH * c_.P;
    for (size_t i = 0; i < per; ++i)
      if (out[size_t(row) * per + i] != 0) {
        fail("padding row " + std::to_string(row) + " output not zero in round " + std::to_string(round));
        return;
      }
  }

 private:
  static constexpr double kTiny = std::numeric_limits<double>::min();
  const VerifyCase& c_;
  VerifyResult& res_;
  const double u_t_, floor_t_;  // the header comment's, 0 for fp32
};

// What a request accepts: the root path of a random node (trees) or a prefix of random length
// (chains); one time in 8 nothing.
std::vector<int> draw_accepted_path(const VerifyCase& c, const Window& w, std::mt19937_64& rng) {
  std::vector<int> path;
  if (rng() % 8 == 0) return path;
  if (c.tree) return checks::root_path(w.par0, int(rng() % c.T));
  for (int i = 0, m = int(rng() % c.T) + 1; i < m; ++i) path.push_back(i);
  return path;
}

// Advances the request's reference along the accepted path.
void accept_path(Request& q, const Window& w, const std::vector<int>& path) {
  if (path.empty()) return;
  const auto tok = select_tokens(w.tok, path);
  std::vector<double> y;
  ref::mamba2_decode_recurrent<double>(tok, q.ref, y);
  ref::mamba2_decode_recurrent<double>(abs_tokens(tok), q.abs, y);
  append_tokens(q.history, tok);
}

// The device buffers of Mamba2VerifyIO for `rows` rows of T tokens.
struct RowBuffers {
  DeviceBuffer slot, x, B, C, dt, z, parents, out, A, D, dt_bias;
  RowBuffers(const VerifyCase& c, int rows)
      : slot(size_t(rows) * 4),
        x(size_t(rows) * c.T * c.NH * c.P * 2),
        B(size_t(rows) * c.T * c.G * c.N * 2),
        C(size_t(rows) * c.T * c.G * c.N * 2),
        dt(size_t(rows) * c.T * c.NH * 2),
        z(size_t(rows) * c.T * c.NH * c.P * 2),
        parents(size_t(rows) * c.T * 4),
        out(size_t(rows) * c.T * c.NH * c.P * 2),
        A(c.NH * 4),
        D(c.NH * 4),
        dt_bias(c.NH * 4) {}
  Mamba2VerifyIO io(const VerifyCase& c, int rows) const {
    Mamba2VerifyIO io;
    io.batch = rows, io.tokens = c.T, io.G = c.G, io.NH = c.NH, io.P = c.P, io.N = c.N;
    io.slot = slot.as<int32_t>();
    io.x = x.as<__nv_bfloat16>(), io.B = B.as<__nv_bfloat16>(), io.C = C.as<__nv_bfloat16>();
    io.dt = dt.as<__nv_bfloat16>();
    io.dt_softplus = c.dt != DtRegime::Given;
    io.dt_bias = c.dt == DtRegime::Given ? nullptr : dt_bias.as<float>();
    io.A = A.as<float>(), io.D = D.as<float>();
    io.z = c.z_gate ? z.as<__nv_bfloat16>() : nullptr;
    io.parents = c.tree ? parents.as<int32_t>() : nullptr;
    io.out = out.as<__nv_bfloat16>();
    return io;
  }
};

// Padding rows at random positions: row_req[row] = the request in that row, or -1.
std::vector<int> place_rows(const VerifyCase& c, std::mt19937_64& rng) {
  std::vector<int> row_req(c.batch + c.pad_rows);
  for (int i = 0; i < int(row_req.size()); ++i) row_req[i] = i < c.batch ? i : -1;
  std::shuffle(row_req.begin(), row_req.end(), rng);
  return row_req;
}

// One round's windows for every row (padding rows get random inputs too: they must be ignored).
std::vector<Window> draw_round(const VerifyCase& c, const Layer& layer, std::mt19937_64& rng, RowBuffers& rb, int rows) {
  RoundInputs in;
  std::vector<Window> w;
  for (int r = 0; r < rows; ++r) w.push_back(draw_window(c, layer, rng, in));
  rb.x.upload(in.x), rb.B.upload(in.B), rb.C.upload(in.C), rb.z.upload(in.z), rb.dt.upload(in.dt);
  rb.parents.upload(in.parents);
  rb.out.poison();
  return w;
}

Mamba2State<double> random_state(const VerifyCase& c, const float* S) {
  Mamba2State<double> s = ref::mamba2_zero_state<double>(Mamba2Dims{c.G, c.NH, c.N, c.P});
  for (int h = 0; h < c.NH; ++h)
    for (int p = 0; p < c.P; ++p)
      for (int n = 0; n < c.N; ++n) s[h](p, n) = S[(size_t(h) * c.P + p) * c.N + n];
  return s;
}
Mamba2State<double> abs_state(const Mamba2State<double>& s) {
  Mamba2State<double> a;
  for (const auto& m : s) a.push_back(m.cwiseAbs());
  return a;
}

int default_rounds(const VerifyCase& c) {
  if (c.rounds > 0) return c.rounds;
  if (c.method == VerifyMethod::Classic) return 12;
  const double per_round = 0.875 * (c.tree ? 0.75 : 1.0) * (c.T + 1) / 2.0;  // mean accepted tokens
  return std::min(240, int(std::ceil(3 * c.C / per_round)) + 2);
}

VerifyResult run_kvbuffer_case(const VerifyCase& c, uint64_t seed) {
  VerifyResult res;
  Checker check(c, res);
  std::mt19937_64 rng(seed);
  const Layer layer = draw_layer(c, rng);
  const int rows = c.batch + c.pad_rows, slots = c.batch + 2, T = c.T, C = c.C;
  const size_t slot_elems = size_t(c.NH) * c.P * c.N;
  const std::vector<int> row_req = place_rows(c, rng);
  std::vector<int> slot_perm(slots);
  for (int i = 0; i < slots; ++i) slot_perm[i] = i;
  std::shuffle(slot_perm.begin(), slot_perm.end(), rng);

  // State pool N(0, 1) (rounded to the state type); direct-mode requests (every other one) start
  // with no state: NaN.
  std::vector<float> pool(size_t(slots) * slot_elems);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (auto& x : pool) x = nd(rng);
  const size_t sbytes = size_t(state_type_bytes(c.state));
  const ref::StateStore store = checks::state_store(c.state);
  if (store) encode_pool(c.state, pool);
  std::vector<Request> req(c.batch);
  std::vector<int32_t> h_fill(slots, 0), h_has(slots, 1);
  for (int r = 0; r < c.batch; ++r) {
    Request& q = req[r];
    q.slot = slot_perm[r];
    q.has_state = r % 2 == 0;
    float* S = pool.data() + size_t(q.slot) * slot_elems;
    if (!q.has_state) std::fill_n(S, slot_elems, std::numeric_limits<float>::quiet_NaN());
    q.ref = q.has_state ? random_state(c, S) : ref::mamba2_zero_state<double>(Mamba2Dims{c.G, c.NH, c.N, c.P});
    q.abs = abs_state(q.ref);
    h_has[q.slot] = q.has_state;
  }
  DeviceBuffer state(pool.size() * sbytes), buf_k(size_t(slots) * C * c.G * c.N * 2), buf_x(size_t(slots) * C * c.NH * c.P * 2),
      buf_g(size_t(slots) * C * c.NH * 4), buf_dt(size_t(slots) * C * c.NH * 4), fill(slots * 4), has_state(slots * 4);
  DeviceBuffer win_k(size_t(rows) * T * c.G * c.N * 2), win_u(size_t(rows) * T * c.NH * c.P * 2),
      win_g(size_t(rows) * T * c.NH * 4), win_dt(size_t(rows) * T * c.NH * 4), win_base(size_t(rows) * 8);
  DeviceBuffer accept_len(size_t(rows) * 4), accept_nodes(size_t(rows) * T * 4), row_order(size_t(rows) * 4);
  state.upload(encode_pool(c.state, pool));
  fill.upload(h_fill), has_state.upload(h_has);
  for (DeviceBuffer* b : {&buf_k, &buf_x, &buf_g, &buf_dt}) b->poison();
  RowBuffers rb(c, rows);
  rb.A.upload(layer.A), rb.D.upload(layer.D), rb.dt_bias.upload(layer.dt_bias);
  std::vector<int32_t> h_slot(rows);
  for (int row = 0; row < rows; ++row) h_slot[row] = row_req[row] < 0 ? -1 : req[row_req[row]].slot;
  rb.slot.upload(h_slot);

  Mamba2VerifyKVBufferParams p;
  p.io = rb.io(c, rows);
  p.capacity = C;
  p.heads_per_block = c.heads_per_block;
  p.pools_ready_at_launch = c.pools_ready_at_launch;
  p.state = state.as<unsigned char>(), p.state_type = c.state;
  p.buf_k = buf_k.as<__nv_bfloat16>(), p.buf_val = buf_x.as<__nv_bfloat16>();
  p.buf_gcum = buf_g.as<float>(), p.buf_beta = buf_dt.as<float>();
  p.fill = fill.as<int32_t>(), p.has_state = has_state.as<int32_t>();
  p.win_k = win_k.as<__nv_bfloat16>(), p.win_u = win_u.as<__nv_bfloat16>();
  p.win_gcum = win_g.as<float>(), p.win_beta = win_dt.as<float>(), p.win_base = win_base.as<int32_t>();
  p.accept = VerifyAccept{accept_len.as<int32_t>(), c.tree ? accept_nodes.as<int32_t>() : nullptr};

  const int window = C + T;
  const int rounds = default_rounds(c);
  const VerifyWindow placement = mamba2_verify_kvbuffer_window(p);
  int windows_in_buffer = 0;
  for (int round = 0; round < rounds && res.passed; ++round) {
    const std::vector<Window> w = draw_round(c, layer, rng, rb, rows);
    for (DeviceBuffer* b : {&win_k, &win_u, &win_g, &win_dt, &win_base}) b->poison();
    const std::vector<unsigned char> before = state.download<unsigned char>();
    const std::string at = "in round " + std::to_string(round);
    // The protocol's fold decision per row (sim/layout.h).
    std::vector<bool> folds(rows, false);
    for (int row = 0; row < rows; ++row) {
      if (row_req[row] < 0) continue;
      folds[row] = verify_folds_first(C, checks::window_depth(w[row].par0, T), req[row_req[row]].fill);
    }
    if (c.row_order) {  // the folding rows in row order, then the others
      row_order.poison();
      mamba2_verify_kvbuffer_order(p, row_order.as<int32_t>(), 0);
      KVB_CUDA_CHECK(cudaDeviceSynchronize());
      std::vector<int32_t> expected;
      for (bool fold_part : {true, false})
        for (int row = 0; row < rows; ++row)
          if (folds[row] == fold_part) expected.push_back(row);
      if (row_order.download<int32_t>() != expected) check.fail("mamba2_verify_kvbuffer_order's row order " + at);
      p.row_order = row_order.as<int32_t>();
    }
    mamba2_verify_kvbuffer(p, 0);
    KVB_CUDA_CHECK(cudaDeviceSynchronize());
    const auto out = rb.out.download<uint16_t>();
    const auto S_bytes = state.download<unsigned char>();
    const std::vector<double> S = decode_pool(c.state, S_bytes);
    const auto x_in = rb.x.download<uint16_t>(), x_buf = buf_x.download<uint16_t>(), x_win = win_u.download<uint16_t>();
    for (int row = 0; row < rows; ++row) {
      if (row_req[row] < 0) {
        check.padding(out, row, round);
        continue;
      }
      Request& q = req[row_req[row]];
      // The window's x, bitwise where the protocol puts it: the buffer at fill + t, or the scratch.
      const bool in_buffer = verify_window_in_buffer(placement, C, T, checks::window_depth(w[row].par0, T), q.fill);
      windows_in_buffer += in_buffer;
      const size_t per = size_t(c.NH) * c.P;
      const uint16_t* x_at = in_buffer ? x_buf.data() + (size_t(q.slot) * C + q.fill) * per : x_win.data() + size_t(row) * T * per;
      if (!std::equal(x_at, x_at + T * per, x_in.data() + size_t(row) * T * per))
        check.fail("the window's x of request " + std::to_string(row_req[row]) + " not in the " +
                   (in_buffer ? "buffer" : "scratch") + " " + at);
      const bool folded = folds[row];
      const size_t off = size_t(q.slot) * slot_elems;
      if (folded) {
        ++res.verify_folds;
        q.fill = 0, q.has_state = true;
        ref::round_state(q.ref, store);  // the fold writes S0 in the state type
        check.state(S.data() + off, q.ref, q.abs, ref::mamba2_f32_gamma(q.history, window),
                    "S0 after the verify's fold of request " + std::to_string(row_req[row]) + " " + at);
      } else if (std::memcmp(S_bytes.data() + off * sbytes, before.data() + off * sbytes, slot_elems * sbytes) != 0) {
        check.fail("state of request " + std::to_string(row_req[row]) + " changed by a verify without a fold " + at);
      }
      const uint16_t* out_row = out.data() + size_t(row) * T * c.NH * c.P;
      for (int t = 0; t < T; ++t) {
        Mamba2State<double> s, s_abs;
        double gamma = 0;
        check.node(q, w[row], t, out_row, window, s, s_abs, gamma, "of request " + std::to_string(row_req[row]) + " " + at);
      }
    }
    // Accept and commit.
    std::vector<int32_t> h_len(rows, 0), h_nodes(size_t(rows) * T, 0);
    for (int row = 0; row < rows; ++row) {
      if (row_req[row] < 0) continue;
      Request& q = req[row_req[row]];
      const std::vector<int> path = draw_accepted_path(c, w[row], rng);
      h_len[row] = int(path.size());
      for (size_t i = 0; i < path.size(); ++i) h_nodes[size_t(row) * T + i] = path[i] + 1;
      accept_path(q, w[row], path);
      q.fill += int(path.size());
      if (q.fill == C) q.fill = 0, q.has_state = true, ++res.commit_folds, ref::round_state(q.ref, store);
    }
    accept_len.upload(h_len), accept_nodes.upload(h_nodes);
    mamba2_verify_kvbuffer_commit(p, 0);
    KVB_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<double> S2 = decode_pool(c.state, state.download<unsigned char>());
    const auto d_fill = fill.download<int32_t>(), d_has = has_state.download<int32_t>();
    const auto bk = buf_k.download<uint16_t>(), bx = buf_x.download<uint16_t>();
    const auto bg = buf_g.download<float>(), bdt = buf_dt.download<float>();
    for (int r = 0; r < c.batch; ++r) {
      const Request& q = req[r];
      if (d_fill[q.slot] != q.fill || d_has[q.slot] != int(q.has_state)) {
        check.fail("fill/has_state of request " + std::to_string(r) + " after round " + std::to_string(round) + ": " +
                   std::to_string(d_fill[q.slot]) + "/" + std::to_string(d_has[q.slot]) + ", expected " +
                   std::to_string(q.fill) + "/" + std::to_string(q.has_state));
        return res;
      }
      // The accepted state from the pools: e^{G_{n-1}} S0 + sum_j e^{G_{n-1}-G_j} dt_j x_j B_j^T.
      const int n = q.fill, s = q.slot;
      std::vector<double> acc(slot_elems);
      for (int h = 0; h < c.NH; ++h) {
        const int g = h / (c.NH / c.G);
        const double gn = n > 0 ? bg[(size_t(s) * C + n - 1) * c.NH + h] : 0.0;
        for (int pp = 0; pp < c.P; ++pp)
          for (int nn = 0; nn < c.N; ++nn) {
            const size_t e = (size_t(h) * c.P + pp) * c.N + nn;
            double x = q.has_state ? std::exp(gn) * S2[size_t(s) * slot_elems + e] : 0.0;
            for (int j = 0; j < n; ++j) {
              const size_t ej = size_t(s) * C + j;
              x += std::exp(gn - bg[ej * c.NH + h]) * bdt[ej * c.NH + h] *
                   bf16_value(bx[(ej * c.NH + h) * c.P + pp]) * bf16_value(bk[(ej * c.G + g) * c.N + nn]);
            }
            acc[e] = x;
          }
      }
      // No token accepted yet: the state is the initial one, exactly.
      check.state(acc.data(), q.ref, q.abs, q.history.steps ? ref::mamba2_f32_gamma(q.history, window) : 0.0,
                  "accepted state of request " + std::to_string(r) + " after round " + std::to_string(round));
    }
  }
  if (res.passed && res.verify_folds + res.commit_folds < c.batch)
    check.fail("only " + std::to_string(res.verify_folds + res.commit_folds) + " folds for " + std::to_string(c.batch) +
               " requests: run more rounds");
  // Under a buffer kernel every chain case with T < C starts from empty buffers, which take the buffer path.
  if (res.passed && placement == VerifyWindow::Buffer && !c.tree && T < C && windows_in_buffer == 0)
    check.fail("no chain window was written into the buffer");
  return res;
}

VerifyResult run_classic_case(const VerifyCase& c, uint64_t seed) {
  VerifyResult res;
  Checker check(c, res);
  std::mt19937_64 rng(seed);
  const Layer layer = draw_layer(c, rng);
  const int rows = c.batch + c.pad_rows, T = c.T;
  const int pool_slots = c.batch * (T + 1) + 3;  // 3 slots no request owns
  const size_t slot_elems = size_t(c.NH) * c.P * c.N;
  const std::vector<int> row_req = place_rows(c, rng);
  std::vector<int> perm(pool_slots);
  for (int i = 0; i < pool_slots; ++i) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<float> pool(size_t(pool_slots) * slot_elems);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (auto& x : pool) x = nd(rng);
  const size_t sbytes = size_t(state_type_bytes(c.state));
  const ref::StateStore store = checks::state_store(c.state);
  const std::vector<unsigned char> pool_bytes = encode_pool(c.state, pool);  // pool rounded to the type
  std::vector<Request> req(c.batch);
  for (int r = 0; r < c.batch; ++r) {
    Request& q = req[r];
    q.owned.assign(perm.begin() + r * (T + 1), perm.begin() + (r + 1) * (T + 1));
    q.slot = q.owned[0];
    q.ref = random_state(c, pool.data() + size_t(q.slot) * slot_elems);
    q.abs = abs_state(q.ref);
  }
  DeviceBuffer state(pool.size() * sbytes), step_slot(size_t(rows) * T * 4);
  state.upload(pool_bytes);
  RowBuffers rb(c, rows);
  rb.A.upload(layer.A), rb.D.upload(layer.D), rb.dt_bias.upload(layer.dt_bias);
  Mamba2VerifyClassicParams p;
  p.io = rb.io(c, rows);
  p.state = state.as<unsigned char>(), p.state_type = c.state;
  p.step_slot = step_slot.as<int32_t>();
  p.rows_per_warp = c.rows_per_warp;

  const int rounds = default_rounds(c);
  for (int round = 0; round < rounds && res.passed; ++round) {
    const std::vector<Window> w = draw_round(c, layer, rng, rb, rows);
    std::vector<int32_t> h_slot(rows, -1), h_step(size_t(rows) * T, -1);
    std::vector<bool> is_step(pool_slots, false);
    for (int row = 0; row < rows; ++row) {
      if (row_req[row] < 0) continue;
      const Request& q = req[row_req[row]];
      h_slot[row] = q.slot;
      std::vector<int> free_slots;
      for (int x : q.owned)
        if (x != q.slot) free_slots.push_back(x);
      std::shuffle(free_slots.begin(), free_slots.end(), rng);
      for (int t = 0; t < T; ++t) h_step[size_t(row) * T + t] = free_slots[t], is_step[free_slots[t]] = true;
    }
    rb.slot.upload(h_slot);
    step_slot.upload(h_step);
    for (int x = 0; x < pool_slots; ++x)
      if (is_step[x])
        KVB_CUDA_CHECK(cudaMemset(state.as<unsigned char>() + size_t(x) * slot_elems * sbytes, 0xff, slot_elems * sbytes));
    const auto before = state.download<unsigned char>();
    mamba2_verify_classic(p, 0);
    KVB_CUDA_CHECK(cudaDeviceSynchronize());
    const auto out = rb.out.download<uint16_t>();
    const auto S_bytes = state.download<unsigned char>();
    const std::vector<double> S = decode_pool(c.state, S_bytes);
    const std::string at = "in round " + std::to_string(round);
    const size_t slot_bytes = slot_elems * sbytes;
    for (int x = 0; x < pool_slots; ++x)
      if (!is_step[x] && std::memcmp(S_bytes.data() + x * slot_bytes, before.data() + x * slot_bytes, slot_bytes) != 0)
        check.fail("slot " + std::to_string(x) + " (no node's) changed by the verify " + at);
    for (int row = 0; row < rows; ++row) {
      if (row_req[row] < 0) {
        check.padding(out, row, round);
        continue;
      }
      Request& q = req[row_req[row]];
      const std::string who = "request " + std::to_string(row_req[row]) + " " + at;
      const uint16_t* out_row = out.data() + size_t(row) * T * c.NH * c.P;
      // A 16-bit state: the nodes as the kernel rounds them (ref::mamba2_verify_classic_tree).
      std::vector<double> y_tree;
      std::vector<Mamba2State<double>> s_tree;
      if (store) {
        Mamba2State<double> from = q.ref;
        ref::mamba2_verify_classic_tree<double>(w[row].tok, w[row].par0, -1, from, y_tree, s_tree, store);
      }
      for (int t = 0; t < T; ++t) {
        Mamba2State<double> s, s_abs;
        double gamma = 0;
        check.node(q, w[row], t, out_row, 1, s, s_abs, gamma, "of " + who,
                   store ? y_tree.data() + size_t(t) * c.NH * c.P : nullptr, store ? &s_tree[size_t(t)] : nullptr);
        check.state(S.data() + size_t(h_step[size_t(row) * T + t]) * slot_elems, s, s_abs, gamma,
                    "state of node " + std::to_string(t + 1) + " of " + who);
      }
      // Commit by index: the slot becomes the last accepted node's step slot.
      const std::vector<int> path = draw_accepted_path(c, w[row], rng);
      accept_path(q, w[row], path);
      if (!path.empty()) q.slot = h_step[size_t(row) * T + path.back()];
      if (store && !path.empty()) q.ref = s_tree[size_t(path.back())];  // the node's written (rounded) state
      check.state(S.data() + size_t(q.slot) * slot_elems, q.ref, q.abs,
                  q.history.steps ? ref::mamba2_f32_gamma(q.history, 1) : 0.0, "committed state of " + who);
    }
  }
  return res;
}

}  // namespace

VerifyResult run_verify_case(const VerifyCase& c, uint64_t seed) {
  return c.method == VerifyMethod::KVBuffer ? run_kvbuffer_case(c, seed) : run_classic_case(c, seed);
}

std::vector<VerifyCase> verify_cases(bool quick) {
  std::vector<VerifyCase> cs;
  auto add = [&](VerifyCase c, bool in_quick) {
    if (!quick || in_quick) cs.push_back(std::move(c));
  };
  const auto K = VerifyMethod::KVBuffer, CL = VerifyMethod::Classic;
  // KVBuffer chains: C in {1, 4, 16, 64}, every T <= min(C, 8), batch 3 with a padding row; every
  // accepted length comes up over the rounds.
  for (int C : {1, 4, 16, 64})
    for (int T = 1; T <= std::min(C, 8); ++T) {
      VerifyCase v;
      v.method = K, v.C = C, v.T = T;
      v.heads_per_block = T % 2 == 0 ? 2 : 0;  // both of the group's heads in one block, or the kernel's choice (1 here)
      v.row_order = C == 16;
      v.name = "C" + std::to_string(C) + "-T" + std::to_string(T) + "-b3" + (T % 2 == 0 ? "-h2" : "");
      add(v, (C == 16 && T == 5) || (C == 4 && T == 4));
    }
  {
    VerifyCase v;
    v.method = K;
    v.C = 16, v.T = 5, v.batch = 1, v.pad_rows = 0, v.name = "C16-T5-b1";
    add(v, false);
    v.batch = 64, v.pad_rows = 3, v.z_gate = true, v.G = 8, v.NH = 8, v.row_order = true, v.name = "G8-NH8-C16-T5-b64-z";
    add(v, true);
    // A group's 8 heads per block over 67 rows (3 padding), the pools read before the wait.
    v.G = 1, v.heads_per_block = 8, v.pools_ready_at_launch = true, v.name = "G1-NH8-C16-T5-b64-z-h8-pools-first";
    add(v, true);
    v.G = 8, v.heads_per_block = 0, v.pools_ready_at_launch = false;
    v.row_order = false;
    v.G = 1, v.NH = 4, v.batch = 3, v.pad_rows = 1, v.C = 8, v.T = 3, v.heads_per_block = 4, v.name = "G1-C8-T3-b3-z-h4";
    add(v, false);
    // Nemotron-3 Nano's heads: one per block, then a group's 8 in one block (4 uses of each stage).
    v.G = 8, v.NH = 64, v.C = 16, v.T = 4, v.heads_per_block = 1, v.name = "nemotron-nano-shape-C16-T4-b3-z";
    add(v, false);
    v.heads_per_block = 8, v.row_order = true, v.name = "nemotron-nano-shape-C16-T4-b3-z-h8";
    add(v, true);
    v.pools_ready_at_launch = true, v.name = "nemotron-nano-shape-C16-T4-b3-z-h8-pools-first";
    add(v, false);
    v.pools_ready_at_launch = false;
    v.row_order = false;
    v.C = 4, v.T = 3, v.z_gate = false, v.name = "nemotron-nano-shape-C4-T3-b3-h8";
    add(v, false);
    v.G = 2, v.NH = 4, v.P = 64, v.N = 64, v.C = 8, v.T = 5, v.heads_per_block = 2, v.name = "P64-N64-C8-T5-b3-h2";
    add(v, false);
    v.P = 128, v.N = 64, v.name = "P128-N64-C8-T5-b3-h2";
    add(v, false);
    v.P = 48, v.N = 128, v.C = 4, v.T = 3, v.name = "P48-N128-C4-T3-b3-h2";
    add(v, false);
    v.P = 64, v.heads_per_block = 0;
    for (auto [regime, tag] : {std::pair{DtRegime::NearZero, "dt-near-zero"}, std::pair{DtRegime::Large, "dt-large"},
                               std::pair{DtRegime::Given, "dt-given"}}) {
      v.dt = regime, v.C = 8, v.T = 4, v.name = std::string("C8-T4-") + tag + "-b3";
      add(v, regime == DtRegime::Large);
    }
    v.dt = DtRegime::Typical;
    v.tree = true, v.C = 16, v.T = 6, v.z_gate = true, v.heads_per_block = 2, v.row_order = true, v.name = "tree-C16-T6-b3-z-h2";
    add(v, true);
    v.pools_ready_at_launch = true, v.name = "tree-C16-T6-b3-z-h2-pools-first";
    add(v, false);
    v.pools_ready_at_launch = false;
    v.row_order = false;
    v.C = 8, v.T = 8, v.z_gate = false, v.heads_per_block = 0, v.name = "tree-C8-T8-b3";
    add(v, false);
    v.C = 64, v.T = 8, v.heads_per_block = 2, v.name = "tree-C64-T8-b3-h2";
    add(v, false);
  }
  // Classic: every T, batches 1 / 3 / 64, trees, z, dt regimes, G, head shapes; each warp shape
  // (rows per warp 2, 4, 8) forced on chains and trees (the choice depends on the GPU's SM count).
  for (int T = 1; T <= 8; ++T) {
    VerifyCase v;
    v.method = CL, v.T = T, v.name = "T" + std::to_string(T) + "-b3";
    add(v, T == 5);
  }
  for (int rows : {2, 4, 8}) {
    VerifyCase v;
    v.method = CL, v.T = 6, v.rows_per_warp = rows, v.z_gate = true, v.name = "T6-b3-z-r" + std::to_string(rows);
    add(v, false);
    v.tree = true, v.T = 7, v.z_gate = false, v.name = "tree-T7-b3-r" + std::to_string(rows);
    add(v, false);
  }
  {
    VerifyCase v;
    v.method = CL, v.T = 5;
    v.batch = 1, v.pad_rows = 0, v.name = "T5-b1";
    add(v, false);
    v.batch = 64, v.pad_rows = 3, v.z_gate = true, v.G = 8, v.NH = 8, v.rounds = 4, v.name = "G8-NH8-T5-b64-z";
    add(v, false);
    v.batch = 3, v.pad_rows = 1, v.G = 1, v.NH = 4, v.rounds = 0, v.name = "G1-T4-b3-z";
    add(v, false);
    v.G = 2, v.NH = 6, v.name = "G2-NH6-T5-b3-z";  // 3 heads per group: head_group's divisions
    add(v, false);
    v.NH = 4, v.z_gate = false, v.N = 64, v.name = "P64-N64-T4-b3";
    add(v, false);
    v.P = 128, v.name = "P128-N64-T4-b3";
    add(v, false);
    v.P = 64, v.N = 128;
    for (auto [regime, tag] : {std::pair{DtRegime::NearZero, "dt-near-zero"}, std::pair{DtRegime::Large, "dt-large"},
                               std::pair{DtRegime::Given, "dt-given"}}) {
      v.dt = regime, v.name = std::string("T4-") + tag + "-b3";
      add(v, false);
    }
    v.dt = DtRegime::Typical, v.tree = true, v.T = 8, v.z_gate = true, v.name = "tree-T8-b3-z";
    add(v, true);
    v.T = 6, v.z_gate = false, v.name = "tree-T6-b3";
    add(v, false);
  }
  // 16-bit states, 13 per type (one in quick): KVBuffer one-head (heads_per_block 1 or the choice
  // at batch 3) and head-group kernels (h2, h8: windows in the buffer), chains and trees, folds in
  // the verify (n + depth >= C) and in the commit (T == C: C1-T1, C8-T8), the early fold of the
  // pools-first path, N = 64; classic chains and trees over the three warp shapes. Every accepted
  // length and ragged fills come up over the rounds, with a padding row.
  for (StateType st : {StateType::BF16, StateType::FP16}) {
    const std::string ty = std::string("-") + state_type_name(st);
    auto kv = [&](int C, int T, int heads, bool tree, bool z, const std::string& name, bool in_quick) {
      VerifyCase v;
      v.method = K, v.state = st, v.C = C, v.T = T, v.heads_per_block = heads, v.tree = tree, v.z_gate = z;
      v.name = name + ty;
      add(v, in_quick);
      return v;
    };
    kv(1, 1, 1, false, false, "C1-T1-b3-h1", false);
    kv(4, 4, 2, false, false, "C4-T4-b3-h2", false);
    kv(8, 8, 1, false, false, "C8-T8-b3-h1", false);
    kv(8, 8, 2, false, false, "C8-T8-b3-h2", false);
    kv(16, 5, 0, false, true, "C16-T5-b3-z", false);
    kv(16, 6, 2, true, true, "tree-C16-T6-b3-z-h2", st == StateType::BF16);
    kv(8, 8, 1, true, false, "tree-C8-T8-b3-h1", false);
    {
      VerifyCase v;
      v.method = K, v.state = st, v.G = 1, v.NH = 8, v.C = 16, v.T = 5, v.batch = 16, v.pad_rows = 2, v.z_gate = true;
      v.heads_per_block = 8, v.pools_ready_at_launch = true, v.row_order = true;
      v.name = "G1-NH8-C16-T5-b16-z-h8-pools-first" + ty;
      add(v, false);
      v = VerifyCase{};
      v.method = K, v.state = st, v.N = 64, v.C = 8, v.T = 5, v.heads_per_block = 2, v.name = "P64-N64-C8-T5-b3-h2" + ty;
      add(v, false);
    }
    auto cl = [&](int T, int rows, bool tree, bool z, const std::string& name, bool in_quick) {
      VerifyCase v;
      v.method = CL, v.state = st, v.T = T, v.rows_per_warp = rows, v.tree = tree, v.z_gate = z, v.name = name + ty;
      add(v, in_quick);
    };
    cl(4, 0, false, false, "T4-b3", false);
    cl(8, 8, false, true, "T8-b3-z-r8", false);
    cl(8, 0, true, true, "tree-T8-b3-z", st == StateType::FP16);
    cl(7, 4, true, false, "tree-T7-b3-r4", false);
  }
  return cs;
}

}  // namespace kvbuf::mamba2_verify_check
