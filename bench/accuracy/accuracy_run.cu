// The GPU driver of `kvbuf accuracy` (run_accuracy_on_gpu of bench/gpu_commands.h): per model, the
// inputs of bench/accuracy/accuracy.h uploaded once (bf16 token tensors, fp32 layer parameters),
// then for each variant a one-slot pool set placed by sim/layout.h (decode_pools, as the sweep's)
// decoding one request token by token: the recurrent kernel in place, or KVBuffer decode with
// cached-u entries and scheduler row metadata (fill t % C, every row with a state: the sweep's
// `kvbuffer` / `mamba2-kvbuffer` kernels). Between sampled tokens every variant's launches are
// queued first, then the float64 reference steps the same tokens on the CPU threads while the GPU
// runs; at the sampled token each variant's outputs since the last sample and (when the pool holds
// it) its state are copied back, compared in float64, and written as a row.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench/accuracy/accuracy.h"
#include "bench/csv.h"
#include "bench/gpu_commands.h"
#include "bench/gpu_timing.h"
#include "kernels/common/checks/check_common.h"
#include "kernels/common/cuda_check.h"
#include "kernels/gdn/gdn_decode.h"
#include "kernels/mamba2/mamba2_decode.h"
#include "reference/random_inputs.h"

namespace kvbuf {
namespace {

using accuracy::Variant;

// Values already bf16 (the inputs are drawn so), as the bits a kernel reads.
DeviceBuffer upload_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> bits(x.size());
  for (size_t i = 0; i < x.size(); ++i) bits[i] = ref::float_to_bf16_bits(x[i]);
  DeviceBuffer d(bits.size() * 2);
  d.upload(bits);
  return d;
}
DeviceBuffer upload_f32(const std::vector<float>& x) {
  DeviceBuffer d(x.size() * 4);
  d.upload(x);
  return d;
}
DeviceBuffer upload_i32(const std::vector<int32_t>& x) {
  DeviceBuffer d(x.size() * 4);
  d.upload(x);
  return d;
}

// One variant's device memory: the layer's pools for one request (state zero, buffer poisoned:
// a read of an entry never written shows as NaN), the outputs of up to `window` tokens, the split
// path's scratch.
struct VariantRun {
  Variant v;
  DevicePools pools;
  DeviceBuffer out, scratch;
  VariantRun(const Variant& var, const LayerShape& s, int window)
      : v(var),
        pools(PoolPlan(decode_pools(PoolLayout{s, var.kvbuffer ? var.chunk : 0, BufferVariant::CachedU,
                                               precision_of(var.entry, var.state)},
                                    false),
                       1, 1)),
        out(size_t(window) * s.value_heads * s.head_v * 2),
        scratch(var.kvbuffer ? size_t(s.value_heads) * 2 * s.head_v * 4 : 0) {
    for (const PoolTensor& t : pools.plan().tensors()) {
      void* p = pools.at<void>(0, t.name);
      KVB_CUDA_CHECK(cudaMemset(p, t.name.rfind("buf_", 0) == 0 ? 0xff : 0, t.bytes_per_slot()));
    }
  }
  size_t state_bytes() const { return pools.plan().tensor_bytes("state"); }
};

// What both families' device sides hold: the request's slot (0), its has_state (1), and per C the
// scheduler's fill of every token (t % C).
struct Common {
  DeviceBuffer slot = upload_i32({0}), has_state = upload_i32({1});
  std::vector<std::pair<int, DeviceBuffer>> fills;  // C -> [tokens] t % C
  Common(const std::vector<Variant>& variants, int tokens) {
    for (const Variant& v : variants) {
      if (!v.kvbuffer) continue;
      bool have = false;
      for (const auto& f : fills) have |= f.first == v.chunk;
      if (have) continue;
      std::vector<int32_t> fill(static_cast<size_t>(tokens));
      for (int t = 0; t < tokens; ++t) fill[size_t(t)] = t % v.chunk;
      fills.emplace_back(v.chunk, upload_i32(fill));
    }
  }
  const int32_t* fill_at(int chunk, int t) const {
    for (const auto& f : fills)
      if (f.first == chunk) return f.second.as<int32_t>() + t;
    throw std::logic_error("accuracy: no fills for C " + std::to_string(chunk));
  }
};

// The device side of one model: every token's inputs; launch() queues token t of one variant, its
// outputs at row t - window_begin of the variant's output window.
struct GdnFamily {
  const accuracy::GdnInputs& in;
  Common common;
  DeviceBuffer q, k, v, a, b, A_log, dt_bias;
  GdnFamily(const accuracy::GdnInputs& inputs, const std::vector<Variant>& variants)
      : in(inputs),
        common(variants, inputs.tokens),
        q(upload_bf16(in.q)),
        k(upload_bf16(in.k)),
        v(upload_bf16(in.v)),
        a(upload_bf16(in.a)),
        b(upload_bf16(in.b)),
        A_log(upload_f32(in.A_log)),
        dt_bias(upload_f32(in.dt_bias)) {}
  int outputs_per_token() const { return in.dims.HV * in.dims.V; }
  bool state_transposed() const { return true; }  // pool [HV, V, K], the reference K x V
  void launch(VariantRun& r, int t, int window_begin) {
    const ref::GdnDims& d = in.dims;
    GdnStepIO io;
    io.batch = 1, io.H = d.H, io.HV = d.HV, io.K = d.K, io.V = d.V;
    io.slot = common.slot.as<int32_t>();
    io.q = q.as<__nv_bfloat16>() + size_t(t) * d.H * d.K;
    io.k = k.as<__nv_bfloat16>() + size_t(t) * d.H * d.K;
    io.v = v.as<__nv_bfloat16>() + size_t(t) * d.HV * d.V;
    // Gates in kernel, as the model computes them.
    io.a = a.as<__nv_bfloat16>() + size_t(t) * d.HV;
    io.b = b.as<__nv_bfloat16>() + size_t(t) * d.HV;
    io.A_log = A_log.as<float>(), io.dt_bias = dt_bias.as<float>();
    io.out = r.out.as<__nv_bfloat16>() + size_t(t - window_begin) * d.HV * d.V;
    void* state = r.pools.at<void>(0, "state");
    if (!r.v.kvbuffer) {
      GdnRecurrentParams p;
      p.io = io, p.state_in = state, p.state_out = state, p.state_type = r.v.state;
      gdn_decode_recurrent(p, 0);
      return;
    }
    GdnKVBufferParams p;
    p.io = io;
    p.variant = BufferVariant::CachedU, p.entry = r.v.entry, p.capacity = r.v.chunk;
    p.state_type = r.v.state, p.state = state;
    p.buf_k = r.pools.at<void>(0, "buf_k"), p.buf_val = r.pools.at<void>(0, "buf_val");
    p.buf_gcum = r.pools.at<float>(0, "buf_gcum");
    p.row_fill = common.fill_at(r.v.chunk, t), p.row_has_state = common.has_state.as<int32_t>();
    p.every_row_has_state = true;
    p.scratch = r.scratch.as<float>();
    gdn_decode_kvbuffer(p, 0);
  }
};

struct Mamba2Family {
  const accuracy::Mamba2Inputs& in;
  Common common;
  DeviceBuffer x, B, C, dt, dt_bias, A, D;
  Mamba2Family(const accuracy::Mamba2Inputs& inputs, const std::vector<Variant>& variants)
      : in(inputs),
        common(variants, inputs.tokens),
        x(upload_bf16(in.x)),
        B(upload_bf16(in.B)),
        C(upload_bf16(in.C)),
        dt(upload_bf16(in.dt_raw)),
        dt_bias(upload_f32(in.dt_bias)),
        A(upload_f32(in.A)),
        D(upload_f32(in.D)) {}
  int outputs_per_token() const { return in.dims.NH * in.dims.P; }
  bool state_transposed() const { return false; }
  void launch(VariantRun& r, int t, int window_begin) {
    const ref::Mamba2Dims& d = in.dims;
    Mamba2StepIO io;
    io.batch = 1, io.G = d.G, io.NH = d.NH, io.P = d.P, io.N = d.N;
    io.slot = common.slot.as<int32_t>();
    io.x = x.as<__nv_bfloat16>() + size_t(t) * d.NH * d.P;
    io.B = B.as<__nv_bfloat16>() + size_t(t) * d.G * d.N;
    io.C = C.as<__nv_bfloat16>() + size_t(t) * d.G * d.N;
    io.dt = dt.as<__nv_bfloat16>() + size_t(t) * d.NH;
    io.dt_bias = dt_bias.as<float>(), io.dt_softplus = true;
    io.A = A.as<float>(), io.D = D.as<float>();
    io.z = nullptr;  // no gate: engines gate in the RMSNorm after the update
    io.out = r.out.as<__nv_bfloat16>() + size_t(t - window_begin) * d.NH * d.P;
    void* state = r.pools.at<void>(0, "state");
    if (!r.v.kvbuffer) {
      Mamba2RecurrentParams p;
      p.io = io, p.state = state, p.state_type = r.v.state;
      mamba2_decode_recurrent(p, 0);
      return;
    }
    Mamba2KVBufferParams p;
    p.io = io, p.capacity = r.v.chunk, p.state = state, p.state_type = r.v.state;
    p.buf_k = r.pools.at<__nv_bfloat16>(0, "buf_k"), p.buf_val = r.pools.at<__nv_bfloat16>(0, "buf_val");
    p.buf_gcum = r.pools.at<float>(0, "buf_gcum"), p.buf_beta = r.pools.at<float>(0, "buf_beta");
    p.row_fill = common.fill_at(r.v.chunk, t), p.row_has_state = common.has_state.as<int32_t>();
    p.every_row_has_state = true;
    mamba2_decode_kvbuffer(p, 0);
  }
};

// The pool's state as doubles in its layout.
std::vector<double> download_state(const VariantRun& r) {
  std::vector<unsigned char> bytes(r.state_bytes());
  KVB_CUDA_CHECK(cudaMemcpy(bytes.data(), r.pools.at<void>(0, "state"), bytes.size(), cudaMemcpyDeviceToHost));
  const size_t sz = size_t(state_type_bytes(r.v.state));
  std::vector<double> s(bytes.size() / sz);
  for (size_t i = 0; i < s.size(); ++i) s[i] = checks::decode_state(r.v.state, &bytes[i * sz]);
  return s;
}

// One model: every variant over every token, a row per variant and sampled token.
template <class Inputs, class Reference, class Dev>
void run_model(const accuracy::Options& o, const ModelSpec& m, const Inputs& in, CsvWriter& csv,
               const std::string& gpu, const std::string& commit) {
  const LayerKind kind = m.kind;
  const std::vector<Variant> variants = accuracy::make_variants(kind, o.states, o.chunks, o.entries);
  const std::vector<int> samples = accuracy::sample_points(o.tokens, o.every);
  const int window = std::min(o.every, o.tokens);
  Dev dev(in, variants);
  std::vector<std::unique_ptr<VariantRun>> runs;
  for (const Variant& v : variants) runs.push_back(std::make_unique<VariantRun>(v, m.layer, window));
  KVB_CUDA_CHECK(cudaDeviceSynchronize());
  Reference reference(in, o.threads);
  const std::string family = kind == LayerKind::Mamba2 ? "mamba2" : "gdn";
  const int per_token = dev.outputs_per_token();
  std::vector<accuracy::Row> last(variants.size());
  std::vector<double> o_ref;
  int begin = 0;
  for (const int end : samples) {
    for (auto& r : runs)
      for (int t = begin; t < end; ++t) dev.launch(*r, t, begin);
    reference.step(begin, end, o_ref);  // on the CPU while the GPU runs
    const auto ref_state = reference.state();
    std::vector<accuracy::Row> rows(runs.size());
    accuracy::parallel_for(int(runs.size()), o.threads, [&](int i) {
      const VariantRun& r = *runs[size_t(i)];
      const int count = end - begin;
      std::vector<uint16_t> bits(size_t(count) * per_token);
      KVB_CUDA_CHECK(cudaMemcpy(bits.data(), r.out.as<void>(), bits.size() * 2, cudaMemcpyDeviceToHost));
      std::vector<float> out(bits.size());
      for (size_t j = 0; j < bits.size(); ++j) out[j] = ref::bf16_bits_to_float(bits[j]);
      accuracy::Row& row = rows[size_t(i)];
      row.family = family, row.model = m.name, row.variant = r.v, row.tokens = end, row.window_tokens = count;
      row.seed = o.seed, row.gpu = gpu, row.commit = commit;
      for (int t = 0; t < count; ++t) {
        const accuracy::OutputError e =
            accuracy::output_error(&out[size_t(t) * per_token], &o_ref[size_t(t) * per_token], size_t(per_token));
        row.window.add(e);
        if (t == count - 1) row.out = e;
      }
      if (accuracy::state_in_pool(r.v, end))
        row.state = accuracy::state_error(download_state(r), ref_state, dev.state_transposed(), r.v.state);
      else
        row.note = fmt::format("no state: S0 between folds ({} tokens, not a multiple of C = {})", end, r.v.chunk);
    });
    for (size_t i = 0; i < rows.size(); ++i) {
      csv.row(accuracy::csv_fields(rows[i]));
      last[i] = rows[i];
    }
    begin = end;
  }
  KVB_CUDA_CHECK(cudaGetLastError());
  fmt::print("{:<34} {:>10} {:>10} {:>12} {:>12}  (after {} tokens)\n", "variant", "out err", "out window",
             "state err", "one rounding", o.tokens);
  for (const accuracy::Row& r : last)
    fmt::print("{:<34} {:>10.3e} {:>10.3e} {:>12} {:>12}\n", r.variant.label(), r.out.rel(), r.window.rel(),
               r.state ? fmt::format("{:.3e}", r.state->rel) : "-",
               r.state ? fmt::format("{:.3e}", r.state->one_rounding) : "-");
}

}  // namespace

