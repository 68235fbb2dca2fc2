// Every GDN mode against the float64 recurrent ground truth, outputs and final state, in float64
// and float32, over head dims 16/64/128 with K != V, GQA ratios 1 and 2, buffer capacities
// {1,2,3,8,16,64}, lengths {1,3,17,63,65,130}, verify windows T = 1..8 with every accepted length,
// trees, and extreme gates. Tolerances: gdn_rel_tolerance (reference/cross_checks.h), which states
// the derivation: 16 (K + V + steps) u with u the unit roundoff of the precision under test.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "reference/tests/test_gdn_util.h"

namespace kvbuf::ref::test {
namespace {

const std::vector<int> kLengths = {1, 3, 17, 63, 65, 130};
const std::vector<int> kCapacities = {1, 2, 3, 8, 16, 64};
const std::vector<BufferVariant> kVariants = {BufferVariant::Raw, BufferVariant::CachedU};

// Head dims 16, 64, 128 (all K != V), GQA ratio 1 and 2. The 128-wide case runs on fewer lengths
// to keep the whole binary fast.
const std::vector<GdnDims> kDims = {{1, 1, 16, 32}, {2, 4, 64, 16}, {1, 2, 128, 64}};
std::vector<int> lengths_for(const GdnDims& d) {
  return d.K >= 128 ? std::vector<int>{3, 65, 130} : kLengths;
}

struct Problem {
  GdnTokens<double> x;
  GdnState<double> s0;
  Truth truth;
};
Problem make_problem(const GdnDims& d, int steps, uint64_t seed, GateRange gates = {}) {
  std::mt19937_64 rng(seed);
  Problem p{make_random_gdn_tokens<double>(d, steps, rng, gates),
            make_random_gdn_state<double>(d, rng), {}};
  p.truth = recurrent_truth(p.x, p.s0);
  return p;
}

// An independent, loop-only transcription of design note section 1 (no Eigen, no shared code),
// so the ground truth itself is checked, including which key head a value head reads.
std::vector<double> hand_recurrence(const GdnTokens<double>& x, std::vector<double> S /*[HV,K,V]*/,
                                    std::vector<double>* S_out) {
  const GdnDims d = x.dims;
  std::vector<double> o(size_t(x.steps) * d.HV * d.V);
  for (int t = 0; t < x.steps; ++t)
    for (int h = 0; h < d.HV; ++h) {
      const int kh = h / (d.HV / d.H);
      std::vector<double> k(d.K), q(d.K);
      double nk = 0, nq = 0;
      for (int i = 0; i < d.K; ++i) {
        k[i] = x.k[(t * d.H + kh) * d.K + i];
        q[i] = x.q[(t * d.H + kh) * d.K + i];
        nk += k[i] * k[i];
        nq += q[i] * q[i];
      }
      for (int i = 0; i < d.K; ++i) {
        k[i] /= std::sqrt(nk + 1e-6);
        q[i] = q[i] / std::sqrt(nq + 1e-6) / std::sqrt(double(d.K));
      }
      double* Sh = &S[size_t(h) * d.K * d.V];
      const double decay = std::exp(x.g[t * d.HV + h]), beta = x.beta[t * d.HV + h];
      for (int i = 0; i < d.K * d.V; ++i) Sh[i] *= decay;
      for (int j = 0; j < d.V; ++j) {
        double sk = 0;
        for (int i = 0; i < d.K; ++i) sk += Sh[i * d.V + j] * k[i];
        const double u = beta * (x.v[(t * d.HV + h) * d.V + j] - sk);
        for (int i = 0; i < d.K; ++i) Sh[i * d.V + j] += k[i] * u;
        double out = 0;
        for (int i = 0; i < d.K; ++i) out += Sh[i * d.V + j] * q[i];
        o[(t * d.HV + h) * d.V + j] = out;
      }
    }
  *S_out = S;
  return o;
}

TEST(GdnRecurrent, MatchesIndependentTranscriptionWithGqa) {
  for (const GdnDims d : {GdnDims{2, 4, 16, 8}, GdnDims{1, 1, 8, 16}, GdnDims{3, 6, 4, 4}}) {
    const Problem p = make_problem(d, 9, 11 + d.K);
    // The transcription keeps S row-major [K, V] per head; Eigen's storage is column-major, so the
    // column-major data of the transpose is the row-major data of the matrix.
    auto row_major = [](const GdnState<double>& s) {
      std::vector<double> f;
      for (const auto& m : s) {
        const Mat<double> mt = m.transpose();
        f.insert(f.end(), mt.data(), mt.data() + mt.size());
      }
      return f;
    };
    std::vector<double> S_hand;
    const std::vector<double> o_hand = hand_recurrence(p.x, row_major(p.s0), &S_hand);
    EXPECT_LE(max_rel_err(p.truth.o, o_hand), 1e-14) << dims_str(d);
    EXPECT_LE(max_rel_err(row_major(p.truth.state), S_hand), 1e-14) << dims_str(d);
  }
}

// Changing the key head that value head 1 reads must change its output when HV/H = 1, and must
// not when HV/H = 2 (both value heads read key head 0).
TEST(GdnRecurrent, ValueHeadReadsKeyHeadHOverRatio) {
  std::mt19937_64 rng(5);
  for (const GdnDims d : {GdnDims{2, 2, 8, 8}, GdnDims{1, 2, 8, 8}}) {
    GdnTokens<double> x = make_random_gdn_tokens<double>(d, 2, rng);
    GdnTokens<double> y = x;
    for (int i = 0; i < d.K; ++i) y.k[(1 * d.H + (d.H - 1)) * d.K + i] += 0.5;  // last key head
    GdnState<double> sx = gdn_zero_state<double>(d), sy = sx;
    std::vector<double> ox, oy;
    gdn_decode_recurrent(x, sx, ox);
    gdn_decode_recurrent(y, sy, oy);
    const std::vector<double> head0x(ox.begin() + d.HV * d.V, ox.begin() + d.HV * d.V + d.V);
    const std::vector<double> head0y(oy.begin() + d.HV * d.V, oy.begin() + d.HV * d.V + d.V);
    if (d.H == 2)
      EXPECT_EQ(head0x, head0y) << "value head 0 must not read key head 1";
    else
      EXPECT_NE(head0x, head0y) << "value head 0 reads key head 0";
  }
}

template <class T>
void check_chunk(const Problem& p, int chunk) {
  GdnState<T> s = gdn_cast_state<T>(p.s0);
  std::vector<T> o;
  gdn_prefill_chunk(gdn_cast_tokens<T>(p.x), chunk, s, o);
  const std::string what = "chunk=" + std::to_string(chunk);
  expect_close(o, p.truth.o, p.x.dims, p.x.steps, what + " o");
  expect_close(flat(s), flat(p.truth.state), p.x.dims, p.x.steps, what + " state");
}

TEST(GdnPrefillChunk, MatchesRecurrent) {
  for (const GdnDims& d : kDims)
    for (int L : lengths_for(d)) {
      const Problem p = make_problem(d, L, 100 + L + d.K);
      for (int chunk : {16, 32, 64}) {
        check_chunk<double>(p, chunk);
        check_chunk<float>(p, chunk);
      }
    }
}

TEST(GdnPrefillChunk, OddChunkSizesAgree) {
  const Problem p = make_problem({1, 2, 16, 8}, 41, 7);
  for (int chunk : {1, 5, 40, 41, 200}) check_chunk<double>(p, chunk);
}

template <class T>
void check_kvbuffer(const Problem& p, int C, BufferVariant var) {
  GdnState<T> s = gdn_cast_state<T>(p.s0);
  std::vector<T> o;
  gdn_decode_kvbuffer(gdn_cast_tokens<T>(p.x), C, var, s, o);
  const std::string what = std::string("kvbuffer ") + variant_name(var) + " C=" + std::to_string(C);
  expect_close(o, p.truth.o, p.x.dims, p.x.steps, what + " o");
  expect_close(flat(s), flat(p.truth.state), p.x.dims, p.x.steps, what + " state");
}

TEST(GdnDecodeKVBuffer, MatchesRecurrent) {
  for (const GdnDims& d : kDims)
    for (int L : lengths_for(d)) {
      const Problem p = make_problem(d, L, 200 + L + d.K);
      for (int C : kCapacities)
        for (BufferVariant var : kVariants) {
          check_kvbuffer<double>(p, C, var);
          if (d.K < 128) check_kvbuffer<float>(p, C, var);
        }
    }
}

template <class T>
void check_direct(const GdnTokens<double>& x, const Truth& zero_truth, int C, BufferVariant var) {
  std::mt19937_64 rng(1);  // the input state must be ignored: make it non-zero
  GdnState<T> s = gdn_cast_state<T>(make_random_gdn_state<double>(x.dims, rng));
  std::vector<T> o;
  const bool overflowed = gdn_decode_direct(gdn_cast_tokens<T>(x), C, var, s, o);
  const std::string what = std::string("direct ") + variant_name(var) + " C=" + std::to_string(C);
  EXPECT_EQ(overflowed, x.steps >= C) << what;
  expect_close(o, zero_truth.o, x.dims, x.steps, what + " o");
  expect_close(flat(s), flat(zero_truth.state), x.dims, x.steps, what + " state");
}

TEST(GdnDecodeDirect, MatchesRecurrentFromZeroState) {
  for (const GdnDims& d : kDims)
    for (int L : lengths_for(d)) {
      std::mt19937_64 rng(300 + L + d.K);
      const GdnTokens<double> x = make_random_gdn_tokens<double>(d, L, rng);
      const Truth truth = recurrent_truth(x, gdn_zero_state<double>(d));
      for (int C : kCapacities)
        for (BufferVariant var : kVariants) {
          check_direct<double>(x, truth, C, var);
          if (d.K < 128) check_direct<float>(x, truth, C, var);
        }
    }
}

// S0 is read, never written, until the buffer is full; then exactly one fold. Direct mode has no
// state until its first fold.
TEST(GdnKVBuffer, CheckpointUntouchedUntilFull) {
  const GdnDims d{1, 2, 16, 8};
  const Problem p = make_problem(d, 23, 17);
  for (BufferVariant var : kVariants)
    for (bool direct : {false, true}) {
      const int C = 5;
      GdnKVBuffer<double> buf = direct ? GdnKVBuffer<double>(d, C, var)
                                       : GdnKVBuffer<double>(d, C, var, p.s0);
      GdnState<double> last = buf.checkpoint();
      std::vector<double> o(d.HV * d.V);
      for (int t = 0; t < p.x.steps; ++t) {
        buf.decode(p.x, t, o.data());
        const bool fold_now = (t + 1) % C == 0;
        EXPECT_EQ(buf.fill(), (t + 1) % C);
        EXPECT_EQ(buf.folds(), (t + 1) / C);
        EXPECT_EQ(buf.has_state(), !direct || t + 1 >= C);
        if (fold_now)
          EXPECT_NE(flat(buf.checkpoint()), flat(last)) << "fold at token " << t;
        else
          EXPECT_EQ(flat(buf.checkpoint()), flat(last)) << "S0 written before full, token " << t;
        last = buf.checkpoint();
      }
    }
}

// The buffered u_j are the recurrence's corrected values u_j = beta_j (v_j - D_j^T k_j), for the
// raw variant (recomputed by forward substitution) and the cached-u variant alike.
TEST(GdnKVBuffer, EntriesHoldTheRecurrenceCorrectedValues) {
  const GdnDims d{2, 4, 16, 12};
  const Problem p = make_problem(d, 7, 23);
  // u_t of the recurrence, from the state before token t.
  std::vector<std::vector<double>> u_true;
  GdnState<double> S = p.s0;
  for (int t = 0; t < p.x.steps; ++t) {
    std::vector<double> u(d.HV * d.V);
    for (int h = 0; h < d.HV; ++h) {
      const int kh = h / (d.HV / d.H);
      Eigen::Map<const Vec<double>> kr(&p.x.k[(t * d.H + kh) * d.K], d.K);
      const Vec<double> k = kr / std::sqrt(kr.squaredNorm() + 1e-6);
      const Mat<double> D = std::exp(p.x.g[t * d.HV + h]) * S[h];
      const Vec<double> uh =
          p.x.beta[t * d.HV + h] *
          (Eigen::Map<const Vec<double>>(&p.x.v[(t * d.HV + h) * d.V], d.V) - D.transpose() * k);
      Eigen::Map<Vec<double>>(&u[h * d.V], d.V) = uh;
    }
    u_true.push_back(u);
    std::vector<double> o;
    gdn_decode_recurrent(gdn_slice_tokens(p.x, t, 1), S, o);
  }
  for (BufferVariant var : kVariants) {
    GdnKVBuffer<double> buf(d, 8, var, p.s0);
    std::vector<double> o(d.HV * d.V);
    for (int t = 0; t < p.x.steps; ++t) buf.decode(p.x, t, o.data());
    ASSERT_EQ(buf.fill(), p.x.steps);
    double G = 0;
    for (int j = 0; j < p.x.steps; ++j) {
      EXPECT_LE(max_rel_err(buf.entry_u(j), u_true[j]), 1e-13) << variant_name(var) << " entry " << j;
      G += p.x.g[j * d.HV + 1];
      EXPECT_DOUBLE_EQ(buf.entry_G(j)[1], G);
      const GdnTokens<double> tj = gdn_slice_tokens(p.x, j, 1);
      const Vec<double> k1 = Eigen::Map<const Vec<double>>(&tj.k[d.K], d.K);
      const Vec<double> kn = k1 / std::sqrt(k1.squaredNorm() + 1e-6);
      // Key head 1, normalised.
      EXPECT_LE((Eigen::Map<const Vec<double>>(&buf.entry_k(j)[d.K], d.K) - kn).norm(), 1e-15);
      if (var == BufferVariant::Raw) {
        EXPECT_EQ(buf.entry_v(j), tj.v);
        EXPECT_EQ(buf.entry_beta(j), tj.beta);
      } else {
        EXPECT_THROW(buf.entry_v(j), std::logic_error);
      }
    }
    EXPECT_LE(max_rel_err(flat(buf.state()), flat(p.truth.state)), 1e-13);
  }
}

// Chain verify on a buffer holding n tokens: all T outputs, then accept every m in 0..T; the
// state after accepting equals the recurrence through n + m tokens, and the next decode continues
// from exactly those tokens.
template <class T>
void check_chain_verify(const GdnDims& d, int C, int n, int Tw, BufferVariant var, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const GdnTokens<double> prefix = make_random_gdn_tokens<double>(d, n, rng);
  const GdnTokens<double> window = make_random_gdn_tokens<double>(d, Tw, rng);
  const GdnTokens<double> next = make_random_gdn_tokens<double>(d, 1, rng);
  const GdnState<double> s0 = make_random_gdn_state<double>(d, rng);
  const Truth all = recurrent_truth(concat(prefix, window), s0);
  for (int m = 0; m <= Tw; ++m) {
    SCOPED_TRACE(std::string(variant_name(var)) + " " + type_name(T{}) + " C=" + std::to_string(C) +
                 " n=" + std::to_string(n) + " T=" + std::to_string(Tw) + " m=" + std::to_string(m));
    GdnKVBuffer<T> buf(d, C, var, gdn_cast_state<T>(s0));
    std::vector<T> o(d.HV * d.V), ow;
    const GdnTokens<T> pt = gdn_cast_tokens<T>(prefix);
    for (int t = 0; t < n; ++t) buf.decode(pt, t, o.data());
    const int folds_before = buf.folds();
    const GdnState<T> checkpoint_before = buf.checkpoint();
    buf.verify(gdn_cast_tokens<T>(window), ow);
    const bool fold_first = n % C + Tw > C;
    EXPECT_EQ(buf.folds(), folds_before + (fold_first ? 1 : 0));
    if (!fold_first) {
      EXPECT_EQ(flat(buf.checkpoint()), flat(checkpoint_before));
    }
    expect_close(ow, rows(all.o, d, n, Tw), d, n + Tw, "window outputs");
    const int fill_before_accept = buf.fill();
    buf.accept(m);
    EXPECT_EQ(buf.fill(), (fill_before_accept + m) % C);
    const Truth upto = recurrent_truth(concat(prefix, gdn_slice_tokens(window, 0, m)), s0);
    expect_close(flat(buf.state()), flat(upto.state), d, n + m, "state after accept");
    buf.decode(gdn_cast_tokens<T>(next), 0, o.data());
    const Truth after = recurrent_truth(next, upto.state);
    expect_close(o, after.o, d, n + m + 1, "decode after accept");
  }
}

TEST(GdnVerifyKVBuffer, EveryWindowAndAcceptedLength) {
  const GdnDims d{2, 4, 16, 24};
  for (int C : {1, 2, 3, 8, 16})
    for (int Tw = 1; Tw <= std::min(8, C); ++Tw)
      for (int n : {0, C / 2, C - 1, C + 1})
        for (BufferVariant var : kVariants) {
          const uint64_t seed = 1000 * C + 100 * Tw + n;
          check_chain_verify<double>(d, C, n, Tw, var, seed);
          if (Tw % 3 == 1) check_chain_verify<float>(d, C, n, Tw, var, seed);
        }
}

TEST(GdnVerifyKVBuffer, WideHeadsAndGqa) {
  for (const GdnDims d : {GdnDims{1, 2, 128, 64}, GdnDims{1, 1, 64, 128}})
    for (BufferVariant var : kVariants) check_chain_verify<double>(d, 8, 6, 4, var, d.K);
}

// The classic baseline: T intermediate states, each the recurrence's state, and the commit.
TEST(GdnVerifyClassic, IntermediateStatesAndCommit) {
  const GdnDims d{1, 2, 16, 24};
  for (int Tw = 1; Tw <= 8; ++Tw) {
    const Problem p = make_problem(d, Tw, 400 + Tw);
    for (int m = 0; m <= Tw; ++m) {
      GdnState<double> s = p.s0;
      std::vector<double> o;
      std::vector<GdnState<double>> states;
      gdn_verify_classic_window(p.x, m, s, o, states);
      ASSERT_EQ(int(states.size()), Tw);
      EXPECT_LE(max_rel_err(o, p.truth.o), 1e-13);
      for (int i = 0; i < Tw; ++i) {
        const Truth ti = recurrent_truth(gdn_slice_tokens(p.x, 0, i + 1), p.s0);
        EXPECT_LE(max_rel_err(flat(states[i]), flat(ti.state)), 1e-13) << "state " << i;
      }
      const std::vector<double> want = m == 0 ? flat(p.s0) : flat(states[m - 1]);
      EXPECT_EQ(flat(s), want) << "commit of m=" << m;
    }
  }
}

// Whole-sequence drivers: rounds of T drafts accepting `accept` each; outputs and final state are
// the recurrence's whatever the schedule.
TEST(GdnVerifyDrivers, MatchRecurrent) {
  const GdnDims d{2, 4, 16, 24};
  for (int L : kLengths) {
    const Problem p = make_problem(d, L, 500 + L);
    for (int C : {3, 8, 16})
      for (int Tw : {1, 2, 3, 5, 8}) {
        if (Tw > C) continue;
        for (int accept : {1, (Tw + 1) / 2, Tw}) {
          const std::string what = "C=" + std::to_string(C) + " T=" + std::to_string(Tw) +
                                   " accept=" + std::to_string(accept);
          for (BufferVariant var : kVariants) {
            GdnState<double> s = p.s0;
            std::vector<double> o;
            gdn_verify_kvbuffer(p.x, C, var, Tw, accept, s, o);
            expect_close(o, p.truth.o, d, L, "verify kvbuffer o " + what);
            expect_close(flat(s), flat(p.truth.state), d, L, "verify kvbuffer state " + what);
          }
          GdnState<double> s = p.s0;
          std::vector<double> o;
          gdn_verify_classic(p.x, Tw, accept, s, o);
          expect_close(o, p.truth.o, d, L, "verify classic o " + what);
          expect_close(flat(s), flat(p.truth.state), d, L, "verify classic state " + what);
        }
      }
  }
}

// Random parents: p(i) in 0..i-1.
std::vector<int> random_tree(int nodes, std::mt19937_64& rng) {
  std::vector<int> parents(nodes);
  for (int i = 1; i <= nodes; ++i) parents[i - 1] = std::uniform_int_distribution<int>(0, i - 1)(rng);
  return parents;
}
std::vector<int> root_path(const std::vector<int>& parents, int node) {
  std::vector<int> path;
  for (int p = node; p > 0; p = parents[p - 1]) path.insert(path.begin(), p);
  return path;
}
GdnTokens<double> path_tokens(const GdnTokens<double>& nodes, const std::vector<int>& path) {
  GdnTokens<double> seq = gdn_slice_tokens(nodes, 0, 0);
  for (int p : path) seq = concat(seq, gdn_slice_tokens(nodes, p - 1, 1));
  return seq;
}

// Tree verify: node i's output is the recurrence along buffer + root path of i; accepting a path
// leaves the state of that path; the buffer keeps working afterwards.
template <class T>
void check_tree(const GdnDims& d, int C, int n, int nodes_count, BufferVariant var, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const GdnTokens<double> prefix = make_random_gdn_tokens<double>(d, n, rng);
  const GdnTokens<double> nodes = make_random_gdn_tokens<double>(d, nodes_count, rng);
  const GdnTokens<double> next = make_random_gdn_tokens<double>(d, 1, rng);
  const GdnState<double> s0 = make_random_gdn_state<double>(d, rng);
  std::vector<int> parents;
  int depth = 0;
  do {  // depth must fit the buffer
    parents = random_tree(nodes_count, rng);
    depth = 0;
    for (int i = 1; i <= nodes_count; ++i) depth = std::max(depth, int(root_path(parents, i).size()));
  } while (depth > C);
  SCOPED_TRACE(std::string(variant_name(var)) + " " + type_name(T{}) + " C=" + std::to_string(C) +
               " n=" + std::to_string(n) + " nodes=" + std::to_string(nodes_count));
  GdnKVBuffer<T> buf(d, C, var, gdn_cast_state<T>(s0));
  std::vector<T> o(d.HV * d.V), ot;
  const GdnTokens<T> pt = gdn_cast_tokens<T>(prefix);
  for (int t = 0; t < n; ++t) buf.decode(pt, t, o.data());
  gdn_verify_tree(buf, gdn_cast_tokens<T>(nodes), parents, ot);
  for (int i = 1; i <= nodes_count; ++i) {
    const std::vector<int> path = root_path(parents, i);
    const Truth ti = recurrent_truth(concat(prefix, path_tokens(nodes, path)), s0);
    expect_close(rows(ot, d, i - 1, 1), rows(ti.o, d, ti.o.size() / (d.HV * d.V) - 1, 1), d,
                 n + int(path.size()), "tree node " + std::to_string(i));
  }
  const int leaf = std::uniform_int_distribution<int>(1, nodes_count)(rng);
  std::vector<int> path = root_path(parents, leaf);
  path.resize(std::uniform_int_distribution<int>(0, int(path.size()))(rng));
  buf.accept_path(path);
  const Truth upto = recurrent_truth(concat(prefix, path_tokens(nodes, path)), s0);
  expect_close(flat(buf.state()), flat(upto.state), d, n + int(path.size()), "state after path");
  buf.decode(gdn_cast_tokens<T>(next), 0, o.data());
  expect_close(o, recurrent_truth(next, upto.state).o, d, n + int(path.size()) + 1,
               "decode after path");
}

TEST(GdnVerifyTree, NodesMatchRootPaths) {
  const GdnDims d{2, 4, 16, 24};
  int seed = 0;
  for (int C : {4, 8, 16})
    for (int nodes : {1, 3, 6, 8, 12})
      for (int n : {0, 2, C - 1})
        for (BufferVariant var : kVariants) {
          check_tree<double>(d, C, n, nodes, var, ++seed);
          if (seed % 4 == 0) check_tree<float>(d, C, n, nodes, var, seed);
        }
}

// A chain given as a tree (p(i) = i - 1) is the chain verify.
TEST(GdnVerifyTree, ChainParentsEqualChainVerify) {
  const GdnDims d{1, 2, 16, 8};
  const Problem p = make_problem(d, 11, 77);
  for (BufferVariant var : kVariants) {
    GdnKVBuffer<double> a(d, 16, var, p.s0), b(d, 16, var, p.s0);
    std::vector<double> oa, ob, o(d.HV * d.V);
    for (int t = 0; t < 5; ++t) {
      a.decode(p.x, t, o.data());
      b.decode(p.x, t, o.data());
    }
    const GdnTokens<double> w = gdn_slice_tokens(p.x, 5, 6);
    a.verify(w, oa);
    b.verify(w, {0, 1, 2, 3, 4, 5}, ob);
    EXPECT_EQ(oa, ob);
    a.accept(4);
    b.accept_path({1, 2, 3, 4});
    EXPECT_EQ(flat(a.state()), flat(b.state()));
  }
}

// g <= -60 per token (products underflow: exp(G) reaches 0 in float32 after 2 tokens), beta
// exactly 0 or 1: every mode stays finite and agrees with the recurrence.
TEST(GdnExtremeGates, EveryModeFiniteAndExact) {
  for (const GdnDims d : {GdnDims{1, 2, 16, 24}, GdnDims{2, 2, 64, 16}})
    for (int L : {3, 17, 65}) {
      const Problem p = make_problem(d, L, 600 + L, GateRange::extreme());
      for (int chunk : {16, 64}) {
        check_chunk<double>(p, chunk);
        check_chunk<float>(p, chunk);
      }
      for (int C : {1, 3, 16})
        for (BufferVariant var : kVariants) {
          check_kvbuffer<double>(p, C, var);
          check_kvbuffer<float>(p, C, var);
          GdnState<double> s = p.s0;
          std::vector<double> o;
          gdn_verify_kvbuffer(p.x, C, var, std::min(C, 4), 2 > C ? 1 : 2, s, o);
          expect_close(o, p.truth.o, d, L, "verify extreme o");
          expect_close(flat(s), flat(p.truth.state), d, L, "verify extreme state");
        }
    }
}

// Gates far beyond float range when accumulated: G reaches -1e5 (exp(-G) would be +inf).
TEST(GdnExtremeGates, HugeCumulativeDecayNeverOverflows) {
  const GdnDims d{1, 1, 16, 16};
  const GateRange huge{-2000.0, -1000.0, 0.0, 1.0, 0.0, 0.0};
  const Problem p = make_problem(d, 100, 9, huge);
  for (BufferVariant var : kVariants) {
    GdnState<float> s = gdn_cast_state<float>(p.s0);
    std::vector<float> o;
    gdn_decode_kvbuffer(gdn_cast_tokens<float>(p.x), 64, var, s, o);
    for (float e : o) ASSERT_TRUE(std::isfinite(e));
    expect_close(o, p.truth.o, d, p.x.steps, "huge decay o");
    GdnState<float> sc = gdn_cast_state<float>(p.s0);
    gdn_prefill_chunk(gdn_cast_tokens<float>(p.x), 64, sc, o);
    expect_close(o, p.truth.o, d, p.x.steps, "huge decay chunk o");
  }
}

// Closed forms: beta = 0 everywhere leaves S_t = exp(G_t) S0 (nothing written); beta = 1 with
// g = -1000 (S decays to exactly 0) gives S_t = k_t v_t^T and o_t = (k_t . q_t) v_t.
TEST(GdnExtremeGates, ClosedFormsForBetaZeroAndOne) {
  const GdnDims d{1, 1, 16, 8};
  std::mt19937_64 rng(3);
  GdnTokens<double> x = make_random_gdn_tokens<double>(d, 10, rng);
  const GdnState<double> s0 = make_random_gdn_state<double>(d, rng);
  for (auto& b : x.beta) b = 0.0;
  double G = 0;
  for (double g : x.g) G += g;
  for (BufferVariant var : kVariants) {
    GdnState<double> s = s0;
    std::vector<double> o;
    gdn_decode_kvbuffer(x, 4, var, s, o);
    EXPECT_LE(max_rel_err(flat(s), flat(GdnState<double>{std::exp(G) * s0[0]})), 1e-14);
  }
  for (auto& b : x.beta) b = 1.0;
  for (auto& g : x.g) g = -1000.0;
  for (BufferVariant var : kVariants) {
    GdnState<double> s = s0;
    std::vector<double> o;
    gdn_decode_kvbuffer(x, 4, var, s, o);
    for (int t = 0; t < x.steps; ++t) {
      Eigen::Map<const Vec<double>> kr(&x.k[t * d.K], d.K), qr(&x.q[t * d.K], d.K);
      const Vec<double> k = kr / std::sqrt(kr.squaredNorm() + 1e-6);
      const Vec<double> q = qr / std::sqrt(qr.squaredNorm() + 1e-6) / std::sqrt(double(d.K));
      const Vec<double> want = k.dot(q) * Eigen::Map<const Vec<double>>(&x.v[t * d.V], d.V);
      const std::vector<double> w(want.data(), want.data() + d.V);
      EXPECT_LE(max_rel_err(rows(o, d, t, 1), w), 1e-14) << "token " << t;
    }
  }
}

TEST(GdnGates, RawGatePathValues) {
  // softplus(0) = ln 2; g = -exp(A_log) ln 2.
  EXPECT_NEAR(gdn_gate_g<double>(0.5, std::log(3.0), -0.5), -3.0 * std::log(2.0), 1e-15);
  EXPECT_NEAR(gdn_gate_g<double>(1.0, 0.0, 0.0), -std::log1p(std::exp(1.0)), 1e-15);
  EXPECT_DOUBLE_EQ(gdn_gate_g<double>(1000.0, 0.0, 0.0), -1000.0);  // no overflow in softplus
  EXPECT_LE(gdn_gate_g<float>(-1000.0f, 2.0f, 0.0f), 0.0f);
  EXPECT_TRUE(std::isfinite(gdn_gate_g<float>(1e4f, 3.0f, 1.0f)));
  EXPECT_DOUBLE_EQ(gdn_gate_beta<double>(0.0), 0.5);
  EXPECT_NEAR(gdn_gate_beta<double>(2.0), 1.0 / (1.0 + std::exp(-2.0)), 1e-16);
  EXPECT_EQ(gdn_gate_beta<float>(-1000.0f), 0.0f);
  EXPECT_EQ(gdn_gate_beta<float>(1000.0f), 1.0f);
}

TEST(GdnRandomInputs, RangesAndDeterminism) {
  const GdnDims d{2, 4, 16, 8};
  std::mt19937_64 a(42), b(42), c(43);
  const GateRange r = GateRange::extreme();
  const GdnTokens<double> x = make_random_gdn_tokens<double>(d, 200, a, r);
  EXPECT_EQ(x.q, make_random_gdn_tokens<double>(d, 200, b, r).q);
  EXPECT_NE(x.q, make_random_gdn_tokens<double>(d, 200, c, r).q);
  EXPECT_NO_THROW(gdn_validate(x));
  int zeros = 0, ones = 0;
  for (double g : x.g) EXPECT_TRUE(g >= -100.0 && g <= -60.0);
  for (double bt : x.beta) {
    zeros += bt == 0.0;
    ones += bt == 1.0;
  }
  EXPECT_GT(zeros, 100);  // 800 gates at p = 0.25 each
  EXPECT_GT(ones, 100);
  double sq = 0;
  for (double e : x.v) sq += e * e;
  EXPECT_NEAR(sq / x.v.size(), 1.0, 0.15);  // N(0, 1)
}

TEST(GdnBf16, RoundToNearestEven) {
  EXPECT_EQ(round_to_bf16(1.0), 1.0);
  EXPECT_EQ(round_to_bf16(1.0 + 0x1p-8), 1.0);                    // tie -> even (down)
  EXPECT_EQ(round_to_bf16(1.0 + 3 * 0x1p-8), 1.0 + 0x1p-6);       // tie -> even (up)
  EXPECT_EQ(round_to_bf16(1.0 + 0x1p-8 + 0x1p-20), 1.0 + 0x1p-7);  // above the tie
  EXPECT_EQ(round_to_bf16(-2.0 - 0x1p-7 - 0x1p-15), -2.0 - 0x1p-6);
  EXPECT_EQ(float_to_bf16_bits(1.0f), 0x3f80);
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(NAN))));
  std::mt19937_64 rng(1);
  const GdnTokens<double> x = make_random_gdn_tokens<double>({1, 2, 16, 8}, 5, rng);
  const GdnTokens<double> r = round_tokens_to_bf16(x);
  for (size_t i = 0; i < x.q.size(); ++i) {
    EXPECT_LE(std::abs(r.q[i] - x.q[i]), 0x1p-8 * std::abs(x.q[i]));
    EXPECT_EQ(round_to_bf16(r.q[i]), r.q[i]);  // idempotent: exactly a bf16 value
  }
  for (size_t i = 0; i < x.g.size(); ++i) EXPECT_EQ(r.g[i], double(float(x.g[i])));
}

}  // namespace
}  // namespace kvbuf::ref::test
