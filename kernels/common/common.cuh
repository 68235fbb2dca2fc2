// Shared by every kernel family: small device helpers (the error macros are in cuda_check.h).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include "kernels/common/arch.cuh"  // wait_prior_grid, allow_dependent_grids
#include "kernels/common/cuda_check.h"
#include "kernels/common/dispatch.h"  // dispatch_head_dims
#include "sim/launch_rules.h"

namespace kvbuf {

// Grids with one request row per z index (gridDim.z's limit).
constexpr int kMaxBatch = 65535;

// Host: the current device's limits (read once; sim/launch_rules.h: the launch rules that read them).
inline const DeviceLimits& device_limits() {
  static const DeviceLimits limits = [] {
    int dev = 0;
    KVB_CUDA_CHECK(cudaGetDevice(&dev));
    cudaDeviceProp prop{};
    KVB_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    DeviceLimits d;
    d.cc_major = prop.major;
    d.cc_minor = prop.minor;
    d.sms = prop.multiProcessorCount;
    d.max_threads_per_sm = prop.maxThreadsPerMultiProcessor;
    d.max_blocks_per_sm = prop.maxBlocksPerMultiProcessor;
    d.smem_per_block_optin = prop.sharedMemPerBlockOptin;
    d.smem_per_sm = prop.sharedMemPerMultiprocessor;
    d.l2_bytes = size_t(prop.l2CacheSize);
    return d;
  }();
  return limits;
}
inline int multiprocessor_count() { return device_limits().sms; }

// A launch shape this GPU cannot run (more shared memory per block than it allows): a sweep point
// that meets it is a row saying so, not a failure.
struct LaunchShapeRefused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Host: raises kernel's dynamic shared memory limit to smem where its static and dynamic shared
// memory together pass the default 48 KiB; returns the kernel's attributes. Throws
// LaunchShapeRefused where they pass what the device allows a block (99 KiB on sm_86 / 89 / 120).
template <class... KernelArgs>
cudaFuncAttributes allow_dynamic_smem(void (*kernel)(KernelArgs...), size_t smem) {
  cudaFuncAttributes attrs = {};
  KVB_CUDA_CHECK(cudaFuncGetAttributes(&attrs, kernel));
  if (smem + attrs.sharedSizeBytes > device_limits().smem_per_block_optin)
    throw LaunchShapeRefused("launch shape needs " + std::to_string(smem + attrs.sharedSizeBytes) +
                             " bytes of shared memory per block; this GPU allows " +
                             std::to_string(device_limits().smem_per_block_optin));
  if (smem + attrs.sharedSizeBytes > 48 * 1024)
    KVB_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  return attrs;
}

// Host: whether the current device runs programmatic dependent launches (compute capability 9.0
// and later; read once).
inline bool device_has_programmatic_launch() { return device_limits().cc_major >= 9; }

// Host: launches kernel(args...) on grid x block with smem bytes of dynamic shared memory (raising
// the kernel's limit when its static and dynamic shared memory together pass the default 48 KiB).
// programmatic_dependent: the grid may start while the previous grid in the stream still runs; it
// must execute wait_prior_grid before reading what that grid writes. The launch is programmatic
// only where the device supports it and the kernel's code was compiled for sm_90 or later
// (arch.cuh: code for older architectures, JIT-compiled here from PTX, has no wait and must not
// overlap its predecessor).
template <class... KernelArgs, class... Args>
void launch_kernel(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                   bool programmatic_dependent, Args&&... args) {
  const cudaFuncAttributes attrs = allow_dynamic_smem(kernel, smem);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = programmatic_dependent && attrs.ptxVersion >= 90 && device_has_programmatic_launch() ? 1 : 0;
  KVB_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
  KVB_CUDA_CHECK_LAUNCH();
}

// Several layers' Params in one launch, one grid z index per layer: a model step's commits, which
// wait for the step's sampling, so a serving engine runs them after all the layers and pays a
// kernel's fixed cost once per step instead of once per layer. Kernels take the table as a
// __grid_constant__ parameter (read where it lies, in the constant bank, never copied per thread)
// of kLayerTableBytes: 12 KiB hold every catalog model's linear layers (48 GDN or 40 Mamba-2
// Params); kernel parameters above 4 KiB need CUDA 12.1 and sm_70. launch_layers launches once per
// kMaxLayers layers.
constexpr size_t kLayerTableBytes = 12288;
template <class Params>
struct LayerTable {
  static constexpr int kMaxLayers = int(kLayerTableBytes / sizeof(Params));
  static_assert(kMaxLayers >= 1, "Params larger than a layer table");
  Params layer[kMaxLayers];
};
// Host: kernel over grid_xy x (layers of one table) per table of `layers`, as launch_kernel.
template <class Params>
void launch_layers(void (*kernel)(LayerTable<Params>), const Params* layers, int count, dim3 grid_xy, dim3 block,
                   cudaStream_t stream, bool programmatic_dependent) {
  constexpr int kMax = LayerTable<Params>::kMaxLayers;
  for (int first = 0; first < count; first += kMax) {
    const int n = count - first < kMax ? count - first : kMax;
    LayerTable<Params> table;
    for (int l = 0; l < n; ++l) table.layer[l] = layers[first + l];
    launch_kernel(kernel, dim3(grid_xy.x, grid_xy.y, unsigned(n)), block, 0, stream, programmatic_dependent, table);
  }
}

// Host: the refusals (std::invalid_argument) of a commit over a layer table: no layers, a layer that
// validate(layer, who) refuses or without accept_len, or one whose shared launch shape (batch,
// tokens, capacity; alike(layer, first) says) differs from the first layer's.
template <class Params, class Validate, class Alike>
void validate_commit_layers(const Params* layers, int count, const char* who, Validate validate, Alike alike) {
  if (!layers || count < 1) throw std::invalid_argument(std::string(who) + ": no layers");
  for (int l = 0; l < count; ++l) {
    validate(layers[l], who);
    if (!layers[l].accept.accept_len) throw std::invalid_argument(std::string(who) + ": accept_len is null");
    if (!alike(layers[l], layers[0]))
      throw std::invalid_argument(std::string(who) + ": layer " + std::to_string(l) +
                                  " differs from the first in what one launch shares" +
                                  " (batch, tokens, capacity; GDN: entries)");
  }
}

// Host: blocks per request row and layer (grid y) of a commit over rows_layers rows x layers: the
// fewest that fill every SM's resident threads (2048 on the H200) with `threads`-thread blocks, at most max_slices (the commit
// kernels' registers hold 5 of their 256-thread blocks per SM, so that is about 1.6 waves, as
// measured in 03b8a77). Every block pays a chain of dependent loads (the row's slot and base, the
// accepted nodes, a block barrier) before its copies, so a step of many rows wants one block per
// row and layer (8 made 22 of those 2048-thread rounds at batch 128 over 23 layers: 72.7 us per
// step, 1.9 TB/s), a small step several, to keep loads in flight.
inline int commit_slices(long rows_layers, int threads, int max_slices) {
  return commit_slices_for(rows_layers, threads, max_slices, device_limits());
}

// Host: how many blocks of `threads` threads and smem bytes of dynamic shared memory fit on one
// multiprocessor (raising the kernel's limit as launch_kernel does). The dispatches ask on every
// launch, so the answer is kept per (device, kernel, threads, smem): an eager caller (Python, one
// launch per layer) pays the occupancy query once per shape, not per launch.
template <class... KernelArgs>
int resident_blocks(void (*kernel)(KernelArgs...), int threads, size_t smem) {
  int device = 0;
  KVB_CUDA_CHECK(cudaGetDevice(&device));
  const auto key = std::make_tuple(device, reinterpret_cast<const void*>(kernel), threads, smem);
  static std::mutex mutex;
  static std::map<decltype(key), int> known;
  {
    const std::lock_guard<std::mutex> lock(mutex);
    if (const auto it = known.find(key); it != known.end()) return it->second;
  }
  allow_dynamic_smem(kernel, smem);
  int blocks = 0;
  KVB_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, threads, smem));
  const std::lock_guard<std::mutex> lock(mutex);
  known.emplace(key, blocks);
  return blocks;
}

