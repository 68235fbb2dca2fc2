#include "bench/step/step_attention.h"

#include <flashinfer/attention/decode.cuh>
#include <flashinfer/attention/default_decode_params.cuh>
#include <flashinfer/attention/scheduler.cuh>

#include <stdexcept>
#include <string>

#include "bench/step/step_flashinfer.cuh"
#include "kernels/common/cuda_check.h"
#include "kernels/common/device_buffer.h"

namespace kvbuf::step {
namespace fi = flashinfer;
namespace {
using namespace flashinfer_settings;
using Params = fi::BatchDecodeParams<__nv_bfloat16, __nv_bfloat16, __nv_bfloat16, int32_t>;
// FlashInfer's default float workspace (flashinfer.BatchDecodeWithPagedKVCacheWrapper: 128 MiB).
constexpr size_t kFloatWorkspace = size_t(128) << 20;

template <class F>
void with_head_dim(int head_dim, F f) {
  if (head_dim == 128)
    f(std::integral_constant<uint32_t, 128>{});
  else if (head_dim == 256)
    f(std::integral_constant<uint32_t, 256>{});
  else
    throw std::invalid_argument("paged decode attention: head dim " + std::to_string(head_dim) +
                                " not compiled (128, 256)");
}

// GQA groups above FlashInfer's largest (8), e.g. Nemotron-H's 16: the q heads of each KV head are
// split into parts of 8, each part one decode call of group 8 over the same pages; q is copied
// into the parts' order [part, batch, kv head, 8, dim] before and o back after.
constexpr int kMaxGroup = 8;
__global__ void split_heads_kernel(const __nv_bfloat16* src, __nv_bfloat16* dst, int batch, int kv_heads, int group,
                                   int dim, bool to_parts) {
  const size_t n = size_t(batch) * kv_heads * group * dim;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const size_t c = i % dim, head = (i / dim) % (size_t(kv_heads) * group), b = i / dim / (size_t(kv_heads) * group);
    const size_t kv = head / group, j = head % group, part = j / kMaxGroup, jj = j % kMaxGroup;
    const size_t at = (((part * batch + b) * kv_heads + kv) * kMaxGroup + jj) * dim + c;
    if (to_parts)
      dst[at] = src[i];
    else
      dst[i] = src[at];
  }
}
}  // namespace

struct PagedDecodeAttention::Impl {
  PagedDecodeShape shape;
  int parts = 1;                  // decode calls per layer (group / 8 above group 8)
  DeviceBuffer q_parts, o_parts;  // the split layout (parts > 1 only)
  DeviceBuffer float_ws{kFloatWorkspace}, int_ws{kIntWorkspace};
  std::vector<char> host_int_ws = std::vector<char>(kIntWorkspace);
  fi::DecodePlanInfo plan;
  int32_t *kv_indptr = nullptr, *kv_indices = nullptr, *last_page_len = nullptr;
};

PagedDecodeAttention::PagedDecodeAttention(const PagedDecodeShape& s, const std::vector<int32_t>& kv_indptr_h,
                                           int32_t* kv_indptr, int32_t* kv_indices, int32_t* kv_last_page_len,
                                           cudaStream_t stream)
    : impl_(std::make_unique<Impl>()) {
  if (s.batch < 1 || s.kv_heads < 1 || s.q_heads % s.kv_heads != 0 || int(kv_indptr_h.size()) != s.batch + 1)
    throw std::invalid_argument("paged decode attention: bad shape");
  int group = s.q_heads / s.kv_heads;
  if (group > kMaxGroup && group % kMaxGroup == 0) {
    impl_->parts = group / kMaxGroup;
    group = kMaxGroup;
    const size_t elems = size_t(s.batch) * s.q_heads * s.head_dim;
    impl_->q_parts = DeviceBuffer(elems * 2);
    impl_->o_parts = DeviceBuffer(elems * 2);
  }
  if (group != 1 && group != 2 && group != 3 && group != 4 && group != 8)
    throw std::invalid_argument("paged decode attention: GQA group " + std::to_string(group) +
                                " not in FlashInfer's decode dispatch (1, 2, 3, 4, 8, or multiples of 8 split)");
  impl_->shape = s;
  impl_->kv_indptr = kv_indptr, impl_->kv_indices = kv_indices, impl_->last_page_len = kv_last_page_len;
  std::vector<int32_t> indptr = kv_indptr_h;
  with_head_dim(s.head_dim, [&](auto hd) {
    constexpr uint32_t HD = decltype(hd)::value;
    DISPATCH_GQA_GROUP_SIZE(uint32_t(group), GROUP, {
      auto estimate = fi::BatchDecodeWithPagedKVCacheWorkEstimationDispatched<GROUP, HD, kNoRope, Variant, Params>;
      check(fi::DecodePlan<HD, kNoRope, Variant, Params>(
                impl_->float_ws.as<void>(), kFloatWorkspace, impl_->int_ws.as<void>(), impl_->host_int_ws.data(),
                kIntWorkspace, impl_->plan, indptr.data(), uint32_t(s.batch), uint32_t(s.kv_heads * group),
                uint32_t(s.page_tokens), /*enable_cuda_graph=*/true, stream, estimate),
            "DecodePlan");
    });
  });
  KVB_CUDA_CHECK(cudaStreamSynchronize(stream));  // the plan's copy of the host workspace
}

