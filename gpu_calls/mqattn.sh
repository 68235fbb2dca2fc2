#!/usr/bin/env bash
# GPU call of branch mqattn: the multi-query (speculative verify) attention of `kvbuf step --measure`.
# 1. kvbuf_step_gpu_tests: the multi-query attention (FlashInfer's batch prefill kernel over the
#    paged KV) against a float64 softmax (ragged contexts, T = 1..5, head dims 128 / 256, GQA groups
#    2, 4, 16, the non-causal attention rejected), and the step runner's existing GPU tests (verify
#    steps now run the multi-query attention).
# 2. The whole step at T = 4, acceptance 0.7: Qwen3.5-0.8B at batch 64, 256 x context 1024, 4096 and
#    Qwen3.5-35B-A3B at batch 64, context 4096, both methods.
# Needs .gpu/bin/{kvbuf_step_gpu_tests,kvbuf} of this branch (libraries in .gpu/lib). Writes under
# $OUT/mqattn/: tests.log, step_T4.csv, step_T4_35b.csv, step_*.log, summary.txt; prints the summary.
# At most 200 s: every step has a timeout.
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
R=${OUT:-/tmp/out}/mqattn
mkdir -p "$R"
BIN=$PWD/.gpu/bin
T0=$SECONDS
log() { echo "[$((SECONDS - T0))s] $*"; }
echo "mqattn: commit $(cat .gpu/COMMIT 2>/dev/null || git rev-parse --short HEAD 2>/dev/null), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null)"

timeout 55 "$BIN/kvbuf_step_gpu_tests" --gtest_brief=1 > "$R/tests.log" 2>&1
rc=$?
log "kvbuf_step_gpu_tests rc=$rc: $(grep -E "^\[  PASSED  \]|^\[  FAILED  \] [0-9]+ test|^\[  FAILED  \] Step|SKIPPED" "$R/tests.log" | head -6 | tr '\n' ' ')"

timeout 80 "$BIN/kvbuf" step --measure --results results --model qwen3.5-0.8b --batch 64,256 --context 1024,4096 \
  --drafts 4 --accept-rate 0.7 --out "$R/step_T4.csv" > "$R/step_0.8b.log" 2>&1
log "kvbuf step --measure qwen3.5-0.8b rc=$?"
timeout 50 "$BIN/kvbuf" step --measure --results results --model qwen3.5-35b-a3b --batch 64 --context 4096 \
  --drafts 4 --accept-rate 0.7 --out "$R/step_T4_35b.csv" > "$R/step_35b.log" 2>&1
log "kvbuf step --measure qwen3.5-35b-a3b rc=$?"

# The new rows next to the committed T = 4 rows (measured with the decode kernel once per draft).
python3 - "$R/step_T4.csv" "$R/step_T4_35b.csv" results/step_h200.csv <<'PY' | tee "$R/summary.txt"
import csv, os, sys
*new, old_path = sys.argv[1:]
old = {}
if os.path.exists(old_path):
    for r in csv.DictReader(open(old_path)):
        if r.get("drafts") == "4":
            old[(r["model"], r["batch"], r["context"], r["method"])] = r
print("T = 4, acceptance 0.7; us per step; before = results/step_h200.csv (decode kernel once per draft)")
print(f"{'model':16s} {'batch':>5s} {'ctx':>5s} {'method':9s} {'step_us':>9s} {'attn_us':>9s} {'speedup':>7s} "
      f"{'tok/s/gpu':>9s} {'split':>5s} | {'before step':>11s} {'attn':>9s} {'tok/s/gpu':>9s}  note")
for path in new:
    if not os.path.exists(path):
        print(f"{path}: missing")
        continue
    for r in csv.DictReader(open(path)):
        b = old.get((r["model"], r["batch"], r["context"], r["method"]), {})
        print(f"{r['model']:16s} {r['batch']:>5s} {r['context']:>5s} {r['method']:9s} {r['measured_step_us']:>9s} "
              f"{r['measured_attention_us']:>9s} {r['measured_speedup']:>7s} {r['tokens_per_s_per_gpu']:>9s} "
              f"{r['attention_split_kv']:>5s} | {b.get('measured_step_us', '-'):>11s} "
              f"{b.get('measured_attention_us', '-'):>9s} {b.get('tokens_per_s_per_gpu', '-'):>9s}  {r['note'][:80]}")
PY
log "done"
