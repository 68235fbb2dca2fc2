#!/usr/bin/env bash
# Installs what is missing, builds, and runs the main job: on a machine with a GPU the full
# measured sweep (results/), otherwise the bytes model for Qwen3-Next, the capacity tables and the
# reference cross-checks.
# KVBUF_CLI=path/to/kvbuf runs the main job with that built binary (a GPU bundle of
# scripts/gpu_bundle.sh, say) and skips the install and the build.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/cuda_archs.sh
build_dir=${KVBUF_BUILD_DIR:-build}
if [ -n "${KVBUF_CLI:-}" ]; then
  kvbuf=$KVBUF_CLI
else
  ./scripts/install_deps.sh
  ./scripts/build.sh
  kvbuf=$build_dir/bench/kvbuf
fi
if [ -z "${KVBUF_COMMIT:-}" ] && git rev-parse HEAD >/dev/null 2>&1; then
  KVBUF_COMMIT=$(git rev-parse --short=12 HEAD)
  [ -z "$(git status --porcelain --untracked-files=no)" ] || KVBUF_COMMIT+="-dirty"
  export KVBUF_COMMIT
fi

# CPU main job: modelled bytes and capacity, then the reference cross-checks (exit 1 on a failure).
# The bytes CSV (every tensor) goes to the build folder: results/ holds measured GPU runs only.
cpu_main_job() {
  local model=qwen3-next-80b-a3b
  echo "== bytes model: $model, per linear layer per decode step, over batch and buffer size C"
  "$kvbuf" bytes --model "$model" --batch 1,64,256 --chunk 1,2,4,8,16,32,64 \
    --summary --csv "$build_dir/bytes_decode_$model.csv"
  echo
  echo "== bytes model: $model, speculative verify of T = 4 tokens, 3 accepted per step"
  "$kvbuf" bytes --model "$model" --batch 1,64,256 --chunk 4,8,16,32,64 --drafts 4 --accept 3 \
    --summary --csv "$build_dir/bytes_verify_$model.csv"
  echo
  echo "== capacity (modelled): $model on one 141 GiB H200 at tp 2, context 32k, C = 8, T = 1..8"
  "$kvbuf" capacity --model "$model" --tp 2 --context 32768 --chunk 8 --drafts all
  echo
  echo "== capacity (modelled): every catalog model at tp 8, context 32k, C = 16, T = 4, fp32 / bf16 / fp16 states"
  "$kvbuf" capacity --model all --tp 8 --context 32768 --chunk 16 --drafts 4 --state-dtype all \
    --csv "$build_dir/capacity_model.csv"
  echo
  echo "== reference cross-checks"
  "$kvbuf" check
  echo
  echo "== figures: the modelled ones (bytes, capacity, short-context memory) and those of the committed results/"
  python3 scripts/figures.py --results results --kvbuf "$kvbuf" --out "$build_dir/figures"
}

# A results CSV of another commit (or of a sweep before the grid's columns) moves to results/archive/
# under its commit's name, so that results/ holds the current run; one of this commit is resumed.
archive_other_commit() {
  local csv=$1 commits
  [ -f "$csv" ] || return 0
  commits=$(python3 -c '
import csv, sys
with open(sys.argv[1], newline="") as f:
    rows = csv.DictReader(f)
    if "context_tokens" not in (rows.fieldnames or []):
        print("pre-grid")
    print(" ".join(sorted({r["commit"][:7] for r in rows if r.get("commit")})))' "$csv" | tr '\n' ' ' | xargs)
  [ "$commits" = "${KVBUF_COMMIT:0:7}" ] && return 0
  mkdir -p results/archive
  local name
  name=$(basename "$csv" .csv)_$(echo "${commits:-empty}" | tr ' ' '_').csv
  echo "== $csv holds rows of commit(s) ${commits:-none}: moved to results/archive/$name"
  mv "$csv" "results/archive/$name"
  rm -f "$csv.grid.toml"
}

# GPU main job: the kernel checks, then the paper preset of `kvbuf sweep` (both families, decode
# and verify, short contexts, fp32 and each model's engine-default state dtype; about 12 minutes)
# row by row into results/ (resumed if interrupted), the capacity of every catalog model measured at
# each state dtype (`kvbuf capacity --measure`, results/capacity_<gpu>.csv), the accuracy of 16-bit
# states over one long generation (`kvbuf accuracy`, under a minute), and the figures of
# scripts/figures.py. The resolved grid is saved next to each CSV (.grid.toml).
gpu_main_job() {
  local model=qwen3-next-80b-a3b
  # Results and figures are named by the GPU: the catalog's name (h200, a100-80gb, rtx4090, ...) where
  # it is a catalog GPU (kvbuf models --gpu-key).
  gpu=$("$kvbuf" models --gpu-key "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)")
  echo "== GPU kernel checks against the reference ($gpu)"
  "$kvbuf" check
  elapsed "kernel checks"
  echo
  echo "== decode and verify sweep: the paper preset on $gpu"
  archive_other_commit "results/decode_$gpu.csv"
  archive_other_commit "results/verify_$gpu.csv"
  "$kvbuf" sweep --preset paper --out "results/decode_$gpu.csv" --verify-out "results/verify_$gpu.csv"
  elapsed "paper preset"
  echo "== capacity: every catalog model, T = 1..8, C = 16, fp32 / bf16 / fp16 states, measured by bisection on $gpu"
  archive_other_commit "results/capacity_$gpu.csv"
  "$kvbuf" capacity --model all --drafts all --chunk 16 --weights-gib 0 --state-dtype all --measure \
    --csv "results/capacity_$gpu.csv"
  elapsed "capacity"
  echo
  echo "== accuracy: fp32 / bf16 / fp16 states over 16384 tokens of one request against the float64 reference"
  "$kvbuf" accuracy --entry-dtype bf16,fp32 --out "results/accuracy_$gpu.csv"
  python3 scripts/accuracy_table.py --results results --gpu "$gpu"
  elapsed "accuracy"
  # The public kernels that install by name (fla-core, mamba-ssm, FlashInfer): those that import
  # and run here, timed the same way (scripts/bench_public.py; the figures and summary read them).
  if python3 -c "import torch" 2>/dev/null; then
    echo "== public baselines: fla-core, mamba-ssm, FlashInfer where they run, same method"
    python3 scripts/bench_public.py --kvbuf "$kvbuf" --gdn-model "$model" --out "results/public_$gpu.csv" ||
      echo "== public baselines: none ran (pip install fla-core; MAMBA_SKIP_CUDA_BUILD=TRUE pip install mamba-ssm)"
    elapsed "public baselines"
  else
    echo "== public baselines skipped: python3 cannot import torch"
  fi
  if python3 -c "import matplotlib" 2>/dev/null; then
    python3 scripts/figures.py --results results --gpu "$gpu" --kvbuf "$kvbuf"
    elapsed "figures"
  else
    echo "== figures skipped: python3 cannot import matplotlib (scripts/figures.py draws them from results/ anywhere)"
  fi
}

# One line per phase, so that a run cut short (a job's time limit) still says where the time went.
elapsed() { echo "== $1 done, $(($(date +%s) - start_s)) s after the start"; }

start_s=$(date +%s)
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  gpu_main_job
  python3 scripts/summary.py --results results --gpu "$gpu" --wall-s $(($(date +%s) - start_s))
else
  cpu_main_job
  echo
  echo "No GPU here: timings need a GPU (./scripts/run.sh on one measures them). The committed H200 results:"
  python3 scripts/summary.py --results results --gpu h200 --wall-s $(($(date +%s) - start_s))
fi
