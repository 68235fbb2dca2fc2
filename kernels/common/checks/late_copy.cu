// launch_late_copies and StepInputs (late_copy.h): one block per copy; every block lets the
// dependent grid launch first, then spins on the global timer, then copies 4-byte words.
#include "kernels/common/checks/late_copy.h"

#include <stdexcept>
#include <string>

#include "kernels/common/common.cuh"

namespace kvbuf::checks {
namespace {

struct LateCopies {
  LateCopy copy[kMaxLateCopies];
  unsigned long long spin_ns;
};

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void late_copies_kernel(const LateCopies c) {
  allow_dependent_grids();
  const unsigned long long start = global_ns();
  while (global_ns() - start < c.spin_ns) {
  }
  const LateCopy& x = c.copy[blockIdx.x];
  const size_t words = x.bytes / 4;
  for (size_t i = threadIdx.x; i < words; i += blockDim.x)
    static_cast<uint32_t*>(x.dst)[i] = static_cast<const uint32_t*>(x.src)[i];
}

}  // namespace

void launch_late_copies(const std::vector<LateCopy>& copies, double spin_us, cudaStream_t stream) {
  if (copies.empty() || copies.size() > size_t(kMaxLateCopies))
    throw std::invalid_argument("launch_late_copies: 1.." + std::to_string(kMaxLateCopies) + " copies");
  LateCopies c{};
  for (size_t i = 0; i < copies.size(); ++i) {
    if (copies[i].bytes % 4 != 0) throw std::invalid_argument("launch_late_copies: sizes must be multiples of 4");
    c.copy[i] = copies[i];
  }
  c.spin_ns = static_cast<unsigned long long>(spin_us * 1e3);
  launch_kernel(late_copies_kernel, dim3(unsigned(copies.size())), dim3(256), 0, stream, false, c);
}

StepInputs::StepInputs(bool late, double spin_us) : late_(late), spin_us_(spin_us) {
  if (late_) KVB_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}
StepInputs::~StepInputs() {
  if (stream_) cudaStreamDestroy(stream_);
}

DeviceBuffer& StepInputs::stage(size_t bytes) {
  if (used_ == stages_.size()) stages_.emplace_back(bytes);
  DeviceBuffer& s = stages_[used_++];
  if (s.bytes() < bytes) s = DeviceBuffer(bytes);
  return s;
}

void StepInputs::defer(DeviceBuffer& dst) {
  if (!late_) return;
  DeviceBuffer& s = stage(dst.bytes());
  KVB_CUDA_CHECK(cudaMemcpy(s.as<void>(), dst.as<void>(), dst.bytes(), cudaMemcpyDeviceToDevice));
  dst.poison();
  copies_.push_back({dst.as<void>(), s.as<void>(), dst.bytes()});
}

void StepInputs::launch() {
  if (!late_) return;
  KVB_CUDA_CHECK(cudaDeviceSynchronize());  // the uploads and poisoning on the legacy stream
  launch_late_copies(copies_, spin_us_, stream_);
  copies_.clear(), used_ = 0;
}

}  // namespace kvbuf::checks
