// GPU test (ctest label gpu) of the speculative-verify attention (PagedMultiQueryAttention, FlashInfer's
// batch prefill kernel over the paged KV cache): on random bf16 q and caches of several requests of
// ragged contexts, a shuffled page table, T = 1..5 tokens per request, head dims 128 and 256 and GQA
// groups 2, 4 and 16, every output element against a float64 softmax over the request's visible
// tokens (query t of a request of kv_len tokens sees the first kv_len - T + 1 + t: causal among the
// T). The output is poisoned (NaN) before the run.
// Tolerance from bf16: q, k and v are bf16 values the reference takes exactly and the scores
// accumulate in fp32, so the error comes from the bf16 roundings (2^-9 relative each) of the
// probabilities before the PV product, of the split-KV partial outputs, and of the output: per
// element |gpu - ref| <= 3 * 2^-9 sum_j p_j |v_j|, checked as 2 * 2^-8 sum_j p_j |v_j|. The same
// bound must reject the output of the non-causal attention (every draft seeing all T), or the test
// could not see a wrong mask.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bench/step/step_attention.h"
#include "kernels/common/cuda_check.h"
#include "kernels/common/device_buffer.h"

namespace kvbuf::step {
namespace {

constexpr int kPage = 16;

uint64_t test_seed() {
  const char* s = std::getenv("KVBUF_TEST_SEED");
  return s ? std::strtoull(s, nullptr, 10) : 20261203;
}

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

struct Case {
  int q_heads, kv_heads, head_dim;
};

// Random bf16 values in [-a, a], kept as bf16 (for the device) and as the doubles they are.
struct Bf16Values {
  std::vector<__nv_bfloat16> h;
  std::vector<double> d;
};
Bf16Values random_bf16(size_t n, double a, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(float(-a), float(a));
  Bf16Values v{std::vector<__nv_bfloat16>(n), std::vector<double>(n)};
  for (size_t i = 0; i < n; ++i) v.h[i] = __float2bfloat16(u(rng)), v.d[i] = double(__bfloat162float(v.h[i]));
  return v;
}

DeviceBuffer to_device(const std::vector<__nv_bfloat16>& h) {
  DeviceBuffer d(h.size() * sizeof(__nv_bfloat16));
  d.upload(h);
  return d;
}
DeviceBuffer to_device(const std::vector<int32_t>& h) {
  DeviceBuffer d(std::max<size_t>(h.size(), 1) * sizeof(int32_t));
  d.upload(h);
  return d;
}

// One run of T tokens per request over `contexts`; checks every output element. Returns whether
// FlashInfer's plan split the KV (partials merged after the kernel).
bool check_case(const Case& c, int T, const std::vector<int>& contexts, uint64_t seed) {
  const std::string what = "q heads " + std::to_string(c.q_heads) + ", kv heads " + std::to_string(c.kv_heads) +
                           ", head dim " + std::to_string(c.head_dim) + ", T " + std::to_string(T) + ", seed " +
                           std::to_string(seed) + " (KVBUF_TEST_SEED reruns it)";
  SCOPED_TRACE(what);
  std::mt19937_64 rng(seed);
  const int B = int(contexts.size()), D = c.head_dim, kvh = c.kv_heads, group = c.q_heads / c.kv_heads;
  // The page table: each request's pages, drawn from a shuffled pool with spare pages.
  std::vector<int32_t> indptr{0}, last;
  for (int ctx : contexts) {
    const int pages = (ctx + kPage - 1) / kPage;
    indptr.push_back(indptr.back() + pages);
    last.push_back(ctx - (pages - 1) * kPage);
  }
  const int pool_pages = indptr.back() + 3;
  std::vector<int32_t> pool(pool_pages);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  const std::vector<int32_t> indices(pool.begin(), pool.begin() + indptr.back());
  const size_t cache_elems = size_t(pool_pages) * kvh * kPage * D;
  const Bf16Values k = random_bf16(cache_elems, 1.0, rng), v = random_bf16(cache_elems, 1.0, rng);
  const size_t rows = size_t(B) * T, q_elems = rows * c.q_heads * D;
  const Bf16Values q = random_bf16(q_elems, 2.0, rng);  // sharper than uniform attention

  DeviceBuffer d_k = to_device(k.h), d_v = to_device(v.h), d_q = to_device(q.h);
  DeviceBuffer d_indptr = to_device(indptr), d_indices = to_device(indices), d_last = to_device(last);
  DeviceBuffer d_o(q_elems * sizeof(__nv_bfloat16));
  d_o.poison();
  const PagedMultiQueryShape shape{B, T, c.q_heads, kvh, D, kPage};
  PagedMultiQueryAttention attn(shape, indptr, d_indptr.as<int32_t>(), d_indices.as<int32_t>(),
                                d_last.as<int32_t>(), nullptr);
  attn.run(d_q.as<__nv_bfloat16>(), d_k.as<__nv_bfloat16>(), d_v.as<__nv_bfloat16>(), d_o.as<__nv_bfloat16>(),
           nullptr);
  KVB_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<__nv_bfloat16> o_h(q_elems);
  KVB_CUDA_CHECK(cudaMemcpy(o_h.data(), d_o.as<void>(), q_elems * sizeof(__nv_bfloat16), cudaMemcpyDeviceToHost));

  // Token j of request r, kv head h in the cache [pages, kv heads, page tokens, head dim].
  auto at = [&](int r, int j, int h) {
    return ((size_t(indices[indptr[r] + j / kPage]) * kvh + h) * kPage + j % kPage) * D;
  };
  // softmax(q k / sqrt(D)) v over the first `visible` tokens, and sum_j p_j |v_j| per dim.
  auto attend = [&](const double* qv, int r, int h, int visible, std::vector<double>& out, std::vector<double>& mag) {
    std::vector<double> s(visible);
    for (int j = 0; j < visible; ++j) {
      const double* kj = &k.d[at(r, j, h)];
      double dot = 0;
      for (int e = 0; e < D; ++e) dot += qv[e] * kj[e];
      s[j] = dot / std::sqrt(double(D));
    }
    const double mx = *std::max_element(s.begin(), s.end());
    double sum = 0;
    for (double& x : s) sum += (x = std::exp(x - mx));
    out.assign(D, 0), mag.assign(D, 0);
    for (int j = 0; j < visible; ++j) {
      const double* vj = &v.d[at(r, j, h)];
      for (int e = 0; e < D; ++e) out[e] += s[j] / sum * vj[e], mag[e] += s[j] / sum * std::abs(vj[e]);
    }
  };
  double worst = 0;              // largest |gpu - ref| / tol of the causal reference
  double non_causal_worst = 0;   // the same against the non-causal reference
  std::vector<double> ref, mag, ref_nc, mag_nc;
  for (int r = 0; r < B; ++r)
    for (int t = 0; t < T; ++t)
      for (int hq = 0; hq < c.q_heads; ++hq) {
        const size_t row = (size_t(r) * T + t) * c.q_heads + hq;
        const double* qv = &q.d[row * D];
        attend(qv, r, hq / group, contexts[r] - T + 1 + t, ref, mag);
        attend(qv, r, hq / group, contexts[r], ref_nc, mag_nc);
        for (int e = 0; e < D; ++e) {
          const double got = double(__bfloat162float(o_h[row * D + e]));
          if (!std::isfinite(got)) {
            ADD_FAILURE() << "request " << r << " token " << t << " head " << hq << " dim " << e
                          << ": not written (poison) or not finite";
            return attn.split_kv();
          }
          const double tol = 2.0 / 256 * mag[e] + 1e-6;
          const double err = std::abs(got - ref[e]) / tol;
          if (err > 1)
            ADD_FAILURE() << "request " << r << " (context " << contexts[r] << ") token " << t << " head " << hq
                          << " dim " << e << ": gpu " << got << ", float64 " << ref[e] << ", tolerance " << tol
                          << " (FlashInfer query tile " << attn.cta_tile_q() << ", split KV " << attn.split_kv() << ")";
          worst = std::max(worst, err);
          non_causal_worst = std::max(non_causal_worst, std::abs(got - ref_nc[e]) / tol);
        }
        if (::testing::Test::HasFailure()) return attn.split_kv();
      }
  EXPECT_LE(worst, 1.0);
  if (T > 1)
    EXPECT_GT(non_causal_worst, 1.0) << "the bound cannot tell the causal from the non-causal attention";
  return attn.split_kv();
}

// Contexts of 4 requests for T tokens: one of exactly T tokens (its first draft sees only the
// context's first token), within a page, across page boundaries, several pages.
std::vector<int> ragged_contexts(int T) { return {T, 13, 16 + T + 7, 70 + 3 * T}; }

TEST(StepVerifyAttention, MatchesFloat64SoftmaxCausalAmongDrafts) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  uint64_t seed = test_seed();
  for (const Case& c : {Case{4, 2, 128}, Case{8, 2, 256}, Case{32, 2, 128}, Case{16, 1, 256}})
    for (int T = 1; T <= 5; ++T) {
      check_case(c, T, ragged_contexts(T), ++seed);
      if (HasFailure()) return;
    }
}

// Both sides of FlashInfer's split: 24 requests of long ragged contexts leave blocks free, so the
// plan splits their KV and merges the partials; 400 requests (more than any GPU's SMs, with 2 KV
// heads) fill the GPU unsplit, the runner's case at batch 256 and more.
TEST(StepVerifyAttention, MatchesFloat64SoftmaxSplitAndUnsplit) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  std::vector<int> few, many;
  for (int r = 0; r < 24; ++r) few.push_back(40 + 37 * r);
  for (int r = 0; r < 400; ++r) many.push_back(4 + (r * 7) % 45);
  EXPECT_TRUE(check_case(Case{8, 2, 256}, 4, few, test_seed() + 101)) << "expected a split plan";
  EXPECT_FALSE(check_case(Case{8, 2, 256}, 4, many, test_seed() + 102)) << "expected an unsplit plan";
}

TEST(StepVerifyAttention, RejectsWhatIsNotCompiledOrDoesNotFit) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  const std::vector<int32_t> indptr{0, 1};
  DeviceBuffer table(64);
  int32_t* t = table.as<int32_t>();
  EXPECT_THROW(PagedMultiQueryAttention(PagedMultiQueryShape{1, 2, 4, 2, 64, kPage}, indptr, t, t, t, nullptr),
               std::invalid_argument);  // head dim 64
  EXPECT_THROW(PagedMultiQueryAttention(PagedMultiQueryShape{1, 17, 4, 2, 128, kPage}, indptr, t, t, t, nullptr),
               std::invalid_argument);  // 17 tokens in one page
}

}  // namespace
}  // namespace kvbuf::step
