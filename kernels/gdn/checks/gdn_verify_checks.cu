// The GDN verify kernel checks of gdn_verify_checks.h: gdn_verify_kvbuffer + commit and
// gdn_verify_classic (copy variant + its commit, and in place with the commit by index,
// run_classic_inplace_case) against the float64 reference ref::gdn_decode_recurrent of the
// accepted token sequence, on the same bf16-rounded inputs.
//
// Every case runs >= 20 verify rounds on a batch with a padding row and rows mapped to scattered
// pool slots; each round draws fresh random tokens (and, for trees, random parents), poisons the
// outputs and the scratch, verifies, checks every node's output against the recurrence along its
// root path, then accepts a random length 0..T (chains) or a random root path (trees) and commits.
// Fills stagger by themselves (random acceptance per row) and some rows start in direct mode.
// After every round the state each row has accepted so far, read back from the GPU as
// S0 folded with the buffer (exp(G_n) S0 + sum_j exp(G_n - G_j) k_j u_j^T), must equal the
// reference state; after every fold (in verify or in commit) the pool state S0 itself must.
//
// Tolerances (normwise: max |x - ref| / max |ref|), from the precisions involved:
//  * bf16 unit roundoff u16 = 2^-8 (8 significant bits), fp32 u32 = 2^-24.
//  * Outputs are stored in bf16: one rounding, <= u16 of the largest output. Arithmetic is fp32
//    (dot products of length K, sums over <= C + T entries): (K + C + T) u32 ~ 1e-5, negligible.
//  * fp32 buffer entries: outputs within 2 u16 (the store's rounding plus margin for fp32 noise);
//    states, never rounded to bf16, within 1e-4 (about 16 (K + V + C) u32 per fold, over up to a
//    dozen folds that do not amplify earlier errors: the update is non-expansive).
//  * bf16 buffer entries: every buffered u_j and k_j carries a rounding of u16, and an output or
//    a folded state sums up to C + T such terms with factors in [0, 1]; normalised keys and the
//    contraction of the recurrence keep the sum of magnitudes within a few times the result, so
//    we allow 8 u16 (3.1e-2) for outputs and states. (Measured errors are printed per case.)
//  * Classic (no entries; fp32 states written per node): outputs 2 u16, states 1e-4.
// 16-bit states (VerifyCase::state bf16 or fp16): the kernels compute in fp32 and round each state
// element once to nearest where they write a state (classic: every node's state, and the walk goes
// on from the rounded value; KVBuffer: S0 at every fold, in the verify or in the commit, the
// verify's outputs after its fold reading the rounded S0). The reference rounds its float64 state at
// exactly those places (ref::StateStore), from the same rounded initial states uploaded in the
// type: classic rounds after every node of the root path (ref::gdn_decode_recurrent with the
// store, which equals ref::gdn_verify_classic_window with it); KVBuffer keeps the exact recurrence
// of the accepted tokens and rounds it wherever the kernel folds (the state a fold writes is the
// state accepted so far). us = 2^-8 (bf16, 8 significant bits) or 2^-11 (fp16, 11 bits) is the
// unit roundoff; one ulp is at most 2 us relative to the element.
//  * Classic, and KVBuffer with fp32 entries: before rounding, kernel and reference agree to the
//    fp32 arithmetic (~1e-6), so they round to the same value except for elements within that
//    distance of a rounding boundary, which then differ by one ulp; the next update carries such a
//    difference as e^g ulp (<= 1 ulp, g <= 0, the delta rule non-expansive) plus fp32 noise, so it
//    rounds to at most one ulp again (as the decode checks argue, gdn_decode_checks.cu): states
//    1e-4 + 2 us, outputs, computed from such states, 2 u16 + 2 us.
//  * KVBuffer with bf16 entries: before a fold the states already differ by the entry error
//    (above), so both roundings count in full, 2 us per fold, and earlier differences only decay:
//    with F the most folds any row of the case went through, states 8 u16 + 2 F us and outputs
//    (which read S0) 8 u16 + 2 F us. F is counted as the case runs (VerifyResult::max_row_folds).
// NaN never passes (an error with NaN counts as infinite; comparisons are written as !(err <= tol)).
#include "kernels/gdn/checks/gdn_verify_checks.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>

#include "kernels/common/checks/check_common.h"
#include "kernels/common/checks/late_copy.h"
#include "kernels/common/device_buffer.h"
#include "kernels/common/common.cuh"
#include "kernels/gdn/gdn_launch_shape.h"  // verify_coef_bytes
#include "kernels/gdn/gdn_verify.h"
#include "reference/gdn.h"

