// Test support for the programmatic dependent launches of the decode kernels (gdn_decode.h,
// pools_ready_at_launch): a kernel that lets the next kernel in the stream launch at once, then
// waits spin_us microseconds and only then copies its sources to their destinations. A kernel
// launched right after it as a programmatic dependent runs everything before its
// griddepcontrol.wait while the destinations still hold their old contents (poison, in the
// checks), so a read it makes too early shows in its results.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "kernels/common/device_buffer.h"

namespace kvbuf::checks {

struct LateCopy {
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;  // a multiple of 4
};

// At most kMaxLateCopies copies; throws std::invalid_argument beyond, or for a size not a multiple of 4.
constexpr int kMaxLateCopies = 16;
void launch_late_copies(const std::vector<LateCopy>& copies, double spin_us, cudaStream_t stream);

// A check's step inputs, written in place on time, or (late) by launch_late_copies: upload stages
// the values and poisons the destination, defer does the same with the destination's current
// contents (a pool the kernel must not read before its wait, for a control that has to fail).
// launch() then runs the late copies on stream(), a stream of its own (the legacy default stream
// is not where programmatic launches are meant to run), after everything before it has finished;
// the kernel under test goes on stream() next. The staging buffers are reused step after step, in
// the order of the calls.
class StepInputs {
 public:
  explicit StepInputs(bool late, double spin_us = 30.0);
  ~StepInputs();
  StepInputs(const StepInputs&) = delete;
  StepInputs& operator=(const StepInputs&) = delete;

  template <class T>
  void upload(DeviceBuffer& dst, const std::vector<T>& h) {
    if (!late_) return dst.upload(h);
    DeviceBuffer& s = stage(dst.bytes());
    s.upload(h);
    dst.poison();
    copies_.push_back({dst.as<void>(), s.as<void>(), h.size() * sizeof(T)});
  }
  void defer(DeviceBuffer& dst);
  void launch();
  cudaStream_t stream() const { return stream_; }

 private:
  DeviceBuffer& stage(size_t bytes);
  bool late_;
  double spin_us_;
  cudaStream_t stream_ = nullptr;
  std::vector<DeviceBuffer> stages_;
  size_t used_ = 0;
  std::vector<LateCopy> copies_;
};

}  // namespace kvbuf::checks
