// The Mamba-2 decode kernel checks of mamba2_decode_checks.h (the twin of gdn_decode_checks).
// Each case runs a batch of requests through the kernel step by step on fresh random bf16 inputs
// and compares, against ref::mamba2_decode_recurrent in float64 on exactly
// those inputs: every output of every step, and the state of every request after every fold
// (recurrent: after every step). Requests start at staggered steps (so their buffers sit at
// different fills: some flush at every step); before a request starts and after it ends its row
// is a padding row, plus fixed padding rows, whose outputs must be exactly zero. After every step
// the whole state pool is read back: every slot without a fold (or, recurrent, without an active
// request) must be bitwise unchanged, which is the "S0 read only until the buffer is full" claim.
// Outputs are poisoned (NaN) before every launch, buffer pools at start, and the state slots of
// direct-mode requests too (a read of a state that does not exist shows as NaN).
//
// Tolerances, elementwise, derived from the precision (reference/mamba2.h, mamba2_f32_gamma):
//   fp32 arithmetic: |err| <= gamma * (the same element computed in float64 on |x|, |B|, |C|, |D|,
//     |S0|), gamma = 2 u (N + L + W + E + 8), u = 2^-24, per request over its whole token sequence
//     with window W = C (1 for the recurrent kernel). The step size enters through fp32 softplus
//     (a few ulp relative: one of the 8 per-term operations).
//   output: the bf16 store keeps 8 significant bits, rounding by at most 2^-8 of the computed
//     value ref + e, |e| <= |silu(z)| gamma y_abs (the fp32 error scaled by the gate when z is on;
//     the gate's own few fp32 operations are among the 8 per term):
//     |out - ref| <= 2^-8 |ref| + (1 + 2^-8) |silu(z)| gamma y_abs. The bf16 rounding alone reaches
//     0.9-0.98 of this bound in every case (run 1), so a missing term of relative size >= 2^-8 fails.
//   state: fp32 throughout, no bf16 anywhere (entries hold the bf16 inputs exactly):
//     |S - S_ref| <= gamma S_abs.
// 16-bit states (Mamba2DecodeCase::state bf16 or fp16): the initial state is drawn, rounded to the
// type and uploaded in it; the reference starts from the rounded values and rounds the state where
// the kernel writes it (reference/state_rounding.h: ref::mamba2_decode_recurrent after every token
// for the recurrent kernel, the Mamba2KVBuffer model's fold for kvbuffer and direct, whose outputs it
// then computes from S0 and the buffer as the kernel does). Everything else is fp32 arithmetic as
// above, so what remains is that error crossing a rounding boundary. The type keeps p significant
// bits (bf16 8, fp16 11), u_t = 2^-p; one ulp of a normal x is <= 2 u_t |x|; below fp16's normal
// range (2^-14) an ulp is 2^-24 (floor_t; bf16's 2^-133 never matters).
//   state: where the kernel's fp32 value and the reference's straddle a rounding boundary they
//     round one ulp apart (<= 2 u_t |S_ref| + floor_t); such a difference carried from an earlier
//     write is scaled by the decay since, so bounded by 2 u_t S_abs + floor_t (S_abs >= the decayed
//     |S| of that write). With the fp32 error of the values before rounding:
//     |S - S_ref| <= gamma S_abs + 2 u_t (|S_ref| + S_abs) + 2 floor_t (one ulp here, one carried).
//     A run of further boundary flips on one element (differences of 3 ulp and more) would need the
//     fp32 error to beat (1 - decay) ulp of the type again and again: dt |A| >= 1e-3 in the typical
//     regime against fp32 errors of ~2^-16 ulp (bf16); at dt near zero the state does not move
//     between writes, and both sides round back to the same value.
//   output: computed from a state (recurrent: the previous token's stored one; kvbuffer: S0) whose
//     elements differ by at most the above <= 4 u_t S_abs + 2 floor_t, scaled by the decay and
//     dotted with C: at most 4 u_t y_abs + 2 floor_t sum |C_t|, next to the fp32 term:
//     |out - ref| <= 2^-8 |ref| + (1 + 2^-8) |silu(z)| ((gamma + 4 u_t) y_abs + 2 floor_t sum |C_t|).
//   (u_t = floor_t = 0 for fp32: the bounds above.) The bitwise "slot unchanged" check compares the
//   pool's bytes in its type.
// NaN never passes (comparisons are written as !(err <= tol)).
#include "kernels/mamba2/checks/mamba2_decode_checks.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <sstream>

#include "kernels/common/cuda_check.h"
#include "kernels/common/checks/late_copy.h"
#include "kernels/common/device_buffer.h"
#include "kernels/mamba2/mamba2_decode.h"
#include "reference/mamba2.h"
#include "reference/random_inputs.h"
#include "reference/state_rounding.h"

