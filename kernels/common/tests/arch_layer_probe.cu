// Compiled to PTX only by arch_layer_ptx.sh: every call of the architecture layer once, made as the
// kernels make them, so the test can see which instructions each architecture's code gets.
#include "kernels/common/arch.cuh"

__global__ void arch_layer_probe(const float4* src, float* out) {
  __shared__ alignas(16) float4 tile[64];
  __shared__ uint64_t bar;
  kvbuf::wait_prior_grid();
  if (kvbuf::copy_issuer(threadIdx.x)) {
    kvbuf::tile_init(1, &bar);
    kvbuf::fence_before_copy_overwrite();
    kvbuf::expect_copy_bytes(&bar, sizeof(tile));
    kvbuf::bulk_copy(tile, src, sizeof(tile), &bar);
    kvbuf::copies_issued(&bar);
  }
  __syncthreads();
  kvbuf::tile_wait(&bar);
  out[threadIdx.x] = tile[threadIdx.x % 64].x;
  kvbuf::allow_dependent_grids();
}
