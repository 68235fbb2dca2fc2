// Which launch shape the KVBuffer and direct decode kernels of both families use, in a header
// without CUDA types so that the sweep's kernel table (bench/sweep/sweep_kernels.h) compiles in CPU-only
// builds too.
#pragma once

namespace kvbuf {

// The launch shape (kernels/gdn/gdn_decode_kvbuffer.cu and kernels/mamba2/mamba2_decode_kvbuffer.cu
// say when each wins; as written here for GDN, Mamba-2's dispatch has its own thresholds):
// Single = one kernel per step; Split = a buffer kernel per (row, key head) then a state-streaming
// kernel for the rows with a state or a fold (cached-u only, needs row_fill/row_has_state and
// `scratch`); Auto = the dispatch picks by measurement from batch and C, per entry point (direct:
// split from batch 8 and C 4; kvbuffer: split only at C 64), and runs Single where Split cannot;
// at C 1 with row_fill/row_has_state it runs the recurrent kernels (every step folds its token).
// The GDN KVBuffer verify takes it too: Split = a coefficient kernel per (row, key head) then the
// state kernel (needs its `coef` workspace); Auto runs Split from T = 5 where the grid is many waves
// (kernels/gdn/gdn_verify_kvbuffer.cu), Single elsewhere and wherever `coef` is null.
enum class DecodePath { Auto, Single, Split };

}  // namespace kvbuf
