// The KVBuffer commit of a model step's layers in one launch against one commit per layer
// (test_gdn_verify.cu, test_mamba2_verify.cu): two identical sets of layers, one committed layer by
// layer (the single-layer commit, which `kvbuf check` compares with the float64 reference), the
// other by one call; every byte of every layer's tensors expected equal, and the fills expected
// changed (so a commit that does nothing fails).
#pragma once
#include <gtest/gtest.h>

#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/cuda_check.h"
#include "kernels/common/device_buffer.h"

namespace kvbuf::checks {

// One layer's device tensors, filled from a random generator by what they hold.
struct CommitLayerTensors {
  std::vector<DeviceBuffer> tensors;
  // Appends a tensor of `count` elements, each gen(rng), and returns it.
  template <class T, class Gen>
  T* add(size_t count, std::mt19937_64& rng, Gen gen) {
    std::vector<T> h(count);
    for (auto& x : h) x = gen(rng);
    tensors.emplace_back(count * sizeof(T));
    tensors.back().upload(h);
    return tensors.back().template as<T>();
  }
  float* add_f32(size_t count, std::mt19937_64& rng, float lo, float hi) {
    return add<float>(count, rng, std::uniform_real_distribution<float>(lo, hi));
  }
  // bf16 values in [-1, 1] (the top half of an fp32's bits).
  __nv_bfloat16* add_bf16(size_t count, std::mt19937_64& rng) {
    std::uniform_real_distribution<float> unit(-1.f, 1.f);
    return reinterpret_cast<__nv_bfloat16*>(add<uint16_t>(count, rng, [&](std::mt19937_64& g) {
      const float x = unit(g);
      uint32_t u;
      std::memcpy(&u, &x, 4);
      return uint16_t(u >> 16);
    }));
  }
  int32_t* add_ints(size_t count, std::mt19937_64& rng, int below) {
    return add<int32_t>(count, rng, [&](std::mt19937_64& g) { return int32_t(g() % below); });
  }
  // win_base [rows, 2] as the verify leaves it: n0 in 0..C-T (0 when T == C, where accepting all T
  // fills the buffer), has_state 0 or 1, and where `in_buffer_flag` is given (Mamba-2's
  // kMamba2WindowInBuffer) that flag on rows with n0 + T < C half the time.
  int32_t* add_bases(int rows, int C, int T, std::mt19937_64& rng, int32_t in_buffer_flag = 0) {
    int i = 0, n0 = 0;
    return add<int32_t>(size_t(rows) * 2, rng, [&](std::mt19937_64& g) {
      if (i++ % 2 == 0) return n0 = int32_t(g() % (C - T + 1));
      const int32_t has_state = int32_t(g() % 2);
      return has_state | (in_buffer_flag && n0 + T < C && g() % 2 ? in_buffer_flag : 0);
    });
  }
};

// The rows' slots (one padding row) and accepted paths every layer shares: accept_len in 0..T,
// accept_nodes in 1..T (read only where Params::accept takes them).
struct CommitRows {
  static constexpr int kRows = 5, kSlots = 8, kTokens = 4;
  DeviceBuffer slot, len, nodes, io;  // io: a stand-in for the token inputs, which no commit reads
  explicit CommitRows(uint64_t seed) : slot(kRows * 4), len(kRows * 4), nodes(size_t(kRows) * kTokens * 4), io(64) {
    constexpr int T = kTokens;
    std::mt19937_64 rng(seed);
    std::vector<int32_t> l(kRows), n(size_t(kRows) * T);
    for (auto& m : l) m = int(rng() % (T + 1));
    for (auto& x : n) x = 1 + int(rng() % T);
    slot.upload(std::vector<int32_t>{3, -1, 0, 7, 5}), len.upload(l), nodes.upload(n);
  }
};

// For T = CommitRows::kTokens and C = 16 and C = T (the commit's fold), `layers` layers of two
// identical sets:
// make(tensors, rng, C, rows) allocates one layer's tensors from rng and returns its Params (the
// fills are tensor fill_index); both sets draw layer l from the same seed. commit_one(p, stream) and
// commit_all(params, count, stream) are the family's two commits.
template <class Params, class Make, class CommitOne, class CommitAll>
void expect_layers_commit_equals_per_layer(int layers, size_t fill_index, Make make, CommitOne commit_one,
                                           CommitAll commit_all) {
  for (const int C : {16, CommitRows::kTokens}) {
    SCOPED_TRACE("C = " + std::to_string(C));
    const CommitRows rows(7 + C);
    const uint64_t seed = 11 + C;
    std::deque<CommitLayerTensors> per_layer, at_once;
    std::vector<Params> p_per_layer, p_at_once;
    for (int l = 0; l < layers; ++l) {
      std::mt19937_64 a(seed + l), b(seed + l);
      p_per_layer.push_back(make(per_layer.emplace_back(), a, C, rows));
      p_at_once.push_back(make(at_once.emplace_back(), b, C, rows));
    }
    const std::vector<int32_t> fills_before = per_layer[0].tensors[fill_index].download<int32_t>();
    for (const Params& p : p_per_layer) commit_one(p, 0);
    commit_all(p_at_once.data(), layers, 0);
    KVB_CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_NE(per_layer[0].tensors[fill_index].download<int32_t>(), fills_before) << "the commit changed no fill";
    for (int l = 0; l < layers; ++l)
      for (size_t t = 0; t < per_layer[l].tensors.size(); ++t) {
        const auto x = per_layer[l].tensors[t].download<uint8_t>(), y = at_once[l].tensors[t].download<uint8_t>();
        EXPECT_TRUE(x == y) << "layer " << l << " of " << layers << ", tensor " << t << " differs (seed " << seed
                            << ")";
      }
  }
}

}  // namespace kvbuf::checks
