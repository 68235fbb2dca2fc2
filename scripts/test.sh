#!/usr/bin/env bash
# Installs what is missing, builds, and runs every test this machine can run
# (tests labelled `gpu` only where a GPU answers).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/cuda_archs.sh
./scripts/install_deps.sh
./scripts/build.sh
build_dir=${KVBUF_BUILD_DIR:-build}
label_args=(-LE gpu)
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  label_args=()
fi
cd "$build_dir"
ctest --output-on-failure -j "$(nproc)" "${label_args[@]}"
