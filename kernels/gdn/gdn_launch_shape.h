// The GDN kernels' launch-shape rules (rows per block) and the dynamic shared memory each shape
// (rows per block, C, T, head dims) needs, as plain C++ (no CUDA headers): the kernels' host code
// picks and sizes their launches with these, the kernels carve their shared memory by them, and the
// CPU tests (sim/tests/test_launch_rules.cpp) check every catalog GPU's limits against them.
#pragma once
#include <cstddef>

#include "kernels/common/host_device.h"

namespace kvbuf {

namespace gdn_detail {

constexpr int kGroupLanes = 8;
constexpr int kThreads = 128;                    // per block
constexpr int kGroups = kThreads / kGroupLanes;  // row groups per block
constexpr int kMaxChunks = 8;                    // rows_per_block <= 128
constexpr int kUtilePad = 8;  // u tile row stride rows + 8: 16-byte rows, a group's 8 j's on distinct banks

// V rows per block of a launch shape: io.rows_per_block when set, else up to max_rows, halved (down
// to 16) while the grid would have fewer than min_blocks_per_sm blocks per SM, so that small
// batches spread their state over every SM.
struct RowsRule {
  int max_rows, min_blocks_per_sm;
};
// The rules, measured on the H200 (notes/gdn_decode_kvbuffer.md v10, v12):
//  * recurrent: 16 KiB tiles (32 rows) beat 32 KiB ones (in place at batch 64: 70.8 against
//    71.1 us, out of place at 256: 266.3 against 268.4), and batch 8 runs 6% faster at 4 blocks
//    per SM (32 rows) than at 8 (16 rows);
//  * single KVBuffer kernel: 32 KiB tiles, as its blocks repeat the buffered-key work per tile
//    (256, C = 8: 165-175 against 201 us with 32 rows); batch 8 at 4 blocks per SM (10.85
//    against 11.65 us);
//  * split kernel B: most of its blocks exit at once in direct mode and only the 1 / C that fold
//    work; 32-row tiles split the long folds of C >= 32 over more blocks (direct, C = 64 at batch
//    64: 34.0 against 39.4 us), but for C < 32 they only add empty blocks (direct, C = 8 at 256:
//    70.5 against 58.8 us); small batches keep 8 blocks per SM (direct at batch 8, C = 8: 7.8 us
//    with 16 rows, 11.1 with 32). These rules predate gdn_decode_direct's compacted kernel B
//    (from C = 16: notes/gdn_decode_kvbuffer.md v21), which no longer launches the empty blocks.
constexpr RowsRule kRecurrentRows{32, 4};
constexpr RowsRule kSingleKVBufferRows{64, 4};  // 16-bit states: up to twice the rows (gdn_decode_device.h)
inline RowsRule split_state_rows(int capacity) { return {capacity >= 32 ? 32 : 64, 8}; }

// Buffered entries a step reads, at most: fill < C between steps (gdn_decode.h), so C - 1; the
// entry a step appends goes to global memory only. The warpgroup variant sizes its staging of keys
// and u rows by it (at C = 8 that keeps the bf16 whole-head tile at 6 blocks per SM: log v33); the
// FMA kernels stage C rows (their register allocation changed with the smaller offsets: spills).
KVB_HOST_DEVICE constexpr int staged_entries(int capacity, bool wg) { return wg ? capacity - 1 : capacity; }

// The single KVBuffer kernel's dynamic shared memory: the tile and buffer staging, then (16-byte
// aligned, at rows_offset) the per-row arrays: barriers, v, outputs, appended entries.
struct SingleSmemLayout {
  size_t rows_offset, bytes;
};
inline SingleSmemLayout kvbuffer_smem_layout(int K, int C, int rows, size_t state_bytes, size_t entry_bytes,
                                             bool raw, bool wg = false) {
  const size_t c = size_t(C), k = size_t(K), staged = size_t(staged_entries(C, wg));
  size_t bytes = size_t(rows) * k * state_bytes + staged * k * entry_bytes + 4 * c * 4;
  if (raw)
    bytes += (c * c + 2 * c + size_t(kGroups) * c) * 4;
  else
    bytes += staged * size_t(rows + kUtilePad) * entry_bytes;
  const size_t rows_offset = (bytes + 15) / 16 * 16;
  return {rows_offset, rows_offset + kMaxChunks * sizeof(unsigned long long) + size_t(rows) * (2 + 2 + entry_bytes)};
}

// The single kernel's warpgroup-product variant (bf16 state, 64 or 128 rows; log v33): the barriers
// and v at rows_offset (no output or entry arrays: its rows are stored from registers), then B of
// the row products, 32 bytes per core matrix of 8 k-positions (columns 0 and 1; what follows a core
// matrix is read as its columns 2-7, whose products are never used), 64 bytes per k-step of 16, and
// each k-step's operand is 256 bytes from its start (the last one's too: compute-sanitizer checks
// that extent); later u_t of the folding rows (fp32 [rows]) in the same bytes.
KVB_HOST_DEVICE inline size_t wg_b_offset(size_t rows_offset, int rows) {
  return (rows_offset + kMaxChunks * 8 + size_t(rows) * 2 + 15) / 16 * 16;
}
inline size_t wg_b_bytes(int K, int rows) {
  const size_t b = size_t(K / 16 - 1) * 64 + 256;
  return b > size_t(rows) * 4 ? b : size_t(rows) * 4;
}

// The split path's kernel B (state): the tile, the buffer keys and the u tile.
inline size_t split_state_smem_bytes(int K, int C, int rows, size_t state_bytes, size_t entry_bytes) {
  return size_t(rows) * K * state_bytes + size_t(C) * K * entry_bytes + size_t(C) * size_t(rows + kUtilePad) * entry_bytes;
}

// An upper bound of kernel B's static shared memory (its barriers and per-row values, and the
// compact variant's row lists), which shares the block's limit with the dynamic part.
constexpr size_t kSplitStateStaticSmemBound = 4096;

// The split path's kernel A (buffer), per key head: R = HV / H value heads' buffered values and
// coefficients.
inline size_t split_buffer_smem_bytes(int R, int C, int V, size_t entry_bytes) {
  const size_t c = size_t(C);
  return size_t(R) * c * V * entry_bytes + (2 * c + 2 * size_t(R) * c + 2 * size_t(R)) * sizeof(float);
}

// The recurrent kernel's tile (the one-warp shape keeps it in registers).
inline size_t recurrent_smem_bytes(int K, int rows, size_t state_bytes) { return size_t(rows) * K * state_bytes; }

}  // namespace gdn_detail

namespace gdn_verify_detail {

constexpr int kRows = 64;  // V rows per block of the KVBuffer verify and of the commit's fold

// Launch shape of the KVBuffer verify kernel (log v5): 4 lanes per state row, 2 rows per thread.
constexpr int kLanesPerRow = 4, kRowsPerThread = 2;
constexpr int kVerifyThreads = kRows * kLanesPerRow / kRowsPerThread, kVerifyWarps = kVerifyThreads / 32;

// Tensor-core operand B [operand_cols(TMAX), operand_pitch(KD)] fp32: the window's raw keys
// (columns 0..T-1) and queries (TMAX..TMAX+T-1), zeros elsewhere, in 8-column tiles; rows of
// kd + 16 floats, so that the quarter-warp phases of its 16-byte fragment loads (2 columns x 4
// lanes) hit distinct banks.
KVB_HOST_DEVICE constexpr int operand_cols(int tmax) { return 8 * ((2 * tmax + 7) / 8); }
KVB_HOST_DEVICE constexpr int operand_pitch(int kd) { return kd + 16; }

// The window's substitution coefficients, row t = column t, in rows of coef_pitch(TMAX) floats (16-byte
// vectors): static shared arrays of the kernel, sized by TMAX alone.
KVB_HOST_DEVICE constexpr int coef_pitch(int tmax) { return (tmax + 3) / 4 * 4; }
// An upper bound of the kernel's static shared memory, which shares the block's limit with
// VerifySmem: the coefficients of u and o [TMAX, coef_pitch], the merge's column factors
// [operand_cols], the parents and the ancestor masks [TMAX] (4 bytes each), every array rounded up
// to 16 bytes.
KVB_HOST_DEVICE constexpr int verify_static_smem_bytes(int tmax) {
  return 2 * (tmax * coef_pitch(tmax) * 4) + operand_cols(tmax) * 4 + 2 * ((tmax * 4 + 15) / 16 * 16);
}

// The window tokens the KVBuffer verify kernel is compiled for at T tokens.
inline int verify_tmax(int T) { return T <= 2 ? 2 : T <= 4 ? 4 : T <= 6 ? T : 8; }

// The KVBuffer verify kernel's shared-memory carve-up in bytes (16-byte aligned where the kernel
// copies or loads 16 bytes) for TMAX window tokens, capacity C and entry size esz. The regions
// whose size (K, TMAX) fix come first, those sized by the run-time C after them, so that in the
// kernel the fixed regions' addresses are compile-time constants and the others linear in C.
// Buffer keys land (cp.async) in padded rows of the entry type (key_pitch) that the key dot
// products and the fold read directly; the fold weights have a region of their own, as the fold
// reads the keys while they are written. (The window's substitution coefficients and the merge's
// column factors are static shared arrays of the kernel: verify_static_smem_bytes.)
struct VerifySmem {
  int kd, tmax, c, esz;
  KVB_HOST_DEVICE static int up16(int x) { return (x + 15) / 16 * 16; }
  // A landed key row's pitch in entries: 16 bytes (fp32) or 32 (bf16) of padding put the 8 rows of
  // a tensor-core fragment load on distinct bank groups.
  KVB_HOST_DEVICE static constexpr int key_pitch(int kd, int esz) { return kd + (esz == 2 ? 16 : 4); }
  KVB_HOST_DEVICE int nb() const { return operand_cols(tmax); }
  KVB_HOST_DEVICE int bp() const { return operand_pitch(kd); }
  // Key dot products, split over K by warp: [warps, key rows (C + TMAX, in 16-row tiles), nb] fp32.
  KVB_HOST_DEVICE int key_rows_pad() const { return (c + tmax + 15) / 16 * 16; }
  // Fixed by (K, TMAX), from 0.
  KVB_HOST_DEVICE int raw_kq() const { return 0; }                                  // [2 TMAX, KD] bf16
  KVB_HOST_DEVICE int raw_v() const { return raw_kq() + 2 * tmax * kd * 2; }       // [TMAX, kRows] bf16
  KVB_HOST_DEVICE int b() const { return up16(raw_v() + tmax * kRows * 2); }       // operand B [nb, bp] fp32
  KVB_HOST_DEVICE int scale() const { return b() + nb() * bp() * 4; }              // [2 T] norm scales
  KVB_HOST_DEVICE int gwin() const { return scale() + 2 * tmax * 4; }             // G of the window [TMAX]
  KVB_HOST_DEVICE int graw() const { return gwin() + tmax * 4; }                   // g of the window [TMAX]
  KVB_HOST_DEVICE int beta() const { return graw() + tmax * 4; }
  KVB_HOST_DEVICE int fixed_end() const { return up16(beta() + tmax * 4); }
  // Sized by C, after the fixed ones.
  KVB_HOST_DEVICE int w() const { return fixed_end(); }                            // fold weights [C, kRows] fp32
  KVB_HOST_DEVICE int keys() const { return w() + c * kRows * 4; }                 // [C, key_pitch] E
  KVB_HOST_DEVICE int u() const { return keys() + c * key_pitch(kd, esz) * esz; }  // [C, kRows] E
  KVB_HOST_DEVICE int part() const { return u() + up16(c * kRows * esz); }         // partial sums
  KVB_HOST_DEVICE int wu() const { return up16(part() + kVerifyWarps * key_rows_pad() * nb() * 4); }  // buffer coefficients [C, TMAX]
  KVB_HOST_DEVICE int wo() const { return wu() + c * tmax * 4; }
  KVB_HOST_DEVICE int gbuf() const { return wo() + c * tmax * 4; }                 // G of the buffer [C]
  KVB_HOST_DEVICE size_t bytes() const { return size_t(up16(gbuf() + c * 4)); }
};

// The KVBuffer commit's fold kernel (C == T): the buffer's keys, its w rows and G.
inline size_t commit_fold_smem_bytes(int K, int C) { return size_t(C) * (K + 4 + kRows + 1) * sizeof(float); }

// The split path (DecodePath::Split, large grids): a coefficient kernel per (request row, key head)
// computes what the state kernel's blocks of that key head would each compute again (the tree, G,
// the norms, the key dot products and the coefficients made of them) into one record per (row,
// value head) of the `coef` workspace, in floats: a header (n_eff and the fold flag as int bits,
// e^{G_n} of a fold, a pad), the merge's column factors [operand_cols], the window coefficients
// cu, co [TMAX, coef_pitch] (the state kernel's s_cu, s_co, s_colf), then, sized by C, the fold's
// decays e^{G_n - G_j} [C] and the buffer coefficients wu, wo [C, TMAX]. The fixed part first, so
// that its offsets are compile-time constants; 16-byte records (the state kernel copies its record
// whole into its shared memory, where the key dot products' partial sums would be,
// VerifySmem::part(), always the larger: 16 NB (C + TMAX) bytes or more against 4 (20 + 2 TMAX CP +
// (2 TMAX + 1) C)).
struct VerifyCoefRecord {
  int tmax, c;
  static constexpr int kHeader = 4;
  KVB_HOST_DEVICE constexpr int colf() const { return kHeader; }
  KVB_HOST_DEVICE constexpr int cu() const { return colf() + operand_cols(tmax); }
  KVB_HOST_DEVICE constexpr int co() const { return cu() + tmax * coef_pitch(tmax); }
  KVB_HOST_DEVICE constexpr int fdecay() const { return co() + tmax * coef_pitch(tmax); }
  KVB_HOST_DEVICE constexpr int wu() const { return fdecay() + c; }
  KVB_HOST_DEVICE constexpr int wo() const { return wu() + c * tmax; }
  KVB_HOST_DEVICE constexpr int floats() const { return (wo() + c * tmax + 3) / 4 * 4; }
};
// The split path's workspace: one record of verify_coef_floats per (request row, value head).
inline int verify_coef_floats(int tokens, int capacity) { return VerifyCoefRecord{verify_tmax(tokens), capacity}.floats(); }
inline size_t verify_coef_bytes(int batch, int value_heads, int tokens, int capacity) {
  return size_t(batch) * size_t(value_heads) * size_t(verify_coef_floats(tokens, capacity)) * 4;
}
// The coefficient kernel's window rows (raw keys and queries, bf16), padded as the buffer keys'
// (VerifySmem::key_pitch) so that a fragment load's 8 rows fall on distinct bank groups.
KVB_HOST_DEVICE constexpr int coef_window_pitch(int kd) { return kd + 16; }
// The coefficient kernel's shared memory for R = HV / H value heads per key head: the window's raw
// keys and queries [2 TMAX, coef_window_pitch] bf16, the n <= C buffer keys [C, key_pitch] entries,
// the dot products [C + TMAX, 2 TMAX] fp32, the norm scales [2 TMAX], the window gates [R, TMAX]
// and the buffer's G [R, C] fp32, the parents [TMAX] int32.
inline size_t verify_coef_smem_bytes(int K, int tmax, int C, int esz, int R) {
  return size_t(2 * tmax) * coef_window_pitch(K) * 2 + size_t(C) * VerifySmem::key_pitch(K, esz) * esz +
         (size_t(C + tmax) * 2 * tmax + 2 * tmax + size_t(R) * (tmax + C) + tmax) * 4;
}

}  // namespace gdn_verify_detail

}  // namespace kvbuf