int run_accuracy_on_gpu(const accuracy::Options& given, const std::string& commit) {
  accuracy::validate(given);
  if (!gpu_present()) throw std::runtime_error("kvbuf accuracy: no CUDA device answers");
  accuracy::Options o = given;
  const std::string gpu = gpu_name();
  if (o.out.empty()) o.out = accuracy::default_out_path(gpu);
  CsvWriter csv(o.out, accuracy::csv_columns());
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  fmt::print("kvbuf accuracy: {} | commit {} | {} tokens of one request, a row every {} tokens | seed {} | {} CPU "
             "threads for the float64 reference\n",
             gpu, commit, o.tokens, o.every, o.seed, accuracy::resolve_threads(o.threads));
  if (const std::string note = accuracy::sampling_note(o); !note.empty()) fmt::print("{}\n", note);
  for (const std::string& name : o.models) {
    const ModelSpec& m = find_model(name);
    const LayerShape& s = m.layer;
    const auto variants = accuracy::make_variants(m.kind, o.states, o.chunks, o.entries);
    fmt::print("\n== {} ({}: {} {}, {} {}, head dims {} x {}), {} variants\n{}\n", m.name,
               m.kind == LayerKind::Mamba2 ? "Mamba-2" : "Gated DeltaNet",
               s.key_heads, m.kind == LayerKind::Mamba2 ? "groups" : "key heads", s.value_heads,
               m.kind == LayerKind::Mamba2 ? "heads" : "value heads", s.head_k, s.head_v, variants.size(),
               accuracy::inputs_description(m.kind));
    std::vector<double> decays;
    if (m.kind == LayerKind::Mamba2) {
      const auto in = accuracy::make_mamba2_inputs(accuracy::mamba2_dims(s), o.tokens, o.seed, o.threads);
      decays = accuracy::median_decays(in);
      fmt::print("median decay per token over heads: {:.4f} .. {:.4f}\n", *std::min_element(decays.begin(), decays.end()),
                 *std::max_element(decays.begin(), decays.end()));
      run_model<accuracy::Mamba2Inputs, accuracy::Mamba2Reference, Mamba2Family>(o, m, in, csv, gpu, commit);
    } else {
      const auto in = accuracy::make_gdn_inputs(accuracy::gdn_dims(s), o.tokens, o.seed, o.threads);
      decays = accuracy::median_decays(in);
      fmt::print("median decay per token over heads: {:.4f} .. {:.4f}\n", *std::min_element(decays.begin(), decays.end()),
                 *std::max_element(decays.begin(), decays.end()));
      run_model<accuracy::GdnInputs, accuracy::GdnReference, GdnFamily>(o, m, in, csv, gpu, commit);
    }
    fmt::print("{} done, {:.1f} s after the start\n", m.name, elapsed());
  }
  fmt::print("\nwrote {} ({:.1f} s)\n", o.out, elapsed());
  return 0;
}

}  // namespace kvbuf
