// `kvbuf capacity --measure` (measure_capacity_on_gpu of bench/gpu_commands.h): the largest number
// N of concurrent requests whose per-layer pools fit in a memory budget and run verify steps, found
// by bisection on the GPU, for classic speculative verify or KVBuffer verify.
//
// The pools are sub-allocated from ONE device arena of the budget's size with 256-byte alignment
// per tensor, so alignment and per-layer workspace count as they would in an engine:
//   classic, per layer:  state [N, HV, V, K] fp32 + the T per-node states [N, T, HV, V, K] fp32
//                        + (1 + T) conv windows [N, conv_dim, w - 1] bf16
//   KVBuffer, per layer: state + 1 conv window + the buffer (k [N, C, H, K], u [N, C, HV, V] bf16,
//                        G [N, C, HV] fp32, fill, has_state) + the verify scratch of the T candidate
//                        entries (win_k, win_u, win_gcum, win_base), which the capacity model of
//                        sim/capacity.h does not count (T entries per layer, about 2% at T = 4).
// For each N that fits, one verify + commit per layer runs on those pools (GDN kernels; Mamba-2
// models have no GPU verify kernel here, so their pools are allocated and written with a memset).
// The step's token inputs (q, k, v, gates, outputs: shared by all layers, under 0.2% of a
// request's pools) live outside the arena.
//
// Speed: the budgets of real GPUs (~100 GiB) are measured on a slice of the model: L' of its L
// linear layers, L' = max(1, floor(L x 4 GiB / budget)), in an arena of budget x L' / L bytes.
// Pools are per layer, so the largest N is the same as for all L layers in the whole budget (up to
// the alignment of L - L' layers, < 4 KiB per layer), and each bisection runs in well under a second.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/gpu_commands.h"
#include "bench/sweep.h"
#include "kernels/common.cuh"
#include "kernels/gdn_verify.h"
#include "sim/bytes_model.h"

namespace kvbuf {
namespace {

constexpr size_t kAlign = 256;
constexpr double kSliceBytes = 4.0 * (1ull << 30);

class Arena {
 public:
  Arena(char* base, size_t bytes) : base_(base), bytes_(bytes) {}
  // Null when the allocation does not fit.
  char* take(size_t bytes) {
    const size_t at = (used_ + kAlign - 1) / kAlign * kAlign;
    if (at > bytes_ || bytes > bytes_ - at) {
      ok_ = false;
      return nullptr;
    }
    used_ = at + bytes;
    return base_ + at;
  }
  bool ok() const { return ok_; }

 private:
  char* base_;
  size_t bytes_, used_ = 0;
  bool ok_ = true;
};

struct LayerPools {
  float* state = nullptr;
  float* step_states = nullptr;  // classic
  char* conv = nullptr;
  size_t conv_bytes = 0;
  void *buf_k = nullptr, *buf_u = nullptr, *win_k = nullptr, *win_u = nullptr;
  float *buf_g = nullptr, *win_g = nullptr;
  int32_t *fill = nullptr, *has_state = nullptr, *win_base = nullptr;
  std::vector<std::pair<char*, size_t>> all;  // every tensor, for the Mamba-2 memset
};

class CapacityProbe {
 public:
  CapacityProbe(const CapacityMeasureArgs& a, char* arena, size_t arena_bytes, int layers)
      : a_(a), s_(a.model.layer), arena_(arena), arena_bytes_(arena_bytes), layers_(layers) {
    p_.state_bytes = 4, p_.entry_bytes = 2, p_.io_bytes = 2;
  }