// Sum over the 32 lanes of a warp; every lane gets the total.
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int m = 16; m >= 1; m /= 2) x += __shfl_xor_sync(0xffffffffu, x, m);
  return x;
}

// A load that ptxas keeps where it is written (a relaxed gpu-scope load, served by L2): it sank a
// plain load of row metadata below the slot check that followed it, a second dependent round
// trip (kernels/gdn/notes/gdn_decode_kvbuffer.md v20).
__device__ __forceinline__ int load_unsunk(const int32_t* p) {
  int x;
  asm volatile("ld.relaxed.gpu.global.s32 %0, [%1];" : "=r"(x) : "l"(p));
  return x;
}

// Without scheduler row metadata, the KVBuffer decode kernels' fill advance: the last block of a
// request's grid to finish (counted in done_count) sets its fill (0 after a fold, else n + 1) and,
// after a fold, has_state, so no block sees another's update within a launch. Every thread of the
// block calls it.
__device__ __forceinline__ void advance_fill_last_block(int32_t* fill, int32_t* has_state, int32_t* done_count,
                                                        int slot, int n, bool fold) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    const int blocks_per_request = int(gridDim.x * gridDim.y);
    if (atomicAdd(&done_count[slot], 1) == blocks_per_request - 1) {
      fill[slot] = fold ? 0 : n + 1;
      if (fold) has_state[slot] = 1;
      done_count[slot] = 0;
    }
  }
}

// Entry and state element conversions (buffer entries are bf16 or fp32).
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class E>
__device__ __forceinline__ E from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
// Two bf16 packed in 32 bits (low element first) as fp32: a bf16 is the top half of its fp32, so
// the high element is one AND and the low one one shift (the intrinsic's conversion took a PRMT
// and a shift for the high element).
__device__ __forceinline__ float2 bf16x2_to_float2(uint32_t x) {
  return make_float2(__uint_as_float(x << 16), __uint_as_float(x & 0xffff0000u));
}

// 16-byte asynchronous global -> shared copy (cp.async, bypassing L1): a block issues all of its
// small reads at once instead of one dependent load per loop iteration; cp_async_wait_all() then a
// block barrier make the data visible to every thread.
__device__ __forceinline__ void cp_async16(void* smem_dst, const void* gsrc) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gsrc) : "memory");
}
// 4-byte copy (scalars such as G_j).
__device__ __forceinline__ void cp_async4(void* smem_dst, const void* gsrc) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(s), "l"(gsrc) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
// Groups: commit closes the copies issued so far into a group; wait_group<N> waits until at most N
// of the newest groups are still in flight.
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait_group() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

}  // namespace kvbuf
