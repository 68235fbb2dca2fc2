// The one place where the kernels meet architecture-specific mechanisms, chosen at compile time by
// __CUDA_ARCH__ (the virtual architecture the code is compiled for):
// - copies of contiguous global bytes into shared memory, waited on by many threads through an
//   mbarrier. On sm_90 and later one thread issues one bulk copy (cp.async.bulk) counted in bytes
//   against the barrier (its one arrival is expect_copy_bytes). Before (Ampere, Ada) there is no
//   copy engine: the 32 lanes of a warp split the bytes into 16-byte cp.async pieces (lane l takes
//   pieces l, l + 32, ...: each step of the warp moves 512 contiguous bytes), and each lane's
//   cp.async.mbarrier.arrive.noinc arrives on the barrier once its pieces have landed; .noinc does
//   not add to the pending count, so the barrier is initialised for 32 arrivals. One thread issuing
//   every piece of a tile of tens of KiB ran the KVBuffer kernels 1.7-2.7x slower.
// - programmatic dependent launch (griddepcontrol): on sm_90 and later a grid may start while the
//   grid before it in the stream runs and waits for it in wait_prior_grid; before, launches are
//   plain (launch_kernel sets the attribute only for code compiled for sm_90 and later), so both
//   calls are empty.
// A kernel issues a barrier's copies from the threads for which copy_issuer(t) holds, t being the
// thread's index in the block (thread 0 alone on sm_90, warp 0 before) or its lane in a warp that
// issues its own copies (lane 0, or the whole warp); every lane of that warp must reach the calls
// (the branch around them uniform over the warp). Those threads call
//   tile_init (once) ... expect_copy_bytes(bar, total); bulk_copy(..., bar) ...; copies_issued(bar)
// and any thread waits with tile_wait; a kernel never tests the architecture itself.
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

// The threads that issue a barrier's copies, and so the arrivals each barrier's phase waits for.
#ifdef KVBUF_ARCH_AMPERE_PATH
constexpr unsigned kCopyIssuers = 32;
#else
constexpr unsigned kCopyIssuers = 1;
#endif

// Whether the thread of index t (in its block, or its lane in a warp that issues its own copies)
// issues copies: t == 0 on sm_90 and later, t < 32 (all of warp 0, or every lane) before.
__device__ __forceinline__ bool copy_issuer(unsigned t) {
#ifdef KVBUF_ARCH_AMPERE_PATH
  return t < kCopyIssuers;
#else
  return t == 0;
#endif
}

#ifdef KVBUF_ARCH_AMPERE_PATH
__device__ __forceinline__ uint32_t lane_id() {
  uint32_t lane;
  asm("mov.u32 %0, %%laneid;" : "=r"(lane));
  return lane;
}
#endif

// The copy issuers of one warp: initialise `chunks` barriers for kCopyIssuers arrivals (once per
// block; each completed copy then flips its barrier's phase parity). The issuers may then issue on
// them at once (before sm_90 lane 0 initialises and the warp synchronises); the block (or warp)
// synchronises before other threads wait on them.
__device__ __forceinline__ void tile_init(int chunks, uint64_t* bars) {
#ifdef KVBUF_ARCH_AMPERE_PATH
  if (lane_id() == 0)
#endif
    for (int c = 0; c < chunks; ++c)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bars + c)), "n"(kCopyIssuers));
#ifdef KVBUF_ARCH_AMPERE_PATH
  __syncwarp();
#else
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

// The copy issuers, before their copies on `bar`: their total `bytes` (on sm_90 this is the
// barrier's one arrival, and its phase completes when the bytes have landed).
__device__ __forceinline__ void expect_copy_bytes(uint64_t* bar, uint32_t bytes) {
#ifdef KVBUF_ARCH_AMPERE_PATH
  (void)bar;
  (void)bytes;
#else
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
#endif
}

// The copy issuers, with the same arguments: `bytes` (a multiple of 16, both ends 16-byte aligned)
// from global `src` into shared `dst`, counted against `bar` (armed by expect_copy_bytes, closed by
// copies_issued).
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
#ifdef KVBUF_ARCH_AMPERE_PATH
  (void)bar;
  const uint32_t d = smem_addr(dst);
  const char* s = static_cast<const char*>(src);
  for (uint32_t off = lane_id() * 16; off < bytes; off += kCopyIssuers * 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d + off), "l"(s + off) : "memory");
#else
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                   smem_addr(dst)),
               "l"(src), "r"(bytes), "r"(smem_addr(bar))
               : "memory");
#endif
}

// The copy issuers, after their copies on `bar`: before sm_90 each lane's arrival (one of the 32 the
// barrier waits for), made when every cp.async that lane issued so far has landed (on sm_90 the
// bytes count completes it).
__device__ __forceinline__ void copies_issued(uint64_t* bar) {
#ifdef KVBUF_ARCH_AMPERE_PATH
  asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];" ::"r"(smem_addr(bar)) : "memory");
#else
  (void)bar;
#endif
}

// The copy issuers, before copies overwrite shared memory that their warp read or wrote (after a
// __syncwarp or block barrier that orders the other lanes' accesses before theirs): orders those
// generic accesses before the bulk copy's (async proxy) writes; cp.async needs nothing more.
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
