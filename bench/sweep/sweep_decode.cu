// The decode rows of `kvbuf sweep` (decode_row, time_decode_point of bench/sweep/sweep.h): GDN
// recurrent (in and out of place), KVBuffer and direct decode, and their Mamba-2 twins, timed with bench/gpu_timing.h over
// whole flush cycles with staggered fills (or, for a short context, every request stateless at one
// fill); pools placed by sim/layout.h, bytes from sim/bytes_model.h.
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench/gpu_telemetry.h"
#include "bench/sweep/sweep.h"
#include "kernels/common/common.cuh"
#include "kernels/gdn/gdn_decode.h"
#include "kernels/mamba2/mamba2_decode.h"
#include "sim/bytes_model.h"

namespace kvbuf {
namespace {

// fixed_fill >= 0: every request at that fill (a short context) instead of staggered fills.
__global__ void stagger_fill_kernel(int32_t* fill, int32_t* has_state, int32_t* done, size_t n, int slots,
                                    int capacity, int state, int fixed_fill) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    fill[i] = fixed_fill >= 0 ? fixed_fill : int(i % slots) % capacity;
    has_state[i] = state;
    done[i] = 0;
  }
}
// Scheduler metadata for one step, shared by every layer: fill + 1, or 0 after the fold at C-1
// (when the request gets its state, unless the sweep keeps it in direct mode).
__global__ void advance_row_meta_kernel(int32_t* fill, int32_t* has_state, int n, int capacity, int keep_direct) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int f = fill[i] + 1;
  fill[i] = f == capacity ? 0 : f;
  if (f == capacity && !keep_direct) has_state[i] = 1;
}
unsigned blocks_for(size_t n) { return unsigned(std::min<size_t>((n + 255) / 256, 132 * 32)); }

std::string fmt_g(double x) { return fmt::format("{:.6g}", x); }

int layers_of(const SweepArgs& a) { return a.layers > 0 ? a.layers : a.model.linear_layers; }

// One layer's token inputs and outputs for one step.
struct StepInputs {
  DeviceBuffer slot, q, k, v, g, beta, out;
  GdnStepIO io;
  StepInputs(const LayerShape& s, int batch, uint64_t seed)
      : slot(size_t(batch) * 4),
        q(size_t(batch) * s.key_heads * s.head_k * 2),
        k(q.bytes()),
        v(size_t(batch) * s.value_heads * s.head_v * 2),
        g(size_t(batch) * s.value_heads * 4),
        beta(g.bytes()),
        out(v.bytes()) {
    std::vector<int32_t> slots(batch);
    for (int i = 0; i < batch; ++i) slots[i] = i;
    slot.upload(slots);
    fill_uniform_bf16(q.as<void>(), q.bytes() / 2, seed + 1, -1.f, 1.f);
    fill_uniform_bf16(k.as<void>(), k.bytes() / 2, seed + 2, -1.f, 1.f);
    fill_uniform_bf16(v.as<void>(), v.bytes() / 2, seed + 3, -1.f, 1.f);
    fill_uniform_f32(g.as<float>(), g.bytes() / 4, seed + 4, -0.5f, -0.01f);
    fill_uniform_f32(beta.as<float>(), beta.bytes() / 4, seed + 5, 0.1f, 0.9f);
    io.batch = batch, io.H = s.key_heads, io.HV = s.value_heads, io.K = s.head_k, io.V = s.head_v;
    io.slot = slot.as<int32_t>();
    io.q = q.as<__nv_bfloat16>(), io.k = k.as<__nv_bfloat16>(), io.v = v.as<__nv_bfloat16>();
    io.g = g.as<float>(), io.beta = beta.as<float>(), io.out = out.as<__nv_bfloat16>();
  }
};

// Mamba-2: one slot per row and the token buffers of bench/sweep/sweep.h.
struct Mamba2StepInputs {
  DeviceBuffer slot;
  Mamba2TokenBuffers tokens;
  Mamba2StepIO io;
  Mamba2StepInputs(const LayerShape& s, int batch, uint64_t seed) : slot(size_t(batch) * 4), tokens(s, batch, seed) {
    std::vector<int32_t> slots(batch);
    for (int i = 0; i < batch; ++i) slots[i] = i;
    slot.upload(slots);
    io.batch = batch, io.G = s.key_heads, io.NH = s.value_heads, io.N = s.head_k, io.P = s.head_v;
    io.slot = slot.as<int32_t>();
    tokens.wire(io);
  }
};