namespace kvbuf::mamba2_check {

namespace {

uint16_t bf16_bits(double x) { return ref::float_to_bf16_bits(float(x)); }
double softplus(double x) { return x > 30 ? x : std::log1p(std::exp(x)); }
double silu(double z) { return z / (1 + std::exp(-z)); }

// One request's whole token sequence: the float64 reference tokens (bf16 / fp32-exact values, dt
// after the kernel's fp32 sum dt_raw + dt_bias and a float64 softplus) and the raw kernel inputs.
struct RequestTokens {
  ref::Mamba2Tokens<double> tok;
  std::vector<uint16_t> x, B, C, z, dt_raw;  // bf16 bits [steps, ...]
  std::vector<double> zval;                  // z as values
};

RequestTokens make_request_tokens(const ref::Mamba2Dims& d, int steps, const std::vector<float>& A,
                                         const std::vector<float>& D, const std::vector<float>& dt_bias,
                                         DtRegime regime, std::mt19937_64& rng) {
  RequestTokens r;
  std::normal_distribution<double> normal(0.0, 1.0);
  auto draw = [&](size_t count, std::vector<uint16_t>& bits, std::vector<double>& vals) {
    bits.resize(count), vals.resize(count);
    for (size_t i = 0; i < count; ++i) {
      bits[i] = bf16_bits(normal(rng));
      vals[i] = ref::bf16_bits_to_float(bits[i]);
    }
  };
  auto& t = r.tok;
  t.dims = d, t.steps = steps;
  draw(size_t(steps) * d.NH * d.P, r.x, t.x);
  draw(size_t(steps) * d.G * d.N, r.B, t.B);
  draw(size_t(steps) * d.G * d.N, r.C, t.C);
  draw(size_t(steps) * d.NH * d.P, r.z, r.zval);
  t.A.assign(A.begin(), A.end());
  t.D.assign(D.begin(), D.end());
  r.dt_raw.resize(size_t(steps) * d.NH), t.dt.resize(r.dt_raw.size());
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  for (size_t i = 0; i < r.dt_raw.size(); ++i) {
    const int h = int(i % d.NH);
    double raw = 0;
    switch (regime) {
      case DtRegime::Typical: raw = 2.0 * normal(rng); break;
      case DtRegime::NearZero: raw = -16.0 + u01(rng) - dt_bias[h]; break;
      case DtRegime::Large: raw = 10.5 + 4.0 * u01(rng) - dt_bias[h]; break;
      case DtRegime::Given: raw = 0.01 + 0.49 * u01(rng); break;
    }
    r.dt_raw[i] = bf16_bits(raw);
    const float sum = ref::bf16_bits_to_float(r.dt_raw[i]) + (regime == DtRegime::Given ? 0.f : dt_bias[h]);
    t.dt[i] = regime == DtRegime::Given ? double(sum) : softplus(double(sum));
  }
  return r;
}

// Reference state of one head, [P, N] rows of the serving layout.
double state_at(const ref::Mamba2State<double>& s, int h, int p, int n) { return s[h](p, n); }

const char* kernel_name(Kernel k) {
  switch (k) {
    case Kernel::Recurrent: return "recurrent";
    case Kernel::KVBuffer: return "kvbuffer";
    case Kernel::Direct: return "direct";
  }
  return "?";
}

}  // namespace

std::string describe(const Mamba2DecodeCase& c) {
  const Mamba2DecodeCase d;  // fields left at their defaults are not listed
  std::ostringstream s;
  s << c.name << ": kernel=" << kernel_name(c.kernel) << " G=" << c.G << " NH=" << c.NH << " P=" << c.P
    << " N=" << c.N << " batch=" << c.batch;
  checks::FieldsOffDefault field(s);
  field("pad_rows", c.pad_rows, d.pad_rows);
  if (c.kernel == Kernel::Recurrent) {
    field("recurrent_steps", c.recurrent_steps, d.recurrent_steps);
  } else {
    s << " capacity=" << c.capacity;
    field("cycles", c.cycles, d.cycles), field("direct_every", c.direct_every, d.direct_every);
    field("row_metadata", c.row_metadata, d.row_metadata);
    field("every_row_has_state", c.every_row_has_state, d.every_row_has_state);
    field("path", checks::path_name(c.path), std::string(checks::path_name(d.path)));
  }
  field("dt", std::string(checks::dt_regime_name(c.dt)), std::string(checks::dt_regime_name(d.dt)));
  field("z_gate", c.z_gate, d.z_gate), field("rows_per_block", c.rows_per_block, d.rows_per_block);
  field("warp_rows", c.warp_rows, d.warp_rows);
  field("state", std::string(state_type_name(c.state)), std::string(state_type_name(d.state)));
  field("late_inputs", c.late_inputs, d.late_inputs), field("late_pools", c.late_pools, d.late_pools);
  s << " (other fields at Mamba2DecodeCase's defaults)";
  return s.str();
}

void PrintTo(const Mamba2DecodeCase& c, std::ostream* os) { *os << describe(c); }

std::string CaseResult::line(const std::string& name) const {
  std::ostringstream s;
  s << "worst out err / tol " << max_out_ratio << " (" << outputs_checked << " token outputs), worst state err / tol "
    << max_state_ratio << " (" << states_checked << " states)";
  return checks::result_line(passed, name, s.str(), message);
}

CaseResult run_decode_case(const Mamba2DecodeCase& cs, uint64_t seed) {
  CaseResult res;
  auto fail = [&](const std::string& m) {
    if (res.passed) res.message = m;
    res.passed = false;
  };
  std::mt19937_64 rng(seed);
  const bool recurrent = cs.kernel == Kernel::Recurrent;
  const ref::Mamba2Dims dims{cs.G, cs.NH, cs.N, cs.P};
  const int G = cs.G, NH = cs.NH, P = cs.P, N = cs.N, B = cs.batch, C = recurrent ? 1 : cs.capacity;
  const int rows = B + cs.pad_rows;
  const int slots = B + 2;  // two slots no row addresses: must stay untouched
  const size_t head_elems = size_t(P) * N, slot_elems = size_t(NH) * head_elems;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const StateType stype = cs.state;
  const bool state16 = stype != StateType::FP32;
  const size_t sbytes = size_t(state_type_bytes(stype));
  const double u_t = checks::state_unit(stype), floor_t = checks::state_floor(stype);
  // 16-bit buffered kernels: the reference is the Mamba2KVBuffer model rounding S0 at its folds
  // (per request, below); otherwise the recurrent reference (rounding after every token at 16 bits).
  const bool model_ref = state16 && !recurrent;
  const ref::StateStore store = state16 ? ref::StateStore(stype) : std::nullopt;

  // Layer parameters.
  std::vector<float> A(NH), D(NH), dt_bias(NH);
  {
    const bool steep = cs.dt == DtRegime::Large;
    std::uniform_real_distribution<float> a(steep ? -16.f : -4.f, steep ? -6.f : -0.5f), d(0.5f, 1.5f), b(-3.f, 0.f);
    for (int h = 0; h < NH; ++h) A[h] = a(rng), D[h] = d(rng), dt_bias[h] = b(rng);
  }

  // Request r lives in slot slot_perm[r], in row row_perm[r]; it starts at step start[r].
  checks::DecodeSchedule plan =
      checks::decode_schedule(B, rows, slots, recurrent, C, cs.cycles, cs.recurrent_steps, cs.direct_every, rng);
  const std::vector<int>&slot_perm = plan.slot_perm, &row_perm = plan.row_perm, &start = plan.start,
                        &own_steps = plan.own_steps;
  std::vector<bool>& direct = plan.direct;
  const int total_steps = plan.total_steps;
  std::vector<int> fill(B, 0), folds(B, 0);
  std::vector<RequestTokens> req(B);
  for (int r = 0; r < B; ++r) req[r] = make_request_tokens(dims, own_steps[r], A, D, dt_bias, cs.dt, rng);

  // State pool: N(0, 1) rounded to the state type; direct-mode requests' slots NaN (never to be
  // read). The reference states start as each request's slot (or zero), with their |.| twins for
  // the tolerance.
  std::vector<float> pool_host(size_t(slots) * slot_elems);
  {
    std::normal_distribution<float> nd(0.f, 1.f);
    for (auto& x : pool_host) x = float(ref::round_to_state(nd(rng), stype));
    for (int r = 0; r < B; ++r)
      if (direct[r]) std::fill_n(pool_host.begin() + size_t(slot_perm[r]) * slot_elems, slot_elems, float(nan));
  }
  std::vector<ref::Mamba2State<double>> ref_state(B), abs_state(B);
  std::vector<double> gamma(B);
  for (int r = 0; r < B; ++r) {
    ref_state[r] = ref::mamba2_zero_state<double>(dims);
    if (!direct[r]) {
      const float* s = pool_host.data() + size_t(slot_perm[r]) * slot_elems;
      for (int h = 0; h < NH; ++h)
        for (int p = 0; p < P; ++p)
          for (int n = 0; n < N; ++n) ref_state[r][h](p, n) = s[h * head_elems + size_t(p) * N + n];
    }
    for (const auto& m : ref_state[r]) abs_state[r].push_back(m.cwiseAbs());
    gamma[r] = ref::mamba2_f32_gamma(req[r].tok, C);
  }
  std::vector<std::unique_ptr<ref::Mamba2KVBuffer<double>>> model(B);
  if (model_ref)
    for (int r = 0; r < B; ++r)
      model[r] = direct[r] ? std::make_unique<ref::Mamba2KVBuffer<double>>(dims, C, store)
                           : std::make_unique<ref::Mamba2KVBuffer<double>>(dims, C, ref_state[r], store);
  // The pool's bytes in the state type (pool_bytes: what the device holds after the last check).
  std::vector<unsigned char> pool_bytes(pool_host.size() * sbytes);
  for (size_t i = 0; i < pool_host.size(); ++i) checks::encode_state(stype, pool_host[i], pool_bytes.data() + i * sbytes);
  DeviceBuffer pool(pool_bytes.size());
  pool.upload(pool_bytes);

  // Buffer pools poisoned with NaN (0xff bytes) so that reading an entry never written shows.
  DeviceBuffer buf_k(size_t(slots) * C * G * N * 2), buf_val(size_t(slots) * C * NH * P * 2);
  DeviceBuffer buf_g(size_t(slots) * C * NH * 4), buf_dt(size_t(slots) * C * NH * 4);
  DeviceBuffer d_fill(slots * 4), d_has(slots * 4), d_done(slots * 4);
  for (DeviceBuffer* d : {&buf_k, &buf_val, &buf_g, &buf_dt}) d->poison();
  std::vector<int32_t> has_init(slots, 1);
  for (int r = 0; r < B; ++r) has_init[slot_perm[r]] = direct[r] ? 0 : 1;
  d_fill.upload(std::vector<int32_t>(slots, 0));
  d_done.upload(std::vector<int32_t>(slots, 0));
  d_has.upload(has_init);

  DeviceBuffer d_row_fill(rows * 4), d_row_has(rows * 4), d_slot(rows * 4);
  DeviceBuffer d_x(size_t(rows) * NH * P * 2), d_z(size_t(rows) * NH * P * 2), d_out(size_t(rows) * NH * P * 2);
  DeviceBuffer d_B(size_t(rows) * G * N * 2), d_C(size_t(rows) * G * N * 2), d_dt(size_t(rows) * NH * 2);
  DeviceBuffer d_A(NH * 4), d_D(NH * 4), d_dtb(NH * 4);
  d_A.upload(A), d_D.upload(D), d_dtb.upload(dt_bias);

  Mamba2StepIO io;
  io.batch = rows, io.G = G, io.NH = NH, io.P = P, io.N = N;
  io.slot = d_slot.as<int32_t>();
  io.x = d_x.as<__nv_bfloat16>(), io.B = d_B.as<__nv_bfloat16>(), io.C = d_C.as<__nv_bfloat16>();
  io.dt = d_dt.as<__nv_bfloat16>();
  io.dt_softplus = cs.dt != DtRegime::Given;
  io.dt_bias = cs.dt == DtRegime::Given ? nullptr : d_dtb.as<float>();
  io.A = d_A.as<float>(), io.D = d_D.as<float>();
  io.z = cs.z_gate ? d_z.as<__nv_bfloat16>() : nullptr;
  io.out = d_out.as<__nv_bfloat16>();
  io.rows_per_block = cs.rows_per_block;

  std::uniform_int_distribution<int> any_bits(0, 0xffff);
  std::vector<double> y_ref, y_abs;
  const bool late = cs.late_inputs || cs.late_pools;
  checks::StepInputs inputs(late);
  for (int step = 0; step < total_steps; ++step) {
    // Random inputs for every row (padding rows too: they must be ignored, not zero).
    std::vector<int32_t> slot_row(rows, -1), row_fill(rows, 0), row_has(rows, 0);
    std::vector<uint16_t> x(size_t(rows) * NH * P), z(x.size()), Bv(size_t(rows) * G * N), Cv(Bv.size()),
        dt(size_t(rows) * NH);
    for (auto* v : {&x, &z, &Bv, &Cv})
      for (auto& e : *v) e = ref::float_to_bf16_bits(float(std::normal_distribution<double>(0.0, 1.0)(rng)));
    for (auto& e : dt) e = ref::float_to_bf16_bits(-2.f);
    std::vector<bool> active(B);
    for (int r = 0; r < B; ++r) active[r] = step >= start[r] && step < start[r] + own_steps[r];
    for (int row = 0; row < rows; ++row) {
      const int r = row_perm[row];
      if (!(r < B && active[r])) continue;
      const int t = step - start[r];
      const RequestTokens& q = req[r];
      std::copy_n(q.x.begin() + size_t(t) * NH * P, NH * P, x.begin() + size_t(row) * NH * P);
      std::copy_n(q.z.begin() + size_t(t) * NH * P, NH * P, z.begin() + size_t(row) * NH * P);
      std::copy_n(q.B.begin() + size_t(t) * G * N, G * N, Bv.begin() + size_t(row) * G * N);
      std::copy_n(q.C.begin() + size_t(t) * G * N, G * N, Cv.begin() + size_t(row) * G * N);
      std::copy_n(q.dt_raw.begin() + size_t(t) * NH, NH, dt.begin() + size_t(row) * NH);
      slot_row[row] = slot_perm[r];
      row_fill[row] = fill[r], row_has[row] = direct[r] ? 0 : 1;
    }
    d_slot.upload(slot_row);
    d_row_fill.upload(row_fill), d_row_has.upload(row_has);
    inputs.upload(d_x, x), inputs.upload(d_z, z), inputs.upload(d_B, Bv), inputs.upload(d_C, Cv), inputs.upload(d_dt, dt);
    if (cs.late_pools)
      for (DeviceBuffer* d : {&pool, &buf_k, &buf_val, &buf_g, &buf_dt}) inputs.defer(*d);
    d_out.poison();
    inputs.launch();

    if (recurrent) {
      Mamba2RecurrentParams p;
      p.io = io, p.state = pool.as<void>(), p.state_type = stype, p.pools_ready_at_launch = late;
      mamba2_decode_recurrent(p, inputs.stream());
    } else {
      Mamba2KVBufferParams p;
      p.io = io, p.capacity = C, p.state = pool.as<void>(), p.state_type = stype;
      p.buf_k = buf_k.as<__nv_bfloat16>(), p.buf_val = buf_val.as<__nv_bfloat16>();
      p.buf_gcum = buf_g.as<float>(), p.buf_beta = buf_dt.as<float>();
      p.path = cs.path, p.every_row_has_state = cs.every_row_has_state, p.warp_rows = cs.warp_rows;
      p.pools_ready_at_launch = late;
      if (cs.row_metadata) {
        p.row_fill = d_row_fill.as<int32_t>(), p.row_has_state = d_row_has.as<int32_t>();
      } else {
        p.fill = d_fill.as<int32_t>(), p.has_state = d_has.as<int32_t>(), p.done_count = d_done.as<int32_t>();
      }
      if (cs.kernel == Kernel::Direct)
        mamba2_decode_direct(p, inputs.stream());
      else
        mamba2_decode_kvbuffer(p, inputs.stream());
    }
    KVB_CUDA_CHECK(cudaDeviceSynchronize());
    const std::vector<uint16_t> out = d_out.download<uint16_t>();
    const std::vector<unsigned char> pool_now = pool.download<unsigned char>();
    const std::vector<int32_t> fill_dev = d_fill.download<int32_t>(), has_dev = d_has.download<int32_t>();
    std::vector<bool> slot_written(slots, false);

    for (int row = 0; row < rows; ++row) {
      const int r = row_perm[row];
      const uint16_t* o = out.data() + size_t(row) * NH * P;
      if (!(r < B && active[r])) {
        for (int i = 0; i < NH * P; ++i)
          if (o[i] != 0) {  // +0.0 in bf16
            fail("padding row " + std::to_string(row) + " output not zero at step " + std::to_string(step));
            break;
          }
        continue;
      }
      const int t = step - start[r];
      const auto tok = ref::mamba2_slice_tokens(req[r].tok, t, 1);
      if (model_ref) {
        y_ref.resize(size_t(NH) * P);
        model[r]->decode(req[r].tok, t, y_ref.data());
      } else {
        ref::mamba2_decode_recurrent<double>(tok, ref_state[r], y_ref, store);
      }
      auto tok_abs = tok;
      for (auto* v : {&tok_abs.x, &tok_abs.B, &tok_abs.C, &tok_abs.D})
        for (auto& e : *v) e = std::abs(e);
      ref::mamba2_decode_recurrent<double>(tok_abs, abs_state[r], y_abs);
      std::vector<double> c_abs(G, 0.0);  // sum |C_t| per group (the 16-bit floor term)
      for (int g = 0; g < G; ++g)
        for (int n = 0; n < N; ++n) c_abs[g] += std::abs(tok.C[size_t(g) * N + n]);
      for (int i = 0; i < NH * P; ++i) {
        const double gate = cs.z_gate ? silu(req[r].zval[size_t(t) * NH * P + i]) : 1.0;
        const double ref_o = y_ref[i] * gate;
        const double err = std::abs(double(ref::bf16_bits_to_float(o[i])) - ref_o);
        const double from_state = (gamma[r] + 4 * u_t) * y_abs[i] + 2 * floor_t * c_abs[(i / P) / (NH / G)];
        const double tol = std::ldexp(std::abs(ref_o), -8) + (1 + std::ldexp(1.0, -8)) * std::abs(gate) * from_state;
        const double ratio = err / std::max(tol, std::numeric_limits<double>::min());
        res.max_out_ratio = std::max(res.max_out_ratio, std::isnan(ratio) ? INFINITY : ratio);
        if (!(err <= tol)) {
          fail("output of request " + std::to_string(r) + " at step " + std::to_string(step) + ", element " +
               std::to_string(i) + ": " + std::to_string(ref::bf16_bits_to_float(o[i])) + " against " +
               std::to_string(ref_o) + " (tol " + std::to_string(tol) + ")");
          break;
        }
      }
      ++res.outputs_checked;

      bool folded = recurrent;
      if (!recurrent) {
        folded = fill[r] + 1 == C;
        fill[r] = folded ? 0 : fill[r] + 1;
        if (folded) ++folds[r], direct[r] = false;
        if (!cs.row_metadata && (fill_dev[slot_perm[r]] != fill[r] || has_dev[slot_perm[r]] != (direct[r] ? 0 : 1)))
          fail("fill/has_state of request " + std::to_string(r) + " wrong after step " + std::to_string(step));
      }
      if (!folded) continue;
      slot_written[slot_perm[r]] = true;
      const unsigned char* s = pool_now.data() + size_t(slot_perm[r]) * slot_elems * sbytes;
      const ref::Mamba2State<double>& s_ref = model_ref ? model[r]->checkpoint() : ref_state[r];
      double worst = 0;
      for (int h = 0; h < NH; ++h)
        for (int p = 0; p < P; ++p)
          for (int n = 0; n < N; ++n) {
            const double want = state_at(s_ref, h, p, n), s_abs = state_at(abs_state[r], h, p, n);
            const double err = std::abs(checks::decode_state(stype, s + (h * head_elems + size_t(p) * N + n) * sbytes) - want);
            const double tol = gamma[r] * s_abs + 2 * u_t * (std::abs(want) + s_abs) + 2 * floor_t;
            worst = std::max(worst, std::isnan(err) ? INFINITY : err / std::max(tol, std::numeric_limits<double>::min()));
          }
      res.max_state_ratio = std::max(res.max_state_ratio, worst);
      ++res.states_checked;
      if (!(worst <= 1))
        fail("state of request " + std::to_string(r) + " after step " + std::to_string(step) + ": worst err / tol " +
             std::to_string(worst));
    }
    // Every slot without a fold (recurrent: without an update) this step: bitwise unchanged.
    for (int sl = 0; sl < slots; ++sl) {
      const size_t off = size_t(sl) * slot_elems * sbytes;
      if (slot_written[sl]) {
        std::copy_n(pool_now.begin() + off, slot_elems * sbytes, pool_bytes.begin() + off);
      } else if (std::memcmp(pool_now.data() + off, pool_bytes.data() + off, slot_elems * sbytes) != 0) {
        fail("slot " + std::to_string(sl) + " changed at step " + std::to_string(step) + " without a fold");
      }
    }
  }
  if (!recurrent)
    for (int r = 0; r < B; ++r)
      if (folds[r] < cs.cycles) fail("request " + std::to_string(r) + " folded only " + std::to_string(folds[r]) + " times");
  return res;
}

std::vector<Mamba2DecodeCase> decode_cases(bool quick) {
  std::vector<Mamba2DecodeCase> cs;
  auto add = [&](Mamba2DecodeCase c) { cs.push_back(std::move(c)); };
  // Recurrent: both head shapes, every rows_per_block, padding, z, every dt regime, G 1 and 8.
  for (int N : {128, 64}) {
    const std::string d = "P64-N" + std::to_string(N);
    Mamba2DecodeCase r;
    r.kernel = Kernel::Recurrent, r.N = N, r.name = "recurrent-" + d + "-b3";
    add(r);
    r.z_gate = true, r.name = "recurrent-" + d + "-b3-z";
    add(r);
    r.z_gate = false, r.batch = 64, r.pad_rows = 3, r.recurrent_steps = 3, r.name = "recurrent-" + d + "-b64";
    add(r);
    for (int rows : {8, 16, 32, 64}) {  // every block shape at a batch where Auto takes 8 rows (fp32)
      r.rows_per_block = rows, r.batch = 3, r.pad_rows = 1, r.recurrent_steps = 4;
      r.name = "recurrent-" + d + "-rows" + std::to_string(rows) + "-b3";
      add(r);
    }
  }
  {
    Mamba2DecodeCase r;
    r.kernel = Kernel::Recurrent, r.batch = 1, r.pad_rows = 0;
    for (auto [regime, tag] : {std::pair{DtRegime::NearZero, "dt-near-zero"}, std::pair{DtRegime::Large, "dt-large"},
                               std::pair{DtRegime::Given, "dt-given"}}) {
      r.dt = regime, r.name = std::string("recurrent-") + tag + "-b1";
      add(r);
    }
    r.dt = DtRegime::Typical, r.batch = 3, r.G = 1, r.NH = 4, r.z_gate = true, r.name = "recurrent-G1-b3-z";
    add(r);
    r.G = 8, r.NH = 16, r.name = "recurrent-G8-NH16-b3-z";
    add(r);
    r.G = 2, r.NH = 6, r.name = "recurrent-G2-NH6-b3-z";  // 3 heads per group: head_group's divisions
    add(r);
    r.G = 8, r.NH = 64, r.z_gate = true, r.name = "recurrent-nemotron-nano-shape-b3-z";
    add(r);
    r.batch = 8, r.pad_rows = 2, r.name = "recurrent-nemotron-nano-shape-b8-z";  // the vLLM comparison's small batch
    add(r);
  }
  // KVBuffer: capacities, batches 1 / 3 / 64 with staggered fills over 3 flush cycles, pool
  // metadata and scheduler row metadata, direct rows mixed in, z, dt regimes, G, head shapes.
  for (int C : {1, 4, 16, 64}) {
    Mamba2DecodeCase c;
    c.capacity = C, c.batch = 3, c.name = "kvbuffer-C" + std::to_string(C) + "-b3";
    add(c);
    c.row_metadata = true, c.z_gate = true, c.name = "kvbuffer-C" + std::to_string(C) + "-b3-rowmeta-z";
    add(c);
    c.row_metadata = false, c.z_gate = false, c.batch = 1, c.pad_rows = 0, c.name = "kvbuffer-C" + std::to_string(C) + "-b1";
    add(c);
  }
  // Capacity 1, every row stateful by the scheduler's promise: the recurrent kernel at batch 3 and 64.
  {
    Mamba2DecodeCase c;
    c.capacity = 1, c.row_metadata = true, c.every_row_has_state = true, c.cycles = 4;
    c.batch = 3, c.name = "kvbuffer-C1-every-row-stateful-b3";
    add(c);
    c.batch = 64, c.pad_rows = 2, c.G = 8, c.NH = 64, c.z_gate = true;
    c.name = "kvbuffer-C1-every-row-stateful-nemotron-nano-shape-b64-z";
    add(c);
  }
  {
    Mamba2DecodeCase c;
    c.batch = 64, c.pad_rows = 2, c.capacity = 16, c.direct_every = 4, c.z_gate = true;
    c.name = "kvbuffer-C16-b64-mixed-direct-z";
    add(c);
    c.capacity = 64, c.N = 64, c.direct_every = 0, c.z_gate = false, c.row_metadata = true, c.name = "kvbuffer-P64-N64-C64-b64-rowmeta";
    add(c);
    c.capacity = 4, c.N = 128, c.direct_every = 0, c.row_metadata = false, c.G = 8, c.NH = 16, c.batch = 64, c.name = "kvbuffer-G8-NH16-C4-b64";
    add(c);
  }
  {
    Mamba2DecodeCase c;
    c.capacity = 8, c.batch = 3;
    for (auto [regime, tag] : {std::pair{DtRegime::NearZero, "dt-near-zero"}, std::pair{DtRegime::Large, "dt-large"},
                               std::pair{DtRegime::Given, "dt-given"}}) {
      c.dt = regime, c.name = std::string("kvbuffer-C8-") + tag + "-b3";
      add(c);
    }
    c.dt = DtRegime::Large, c.direct_every = 2, c.name = "kvbuffer-C8-dt-large-mixed-direct-b3";
    add(c);
    c.dt = DtRegime::Typical, c.direct_every = 0;
    c.G = 1, c.z_gate = true, c.name = "kvbuffer-C8-G1-b3-z";
    add(c);
    c.G = 2, c.NH = 6, c.name = "kvbuffer-C8-G2-NH6-b3-z";  // 3 heads per group: heads 0 and 3 append B_t
    add(c);
    c.G = 8, c.NH = 64, c.capacity = 16, c.name = "kvbuffer-nemotron-nano-shape-C16-b3-z";
    add(c);
    c.G = 2, c.NH = 4, c.capacity = 8;
    for (int rows : {8, 16, 32}) {
      c.rows_per_block = rows, c.name = "kvbuffer-C8-rows" + std::to_string(rows) + "-b3-z";
      add(c);
    }
    c.rows_per_block = 0, c.N = 64, c.z_gate = false, c.name = "kvbuffer-P64-N64-C8-b3";
    add(c);
    // One-warp blocks at C = 64: the block's 32 threads stage up to 63 keys and 2 x 63 scalars.
    c.N = 128, c.capacity = 64, c.rows_per_block = 8, c.z_gate = true, c.name = "kvbuffer-C64-rows8-b3-z";
    add(c);
    c.rows_per_block = 0, c.G = 8, c.NH = 64, c.row_metadata = true, c.z_gate = false, c.cycles = 2;
    c.name = "kvbuffer-nemotron-nano-shape-C32-b3-rowmeta";
    c.capacity = 32;
    add(c);
  }
  // Direct entry point: every request stateless (the fold creates the state), and mixed.
  for (int C : {4, 16, 64}) {
    Mamba2DecodeCase c;
    c.kernel = Kernel::Direct, c.capacity = C, c.batch = 3, c.direct_every = 1;
    c.name = "direct-C" + std::to_string(C) + "-b3";
    add(c);
  }
  {
    Mamba2DecodeCase c;
    c.kernel = Kernel::Direct, c.capacity = 64, c.batch = 3, c.direct_every = 1, c.rows_per_block = 16, c.z_gate = true;
    c.name = "direct-C64-rows16-b3-z";
    add(c);
  }
  {
    Mamba2DecodeCase c;
    c.kernel = Kernel::Direct, c.capacity = 16, c.batch = 64, c.pad_rows = 2, c.direct_every = 2, c.row_metadata = true,
    c.z_gate = true, c.name = "direct-C16-b64-mixed-rowmeta-z";
    add(c);
  }
  // The split direct path (scheduler metadata; Auto from C = 4, batch x C >= 256; forced at batch 3):
  // kernel A for the stateless rows that do not fold, kernel B (compacted rows) for the folds and
  // the rows that got a state at their first fold, so every case below mixes both after one cycle;
  // heads per group not a multiple of kernel A's 8 (G = 1, NH = 12: chunks of 8 and 4), N = 64,
  // several folds per step at batch 64, the Nemotron-3 Nano shape; the split forced below its
  // capacity (C = 1, 2) and the single kernel forced where Auto would split.
  {
    Mamba2DecodeCase c;
    c.kernel = Kernel::Direct, c.row_metadata = true, c.direct_every = 1, c.z_gate = true, c.path = DecodePath::Split;
    for (int C : {4, 64}) {
      c.capacity = C, c.name = "direct-split-C" + std::to_string(C) + "-b3-rowmeta-z";
      add(c);
    }
    c.capacity = 8, c.G = 1, c.NH = 12, c.name = "direct-split-G1-NH12-C8-b3-rowmeta-z";
    add(c);
    c.G = 8, c.NH = 64, c.capacity = 64, c.cycles = 2, c.name = "direct-split-nemotron-nano-shape-C64-b3-rowmeta-z";
    add(c);
    c.path = DecodePath::Auto;  // batch 64 below: the dispatch's choice
    c.G = 2, c.NH = 4, c.N = 64, c.batch = 64, c.pad_rows = 2, c.capacity = 64, c.z_gate = false;
    c.name = "direct-split-P64-N64-C64-b64-rowmeta";
    add(c);
    c.G = 8, c.NH = 16, c.N = 128, c.capacity = 16, c.direct_every = 3, c.cycles = 3, c.z_gate = true;
    c.name = "direct-split-G8-NH16-C16-b64-mixed-rowmeta-z";
    add(c);
    c.batch = 3, c.pad_rows = 1, c.G = 2, c.NH = 4, c.direct_every = 1, c.path = DecodePath::Split;
    for (int C : {1, 2}) {
      c.capacity = C, c.name = "direct-split-forced-C" + std::to_string(C) + "-b3-rowmeta-z";
      add(c);
    }
    c.path = DecodePath::Single, c.capacity = 64, c.batch = 8, c.name = "direct-single-forced-C64-b8-rowmeta-z";
    add(c);
  }
  // 16-bit states (bf16, fp16): every kernel and launch shape again, each name with its type.
  // Recurrent: small batches (1, 3, 8), batch 64, rows_per_block 32, N = 64, dt near zero (the
  // state barely moves between roundings) and large. KVBuffer: C = 1
  // (also routed to the recurrent kernel), 4, 16, 64 with staggered fills, pool and row metadata,
  // direct rows mixed in, one-warp blocks at C = 64, N = 64, the Nemotron-3 Nano shape. Direct: the
  // single kernel, the split path forced and chosen by Auto, the single kernel forced.
  for (StateType st : {StateType::BF16, StateType::FP16}) {
    const std::string t = std::string("-") + state_type_name(st);
    {
      Mamba2DecodeCase r;
      r.kernel = Kernel::Recurrent, r.state = st, r.z_gate = true, r.name = "recurrent" + t + "-P64-N128-b3-z";
      add(r);
      r.z_gate = false, r.N = 64, r.batch = 64, r.pad_rows = 3, r.recurrent_steps = 3, r.name = "recurrent" + t + "-P64-N64-b64";
      add(r);
      r.N = 128, r.batch = 3, r.pad_rows = 1, r.recurrent_steps = 4, r.rows_per_block = 32;
      r.name = "recurrent" + t + "-rows32-b3";
      add(r);
      r.rows_per_block = 0, r.batch = 1, r.pad_rows = 0, r.recurrent_steps = 6;
      for (auto [regime, tag] : {std::pair{DtRegime::NearZero, "dt-near-zero"}, std::pair{DtRegime::Large, "dt-large"}}) {
        r.dt = regime, r.name = "recurrent" + t + "-" + tag + "-b1";
        add(r);
      }
      r.dt = DtRegime::Typical, r.G = 8, r.NH = 64, r.z_gate = true, r.batch = 64, r.pad_rows = 2, r.recurrent_steps = 3;
      r.name = "recurrent" + t + "-nemotron-nano-shape-b64-z";
      add(r);
      // Batch 8 (the vLLM comparison's small batch) at N = 64, with padding rows.
      r.batch = 8, r.N = 64, r.name = "recurrent" + t + "-nemotron-nano-shape-N64-b8-z";
      add(r);
    }
    for (int C : {1, 4, 16}) {
      Mamba2DecodeCase c;
      c.state = st, c.capacity = C, c.batch = 3, c.name = "kvbuffer" + t + "-C" + std::to_string(C) + "-b3";
      add(c);
      c.row_metadata = true, c.z_gate = true, c.name = "kvbuffer" + t + "-C" + std::to_string(C) + "-b3-rowmeta-z";
      add(c);
    }
    {
      Mamba2DecodeCase c;
      c.state = st, c.capacity = 1, c.row_metadata = true, c.every_row_has_state = true, c.cycles = 4;
      c.batch = 3, c.name = "kvbuffer" + t + "-C1-every-row-stateful-b3";
      add(c);
      c.batch = 64, c.pad_rows = 2, c.G = 8, c.NH = 64, c.z_gate = true;
      c.name = "kvbuffer" + t + "-C1-every-row-stateful-nemotron-nano-shape-b64-z";
      add(c);
    }
    {
      Mamba2DecodeCase c;
      c.state = st, c.batch = 64, c.pad_rows = 2, c.capacity = 16, c.direct_every = 4, c.z_gate = true;
      c.name = "kvbuffer" + t + "-C16-b64-mixed-direct-z";
      add(c);
      c.batch = 3, c.pad_rows = 1, c.direct_every = 0, c.G = 8, c.NH = 64, c.name = "kvbuffer" + t + "-nemotron-nano-shape-C16-b3-z";
      add(c);
      c.G = 2, c.NH = 4, c.capacity = 8, c.N = 64, c.z_gate = false, c.name = "kvbuffer" + t + "-P64-N64-C8-b3";
      add(c);
      c.N = 128, c.dt = DtRegime::Large, c.direct_every = 2, c.name = "kvbuffer" + t + "-C8-dt-large-mixed-direct-b3";
      add(c);
      c.dt = DtRegime::Typical, c.direct_every = 0, c.rows_per_block = 16, c.z_gate = true;
      c.name = "kvbuffer" + t + "-C8-rows16-b3-z";
      add(c);
      c.capacity = 64, c.rows_per_block = 8, c.name = "kvbuffer" + t + "-C64-rows8-b3-z";
      add(c);
    }
    // The wider, tile-less warps (chosen from larger grids than a check runs): 16 and 32 rows per warp
    // at C = 4 and 16 with staggered fills, direct rows, z, row metadata, N = 64, the Nemotron-3
    // Nano shape, and 16 rows in a 16-row block (one warp).
    for (int w : {16, 32}) {
      const std::string ws = "-warp" + std::to_string(w);
      Mamba2DecodeCase c;
      c.state = st, c.warp_rows = w, c.capacity = 4, c.batch = 5, c.pad_rows = 2, c.direct_every = 3, c.z_gate = true;
      c.name = "kvbuffer" + t + ws + "-C4-b5-mixed-direct-z";
      add(c);
      c.capacity = 16, c.batch = 3, c.pad_rows = 1, c.direct_every = 0, c.row_metadata = true, c.G = 8, c.NH = 64;
      c.name = "kvbuffer" + t + ws + "-nemotron-nano-shape-C16-b3-rowmeta-z";
      add(c);
      c.G = 2, c.NH = 4, c.N = 64, c.capacity = 8, c.row_metadata = false, c.z_gate = false, c.dt = DtRegime::Large;
      c.name = "kvbuffer" + t + ws + "-P64-N64-C8-dt-large-b3";
      add(c);
    }
    {
      Mamba2DecodeCase c;
      c.state = st, c.warp_rows = 16, c.rows_per_block = 16, c.capacity = 8, c.z_gate = true;
      c.name = "kvbuffer" + t + "-warp16-rows16-C8-b3-z";
      add(c);
    }
    {
      // 3 heads per group (no power of two): each head's group and the group's first head, which
      // appends B_t, from head_group's float divisions.
      Mamba2DecodeCase r;
      r.kernel = Kernel::Recurrent, r.state = st, r.G = 2, r.NH = 6, r.z_gate = true, r.name = "recurrent" + t + "-G2-NH6-b3-z";
      add(r);
      Mamba2DecodeCase c;
      c.state = st, c.warp_rows = 32, c.capacity = 4, c.G = 2, c.NH = 6, c.z_gate = true;
      c.name = "kvbuffer" + t + "-warp32-G2-NH6-C4-b3-z";
      add(c);
    }
    {
      Mamba2DecodeCase c;
      c.state = st, c.kernel = Kernel::Direct, c.capacity = 16, c.batch = 3, c.direct_every = 1;
      c.name = "direct" + t + "-C16-b3";
      add(c);
      c.batch = 64, c.pad_rows = 2, c.direct_every = 2, c.row_metadata = true, c.z_gate = true;
      c.name = "direct" + t + "-C16-b64-mixed-rowmeta-z";  // Auto: the split path (64 x 16 >= 256)
      add(c);
      c.batch = 3, c.pad_rows = 1, c.direct_every = 1, c.path = DecodePath::Split;
      for (int C : {4, 64}) {
        c.capacity = C, c.name = "direct-split" + t + "-C" + std::to_string(C) + "-b3-rowmeta-z";
        add(c);
      }
      c.G = 8, c.NH = 64, c.capacity = 16, c.cycles = 2, c.name = "direct-split" + t + "-nemotron-nano-shape-C16-b3-rowmeta-z";
      add(c);
      c.path = DecodePath::Auto, c.G = 2, c.NH = 4, c.N = 64, c.batch = 64, c.pad_rows = 2, c.capacity = 64, c.z_gate = false;
      c.cycles = 3, c.name = "direct-split" + t + "-P64-N64-C64-b64-rowmeta";
      add(c);
      c.path = DecodePath::Single, c.N = 128, c.batch = 8, c.z_gate = true, c.name = "direct-single" + t + "-forced-C64-b8-rowmeta-z";
      add(c);
    }
  }
  // The kernels' early pool reads (pools_ready_at_launch) after a kernel that writes the token's
  // inputs late: the recurrent kernel, the KVBuffer kernel's tile (fp32, C = 16, row metadata),
  // its wide warps (bf16, 32 rows, direct rows mixed in) and capacity 1's route to the recurrent
  // kernel.
  {
    Mamba2DecodeCase r;
    r.kernel = Kernel::Recurrent, r.late_inputs = true, r.z_gate = true, r.name = "recurrent-b3-z-late-inputs";
    add(r);
    r.state = StateType::BF16, r.G = 8, r.NH = 64, r.batch = 64, r.pad_rows = 2, r.recurrent_steps = 3;
    r.name = "recurrent-bf16-nemotron-nano-shape-b64-z-late-inputs";
    add(r);
    Mamba2DecodeCase c;
    c.late_inputs = true, c.capacity = 16, c.row_metadata = true, c.z_gate = true, c.name = "kvbuffer-C16-b3-rowmeta-z-late-inputs";
    add(c);
    c.state = StateType::BF16, c.warp_rows = 32, c.capacity = 4, c.batch = 5, c.pad_rows = 2, c.direct_every = 3;
    c.row_metadata = false, c.name = "kvbuffer-bf16-warp32-C4-b5-mixed-direct-z-late-inputs";
    add(c);
    c.warp_rows = 0, c.capacity = 1, c.direct_every = 0, c.row_metadata = true, c.every_row_has_state = true, c.cycles = 4;
    c.name = "kvbuffer-bf16-C1-every-row-stateful-b5-late-inputs";
    add(c);
  }
  if (!quick) return cs;
  // Quick: every kernel, both capacities' extremes, direct rows mixed in, extreme dt, the
  // Nemotron-3 Nano head shape, one-warp blocks at C = 64; 16-bit states in each kernel.
  const std::vector<std::string> keep{"recurrent-P64-N128-b3-z", "recurrent-dt-large-b1",
                                      "recurrent-nemotron-nano-shape-b3-z", "kvbuffer-C1-b3", "kvbuffer-C1-every-row-stateful-b3",
                                      "kvbuffer-C16-b3-rowmeta-z",
                                      "kvbuffer-C16-b64-mixed-direct-z", "kvbuffer-C8-dt-large-mixed-direct-b3",
                                      "kvbuffer-nemotron-nano-shape-C16-b3-z", "kvbuffer-C64-rows8-b3-z",
                                      "direct-C64-b3", "direct-C16-b64-mixed-rowmeta-z",
                                      "direct-split-C64-b3-rowmeta-z", "direct-split-G8-NH16-C16-b64-mixed-rowmeta-z",
                                      "recurrent-bf16-P64-N128-b3-z", "kvbuffer-fp16-C16-b64-mixed-direct-z",
                                      "direct-split-bf16-C4-b3-rowmeta-z", "recurrent-b3-z-late-inputs",
                                      "kvbuffer-bf16-warp32-C4-b5-mixed-direct-z-late-inputs"};
  std::vector<Mamba2DecodeCase> quick_cases;
  for (const auto& c : cs)
    if (std::find(keep.begin(), keep.end(), c.name) != keep.end()) quick_cases.push_back(c);
  return quick_cases;
}

}  // namespace kvbuf::mamba2_check
