// The verify rows of `kvbuf sweep` (VerifyRunner of bench/sweep/sweep.h): classic speculative verify,
// in place (verify-classic-inplace: gdn_verify_classic with step_slot, committed by index) and with
// a copy commit (verify-classic: gdn_verify_classic + gdn_verify_classic_commit), against KVBuffer
// verify (gdn_verify_kvbuffer + gdn_verify_kvbuffer_commit), chains and trees, per batch x T x C;
// for Mamba-2 models the twins mamba2-verify-classic (mamba2_verify_classic in place) and
// mamba2-verify-kvbuffer (mamba2_verify_kvbuffer + commit), with dt softplus and the z gate in the
// kernels, its rows launched folding rows first where that pays (mamba2_verify_kvbuffer_order,
// once per step from the first layer's fills, which every layer shares; its time is in the step's).
// Speedups count against the faster classic row. For the verify-to-decode ratio it compares with
// the fastest KVBuffer decode step the decode sweep measured at that batch in the same run. A point
// that cannot run (pools beyond free memory, a failure) is a CSV row whose `note` says why.
//
// Method (as the decode sweep, bench/gpu_timing.h): one state pool (and buffer pool) per linear layer,
// all layers of one model step (every layer's verify, then one commit of all layers) in one CUDA
// graph, median of samples of whole flush cycles (C steps per sample for buffered methods), latency
// per layer = sample time / (steps x layers). Each request row accepts a fixed number m of tokens
// per step, drawn once from the acceptance rate a: m = 1 + the number of leading drafts accepted,
// each with probability a (at most T - 1), so fills advance at different speeds and stagger
// (initial fills are random in 0..C-1 too). Per accepted token = per step / E[m],
// E[m] = (1 - a^T) / (1 - a).
// Bytes per layer per step come from sim/bytes_model.h (bytes_verify_classic with the commit copy or,
// in place, without it;
// bytes_verify_kvbuffer at each request's fill under the kernels' fold rule (verify_kvbuffer_next_fill),
// averaged over the simulated steady state of the fills).
// The token inputs are shared by all layers (a few MiB at most), as in the decode sweep; the classic
// per-node scratch states [B, T, HV, V, K] are shared by the layers too (36 layers of them do not
// fit at batch 256 x T = 8), which changes nothing in its traffic: they are written once, read once.
// In place, each layer's pool holds batch x (T + 1) slots, row r owning slots r (T + 1) + 0..T; the
// slot arrays are shared by the layers and rotated once per step, after the layers, by
// advance_inplace_slots (the scheduler's commit by index).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/csv.h"
#include "bench/gpu_telemetry.h"
#include "bench/sweep/sweep.h"
#include "kernels/common/common.cuh"
#include "kernels/gdn/gdn_decode.h"
#include "kernels/gdn/gdn_launch_shape.h"  // verify_coef_bytes
#include "kernels/gdn/gdn_verify.h"
#include "kernels/mamba2/mamba2_verify.h"
#include "sim/bytes_model.h"

namespace kvbuf {
namespace {

std::string fmt_g(double x) { return fmt::format("{:.6g}", x); }

// The commit by index of the in-place classic rows, as a scheduler does it: row r owns slots
// r (T + 1) + j, j = 0..T, with S0 in j and node t's state in (j + 1 + t) mod (T + 1); accepting
// node n (1-based; 0 = none) moves S0 to (j + n) mod (T + 1), and the other T slots receive the
// next step's nodes.
__global__ void advance_inplace_slots(int batch, int T, const int32_t* accept_len, const int32_t* accept_nodes,
                                      int32_t* slot, int32_t* step_slot) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= batch) return;
  const int m = min(accept_len[r], T);
  const int n = m <= 0 ? 0 : accept_nodes ? accept_nodes[r * T + m - 1] : m;
  const int base = r * (T + 1), j = (slot[r] - base + n) % (T + 1);
  slot[r] = base + j;
  for (int t = 0; t < T; ++t) step_slot[r * T + t] = base + (j + 1 + t) % (T + 1);
}

// Tree drafts for the tree rows: a binary heap (node i's parent is i / 2, the root's is 0), as
// EAGLE-style drafting expands the likeliest candidates; the accepted path ends at the deepest
// node reachable with the row's m (depth floor(log2 i) + 1).
int heap_parent(int i) { return i / 2; }
std::vector<int> heap_path(int depth) {
  std::vector<int> path;
  for (int i = 1, d = 0; d < depth; i *= 2, ++d) path.push_back(i);
  return path;
}
int heap_depth(int T) {
  int d = 0;
  while ((1 << d) <= T) ++d;
  return d;
}

