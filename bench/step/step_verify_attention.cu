// The multi-query (speculative verify) attention of bench/step/step_attention.h: FlashInfer's batch
// prefill kernel over the paged KV cache, causal. A translation unit of its own: prefill.cuh is
// heavy to compile, and only the head dims and query tiles the plan can pick are instantiated.
#include <flashinfer/attention/default_prefill_params.cuh>
#include <flashinfer/attention/prefill.cuh>
#include <flashinfer/attention/scheduler.cuh>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "bench/step/step_attention.h"
#include "bench/step/step_flashinfer.cuh"
#include "kernels/common/cuda_check.h"
#include "kernels/common/device_buffer.h"

namespace kvbuf::step {
namespace fi = flashinfer;
namespace {
using namespace flashinfer_settings;
using Params = fi::BatchPrefillPagedParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int32_t>;
constexpr auto kCausal = fi::MaskMode::kCausal;
// The plan's mode. FlashInfer 0.6.0's CUDA-graph mode sizes the query tile for the largest request
// the rows could form (rows - requests + 1 tokens: 64 packed rows at head dim 256, 128 at 128, at
// any batch > 1) where a verify request has T x group (16 at T = 4, group 4); FlashInfer 0.7 added a
// uniform query length to its graph plan for this case. The non-graph mode picks the tile from the
// rows per request, as that plan does; a point's requests and contexts are fixed, so the grid it
// plans is the one every replay of the step's graph runs.
constexpr bool kCudaGraphPlan = false;
// Slack for FlashInfer's 16-byte alignment of the two partial buffers in the float workspace.
constexpr size_t kAlignSlack = 64;

// The head dims and query tiles FlashInfer's plan can pick (FA2DetermineCtaTileQ: 128 only below
// head dim 256).
template <class F>
void with_head_dim_and_tile(int head_dim, int tile, F f) {
  using HD128 = std::integral_constant<uint32_t, 128>;
  using HD256 = std::integral_constant<uint32_t, 256>;
  auto tile_of = [&](auto hd) {
    if (tile == 16) return f(hd, std::integral_constant<uint32_t, 16>{});
    if (tile == 64) return f(hd, std::integral_constant<uint32_t, 64>{});
    constexpr uint32_t kHeadDim = decltype(hd)::value;
    if constexpr (kHeadDim < 256)
      if (tile == 128) return f(hd, std::integral_constant<uint32_t, 128>{});
    throw std::invalid_argument("multi-query attention: unsupported query tile " + std::to_string(tile) +
                                " at head dim " + std::to_string(head_dim));
  };
  if (head_dim == 128)
    tile_of(HD128{});
  else if (head_dim == 256)
    tile_of(HD256{});
  else
    throw std::invalid_argument("multi-query attention: unsupported head dim " + std::to_string(head_dim) +
                                " (compiled: 128, 256)");
}

void validate(const PagedMultiQueryShape& s, const std::vector<int32_t>& kv_indptr_h) {
  if (s.requests < 1 || s.tokens < 1 || s.kv_heads < 1 || s.q_heads % s.kv_heads != 0 || s.page_tokens < 1 ||
      int(kv_indptr_h.size()) != s.requests + 1)
    throw std::invalid_argument("multi-query attention: bad shape");
  for (int r = 0; r < s.requests; ++r)
    if ((kv_indptr_h[r + 1] - kv_indptr_h[r]) * s.page_tokens < s.tokens)
      throw std::invalid_argument("multi-query attention: request " + std::to_string(r) + " holds fewer than " +
                                  std::to_string(s.tokens) + " tokens");
}

std::vector<int32_t> qo_indptr_of(const PagedMultiQueryShape& s) {
  std::vector<int32_t> qo(size_t(s.requests) + 1);
  for (int r = 0; r <= s.requests; ++r) qo[r] = r * s.tokens;
  return qo;
}

// PrefillPlan's launch bound: two blocks per SM, shared by the KV heads.
uint32_t max_batch_size_if_split(int kv_heads) {
  int device = 0, sms = 0;
  KVB_CUDA_CHECK(cudaGetDevice(&device));
  KVB_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return uint32_t(2 * sms / kv_heads);
}
}  // namespace

struct PagedMultiQueryAttention::Impl {
  PagedMultiQueryShape shape;
  DeviceBuffer qo_indptr, float_ws, int_ws{kIntWorkspace};
  std::vector<char> host_int_ws = std::vector<char>(kIntWorkspace);
  fi::PrefillPlanInfo plan;
  int32_t *kv_indptr = nullptr, *kv_indices = nullptr, *last_page_len = nullptr;
};

namespace {
// The float workspace PrefillPlan fills: the split-KV partials of every (q head, padded block, tile row).
size_t float_workspace_bytes(const PagedMultiQueryShape& s, const std::vector<int32_t>& kv_indptr_h) {
  validate(s, kv_indptr_h);
  std::vector<int32_t> qo = qo_indptr_of(s), kv = kv_indptr_h;
  // The scheduler PrefillPlan runs, for the sizes it then allocates.
  auto [split_kv, new_batch, padded_batch, tile, chunk, requests, qo_tiles, kv_tiles, merge, o_indptr] =
      fi::PrefillSplitQOKVIndptr(qo.data(), kv.data(), uint32_t(s.requests * s.tokens), uint32_t(s.requests),
                                 uint32_t(s.q_heads), uint32_t(s.kv_heads), uint32_t(s.head_dim),
                                 uint32_t(s.page_tokens), max_batch_size_if_split(s.kv_heads), kCudaGraphPlan,
                                 /*window_left=*/-1, /*fixed_split_size=*/-1, /*disable_split_kv=*/false);
  if (!split_kv) return kAlignSlack;
  const size_t rows = size_t(s.q_heads) * padded_batch * tile;
  return rows * s.head_dim * sizeof(float) + rows * sizeof(float) + kAlignSlack;
}
}  // namespace

size_t PagedMultiQueryAttention::workspace_bytes(const PagedMultiQueryShape& s,
                                                 const std::vector<int32_t>& kv_indptr_h) {
  return float_workspace_bytes(s, kv_indptr_h) + kIntWorkspace + (size_t(s.requests) + 1) * sizeof(int32_t);
}

PagedMultiQueryAttention::PagedMultiQueryAttention(const PagedMultiQueryShape& s,
                                                   const std::vector<int32_t>& kv_indptr_h, int32_t* kv_indptr,
                                                   int32_t* kv_indices, int32_t* kv_last_page_len,
                                                   cudaStream_t stream)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  const size_t float_bytes = float_workspace_bytes(s, kv_indptr_h);  // validates the shape
  m.shape = s;
  m.kv_indptr = kv_indptr, m.kv_indices = kv_indices, m.last_page_len = kv_last_page_len;
  m.float_ws = DeviceBuffer(float_bytes);
  std::vector<int32_t> qo = qo_indptr_of(s), kv = kv_indptr_h;
  m.qo_indptr = DeviceBuffer(qo.size() * sizeof(int32_t));
  m.qo_indptr.upload(qo);
  check(fi::PrefillPlan<int32_t>(m.float_ws.as<void>(), m.float_ws.bytes(), m.int_ws.as<void>(),
                                 m.host_int_ws.data(), kIntWorkspace, m.plan, qo.data(), kv.data(),
                                 uint32_t(s.requests * s.tokens), uint32_t(s.requests), uint32_t(s.q_heads),
                                 uint32_t(s.kv_heads), uint32_t(s.head_dim), uint32_t(s.head_dim),
                                 uint32_t(s.page_tokens), kCudaGraphPlan, /*sizeof_dtype_o=*/2, /*window_left=*/-1,
                                 /*fixed_split_size=*/-1, /*disable_split_kv=*/false, /*num_colocated_ctas=*/0,
                                 stream),
        "PrefillPlan");
  KVB_CUDA_CHECK(cudaStreamSynchronize(stream));  // the plan's copy of the host workspace
  // The tile the plan picked must be one this file compiled (throws before any launch if not).
  with_head_dim_and_tile(s.head_dim, int(m.plan.cta_tile_q), [](auto, auto) {});
}

