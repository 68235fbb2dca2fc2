// The one CUDA error macro family, for host code of every compiler (kernels, sweeps, tests).
#pragma once
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

// Raises std::runtime_error naming the call text, the CUDA error, file and line.
#define KVB_CUDA_CHECK(call)                                                                     \
  do {                                                                                           \
    cudaError_t kvb_err_ = (call);                                                               \
    if (kvb_err_ != cudaSuccess) {                                                               \
      throw std::runtime_error(std::string("CUDA error: ") + cudaGetErrorString(kvb_err_) +      \
                               " in `" #call "` at " __FILE__ ":" + std::to_string(__LINE__));   \
    }                                                                                            \
  } while (0)

// After every launch: catches launch-configuration errors (and, when synchronous, faults).
#define KVB_CUDA_CHECK_LAUNCH() KVB_CUDA_CHECK(cudaGetLastError())
