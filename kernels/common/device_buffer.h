// The one owning device allocation (cudaMalloc / cudaFree), for the GPU sweeps, the capacity
// measurement and the kernel checks: movable, not copyable; upload, download and NaN poisoning of
// the whole allocation.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <vector>

#include "kernels/common/cuda_check.h"

namespace kvbuf {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    if (bytes) KVB_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
  }
  ~DeviceBuffer() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr, o.bytes_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      if (ptr_) cudaFree(ptr_);
      ptr_ = o.ptr_, bytes_ = o.bytes_;
      o.ptr_ = nullptr, o.bytes_ = 0;
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

  template <class T>
  void upload(const std::vector<T>& h) {
    if (h.size() * sizeof(T) > bytes_) throw std::logic_error("DeviceBuffer::upload: more bytes than allocated");
    if (!h.empty()) KVB_CUDA_CHECK(cudaMemcpy(ptr_, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  template <class T>
  std::vector<T> download() const {
    std::vector<T> h(bytes_ / sizeof(T));
    if (!h.empty()) KVB_CUDA_CHECK(cudaMemcpy(h.data(), ptr_, h.size() * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  // All bits set: NaN in bf16 and fp32, -1 in int32.
  void poison() {
    if (bytes_) KVB_CUDA_CHECK(cudaMemset(ptr_, 0xff, bytes_));
  }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace kvbuf