// Per-row metadata shared by both families: slot r for row r, parents (heap for trees, else the
// chain) and the accepted nodes of each row's fixed m.
struct RowMeta {
  DeviceBuffer slot, parents, accept_len, accept_nodes;
  VerifyAccept accept;
  RowMeta(int batch, int T, bool tree, const std::vector<int>& m)
      : slot(size_t(batch) * 4), parents(size_t(batch) * T * 4), accept_len(size_t(batch) * 4),
        accept_nodes(size_t(batch) * T * 4) {
    std::vector<int32_t> slots(batch), par(size_t(batch) * T), len(batch), nodes(size_t(batch) * T, 1);
    for (int r = 0; r < batch; ++r) {
      slots[r] = r;
      for (int i = 1; i <= T; ++i) par[size_t(r) * T + i - 1] = tree ? heap_parent(i) : i - 1;
      if (tree) {
        const auto path = heap_path(std::min(m[r], heap_depth(T)));
        len[r] = int(path.size());
        std::copy(path.begin(), path.end(), nodes.begin() + size_t(r) * T);
      } else {
        len[r] = m[r];
      }
    }
    slot.upload(slots), parents.upload(par), accept_len.upload(len), accept_nodes.upload(nodes);
    accept = VerifyAccept{accept_len.as<int32_t>(), tree ? accept_nodes.as<int32_t>() : nullptr};
  }
};

struct Inputs {
  RowMeta rows;
  DeviceBuffer q, k, v, g, beta, out;
  GdnVerifyIO io;
  Inputs(const LayerShape& s, int batch, int T, bool tree, const std::vector<int>& m, uint64_t seed)
      : rows(batch, T, tree, m),
        q(size_t(batch) * T * s.key_heads * s.head_k * 2),
        k(q.bytes()),
        v(size_t(batch) * T * s.value_heads * s.head_v * 2),
        g(size_t(batch) * T * s.value_heads * 4),
        beta(g.bytes()),
        out(v.bytes()) {
    fill_uniform_bf16(q.as<void>(), q.bytes() / 2, seed + 1, -1.f, 1.f);
    fill_uniform_bf16(k.as<void>(), k.bytes() / 2, seed + 2, -1.f, 1.f);
    fill_uniform_bf16(v.as<void>(), v.bytes() / 2, seed + 3, -1.f, 1.f);
    fill_uniform_f32(g.as<float>(), g.bytes() / 4, seed + 4, -0.5f, -0.01f);
    fill_uniform_f32(beta.as<float>(), beta.bytes() / 4, seed + 5, 0.1f, 0.9f);
    io = GdnVerifyIO{batch, T, s.key_heads, s.value_heads, s.head_k, s.head_v, rows.slot.as<int32_t>(),
                     q.as<__nv_bfloat16>(), k.as<__nv_bfloat16>(), v.as<__nv_bfloat16>(), g.as<float>(),
                     beta.as<float>(), tree ? rows.parents.as<int32_t>() : nullptr, out.as<__nv_bfloat16>()};
  }
};

// Mamba-2: the row metadata and the token buffers of bench/sweep/sweep.h (batch x T token rows).
struct Mamba2Inputs {
  RowMeta rows;
  Mamba2TokenBuffers tokens;
  Mamba2VerifyIO io;
  Mamba2Inputs(const LayerShape& s, int batch, int T, bool tree, const std::vector<int>& m, uint64_t seed)
      : rows(batch, T, tree, m), tokens(s, size_t(batch) * T, seed) {
    io.batch = batch, io.tokens = T, io.G = s.key_heads, io.NH = s.value_heads, io.N = s.head_k, io.P = s.head_v;
    io.slot = rows.slot.as<int32_t>();
    io.parents = tree ? rows.parents.as<int32_t>() : nullptr;
    tokens.wire(io);
  }
};

}  // namespace

