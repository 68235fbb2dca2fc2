// The one place where the kernels meet architecture-specific mechanisms, chosen at compile time by
// __CUDA_ARCH__ (the virtual architecture the code is compiled for):
// - copies of contiguous global bytes into shared memory, issued by one thread and waited on by
//   many through an mbarrier: on sm_90 and later one bulk copy (cp.async.bulk) counted in bytes
//   against the barrier; before (Ampere, Ada) the same thread's 16-byte cp.async pieces, whose
//   completion arrives on the barrier (cp.async.mbarrier.arrive);
// - programmatic dependent launch (griddepcontrol): on sm_90 and later a grid may start while the
//   grid before it in the stream runs and waits for it in wait_prior_grid; before, launches are
//   plain (launch_kernel sets the attribute only for code compiled for sm_90 and later), so both
//   calls are empty.
// A kernel issues a barrier's copies as
//   tile_init (once) ... expect_copy_bytes(bar, total); bulk_copy(..., bar) ...; copies_issued(bar)
// and waits with tile_wait; it never tests the architecture itself.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace kvbuf {

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define KVBUF_ARCH_AMPERE_PATH 1
#endif

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Thread 0 only: initialise `chunks` barriers (once per block; each completed copy then flips its
// barrier's phase parity). The block (or warp) synchronises before anyone waits on them.
__device__ __forceinline__ void tile_init(int chunks, uint64_t* bars) {
  for (int c = 0; c < chunks; ++c)
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bars + c)));
#ifndef KVBUF_ARCH_AMPERE_PATH
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

// The issuing thread, before its copies on `bar`: their total `bytes` (on sm_90 this is the
// barrier's one arrival, and its phase completes when the bytes have landed).
__device__ __forceinline__ void expect_copy_bytes(uint64_t* bar, uint32_t bytes) {
#ifdef KVBUF_ARCH_AMPERE_PATH
  (void)bar;
  (void)bytes;
#else
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
#endif
}

// One thread: `bytes` (a multiple of 16, both ends 16-byte aligned) from global `src` into shared
// `dst`, counted against `bar` (armed by expect_copy_bytes, closed by copies_issued).
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
#ifdef KVBUF_ARCH_AMPERE_PATH
  (void)bar;
  const uint32_t d = smem_addr(dst);
  const char* s = static_cast<const char*>(src);
  for (uint32_t off = 0; off < bytes; off += 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d + off), "l"(s + off) : "memory");
#else
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
#endif
}

// The issuing thread, after its copies on `bar`: before sm_90 the barrier's one arrival, made when
// every cp.async this thread issued so far has landed (on sm_90 the bytes count completes it).
__device__ __forceinline__ void copies_issued(uint64_t* bar) {
#ifdef KVBUF_ARCH_AMPERE_PATH
  asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];" ::"r"(smem_addr(bar)) : "memory");
#else
  (void)bar;
#endif
}

// The issuing thread, before copies overwrite shared memory that its warp read or wrote: orders
// those generic accesses before the bulk copy's (async proxy) writes; cp.async needs nothing more.
__device__ __forceinline__ void fence_before_copy_overwrite() {
#ifndef KVBUF_ARCH_AMPERE_PATH
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

// Waits for the copy of phase `parity` (0 for a barrier's first copy, then alternating).
__device__ __forceinline__ void tile_wait(uint64_t* bar, uint32_t parity = 0) {
  uint32_t done = 0;
  do {
#ifdef KVBUF_ARCH_AMPERE_PATH
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.test_wait.parity.shared.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
#else
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_addr(bar)), "r"(parity)
        : "memory");
#endif
  } while (!done);
}

// Programmatic dependent launch, device side: wait_prior_grid before reading what the grid before
// in the stream writes; allow_dependent_grids lets the next grid start (its own wait still orders
// its reads after this grid's completion).
__device__ __forceinline__ void wait_prior_grid() {
#ifndef KVBUF_ARCH_AMPERE_PATH
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void allow_dependent_grids() {
#ifndef KVBUF_ARCH_AMPERE_PATH
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace kvbuf
#undef KVBUF_ARCH_AMPERE_PATH