// Bytes per layer per step for the whole batch, from sim/bytes_model.h.
double step_bytes(const LayerShape& s, const SweepKernel& kd, int batch, int chunk, StateType state_type,
                  int direct_fill) {
  const Precision p = precision_of(kd.entry, state_type);
  StepBytes b;
  if (direct_fill >= 0)
    b = bytes_direct_at_fill(s, p, direct_fill);
  else if (!kd.buffered)
    b = bytes_recurrent(s, p);
  else if (kd.direct)
    // Includes the overflow fold's state write once per cycle (the request would then leave
    // direct mode; the sweep keeps has_state 0 to go on measuring direct mode).
    b = bytes_direct_mean(s, p, chunk);
  else
    b = bytes_kvbuffer_cycle(s, p, kd.variant, chunk);
  return b.scale(batch).total_bytes();
}

}  // namespace

bool time_decode_point(const SweepArgs& a, const SweepKernel& kd, int batch, int chunk, StateType state_type,
                       DecodeTiming& out, std::string& why, int direct_fill) {
  if (direct_fill >= 0 && !(kd.buffered && !kd.pool_fill && direct_fill <= chunk - 2))
    throw std::invalid_argument(fmt::format("decode sweep: a fixed fill {} needs a buffered kernel with scheduler "
                                            "metadata and C >= fill + 2, not {} at C {}",
                                            direct_fill, kd.name, chunk));
  const bool stateless = kd.direct || direct_fill >= 0;
  const LayerShape& s = a.model.layer;
  const int L = layers_of(a);
  const PoolLayout layout{s, kd.buffered ? chunk : 0, kd.variant, precision_of(kd.entry, state_type)};
  const PoolPlan plan(decode_pools(layout, kd.out_of_place), size_t(batch), L);
  const size_t free_b = gpu_free_bytes();
  if (plan.total_bytes() + (size_t(1) << 30) > free_b) {
    why = fmt::format("needs {:.1f} GiB of pools for {} layers, {:.1f} GiB free", plan.total_bytes() / double(1 << 30),
                      L, free_b / double(1 << 30));
    return false;
  }
  // Each layer reads its own token inputs and writes its own outputs, as a model's layers do: one
  // set shared by every layer would be served from L2 after the first layer, which hides most of
  // the direct mode's DRAM bytes (its entries and inputs are all it moves).
  std::vector<std::unique_ptr<StepInputs>> gin;
  std::vector<std::unique_ptr<Mamba2StepInputs>> m2in;
  for (int l = 0; l < L; ++l) {
    const uint64_t layer_seed = a.seed + (uint64_t(l + 1) << 32);
    if (kd.kind == LayerKind::Mamba2) {
      m2in.push_back(std::make_unique<Mamba2StepInputs>(s, batch, layer_seed));
      m2in.back()->io.rows_per_block = a.rows_per_block;
    } else {
      gin.push_back(std::make_unique<StepInputs>(s, batch, layer_seed));
      gin.back()->io.rows_per_block = a.rows_per_block;
    }
  }
  DevicePools pools(plan);
  const DeviceBuffer row_fill(kd.buffered ? size_t(batch) * 4 : 0), row_has(row_fill.bytes()), row_done(row_fill.bytes()),
      scratch(kd.buffered ? size_t(batch) * s.value_heads * 2 * s.head_v * 4 : 0);  // split path: one step's r, s
  // Every point starts from the same random pool contents, so that a point sees the same data
  // whether it runs alone or after others (the token inputs repeat every step, and the states
  // drift as steps run). This does not remove the order effect results/README.md describes.
  uint64_t seed = a.seed + 11;
  for (int l = 0; l < L; ++l)
    for (const PoolTensor& t : plan.tensors()) {
      if (t.metadata) continue;
      const auto [lo, hi] = pool_value_range(t.name);
      const size_t n = t.elems_per_slot * batch;
      if (t.name == "state" || t.name == "state_out")
        fill_uniform_state(pools.at<void>(l, t.name), n, state_type, seed++, lo, hi);
      else
        fill_uniform(pools.at<void>(l, t.name), n, t.elem_bytes, seed++, lo, hi);
    }
  // Layer l's kernel follows layer l - 1's, which writes none of its pools: its blocks start their
  // state reads before waiting for that kernel (gdn_decode.h, pools_ready_at_launch). Not a step's
  // first layer (the kernel before it may be the advance of the scheduler's row metadata, which the
  // layer reads), nor direct mode's layers on pool metadata, which a memset resets before each.
  auto pools_ready = [&](int l) { return l > 0 && !(kd.direct && kd.pool_fill); };
  // The kernel launch of one layer, per family.
  std::function<void(int, cudaStream_t)> layer_step;
  if (kd.kind == LayerKind::Mamba2) {
    auto params = [&](int l) {
      Mamba2KVBufferParams p;
      p.io = m2in[l]->io;
      p.capacity = chunk;
      p.path = kd.path;
      p.state = pools.at<void>(l, "state"), p.state_type = state_type;
      p.pools_ready_at_launch = pools_ready(l);
      if (!kd.buffered) return p;
      p.buf_k = pools.at<__nv_bfloat16>(l, "buf_k");
      p.buf_val = pools.at<__nv_bfloat16>(l, "buf_val");
      p.buf_gcum = pools.at<float>(l, "buf_gcum");
      p.buf_beta = pools.at<float>(l, "buf_beta");
      if (kd.pool_fill) {
        p.fill = pools.at<int32_t>(l, "fill");
        p.has_state = pools.at<int32_t>(l, "has_state");
        p.done_count = pools.at<int32_t>(l, "done_count");
      } else {
        p.row_fill = row_fill.as<int32_t>(), p.row_has_state = row_has.as<int32_t>();
        p.every_row_has_state = !stateless;  // as for GDN: at C = 1 the recurrent update runs
      }
      return p;
    };
    out.row_groups = 0;
    if (!kd.buffered) {
      Mamba2RecurrentParams shape;
      shape.io = m2in[0]->io, shape.state_type = params(0).state_type;
      out.rows_per_block = mamba2_decode_recurrent_rows_per_block(shape);
      layer_step = [&, params](int l, cudaStream_t st) {
        Mamba2RecurrentParams p;
        p.io = m2in[l]->io;
        p.state = params(l).state, p.state_type = params(l).state_type;
        p.pools_ready_at_launch = pools_ready(l);
        mamba2_decode_recurrent(p, st);
      };
    } else {
      out.rows_per_block = mamba2_decode_kvbuffer_rows_per_block(params(0));
      layer_step = [&, params](int l, cudaStream_t st) {
        if (kd.direct)
          mamba2_decode_direct(params(l), st);
        else
          mamba2_decode_kvbuffer(params(l), st);
      };
    }
  } else {
    auto params = [&](int l) {
      GdnKVBufferParams p;
      p.io = gin[l]->io;
      p.variant = kd.variant, p.entry = kd.entry, p.capacity = chunk;
      p.path = kd.path, p.scratch = scratch.as<float>();
      p.state = pools.at<void>(l, "state"), p.state_type = state_type;
      p.pools_ready_at_launch = pools_ready(l);
      p.buf_k = pools.at<void>(l, "buf_k");
      p.buf_val = pools.at<void>(l, "buf_val");
      p.buf_gcum = pools.at<float>(l, "buf_gcum");
      p.buf_beta = plan.has("buf_beta") ? pools.at<float>(l, "buf_beta") : nullptr;
      if (kd.pool_fill) {
        p.fill = pools.at<int32_t>(l, "fill");
        p.has_state = pools.at<int32_t>(l, "has_state");
        p.done_count = pools.at<int32_t>(l, "done_count");
      } else {
        p.row_fill = row_fill.as<int32_t>(), p.row_has_state = row_has.as<int32_t>();
        // Every KVBuffer request of the sweep has a state (staggered fills from has_state 1), as
        // the scheduler of a steady decode batch knows: at C = 1 the plain recurrent update runs.
        p.every_row_has_state = !stateless;
      }
      return p;
    };
    if (!kd.buffered) {
      out.rows_per_block = gdn_decode_recurrent_rows_per_block(gin[0]->io);
      out.row_groups = 0;
      layer_step = [&](int l, cudaStream_t st) {
        GdnRecurrentParams p;
        p.io = gin[l]->io;
        p.state_in = pools.at<void>(l, "state");
        p.state_out = kd.out_of_place ? pools.at<void>(l, "state_out") : pools.at<void>(l, "state");
        p.state_type = state_type;
        p.pools_ready_at_launch = pools_ready(l);
        gdn_decode_recurrent(p, st);
      };
    } else {
      const GdnKVBufferParams p0 = params(0);
      out.rows_per_block = kd.direct ? gdn_decode_direct_rows_per_block(p0) : gdn_decode_kvbuffer_rows_per_block(p0);
      out.row_groups = kd.direct ? gdn_decode_direct_row_groups(p0) : 0;
      layer_step = [&, params](int l, cudaStream_t st) {
        if (kd.direct)
          gdn_decode_direct(params(l), st);
        else
          gdn_decode_kvbuffer(params(l), st);
      };
    }
  }

  std::function<void(cudaStream_t)> step;
  if (!kd.buffered) {
    step = [&, L](cudaStream_t st) {
      for (int l = 0; l < L; ++l) layer_step(l, st);
    };
  } else {
    const int state = stateless ? 0 : 1;
    for (int l = 0; l < L; ++l) {
      stagger_fill_kernel<<<blocks_for(batch), 256>>>(pools.at<int32_t>(l, "fill"), pools.at<int32_t>(l, "has_state"),
                                                     pools.at<int32_t>(l, "done_count"), batch, batch, chunk, state,
                                                     direct_fill);
      KVB_CUDA_CHECK_LAUNCH();
    }
    stagger_fill_kernel<<<blocks_for(batch), 256>>>(row_fill.as<int32_t>(), row_has.as<int32_t>(),
                                                   row_done.as<int32_t>(), batch, batch, chunk, state, direct_fill);
    KVB_CUDA_CHECK_LAUNCH();
    step = [&, L](cudaStream_t st) {
      for (int l = 0; l < L; ++l) {
        // Direct mode: requests stay stateless (the fold at fill C-1 would otherwise end it).
        if (kd.direct && kd.pool_fill)
          KVB_CUDA_CHECK(cudaMemsetAsync(pools.at<void>(l, "has_state"), 0, size_t(batch) * 4, st));
        layer_step(l, st);
      }
      // At C = 1 the scheduler's metadata never changes (fill stays 0, every row folds); a fixed
      // fill stays where it is.
      if (!kd.pool_fill && chunk > 1 && direct_fill < 0) {
        advance_row_meta_kernel<<<(batch + 255) / 256, 256, 0, st>>>(row_fill.as<int32_t>(), row_has.as<int32_t>(),
                                                                    batch, chunk, kd.direct ? 1 : 0);
        KVB_CUDA_CHECK_LAUNCH();
      }
    };
  }
  KVB_CUDA_CHECK(cudaDeviceSynchronize());
  GraphTiming how;
  how.layers = L;
  const int cyc = std::max(chunk, 1);
  how.steps_per_sample = cyc * ((4 + cyc - 1) / cyc);
  how.budget_s = a.budget_s;
  // Skip points whose minimum sampling would exceed max_point_s (raw at large C and batch).
  {
    GraphTiming probe = how;
    probe.steps_per_sample = 1, probe.warmup_samples = 1, probe.min_samples = 1, probe.max_samples = 1;
    const TimingStats t = time_graph_steps(step, probe);
    const double est_s = t.median_us * L * how.steps_per_sample * (how.warmup_samples + how.min_samples) * 1e-6;
    if (est_s > a.max_point_s) {
      why = fmt::format("one step takes {:.0f} us per layer, {:.0f} s to sample (--max-point-s {:.0f})", t.median_us,
                        est_s, a.max_point_s);
      return false;
    }
  }
  out.t = time_graph_steps(step, how);
  out.bytes_per_layer_step = step_bytes(s, kd, batch, std::max(chunk, 1), state_type, direct_fill);
  return true;
}