class VerifySweep {
 public:
  VerifySweep(const SweepArgs& a, const std::vector<DecodePoint>& decode_points)
      : a_(a), s_(a.model.layer), layers_(a.layers > 0 ? a.layers : a.model.linear_layers) {
    if (layers_ < 1) throw std::invalid_argument("verify sweep: layers must be >= 1");
    p_.state = a.state;
    if (!(a.acceptance >= 0 && a.acceptance <= 1)) throw std::invalid_argument("verify sweep: acceptance must be in [0, 1]");
    for (int T : a.drafts)
      if (T < 1 || T > kGdnVerifyMaxTokens) throw std::invalid_argument("verify sweep: T must be in 1..8, got " + std::to_string(T));
    for (const DecodePoint& d : decode_points)
      if (d.kernel == decode_kernel() && d.state == a.state) decode_[d.batch].push_back({d.chunk, d.median_us});
  }

  // One point: a classic method (C = 0) or a KVBuffer method at C >= T. Returns false on a failure.
  bool run_point(const SweepKernel& vm, int batch, int T, int C, CsvWriter& csv) {
    if (vm.family != SweepFamily::Verify) throw std::invalid_argument("verify sweep: " + vm.name + " is no verify row");
    try {
      if (vm.buffered)
        run_kvbuffer(vm, batch, T, C, csv);
      else
        run_classic(vm, batch, T, csv);
    } catch (const std::invalid_argument&) {
      throw;
    } catch (const LaunchShapeRefused& e) {
      not_run(csv, vm.name, batch, T, C, std::string("skipped: ") + e.what());
      return true;
    } catch (const std::exception& e) {
      fmt::print("FAILED {} batch {} T {}: {}\n", vm.name, batch, T, e.what());
      cudaGetLastError();
      not_run(csv, vm.name, batch, T, C, std::string("failed: ") + e.what());
      return false;
    }
    return true;
  }

  bool mamba2() const { return s_.kind == LayerKind::Mamba2; }
  // The KVBuffer decode step the verify is compared with.
  std::string decode_kernel() const { return mamba2() ? "mamba2-kvbuffer" : "kvbuffer"; }

  // m per request row (1..T), fixed for the sweep point, from the acceptance rate.
  std::vector<int> draw_accepts(int batch, int T) const {
    std::mt19937_64 rng(a_.seed * 7919 + batch * 31 + T);
    std::bernoulli_distribution accept(a_.acceptance);
    std::vector<int> m(batch);
    for (auto& x : m) {
      x = 1;
      while (x < T && accept(rng)) ++x;
    }
    return m;
  }
  double tokens_per_step(int T) const {
    const double a = a_.acceptance;
    return a >= 1 ? T : (1 - std::pow(a, T)) / (1 - a);
  }

  // Whether pools of `need` bytes fit in free device memory (1 GiB kept free); a point that does
  // not is a CSV row saying so.
  bool fits(size_t need, CsvWriter& csv, const std::string& method, int batch, int T, int C) {
    const size_t free_b = gpu_free_bytes();
    if (need + (size_t(1) << 30) <= free_b) return true;
    not_run(csv, method, batch, T, C,
            fmt::format("skipped: needs {:.1f} GiB of pools, {:.1f} GiB free", need / double(1 << 30),
                        free_b / double(1 << 30)));
    return false;
  }

  void not_run(CsvWriter& csv, const std::string& method, int batch, int T, int C, const std::string& why) {
    fmt::print("{} batch {} T {} C {}: {}\n", method, batch, T, C, why);
    std::vector<std::string> r = {a_.model.name, method, std::to_string(batch), std::to_string(T), std::to_string(C),
                                  std::to_string(layers_), fmt_g(a_.acceptance)};
    r.resize(r.size() + 12);
    r.insert(r.end(), {a_.gpu, a_.commit, why});
    csv.row(r);
  }

  TimingStats time(const std::function<void(cudaStream_t)>& step, int steps_per_sample) const {
    GraphTiming how;
    how.layers = layers_;
    how.steps_per_sample = steps_per_sample;
    how.budget_s = a_.budget_s;
    how.min_samples = 5;
    how.max_samples = 30;
    return time_graph_steps(step, how);
  }

