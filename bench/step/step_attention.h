// Full-attention decode over a paged KV cache: FlashInfer's header-only batch decode kernel
// (BatchDecodeWithPagedKVCacheDispatched, the kernel SGLang and vLLM run for decode), planned once
// per (batch, context) outside the CUDA graph as FlashInfer's CUDA-graph mode does, then launched
// from the graph. bf16 q, KV and output; KV layout [pages, kv heads, page tokens, head dim] (HND).
// Head dims 128 and 256 and GQA groups 1, 2, 3, 4 and 8 are compiled (FlashInfer's decode
// dispatch); a group of a multiple of 8 (Nemotron-H: 16) runs as group-8 calls over the same
// pages, q and o copied into and out of that order; anything else throws std::invalid_argument.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace kvbuf::step {

struct PagedDecodeShape {
  int batch = 0, q_heads = 0, kv_heads = 0, head_dim = 0, page_tokens = 16;
};

class PagedDecodeAttention {
 public:
  // kv_indptr_h [batch + 1] host copy of the page table's row pointers; the device tables (indptr,
  // indices, last page lengths) stay owned by the caller and must outlive this object.
  PagedDecodeAttention(const PagedDecodeShape& shape, const std::vector<int32_t>& kv_indptr_h, int32_t* kv_indptr,
                       int32_t* kv_indices, int32_t* kv_last_page_len, cudaStream_t stream);
  ~PagedDecodeAttention();
  PagedDecodeAttention(const PagedDecodeAttention&) = delete;
  PagedDecodeAttention& operator=(const PagedDecodeAttention&) = delete;
  // o [batch, q_heads, head_dim] = softmax(q k^T / sqrt(head_dim)) v over each row's pages.
  void run(const __nv_bfloat16* q, __nv_bfloat16* k_cache, __nv_bfloat16* v_cache, __nv_bfloat16* o,
           cudaStream_t stream) const;
  // Whether FlashInfer split the KV of a row across blocks (then a merge kernel runs too).
  bool split_kv() const;

 private:
  void launch(const __nv_bfloat16* q, __nv_bfloat16* k_cache, __nv_bfloat16* v_cache, __nv_bfloat16* o, int q_heads,
              cudaStream_t stream) const;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvbuf::step