PagedDecodeAttention::~PagedDecodeAttention() = default;

bool PagedDecodeAttention::split_kv() const { return impl_->plan.split_kv; }

void PagedDecodeAttention::run(const __nv_bfloat16* q, __nv_bfloat16* k_cache, __nv_bfloat16* v_cache,
                               __nv_bfloat16* o, cudaStream_t stream) const {
  const Impl& m = *impl_;
  const PagedDecodeShape& s = m.shape;
  const int part_heads = s.q_heads / m.parts;
  const size_t part_elems = size_t(s.batch) * part_heads * s.head_dim;
  if (m.parts > 1) {
    split_heads_kernel<<<unsigned(std::min<size_t>((part_elems * m.parts + 255) / 256, 4096)), 256, 0, stream>>>(
        q, m.q_parts.as<__nv_bfloat16>(), s.batch, s.kv_heads, s.q_heads / s.kv_heads, s.head_dim, true);
    KVB_CUDA_CHECK_LAUNCH();
  }
  for (int part = 0; part < m.parts; ++part) {
    const __nv_bfloat16* q_part = m.parts > 1 ? m.q_parts.as<__nv_bfloat16>() + part * part_elems : q;
    __nv_bfloat16* o_part = m.parts > 1 ? m.o_parts.as<__nv_bfloat16>() + part * part_elems : o;
    launch(q_part, k_cache, v_cache, o_part, part_heads, stream);
  }
  if (m.parts > 1) {
    split_heads_kernel<<<unsigned(std::min<size_t>((part_elems * m.parts + 255) / 256, 4096)), 256, 0, stream>>>(
        m.o_parts.as<__nv_bfloat16>(), o, s.batch, s.kv_heads, s.q_heads / s.kv_heads, s.head_dim, false);
    KVB_CUDA_CHECK_LAUNCH();
  }
}

void PagedDecodeAttention::launch(const __nv_bfloat16* q, __nv_bfloat16* k_cache, __nv_bfloat16* v_cache,
                                  __nv_bfloat16* o, int q_heads, cudaStream_t stream) const {
  const Impl& m = *impl_;
  const PagedDecodeShape& s = m.shape;
  fi::paged_kv_t<__nv_bfloat16, int32_t> kv(uint32_t(s.kv_heads), uint32_t(s.page_tokens), uint32_t(s.head_dim),
                                            uint32_t(s.batch), fi::QKVLayout::kHND, k_cache, v_cache, m.kv_indices,
                                            m.kv_indptr, m.last_page_len);
  Params p(const_cast<__nv_bfloat16*>(q), nullptr, kv, o, nullptr, nullptr, uint32_t(q_heads), q_heads * s.head_dim,
           s.head_dim, /*window_left=*/-1, /*logits_soft_cap=*/0.f,
           /*sm_scale=*/1.f / std::sqrt(float(s.head_dim)), /*rope_scale=*/1.f, /*rope_theta=*/1e4f);
  void* iw = m.int_ws.as<void>();
  p.padded_batch_size = uint32_t(m.plan.padded_batch_size);
  p.request_indices = fi::GetPtrFromBaseOffset<int32_t>(iw, m.plan.request_indices_offset);
  p.kv_tile_indices = fi::GetPtrFromBaseOffset<int32_t>(iw, m.plan.kv_tile_indices_offset);
  p.o_indptr = fi::GetPtrFromBaseOffset<int32_t>(iw, m.plan.o_indptr_offset);
  p.kv_chunk_size_ptr = fi::GetPtrFromBaseOffset<int32_t>(iw, m.plan.kv_chunk_size_ptr_offset);
  __nv_bfloat16* tmp_v = nullptr;
  float* tmp_s = nullptr;
  if (m.plan.split_kv) {
    tmp_v = fi::GetPtrFromBaseOffset<__nv_bfloat16>(m.float_ws.as<void>(), m.plan.v_offset);
    tmp_s = fi::GetPtrFromBaseOffset<float>(m.float_ws.as<void>(), m.plan.s_offset);
    p.block_valid_mask = fi::GetPtrFromBaseOffset<bool>(iw, m.plan.block_valid_mask_offset);
  }
  with_head_dim(s.head_dim, [&](auto hd) {
    constexpr uint32_t HD = decltype(hd)::value;
    check(fi::BatchDecodeWithPagedKVCacheDispatched<HD, kNoRope, Variant>(p, tmp_v, tmp_s, /*enable_pdl=*/false,
                                                                          stream),
          "BatchDecodeWithPagedKVCacheDispatched");
  });
  KVB_CUDA_CHECK_LAUNCH();
}

}  // namespace kvbuf::step