PagedMultiQueryAttention::~PagedMultiQueryAttention() = default;

bool PagedMultiQueryAttention::split_kv() const { return impl_->plan.split_kv; }
int PagedMultiQueryAttention::cta_tile_q() const { return int(impl_->plan.cta_tile_q); }

void PagedMultiQueryAttention::run(const __nv_bfloat16* q, __nv_bfloat16* k_cache, __nv_bfloat16* v_cache,
                                   __nv_bfloat16* o, cudaStream_t stream) const {
  const Impl& m = *impl_;
  const PagedMultiQueryShape& s = m.shape;
  fi::paged_kv_t<__nv_bfloat16, int32_t> kv(uint32_t(s.kv_heads), uint32_t(s.page_tokens), uint32_t(s.head_dim),
                                            uint32_t(s.requests), fi::QKVLayout::kHND, k_cache, v_cache,
                                            m.kv_indices, m.kv_indptr, m.last_page_len);
  Params p(const_cast<__nv_bfloat16*>(q), kv, /*maybe_custom_mask=*/nullptr, m.qo_indptr.as<int32_t>(),
           /*maybe_mask_indptr=*/nullptr, /*maybe_q_rope_offset=*/nullptr, o, /*lse=*/nullptr,
           /*maybe_alibi_slopes=*/nullptr, uint32_t(s.q_heads), /*q_stride_n=*/s.q_heads * s.head_dim,
           /*q_stride_h=*/s.head_dim, /*window_left=*/-1, /*logits_soft_cap=*/0.f,
           /*sm_scale=*/1.f / std::sqrt(float(s.head_dim)), /*rope_scale=*/1.f, /*rope_theta=*/1e4f);
  void* iw = m.int_ws.as<void>();
  p.request_indices = fi::GetPtrFromBaseOffset<int32_t>(iw, m.plan.request_indices_offset);
  p.qo_tile_indices = fi::GetPtrFromBaseOffset<int32_t>(iw, m.plan.qo_tile_indices_offset);
  p.kv_tile_indices = fi::GetPtrFromBaseOffset<int32_t>(iw, m.plan.kv_tile_indices_offset);
  p.o_indptr = fi::GetPtrFromBaseOffset<int32_t>(iw, m.plan.o_indptr_offset);
  p.kv_chunk_size_ptr = fi::GetPtrFromBaseOffset<int32_t>(iw, m.plan.kv_chunk_size_ptr_offset);
  p.padded_batch_size = uint32_t(m.plan.padded_batch_size);
  p.max_total_num_rows = uint32_t(m.plan.total_num_rows);
  __nv_bfloat16* tmp_v = nullptr;
  float* tmp_s = nullptr;
  if (m.plan.split_kv) {
    p.merge_indptr = fi::GetPtrFromBaseOffset<int32_t>(iw, m.plan.merge_indptr_offset);
    p.block_valid_mask = fi::GetPtrFromBaseOffset<bool>(iw, m.plan.block_valid_mask_offset);
    tmp_v = fi::GetPtrFromBaseOffset<__nv_bfloat16>(m.float_ws.as<void>(), m.plan.v_offset);
    tmp_s = fi::GetPtrFromBaseOffset<float>(m.float_ws.as<void>(), m.plan.s_offset);
  }
  if (m.plan.enable_cuda_graph)
    p.total_num_rows = fi::GetPtrFromBaseOffset<uint32_t>(iw, m.plan.total_num_rows_offset);
  with_head_dim_and_tile(s.head_dim, int(m.plan.cta_tile_q), [&](auto hd, auto tile) {
    constexpr uint32_t HD = decltype(hd)::value, TILE = decltype(tile)::value;
    check(fi::BatchPrefillWithPagedKVCacheDispatched<TILE, HD, HD, kNoRope, /*use_fp16_qk_reduction=*/false,
                                                     kCausal, Variant, Params>(p, tmp_v, tmp_s,
                                                                               /*enable_pdl=*/false, stream),
          "BatchPrefillWithPagedKVCacheDispatched");
  });
  KVB_CUDA_CHECK_LAUNCH();
}

}  // namespace kvbuf::step
