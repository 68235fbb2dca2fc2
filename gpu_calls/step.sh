#!/usr/bin/env bash
# GPU run of the measured whole-model decode step (`kvbuf step --measure`), from the repository
# root after scripts/gpu_bundle.sh (executables in .gpu/bin). Builds nothing. Writes under
# $OUT/step/: the step GPU tests' log, one CSV and log per run, summary.txt. At most 415 s.
# Success: the GPU tests print PASSED, every CSV row has measured_step_us (or a "skipped: memory"
# note), and the summary lists classic / KVBuffer with a measured speedup per point.
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
out=${OUT:?set OUT}/step
mkdir -p "$out"
bin=.gpu/bin
cat .gpu/COMMIT 2>/dev/null && echo
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv,noheader 2>/dev/null | head -1

# 1. Layer outputs against the float64 reference (one layer of each kind), small shapes.
if [ -x "$bin/kvbuf_step_gpu_tests" ]; then
  timeout 50 "$bin/kvbuf_step_gpu_tests" >"$out/gpu_tests.log" 2>&1
  echo "step GPU tests: rc $? ($(grep -E '^\[  (PASSED|FAILED) ' "$out/gpu_tests.log" | tr '\n' ' '))"
  grep -E "FAILED|Failure|error" "$out/gpu_tests.log" | head -10
else
  echo "step GPU tests: $bin/kvbuf_step_gpu_tests missing"
fi

# 2. The measurement grid, one model per call (each call allocates that model's weights once).
measure() {  # label, model, seconds, extra args...
  local label=$1 model=$2 secs=$3
  shift 3
  timeout "$secs" "$bin/kvbuf" step --measure --results results --model "$model" \
    --out "$out/step_$label.csv" "$@" >"$out/step_$label.log" 2>&1
  local rc=$?
  echo "== $label: rc $rc ($(tail -n +2 "$out/step_$label.csv" 2>/dev/null | wc -l) rows)"
  grep -E "FAILED|cannot run|error" "$out/step_$label.log" | head -5
}
measure qwen3.5-0.8b qwen3.5-0.8b 40 --batch 1,64,256 --context 256,4096
measure qwen3.5-4b qwen3.5-4b 40 --batch 1,64,256 --context 256,4096
measure qwen3.5-35b-a3b qwen3.5-35b-a3b 50 --batch 1,64,256 --context 256,4096
measure nemotron-3-nano nemotron-3-nano-30b-a3b 40 --batch 1,64,256 --context 4096
measure qwen3-next-80b-a3b_tp2 qwen3-next-80b-a3b 40 --tp 2 --batch 64,256 --context 4096
measure qwen3.5-0.8b_bf16 qwen3.5-0.8b 20 --batch 64,256 --context 4096 --state-dtype bf16
measure qwen3.5-0.8b_verify4 qwen3.5-0.8b 20 --batch 64,256 --context 4096 --drafts 4 --accept-rate 0.7
measure qwen3.5-35b-a3b_skewed qwen3.5-35b-a3b 20 --batch 256 --context 4096 --routing skewed
python3 - "$out" <<'PY' | tee "$out/summary.txt"
import csv, glob, os, sys
print("run batch context | classic us meas (sim) | kvbuffer us meas (sim) | speedup meas (sim) | note")
for f in sorted(glob.glob(os.path.join(sys.argv[1], "step_*.csv"))):
    rows = list(csv.DictReader(open(f)))
    label = os.path.basename(f)[5:-4]
    points = {}
    for r in rows:
        points.setdefault((int(r["batch"]), int(r["context"])), {})[r["method"]] = r
    for (b, c), m in sorted(points.items(), key=lambda x: (x[0][1], x[0][0])):
        def cell(r):
            return f"{float(r['measured_step_us']):.0f} ({float(r['simulated_step_us']):.0f})" if r and r["measured_step_us"] else "-"
        k = m.get("kvbuffer") or {}
        sp = f"{float(k['measured_speedup']):.3f} ({float(k['simulated_speedup']):.3f})" if k.get("measured_speedup") else "-"
        note = next((r["note"][:60] for r in m.values() if r["note"]), "")
        print(f"{label} {b} {c} | {cell(m.get('classic'))} | {cell(k)} | {sp} | {note}")
PY
