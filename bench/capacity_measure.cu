// `kvbuf capacity --measure` (measure_capacity_on_gpu of bench/gpu_commands.h): the largest number
// N of concurrent requests whose per-layer pools fit in a memory budget and run verify steps, found
// by bisection on the GPU, for classic speculative verify or KVBuffer verify, with the state pools in
// the state dtype asked for (fp32, bf16 or fp16; entries and conv windows bf16 either way).
//
// The pools are sub-allocated from ONE device arena of the budget's size with 256-byte alignment
// per tensor (sim/layout.h's speculative_pools and PoolPlan), so alignment and per-layer workspace
// count as they would in an engine:
//   classic, per layer:  state [N, HV, V, K] + the T per-node states [N, T, HV, V, K], both in the
//                        state dtype, + (1 + T) conv windows [N, conv_dim, w - 1] bf16
//   KVBuffer, per layer: state (state dtype) + 1 conv window + the buffer (k [N, C, H, K],
//                        u [N, C, HV, V] bf16, G [N, C, HV] fp32, fill, has_state, done_count) + the
//                        verify scratch of the T candidate entries (win_k, win_u, win_gcum, win_base),
//                        which the capacity model of sim/capacity.h counts only with
//                        count_verify_scratch (T entries per layer: about 2% of a request at T = 4 with
//                        an fp32 state, 4% with a 16-bit one).
// For each N that fits, one verify + commit per layer runs on those pools (the GDN kernels, copy
// commit, at the state dtype; Mamba-2 models: the pools are allocated and written with a memset,
// their classic verify runs in place on T + 1 state slots, another layout than this one).
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
#include "bench/gpu_timing.h"
#include "kernels/common/common.cuh"
#include "kernels/gdn/gdn_verify.h"
#include "sim/layout.h"

namespace kvbuf {
namespace {

constexpr double kSliceBytes = 4.0 * (1ull << 30);

class CapacityProbe {
 public:
  CapacityProbe(const CapacityMeasureArgs& a, char* arena, size_t arena_bytes, int layers)
      : a_(a), s_(a.model.layer), arena_(arena), arena_bytes_(arena_bytes), layers_(layers) {}

  // The pools of every measured layer for n requests (sim/layout.h, 256-byte aligned tensors),
  // or nothing when they do not fit in the arena.
  std::optional<PoolPlan> plan(long n) const {
    PoolPlan p(speculative_pools(layout(), a_.drafts, a_.kvbuffer, true), size_t(n), layers_);
    if (p.total_bytes() > arena_bytes_) return std::nullopt;
    return p;
  }

