#!/usr/bin/env bash
# GPU call of branch verify36d: the GDN KVBuffer verify with variant 3 of v21 as its only code path
# (kernels/gdn/gdn_verify_kvbuffer.cu), checked and timed once.
# Needs .gpu/bin/{test_gdn_verify,kvbuf} of this branch (libraries in .gpu/lib); prints a compact
# summary and writes under $OUT/verify36d/: summary.txt, verify_fp32.csv (the sweep's rows) and
# logs.tar.gz (test, sanitizer and sweep logs); about 80 s, at most LIMIT (120) s: every step has a
# timeout, cut to the time left.
# Success: "tests rc=0 [  PASSED  ] N tests" (every case of test_gdn_verify, KVBuffer and classic,
# K = 64 and 128, every state dtype, against the float64 reference), "memcheck rc=0" and
# "racecheck rc=0" (0 errors), and the timing table with its 4 points (v21 measured variant 3 at
# f6f64f7, C = 16, fp32 states: T = 4 112.40 / 215.50 us, T = 5 126.03 / 251.71 us at batch 128 / 256).
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
R=${OUT:-/tmp/out}/verify36d
mkdir -p "$R"
O=$(mktemp -d)  # the runs' files; what comes back is packed into $R at the end
BIN=$PWD/.gpu/bin
T0=$SECONDS
LIMIT=${LIMIT:-120}
left() { echo $((LIMIT - (SECONDS - T0))); }
tmo() { local t=$(( $(left) - $2 )); [ "$t" -lt "$1" ] && echo "$t" || echo "$1"; }  # at most $1 s, leaving $2 s
log() { echo "[$((SECONDS - T0))s] $*"; }
echo "verify36d: commit $(cat .gpu/COMMIT 2>/dev/null || git rev-parse --short HEAD 2>/dev/null), $(nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader 2>/dev/null)" | tee "$R/summary.txt"
: > "$O/checks.txt"

# 1. Every case of test_gdn_verify (the 4 cases added with v21 among them: T = 5 trees with bf16
#    entries for fp32, bf16 and fp16 states, T = 3 < TMAX).
timeout "$(tmo 60 30)" "$BIN/test_gdn_verify" --gtest_brief=1 > "$O/test_gdn_verify.log" 2>&1
rc=$?
echo "tests rc=$rc $(grep -E "^\[  PASSED  \]|^\[  FAILED  \] [0-9]+ test|FAILED TEST" "$O/test_gdn_verify.log" | head -3 | tr '\n' ' ')" >> "$O/checks.txt"
grep -E "^\[  FAILED  \] Cases" "$O/test_gdn_verify.log" | head -8 >> "$O/checks.txt"
log "tests rc=$rc"

# 2. compute-sanitizer memcheck and racecheck on two K = 128 KVBuffer cases: a T = 4 tree (bf16
#    entries, fp32 state, C = 16: the sweep's shape) and a T = 5 chain (fp32 entries, bf16 state,
#    C = 8: folds, the 16-bit state's one-product phase 7).
SAN=${SAN:-/usr/local/cuda/bin/compute-sanitizer}
cases='Cases/GdnVerifyKVBufferTest.*/K128_C16_T4_bf16_tree:Cases/GdnVerifyKVBufferTest.*/state_bf16_K128_C8_T5_fp32_chain'
for tool in memcheck racecheck; do
  if [ ! -x "$SAN" ]; then
    echo "$tool: no compute-sanitizer at $SAN" >> "$O/checks.txt"; continue
  fi
  timeout "$(tmo 25 22)" "$SAN" --tool "$tool" --error-exitcode 3 "$BIN/test_gdn_verify" \
    --gtest_filter="$cases" --gtest_brief=1 > "$O/sanitizer_$tool.log" 2>&1
  rc=$?
  echo "$tool rc=$rc $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\[  PASSED|^\[  FAILED" "$O/sanitizer_$tool.log" | head -3 | tr '\n' ' ')" >> "$O/checks.txt"
  log "$tool rc=$rc"
done

# 3. Timing: kvbuf sweep (CUDA graphs of 36 layer pools, median), fp32 states, T = 4 and 5, C = 16,
#    batch 128 and 256.
timeout "$(tmo 20 2)" "$BIN/kvbuf" sweep --model qwen3-next-80b-a3b --kernels verify-kvbuffer \
  --batch 128,256 --drafts 4,5 --chunk 16 --state-dtype fp32 --budget-s 0.12 \
  --out "$O/decode_unused.csv" --verify-out "$R/verify_fp32.csv" > "$O/sweep.log" 2>&1
log "sweep rc=$?"
rm -f "$O/decode_unused.csv"

# 4. Summary.
python3 - "$R/verify_fp32.csv" <<'PY' | tee -a "$R/summary.txt"
import csv, os, sys
v21 = {(4, 128): 112.40, (4, 256): 215.50, (5, 128): 126.03, (5, 256): 251.71}  # variant 3 at f6f64f7
rows = list(csv.DictReader(open(sys.argv[1]))) if os.path.exists(sys.argv[1]) else []
print("us per layer step (median), fp32 states, C = 16, qwen3-next-80b-a3b, 36 layer pools (ratio to v21's variant 3)")
for r in rows:
    try:
        k = (int(r["drafts"]), int(r["batch"]))
        us = float(r["latency_us_median"])
    except (KeyError, ValueError):
        print("not measured:", {c: r[c] for c in r if c in ("drafts", "batch", "status", "reason", "note")})
        continue
    print(f"T = {k[0]} batch {k[1]:>4d}: {us:8.2f} us ({us / v21[k]:.3f})" if k in v21 else f"T = {k[0]} batch {k[1]}: {us:.2f} us")
print(f"{len(rows)} rows of 4")
PY
echo "== checks (rc=0 and PASSED: matches the float64 reference; sanitizer rc=0: clean)" | tee -a "$R/summary.txt"
tee -a "$R/summary.txt" < "$O/checks.txt"
tar czf "$R/logs.tar.gz" -C "$O" . && rm -rf "$O"
log "done"
