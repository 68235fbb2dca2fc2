// Device memory layouts shared by every GDN kernel family (decode, direct, verify), so that a
// verify commit appends to the same buffer the decode kernel reads. Plain C++, no CUDA types.
//
// Serving layout, one layer:
//   state pool   S      [slots, HV, V, K] fp32, K contiguous (row v of head h is S[v, :])
//   q, k                [B, H, K]  bf16 (un-normalised; L2-norm happens in kernel)
//   v                   [B, HV, V] bf16
//   g, beta             [B, HV]    fp32 (or computed in kernel from a, b [B, HV] bf16, A_log,
//                                        dt_bias [HV] fp32: g = -exp(A_log) softplus(a + dt_bias),
//                                        beta = sigmoid(b))
//   out                 [B, HV, V] bf16
//   slot                [B] int32: request row -> pool slot; negative = padding row
//                       (output zeros, touch nothing)
// KVBuffer pool, one layer, capacity C, entry type E (bf16 or fp32), indexed by slot:
//   buf_k        [slots, C, H, K]  E   normalised keys (k / sqrt(|k|^2+1e-6))
//   buf_val      [slots, C, HV, V] E   cached-u variant: corrected values u_j;
//                                      raw variant: the layer's raw values v_j
//   buf_gcum     [slots, C, HV]    fp32 cumulative log decay G_j since the checkpoint S0
//   buf_beta     [slots, C, HV]    fp32 raw variant only: beta_j
//   fill         [slots] int32     entries held (0..C-1 between steps)
//   has_state    [slots] int32     0 = direct mode (S0 = 0, no state read or written); set to 1
//                                  by the fold that creates the state
//   done_count   [slots] int32     decode-kernel scratch: blocks of the request finished in this
//                                  launch; the last one advances fill/has_state and re-zeroes it
#pragma once
#include <cstddef>

namespace kvbuf {

struct GdnPoolDims {
  int slots = 0;
  int H = 16, HV = 32, K = 128, V = 128;
  int capacity = 16;  // C
  size_t state_elems() const { return size_t(slots) * HV * V * K; }
  size_t buf_k_elems() const { return size_t(slots) * capacity * H * K; }
  size_t buf_val_elems() const { return size_t(slots) * capacity * HV * V; }
  size_t buf_scalar_elems() const { return size_t(slots) * capacity * HV; }
};

}  // namespace kvbuf
