#!/usr/bin/env bash
# GPU test (label gpu): every kernel check with the binaries of a build for compute_80 PTX alone
# (KVBUF_CUDA_ARCHITECTURES=80-virtual), which the driver JIT-compiles for this GPU, so that the
# kernels run their Ampere path (kernels/common/arch.cuh) here: `kvbuf check` and the four kernel test
# binaries (every case of both families, decode and verify). Exit 77 (skipped) without that build.
#   bench/tests/ptx80_checks.sh DIR      (a build folder, or a bundle's bin-ptx80/)
set -uo pipefail
dir=${1:?usage: ptx80_checks.sh DIR}
find_exe() { find "$dir" -type f -perm -u+x -name "$1" ! -path "*/CMakeFiles/*" 2>/dev/null | head -1; }
kvbuf=$(find_exe kvbuf)
if [ -z "$kvbuf" ]; then
  echo "skipped: no compute_80 PTX build in $dir (scripts/gpu_bundle.sh with KVBUF_BUNDLE_PTX80=1 builds one)"
  exit 77
fi
# The JIT compiles each kernel at its first launch (minutes for all of them); the cache keeps the
# result for the other binaries, which hold the same kernels, and for the next run.
export CUDA_CACHE_PATH=${CUDA_CACHE_PATH:-${TMPDIR:-/tmp}/kvbuf-ptx80-jit-cache}
export CUDA_CACHE_MAXSIZE=${CUDA_CACHE_MAXSIZE:-4294967296}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
failed=0
"$kvbuf" check >"$log" 2>&1 || failed=1
grep -E "^kvbuf: GPU|^GPU .* checks:|^FAIL" "$log"
if ! grep -q "built for CUDA architectures 80-virtual$" "$log"; then
  echo "FAIL: $kvbuf is not a compute_80 PTX-only build"
  exit 1
fi
for t in test_gdn_decode test_gdn_verify test_mamba2_decode test_mamba2_verify; do
  exe=$(find_exe "$t")
  if [ -z "$exe" ]; then
    echo "FAIL: $t missing in $dir"
    failed=1
    continue
  fi
  "$exe" --gtest_brief=1 >"$log" 2>&1 || failed=1
  echo "$t: $(grep -E "^\[  (PASSED|FAILED)  \]" "$log" | tr '\n' ' ')"
  grep -E "^\[  FAILED  \] [A-Za-z]" "$log" | head -20
done
exit $failed