  void emit(CsvWriter& csv, const std::string& method, int batch, int T, int C, double tokens, const TimingStats& t,
            double bytes) {
    const double gbps = bytes / (t.median_us * 1e-6) / 1e9;
    csv.row({a_.model.name, method, std::to_string(batch), std::to_string(T), std::to_string(C),
             std::to_string(layers_), fmt_g(a_.acceptance), fmt_g(tokens), fmt_g(t.median_us), fmt_g(t.min_us),
             fmt_g(t.max_us), std::to_string(t.samples), fmt_g(t.median_us / tokens), fmt_g(bytes), fmt_g(gbps),
             fmt_g(gbps / a_.copy_gbps), fmt_g(a_.copy_gbps), t.telemetry.clock_mhz(), t.telemetry.power_w(), a_.gpu,
             a_.commit, note_with_clock_limits(mamba2() ? "z gate and dt softplus in the kernel" : "", t.telemetry)});
    fmt::print("{:<22} batch {:>4} T {} C {:>2}: {:9.2f} us/layer/step (min {:.2f} max {:.2f}) {:8.2f} us/token  "
               "{:6.0f} GB/s {:5.1f}% of copy\n",
               method, batch, T, C, t.median_us, t.min_us, t.max_us, t.median_us / tokens, gbps,
               100 * gbps / a_.copy_gbps);
    if (const std::string limits = t.telemetry.clock_limit_note(); !limits.empty()) fmt::print("  {}\n", limits);
    results_[{method, batch, T}].push_back({C, t.median_us});
  }

  void run_classic(const SweepKernel& vm, int batch, int T, CsvWriter& csv) {
    const int L = layers_;
    const PoolLayout layout{s_, 0, BufferVariant::CachedU, p_};
    // Copy commit: the state pool per layer, and the per-node scratch states shared by the layers
    // (36 layers of them do not fit at batch 256 x T = 8), which changes nothing in their traffic.
    // In place: T + 1 state slots per request in every layer's pool.
    const size_t slots = vm.in_place ? size_t(batch) * (T + 1) : size_t(batch);
    const PoolPlan state_plan({layout.state()}, slots, L), step_plan({layout.step_states(T)}, vm.in_place ? 0 : batch, 1);
    if (!fits(state_plan.total_bytes() + step_plan.total_bytes(), csv, vm.name, batch, T, 0)) return;
    const auto m = draw_accepts(batch, T);
    std::unique_ptr<Inputs> gdn;
    std::unique_ptr<Mamba2Inputs> m2;
    if (mamba2()) m2 = std::make_unique<Mamba2Inputs>(s_, batch, T, vm.tree, m, a_.seed);
    else gdn = std::make_unique<Inputs>(s_, batch, T, vm.tree, m, a_.seed);
    RowMeta& rows = m2 ? m2->rows : gdn->rows;
    DevicePools states(state_plan), steps(step_plan);
    DeviceBuffer step_slot(vm.in_place ? size_t(batch) * T * 4 : 0);
    fill_uniform_state(states.at<void>(0, "state"), states.bytes() / p_.state_bytes(), p_.state, a_.seed + 11, -1.f, 1.f);
    if (vm.in_place) {
      std::vector<int32_t> slot0(batch), steps_at(size_t(batch) * T);
      for (int r = 0; r < batch; ++r) {
        slot0[r] = r * (T + 1);
        for (int t = 0; t < T; ++t) steps_at[size_t(r) * T + t] = r * (T + 1) + 1 + t;
      }
      rows.slot.upload(slot0);
      step_slot.upload(steps_at);
    }
    KVB_CUDA_CHECK(cudaDeviceSynchronize());
    auto step = [&](cudaStream_t st) {
      for (int l = 0; l < L; ++l) {
        if (m2) {  // in place only (cmd: mamba2-verify-classic)
          Mamba2VerifyClassicParams p;
          p.io = m2->io;
          p.state = states.at<void>(l, "state"), p.state_type = p_.state;
          p.step_slot = step_slot.as<int32_t>();
          mamba2_verify_classic(p, st);
          continue;
        }
        GdnVerifyClassicParams p;
        p.io = gdn->io;
        p.state = states.at<void>(l, "state"), p.state_type = p_.state;
        p.accept = rows.accept;
        if (vm.in_place) {
          p.step_slot = step_slot.as<int32_t>();
          gdn_verify_classic(p, st);
        } else {
          p.step_states = steps.at<void>(0, "step_states");
          gdn_verify_classic(p, st);
          gdn_verify_classic_commit(p, st);
        }
      }
      if (vm.in_place) {
        advance_inplace_slots<<<(batch + 127) / 128, 128, 0, st>>>(batch, T, rows.accept.accept_len,
                                                                    rows.accept.accept_nodes, rows.slot.as<int32_t>(),
                                                                    step_slot.as<int32_t>());
        KVB_CUDA_CHECK_LAUNCH();
      }
    };
    const TimingStats t = time(step, 4);
    double mean_m = 0;
    for (int x : m) mean_m += vm.tree ? std::min(x, heap_depth(T)) : x;
    mean_m /= batch;
    const double bytes = bytes_verify_classic(s_, p_, T, !vm.in_place).scale(batch).total_bytes();
    emit(csv, vm.name, batch, T, 0, vm.tree ? mean_m : tokens_per_step(T), t, bytes);
  }