void print_decode_summary(const SweepArgs& a, const std::vector<DecodePoint>& rows) {
  const std::string baseline = a.model.layer.kind == LayerKind::Mamba2 ? "mamba2-recurrent" : "recurrent";
  std::vector<StateType> states;
  for (const DecodePoint& r : rows)
    if (std::find(states.begin(), states.end(), r.state) == states.end()) states.push_back(r.state);
  for (StateType state : states) {  // one table per state dtype, each against its own recurrent
    std::vector<int> batches;
    std::vector<std::string> kernels;
    std::map<std::pair<std::string, int>, const DecodePoint*> best;
    for (const DecodePoint& r : rows) {
      if (r.state != state) continue;
      if (std::find(batches.begin(), batches.end(), r.batch) == batches.end()) batches.push_back(r.batch);
      if (std::find(kernels.begin(), kernels.end(), r.kernel) == kernels.end()) kernels.push_back(r.kernel);
      auto& b = best[{r.kernel, r.batch}];
      if (!b || r.median_us < b->median_us) b = &r;
    }
    fmt::print("\nSummary, {} states: latency per layer (us, median) at the best chunk C [C], speedup vs recurrent "
               "(in place); {} | commit {}\n",
               state_type_name(state), a.gpu, a.commit);
    fmt::print("{:>6}", "batch");
    for (const auto& k : kernels) fmt::print(" {:>22}", k);
    fmt::print("\n");
    for (int b : batches) {
      fmt::print("{:>6}", b);
      const auto rec = best.find({baseline, b});
      for (const auto& k : kernels) {
        const auto it = best.find({k, b});
        if (it == best.end()) {
          fmt::print(" {:>22}", "-");
          continue;
        }
        std::string cell = fmt::format("{:.2f}", it->second->median_us);
        if (it->second->chunk > 0) cell += fmt::format(" [{}]", it->second->chunk);
        if (rec != best.end() && k != baseline)
          cell += fmt::format(" {:.2f}x", rec->second->median_us / it->second->median_us);
        fmt::print(" {:>22}", cell);
      }
      fmt::print("\n");
    }
  }
}

