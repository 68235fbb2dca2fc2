// The bulk copy engine (sm_90): one thread copies contiguous global bytes into shared memory with
// cp.async.bulk, each copy counted against an mbarrier that the block's threads wait on. Shared by
// the decode and verify kernels of both families (the GDN tiles of kernels/gdn/gdn_decode_device.h,
// the Mamba-2 warp rows and verify stages).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace kvbuf {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Thread 0 only: initialise `chunks` barriers (once per block; each completed copy then flips its
// barrier's phase parity).
__device__ __forceinline__ void tile_init(int chunks, uint64_t* bars) {
  for (int c = 0; c < chunks; ++c)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bars + c)));
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// One thread: arms initialised barrier `bar` for `bytes` of bulk copies (this thread's arrival);
// the barrier's phase completes when they have all landed.
__device__ __forceinline__ void expect_copy_bytes(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
}

// One thread: `bytes` (a multiple of 16, both ends 16-byte aligned) from global `src` into shared
// `dst` by one bulk copy, counted against `bar` (armed by expect_copy_bytes).
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
}

// Waits for the copy of phase `parity` (0 for a barrier's first copy, then alternating).
__device__ __forceinline__ void tile_wait(uint64_t* bar, uint32_t parity = 0) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
  } while (!done);
}

}  // namespace kvbuf
