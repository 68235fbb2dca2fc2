// The Mamba-2 KVBuffer kernels' dynamic shared memory per launch shape (rows per block, C, T, d_state
// N, head_dim P, state type), as plain C++ (no CUDA headers): the kernels' host code sizes their
// launches with these and the CPU tests (sim/tests/test_launch_rules.cpp) check every catalog GPU's
// limits against them.
#pragma once
#include <cstddef>

#include "kernels/common/host_device.h"

namespace kvbuf::mamba2_detail {

constexpr int kWarpRows = 8;          // state rows per warp
constexpr int kMaxRowsPerBlock = 64;  // 8 warps
constexpr int kSplitHeads = 8;        // heads per split kernel-A block, one warp each
constexpr int kVerifyTMax = 8;        // verify window tokens (kMamba2VerifyMaxTokens, asserted equal)

// The KVBuffer decode block of `warps` warps of `warp_rows` rows (8, or for a 16-bit state 16 or
// 32, tile-less: sim/launch_rules.h, mamba2_kvbuffer16_warp_rows): the S0 rows [rows][N] of the
// state type first (the tiled kernel only), then the staged entries (entries = C - 1): keys
// [C-1][N] bf16, x [warps][C-1][warp_rows] bf16, fp32 [C-1] each of G_j, dt_j, w_j, a_j; the
// token's x [warps][warp_rows] bf16; one mbarrier per warp (tiled).
inline size_t kvbuffer_block_smem_bytes(int N, bool tile, int state_bytes, int entries, int warps, int warp_rows) {
  const size_t x_bytes = size_t(warps) * warp_rows * 2;
  return (tile ? size_t(warps) * (size_t(warp_rows) * N * state_bytes + 8) : 0) + x_bytes +
         size_t(entries) * (N * 2 + x_bytes + 16);
}

// The split path's kernel A: x_j [C-1][kSplitHeads * P] bf16, G_j and dt_j [C-1][kSplitHeads], c_j [C].
inline size_t split_buffer_smem_bytes(int entries, int P, int C) {
  return size_t(entries) * kSplitHeads * (size_t(P) * 2 + 8) + size_t(C) * 4;
}

// A warp's 8 S0 rows in shared memory (its tile), elements of the state type S: rows 0-3, then
// rows 4-7 tile_skew elements further, so that the two rows a quarter warp reads in s0_product
// (tile rows i and i + 4, fragment_row) do not share banks and every lane loads its columns in one
// order (the unskewed tile needed per-lane load orders: 2 x 32 register selects per head and S0
// product). fp32: 4 floats (16 bytes; a lane's two 16-byte loads of 4 columns interleave the two
// rows); a 16-bit S: 32 elements (64 bytes; a lane's one 16-byte load of 8 columns, the 4 lanes of
// a row cover 64 bytes).
KVB_HOST_DEVICE constexpr int tile_skew(int state_bytes) { return state_bytes == 4 ? 4 : 32; }
// A warp tile's bytes for the host layouts (VerifySmem, GroupSmem), and its elements in the kernels.
KVB_HOST_DEVICE constexpr int warp_tile_bytes(int n_dim, int state_bytes) {
  return (kWarpRows * n_dim + tile_skew(state_bytes)) * state_bytes;
}
// Strides of the other staged pieces, for the device code and the host layouts (VerifySmem,
// GroupSmem): bf16 rows of B and C padded to N + 32 elements (conflict-free fragment loads of the
// dots); a token's C pairs (layout_c_pairs) padded to N / 2 + 4 float2 (32 bytes); rows of
// coefficients or dots over C + kVerifyTMax entries rounded up to 32, + 4 floats.
KVB_HOST_DEVICE constexpr int bc_row_stride(int n_dim) { return n_dim + 32; }
KVB_HOST_DEVICE constexpr int c_pair_stride(int n_dim) { return n_dim / 2 + 4; }
KVB_HOST_DEVICE constexpr int entry_row_stride(int c) { return (c + kVerifyTMax + 31) / 32 * 32 + 4; }
KVB_HOST_DEVICE constexpr int up16(int bytes) { return (bytes + 15) / 16 * 16; }
// Dynamic shared memory of the one-head block, byte offsets, for d_state N, capacity C, `rows` rows
// per block and T tokens: the S0 tile [rows, N] fp32 first (128-byte aligned for the bulk copies), then
// 16-byte aligned pieces, then one mbarrier per warp (strides: bc_row_stride, c_pair_stride,
// entry_row_stride).
struct VerifySmem {
  int ws;       // coefficient row stride (floats)
  int tile;     // [warps] warp tiles (tile_skew) of the state type
  int b_rows;   // [C + T, BS] bf16
  int c_win;    // [T, BS] bf16
  int c_pairs;  // [T, cps] float2: C_t as B operands
  int x_buf;    // [warps, C] uint4: a warp's 8 rows
  int x_win;    // [T, rows] bf16
  int z_win;    // [T, rows] bf16 gate
  int g_buf;    // [C] G_j
  int dt_buf;   // [C] dt_j
  int fold_w;   // [C] fold weights
  int w;        // [8, WS] coefficients W[t][e]
  int bars;     // [warps] mbarriers
  int bytes;
  // Resolved on the host and passed with the launch: computed in the kernel from the runtime C, T
  // and rows, they took ~120 of the kernel's 2512 SASS instructions, run once by every warp.
  VerifySmem(int n_dim, int c, int rows, int t, int state_bytes) {
    const int bs = bc_row_stride(n_dim), cps = c_pair_stride(n_dim);
    ws = entry_row_stride(c);
    tile = 0;
    b_rows = tile + rows / kWarpRows * warp_tile_bytes(n_dim, state_bytes);
    c_win = b_rows + (c + t) * bs * 2;
    c_pairs = c_win + t * bs * 2;
    x_buf = c_pairs + t * cps * 8;
    x_win = x_buf + c * rows * 2;
    z_win = x_win + t * rows * 2;
    g_buf = z_win + up16(t * rows * 2);
    dt_buf = g_buf + up16(c * 4);
    fold_w = dt_buf + up16(c * 4);
    w = fold_w + up16(c * 4);
    bars = w + kVerifyTMax * ws * 4;
    bytes = bars + rows / kWarpRows * 8;
  }
};

}  // namespace kvbuf::mamba2_detail
