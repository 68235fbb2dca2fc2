# Sourced by scripts/test.sh and scripts/run.sh: the CUDA architectures to build when
# KVBUF_CUDA_ARCHITECTURES is not set. Where a GPU answers, that GPU alone (`native`). Without one (CI)
# one architecture whose build checks that every kernel compiles, its Hopper path as machine code and
# its Ampere path as PTX: on a 2-core machine the kernels and checks take CI_MINUTES at this setting
# against FULL_MINUTES for the default list (README.md, "Building"). scripts/gpu_bundle.sh builds the
# full default list.
if [ -z "${KVBUF_CUDA_ARCHITECTURES:-}" ]; then
  if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    export KVBUF_CUDA_ARCHITECTURES=native
  else
    export KVBUF_CUDA_ARCHITECTURES="80-virtual;90-real"
  fi
fi
