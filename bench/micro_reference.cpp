// Google Benchmark microbenchmarks of the CPU reference model: one decode step per iteration for
// one request and one linear layer (float32), recurrent against KVBuffer at several buffer sizes C.
// The counters carry the bytes model of sim/ (`model_bytes_per_step`, the bytes a GPU kernel moves
// for the same step, in bytes; no GB/s, since the reference is not bound by memory), so the
// reference's arithmetic cost can be read next to the traffic it stands for. CPU timings, not GPU
// claims: they size the tests and the export, nothing in results/.
//   <build>/bench/kvbuf_micro --benchmark_filter=Gdn
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "reference/gdn.h"
#include "reference/random_inputs.h"
#include "sim/bytes_model.h"

namespace {

using kvbuf::ref::GdnDims;
using kvbuf::ref::GdnTokens;

// Qwen3-Next-80B-A3B's linear layer at tensor parallel 8: H = 2, HV = 4, K = V = 128.
constexpr GdnDims kDims{2, 4, 128, 128};
constexpr int kSteps = 256;  // tokens drawn once; iterations cycle over them

kvbuf::LayerShape layer_shape() {
  kvbuf::LayerShape s;
  s.key_heads = kDims.H, s.value_heads = kDims.HV, s.head_k = kDims.K, s.head_v = kDims.V;
  return s;
}

GdnTokens<float> tokens() {
  std::mt19937_64 rng(7);
  return kvbuf::ref::make_random_gdn_tokens<float>(kDims, kSteps, rng);
}

void BM_GdnReferenceRecurrent(benchmark::State& state) {
  const GdnTokens<float> x = tokens();
  std::mt19937_64 rng(8);
  auto s = kvbuf::ref::make_random_gdn_state<float>(kDims, rng);
  std::vector<float> o;
  int t = 0;
  for (auto _ : state) {
    kvbuf::ref::gdn_decode_recurrent(kvbuf::ref::gdn_slice_tokens(x, t, 1), s, o);
    benchmark::DoNotOptimize(o.data());
    t = (t + 1) % kSteps;
  }
  const double bytes = kvbuf::bytes_recurrent(layer_shape(), {}).total_bytes();
  state.counters["model_bytes_per_step"] = bytes;
}

void BM_GdnReferenceKVBuffer(benchmark::State& state) {
  const int C = int(state.range(0));
  const GdnTokens<float> x = tokens();
  std::mt19937_64 rng(8);
  kvbuf::ref::GdnKVBuffer<float> buf(kDims, C, kvbuf::BufferVariant::CachedU,
                                     kvbuf::ref::make_random_gdn_state<float>(kDims, rng));
  std::vector<float> o(size_t(kDims.HV) * kDims.V);
  int t = 0;
  for (auto _ : state) {
    buf.decode(x, t, o.data());
    benchmark::DoNotOptimize(o.data());
    t = (t + 1) % kSteps;
  }
  const double bytes =
      kvbuf::bytes_kvbuffer_cycle(layer_shape(), {}, kvbuf::BufferVariant::CachedU, C).total_bytes();
  state.counters["model_bytes_per_step"] = bytes;
}

BENCHMARK(BM_GdnReferenceRecurrent);
BENCHMARK(BM_GdnReferenceKVBuffer)->ArgName("C")->Arg(1)->Arg(4)->Arg(16)->Arg(64);

}  // namespace

BENCHMARK_MAIN();