namespace kvbuf::verify_check {

std::string qualified_name(const VerifyCase& c) {
  return (c.method == VerifyMethod::KVBuffer ? "kvbuffer/" : "classic/") + c.name;
}

std::string describe(const VerifyCase& c) {
  std::ostringstream s;
  s << qualified_name(c) << ": K=" << c.K << " V=" << c.V << " H=" << c.H << " HV=" << c.HV;
  if (c.method == VerifyMethod::KVBuffer) s << " C=" << c.C << " entries=" << (c.bf16_entries ? "bf16" : "fp32");
  if (c.in_place) s << " in-place";
  if (c.late_inputs) s << " late-inputs";
  if (c.path == DecodePath::Split) s << " path=split";
  if (c.state != StateType::FP32) s << " state=" << state_type_name(c.state);
  s << " T=" << c.T << " " << (c.tree ? "tree" : "chain") << " gates=" << checks::gate_range_name(c.gates)
    << " rounds=" << c.rounds;
  return s.str();
}

void PrintTo(const VerifyCase& c, std::ostream* os) { *os << describe(c); }

std::string VerifyResult::line(const std::string& name) const {
  std::ostringstream s;
  s.precision(3);
  s << "outputs " << out_err << " (tol " << tol_out << ", " << outputs_checked << " node outputs), ";
  if (method == VerifyMethod::KVBuffer)
    s << "states " << state_err << ", S0 after " << verify_folds << " verify folds + " << commit_folds
      << " commit folds (at most " << max_row_folds << " per row) " << fold_err;
  else
    s << "node states " << node_state_err << ", committed states " << state_err;
  s << " (tol " << tol_state << ", " << states_checked << " states)";
  return checks::result_line(passed, name, s.str(), message);
}

namespace {

using ref::GdnDims;
using ref::GdnState;
using ref::GdnTokens;

constexpr double kU16 = 0x1p-8;

// Standard normal draws, rounded to t, for a state pool of n elements.
std::vector<float> random_state_values(size_t n, StateType t, std::mt19937_64& rng) {
  std::vector<float> x(n);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (auto& e : x) e = float(ref::round_to_state(float(normal(rng)), t));
  return x;
}


std::vector<uint16_t> to_bf16(const std::vector<double>& x) {
  std::vector<uint16_t> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = ref::float_to_bf16_bits(float(x[i]));
  return r;
}
double bf16_to_double(uint16_t b) { return ref::bf16_bits_to_float(b); }

// Tokens `nodes` (0-based) of a window, in that order.
GdnTokens<double> select_tokens(const GdnTokens<double>& w, const std::vector<int>& nodes) {
  const GdnDims& d = w.dims;
  GdnTokens<double> r;
  r.dims = d;
  r.steps = int(nodes.size());
  for (int t : nodes) {
    r.q.insert(r.q.end(), w.q.begin() + size_t(t) * d.H * d.K, w.q.begin() + size_t(t + 1) * d.H * d.K);
    r.k.insert(r.k.end(), w.k.begin() + size_t(t) * d.H * d.K, w.k.begin() + size_t(t + 1) * d.H * d.K);
    r.v.insert(r.v.end(), w.v.begin() + size_t(t) * d.HV * d.V, w.v.begin() + size_t(t + 1) * d.HV * d.V);
    r.g.insert(r.g.end(), w.g.begin() + size_t(t) * d.HV, w.g.begin() + size_t(t + 1) * d.HV);
    r.beta.insert(r.beta.end(), w.beta.begin() + size_t(t) * d.HV, w.beta.begin() + size_t(t + 1) * d.HV);
  }
  return r;
}

// Normwise relative error accumulated over many comparisons: max |diff| / max |ref|.
struct ErrAcc {
  double diff = 0, scale = 0;
  bool nan = false;
  void add(double x, double r) {
    const double d = std::abs(x - r);
    if (!(d == d)) nan = true;
    diff = std::max(diff, d);
    scale = std::max(scale, std::abs(r));
  }
  double rel() const { return nan ? INFINITY : diff / std::max(scale, 1e-300); }
};

// Batch shared by the cases: 5 rows over 8 slots, row 1 is padding.
const std::vector<int> kSlots = {3, -1, 0, 6, 5};
constexpr int kPoolSlots = 8;

// Random parents (1-based, p(i) in 0..i-1) for a tree case, or the chain.
std::vector<int> draw_parents(int T, bool tree, std::mt19937_64& rng) {
  std::vector<int> p(T);
  for (int i = 1; i <= T; ++i) p[i - 1] = tree ? int(std::uniform_int_distribution<int>(0, i - 1)(rng)) : i - 1;
  if (tree && T > 1 && rng() % 4 == 0) p[T - 1] = T - 1;  // keep some deep chains in trees too
  return p;
}

// The buffers of GdnVerifyIO for B request rows of c.T tokens (slot: not uploaded).
struct RowBuffers {
  int B;
  DeviceBuffer q, k, v, g, beta, parents, out, slot;
  RowBuffers(const VerifyCase& c, int rows)
      : B(rows),
        q(size_t(B) * c.T * c.H * c.K * 2),
        k(size_t(B) * c.T * c.H * c.K * 2),
        v(size_t(B) * c.T * c.HV * c.V * 2),
        g(size_t(B) * c.T * c.HV * 4),
        beta(size_t(B) * c.T * c.HV * 4),
        parents(size_t(B) * c.T * 4),
        out(size_t(B) * c.T * c.HV * c.V * 2),
        slot(B * 4) {}
  GdnVerifyIO io(const VerifyCase& c) const {
    return GdnVerifyIO{B, c.T, c.H, c.HV, c.K, c.V, slot.as<int32_t>(), q.as<__nv_bfloat16>(), k.as<__nv_bfloat16>(),
                       v.as<__nv_bfloat16>(), g.as<float>(), beta.as<float>(), c.tree ? parents.as<int32_t>() : nullptr,
                       out.as<__nv_bfloat16>()};
  }
};

// One round's window: fresh bf16-rounded random tokens and parents per row (par0: 0-based, -1 = the
// committed state), uploaded to the kernels' token inputs.
struct Window {
  std::vector<GdnTokens<double>> tokens;
  std::vector<std::vector<int>> par0;
};
Window draw_window(const VerifyCase& c, std::mt19937_64& rng, RowBuffers& rows, checks::StepInputs& inputs) {
  const GdnDims d{c.H, c.HV, c.K, c.V};
  const int B = rows.B;
  Window w{std::vector<GdnTokens<double>>(B), std::vector<std::vector<int>>(B)};
  std::vector<double> hq, hk, hv, hg, hb;
  std::vector<int> h_par;
  for (int r = 0; r < B; ++r) {
    GdnTokens<double>& t = w.tokens[r];
    t = ref::round_tokens_to_bf16(ref::make_random_gdn_tokens<double>(d, c.T, rng, c.gates));
    hq.insert(hq.end(), t.q.begin(), t.q.end());
    hk.insert(hk.end(), t.k.begin(), t.k.end());
    hv.insert(hv.end(), t.v.begin(), t.v.end());
    hg.insert(hg.end(), t.g.begin(), t.g.end());
    hb.insert(hb.end(), t.beta.begin(), t.beta.end());
    const auto pr = draw_parents(c.T, c.tree, rng);
    h_par.insert(h_par.end(), pr.begin(), pr.end());
    for (int x : pr) w.par0[r].push_back(x - 1);
  }
  inputs.upload(rows.q, to_bf16(hq));
  inputs.upload(rows.k, to_bf16(hk));
  inputs.upload(rows.v, to_bf16(hv));
  inputs.upload(rows.g, std::vector<float>(hg.begin(), hg.end()));
  inputs.upload(rows.beta, std::vector<float>(hb.begin(), hb.end()));
  inputs.upload(rows.parents, h_par);
  return w;
}

// Node t (0-based) of one request row: its outputs (out_row: the row's bf16 outputs [T, HV, V])
// against the recurrence over its root path from the row's committed state; returns the state after
// that path.
// store: the classic kernel's rounding after every node (none for KVBuffer, fp32).
GdnState<double> check_node_outputs(const VerifyCase& c, const GdnTokens<double>& win,
                                           const std::vector<int>& par0, int t, const GdnState<double>& committed,
                                           const uint16_t* out_row, ErrAcc& err, ref::StateStore store = {}) {
  const auto path = checks::root_path(par0, t);
  GdnState<double> s = committed;
  std::vector<double> o;
  ref::gdn_decode_recurrent(select_tokens(win, path), s, o, store);
  const size_t last = size_t(path.size() - 1) * c.HV * c.V;
  for (int h = 0; h < c.HV; ++h)
    for (int vv = 0; vv < c.V; ++vv)
      err.add(bf16_to_double(out_row[(size_t(t) * c.HV + h) * c.V + vv]), o[last + size_t(h) * c.V + vv]);
  return s;
}

// What a row accepts: a random prefix (chain) or the root path of a random node (tree), 0-based;
// one time in 8 nothing.
std::vector<int> draw_accepted_path(bool tree, int T, const std::vector<int>& par0, std::mt19937_64& rng) {
  std::vector<int> path;
  if (rng() % 8 != 0) {
    if (tree) {
      path = checks::root_path(par0, int(rng() % T));
    } else {
      for (int i = 0, m = int(rng() % T) + 1; i < m; ++i) path.push_back(i);
    }
  }
  return path;
}

// What row r of window w accepts (draw_accepted_path); advances the row's reference state along it.
// store as for check_node_outputs.
std::vector<int> accept_random_path(const VerifyCase& c, const Window& w, int r, GdnState<double>& state,
                                    std::mt19937_64& rng, ref::StateStore store = {}) {
  const std::vector<int> path = draw_accepted_path(c.tree, c.T, w.par0[r], rng);
  std::vector<double> o;
  if (!path.empty()) ref::gdn_decode_recurrent(select_tokens(w.tokens[r], path), state, o, store);
  return path;
}

// A commit's accepted nodes per row (VerifyAccept): set on the host row by row, then uploaded.
struct AcceptBuffers {
  int B, T;
  DeviceBuffer len, nodes;
  std::vector<int> h_len, h_nodes;
  AcceptBuffers(const VerifyCase& c, int rows) : B(rows), T(c.T), len(B * 4), nodes(size_t(B) * T * 4) {}
  VerifyAccept accept(const VerifyCase& c) const {
    return VerifyAccept{len.as<int32_t>(), c.tree ? nodes.as<int32_t>() : nullptr};
  }
  // Nothing accepted (padding rows stay so).
  void clear() {
    h_len.assign(B, 0);
    h_nodes.assign(size_t(B) * T, 0);
  }
  // Row r accepts path (0-based nodes, root first).
  void set(int r, const std::vector<int>& path) {
    h_len[r] = int(path.size());
    for (size_t i = 0; i < path.size(); ++i) h_nodes[size_t(r) * T + i] = path[i] + 1;
  }
  void upload() {
    len.upload(h_len);
    nodes.upload(h_nodes);
  }
};

// Records a failure in res, keeping the first message.
void record_failure(VerifyResult& res, const std::string& message) {
  if (res.passed) res.message = message;
  res.passed = false;
}

std::string exceeds(const char* what, double err, double tol) {
  char s[128];
  std::snprintf(s, sizeof s, "%s: rel err %.3g > tol %.3g", what, err, tol);
  return s;
}

// The outputs of padding row r (its T x HV x V bf16 values in h_out) must be exactly zero; records
// the failure in res otherwise.
bool padding_row_ok(VerifyResult& res, const std::vector<uint16_t>& h_out, const VerifyCase& c, int r, int round) {
  const size_t n = size_t(c.T) * c.HV * c.V, base = size_t(r) * n;
  for (size_t i = 0; i < n; ++i)
    if (h_out[base + i] != 0) {
      record_failure(res, "padding row " + std::to_string(r) + " output not zero in round " + std::to_string(round));
      return false;
    }
  return true;
}

VerifyResult run_kvbuffer_case(const VerifyCase& c, uint64_t seed) {
  VerifyResult res;
  res.method = VerifyMethod::KVBuffer;
  // 16-bit states: + 2 us (fp32 entries) or + 2 F us (bf16 entries, F set at the end).
  const double us = checks::state_unit(c.state);
  const ref::StateStore store = checks::state_store(c.state);
  res.tol_out = c.bf16_entries ? 8 * kU16 : 2 * kU16 + 2 * us;
  res.tol_state = c.bf16_entries ? 8 * kU16 : 1e-4 + 2 * us;
  const GdnDims d{c.H, c.HV, c.K, c.V};
  const int B = int(kSlots.size()), T = c.T, C = c.C;
  const size_t esz = c.bf16_entries ? 2 : 4;
  std::mt19937_64 rng(seed);

  // Pools.
  const size_t state_elems = size_t(kPoolSlots) * c.HV * c.V * c.K;
  DeviceBuffer state(state_elems * state_type_bytes(c.state)), buf_k(size_t(kPoolSlots) * C * c.H * c.K * esz),
      buf_u(size_t(kPoolSlots) * C * c.HV * c.V * esz), buf_g(size_t(kPoolSlots) * C * c.HV * 4),
      fill(kPoolSlots * 4), has_state(kPoolSlots * 4);
  DeviceBuffer win_k(size_t(B) * T * c.H * c.K * esz), win_u(size_t(B) * T * c.HV * c.V * esz),
      win_g(size_t(B) * T * c.HV * 4), win_base(size_t(B) * 2 * 4);
  DeviceBuffer coef(c.path == DecodePath::Split ? gdn_verify_detail::verify_coef_bytes(B, c.HV, T, C) : 0);
  RowBuffers rows(c, B);
  AcceptBuffers accepted(c, B);
  rows.slot.upload(kSlots);

  // Initial states: rows 0 and 3 in buffered mode from a random S0 (rounded to the state type and
  // uploaded in it), rows 2 and 4 in direct mode.
  const std::vector<float> h_state = random_state_values(state_elems, c.state, rng);
  state.upload(checks::encode_states(h_state, c.state));
  std::vector<int> h_fill(kPoolSlots, 0), h_has(kPoolSlots, 1);
  std::vector<GdnState<double>> ref_state(B);
  for (int r = 0; r < B; ++r) {
    if (kSlots[r] < 0) continue;
    const bool direct = r == 2 || r == 4;
    h_has[kSlots[r]] = direct ? 0 : 1;
    ref_state[r] = ref::gdn_zero_state<double>(d);
    if (!direct)
      for (int h = 0; h < c.HV; ++h)
        for (int vv = 0; vv < c.V; ++vv)
          for (int kk = 0; kk < c.K; ++kk)
            ref_state[r][h](kk, vv) = h_state[((size_t(kSlots[r]) * c.HV + h) * c.V + vv) * c.K + kk];
  }
  fill.upload(h_fill);
  has_state.upload(h_has);
  buf_k.poison();
  buf_u.poison();
  buf_g.poison();

  GdnVerifyKVBufferParams p;
  p.io = rows.io(c);
  p.entry = c.bf16_entries ? EntryType::BF16 : EntryType::FP32;
  p.capacity = C;
  p.state = state.as<void>();
  p.state_type = c.state;
  p.buf_k = buf_k.as<void>();
  p.buf_val = buf_u.as<void>();
  p.buf_gcum = buf_g.as<float>();
  p.fill = fill.as<int32_t>();
  p.has_state = has_state.as<int32_t>();
  p.win_k = win_k.as<void>();
  p.win_u = win_u.as<void>();
  p.win_gcum = win_g.as<float>();
  p.win_base = win_base.as<int32_t>();
  p.accept = accepted.accept(c);
  p.path = c.path, p.coef = coef.as<float>();

  auto entry_at = [&](const std::vector<uint8_t>& raw, size_t i) {
    if (esz == 2) {
      uint16_t b;
      std::memcpy(&b, raw.data() + 2 * i, 2);
      return bf16_to_double(b);
    }
    float f;
    std::memcpy(&f, raw.data() + 4 * i, 4);
    return double(f);
  };
  auto compare_state = [&](int r, bool with_buffer, ErrAcc& acc) {
    const int s = kSlots[r];
    const auto S = state.download<uint8_t>();
    const auto bk = buf_k.download<uint8_t>(), bu = buf_u.download<uint8_t>();
    const auto bg = buf_g.download<float>();
    const int n = with_buffer ? h_fill[s] : 0;
    for (int h = 0; h < c.HV; ++h) {
      const int kh = h / (c.HV / c.H);
      const double gn = n > 0 ? bg[(size_t(s) * C + n - 1) * c.HV + h] : 0.0;
      for (int vv = 0; vv < c.V; ++vv)
        for (int kk = 0; kk < c.K; ++kk) {
          double x =
              h_has[s] ? std::exp(gn) * checks::decode_state(c.state, S.data() + (((size_t(s) * c.HV + h) * c.V + vv) * c.K + kk) * state_type_bytes(c.state)) : 0.0;
          for (int j = 0; j < n; ++j) {
            const double gj = bg[(size_t(s) * C + j) * c.HV + h];
            x += std::exp(gn - gj) * entry_at(bk, ((size_t(s) * C + j) * c.H + kh) * c.K + kk) *
                 entry_at(bu, ((size_t(s) * C + j) * c.HV + h) * c.V + vv);
          }
          acc.add(x, ref_state[r][h](kk, vv));
        }
    }
    ++res.states_checked;
  };

  ErrAcc out_err, state_err, fold_err;
  std::vector<int> row_folds(B, 0);
  auto measured = [&] {
    res.out_err = out_err.rel();
    res.state_err = state_err.rel();
    res.fold_err = fold_err.rel();
    return res;
  };
  checks::StepInputs inputs(c.late_inputs);
  p.pools_ready_at_launch = c.late_inputs;
  for (int round = 0; round < c.rounds; ++round) {
    // Fresh tokens per row.
    const Window w = draw_window(c, rng, rows, inputs);
    const auto& [win, par0] = w;
    rows.out.poison();
    win_k.poison();
    win_u.poison();
    win_g.poison();
    win_base.poison();
    coef.poison();

    inputs.launch();
    gdn_verify_kvbuffer(p, inputs.stream());
    KVB_CUDA_CHECK(cudaDeviceSynchronize());

    const auto h_out = rows.out.download<uint16_t>();
    std::vector<bool> folded(B, false);
    for (int r = 0; r < B; ++r) {
      const size_t base = size_t(r) * T * c.HV * c.V;
      if (kSlots[r] < 0) {
        if (!padding_row_ok(res, h_out, c, r, round)) return measured();
        continue;
      }
      folded[r] = verify_folds_first(C, checks::window_depth(par0[r], T), h_fill[kSlots[r]]);
      if (folded[r]) {  // the fold writes the state accepted so far, rounded; the window reads it
        ref::round_state(ref_state[r], store);
        ++row_folds[r];
      }
      for (int t = 0; t < T; ++t) {
        check_node_outputs(c, win[r], par0[r], t, ref_state[r], h_out.data() + base, out_err);
        ++res.outputs_checked;
      }
    }
    for (int r = 0; r < B; ++r)
      if (folded[r]) {
        ++res.verify_folds;
        h_fill[kSlots[r]] = 0;
        h_has[kSlots[r]] = 1;
        compare_state(r, false, fold_err);
      }

    // Accept (draw_accepted_path), advancing the reference along the accepted path.
    accepted.clear();
    for (int r = 0; r < B; ++r) {
      if (kSlots[r] < 0) continue;
      const std::vector<int> path = accept_random_path(c, w, r, ref_state[r], rng);
      accepted.set(r, path);
      int& f = h_fill[kSlots[r]];
      f += int(path.size());
      if (f == C) {
        f = 0;
        h_has[kSlots[r]] = 1;
        ++res.commit_folds;
        folded[r] = true;
        ref::round_state(ref_state[r], store);  // the commit's fold writes it rounded
        ++row_folds[r];
      } else {
        folded[r] = false;
      }
    }
    accepted.upload();
    gdn_verify_kvbuffer_commit(p, 0);
    KVB_CUDA_CHECK(cudaDeviceSynchronize());

    const auto d_fill = fill.download<int32_t>(), d_has = has_state.download<int32_t>();
    for (int r = 0; r < B; ++r) {
      if (kSlots[r] < 0) continue;
      const int s = kSlots[r];
      if (d_fill[s] != h_fill[s] || d_has[s] != h_has[s]) {
        record_failure(res, "fill/has_state of row " + std::to_string(r) + " after round " + std::to_string(round) +
                                ": " + std::to_string(d_fill[s]) + "/" + std::to_string(d_has[s]) + ", expected " +
                                std::to_string(h_fill[s]) + "/" + std::to_string(h_has[s]));
        return measured();
      }
      if (folded[r]) compare_state(r, false, fold_err);
      compare_state(r, true, state_err);
    }
  }

  measured();
  res.max_row_folds = *std::max_element(row_folds.begin(), row_folds.end());
  if (c.bf16_entries) {  // both roundings of every fold in full (header)
    res.tol_out += 2 * res.max_row_folds * us;
    res.tol_state += 2 * res.max_row_folds * us;
  }
  if (!(res.out_err <= res.tol_out)) record_failure(res, exceeds("outputs", res.out_err, res.tol_out));
  if (!(res.state_err <= res.tol_state)) record_failure(res, exceeds("states", res.state_err, res.tol_state));
  if (res.verify_folds + res.commit_folds == 0)
    record_failure(res, "the case never folded: make C smaller or run more rounds");
  if (!(res.fold_err <= res.tol_state)) record_failure(res, exceeds("S0 after folds", res.fold_err, res.tol_state));
  return res;
}

// The classic cases (run_classic_case, run_classic_inplace_case) share what follows.

// The result of a classic case, with its tolerances.
VerifyResult classic_result(const VerifyCase& c) {
  VerifyResult res;
  res.method = VerifyMethod::Classic;
  const double us = checks::state_unit(c.state);  // 16-bit states: one ulp (header)
  res.tol_out = 2 * kU16 + 2 * us;
  res.tol_state = 1e-4 + 2 * us;
  return res;
}

// One state [HV, V, K] of the case's type from the GPU (S: its bytes; a pool slot or a node's
// state) against its reference.
void check_state(const VerifyCase& c, const uint8_t* S, const GdnState<double>& ref_state, ErrAcc& acc,
                 VerifyResult& res) {
  for (int h = 0; h < c.HV; ++h)
    for (int vv = 0; vv < c.V; ++vv)
      for (int kk = 0; kk < c.K; ++kk)
        acc.add(checks::decode_state(c.state, S + ((size_t(h) * c.V + vv) * c.K + kk) * state_type_bytes(c.state)), ref_state[h](kk, vv));
  ++res.states_checked;
}

// Random states (standard normal, rounded to the case's state type and uploaded in it) in all
// pool_slots slots of the pool [pool_slots, HV, V, K]; returns the float64 reference state of every
// row, read from its slot row_slot[r] (none for a padding row, slot -1).
std::vector<GdnState<double>> random_pool_states(const VerifyCase& c, int pool_slots, const std::vector<int>& row_slot,
                                                 std::mt19937_64& rng, DeviceBuffer& state) {
  const size_t slot_elems = size_t(c.HV) * c.V * c.K;
  const std::vector<float> h_state = random_state_values(size_t(pool_slots) * slot_elems, c.state, rng);
  state.upload(checks::encode_states(h_state, c.state));
  std::vector<GdnState<double>> ref_state(row_slot.size());
  for (size_t r = 0; r < row_slot.size(); ++r) {
    if (row_slot[r] < 0) continue;
    ref_state[r] = ref::gdn_zero_state<double>(GdnDims{c.H, c.HV, c.K, c.V});
    const float* S = h_state.data() + size_t(row_slot[r]) * slot_elems;
    for (int h = 0; h < c.HV; ++h)
      for (int vv = 0; vv < c.V; ++vv)
        for (int kk = 0; kk < c.K; ++kk) ref_state[r][h](kk, vv) = S[(size_t(h) * c.V + vv) * c.K + kk];
  }
  return ref_state;
}

// The classic verify's parameters on the rows' buffers and the pool (the caller sets the variant:
// step_states or step_slot).
GdnVerifyClassicParams classic_params(const VerifyCase& c, const RowBuffers& rows, const DeviceBuffer& state) {
  GdnVerifyClassicParams p;
  p.io = rows.io(c);
  p.state = state.as<void>();
  p.state_type = c.state;
  return p;
}

// The errors a classic case measures: outputs, the states written per node, committed states.
struct ClassicErrors {
  ErrAcc out, node_state, state;
  // res with the errors measured so far.
  VerifyResult measured(VerifyResult& res) const {
    res.out_err = out.rel();
    res.node_state_err = node_state.rel();
    res.state_err = state.rel();
    return res;
  }
};

// Node t of request row r: its output (check_node_outputs, from the row's committed state) and the
// state the verify wrote for it (node_state: [HV, V, K] of the case's state type), the reference
// rounding after every node of the path as the kernel does.
void check_classic_node(const VerifyCase& c, const Window& w, int r, int t, const GdnState<double>& committed,
                        const std::vector<uint16_t>& h_out, const uint8_t* node_state, ClassicErrors& err,
                        VerifyResult& res) {
  const GdnState<double> s = check_node_outputs(c, w.tokens[r], w.par0[r], t, committed,
                                                h_out.data() + size_t(r) * c.T * c.HV * c.V, err.out,
                                                checks::state_store(c.state));
  ++res.outputs_checked;
  check_state(c, node_state, s, err.node_state, res);
}

// The final verdict of a classic case: every error within its tolerance.
VerifyResult classic_verdict(VerifyResult res) {
  if (!(res.out_err <= res.tol_out)) record_failure(res, exceeds("outputs", res.out_err, res.tol_out));
  if (!(res.node_state_err <= res.tol_state))
    record_failure(res, exceeds("node states", res.node_state_err, res.tol_state));
  if (!(res.state_err <= res.tol_state)) record_failure(res, exceeds("committed states", res.state_err, res.tol_state));
  return res;
}

// Classic, copy variant: node t's state goes to step_states[row, t]; gdn_verify_classic_commit
// copies the last accepted node's state to the row's slot (kSlots).
VerifyResult run_classic_case(const VerifyCase& c, uint64_t seed) {
  VerifyResult res = classic_result(c);
  const int B = int(kSlots.size()), T = c.T;
  std::mt19937_64 rng(seed);
  const size_t slot_elems = size_t(c.HV) * c.V * c.K, slot_bytes = slot_elems * state_type_bytes(c.state);
  const ref::StateStore store = checks::state_store(c.state);
  RowBuffers rows(c, B);
  DeviceBuffer state(size_t(kPoolSlots) * slot_bytes), steps(size_t(B) * T * slot_bytes);
  AcceptBuffers accepted(c, B);
  rows.slot.upload(kSlots);
  std::vector<GdnState<double>> ref_state = random_pool_states(c, kPoolSlots, kSlots, rng, state);
  GdnVerifyClassicParams p = classic_params(c, rows, state);
  p.step_states = steps.as<void>();
  p.accept = accepted.accept(c);

  ClassicErrors err;
  checks::StepInputs on_time(false);
  for (int round = 0; round < c.rounds; ++round) {
    const Window w = draw_window(c, rng, rows, on_time);
    rows.out.poison();
    steps.poison();
    gdn_verify_classic(p, 0);
    KVB_CUDA_CHECK(cudaDeviceSynchronize());
    const auto h_out = rows.out.download<uint16_t>();
    const auto h_steps = steps.download<uint8_t>();
    for (int r = 0; r < B; ++r) {
      if (kSlots[r] < 0) {
        if (!padding_row_ok(res, h_out, c, r, round)) return err.measured(res);
        continue;
      }
      for (int t = 0; t < T; ++t)
        check_classic_node(c, w, r, t, ref_state[r], h_out, h_steps.data() + (size_t(r) * T + t) * slot_bytes, err,
                           res);
    }
    // Commit: the accepted nodes (1-based) to the kernel, which copies the last one's state.
    accepted.clear();
    for (int r = 0; r < B; ++r)
      if (kSlots[r] >= 0) accepted.set(r, accept_random_path(c, w, r, ref_state[r], rng, store));
    accepted.upload();
    gdn_verify_classic_commit(p, 0);
    KVB_CUDA_CHECK(cudaDeviceSynchronize());
    const auto S = state.download<uint8_t>();
    for (int r = 0; r < B; ++r)
      if (kSlots[r] >= 0) check_state(c, S.data() + size_t(kSlots[r]) * slot_bytes, ref_state[r], err.state, res);
  }
  return classic_verdict(err.measured(res));
}

// Classic in place (step_slot): each request row owns T + 1 slots of a pool, scattered over it
// (a random permutation, with slots that no row owns between them); every round the row's T slots
// other than its committed one are handed to the nodes in a fresh random order, the verify writes
// node t's state into step_slot[row, t], and the commit is by index as a scheduler does it:
// slot[row] <- step_slot[row, last accepted node] (m = 0 keeps it). Checked per round: outputs,
// every node's state in its step slot, that no other slot changed (bitwise: the committed states
// and the unowned slots), and the committed state of every row after the commit.
VerifyResult run_classic_inplace_case(const VerifyCase& c, uint64_t seed) {
  VerifyResult res = classic_result(c);
  const int B = int(kSlots.size()), T = c.T;
  std::mt19937_64 rng(seed);
  const size_t slot_elems = size_t(c.HV) * c.V * c.K, slot_bytes = slot_elems * state_type_bytes(c.state);
  const ref::StateStore store = checks::state_store(c.state);
  const int pool_slots = B * (T + 1) + 3;
  RowBuffers rows(c, B);
  DeviceBuffer state(size_t(pool_slots) * slot_bytes), step_slot(size_t(B) * T * 4);

  // Slots owned per row (padding rows own none and get slot -1, step slots -1).
  std::vector<int> perm(pool_slots);
  for (int i = 0; i < pool_slots; ++i) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<std::vector<int>> owned(B);
  std::vector<int> cur(B, -1);
  std::vector<bool> is_owned(pool_slots, false);
  for (int r = 0, next = 0; r < B; ++r) {
    if (kSlots[r] < 0) continue;
    owned[r].assign(perm.begin() + next, perm.begin() + next + T + 1);
    next += T + 1;
    for (int x : owned[r]) is_owned[x] = true;
    cur[r] = owned[r][0];
  }
  std::vector<GdnState<double>> ref_state = random_pool_states(c, pool_slots, cur, rng, state);
  GdnVerifyClassicParams p = classic_params(c, rows, state);
  p.step_slot = step_slot.as<int32_t>();

  ClassicErrors err;
  checks::StepInputs on_time(false);
  for (int round = 0; round < c.rounds; ++round) {
    const Window w = draw_window(c, rng, rows, on_time);
    // This round's slots: the committed one, then the row's other T slots in a random order.
    std::vector<int> h_slot(B, -1), h_step(size_t(B) * T, -1);
    std::vector<bool> is_step(pool_slots, false);
    for (int r = 0; r < B; ++r) {
      if (kSlots[r] < 0) continue;
      h_slot[r] = cur[r];
      std::vector<int> free_slots;
      for (int x : owned[r])
        if (x != cur[r]) free_slots.push_back(x);
      std::shuffle(free_slots.begin(), free_slots.end(), rng);
      for (int t = 0; t < T; ++t) {
        h_step[size_t(r) * T + t] = free_slots[t];
        is_step[free_slots[t]] = true;
      }
    }
    rows.slot.upload(h_slot);
    step_slot.upload(h_step);
    rows.out.poison();
    for (int x = 0; x < pool_slots; ++x)
      if (is_step[x]) KVB_CUDA_CHECK(cudaMemset(state.as<uint8_t>() + size_t(x) * slot_bytes, 0xff, slot_bytes));  // NaN
    const auto before = state.download<uint8_t>();
    gdn_verify_classic(p, 0);
    KVB_CUDA_CHECK(cudaDeviceSynchronize());
    const auto h_out = rows.out.download<uint16_t>();
    const auto S = state.download<uint8_t>();
    for (int x = 0; x < pool_slots; ++x)
      if (!is_step[x] &&
          std::memcmp(S.data() + size_t(x) * slot_bytes, before.data() + size_t(x) * slot_bytes, slot_bytes) != 0) {
        record_failure(res, "slot " + std::to_string(x) + (is_owned[x] ? " (a committed state)" : " (owned by no row)") +
                                " changed by the verify in round " + std::to_string(round));
        return err.measured(res);
      }
    for (int r = 0; r < B; ++r) {
      if (kSlots[r] < 0) {
        if (!padding_row_ok(res, h_out, c, r, round)) return err.measured(res);
        continue;
      }
      for (int t = 0; t < T; ++t)
        check_classic_node(c, w, r, t, ref_state[r], h_out, S.data() + size_t(h_step[size_t(r) * T + t]) * slot_bytes,
                           err, res);
    }
    // Commit by index: the row's slot becomes the last accepted node's step slot.
    for (int r = 0; r < B; ++r) {
      if (kSlots[r] < 0) continue;
      const std::vector<int> path = accept_random_path(c, w, r, ref_state[r], rng, store);
      if (!path.empty()) cur[r] = h_step[size_t(r) * T + path.back()];
      check_state(c, S.data() + size_t(cur[r]) * slot_bytes, ref_state[r], err.state, res);
    }
  }
  return classic_verdict(err.measured(res));
}

}  // namespace

VerifyResult run_verify_case(const VerifyCase& c, uint64_t seed) {
  if (c.method == VerifyMethod::KVBuffer) return run_kvbuffer_case(c, seed);
  return c.in_place ? run_classic_inplace_case(c, seed) : run_classic_case(c, seed);
}

std::vector<VerifyCase> verify_cases(bool quick) {
  constexpr VerifyMethod kKVBuffer = VerifyMethod::KVBuffer, kClassic = VerifyMethod::Classic;
  std::vector<VerifyCase> cs;
  auto add = [&](VerifyCase c, bool in_quick) {
    if (!quick || in_quick) cs.push_back(std::move(c));
  };
  add({"small_K64_C4_T4_bf16_chain", kKVBuffer, 64, 64, 2, 4, 4, 4, true, false, {}, 24}, false);  // C = T
  add({"K128_C16_T4_bf16_chain", kKVBuffer, 128, 128, 2, 4, 16, 4, true, false, {}, 24}, true);
  add({"K128_C8_T5_fp32_chain", kKVBuffer, 128, 128, 2, 4, 8, 5, false, false, {}, 24}, false);
  add({"K64_V128_C64_T8_bf16_chain", kKVBuffer, 64, 128, 2, 4, 64, 8, true, false, ref::GateRange::mild(), 40}, false);
  add({"K128_C5_T3_fp32_chain_extreme_gates", kKVBuffer, 128, 128, 2, 4, 5, 3, false, false,
       ref::GateRange::extreme(), 24},
      false);
  add({"K128_C1_T1_bf16_chain", kKVBuffer, 128, 128, 2, 4, 1, 1, true, false, {}, 20}, false);
  add({"small_K64_C8_T6_bf16_tree", kKVBuffer, 64, 64, 2, 4, 8, 6, true, true, {}, 24}, false);
  add({"K128_C12_T8_fp32_tree", kKVBuffer, 128, 128, 2, 4, 12, 8, false, true, {}, 24}, true);
  add({"K128_C12_T5_bf16_chain_extreme_gates", kKVBuffer, 128, 128, 2, 4, 12, 5, true, false, ref::GateRange::extreme(), 24},
      false);
  add({"K128_C16_T4_bf16_tree", kKVBuffer, 128, 128, 2, 4, 16, 4, true, true, ref::GateRange::mild(), 24}, false);
  add({"K128_C16_T5_bf16_tree", kKVBuffer, 128, 128, 2, 4, 16, 5, true, true, {}, 24}, false);
  add({"K128_C6_T3_bf16_tree", kKVBuffer, 128, 128, 2, 4, 6, 3, true, true, {}, 24}, false);  // T < TMAX (4)
  // The pools read before the wait for the kernel before, the window's inputs written late.
  {
    VerifyCase late{"K128_C12_T5_bf16_chain_late_inputs", kKVBuffer, 128, 128, 2, 4, 12, 5, true, false, {}, 24};
    late.late_inputs = true;
    add(late, true);
    late = {"state_bf16_K128_C16_T4_fp32_tree_late_inputs", kKVBuffer, 128, 128, 2, 4, 16, 4, false, true, {}, 24};
    late.late_inputs = true, late.state = StateType::BF16;
    add(late, false);
  }
  add({"small_K64_T4_chain", kClassic, 64, 64, 2, 4, 0, 4, false, false, {}, 20}, false);
  add({"K128_T5_chain", kClassic, 128, 128, 2, 4, 0, 5, false, false, {}, 20}, true);
  add({"K128_T8_tree", kClassic, 128, 128, 2, 4, 0, 8, false, true, {}, 20}, true);
  add({"K64_V128_T3_tree_extreme_gates", kClassic, 64, 128, 2, 4, 0, 3, false, true, ref::GateRange::extreme(), 20},
      false);
  add({"inplace_small_K64_T4_chain", kClassic, 64, 64, 2, 4, 0, 4, false, false, {}, 20, true}, false);
  add({"inplace_K128_T5_chain", kClassic, 128, 128, 2, 4, 0, 5, false, false, {}, 20, true}, true);
  add({"inplace_K128_T1_chain", kClassic, 128, 128, 2, 4, 0, 1, false, false, {}, 20, true}, false);
  add({"inplace_K128_T8_tree", kClassic, 128, 128, 2, 4, 0, 8, false, true, {}, 20, true}, true);
  add({"inplace_K64_V128_T6_tree_extreme_gates", kClassic, 64, 128, 2, 4, 0, 6, false, true,
       ref::GateRange::extreme(), 20, true},
      false);
  // 16-bit states, 11 cases per type: KVBuffer chains and trees, bf16 and fp32 entries, folds in the
  // verify (n + depth >= C) and in the commit (T = C: C4 T4, C1 T1), K 64 and 128; classic copy
  // (verify + commit) and in place, chains and trees (a tree node reloads its parent's rounded
  // state). Every case accepts random lengths 0..T (random root paths for trees), so fills stagger.
  // The all-layers commit of 16-bit states: GdnVerifyCommitLayers.EqualsOneCommitPerLayer*State.
  for (StateType st : {StateType::BF16, StateType::FP16}) {
    const std::string sp = std::string("state_") + state_type_name(st) + "_";
    const bool bf16 = st == StateType::BF16;
    auto add16 = [&](VerifyCase c, bool in_quick) {
      c.name = sp + c.name;
      c.state = st;
      add(std::move(c), in_quick);
    };
    add16({"K128_C16_T4_bf16_chain", kKVBuffer, 128, 128, 2, 4, 16, 4, true, false, {}, 24}, bf16);
    add16({"small_K64_C4_T4_bf16_chain", kKVBuffer, 64, 64, 2, 4, 4, 4, true, false, {}, 16}, false);  // C = T
    add16({"K128_C8_T5_fp32_chain", kKVBuffer, 128, 128, 2, 4, 8, 5, false, false, {}, 24}, false);
    add16({"K128_C12_T5_bf16_tree", kKVBuffer, 128, 128, 2, 4, 12, 5, true, true, {}, 24}, false);
    add16({"K128_C1_T1_fp32_chain", kKVBuffer, 128, 128, 2, 4, 1, 1, false, false, {}, 12}, false);
    add16({"small_K64_C8_T6_bf16_tree", kKVBuffer, 64, 64, 2, 4, 8, 6, true, true, {}, 24}, !bf16);
    add16({"K128_C12_T8_fp32_tree", kKVBuffer, 128, 128, 2, 4, 12, 8, false, true, {}, 24}, false);
    add16({"K128_T5_chain", kClassic, 128, 128, 2, 4, 0, 5, false, false, {}, 16}, false);
    add16({"K128_T8_tree", kClassic, 128, 128, 2, 4, 0, 8, false, true, {}, 16}, false);
    add16({"inplace_K128_T5_chain", kClassic, 128, 128, 2, 4, 0, 5, false, false, {}, 16, true}, false);
    add16({"inplace_K64_V128_T6_tree", kClassic, 64, 128, 2, 4, 0, 6, false, true, {}, 16, true}, bf16);
  }
  // The split path forced on every KVBuffer case above (Auto takes it only where the grid is many
  // waves: batch 128 and more at Qwen3-Next shapes).
  for (size_t i = 0, fused = cs.size(); i < fused; ++i)
    if (cs[i].method == kKVBuffer) {
      VerifyCase split = cs[i];
      split.name = "split_" + split.name;
      split.path = DecodePath::Split;
      cs.push_back(std::move(split));
    }
  return cs;
}

}  // namespace kvbuf::verify_check
