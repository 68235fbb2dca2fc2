#include "reference/decoder_layers.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace kvbuf::ref {
namespace {

void need(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("decoder layer reference: " + what);
}
double silu(double x) { return x / (1 + std::exp(-x)); }
double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

// RMSNorm of n values at x (stride 1) with weights w, into out.
void rms(const double* x, int n, const double* w, double eps, double* out) {
  double ss = 0;
  for (int i = 0; i < n; ++i) ss += x[i] * x[i];
  const double inv = 1 / std::sqrt(ss / n + eps);
  for (int i = 0; i < n; ++i) out[i] = x[i] * inv * w[i];
}

}  // namespace

DVec rms_norm_rows(const DVec& x, int rows, const DVec& w, double eps) {
  const int d = int(w.size());
  need(rows >= 0 && x.size() == size_t(rows) * d, "rms_norm_rows: x is not rows x |w|");
  DVec out(x.size());
  for (int r = 0; r < rows; ++r) rms(&x[size_t(r) * d], d, w.data(), eps, &out[size_t(r) * d]);
  return out;
}

// The short causal conv (kernel 4) of one row's channels over its window of the last 3 inputs, SiLU
// after; the window shifts in the new input. x: the row's conv_dim inputs.
DVec causal_conv_silu(const double* x, int conv_dim, const DVec& kernel, double* windows) {
  DVec c(conv_dim);
  for (int ch = 0; ch < conv_dim; ++ch) {
    double* win = &windows[size_t(ch) * 3];
    const double* k = &kernel[size_t(ch) * 4];
    c[ch] = silu(k[0] * win[0] + k[1] * win[1] + k[2] * win[2] + k[3] * x[ch]);
    win[0] = win[1], win[1] = win[2], win[2] = x[ch];
  }
  return c;
}

DVec linear_rows(const DVec& x, int rows, const DVec& W, int out) {
  need(rows > 0 && out > 0 && x.size() % rows == 0, "linear_rows: x is not rows x in");
  const size_t in = x.size() / rows;
  need(W.size() == size_t(out) * in, "linear_rows: W is not out x in");
  DVec y(size_t(rows) * out);
  for (int r = 0; r < rows; ++r)
    for (int o = 0; o < out; ++o) {
      double s = 0;
      for (size_t i = 0; i < in; ++i) s += x[r * in + i] * W[o * in + i];
      y[size_t(r) * out + o] = s;
    }
  return y;
}

void gdn_mixer_decode(const GdnDims& dims, int d, const GdnMixerWeights& w, double eps, DVec& hidden, int rows,
                      DVec& windows, std::vector<GdnState<double>>& states) {
  gdn_validate_dims(dims);
  const int keys = dims.H * dims.K, values = dims.HV * dims.V, HV = dims.HV;
  const int conv_dim = 2 * keys + values, width = 2 * keys + 2 * values + 2 * HV;
  need(hidden.size() == size_t(rows) * d && w.norm.size() == size_t(d), "gdn mixer: hidden or norm size");
  need(w.conv.size() == size_t(conv_dim) * 4 && windows.size() == size_t(rows) * conv_dim * 3 &&
           int(states.size()) == rows && w.out_norm.size() == size_t(dims.V) && w.A_log.size() == size_t(HV) &&
           w.dt_bias.size() == size_t(HV),
       "gdn mixer: conv, window, state or gate sizes");
  const DVec proj = linear_rows(rms_norm_rows(hidden, rows, w.norm, eps), rows, w.in_proj, width);
  DVec gated(size_t(rows) * values);
  for (int r = 0; r < rows; ++r) {
    const double* p = &proj[size_t(r) * width];
    // Causal conv over q, k, v.
    const DVec c = causal_conv_silu(p, conv_dim, w.conv, &windows[size_t(r) * conv_dim * 3]);
    GdnTokens<double> x;
    x.dims = dims, x.steps = 1;
    x.q.assign(c.begin(), c.begin() + keys);
    x.k.assign(c.begin() + keys, c.begin() + 2 * keys);
    x.v.assign(c.begin() + 2 * keys, c.end());
    for (int h = 0; h < HV; ++h) {
      x.beta.push_back(gdn_gate_beta(p[2 * keys + 2 * values + h]));
      x.g.push_back(gdn_gate_g(p[2 * keys + 2 * values + HV + h], w.A_log[h], w.dt_bias[h]));
    }
    DVec o;
    gdn_decode_recurrent(x, states[r], o);
    // Gated RMSNorm per value head: norm(o) * w * silu(z).
    for (int h = 0; h < HV; ++h) {
      double* g = &gated[size_t(r) * values + size_t(h) * dims.V];
      rms(&o[size_t(h) * dims.V], dims.V, w.out_norm.data(), eps, g);
      for (int v = 0; v < dims.V; ++v) g[v] *= silu(p[2 * keys + values + h * dims.V + v]);
    }
  }
  const DVec out = linear_rows(gated, rows, w.out_proj, d);
  for (size_t i = 0; i < hidden.size(); ++i) hidden[i] += out[i];
}