void print_decode_header(const SweepArgs& a) {
  const LayerShape& s = a.model.layer;
  const int L = layers_of(a);
  if (s.kind == LayerKind::Mamba2)
    fmt::print("GPU {} | commit {} | model {} (G={} NH={} N={} P={}) | {} layer pools per step | copy {:.0f} GB/s\n",
               a.gpu, a.commit, a.model.name, s.key_heads, s.value_heads, s.head_k, s.head_v, L, a.copy_gbps);
  else
    fmt::print("GPU {} | commit {} | model {} (H={} HV={} K={} V={}) | {} layer pools per step | copy {:.0f} GB/s\n",
               a.gpu, a.commit, a.model.name, s.key_heads, s.value_heads, s.head_k, s.head_v, L, a.copy_gbps);
}

std::vector<std::string> decode_row(const SweepArgs& a, const SweepKernel& kd, int batch, int chunk, int direct_fill,
                                    StateType state_type, std::vector<DecodePoint>& points, bool& failed) {
  const int L = layers_of(a);
  failed = false;
  const std::string variant = kd.buffered ? variant_name(kd.variant) : "none";
  const std::string entry = kd.buffered ? entry_type_name(kd.entry) : "none";
  const std::string placement = kd.out_of_place ? "out-of-place" : "in-place";
  auto row = [&](const std::vector<std::string>& measured, const std::string& note) {
    std::vector<std::string> r = {a.model.name, kd.name, variant, entry, placement, std::to_string(batch),
                                  std::to_string(chunk), std::to_string(L)};
    r.insert(r.end(), measured.begin(), measured.end());
    r.insert(r.end(), {a.gpu, a.commit, note});
    return r;
  };
  DecodeTiming d;
  std::string why;
  try {
    if (!time_decode_point(a, kd, batch, chunk, state_type, d, why, direct_fill)) {
      fmt::print("skip {} batch {} chunk {} state {}: {}\n", kd.name, batch, chunk, state_type_name(state_type), why);
      return row(std::vector<std::string>(12), "skipped: " + why);
    }
  } catch (const std::invalid_argument&) {
    throw;
  } catch (const LaunchShapeRefused& e) {
    fmt::print("skip {} batch {} chunk {} state {}: {}\n", kd.name, batch, chunk, state_type_name(state_type), e.what());
    return row(std::vector<std::string>(12), std::string("skipped: ") + e.what());
  } catch (const std::exception& e) {
    failed = true;
    fmt::print("FAILED {} batch {} chunk {} state {}: {}\n", kd.name, batch, chunk, state_type_name(state_type), e.what());
    cudaGetLastError();
    return row(std::vector<std::string>(12), std::string("failed: ") + e.what());
  }
  const TimingStats& t = d.t;
  const double gbps = d.bytes_per_layer_step / (t.median_us * 1e-6) / 1e9;
  fmt::print("{:<14} {} batch {:>4} chunk {:>3}{}: {:9.2f} us/layer (min {:.2f}, max {:.2f}, {} samples)  {:7.0f} GB/s  "
             "{:5.1f}% of copy\n",
             kd.name, state_type_name(state_type), batch, chunk,
             direct_fill >= 0 ? fmt::format(" fill {:>2}", direct_fill) : "", t.median_us,
             t.min_us, t.max_us, t.samples, gbps, 100 * gbps / a.copy_gbps);
  if (const std::string limits = t.telemetry.clock_limit_note(); !limits.empty()) fmt::print("  {}\n", limits);
  if (direct_fill < 0) points.push_back({kd.name, state_type, batch, chunk, t.median_us});
  return row({std::to_string(d.rows_per_block), std::to_string(d.row_groups), fmt_g(t.median_us), fmt_g(t.min_us),
              fmt_g(t.max_us), std::to_string(t.samples), fmt_g(d.bytes_per_layer_step), fmt_g(gbps),
              fmt_g(gbps / a.copy_gbps), fmt_g(a.copy_gbps), t.telemetry.clock_mhz(), t.telemetry.power_w()},
             note_with_clock_limits(kd.kind == LayerKind::Mamba2 ? "z gate and dt softplus in the kernel" : "",
                                    t.telemetry));
}

}  // namespace kvbuf
