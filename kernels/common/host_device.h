// KVB_HOST_DEVICE: a function of the plain-C++ launch-shape headers that the kernels call on the
// device too (__host__ __device__ under nvcc, nothing in a host compiler).
#pragma once

#ifdef __CUDACC__
#define KVB_HOST_DEVICE __host__ __device__
#else
#define KVB_HOST_DEVICE
#endif
