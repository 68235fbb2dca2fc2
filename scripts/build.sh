#!/usr/bin/env bash
# Configures and builds into ${KVBUF_BUILD_DIR:-build}; CUDA is used when nvcc is found.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${KVBUF_BUILD_DIR:-build}
if [ ! -f "$build_dir/CMakeCache.txt" ]; then
  cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release ${KVBUF_CMAKE_ARGS:-} >/dev/null
fi
cmake --build "$build_dir" -j "$(nproc)" 2>&1 | grep -E "(error|warning):|Error [0-9]|CMake Error" || true
cmake --build "$build_dir" -j "$(nproc)" >/dev/null
