#!/usr/bin/env bash
# Configures and builds into ${KVBUF_BUILD_DIR:-build}; CUDA is used when nvcc is found.
# KVBUF_CUDA_ARCHITECTURES picks the CUDA architectures (CMake syntax: "native", "90-real",
# "80-virtual"; default in CMakeLists.txt: sm_80 to sm_120 plus PTX for the newest) and is applied to
# an existing build folder too.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${KVBUF_BUILD_DIR:-build}
arch_args=()
[ -z "${KVBUF_CUDA_ARCHITECTURES:-}" ] || arch_args=(-DKVBUF_CUDA_ARCHITECTURES="$KVBUF_CUDA_ARCHITECTURES")
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  # The Python module (python/) is built for the python3 that runs the tests (it has nanobind).
  python=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null || true)
  cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release ${python:+-DPython_EXECUTABLE="$python"} \
    ${arch_args[@]+"${arch_args[@]}"} ${KVBUF_CMAKE_ARGS:-} >/dev/null
elif [ ${#arch_args[@]} -gt 0 ]; then
  cmake -S . -B "$build_dir" "${arch_args[@]}" >/dev/null
fi
cmake --build "$build_dir" -j "$(nproc)" 2>&1 | grep -E "(error|warning):|Error [0-9]|CMake Error" || true
cmake --build "$build_dir" -j "$(nproc)" >/dev/null
