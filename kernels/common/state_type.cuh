// The state element type (StateType, sim/layout.h) on the device: the one dispatch from the run-time
// type to a kernel's element type S, and S's conversions. Every kernel computes and accumulates in
// fp32; a state write rounds once to nearest even (from_f32<S>).
//
//   dispatch_state_type("gdn_decode_recurrent", p.state_type, [&](auto tag) {
//     using S = typename decltype(tag)::type;
//     launch<S>(p);
//   });
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>
#include <type_traits>
#include <string>

#include "kernels/common/common.cuh"
#include "sim/layout.h"  // StateType

namespace kvbuf {

template <class S>
struct StateTag {
  using type = S;
};

// Calls f(StateTag<S>{}) with S = float, __nv_bfloat16 or __half for t and returns what f returns;
// an unknown value throws std::invalid_argument naming `who`.
template <class F>
decltype(auto) dispatch_state_type(const char* who, StateType t, F&& f) {
  switch (t) {
    case StateType::FP32: return f(StateTag<float>{});
    case StateType::BF16: return f(StateTag<__nv_bfloat16>{});
    case StateType::FP16: return f(StateTag<__half>{});
  }
  throw std::invalid_argument(std::string(who) + ": unsupported state dtype " + std::to_string(int(t)));
}

__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
template <>
__device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }

// Two 16-bit elements (bf16 or fp16 states and entries) packed in 32 bits, low element first, as
// fp32, and back (each rounded once to nearest even, as from_f32).
template <class E>
__device__ __forceinline__ float2 pair_to_float2(uint32_t x) {
  if constexpr (std::is_same_v<E, __nv_bfloat16>) {
    return bf16x2_to_float2(x);
  } else {
    static_assert(std::is_same_v<E, __half>, "16-bit elements: bf16 or fp16");
    return __half22float2(reinterpret_cast<const __half2&>(x));
  }
}
template <class E>
__device__ __forceinline__ uint32_t float2_to_pair(float lo, float hi) {
  if constexpr (std::is_same_v<E, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return reinterpret_cast<const uint32_t&>(v);
  } else {
    static_assert(std::is_same_v<E, __half>, "16-bit elements: bf16 or fp16");
    const __half2 v = __floats2half2_rn(lo, hi);
    return reinterpret_cast<const uint32_t&>(v);
  }
}

}  // namespace kvbuf
