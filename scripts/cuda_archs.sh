# Sourced by scripts/test.sh and scripts/run.sh: the CUDA architectures to build when
# KVBUF_CUDA_ARCHITECTURES is not set. Where a GPU answers, that GPU alone (`native`). Without one (CI)
# sm_90 alone: every kernel compiles through nvcc and ptxas at the cost of one architecture, as CI
# did before; the default list runs both once per architecture, 3-6x that (README.md, "GPUs").
# The Ampere branches of kernels/common/arch.cuh compile in the bundle's compute_80 build
# (scripts/gpu_bundle.sh, KVBUF_BUNDLE_PTX80=1), which also builds the full default list.
if [ -z "${KVBUF_CUDA_ARCHITECTURES:-}" ]; then
  if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    export KVBUF_CUDA_ARCHITECTURES=native
  else
    export KVBUF_CUDA_ARCHITECTURES=90-real
  fi
fi