  void run_kvbuffer(const SweepKernel& vm, int batch, int T, int C, CsvWriter& csv) {
    const int L = layers_;
    const PoolLayout layout{s_, C, BufferVariant::CachedU, p_};
    const PoolPlan plan(speculative_pools(layout, T, true, false), size_t(batch), L);
    if (!fits(plan.total_bytes(), csv, vm.name, batch, T, C)) return;
    const auto m = draw_accepts(batch, T);
    std::unique_ptr<Inputs> gdn;
    std::unique_ptr<Mamba2Inputs> m2;
    if (mamba2()) m2 = std::make_unique<Mamba2Inputs>(s_, batch, T, vm.tree, m, a_.seed);
    else gdn = std::make_unique<Inputs>(s_, batch, T, vm.tree, m, a_.seed);
    const VerifyAccept accept = m2 ? m2->rows.accept : gdn->rows.accept;
    DevicePools pools(plan);
    DeviceBuffer row_order(m2 ? size_t(batch) * 4 : 0);  // launch order, where it pays
    DeviceBuffer coef(m2 ? 0 : gdn_verify_detail::verify_coef_bytes(batch, s_.value_heads, T, C));  // GDN split path: one step's records
    for (int l = 0; l < L; ++l) {
      fill_uniform_state(pools.at<void>(l, "state"), plan.tensor_bytes("state") / p_.state_bytes(), p_.state,
                         a_.seed + 11 + 8 * l, -1.f, 1.f);
      fill_uniform_bf16(pools.at<void>(l, "buf_k"), plan.tensor_bytes("buf_k") / 2, a_.seed + 13 + 8 * l, -0.2f, 0.2f);
      fill_uniform_bf16(pools.at<void>(l, "buf_val"), plan.tensor_bytes("buf_val") / 2, a_.seed + 14 + 8 * l, -1.f, 1.f);
      fill_uniform_f32(pools.at<float>(l, "buf_gcum"), plan.tensor_bytes("buf_gcum") / 4, a_.seed + 15 + 8 * l, -0.05f, 0.f);
      if (plan.has("buf_beta"))  // Mamba-2: dt
        fill_uniform_f32(pools.at<float>(l, "buf_beta"), plan.tensor_bytes("buf_beta") / 4, a_.seed + 16 + 8 * l, 0.01f, 1.f);
    }
    // Staggered fills (random 0..C-1, the same in every layer as for a real request), all buffered.
    std::mt19937_64 rng(a_.seed * 104729 + batch * 131 + C);
    std::vector<int32_t> fill0(batch), ones(batch, 1), zeros(batch, 0);
    for (auto& f : fill0) f = int(rng() % C);
    for (int l = 0; l < L; ++l) {
      KVB_CUDA_CHECK(cudaMemcpy(pools.at<void>(l, "fill"), fill0.data(), size_t(batch) * 4, cudaMemcpyHostToDevice));
      KVB_CUDA_CHECK(cudaMemcpy(pools.at<void>(l, "has_state"), ones.data(), size_t(batch) * 4, cudaMemcpyHostToDevice));
      KVB_CUDA_CHECK(cudaMemcpy(pools.at<void>(l, "done_count"), zeros.data(), size_t(batch) * 4, cudaMemcpyHostToDevice));
    }
    KVB_CUDA_CHECK(cudaDeviceSynchronize());
    auto mamba2_params = [&](int l) {
      Mamba2VerifyKVBufferParams p;
      p.io = m2->io;
      p.capacity = C;
      p.state = pools.at<void>(l, "state"), p.state_type = p_.state;
      p.buf_k = pools.at<__nv_bfloat16>(l, "buf_k");
      p.buf_val = pools.at<__nv_bfloat16>(l, "buf_val");
      p.buf_gcum = pools.at<float>(l, "buf_gcum");
      p.buf_beta = pools.at<float>(l, "buf_beta");
      p.fill = pools.at<int32_t>(l, "fill");
      p.has_state = pools.at<int32_t>(l, "has_state");
      p.win_k = pools.at<__nv_bfloat16>(l, "win_k");
      p.win_u = pools.at<__nv_bfloat16>(l, "win_u");
      p.win_gcum = pools.at<float>(l, "win_gcum");
      p.win_beta = pools.at<float>(l, "win_beta");
      p.win_base = pools.at<int32_t>(l, "win_base");
      p.accept = accept;
      return p;
    };
    auto params = [&](int l) {
      GdnVerifyKVBufferParams p;
      p.io = gdn->io;
      p.entry = EntryType::BF16;
      p.capacity = C;
      p.state = pools.at<void>(l, "state"), p.state_type = p_.state;
      p.buf_k = pools.at<void>(l, "buf_k");
      p.buf_val = pools.at<void>(l, "buf_val");
      p.buf_gcum = pools.at<float>(l, "buf_gcum");
      p.fill = pools.at<int32_t>(l, "fill");
      p.has_state = pools.at<int32_t>(l, "has_state");
      p.win_k = pools.at<void>(l, "win_k");
      p.win_u = pools.at<void>(l, "win_u");
      p.win_gcum = pools.at<float>(l, "win_gcum");
      p.win_base = pools.at<int32_t>(l, "win_base");
      p.accept = accept;
      p.path = vm.path, p.coef = coef.as<float>();
      return p;
    };
    const bool order_rows = m2 && mamba2_verify_kvbuffer_row_order_pays(mamba2_params(0));
    std::vector<Mamba2VerifyKVBufferParams> mamba2_layers;
    std::vector<GdnVerifyKVBufferParams> gdn_layers;
    for (int l = 0; l < L; ++l) {
      if (!m2) {
        gdn_layers.push_back(params(l));
        gdn_layers.back().pools_ready_at_launch = l > 0;  // the kernel before: the previous layer's verify
        continue;
      }
      mamba2_layers.push_back(mamba2_params(l));
      if (order_rows) mamba2_layers.back().row_order = row_order.as<int32_t>();
      mamba2_layers.back().pools_ready_at_launch = l > 0;  // the kernel before: the previous layer's verify
    }
    // Every layer's verify, then one commit of all layers (the accepted lengths exist only once the
    // step's last layer has run; gdn_verify.h).
    auto step = [&](cudaStream_t st) {
      if (order_rows) mamba2_verify_kvbuffer_order(mamba2_layers[0], row_order.as<int32_t>(), st);
      if (m2) {
        for (const auto& p : mamba2_layers) mamba2_verify_kvbuffer(p, st);
        mamba2_verify_kvbuffer_commit(mamba2_layers.data(), L, st);
      } else {
        for (const auto& p : gdn_layers) gdn_verify_kvbuffer(p, st);
        gdn_verify_kvbuffer_commit(gdn_layers.data(), L, st);
      }
    };
    const TimingStats t = time(step, std::max(C, 4));

    // Bytes: each row's fill evolves deterministically under the kernels' protocol (gdn_verify.h,
    // modelled by sim's verify_kvbuffer_next_fill); bytes_verify_kvbuffer at each step's fill and
    // the window's depth (trees fold by it), averaged over a long run.
    const int depth = vm.tree ? heap_depth(T) : T;
    const VerifyWindow window = m2 ? mamba2_verify_kvbuffer_window(mamba2_layers[0]) : VerifyWindow::Scratch;
    double total = 0;
    constexpr int kSimSteps = 1024;
    std::map<std::pair<int, int>, double> memo;
    for (int r = 0; r < batch; ++r) {
      const int acc = vm.tree ? std::min(m[r], depth) : m[r];
      int n = fill0[r];
      for (int i = 0; i < kSimSteps; ++i) {
        auto key = std::make_pair(n, acc);
        auto it = memo.find(key);
        if (it == memo.end())
          it = memo.emplace(key, bytes_verify_kvbuffer(s_, p_, BufferVariant::CachedU, C, T, depth, n, acc, window).total_bytes())
                   .first;
        total += it->second;
        n = verify_kvbuffer_next_fill(C, depth, n, acc);
      }
    }
    const double bytes = total / kSimSteps;
    const double tokens = vm.tree ? [&] {
      double s = 0;
      for (int x : m) s += std::min(x, depth);
      return s / batch;
    }() : tokens_per_step(T);
    emit(csv, vm.name, batch, T, C, tokens, t, bytes);
  }

