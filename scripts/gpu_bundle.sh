#!/usr/bin/env bash
# Packs what a GPU run needs into one ignored folder that the device tool can carry:
#   scripts/gpu_bundle.sh [BUILD_DIR] [BUNDLE_DIR]      (defaults: build-cuda .gpu)
# The bundle holds the CUDA build's executables (bin/) and the non-system shared libraries they
# load (lib/). On the GPU machine: export LD_LIBRARY_PATH=$PWD/BUNDLE_DIR/lib; BUNDLE_DIR/bin/kvbuf ...
# KVBUF_CUDA_ARCHITECTURES picks the build's architectures (default: the full list of
# CMakeLists.txt; 90-real for an H200 alone, a third to a sixth of the build time). KVBUF_BUNDLE_PTX80=1 also
# builds BUILD_DIR-ptx80 for compute_80 PTX only (the kernels' Ampere path, JIT-compiled by the
# driver on any later GPU) and puts its kvbuf and kernel test binaries (every kernel check:
# bench/tests/ptx80_checks.sh BUNDLE_DIR/bin-ptx80 runs them) in BUNDLE_DIR/bin-ptx80/.
# KVBUF_BUNDLE_PYTHON=PY also builds the Python module for the interpreter PY (the GPU machine's
# Python, which need not be this machine's; PY needs nanobind) in BUILD_DIR-py and puts the package
# in BUNDLE_DIR/python/kvbuf: there, PYTHONPATH=BUNDLE_DIR/python python3 python/tests/test_gpu.py.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build-cuda}
bundle=${2:-.gpu}
./scripts/install_deps.sh  # FlashInfer's headers for `kvbuf step --measure` among them
KVBUF_BUILD_DIR=$build_dir ./scripts/build.sh
rm -rf "$bundle" && mkdir -p "$bundle/bin" "$bundle/lib"
find "$build_dir" -type f -perm -u+x \( -path "*/bench/*" -o -path "*/kernels/*" -o -path "*/reference/*" -o -path "*/sim/*" \) \
  ! -name "*.so*" ! -path "*/CMakeFiles/*" -exec cp {} "$bundle/bin/" \;
if [ "${KVBUF_BUNDLE_PTX80:-0}" = 1 ]; then
  KVBUF_CUDA_ARCHITECTURES=80-virtual KVBUF_BUILD_DIR=$build_dir-ptx80 KVBUF_CMAKE_ARGS="-DKVBUF_WITH_PYTHON=OFF" \
    ./scripts/build.sh
  mkdir -p "$bundle/bin-ptx80"
  cp "$build_dir-ptx80/bench/kvbuf" "$build_dir-ptx80"/kernels/test_{gdn,mamba2}_{decode,verify} "$bundle/bin-ptx80/"
fi
if [ -n "${KVBUF_BUNDLE_PYTHON:-}" ]; then
  arch_args=()
  [ -z "${KVBUF_CUDA_ARCHITECTURES:-}" ] || arch_args=(-DKVBUF_CUDA_ARCHITECTURES="$KVBUF_CUDA_ARCHITECTURES")
  cmake -S . -B "$build_dir-py" -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$KVBUF_BUNDLE_PYTHON" \
    -DKVBUF_WITH_PYTHON=ON -DKVBUF_BUILD_TESTS=OFF ${arch_args[@]+"${arch_args[@]}"} >/dev/null
  cmake --build "$build_dir-py" -j "$(nproc)" --target kvbuf_python kvbuf_python_package >/dev/null
  mkdir -p "$bundle/python" && cp -r "$build_dir-py/python/kvbuf" "$bundle/python/"
  strip "$bundle"/python/kvbuf/_C*.so
fi
for exe in "$bundle"/bin*/*; do
  ldd "$exe" | awk '/=> \// {print $3}' | grep -E "libfmt|libbenchmark|libgtest|libgmock" || true
done | sort -u | xargs -r -I{} cp -L {} "$bundle/lib/"
{ git rev-parse --short=12 HEAD; } | tr -d "\n" > "$bundle/COMMIT"
[ -z "$(git status --porcelain --untracked-files=no)" ] || printf -- "-dirty" >> "$bundle/COMMIT"
du -sh "$bundle"; echo "commit: $(cat "$bundle/COMMIT")"