  // Pools of every measured layer for n requests, or nothing when they do not fit.
  std::optional<std::vector<LayerPools>> plan(long n) const {
    Arena ar(arena_, arena_bytes_);
    std::vector<LayerPools> out(layers_);
    const size_t N = size_t(n), T = a_.drafts, C = a_.chunk;
    const size_t H = s_.key_heads, HV = s_.value_heads, K = s_.head_k, V = s_.head_v;
    const bool gdn = s_.kind == LayerKind::GatedDeltaNet;
    const size_t state = size_t(state_bytes(s_, p_)), conv = size_t(conv_state_bytes(s_, p_));
    for (auto& lp : out) {
      auto take = [&](size_t bytes) {
        char* ptr = ar.take(bytes);
        lp.all.push_back({ptr, bytes});
        return ptr;
      };
      lp.state = reinterpret_cast<float*>(take(N * state));
      lp.conv_bytes = N * (a_.kvbuffer ? 1 : 1 + T) * conv;
      lp.conv = take(lp.conv_bytes);
      if (!a_.kvbuffer) {
        lp.step_states = reinterpret_cast<float*>(take(N * T * state));
        continue;
      }
      if (gdn) {
        lp.buf_k = take(N * C * H * K * 2);
        lp.buf_u = take(N * C * HV * V * 2);
        lp.buf_g = reinterpret_cast<float*>(take(N * C * HV * 4));
        lp.fill = reinterpret_cast<int32_t*>(take(N * 4));
        lp.has_state = reinterpret_cast<int32_t*>(take(N * 4));
        lp.win_k = take(N * T * H * K * 2);
        lp.win_u = take(N * T * HV * V * 2);
        lp.win_g = reinterpret_cast<float*>(take(N * T * HV * 4));
        lp.win_base = reinterpret_cast<int32_t*>(take(N * 2 * 4));
      } else {
        const size_t entry = size_t(buffer_entry_bytes(s_, p_, BufferVariant::CachedU));
        take(N * C * entry);   // buffer
        take(N * 2 * 4);       // fill, has_state
        take(N * T * entry);   // verify scratch
      }
    }
    if (!ar.ok()) return std::nullopt;
    return out;
  }

  // Runs one verify + commit per layer on the pools (GDN), or writes them (Mamba-2).
  void run_step(const std::vector<LayerPools>& pools, long n) const {
    if (s_.kind != LayerKind::GatedDeltaNet) {
      for (const auto& lp : pools)
        for (const auto& [ptr, bytes] : lp.all) KVB_CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes));
      KVB_CUDA_CHECK(cudaDeviceSynchronize());
      return;
    }
    const int B = int(n), T = a_.drafts, H = s_.key_heads, HV = s_.value_heads, K = s_.head_k, V = s_.head_v;
    DeviceBuffer slot(size_t(B) * 4), q(size_t(B) * T * H * K * 2), k(q.bytes()), v(size_t(B) * T * HV * V * 2),
        g(size_t(B) * T * HV * 4), beta(g.bytes()), out(v.bytes()), len(size_t(B) * 4);
    std::vector<int32_t> slots(B), lens(B, std::max(1, T - 1)), ones(B, 1);
    for (int i = 0; i < B; ++i) slots[i] = i;
    KVB_CUDA_CHECK(cudaMemcpy(slot.as<void>(), slots.data(), B * 4, cudaMemcpyHostToDevice));
    KVB_CUDA_CHECK(cudaMemcpy(len.as<void>(), lens.data(), B * 4, cudaMemcpyHostToDevice));
    fill_uniform_bf16(q.as<void>(), q.bytes() / 2, 1, -1.f, 1.f);
    fill_uniform_bf16(k.as<void>(), k.bytes() / 2, 2, -1.f, 1.f);
    fill_uniform_bf16(v.as<void>(), v.bytes() / 2, 3, -1.f, 1.f);
    fill_uniform_f32(g.as<float>(), g.bytes() / 4, 4, -0.5f, -0.01f);
    fill_uniform_f32(beta.as<float>(), beta.bytes() / 4, 5, 0.1f, 0.9f);
    const GdnVerifyIO io{B, T, H, HV, K, V, slot.as<int32_t>(), q.as<__nv_bfloat16>(), k.as<__nv_bfloat16>(),
                         v.as<__nv_bfloat16>(), g.as<float>(), beta.as<float>(), nullptr, out.as<__nv_bfloat16>()};
    const GdnVerifyAccept accept{len.as<int32_t>(), nullptr};
    for (const auto& lp : pools) {
      fill_uniform_f32(lp.state, size_t(B) * HV * V * K, 6, -1.f, 1.f);
      KVB_CUDA_CHECK(cudaMemset(lp.conv, 0, lp.conv_bytes));
      if (!a_.kvbuffer) {
        GdnVerifyClassicParams p;
        p.io = io, p.state = lp.state, p.step_states = lp.step_states, p.accept = accept;
        gdn_verify_classic(p, 0);
        gdn_verify_classic_commit(p, 0);
        continue;
      }
      KVB_CUDA_CHECK(cudaMemset(lp.fill, 0, size_t(B) * 4));
      KVB_CUDA_CHECK(cudaMemcpy(lp.has_state, ones.data(), size_t(B) * 4, cudaMemcpyHostToDevice));
      GdnVerifyKVBufferParams p;
      p.io = io, p.entry = GdnEntryType::BF16, p.capacity = a_.chunk, p.state = lp.state;
      p.buf_k = lp.buf_k, p.buf_val = lp.buf_u, p.buf_gcum = lp.buf_g, p.fill = lp.fill, p.has_state = lp.has_state;
      p.win_k = lp.win_k, p.win_u = lp.win_u, p.win_gcum = lp.win_g, p.win_base = lp.win_base, p.accept = accept;
      gdn_verify_kvbuffer(p, 0);
      gdn_verify_kvbuffer_commit(p, 0);
    }
    KVB_CUDA_CHECK(cudaDeviceSynchronize());
  }