  // The fastest row over C of one method at (batch, T): {C, us}, or C = -1 when not measured.
  std::pair<int, double> best_of(const std::string& name, int batch, int T) const {
    const auto it = results_.find({name, batch, T});
    if (it == results_.end()) return {-1, 0};
    return *std::min_element(it->second.begin(), it->second.end(), [](auto& x, auto& y) { return x.second < y.second; });
  }

  // Speedups count against the fastest classic row measured at each (batch, T), named in the table;
  // the verify-to-decode ratio against the fastest KVBuffer decode step at that batch.
  void summary() const {
    if (results_.empty()) return;
    fmt::print("\nverify summary, {} states (us per layer per step, median; kvbuffer at its best C; classic = the "
               "fastest classic row) | {} | commit {}\n",
               state_type_name(p_.state), a_.gpu, a_.commit);
    fmt::print("{:>6} {:>6} {:>2} {:>34} {:>16} {:>9} {:>16} {:>12}\n", "drafts", "batch", "T", "fastest classic",
               "kvbuffer [C]", "speedup", "decode-kvb [C]", "verify/dec");
    for (const bool tree : {false, true})
      for (int batch : a_.batches)
        for (int T : a_.drafts) {
          std::string classic_name;
          std::pair<int, double> c{-1, 0}, k{-1, 0};
          for (const SweepKernel* m : a_.kernels) {
            if (m->family != SweepFamily::Verify || m->tree != tree) continue;
            const auto b = best_of(m->name, batch, T);
            if (b.first < 0) continue;
            if (m->buffered) {
              if (k.first < 0 || b.second < k.second) k = b;
            } else if (c.first < 0 || b.second < c.second) {
              c = b, classic_name = m->name;
            }
          }
          if (c.first < 0 && k.first < 0) continue;
          std::pair<int, double> d{-1, 0};
          const auto dit = decode_.find(batch);
          if (!tree && k.first >= 0 && dit != decode_.end())
            for (const auto& x : dit->second)
              if (d.first < 0 || x.second < d.second) d = x;
          fmt::print("{:>6} {:>6} {:>2} {:>34} {:>16} {:>9} {:>16} {:>12}\n", tree ? "tree" : "chain", batch, T,
                     c.first >= 0 ? fmt::format("{:.2f} {}", c.second, classic_name) : "-",
                     k.first >= 0 ? fmt::format("{:.2f} [{}]", k.second, k.first) : "-",
                     c.first >= 0 && k.first >= 0 ? fmt::format("{:.2f}x", c.second / k.second) : "-",
                     d.first >= 0 ? fmt::format("{:.2f} [{}]", d.second, d.first) : "-",
                     d.first >= 0 ? fmt::format("{:.2f}x", k.second / d.second) : "-");
        }
  }

  SweepArgs a_;
  LayerShape s_;
  int layers_;
  Precision p_;  // the runner's state type (SweepArgs::state), bf16 entries and io
  std::map<std::tuple<std::string, int, int>, std::vector<std::pair<int, double>>> results_;
  std::map<int, std::vector<std::pair<int, double>>> decode_;  // batch -> (C, us) of the KVBuffer decode step
};

VerifyRunner::VerifyRunner(const SweepArgs& args, const std::vector<DecodePoint>& decode_points)
    : impl_(std::make_unique<VerifySweep>(args, decode_points)) {
  fmt::print("\nverify sweep: GPU {} | commit {} | model {} | {} layer pools per step | acceptance {} | copy {:.0f} GB/s\n",
             args.gpu, args.commit, args.model.name, args.layers > 0 ? args.layers : args.model.linear_layers,
             args.acceptance, args.copy_gbps);
}
VerifyRunner::~VerifyRunner() = default;
bool VerifyRunner::run_point(const SweepKernel& kernel, int batch, int drafts, int chunk, CsvWriter& csv) {
  return impl_->run_point(kernel, batch, drafts, chunk, csv);
}
void VerifyRunner::summary() const { impl_->summary(); }

}  // namespace kvbuf