void mamba2_mixer_decode(const Mamba2Dims& dims, int d, int norm_group, const Mamba2MixerWeights& w, double eps,
                         DVec& hidden, int rows, DVec& windows, std::vector<Mamba2State<double>>& states) {
  mamba2_validate_dims(dims);
  const int values = dims.NH * dims.P, keys = dims.G * dims.N, NH = dims.NH;
  const int conv_dim = values + 2 * keys, width = 2 * values + 2 * keys + NH;
  need(hidden.size() == size_t(rows) * d && w.conv.size() == size_t(conv_dim) * 4 &&
           windows.size() == size_t(rows) * conv_dim * 3 && int(states.size()) == rows &&
           w.out_norm.size() == size_t(values) && norm_group > 0 && values % norm_group == 0,
       "mamba2 mixer: hidden, conv, window, state or norm sizes");
  const DVec proj = linear_rows(rms_norm_rows(hidden, rows, w.norm, eps), rows, w.in_proj, width);
  DVec normed(size_t(rows) * values);
  for (int r = 0; r < rows; ++r) {
    const double* p = &proj[size_t(r) * width];
    const DVec c = causal_conv_silu(p + values, conv_dim, w.conv, &windows[size_t(r) * conv_dim * 3]);
    Mamba2Tokens<double> t;
    t.dims = dims, t.steps = 1;
    t.x.assign(c.begin(), c.begin() + values);
    t.B.assign(c.begin() + values, c.begin() + values + keys);
    t.C.assign(c.begin() + values + keys, c.end());
    for (int h = 0; h < NH; ++h) {
      const double raw = p[2 * values + 2 * keys + h] + w.dt_bias[h];
      t.dt.push_back(raw > 20 ? raw : std::log1p(std::exp(raw)));
    }
    t.A = w.A, t.D = w.D;
    DVec y;
    mamba2_decode_recurrent(t, states[r], y);
    for (int i = 0; i < values; ++i) y[i] *= silu(p[i]);
    for (int g = 0; g < values / norm_group; ++g) {
      const int at = g * norm_group;
      rms(&y[at], norm_group, &w.out_norm[at], eps, &normed[size_t(r) * values + at]);
    }
  }
  const DVec out = linear_rows(normed, rows, w.out_proj, d);
  for (size_t i = 0; i < hidden.size(); ++i) hidden[i] += out[i];
}

void attention_mixer_decode(const AttentionDims& a, int d, const AttentionMixerWeights& w, double eps, DVec& hidden,
                            int rows, int pos, std::vector<DVec>& keys, std::vector<DVec>& values) {
  const int D = a.head_dim, qw = a.q_heads * D, kvw = a.kv_heads * D;
  need(a.q_heads > 0 && a.kv_heads > 0 && a.q_heads % a.kv_heads == 0 && D > 0 && a.rot_dim % 2 == 0 &&
           a.rot_dim <= D,
       "attention: heads, head dim or rotary dims");
  need(hidden.size() == size_t(rows) * d && int(keys.size()) == rows && int(values.size()) == rows &&
           w.q_norm.size() == size_t(D) && w.k_norm.size() == size_t(D),
       "attention: hidden, cache or norm sizes");
  const int width = qw * (a.output_gate ? 2 : 1) + 2 * kvw;
  const DVec proj = linear_rows(rms_norm_rows(hidden, rows, w.norm, eps), rows, w.qkv_proj, width);
  // NeoX rotary embedding of the first rot_dim dims at position pos.
  auto rope = [&](double* x) {
    const int half = a.rot_dim / 2;
    for (int i = 0; i < half; ++i) {
      const double angle = pos * std::pow(a.theta, -2.0 * i / a.rot_dim);
      const double x1 = x[i], x2 = x[i + half];
      x[i] = x1 * std::cos(angle) - x2 * std::sin(angle);
      x[i + half] = x2 * std::cos(angle) + x1 * std::sin(angle);
    }
  };
  DVec o(size_t(rows) * qw);
  const int group = a.q_heads / a.kv_heads;
  for (int r = 0; r < rows; ++r) {
    const double* p = &proj[size_t(r) * width];
    const double* kin = p + qw * (a.output_gate ? 2 : 1);
    need(keys[r].size() == size_t(pos) * kvw && values[r].size() == size_t(pos) * kvw,
         "attention: cache of row " + std::to_string(r) + " is not pos tokens");
    DVec k(kvw), q(qw);
    for (int h = 0; h < a.kv_heads; ++h) {
      rms(kin + h * D, D, w.k_norm.data(), eps, &k[size_t(h) * D]);
      rope(&k[size_t(h) * D]);
    }
    keys[r].insert(keys[r].end(), k.begin(), k.end());
    values[r].insert(values[r].end(), kin + kvw, kin + 2 * kvw);
    const int tokens = pos + 1;
    for (int h = 0; h < a.q_heads; ++h) {
      double* qh = &q[size_t(h) * D];
      rms(p + h * D, D, w.q_norm.data(), eps, qh);
      rope(qh);
      const int kh = h / group;
      DVec s(tokens);
      double mx = -1e300;
      for (int t = 0; t < tokens; ++t) {
        double dot = 0;
        for (int i = 0; i < D; ++i) dot += qh[i] * keys[r][(size_t(t) * a.kv_heads + kh) * D + i];
        s[t] = dot / std::sqrt(double(D));
        mx = std::max(mx, s[t]);
      }
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - mx));
      double* oh = &o[size_t(r) * qw + size_t(h) * D];
      for (int i = 0; i < D; ++i) {
        double acc = 0;
        for (int t = 0; t < tokens; ++t) acc += s[t] * values[r][(size_t(t) * a.kv_heads + kh) * D + i];
        oh[i] = acc / sum;
        if (a.output_gate) oh[i] *= sigmoid(p[qw + h * D + i]);
      }
    }
  }
  const DVec out = linear_rows(o, rows, w.o_proj, d);
  for (size_t i = 0; i < hidden.size(); ++i) hidden[i] += out[i];
}