  // Runs one verify + commit per layer on the pools (GDN), or writes them (Mamba-2).
  void run_step(const PoolPlan& plan, long n) const {
    auto at = [&](int l, const char* tensor) { return arena_ + plan.offset(l, tensor); };
    if (s_.kind != LayerKind::GatedDeltaNet) {
      for (int l = 0; l < layers_; ++l)
        for (const PoolTensor& t : plan.tensors())
          KVB_CUDA_CHECK(cudaMemsetAsync(at(l, t.name.c_str()), 0, plan.tensor_bytes(t.name)));
      KVB_CUDA_CHECK(cudaDeviceSynchronize());
      return;
    }
    const int B = int(n), T = a_.drafts, H = s_.key_heads, HV = s_.value_heads, K = s_.head_k, V = s_.head_v;
    DeviceBuffer slot(size_t(B) * 4), q(size_t(B) * T * H * K * 2), k(q.bytes()), v(size_t(B) * T * HV * V * 2),
        g(size_t(B) * T * HV * 4), beta(g.bytes()), out(v.bytes()), len(size_t(B) * 4);
    // lens filled in the loop: its fill constructor made GCC 12 (-O3) warn -Wfree-nonheap-object, a
    // false positive.
    std::vector<int32_t> slots(B), lens(B), ones(B, 1);
    for (int i = 0; i < B; ++i) slots[i] = i, lens[i] = std::max(1, T - 1);
    slot.upload(slots);
    len.upload(lens);
    fill_uniform_bf16(q.as<void>(), q.bytes() / 2, 1, -1.f, 1.f);
    fill_uniform_bf16(k.as<void>(), k.bytes() / 2, 2, -1.f, 1.f);
    fill_uniform_bf16(v.as<void>(), v.bytes() / 2, 3, -1.f, 1.f);
    fill_uniform_f32(g.as<float>(), g.bytes() / 4, 4, -0.5f, -0.01f);
    fill_uniform_f32(beta.as<float>(), beta.bytes() / 4, 5, 0.1f, 0.9f);
    GdnVerifyIO io;
    io.batch = B, io.tokens = T, io.H = H, io.HV = HV, io.K = K, io.V = V;
    io.slot = slot.as<int32_t>();
    io.q = q.as<__nv_bfloat16>(), io.k = k.as<__nv_bfloat16>(), io.v = v.as<__nv_bfloat16>();
    io.g = g.as<float>(), io.beta = beta.as<float>(), io.out = out.as<__nv_bfloat16>();
    const VerifyAccept accept{len.as<int32_t>(), nullptr};
    for (int l = 0; l < layers_; ++l) {
      fill_uniform_state(at(l, "state"), size_t(B) * HV * V * K, a_.state, 6, -1.f, 1.f);
      KVB_CUDA_CHECK(cudaMemset(at(l, "conv"), 0, plan.tensor_bytes("conv")));
      if (!a_.kvbuffer) {
        GdnVerifyClassicParams p;
        p.io = io, p.state = at(l, "state"), p.state_type = a_.state;
        p.step_states = at(l, "step_states"), p.accept = accept;
        gdn_verify_classic(p, 0);
        gdn_verify_classic_commit(p, 0);
        continue;
      }
      KVB_CUDA_CHECK(cudaMemset(at(l, "fill"), 0, size_t(B) * 4));
      KVB_CUDA_CHECK(cudaMemcpy(at(l, "has_state"), ones.data(), size_t(B) * 4, cudaMemcpyHostToDevice));
      GdnVerifyKVBufferParams p;
      p.io = io, p.entry = EntryType::BF16, p.capacity = a_.chunk;
      p.state = at(l, "state"), p.state_type = a_.state;
      p.buf_k = at(l, "buf_k"), p.buf_val = at(l, "buf_val");
      p.buf_gcum = reinterpret_cast<float*>(at(l, "buf_gcum"));
      p.fill = reinterpret_cast<int32_t*>(at(l, "fill"));
      p.has_state = reinterpret_cast<int32_t*>(at(l, "has_state"));
      p.win_k = at(l, "win_k"), p.win_u = at(l, "win_u");
      p.win_gcum = reinterpret_cast<float*>(at(l, "win_gcum"));
      p.win_base = reinterpret_cast<int32_t*>(at(l, "win_base"));
      p.accept = accept;
      gdn_verify_kvbuffer(p, 0);
      gdn_verify_kvbuffer_commit(p, 0);
    }
    KVB_CUDA_CHECK(cudaDeviceSynchronize());
  }

  // A lower bound of one request's bytes over the measured layers (no alignment), for the bracket.
  double request_bytes() const {
    return double(layers_) * bytes_per_slot(speculative_pools(layout(), a_.drafts, a_.kvbuffer, true), true);
  }

 private:
  // The state dtype asked for, bf16 entries and io: what the verify kernels run; the bytes of
  // sim/capacity.h.
  PoolLayout layout() const {
    return PoolLayout{s_, a_.kvbuffer ? a_.chunk : 0, BufferVariant::CachedU, precision_of(EntryType::BF16, a_.state)};
  }

  CapacityMeasureArgs a_;
  LayerShape s_;
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
    const auto plan = probe.plan(mid);
    if (plan) {
      probe.run_step(*plan, mid);
      lo = mid;
    } else {
      hi = mid;
    }
  }
  r.max_requests = lo;
  const bool gdn = args.model.layer.kind == LayerKind::GatedDeltaNet;
  r.note = fmt::format("{} states, {} of {} layers in a {:.2f} GiB arena (budget x {}/{}); {}", state_type_name(args.state),
                       layers, L, arena_bytes / double(1ull << 30), layers, L,
                       gdn ? "verify + commit ran at every N that fit" : "Mamba-2: pools allocated and written");
  return r;
}

}  // namespace kvbuf
