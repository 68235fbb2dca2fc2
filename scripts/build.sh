#!/usr/bin/env bash
# Configures and builds into ${KVBUF_BUILD_DIR:-build}; CUDA is used when nvcc is found.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${KVBUF_BUILD_DIR:-build}
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  # The Python module (python/) is built for the python3 that runs the tests (it has nanobind).
  python=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null || true)
  cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release ${python:+-DPython_EXECUTABLE="$python"} \
    ${KVBUF_CMAKE_ARGS:-} >/dev/null
fi
cmake --build "$build_dir" -j "$(nproc)" 2>&1 | grep -E "(error|warning):|Error [0-9]|CMake Error" || true
cmake --build "$build_dir" -j "$(nproc)" >/dev/null
