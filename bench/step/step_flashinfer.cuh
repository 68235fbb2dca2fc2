// The whole-model step's FlashInfer settings, one place for its two attention translation units
// (step_attention.cu: paged decode; step_verify_attention.cu: the multi-query verify over the same
// cache): the default attention variant with no custom mask, sliding window, soft cap or ALiBi; no
// positional encoding in the kernel (RoPE is applied before the cache append); FlashInfer's default
// 8 MiB index workspace; the error check of FlashInfer's host calls.
#pragma once
#include <cuda_runtime.h>

#include <flashinfer/attention/variants.cuh>
#include <flashinfer/pos_enc.cuh>

#include <cstddef>
#include <stdexcept>
#include <string>

namespace kvbuf::step::flashinfer_settings {

using Variant = flashinfer::DefaultAttention</*custom mask*/ false, /*sliding window*/ false, /*soft cap*/ false,
                                             /*alibi*/ false>;
constexpr auto kNoRope = flashinfer::PosEncodingMode::kNone;
// The index workspace (tile indices, merge and output pointers), FlashInfer's default size
// (flashinfer.BatchDecodeWithPagedKVCacheWrapper and BatchPrefillWithPagedKVCacheWrapper: 8 MiB).
constexpr size_t kIntWorkspace = size_t(8) << 20;

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("FlashInfer ") + what + ": " + cudaGetErrorString(e));
}

}  // namespace kvbuf::step::flashinfer_settings
