// The limits of a device that launch shapes depend on, and the launch-shape rules as pure host
// functions of them (header-only: the kernels, built without sim/ for the Python module, and the CPU
// tests both call them). On a GPU the kernels fill DeviceLimits from cudaGetDeviceProperties
// (kernels/common/common.cuh: device_limits); the GPU catalog (sim/gpus.h) carries the datasheet
// values of each GPU, so the CPU tests evaluate the rules for every catalog GPU. The rules' constants
// (blocks per SM, rows per block) were measured on the H200 and are stated per SM, so the H200's
// shapes are what they were when measured; other GPUs get the same occupancy targets.
#pragma once
#include <algorithm>
#include <cstddef>

namespace kvbuf {

struct DeviceLimits {
  int cc_major = 0, cc_minor = 0;      // compute capability
  int sms = 0;                         // multiprocessors
  int max_threads_per_sm = 0;          // resident threads per multiprocessor
  int max_blocks_per_sm = 0;           // resident blocks per multiprocessor
  size_t smem_per_block_optin = 0;     // bytes of shared memory one block may opt in to
  size_t smem_per_sm = 0;              // bytes of shared memory per multiprocessor
  size_t l2_bytes = 0;                 // L2 cache
};

// Rows of a (heads x head_rows) state per block: `rows` (the family's widest shape) halved, down to
// min_rows, while the grid of heads * (head_rows / rows) blocks would have fewer than
// min_blocks_per_sm blocks per multiprocessor, so that small batches spread their state over every SM.
inline int halve_rows_to_fill(long heads, int head_rows, int rows, int min_rows, int min_blocks_per_sm,
                              const DeviceLimits& d) {
  while (rows > min_rows && heads * (head_rows / rows) < long(min_blocks_per_sm) * d.sms) rows /= 2;
  return rows;
}

// Rows per block that fit the block's shared memory: `rows` (the occupancy rule's choice) halved,
// down to min_rows, while bytes_of(rows) (the kernel's dynamic shared memory at that many rows)
// passes what the device allows a block. Where even min_rows does not fit, `rows` is returned
// unchanged and the launch refuses it with the bytes it needs (kernels/common/common.cuh:
// allow_dynamic_smem). The H200's 227 KiB holds every widest shape, so its choices never change;
// GPUs with 99 KiB (sm_86, sm_89, sm_120) or 163 KiB (A100) take the largest that fits.
template <class BytesOf>
int rows_within_smem(int rows, int min_rows, BytesOf bytes_of, const DeviceLimits& d) {
  for (int r = rows; r >= min_rows; r /= 2)
    if (size_t(bytes_of(r)) <= d.smem_per_block_optin) return r;
  return rows;
}

// Mamba-2 classic verify: rows per warp, the fewest of 2, 4 and 8 whose grid of one-warp blocks fits
// one wave (the SM's resident-block limit: 32 on the H200); else 4 (in two-warp blocks).
inline int classic_verify_rows_per_warp(long rows, const DeviceLimits& d) {
  const long wave = long(d.max_blocks_per_sm) * d.sms;
  for (int r : {2, 4, 8})
    if (rows / r <= wave) return r;
  return 4;
}

// Mamba-2 KVBuffer decode with a 16-bit state: state rows per warp, the most of 32, 16 and 8
// dividing rows_per_block whose grid of warps (total_rows / R, total_rows = batch x heads x P)
// still has min warps per multiprocessor: 16 from 24, 32 from 96 (H200, measured:
// kernels/mamba2/notes/mamba2_decode.md, "16 rows per warp"; a warp's fixed work per step spreads
// over more rows, while fewer warps hide less latency at small batches).
inline int mamba2_kvbuffer16_warp_rows(long total_rows, int rows_per_block, const DeviceLimits& d) {
  if (rows_per_block % 32 == 0 && total_rows / 32 >= 96L * d.sms) return 32;
  if (rows_per_block % 16 == 0 && total_rows / 16 >= 24L * d.sms) return 16;
  return 8;
}

// Blocks per request row and layer of a commit over rows_layers rows x layers: the fewest that fill
// every SM's resident threads with `threads`-thread blocks, at most max_slices.
inline int commit_slices_for(long rows_layers, int threads, int max_slices, const DeviceLimits& d) {
  const long wave = long(d.sms) * (d.max_threads_per_sm / threads);
  const long slices = (wave + rows_layers - 1) / rows_layers;
  return int(slices < 1 ? 1 : slices > max_slices ? max_slices : slices);
}

}  // namespace kvbuf
