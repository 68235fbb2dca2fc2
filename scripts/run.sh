#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main job: on a machine with a GPU the full
# measured sweep (results/), otherwise the bytes model for Qwen3-Next and the reference cross-checks.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install_deps.sh
./scripts/build.sh
kvbuf=${KVBUF_BUILD_DIR:-build}/bench/kvbuf
model=qwen3-next-80b-a3b
"$kvbuf" bytes --model "$model" --batch 1,64,256 --chunk 1,4,16,64
"$kvbuf" check