void mlp_decode(int d, int ffn, bool gated, const MlpWeights& w, double eps, DVec& hidden, int rows) {
  need(hidden.size() == size_t(rows) * d && ffn > 0, "mlp: hidden size or ffn");
  const int up_rows = gated ? 2 * ffn : ffn;
  const DVec up = linear_rows(rms_norm_rows(hidden, rows, w.norm, eps), rows, w.up, up_rows);
  DVec act(size_t(rows) * ffn);
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < ffn; ++i) {
      const double* u = &up[size_t(r) * up_rows];
      const double relu = std::max(u[i], 0.0);
      act[size_t(r) * ffn + i] = gated ? silu(u[i]) * u[ffn + i] : relu * relu;
    }
  const DVec out = linear_rows(act, rows, w.down, d);
  for (size_t i = 0; i < hidden.size(); ++i) hidden[i] += out[i];
}

void moe_decode(int d, int experts, int k, int expert_ffn, int shared_ffn, bool gated, const MoeWeights& w,
                const std::vector<int>& ids, double eps, DVec& hidden, int rows) {
  const int up_rows = gated ? 2 * expert_ffn : expert_ffn;
  need(hidden.size() == size_t(rows) * d && ids.size() == size_t(rows) * k && k >= 1 && k <= experts &&
           w.router.size() == size_t(experts) * d &&
           w.experts_up.size() == size_t(experts) * up_rows * d &&
           w.experts_down.size() == size_t(experts) * d * expert_ffn,
       "moe: hidden, ids, router or expert sizes");
  const DVec x = rms_norm_rows(hidden, rows, w.norm, eps);
  const DVec logits = linear_rows(x, rows, w.router, experts);
  // One MLP on one row: up [up_rows, d] and down [d, ffn] blocks of the given arrays.
  auto mlp_row = [&](const double* xr, const double* up, const double* down, int ffn, double scale, double* out) {
    const int rows_up = gated ? 2 * ffn : ffn;
    DVec u(rows_up), act(ffn);
    for (int o = 0; o < rows_up; ++o) {
      double s = 0;
      for (int i = 0; i < d; ++i) s += xr[i] * up[size_t(o) * d + i];
      u[o] = s;
    }
    for (int i = 0; i < ffn; ++i) {
      const double relu = std::max(u[i], 0.0);
      act[i] = gated ? silu(u[i]) * u[ffn + i] : relu * relu;
    }
    for (int o = 0; o < d; ++o) {
      double s = 0;
      for (int i = 0; i < ffn; ++i) s += act[i] * down[size_t(o) * ffn + i];
      out[o] += scale * s;
    }
  };
  for (int r = 0; r < rows; ++r) {
    const double* xr = &x[size_t(r) * d];
    double top = -1e300, sum = 0;
    for (int j = 0; j < k; ++j) {
      const int e = ids[size_t(r) * k + j];
      need(e >= 0 && e < experts, "moe: expert id out of range");
      top = std::max(top, logits[size_t(r) * experts + e]);
    }
    for (int j = 0; j < k; ++j) sum += std::exp(logits[size_t(r) * experts + ids[size_t(r) * k + j]] - top);
    double* h = &hidden[size_t(r) * d];
    for (int j = 0; j < k; ++j) {
      const int e = ids[size_t(r) * k + j];
      const double weight = std::exp(logits[size_t(r) * experts + e] - top) / sum;
      mlp_row(xr, &w.experts_up[size_t(e) * up_rows * d], &w.experts_down[size_t(e) * d * expert_ffn], expert_ffn,
              weight, h);
    }
    if (shared_ffn > 0) mlp_row(xr, w.shared_up.data(), w.shared_down.data(), shared_ffn, 1.0, h);
  }
}

}  // namespace kvbuf::ref
