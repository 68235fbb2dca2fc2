// Which GPUs a build's CUDA architectures run on (plain C++, tested without a GPU). The list is
// CMake's CUDA_ARCHITECTURES as the build resolved it ("80-real;90-real;120-virtual", "80-virtual"; commas separate too).
#pragma once
#include <string>

namespace kvbuf {

// Whether code built for `archs` runs on a device of compute capability major.minor: machine code
// for sm_XY runs on X.Z with Z >= Y (sm_XYa only on X.Y, sm_XYf on X.Z with Z >= Y); PTX for
// compute_XY on every device from X.Y on (the driver JIT-compiles it). An entry without -real or
// -virtual is both. Entries that name no number ("native", "all", "all-major") are answered by
// the device itself (kvbuf probes a kernel image): true. Throws std::invalid_argument for an entry
// it cannot read.
bool archs_run_on(const std::string& archs, int major, int minor);

}  // namespace kvbuf
