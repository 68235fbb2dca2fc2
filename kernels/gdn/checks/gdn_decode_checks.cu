// The GDN decode kernel checks of gdn_decode_checks.h. Each case runs a batch of requests through
// the kernel step by step on fresh random bf16-rounded inputs and compares, against
// ref::gdn_decode_recurrent in float64 on exactly those inputs: every output of every step, and the
// state of every request after every fold (recurrent: after every step). Requests start at
// staggered steps (so their buffers sit at different fills: every step some flush); before a
// request starts and after it ends its row is a padding row, plus fixed padding rows, whose outputs
// must be exactly zero; slots no row addresses must stay bitwise unchanged; outputs are poisoned
// (NaN) before every launch and buffer pools are poisoned (NaN) at start, so a read of an unwritten
// entry shows.
//
// Tolerances (norm-wise relative error ||x - ref|| / ||ref||, reference in float64). bf16 keeps 8
// significant bits, so rounding to bf16 costs at most u = 2^-8 relative per element (norm-wise too).
//   output, fp32 state and fp32 entries (or recurrent): the bf16 output rounding, u, plus fp32
//     arithmetic, ~1e-6 over a few hundred steps (dots of K <= 128 terms, relative 2^-24 each,
//     random signs): tol = 2^-8 + 1e-4.
//   state, fp32 entries (or recurrent): fp32 arithmetic only, ~1e-5 after 256 steps: tol = 1e-4.
//   bf16 entries: k_j and u_j (cached-u) are rounded to bf16 when stored, u each, and every
//     buffered term carries both (d_j u_j, c_j u_j, u_j k_j): up to 2u per term. The output sees
//     them directly (d_j u_j) and through u_t (c_j u_j), plus its own rounding:
//     tol_out = u + 2u + 2u = 5 * 2^-8. Each fold adds a 2u error on its increment and earlier
//     errors only decay (|e^G| <= 1; the delta rule contracts for beta in [0, 1]); over the <= 4
//     folds a case checks: tol_state = 4 * 2^-8.
// 16-bit states (DecodeCase::state bf16 or fp16): the kernel computes in fp32 and rounds each
//   state element once to nearest where it writes the state (recurrent: every step; buffered: every
//   fold), and the reference rounds its float64 state at exactly those places (ref::StateStore),
//   starting from the same rounded initial state. us = 2^-8 (bf16, 8 significant bits) or 2^-11
//   (fp16, 11 bits) is the unit roundoff; one ulp is at most 2us relative to the element.
//   recurrent and fp32 entries: before rounding, kernel and reference agree to the fp32 arithmetic
//     (~1e-6), so they round to the same value except for elements within that distance of a
//     rounding boundary, which then differ by one ulp. A difference of one ulp is carried by the
//     next update as e^g ulp (<= 1 ulp, g <= 0) plus the fp32 error, so it rounds to at most one
//     ulp again: every element stays within one ulp, norm-wise <= 2us (the bound; in practice a
//     small fraction of the elements differs). Outputs computed from such states differ by about
//     that relative amount: tol_state = 1e-4 + 2us, tol_out = 2^-8 + 1e-4 + 2us.
//   bf16 entries: before rounding the states differ by the entry error (above), so both roundings
//     count in full at every fold: |round(a) - round(b)| <= |a - b| + us |a| + us |b|, 2us per
//     fold, and earlier folds' differences only decay: over the <= 4 folds a case checks 8us on the
//     state, which the outputs read: tol_state = 4 * 2^-8 + 8us, tol_out = 5 * 2^-8 + 8us.
// NaN never passes (comparisons are written as !(err <= tol)). Output errors are per request token
// (all HV x V values), state errors per request (all HV x K x V values).
#include "kernels/gdn/checks/gdn_decode_checks.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <sstream>

#include "kernels/common/checks/check_common.h"
#include "kernels/common/checks/late_copy.h"
#include "kernels/common/device_buffer.h"
#include "kernels/common/common.cuh"
#include "reference/gdn.h"

namespace kvbuf::decode_check {
namespace {

const char* kernel_name(Kernel k) {
  switch (k) {
    case Kernel::RecurrentInPlace: return "recurrent-inplace";
    case Kernel::RecurrentOutOfPlace: return "recurrent-oop";
    case Kernel::KVBuffer: return "kvbuffer";
    case Kernel::Direct: return "direct";
  }
  return "?";
}

}  // namespace

std::string describe(const DecodeCase& c) {
  const DecodeCase d;  // fields left at their defaults are not listed
  std::ostringstream s;
  s << c.name << ": kernel=" << kernel_name(c.kernel) << " K=V=" << c.K << " batch=" << c.batch;
  checks::FieldsOffDefault field(s);
  field("H", c.H, d.H), field("HV", c.HV, d.HV), field("pad_rows", c.pad_rows, d.pad_rows);
  const bool recurrent = c.kernel == Kernel::RecurrentInPlace || c.kernel == Kernel::RecurrentOutOfPlace;
  if (recurrent) {
    field("recurrent_steps", c.recurrent_steps, d.recurrent_steps);
  } else {
    s << " capacity=" << c.capacity << " variant=" << (c.variant == BufferVariant::Raw ? "raw" : "cached-u")
      << " entry=" << (c.entry == EntryType::BF16 ? "bf16" : "fp32");
    field("cycles", c.cycles, d.cycles), field("direct_every", c.direct_every, d.direct_every);
    field("row_metadata", c.row_metadata, d.row_metadata);
    field("every_row_has_state", c.every_row_has_state, d.every_row_has_state);
    field("path", checks::path_name(c.path), std::string(checks::path_name(d.path)));
    field("split_row_groups", c.split_row_groups, d.split_row_groups);
  }
  field("state", std::string(state_type_name(c.state)), std::string(state_type_name(d.state)));
  field("gates", checks::gate_range_name(c.gates), checks::gate_range_name(d.gates));
  field("gates_in_kernel", c.gates_in_kernel, d.gates_in_kernel);
  field("rows_per_block", c.rows_per_block, d.rows_per_block);
  field("late_inputs", c.late_inputs, d.late_inputs), field("late_pools", c.late_pools, d.late_pools);
  s << " (other fields at DecodeCase's defaults)";
  return s.str();
}

void PrintTo(const DecodeCase& c, std::ostream* os) { *os << describe(c); }

std::string CaseResult::line(const std::string& name) const {
  std::ostringstream s;
  s << "out err " << max_out_err << " (tol " << tol_out << ", " << outputs_checked << " token outputs), state err "
    << max_state_err << " (tol " << tol_state << ", " << states_checked << " states)";
  return checks::result_line(passed, name, s.str(), message);
}

namespace {


std::vector<__nv_bfloat16> to_bf16(const std::vector<float>& x) {
  std::vector<__nv_bfloat16> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const uint16_t bits = ref::float_to_bf16_bits(x[i]);
    std::memcpy(&r[i], &bits, 2);
  }
  return r;
}
float bf16_to_float(__nv_bfloat16 b) {
  uint16_t bits;
  std::memcpy(&bits, &b, 2);
  return ref::bf16_bits_to_float(bits);
}
}  // namespace

