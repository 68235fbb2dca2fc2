// The decoder-block references (reference/decoder_layers.h) against what they must reduce to:
// attention over one token returns its (gated) value, an MoE of one expert chosen by every token is
// that expert's MLP, a GDN mixer runs gdn_decode_recurrent on its conv outputs, bad sizes throw.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "reference/decoder_layers.h"

namespace kvbuf::ref {
namespace {

DVec random_vec(size_t n, std::mt19937_64& rng, double scale = 1) {
  std::uniform_real_distribution<double> u(-scale, scale);
  DVec v(n);
  for (double& x : v) x = u(rng);
  return v;
}
double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

TEST(DecoderLayers, AttentionOverOneTokenReturnsItsGatedValue) {
  std::mt19937_64 rng(1);
  const int d = 8, rows = 2;
  const AttentionDims a{4, 2, 4, 2, 1e4, true};
  const int qw = a.q_heads * a.head_dim, kvw = a.kv_heads * a.head_dim;
  AttentionMixerWeights w{DVec(d, 1.0), random_vec(size_t(2 * qw + 2 * kvw) * d, rng), DVec(a.head_dim, 1.0),
                          DVec(a.head_dim, 1.0), DVec(size_t(d) * qw, 0.0)};
  for (int i = 0; i < d; ++i) w.o_proj[size_t(i) * qw + i] = 1;  // hidden[i] += o[i], i < d
  const DVec hidden0 = random_vec(size_t(rows) * d, rng);
  DVec hidden = hidden0;
  std::vector<DVec> keys(rows), values(rows);
  attention_mixer_decode(a, d, w, 1e-6, hidden, rows, 0, keys, values);
  const DVec proj = linear_rows(rms_norm_rows(hidden0, rows, w.norm, 1e-6), rows, w.qkv_proj, 2 * qw + 2 * kvw);
  for (int r = 0; r < rows; ++r) {
    ASSERT_EQ(values[r].size(), size_t(kvw));
    for (int i = 0; i < d; ++i) {
      const int h = i / a.head_dim, c = i % a.head_dim, kh = h / (a.q_heads / a.kv_heads);
      const double v = proj[size_t(r) * (2 * qw + 2 * kvw) + 2 * qw + kvw + kh * a.head_dim + c];
      const double gate = sigmoid(proj[size_t(r) * (2 * qw + 2 * kvw) + qw + i]);
      EXPECT_NEAR(hidden[size_t(r) * d + i] - hidden0[size_t(r) * d + i], v * gate, 1e-12) << r << " " << i;
    }
  }
}

TEST(DecoderLayers, MoeOfOneExpertIsThatExpertsMlp) {
  std::mt19937_64 rng(2);
  const int d = 6, ffn = 5, rows = 3;
  for (bool gated : {true, false}) {
    const int up = gated ? 2 * ffn : ffn;
    MlpWeights mlp{random_vec(d, rng, 2), random_vec(size_t(up) * d, rng), random_vec(size_t(d) * ffn, rng)};
    // Three experts, every token routed to expert 1 only (k = 1: weight 1), expert 1 = the MLP.
    MoeWeights moe{mlp.norm, random_vec(size_t(3) * d, rng), random_vec(size_t(3) * up * d, rng),
                   random_vec(size_t(3) * d * ffn, rng), {}, {}};
    std::copy(mlp.up.begin(), mlp.up.end(), moe.experts_up.begin() + size_t(up) * d);
    std::copy(mlp.down.begin(), mlp.down.end(), moe.experts_down.begin() + size_t(d) * ffn);
    const DVec hidden0 = random_vec(size_t(rows) * d, rng);
    DVec a = hidden0, b = hidden0;
    mlp_decode(d, ffn, gated, mlp, 1e-6, a, rows);
    moe_decode(d, 3, 1, ffn, 0, gated, moe, std::vector<int>(rows, 1), 1e-6, b, rows);
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-12);
    EXPECT_THROW(moe_decode(d, 3, 1, ffn, 0, gated, moe, std::vector<int>(rows, 3), 1e-6, b, rows),
                 std::invalid_argument);
  }
}

TEST(DecoderLayers, GdnMixerRunsTheRecurrenceOnItsConvOutputs) {
  std::mt19937_64 rng(3);
  const GdnDims dims{1, 2, 4, 4};
  const int d = 5, rows = 2, keys = 4, values = 8, conv_dim = 2 * keys + values;
  const int width = 2 * keys + 2 * values + 2 * dims.HV;
  GdnMixerWeights w{DVec(d, 1.0), random_vec(size_t(width) * d, rng), DVec(size_t(conv_dim) * 4, 0.0),
                    random_vec(dims.HV, rng), random_vec(dims.HV, rng), DVec(dims.V, 1.0),
                    DVec(size_t(d) * values, 0.0)};
  for (int c = 0; c < conv_dim; ++c) w.conv[size_t(c) * 4 + 3] = 1;  // the conv passes the token through
  DVec hidden = random_vec(size_t(rows) * d, rng);
  const DVec hidden0 = hidden;
  DVec windows = random_vec(size_t(rows) * conv_dim * 3, rng);
  std::vector<GdnState<double>> states(rows, gdn_zero_state<double>(dims));
  for (auto& s : states)
    for (auto& m : s) m = Mat<double>::Random(dims.K, dims.V);
  std::vector<GdnState<double>> expected = states;
  gdn_mixer_decode(dims, d, w, 1e-6, hidden, rows, windows, states);
  EXPECT_EQ(hidden, hidden0);  // out_proj zero
  const DVec proj = linear_rows(rms_norm_rows(hidden0, rows, w.norm, 1e-6), rows, w.in_proj, width);
  for (int r = 0; r < rows; ++r) {
    const double* p = &proj[size_t(r) * width];
    auto silu = [](double x) { return x / (1 + std::exp(-x)); };
    GdnTokens<double> x;
    x.dims = dims, x.steps = 1;
    for (int c = 0; c < conv_dim; ++c) (c < keys ? x.q : c < 2 * keys ? x.k : x.v).push_back(silu(p[c]));
    for (int h = 0; h < dims.HV; ++h) {
      x.beta.push_back(gdn_gate_beta(p[2 * keys + 2 * values + h]));
      x.g.push_back(gdn_gate_g(p[2 * keys + 2 * values + dims.HV + h], w.A_log[h], w.dt_bias[h]));
    }
    DVec o;
    gdn_decode_recurrent(x, expected[r], o);
    for (int h = 0; h < dims.HV; ++h) EXPECT_LT((states[r][h] - expected[r][h]).norm(), 1e-12);
    for (int c = 0; c < conv_dim; ++c) EXPECT_EQ(windows[(size_t(r) * conv_dim + c) * 3 + 2], p[c]);
  }
  DVec short_windows(3);
  EXPECT_THROW(gdn_mixer_decode(dims, d, w, 1e-6, hidden, rows, short_windows, states), std::invalid_argument);
}

}  // namespace
}  // namespace kvbuf::ref
