// Reference cross-checks: every GDN mode against gdn_decode_recurrent (float64 ground truth) on
// fresh random inputs with a random checkpoint, in float64 and float32.
#include "reference/cross_checks.h"

#include <random>
#include <string>

#include "reference/gdn.h"
#include "reference/mamba2.h"
#include "reference/random_inputs.h"

namespace kvbuf::ref {
namespace {

template <class T>
std::vector<double> flat(const GdnState<T>& s) {
  std::vector<double> f;
  for (const auto& m : s)
    for (int i = 0; i < m.size(); ++i) f.push_back(double(m.data()[i]));
  return f;
}

const char* type_name(double) { return "f64"; }
const char* type_name(float) { return "f32"; }

// One mode run in precision T on the float64 inputs, compared with the float64 recurrence.
struct Case {
  GdnTokens<double> x;
  GdnState<double> s0;
  std::vector<double> o_ref;
  std::vector<double> s_ref;
  std::vector<CrossCheck>* out;

  template <class T, class Run>
  void check(const std::string& mode, Run run) {
    const GdnTokens<T> xt = gdn_cast_tokens<T>(x);
    GdnState<T> s = gdn_cast_state<T>(s0);
    std::vector<T> o;
    run(xt, s, o);
    const double tol = gdn_rel_tolerance<T>(x.dims.K, x.dims.V, x.steps);
    const std::string name = "gdn " + mode + " " + type_name(T{});
    const double eo = max_rel_err(o, o_ref), es = max_rel_err(flat(s), s_ref);
    out->push_back({name + " (o)", eo, tol, eo <= tol});
    out->push_back({name + " (state)", es, tol, es <= tol});
  }
};

template <class T>
void gdn_checks(Case& c, const GdnTokens<double>& x_direct, std::vector<CrossCheck>& out) {
  for (int chunk : {16, 32, 64})
    c.check<T>("chunk=" + std::to_string(chunk),
               [&](auto& x, auto& s, auto& o) { gdn_prefill_chunk(x, chunk, s, o); });
  for (BufferVariant var : {BufferVariant::Raw, BufferVariant::CachedU}) {
    const std::string vn = variant_name(var);
    c.check<T>("kvbuffer " + vn + " C=8",
               [&](auto& x, auto& s, auto& o) { gdn_decode_kvbuffer(x, 8, var, s, o); });
    c.check<T>("verify kvbuffer " + vn + " C=8 T=4 m=3",
               [&](auto& x, auto& s, auto& o) { gdn_verify_kvbuffer(x, 8, var, 4, 3, s, o); });
  }
  c.check<T>("verify classic T=4 m=2",
             [&](auto& x, auto& s, auto& o) { gdn_verify_classic(x, 4, 2, s, o); });

  // Direct mode starts from no state: its ground truth is the recurrence from zero.
  {
    Case d{x_direct, gdn_zero_state<double>(x_direct.dims), {}, {}, &out};
    GdnState<double> s_zero = d.s0;
    gdn_decode_recurrent(d.x, s_zero, d.o_ref);
    d.s_ref = flat(s_zero);
    for (BufferVariant var : {BufferVariant::Raw, BufferVariant::CachedU})
      d.check<T>(std::string("direct ") + variant_name(var) + " C=16",
                 [&](auto& x, auto& s, auto& o) { gdn_decode_direct(x, 16, var, s, o); });
  }

  // Tree verify on a half-full buffer: every node against the recurrence along its root path.
  {
    const GdnDims& d = c.x.dims;
    const int prefix = 5;
    const std::vector<int> parents = {0, 1, 1, 0, 2, 3, 5, 4};  // two roots, depth 4
    std::mt19937_64 rng(c.x.steps * 7919u);
    const GdnTokens<double> nodes = make_random_gdn_tokens<double>(d, int(parents.size()), rng);
    double worst = 0;
    for (BufferVariant var : {BufferVariant::Raw, BufferVariant::CachedU}) {
      GdnKVBuffer<T> buf(d, 8, var, gdn_cast_state<T>(c.s0));
      std::vector<T> o_prefix(size_t(d.HV) * d.V), o_tree;
      const GdnTokens<T> xt = gdn_cast_tokens<T>(c.x);
      for (int t = 0; t < prefix; ++t) buf.decode(xt, t, o_prefix.data());
      gdn_verify_tree(buf, gdn_cast_tokens<T>(nodes), parents, o_tree);
      for (int i = 1; i <= int(parents.size()); ++i) {
        std::vector<int> path;
        for (int p = i; p > 0; p = parents[p - 1]) path.insert(path.begin(), p);
        GdnTokens<double> seq = gdn_slice_tokens(c.x, 0, prefix);
        for (int p : path) {
          const GdnTokens<double> n = gdn_slice_tokens(nodes, p - 1, 1);
          seq.steps += 1;
          seq.q.insert(seq.q.end(), n.q.begin(), n.q.end());
          seq.k.insert(seq.k.end(), n.k.begin(), n.k.end());
          seq.v.insert(seq.v.end(), n.v.begin(), n.v.end());
          seq.g.insert(seq.g.end(), n.g.begin(), n.g.end());
          seq.beta.insert(seq.beta.end(), n.beta.begin(), n.beta.end());
        }
        GdnState<double> s = c.s0;
        std::vector<double> o_seq;
        gdn_decode_recurrent(seq, s, o_seq);
        const size_t row = size_t(d.HV) * d.V;
        const std::vector<double> want(o_seq.end() - row, o_seq.end());
        const std::vector<T> got(o_tree.begin() + (i - 1) * row, o_tree.begin() + i * row);
        worst = std::max(worst, max_rel_err(got, want));
      }
    }
    const double tol = gdn_rel_tolerance<T>(d.K, d.V, prefix + 4);
    out.push_back({std::string("gdn verify tree (8 nodes, both variants) ") + type_name(T{}) +
                       " (o)",
                   worst, tol, worst <= tol});
  }
}

}  // namespace

std::vector<CrossCheck> run_reference_cross_checks(uint64_t seed) {
  std::vector<CrossCheck> out;
  std::mt19937_64 rng(seed);
  const GdnDims d{2, 4, 32, 24};  // GQA ratio 2, K != V
  for (const auto& [gates, label] : {std::pair{GateRange::typical(), ""},
                                     std::pair{GateRange::extreme(), " extreme gates"}}) {
    Case c{make_random_gdn_tokens<double>(d, 45, rng, gates), make_random_gdn_state<double>(d, rng),
           {}, {}, &out};
    GdnState<double> s = c.s0;
    gdn_decode_recurrent(c.x, s, c.o_ref);
    c.s_ref = flat(s);
    const GdnTokens<double> x_direct = make_random_gdn_tokens<double>(d, 21, rng, gates);
    const size_t first = out.size();
    gdn_checks<double>(c, x_direct, out);
    gdn_checks<float>(c, x_direct, out);
    for (size_t i = first; i < out.size(); ++i) out[i].name += label;
  }
  const std::vector<CrossCheck> mamba = run_mamba2_cross_checks(seed);
  out.insert(out.end(), mamba.begin(), mamba.end());
  return out;
}

}  // namespace kvbuf::ref
