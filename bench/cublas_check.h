// The cuBLAS twin of KVB_CUDA_CHECK (kernels/common/cuda_check.h) and an owned handle, for the
// host code that calls cuBLAS (`kvbuf calibrate`, the step runner).
#pragma once
#include <cublas_v2.h>

#include <stdexcept>
#include <string>

#define KVB_CUBLAS_CHECK(call)                                                                    \
  do {                                                                                            \
    cublasStatus_t kvb_status_ = (call);                                                          \
    if (kvb_status_ != CUBLAS_STATUS_SUCCESS)                                                     \
      throw std::runtime_error(std::string("cuBLAS error ") + std::to_string(int(kvb_status_)) +  \
                               " in `" #call "` at " __FILE__ ":" + std::to_string(__LINE__));    \
  } while (0)

namespace kvbuf {
struct CublasHandle {
  cublasHandle_t h = nullptr;
  CublasHandle() { KVB_CUBLAS_CHECK(cublasCreate(&h)); }
  ~CublasHandle() { cublasDestroy(h); }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
};
}  // namespace kvbuf
