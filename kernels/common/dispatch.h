// Head-dimension dispatch (flashinfer's DISPATCH_HEAD_DIM): a launch site turns the run-time K, V
// into compile-time constants in one call instead of a hand-written switch per file:
//
//   dispatch_head_dims("gdn_decode_recurrent", io.K, io.V, [&](auto K, auto V) { launch<K, V>(p); });
//
// f receives std::integral_constant<int, K> and <int, V>, which convert to int in template
// arguments. Unsupported dims throw std::invalid_argument("<who>: unsupported head dims K=.. V=..
// (supported: ..)"). Host-only plain C++ (included by kernels/common/common.cuh).
#pragma once
#include <stdexcept>
#include <string>
#include <type_traits>

namespace kvbuf {

// V of a family whose kernels take V at run time: only K is dispatched, f gets V = kAnyHeadDim.
constexpr int kAnyHeadDim = 0;

// One (K, V) pair a kernel family is instantiated for, and the list of a family's pairs.
template <int K_, int V_>
struct HeadDims {
  static constexpr int K = K_, V = V_;
};
template <class... Dims>
struct HeadDimsList {};

// The decode kernels: K = V in {64, 128}. A list's order is the order its kernels are
// instantiated, and so their order in the PTX, which ptxas's output depends on (the other order
// changed one kernel of gdn_decode_kvbuffer.cu by an instruction): these are the orders of the
// switches they replaced.
using SquareHeadDims = HeadDimsList<HeadDims<128, 128>, HeadDims<64, 64>>;
// The verify kernels: K in {64, 128}; V at run time (validate_verify_io checks it).
using KeyHeadDims = HeadDimsList<HeadDims<64, kAnyHeadDim>, HeadDims<128, kAnyHeadDim>>;

namespace head_dims_detail {

template <class D>
std::string name() {
  return std::to_string(D::K) + "x" + (D::V == kAnyHeadDim ? std::string("*") : std::to_string(D::V));
}

template <class List>
struct Names;
template <class... Dims>
struct Names<HeadDimsList<Dims...>> {
  static std::string get() {
    std::string s;
    ((s += (s.empty() ? "" : ", ") + name<Dims>()), ...);
    return s;
  }
};

template <class List>
[[noreturn]] void fail(const char* who, int K, int V) {
  throw std::invalid_argument(std::string(who) + ": unsupported head dims K=" + std::to_string(K) +
                              " V=" + std::to_string(V) + " (supported: " + Names<List>::get() + ")");
}

template <class List, class D, class... Rest, class F>
decltype(auto) call(const char* who, int K, int V, F& f) {
  if (K == D::K && (D::V == kAnyHeadDim || V == D::V))
    return f(std::integral_constant<int, D::K>{}, std::integral_constant<int, D::V>{});
  if constexpr (sizeof...(Rest) == 0)
    fail<List>(who, K, V);
  else
    return call<List, Rest...>(who, K, V, f);
}

template <class List>
struct Dispatch;
template <class... Dims>
struct Dispatch<HeadDimsList<Dims...>> {
  template <class F>
  static decltype(auto) run(const char* who, int K, int V, F& f) {
    return call<HeadDimsList<Dims...>, Dims...>(who, K, V, f);
  }
};

}  // namespace head_dims_detail

// Calls f(integral_constant<K>, integral_constant<V>) for the pair of Supported that (K, V) matches
// and returns what f returns; throws std::invalid_argument naming `who` when none does.
template <class Supported = SquareHeadDims, class F>
decltype(auto) dispatch_head_dims(const char* who, int K, int V, F&& f) {
  return head_dims_detail::Dispatch<Supported>::run(who, K, V, f);
}

}  // namespace kvbuf