  // A lower bound of one request's bytes over the measured layers (no alignment), for the bracket.
  double request_bytes() const {
    const double state = state_bytes(s_, p_), conv = conv_state_bytes(s_, p_);
    const double entry = buffer_entry_bytes(s_, p_, BufferVariant::CachedU);
    const int T = a_.drafts;
    return layers_ * (a_.kvbuffer ? state + conv + (a_.chunk + T) * entry : (1 + T) * (state + conv));
  }

 private:
  CapacityMeasureArgs a_;
  LayerShape s_;
  Precision p_;
  char* arena_;
  size_t arena_bytes_;
  int layers_;
};

}  // namespace

CapacityMeasured measure_capacity_on_gpu(const CapacityMeasureArgs& args) {
  if (args.drafts < 1 || args.drafts > kGdnVerifyMaxTokens)
    throw std::invalid_argument("capacity --measure: drafts T must be in 1..8, got " + std::to_string(args.drafts));
  if (args.kvbuffer && (args.chunk < args.drafts || args.chunk > 64))
    throw std::invalid_argument("capacity --measure: buffer capacity C must be in T..64, got " + std::to_string(args.chunk));
  CapacityMeasured r;
  const int L = args.model.linear_layers;
  if (!(args.budget_bytes > 0) || L < 1) {
    r.note = "no memory left for pools";
    return r;
  }
  const int layers = args.budget_bytes <= kSliceBytes ? L : std::max(1, int(std::floor(L * kSliceBytes / args.budget_bytes)));
  const size_t arena_bytes = size_t(args.budget_bytes * layers / L);
  DeviceBuffer arena(arena_bytes);
  CapacityProbe probe(args, arena.as<char>(), arena_bytes, layers);
  long lo = 0, hi = long(arena_bytes / probe.request_bytes()) + 2;  // plan(lo) fits, plan(hi) does not
  while (probe.plan(hi)) hi *= 2;
  while (hi - lo > 1) {
    const long mid = lo + (hi - lo) / 2;
    const auto pools = probe.plan(mid);
    if (pools) {
      probe.run_step(*pools, mid);
      lo = mid;
    } else {
      hi = mid;
    }
  }
  r.max_requests = lo;
  const bool gdn = args.model.layer.kind == LayerKind::GatedDeltaNet;
  r.note = fmt::format("{} of {} layers in a {:.2f} GiB arena (budget x {}/{}); {}", layers, L,
                       arena_bytes / double(1ull << 30), layers, L,
                       gdn ? "verify + commit ran at every N that fit" : "Mamba-2: pools allocated and written, no GPU verify kernel");
  return r;
}

}  // namespace kvbuf
