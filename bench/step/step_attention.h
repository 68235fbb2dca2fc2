// Full attention over a paged KV cache with FlashInfer's header-only kernels, planned once per
// point outside the CUDA graph, then launched from the graph.
// bf16 q, KV and output; KV layout [pages, kv heads, page tokens, head dim] (HND).
// - Decode (one token per request): the batch decode kernel (BatchDecodeWithPagedKVCacheDispatched,
//   the kernel SGLang and vLLM run for decode). Head dims 128 and 256 and GQA groups 1, 2, 3, 4 and
//   8 are compiled (FlashInfer's decode dispatch); a group of a multiple of 8 (Nemotron-H: 16) runs
//   as group-8 calls over the same pages, q and o copied into and out of that order.
// - Speculative verify (T > 1 tokens per request): the multi-query (batch prefill) kernel over the
//   same pages (BatchPrefillWithPagedKVCacheDispatched, as SGLang's and vLLM's FlashInfer backends
//   verify drafts): a request's T queries attend its KV in one pass, causal among the T tokens
//   (query t sees the first kv_len - T + 1 + t tokens), so the KV is read once per request and
//   not T times. Head dims 128 and 256; the GQA group is a runtime value there (any group). Its
//   query tile follows a request's T x group packed rows (FlashInfer's non-graph plan, as its
//   uniform-query-length graph plan from 0.7 picks it; step_verify_attention.cu says why).
// Anything else throws std::invalid_argument.
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

// Speculative verify: requests x tokens query rows (request-major: row r T + t), each request's T
// tokens the last T of its KV (positions kv_len - T .. kv_len - 1, appended before the call).
struct PagedMultiQueryShape {
  int requests = 0, tokens = 1, q_heads = 0, kv_heads = 0, head_dim = 0, page_tokens = 16;
};

class PagedMultiQueryAttention {
 public:
  // kv_indptr_h [requests + 1] host copy of the page table's row pointers (pages per request); the
  // device tables (indptr, indices, last page lengths) stay owned by the caller and must outlive
  // this object. Every request must hold at least `tokens` tokens.
  PagedMultiQueryAttention(const PagedMultiQueryShape& shape, const std::vector<int32_t>& kv_indptr_h,
                           int32_t* kv_indptr, int32_t* kv_indices, int32_t* kv_last_page_len, cudaStream_t stream);
  ~PagedMultiQueryAttention();
  PagedMultiQueryAttention(const PagedMultiQueryAttention&) = delete;
  PagedMultiQueryAttention& operator=(const PagedMultiQueryAttention&) = delete;
  // Device bytes this object allocates for the shape: FlashInfer's split-KV partials (sized by its
  // scheduler from the SM count and the query tiles, unlike the decode kernel's fixed workspace),
  // its index workspace and the query row pointers.
  static size_t workspace_bytes(const PagedMultiQueryShape& shape, const std::vector<int32_t>& kv_indptr_h);
  // o [requests x tokens, q_heads, head_dim]: row (r, t) = softmax(q k^T / sqrt(head_dim)) v over
  // request r's first kv_len - tokens + 1 + t tokens.
  void run(const __nv_bfloat16* q, __nv_bfloat16* k_cache, __nv_bfloat16* v_cache, __nv_bfloat16* o,
           cudaStream_t stream) const;
  bool split_kv() const;
  int cta_tile_q() const;  // FlashInfer's query tile (16, 64 or 128 packed rows)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvbuf::step
