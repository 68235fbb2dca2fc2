// Owning device allocation of the GPU kernel checks (gdn_decode_checks.cu, gdn_verify_checks.cu):
// upload, download and NaN poisoning of the whole allocation.
#pragma once
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "kernels/common.cuh"

namespace kvbuf::checks {

class Dev {
 public:
  Dev() = default;
  explicit Dev(size_t bytes) : bytes_(bytes) { KVB_CUDA_CHECK(cudaMalloc(&ptr_, std::max<size_t>(bytes, 16))); }
  ~Dev() {
    if (ptr_) cudaFree(ptr_);
  }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  Dev(Dev&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; }
  Dev& operator=(Dev&&) = delete;
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }
  template <class T>
  void upload(const std::vector<T>& h) {
    if (h.size() * sizeof(T) > bytes_) throw std::logic_error("Dev::upload: more bytes than allocated");
    KVB_CUDA_CHECK(cudaMemcpy(ptr_, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  template <class T>
  std::vector<T> download() const {
    std::vector<T> h(bytes_ / sizeof(T));
    KVB_CUDA_CHECK(cudaMemcpy(h.data(), ptr_, h.size() * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  void poison() { KVB_CUDA_CHECK(cudaMemset(ptr_, 0xff, bytes_)); }  // NaN in bf16 and fp32

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace kvbuf::checks