CaseResult run_decode_case(const DecodeCase& cs, uint64_t seed) {
  CaseResult res;
  const bool recurrent = cs.kernel == Kernel::RecurrentInPlace || cs.kernel == Kernel::RecurrentOutOfPlace;
  const bool bf16_entries = !recurrent && cs.entry == EntryType::BF16;
  // 16-bit states (header): us, and where the reference rounds its state.
  const double us = checks::state_unit(cs.state);
  const ref::StateStore store = cs.state == StateType::FP32 ? ref::StateStore{} : ref::StateStore{cs.state};
  res.tol_out = bf16_entries ? 5 * std::ldexp(1.0, -8) + 8 * us : std::ldexp(1.0, -8) + 1e-4 + 2 * us;
  res.tol_state = bf16_entries ? 4 * std::ldexp(1.0, -8) + 8 * us : 1e-4 + 2 * us;
  auto fail = [&](const std::string& m) {
    if (res.passed) res.message = m;
    res.passed = false;
  };

  std::mt19937_64 rng(seed);
  const ref::GdnDims dims{cs.H, cs.HV, cs.K, cs.K};
  const int K = cs.K, V = cs.K, H = cs.H, HV = cs.HV, B = cs.batch, C = recurrent ? 1 : cs.capacity;
  const int rows = B + cs.pad_rows;
  const int slots = B + 2;  // two slots no row addresses: must stay untouched
  const size_t head_elems = size_t(V) * K, slot_elems = size_t(HV) * head_elems;

  // Request r lives in slot slot_perm[r], in row row_perm[r]; it starts at step start[r].
  checks::DecodeSchedule plan =
      checks::decode_schedule(B, rows, slots, recurrent, C, cs.cycles, cs.recurrent_steps, cs.direct_every, rng);
  const std::vector<int>&slot_perm = plan.slot_perm, &row_perm = plan.row_perm, &start = plan.start,
                        &own_steps = plan.own_steps;
  std::vector<bool>& direct = plan.direct;
  const int total_steps = plan.total_steps;
  std::vector<int> fill(B, 0), folds(B, 0);

  // State pool(s): random N(0, 1) rounded to the state type; the reference states start as each
  // request's slot (or zero).
  std::vector<float> pool_init(size_t(slots) * slot_elems);
  {
    std::normal_distribution<float> nd(0.f, 1.f);
    for (auto& x : pool_init) x = nd(rng);
    if (store)
      for (auto& x : pool_init) x = float(ref::round_to_state(x, *store));
  }
  std::vector<ref::GdnState<double>> ref_state(B);
  for (int r = 0; r < B; ++r) {
    ref_state[r] = ref::gdn_zero_state<double>(dims);
    if (direct[r]) continue;
    const float* s = pool_init.data() + size_t(slot_perm[r]) * slot_elems;
    for (int h = 0; h < HV; ++h)
      for (int v = 0; v < V; ++v)
        for (int k = 0; k < K; ++k) ref_state[r][h](k, v) = s[h * head_elems + size_t(v) * K + k];
  }
  const size_t ssz = size_t(state_type_bytes(cs.state)), slot_bytes = slot_elems * ssz;
  const std::vector<uint8_t> pool_bytes = checks::encode_states(pool_init, cs.state);
  DeviceBuffer pool_a(pool_bytes.size()), pool_b(pool_bytes.size());
  pool_a.upload(pool_bytes);
  pool_b.upload(pool_bytes);

  // Buffer pools poisoned with NaN (0xff bytes) so that reading an entry never written shows.
  const size_t esz = (cs.entry == EntryType::BF16) ? 2 : 4;
  DeviceBuffer buf_k(size_t(slots) * C * H * K * esz), buf_val(size_t(slots) * C * HV * V * esz);
  DeviceBuffer buf_g(size_t(slots) * C * HV * 4), buf_beta(size_t(slots) * C * HV * 4);
  DeviceBuffer d_fill(slots * 4), d_has(slots * 4), d_done(slots * 4);
  for (DeviceBuffer* d : {&buf_k, &buf_val, &buf_g, &buf_beta}) d->poison();
  std::vector<int32_t> has_init(slots, 1);
  for (int r = 0; r < B; ++r) has_init[slot_perm[r]] = direct[r] ? 0 : 1;
  KVB_CUDA_CHECK(cudaMemset(d_fill.as<void>(), 0, slots * 4));
  KVB_CUDA_CHECK(cudaMemset(d_done.as<void>(), 0, slots * 4));
  d_has.upload(has_init);

  DeviceBuffer d_row_fill(rows * 4), d_row_has(rows * 4);
  DeviceBuffer d_slot(rows * 4), d_q(size_t(rows) * H * K * 2), d_k(size_t(rows) * H * K * 2),
      d_v(size_t(rows) * HV * V * 2), d_g(size_t(rows) * HV * 4), d_beta(size_t(rows) * HV * 4),
      d_a(size_t(rows) * HV * 2), d_b(size_t(rows) * HV * 2), d_Alog(HV * 4), d_dtb(HV * 4),
      d_out(size_t(rows) * HV * V * 2), d_scratch(size_t(rows) * HV * 2 * V * 4);
  std::vector<float> A_log(HV), dt_bias(HV);
  {
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    for (int h = 0; h < HV; ++h) A_log[h] = u(rng), dt_bias[h] = u(rng);
    d_Alog.upload(A_log);
    d_dtb.upload(dt_bias);
  }

  GdnStepIO io;
  io.batch = rows, io.H = H, io.HV = HV, io.K = K, io.V = V;
  io.slot = d_slot.as<int32_t>();
  io.q = d_q.as<__nv_bfloat16>(), io.k = d_k.as<__nv_bfloat16>(), io.v = d_v.as<__nv_bfloat16>();
  if (cs.gates_in_kernel) {
    io.a = d_a.as<__nv_bfloat16>(), io.b = d_b.as<__nv_bfloat16>();
    io.A_log = d_Alog.as<float>(), io.dt_bias = d_dtb.as<float>();
  } else {
    io.g = d_g.as<float>(), io.beta = d_beta.as<float>();
  }
  io.out = d_out.as<__nv_bfloat16>();
  io.rows_per_block = cs.rows_per_block;

  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<float> out_host(size_t(rows) * HV * V);
  std::vector<__nv_bfloat16> out_raw(out_host.size());
  std::vector<uint8_t> state_host(slot_bytes);
  std::vector<double> o_ref;
  const bool check_every_state = recurrent;
  const bool late = cs.late_inputs || cs.late_pools;
  checks::StepInputs inputs(late);

  for (int step = 0; step < total_steps; ++step) {
    // Random inputs for every row (padding rows too: they must be ignored, not zero).
    std::vector<int32_t> slot_row(rows, -1);
    std::vector<float> q(size_t(rows) * H * K), k(q.size()), v(size_t(rows) * HV * V);
    std::vector<float> g(size_t(rows) * HV), beta(g.size()), a(g.size()), b(g.size());
    std::vector<ref::GdnTokens<double>> tok(B);
    std::vector<bool> active(B);
    for (int r = 0; r < B; ++r) active[r] = step >= start[r] && step < start[r] + own_steps[r];
    for (int row = 0; row < rows; ++row) {
      auto t = ref::round_tokens_to_bf16(ref::make_random_gdn_tokens<double>(dims, 1, rng, cs.gates));
      if (cs.gates_in_kernel) {
        for (int h = 0; h < HV; ++h) {
          const double ar = ref::round_to_bf16(2.0 * normal(rng)), br = ref::round_to_bf16(2.0 * normal(rng));
          a[row * HV + h] = float(ar), b[row * HV + h] = float(br);
          t.g[h] = ref::gdn_gate_g<double>(ar, A_log[h], dt_bias[h]);
          t.beta[h] = ref::gdn_gate_beta<double>(br);
        }
      }
      for (int i = 0; i < H * K; ++i) q[row * H * K + i] = float(t.q[i]), k[row * H * K + i] = float(t.k[i]);
      for (int i = 0; i < HV * V; ++i) v[row * HV * V + i] = float(t.v[i]);
      for (int h = 0; h < HV; ++h) g[row * HV + h] = float(t.g[h]), beta[row * HV + h] = float(t.beta[h]);
      const int r = row_perm[row];
      if (r < B && active[r]) {
        slot_row[row] = slot_perm[r];
        tok[r] = t;
      }
    }
    d_slot.upload(slot_row);
    if (cs.row_metadata) {
      std::vector<int32_t> row_fill(rows, 0), row_has(rows, 0);
      for (int row = 0; row < rows; ++row) {
        const int r = row_perm[row];
        if (r < B && active[r]) row_fill[row] = fill[r], row_has[row] = direct[r] ? 0 : 1;
      }
      d_row_fill.upload(row_fill);
      d_row_has.upload(row_has);
    }
    inputs.upload(d_q, to_bf16(q)), inputs.upload(d_k, to_bf16(k)), inputs.upload(d_v, to_bf16(v));
    inputs.upload(d_g, g), inputs.upload(d_beta, beta), inputs.upload(d_a, to_bf16(a)), inputs.upload(d_b, to_bf16(b));
    d_out.poison();

    const bool out_of_place = cs.kernel == Kernel::RecurrentOutOfPlace;
    DeviceBuffer& pool_in = out_of_place && step % 2 == 1 ? pool_b : pool_a;
    uint8_t* s_in = pool_in.as<uint8_t>();
    uint8_t* s_out = out_of_place ? (step % 2 == 0 ? pool_b : pool_a).as<uint8_t>() : s_in;
    if (cs.late_pools)
      for (DeviceBuffer* d : {&pool_in, &buf_k, &buf_val, &buf_g, &buf_beta}) inputs.defer(*d);
    inputs.launch();
    if (recurrent) {
      GdnRecurrentParams p;
      p.io = io, p.state_in = s_in, p.state_out = s_out, p.state_type = cs.state, p.pools_ready_at_launch = late;
      gdn_decode_recurrent(p, inputs.stream());
    } else {
      GdnKVBufferParams p;
      p.io = io, p.variant = cs.variant, p.entry = cs.entry, p.capacity = C;
      p.state = s_out, p.state_type = cs.state, p.buf_k = buf_k.as<void>(), p.buf_val = buf_val.as<void>(), p.buf_gcum = buf_g.as<float>();
      p.buf_beta = buf_beta.as<float>(), p.fill = d_fill.as<int32_t>(), p.has_state = d_has.as<int32_t>();
      p.done_count = d_done.as<int32_t>();
      p.path = cs.path, p.scratch = d_scratch.as<float>(), p.split_row_groups = cs.split_row_groups;
      if (cs.row_metadata) {
        p.fill = p.has_state = p.done_count = nullptr;
        p.row_fill = d_row_fill.as<int32_t>(), p.row_has_state = d_row_has.as<int32_t>();
      }
      p.every_row_has_state = cs.every_row_has_state, p.pools_ready_at_launch = late;
      if (cs.kernel == Kernel::Direct)
        gdn_decode_direct(p, inputs.stream());
      else
        gdn_decode_kvbuffer(p, inputs.stream());
    }
    KVB_CUDA_CHECK(cudaDeviceSynchronize());
    KVB_CUDA_CHECK(cudaMemcpy(out_raw.data(), d_out.as<void>(), out_raw.size() * 2, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < out_raw.size(); ++i) out_host[i] = bf16_to_float(out_raw[i]);
    const std::vector<int32_t> fill_dev = d_fill.download<int32_t>(), has_dev = d_has.download<int32_t>();

    for (int row = 0; row < rows; ++row) {
      const int r = row_perm[row];
      const float* o = out_host.data() + size_t(row) * HV * V;
      if (!(r < B && active[r])) {
        for (int i = 0; i < HV * V; ++i)
          if (!(o[i] == 0.f)) {
            fail("padding row " + std::to_string(row) + " output not zero at step " + std::to_string(step));
            break;
          }
        continue;
      }
      // The recurrent kernels write the state after every token (rounded there); the buffered ones
      // only at folds (below).
      ref::gdn_decode_recurrent<double>(tok[r], ref_state[r], o_ref, recurrent ? store : ref::StateStore{});
      double num = 0, den = 0;
      for (int i = 0; i < HV * V; ++i) {
        const double d = double(o[i]) - o_ref[i];
        num += d * d, den += o_ref[i] * o_ref[i];
      }
      // Floor: a token whose reference output has RMS below 1e-3 (typical RMS ~ K^-1/2 ~ 0.1; only
      // extreme gates with beta = 0 on every head get there) is held to an absolute error instead.
      const double err = std::sqrt(num) / std::max(std::sqrt(den), 1e-3 * std::sqrt(double(HV * V)));
      res.max_out_err = std::max(res.max_out_err, std::isnan(err) ? INFINITY : err);
      ++res.outputs_checked;
      if (!(err <= res.tol_out))
        fail("output of request " + std::to_string(r) + " at step " + std::to_string(step) + ": rel err " +
             std::to_string(err));

      bool folded = false;
      if (!recurrent) {
        folded = fill[r] + 1 == C;
        fill[r] = folded ? 0 : fill[r] + 1;
        if (folded) ++folds[r], direct[r] = false, ref::round_state(ref_state[r], store);
        if (!cs.row_metadata &&
            (fill_dev[slot_perm[r]] != fill[r] || has_dev[slot_perm[r]] != (direct[r] ? 0 : 1)))
          fail("fill/has_state of request " + std::to_string(r) + " wrong after step " + std::to_string(step));
      }
      if (folded || check_every_state) {
        KVB_CUDA_CHECK(cudaMemcpy(state_host.data(), s_out + size_t(slot_perm[r]) * slot_bytes, slot_bytes,
                                  cudaMemcpyDeviceToHost));
        double sn = 0, sd = 0;
        for (int h = 0; h < HV; ++h)
          for (int vv = 0; vv < V; ++vv)
            for (int kk = 0; kk < K; ++kk) {
              const double ref_x = ref_state[r][h](kk, vv);
              const double d = checks::decode_state(cs.state, state_host.data() + (h * head_elems + size_t(vv) * K + kk) * state_type_bytes(cs.state)) - ref_x;
              sn += d * d, sd += ref_x * ref_x;
            }
        const double serr = std::sqrt(sn) / std::max(std::sqrt(sd), 1e-30);
        res.max_state_err = std::max(res.max_state_err, std::isnan(serr) ? INFINITY : serr);
        ++res.states_checked;
        if (!(serr <= res.tol_state))
          fail("state of request " + std::to_string(r) + " after step " + std::to_string(step) + ": rel err " +
               std::to_string(serr));
      }
    }
  }
  if (!recurrent)
    for (int r = 0; r < B; ++r)
      if (folds[r] < cs.cycles) fail("request " + std::to_string(r) + " folded only " + std::to_string(folds[r]) + " times");
  // Slots no row addressed: bitwise unchanged in every pool the kernel wrote.
  for (int extra = B; extra < slots; ++extra) {
    const size_t off = size_t(slot_perm[extra]) * slot_bytes;
    for (DeviceBuffer* pool : {&pool_a, &pool_b}) {
      KVB_CUDA_CHECK(cudaMemcpy(state_host.data(), pool->as<uint8_t>() + off, slot_bytes, cudaMemcpyDeviceToHost));
      if (std::memcmp(state_host.data(), pool_bytes.data() + off, slot_bytes) != 0)
        fail("an unaddressed slot was modified");
    }
  }
  return res;
}

std::vector<DecodeCase> decode_cases(bool quick) {
  std::vector<DecodeCase> cs;
  auto add = [&](DecodeCase c) { cs.push_back(std::move(c)); };
  for (int K : {128, 64}) {
    const std::string d = "K" + std::to_string(K);
    DecodeCase r;
    r.K = K, r.kernel = Kernel::RecurrentInPlace, r.name = "recurrent-inplace-" + d + "-b3";
    add(r);
    r.kernel = Kernel::RecurrentOutOfPlace, r.name = "recurrent-oop-" + d + "-b3";
    add(r);
    r.kernel = Kernel::RecurrentInPlace, r.batch = 64, r.pad_rows = 3, r.recurrent_steps = 3, r.name = "recurrent-inplace-" + d + "-b64";
    add(r);
    // Batch 64 takes the one-warp shape (state in registers, warp-wide row sums) by default; the
    // shared-memory tiles are forced here, the one-warp shape below at batch 3.
    r.rows_per_block = 32, r.name = "recurrent-tiles-inplace-" + d + "-b64";
    add(r);
    r.rows_per_block = 8;
    r.kernel = Kernel::RecurrentOutOfPlace, r.batch = 3, r.pad_rows = 0, r.recurrent_steps = 6,
    r.name = "recurrent-warp-oop-" + d + "-b3";
    add(r);
  }
  {
    DecodeCase r;
    r.kernel = Kernel::RecurrentInPlace, r.batch = 1, r.gates_in_kernel = true, r.name = "recurrent-gates-in-kernel-b1";
    add(r);
    r.gates = ref::GateRange::extreme(), r.gates_in_kernel = false, r.batch = 3, r.name = "recurrent-extreme-gates-b3";
    add(r);
    r.gates = ref::GateRange::typical(), r.rows_per_block = 16, r.name = "recurrent-rows16-b3";
    add(r);
    r.gates = ref::GateRange::extreme(), r.rows_per_block = 8, r.name = "recurrent-warp-extreme-gates-b3";
    add(r);
    r.gates = ref::GateRange::typical(), r.gates_in_kernel = true, r.HV = 4 * r.H, r.name = "recurrent-warp-gqa4-gates-in-kernel-b3";
    add(r);
  }
  for (auto variant : {BufferVariant::CachedU, BufferVariant::Raw})
    for (auto entry : {EntryType::BF16, EntryType::FP32}) {
      const std::string tag = std::string(variant == BufferVariant::Raw ? "raw" : "cachedu") + "-" +
                              (entry == EntryType::BF16 ? "bf16" : "fp32");
      for (int C : {1, 4, 8, 16, 32, 64}) {
        DecodeCase c;
        c.variant = variant, c.entry = entry, c.capacity = C, c.batch = 3;
        c.name = "kvbuffer-" + tag + "-C" + std::to_string(C) + "-b3";
        if (!quick || C == 4 || C == 16) add(c);
      }
      DecodeCase c;
      c.variant = variant, c.entry = entry;
      c.capacity = 16, c.batch = 64, c.pad_rows = 2, c.direct_every = 4, c.name = "kvbuffer-" + tag + "-C16-b64-mixed-direct";
      if (!quick) add(c);
      c.capacity = 8, c.batch = 1, c.direct_every = 0, c.gates_in_kernel = true, c.name = "kvbuffer-" + tag + "-C8-b1-gates-in-kernel";
      add(c);
      c.capacity = 4, c.batch = 3, c.gates_in_kernel = false, c.gates = ref::GateRange::extreme(), c.name = "kvbuffer-" + tag + "-C4-b3-extreme-gates";
      add(c);
      c.gates = ref::GateRange::typical(), c.K = 64, c.capacity = 8, c.name = "kvbuffer-" + tag + "-K64-C8-b3";
      add(c);
    }
  {
    DecodeCase c;
    c.capacity = 64, c.batch = 64, c.pad_rows = 1, c.name = "kvbuffer-cachedu-bf16-C64-b64";
    add(c);
    c.capacity = 32, c.batch = 1, c.name = "kvbuffer-cachedu-bf16-C32-b1";
    add(c);
    c.capacity = 16, c.batch = 3, c.rows_per_block = 128, c.name = "kvbuffer-cachedu-bf16-C16-rows128-b3";
    add(c);
  }
  // 64-row tiles at batch 3 (Auto takes them from batch ~16): C 4 / 8 / 12 / 16, direct rows,
  // K = 64, scheduler metadata, extreme gates.
  for (int C : {4, 8, 12, 16}) {
    DecodeCase c;
    c.capacity = C, c.batch = 3, c.rows_per_block = 64, c.direct_every = C == 12 ? 2 : 0;
    c.name = "tile64-C" + std::to_string(C) + "-b3" + (c.direct_every ? "-mixed-direct" : "");
    add(c);
  }
  {
    DecodeCase c;
    c.capacity = 8, c.batch = 3, c.rows_per_block = 64, c.K = 64, c.row_metadata = true, c.direct_every = 2;
    c.name = "tile64-K64-rowmeta-C8-b3-mixed-direct";
    add(c);
    c.K = 128, c.row_metadata = false, c.direct_every = 0, c.gates = ref::GateRange::extreme(), c.capacity = 12;
    c.name = "tile64-C12-b3-extreme-gates";
    add(c);
  }
  {
    DecodeCase c;
    c.pad_rows = 1;
    c.kernel = Kernel::Direct, c.rows_per_block = 0, c.direct_every = 1, c.capacity = 64, c.batch = 3, c.name = "direct-cachedu-bf16-C64-b3";
    add(c);
    c.variant = BufferVariant::Raw, c.capacity = 16, c.name = "direct-raw-bf16-C16-b3";
    add(c);
  }
  // Scheduler metadata (row_fill / row_has_state) instead of the pool's fill counters.
  for (auto variant : {BufferVariant::CachedU, BufferVariant::Raw}) {
    const std::string tag = variant == BufferVariant::Raw ? "raw" : "cachedu";
    DecodeCase c;
    c.row_metadata = true, c.variant = variant;
    c.capacity = 16, c.batch = 64, c.pad_rows = 2, c.direct_every = 3, c.name = "rowmeta-" + tag + "-C16-b64-mixed-direct";
    add(c);
    c.capacity = 1, c.batch = 3, c.direct_every = 0, c.name = "rowmeta-" + tag + "-C1-b3";
    add(c);
    c.capacity = 64, c.batch = 1, c.entry = EntryType::FP32, c.name = "rowmeta-" + tag + "-fp32-C64-b1";
    add(c);
  }
  // Capacity 1 with row metadata runs the recurrent kernels on the pool (S0 = 0 for stateless
  // rows, whose slots hold random states that must not be read): both shapes (tiles below batch
  // 32, one warp from it), both entry points, K = 64, gates in kernel, padding rows.
  {
    DecodeCase c;
    c.row_metadata = true, c.capacity = 1, c.cycles = 4;
    c.batch = 3, c.direct_every = 2, c.name = "capacity1-tiles-mixed-direct-b3";
    add(c);
    c.batch = 40, c.pad_rows = 3, c.direct_every = 3, c.name = "capacity1-warp-mixed-direct-b40";
    add(c);
    c.K = 64, c.gates_in_kernel = true, c.name = "capacity1-warp-K64-gates-in-kernel-b40";
    add(c);
    c.K = 128, c.gates_in_kernel = false, c.batch = 3, c.pad_rows = 1, c.kernel = Kernel::Direct, c.direct_every = 1,
    c.name = "capacity1-direct-b3";
    add(c);
    c.batch = 40, c.HV = 4 * c.H, c.name = "capacity1-direct-warp-gqa4-b40";
    add(c);
    // Every row with a state, promised by the scheduler: the plain recurrent kernels, both shapes.
    c = DecodeCase{};
    c.row_metadata = true, c.every_row_has_state = true, c.capacity = 1, c.cycles = 4;
    c.batch = 3, c.pad_rows = 1, c.name = "capacity1-every-row-stateful-tiles-b3";
    add(c);
    c.batch = 40, c.name = "capacity1-every-row-stateful-warp-b40";
    add(c);
  }
  // The split path (kernel A per key head, kernel B streaming S0), forced at small batch and
  // chosen by Auto (direct entry point at C 8, kvbuffer entry point at C 64, batch 64); the
  // single-kernel path forced where Auto would split.
  for (auto entry : {EntryType::BF16, EntryType::FP32}) {
    const std::string tag = entry == EntryType::BF16 ? "bf16" : "fp32";
    for (int C : {1, 4, 16, 64}) {
      DecodeCase c;
      c.row_metadata = true, c.path = DecodePath::Split, c.entry = entry, c.capacity = C, c.batch = 3;
      c.direct_every = C == 16 ? 2 : 0;
      c.name = "split-" + tag + "-C" + std::to_string(C) + "-b3" + (c.direct_every ? "-mixed-direct" : "");
      if (!quick || C == 16) add(c);
    }
  }
  {
    DecodeCase c;
    c.row_metadata = true, c.path = DecodePath::Split;
    c.capacity = 4, c.gates = ref::GateRange::extreme(), c.name = "split-bf16-C4-b3-extreme-gates";
    add(c);
    c.gates = ref::GateRange::typical(), c.gates_in_kernel = true, c.capacity = 8, c.name = "split-bf16-C8-b3-gates-in-kernel";
    add(c);
    c.gates_in_kernel = false, c.K = 64, c.name = "split-bf16-K64-C8-b3";
    add(c);
    c.K = 128, c.H = 1, c.HV = 4, c.capacity = 8, c.name = "split-bf16-gqa4-C8-b3";
    add(c);
    c.H = 2, c.rows_per_block = 16, c.capacity = 16, c.name = "split-bf16-rows16-C16-b3";
    add(c);
    c.rows_per_block = 128, c.name = "split-bf16-rows128-C16-b3";
    add(c);
    c.rows_per_block = 0, c.kernel = Kernel::Direct, c.direct_every = 1, c.capacity = 64, c.name = "split-direct-bf16-C64-b3";
    add(c);
    c.path = DecodePath::Auto, c.batch = 64, c.pad_rows = 2, c.direct_every = 5;
    c.capacity = 8, c.name = "auto-split-direct-bf16-C8-b64-mixed";
    add(c);
    c.kernel = Kernel::KVBuffer, c.capacity = 64, c.pad_rows = 1, c.direct_every = 0, c.name = "auto-split-bf16-C64-b64";
    if (!quick) add(c);
    c.kernel = Kernel::Direct, c.path = DecodePath::Single, c.capacity = 8, c.direct_every = 3,
    c.name = "single-direct-bf16-C8-b64-mixed";
    if (!quick) add(c);
  }
  // gdn_decode_direct's row-compacted state kernel with few row groups, so that each block runs
  // several rows one after another (rows with a state flip the tile barriers' phase, folds reuse
  // the shared memory): mixed direct / stateful rows, padding rows, long folds, fp32 entries.
  {
    DecodeCase c;
    c.kernel = Kernel::Direct, c.row_metadata = true, c.path = DecodePath::Split;
    c.batch = 20, c.pad_rows = 3, c.direct_every = 2, c.capacity = 8, c.split_row_groups = 3;
    c.name = "compact-direct-bf16-C8-b20-groups3-mixed";
    add(c);
    c.split_row_groups = 1, c.direct_every = 4, c.name = "compact-direct-bf16-C8-b20-groups1-mixed";
    add(c);
    c.capacity = 64, c.batch = 6, c.split_row_groups = 2, c.direct_every = 2, c.cycles = 2;
    c.name = "compact-direct-bf16-C64-b6-groups2-mixed";
    add(c);
    c.capacity = 16, c.entry = EntryType::FP32, c.K = 64, c.batch = 12, c.cycles = 3, c.split_row_groups = 2;
    c.name = "compact-direct-fp32-K64-C16-b12-groups2-mixed";
    add(c);
    c.entry = EntryType::BF16, c.K = 128, c.path = DecodePath::Auto, c.split_row_groups = 0, c.batch = 64,
    c.capacity = 32, c.direct_every = 1, c.name = "direct-auto-C32-b64";
    add(c);
  }
  // 16-bit states (bf16, fp16), every kernel and path: recurrent in place / out of place, tiles and
  // one warp; KVBuffer single kernel (cached-u and raw, bf16 and fp32 entries, C 1 / 4 / 16, K 64 and
  // 128, pool fill counters and scheduler metadata, mixed direct rows); gdn_decode_direct; capacity 1
  // through the recurrent kernels; the split path (forced, Auto, compacted kernel B).
  for (StateType st : {StateType::BF16, StateType::FP16}) {
    const std::string sp = std::string("state-") + state_type_name(st) + "-";
    {
      DecodeCase r;
      r.state = st;
      r.kernel = Kernel::RecurrentInPlace, r.name = sp + "recurrent-inplace-K128-b3";
      add(r);
      r.kernel = Kernel::RecurrentOutOfPlace, r.K = 64, r.name = sp + "recurrent-oop-K64-b3";
      if (!quick) add(r);
      r.rows_per_block = 8, r.K = 128, r.name = sp + "recurrent-warp-oop-K128-b3";
      add(r);
      r.kernel = Kernel::RecurrentInPlace, r.K = 64, r.gates = ref::GateRange::extreme(), r.name = sp + "recurrent-warp-inplace-K64-extreme-gates-b3";
      if (!quick) add(r);
      // Two 8-row warps per block (log v10) with 4 value heads per key head and padding rows.
      r.K = 128, r.gates = ref::GateRange::typical(), r.gates_in_kernel = true, r.HV = 4 * r.H, r.batch = 5, r.pad_rows = 2;
      r.name = sp + "recurrent-warp-gqa4-gates-in-kernel-b5";
      if (!quick) add(r);
      r.gates_in_kernel = false, r.HV = DecodeCase{}.HV, r.batch = DecodeCase{}.batch, r.pad_rows = DecodeCase{}.pad_rows;
      r.rows_per_block = 0, r.K = 128, r.gates = ref::GateRange::typical(), r.batch = 64, r.pad_rows = 3, r.recurrent_steps = 3;
      r.name = sp + "recurrent-inplace-K128-b64";  // one warp by default at batch 64
      if (!quick) add(r);
      r.rows_per_block = 16, r.kernel = Kernel::RecurrentOutOfPlace, r.gates_in_kernel = true, r.name = sp + "recurrent-tiles16-oop-gates-in-kernel-b64";
      if (!quick) add(r);
    }
    for (auto variant : {BufferVariant::CachedU, BufferVariant::Raw})
      for (auto entry : {EntryType::BF16, EntryType::FP32}) {
        const std::string tag = std::string(variant == BufferVariant::Raw ? "raw" : "cachedu") + "-" + entry_type_name(entry);
        for (int C : {1, 4, 16}) {
          DecodeCase c;
          c.state = st, c.variant = variant, c.entry = entry, c.capacity = C, c.batch = 3;
          c.name = sp + "kvbuffer-" + tag + "-C" + std::to_string(C) + "-b3";
          if (!quick || (C == 4 && variant == BufferVariant::CachedU && entry == EntryType::BF16)) add(c);
        }
        DecodeCase c;
        c.state = st, c.variant = variant, c.entry = entry, c.K = 64, c.capacity = 4, c.batch = 3;
        c.name = sp + "kvbuffer-" + tag + "-K64-C4-b3";
        if (!quick) add(c);
      }
    {
      DecodeCase c;
      c.state = st, c.capacity = 16, c.batch = 20, c.pad_rows = 2, c.direct_every = 3;
      c.name = sp + "kvbuffer-cachedu-bf16-C16-b20-mixed-direct";
      if (!quick) add(c);
      c.row_metadata = true, c.variant = BufferVariant::Raw, c.capacity = 4, c.name = sp + "rowmeta-raw-C4-b20-mixed-direct";
      if (!quick) add(c);
      c.variant = BufferVariant::CachedU, c.capacity = 8, c.batch = 3, c.rows_per_block = 64, c.direct_every = 2, c.K = 64;
      c.name = sp + "tile64-K64-rowmeta-C8-b3-mixed-direct";
      if (!quick) add(c);
      // The whole-head tile a 16-bit state takes from batch 64 at Qwen3-Next shapes (128 rows).
      c.K = 128, c.rows_per_block = 128, c.name = sp + "tile128-rowmeta-C8-b3-mixed-direct";
      add(c);
      c.variant = BufferVariant::Raw, c.row_metadata = false, c.capacity = 4, c.name = sp + "tile128-raw-C4-b3-mixed-direct";
      if (!quick) add(c);
      // fp32 entries at C = 16: the 128-row tile's largest shared memory (about 50 KB, above the
      // 48 KB default), 15 buffered entries per row.
      c.variant = BufferVariant::CachedU, c.entry = EntryType::FP32, c.capacity = 16, c.direct_every = 0;
      c.name = sp + "tile128-cachedu-fp32-C16-b3";
      if (!quick) add(c);
      // The whole-head and half-head tiles of the bf16 warpgroup products (log v33): pool fill
      // counters, folding and appending rows side by side, direct rows mixed in; one 64-row M tile.
      c.entry = EntryType::BF16, c.capacity = 4, c.batch = 24, c.pad_rows = 3, c.direct_every = 5;
      c.name = sp + "tile128-poolfill-C4-b24-mixed-direct";
      add(c);
      c.rows_per_block = 64, c.row_metadata = true, c.capacity = 8, c.name = sp + "tile64-K128-rowmeta-C8-b24-mixed-direct";
      if (!quick) add(c);
      // 31 buffered entries: the whole-head tile's largest staging with bf16 entries (above 48 KB).
      c.rows_per_block = 128, c.capacity = 32, c.batch = 6, c.direct_every = 0, c.name = sp + "tile128-rowmeta-C32-b6";
      if (!quick) add(c);
    }
    {
      DecodeCase c;
      c.state = st, c.kernel = Kernel::Direct, c.direct_every = 1, c.capacity = 16, c.batch = 3;
      c.name = sp + "direct-cachedu-bf16-C16-b3";
      add(c);
      c.variant = BufferVariant::Raw, c.capacity = 4, c.name = sp + "direct-raw-bf16-C4-b3";
      if (!quick) add(c);
    }
    {
      DecodeCase c;
      c.state = st, c.row_metadata = true, c.capacity = 1, c.cycles = 4;
      c.batch = 3, c.direct_every = 2, c.name = sp + "capacity1-tiles-mixed-direct-b3";
      if (!quick) add(c);
      c.batch = 40, c.pad_rows = 3, c.direct_every = 3, c.name = sp + "capacity1-warp-mixed-direct-b40";
      add(c);
      c.K = 64, c.direct_every = 0, c.every_row_has_state = true, c.name = sp + "capacity1-every-row-stateful-warp-K64-b40";
      if (!quick) add(c);
      c.K = 128, c.every_row_has_state = false, c.kernel = Kernel::Direct, c.direct_every = 1, c.batch = 3, c.pad_rows = 1;
      c.name = sp + "capacity1-direct-b3";
      if (!quick) add(c);
    }
    for (auto entry : {EntryType::BF16, EntryType::FP32})
      for (int C : {1, 4, 16, 64}) {
        DecodeCase c;
        c.state = st, c.row_metadata = true, c.path = DecodePath::Split, c.entry = entry, c.capacity = C, c.batch = 3;
        c.direct_every = C == 16 ? 2 : 0;
        c.name = sp + "split-" + entry_type_name(entry) + "-C" + std::to_string(C) + "-b3" + (c.direct_every ? "-mixed-direct" : "");
        if (!quick || (C == 16 && entry == EntryType::BF16)) add(c);
      }
    {
      DecodeCase c;
      c.state = st, c.row_metadata = true, c.path = DecodePath::Split;
      c.K = 64, c.capacity = 8, c.gates = ref::GateRange::extreme(), c.name = sp + "split-bf16-K64-C8-b3-extreme-gates";
      if (!quick) add(c);
      c.K = 128, c.gates = ref::GateRange::typical(), c.kernel = Kernel::Direct, c.direct_every = 1, c.capacity = 16;
      c.name = sp + "split-direct-bf16-C16-b3";
      if (!quick) add(c);
      c.path = DecodePath::Auto, c.batch = 64, c.pad_rows = 2, c.direct_every = 5, c.capacity = 8;
      c.name = sp + "auto-split-direct-bf16-C8-b64-mixed";
      if (!quick) add(c);
      c.kernel = Kernel::KVBuffer, c.capacity = 64, c.pad_rows = 1, c.direct_every = 0, c.name = sp + "auto-split-bf16-C64-b64";
      if (!quick) add(c);
      c.kernel = Kernel::Direct, c.path = DecodePath::Single, c.capacity = 8, c.direct_every = 3;
      c.name = sp + "single-direct-bf16-C8-b64-mixed";
      if (!quick) add(c);
      c.path = DecodePath::Split, c.batch = 20, c.pad_rows = 3, c.direct_every = 2, c.split_row_groups = 3;
      c.name = sp + "compact-direct-bf16-C8-b20-groups3-mixed";
      if (!quick) add(c);
      c.capacity = 16, c.entry = EntryType::FP32, c.K = 64, c.batch = 12, c.split_row_groups = 2;
      c.name = sp + "compact-direct-fp32-K64-C16-b12-groups2-mixed";
      if (!quick) add(c);
    }
  }
  // The kernels' early pool reads (pools_ready_at_launch) after a kernel that writes the token's
  // inputs late: the recurrent tiles (bulk copies; in place and out of place, gates in the kernel),
  // the KVBuffer kernel (fp32 and bf16 states, pool and row metadata, direct rows mixed in) and
  // capacity 1's route to the recurrent kernel. (The one-warp shape is launched plainly: it reads
  // nothing early, so its late cases could not fail the control in test_gdn_decode.)
  {
    DecodeCase r;
    r.late_inputs = true, r.kernel = Kernel::RecurrentInPlace, r.name = "recurrent-inplace-K128-b3-late-inputs";
    add(r);
    r.kernel = Kernel::RecurrentOutOfPlace, r.state = StateType::BF16, r.batch = 64, r.pad_rows = 3, r.recurrent_steps = 3;
    r.gates_in_kernel = true, r.rows_per_block = 32, r.name = "state-bf16-recurrent-tiles32-oop-K128-b64-gates-in-kernel-late-inputs";
    if (!quick) add(r);
    DecodeCase c;
    c.late_inputs = true, c.capacity = 4, c.batch = 3, c.name = "kvbuffer-cachedu-bf16-C4-b3-late-inputs";
    add(c);
    c.state = StateType::BF16, c.capacity = 16, c.batch = 20, c.pad_rows = 2, c.direct_every = 3, c.row_metadata = true;
    c.name = "state-bf16-kvbuffer-cachedu-bf16-C16-b20-rowmeta-mixed-direct-late-inputs";
    if (!quick) add(c);
    c.variant = BufferVariant::Raw, c.capacity = 8, c.direct_every = 0, c.row_metadata = false;
    c.name = "state-bf16-kvbuffer-raw-bf16-C8-b20-late-inputs";
    if (!quick) add(c);
    c.variant = BufferVariant::CachedU, c.rows_per_block = 128, c.name = "state-bf16-kvbuffer-cachedu-bf16-C8-b20-tile128-late-inputs";
    if (!quick) add(c);
    c.rows_per_block = 0;
    c.variant = BufferVariant::CachedU, c.capacity = 1, c.batch = 40, c.row_metadata = true, c.every_row_has_state = true;
    c.cycles = 4, c.rows_per_block = 32, c.name = "state-bf16-capacity1-every-row-stateful-tiles32-b40-late-inputs";
    if (!quick) add(c);
  }
  return cs;
}

}  // namespace kvbuf::decode_check
