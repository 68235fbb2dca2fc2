// Tensor-core products for the verify kernels (include from .cu files only; the decode fold on the
// tensor cores was not kept: kernels/gdn/notes/gdn_decode_kvbuffer.md v22): TF32 with fp32 accuracy,
// and bf16 with fp32 accumulation for bf16 operands. One m16n8k8 TF32
// product accumulates into d (fragment layouts of the PTX ISA:
// a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4); b0 (t, g), b1 (t + 4, g);
// d0, d1 (g, 2t, 2t + 1), d2, d3 (g + 8, 2t, 2t + 1), g = lane / 4, t = lane % 4). An fp32 A value
// is split as a = hi + lo with hi = a truncated to TF32 (exact in TF32) and lo = a - hi (exact in
// fp32; the tensor core keeps its top 10 mantissa bits): two products give a to ~2^-21 relative,
// the accuracy of fp32 FMAs over the same sums. B must be exact in TF32 (bf16 values are).
#pragma once
#include <cstdint>

namespace kvbuf {

__device__ __forceinline__ void mma_tf32(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, float b0,
                                         float b1) {
  asm(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(__float_as_uint(b0)), "r"(__float_as_uint(b1)));
}
// a truncated to TF32 (exact in TF32): the hi part of the split below.
__device__ __forceinline__ float tf32_hi(float a) { return __uint_as_float(__float_as_uint(a) & 0xffffe000u); }
// The hi / lo split of four A values (hi[i] exact in TF32, lo[i] = a[i] - hi[i]).
struct Tf32Split {
  uint32_t hi[4], lo[4];
};
__device__ __forceinline__ Tf32Split tf32_split(float a0, float a1, float a2, float a3) {
  const float a[4] = {a0, a1, a2, a3};
  Tf32Split s;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    s.hi[i] = __float_as_uint(tf32_hi(a[i]));
    s.lo[i] = __float_as_uint(a[i] - __uint_as_float(s.hi[i]));
  }
  return s;
}
// d += A B with A given split (two products, the small one first).
__device__ __forceinline__ void mma_tf32x2(float (&d)[4], const Tf32Split& a, float b0, float b1) {
  mma_tf32(d, a.lo[0], a.lo[1], a.lo[2], a.lo[3], b0, b1);
  mma_tf32(d, a.hi[0], a.hi[1], a.hi[2], a.hi[3], b0, b1);
}
__device__ __forceinline__ void mma_tf32x2(float (&d)[4], float a0, float a1, float a2, float a3, float b0, float b1) {
  mma_tf32x2(d, tf32_split(a0, a1, a2, a3), b0, b1);
}
// d += A B with A exact in TF32 (bf16 values held as fp32) and B in fp32, split as above (two
// products, the small one first).
__device__ __forceinline__ void mma_tf32x2_b(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, float b0,
                                             float b1) {
  const float h0 = tf32_hi(b0), h1 = tf32_hi(b1);
  mma_tf32(d, a0, a1, a2, a3, b0 - h0, b1 - h1);
  mma_tf32(d, a0, a1, a2, a3, h0, h1);
}
// d += A B with A's 8 rows given in fp32 and split across the two row halves: rows g hold hi(a) and
// rows g + 8 lo(a) = a - hi(a) (a0 = A[g][t], a2 = A[g][t + 4]), so one product accumulates the hi
// sums in d0, d1 and the lo sums in d2, d3, whose sum has fp32 accuracy (as mma_tf32x2's two
// products); B exact in TF32.
__device__ __forceinline__ void mma_tf32_split_rows(float (&d)[4], float a0, float a2, float b0, float b1) {
  const float h0 = tf32_hi(a0), h2 = tf32_hi(a2);
  mma_tf32(d, __float_as_uint(h0), __float_as_uint(a0 - h0), __float_as_uint(h2), __float_as_uint(a2 - h2), b0, b1);
}
// A operand exact in TF32 (bf16 values held as fp32): one product; otherwise the hi + lo split.
template <bool EXACT>
__device__ __forceinline__ void mma_tf32_a(float (&d)[4], float a0, float a1, float a2, float a3, float b0, float b1) {
  if constexpr (EXACT)
    mma_tf32(d, __float_as_uint(a0), __float_as_uint(a1), __float_as_uint(a2), __float_as_uint(a3), b0, b1);
  else
    mma_tf32x2(d, a0, a1, a2, a3, b0, b1);
}

// d += A B in bf16, m16n8k16, fp32 accumulation (PTX ISA fragments, g = lane / 4, t = lane % 4:
// a0 (g, 2t..2t+1), a1 (g + 8, 2t..), a2 (g, 2t+8..2t+9), a3 (g + 8, 2t+8..); b0 (2t..2t+1, g),
// b1 (2t+8..2t+9, g); d as m16n8k8's). Each register holds two bf16, the lower index in the low half.
__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
  asm(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

}  // namespace kvbuf
