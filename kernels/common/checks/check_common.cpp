#include "kernels/common/checks/check_common.h"

#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <sstream>

namespace kvbuf::checks {

uint64_t case_seed(uint64_t base_seed, std::string_view case_name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a, 64 bit
  for (const char ch : case_name) h = (h ^ uint64_t(static_cast<unsigned char>(ch))) * 0x100000001b3ull;
  // splitmix64 of the sum: neighbouring base seeds give unrelated case seeds.
  uint64_t z = h + base_seed * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::string gate_range_name(const ref::GateRange& gates) {
  auto same = [&](const ref::GateRange& preset) {
    return gates.g_min == preset.g_min && gates.g_max == preset.g_max && gates.beta_min == preset.beta_min &&
           gates.beta_max == preset.beta_max && gates.p_beta_zero == preset.p_beta_zero &&
           gates.p_beta_one == preset.p_beta_one;
  };
  if (same(ref::GateRange::typical())) return "typical";
  if (same(ref::GateRange::mild())) return "mild";
  if (same(ref::GateRange::extreme())) return "extreme";
  std::ostringstream s;
  s << "{g " << gates.g_min << ".." << gates.g_max << ", beta " << gates.beta_min << ".." << gates.beta_max
    << ", P(beta=0) " << gates.p_beta_zero << ", P(beta=1) " << gates.p_beta_one << "}";
  return s.str();
}

std::vector<int> root_path(const std::vector<int>& parent0, int t) {
  std::vector<int> path;
  for (int x = t; x >= 0; x = parent0[x]) path.push_back(x);
  std::reverse(path.begin(), path.end());
  return path;
}

int window_depth(const std::vector<int>& parent0, int T) {
  int depth = 0;
  for (int t = 0; t < T; ++t) depth = std::max(depth, int(root_path(parent0, t).size()));
  return depth;
}

const char* path_name(DecodePath path) {
  switch (path) {
    case DecodePath::Auto: return "auto";
    case DecodePath::Single: return "single";
    case DecodePath::Split: return "split";
  }
  return "?";
}

const char* dt_regime_name(DtRegime regime) {
  switch (regime) {
    case DtRegime::Typical: return "typical";
    case DtRegime::NearZero: return "near-zero";
    case DtRegime::Large: return "large";
    case DtRegime::Given: return "given";
  }
  return "?";
}

std::string result_line(bool passed, const std::string& name, const std::string& details,
                        const std::string& message) {
  return (passed ? "PASS " : "FAIL ") + name + ": " + details + (message.empty() ? "" : " -- " + message);
}

DecodeSchedule decode_schedule(int batch, int rows, int slots, bool recurrent, int C, int cycles, int recurrent_steps,
                               int direct_every, std::mt19937_64& rng) {
  DecodeSchedule s;
  s.slot_perm.resize(slots), s.row_perm.resize(rows);
  std::iota(s.slot_perm.begin(), s.slot_perm.end(), 0);
  std::iota(s.row_perm.begin(), s.row_perm.end(), 0);
  std::shuffle(s.slot_perm.begin(), s.slot_perm.end(), rng);
  std::shuffle(s.row_perm.begin(), s.row_perm.end(), rng);
  s.start.resize(batch), s.own_steps.resize(batch), s.direct.resize(batch);
  for (int r = 0; r < batch; ++r) {
    s.start[r] = recurrent ? int(rng() % 2) : int(rng() % C);
    s.own_steps[r] = recurrent ? recurrent_steps : cycles * C;
    s.direct[r] = !recurrent && direct_every && r % direct_every == 0;
    s.total_steps = std::max(s.total_steps, s.start[r] + s.own_steps[r]);
  }
  return s;
}

void encode_state(StateType t, float v, unsigned char* dst) {
  switch (t) {
    case StateType::FP32: std::memcpy(dst, &v, 4); return;
    case StateType::BF16: {
      const uint16_t b = ref::float_to_bf16_bits(v);
      std::memcpy(dst, &b, 2);
      return;
    }
    case StateType::FP16: {
      const uint16_t b = __half_as_ushort(__float2half_rn(v));
      std::memcpy(dst, &b, 2);
      return;
    }
  }
}

double decode_state(StateType t, const unsigned char* src) {
  if (t == StateType::FP32) {
    float v;
    std::memcpy(&v, src, 4);
    return v;
  }
  uint16_t b;
  std::memcpy(&b, src, 2);
  return t == StateType::BF16 ? double(ref::bf16_bits_to_float(b)) : double(__half2float(__ushort_as_half(b)));
}

std::vector<uint8_t> encode_states(const std::vector<float>& x, StateType t) {
  const size_t sz = size_t(state_type_bytes(t));
  std::vector<uint8_t> r(x.size() * sz);
  for (size_t i = 0; i < x.size(); ++i) encode_state(t, x[i], &r[i * sz]);
  return r;
}

double state_floor(StateType t) {
  return t == StateType::BF16 ? std::ldexp(1.0, -133) : t == StateType::FP16 ? std::ldexp(1.0, -24) : 0.0;
}

ref::StateStore state_store(StateType t) { return t == StateType::FP32 ? ref::StateStore{} : ref::StateStore{t}; }

double state_unit(StateType t) {
  return t == StateType::BF16 ? std::ldexp(1.0, -8) : t == StateType::FP16 ? std::ldexp(1.0, -11) : 0.0;
}

}  // namespace kvbuf::checks
