// The element type of a linear-attention layer's recurrent state, declared once for sim/ (layouts,
// bytes, capacity, the catalog's engine defaults), reference/, kernels/ and bench/. Plain C++.
#pragma once
#include <stdexcept>
#include <string>

namespace kvbuf {

// Element type of the recurrent state: the pools, classic verify's step states, the checkpoint S0.
// Every kernel computes and accumulates in fp32 and rounds once to nearest (even) where it writes a
// state: the classic kernels at every token, the KVBuffer kernels at every fold. The reference
// rounds at the same places (reference/state_rounding.h); kernels/common/state_type.cuh
// dispatches it on the device.
enum class StateType { FP32, BF16, FP16 };
inline int state_type_bytes(StateType t) { return t == StateType::FP32 ? 4 : 2; }
// Rows of this state type in the bytes of one fp32 row: launch rules stated for an fp32 state keep
// a block's bytes by taking this many times their rows.
inline int rows_per_fp32_row(StateType t) { return state_type_bytes(StateType::FP32) / state_type_bytes(t); }
inline const char* state_type_name(StateType t) {
  return t == StateType::FP32 ? "fp32" : t == StateType::BF16 ? "bf16" : "fp16";
}
inline StateType parse_state_type(const std::string& name) {
  if (name == "fp32" || name == "f32") return StateType::FP32;
  if (name == "bf16") return StateType::BF16;
  if (name == "fp16" || name == "f16") return StateType::FP16;
  throw std::invalid_argument("unknown state dtype '" + name + "' (known: fp32, bf16, fp16)");
}

}  // namespace kvbuf
