#!/usr/bin/env bash
# GPU call of branch verify36c: the GDN KVBuffer verify with one code path (variant 2 of v20: the
# shared-memory layout's (K, TMAX) regions at compile-time offsets, every warp its own tree, the
# buffer keys read as landed, 4 block barriers) for every shape.
#   1. checks: all of test_gdn_verify (KVBuffer and classic cases against the float64 reference,
#      the bad-input refusals);
#   2. compute-sanitizer memcheck and racecheck on two K = 128 KVBuffer cases (T = 4 tree, T = 5 chain);
#   3. timing: kvbuf sweep, qwen3-next-80b-a3b, T = 4 and 5, C = 16, fp32 states at batch
#      1..512, then bf16 states at 128 and 256.
# Needs .gpu/bin/{test_gdn_verify,kvbuf} of this branch (libraries in .gpu/lib). Writes under
# $OUT/verify36c/: summary.txt, verify_fp32.csv, verify_bf16.csv (the sweep's rows) and logs.tar.gz
# (test, sanitizer and sweep logs). About 120 s, at most LIMIT (200) s: every step has a timeout and
# is skipped when the time left is short.
# Success: "checks rc=0" with gtest's PASSED line and no FAILED, "memcheck rc=0" and "racecheck
# rc=0" (0 errors / 0 hazards), and a timing table with every point (T = 5, fp32, batch 128 was
# 127.97 us for this body at 03b05a3).
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
R=${OUT:-/tmp/out}/verify36c
mkdir -p "$R"
O=$(mktemp -d)  # logs; packed into $R at the end
BIN=$PWD/.gpu/bin
T0=$SECONDS
LIMIT=${LIMIT:-200}
left() { echo $((LIMIT - (SECONDS - T0))); }
tmo() { local t=$(( $(left) - $2 )); [ "$t" -lt "$1" ] && echo "$t" || echo "$1"; }  # at most $1 s, leaving $2 s
log() { echo "[$((SECONDS - T0))s] $*"; }
echo "verify36c: commit $(cat .gpu/COMMIT 2>/dev/null || git rev-parse --short HEAD 2>/dev/null), $(nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader 2>/dev/null)"
: > "$O/checks.txt"

# 1. Checks: every case of test_gdn_verify (up to 120 s, leaving 60 s for the timing).
timeout "$(tmo 120 60)" "$BIN/test_gdn_verify" --gtest_brief=1 > "$O/test_gdn_verify.log" 2>&1
rc=$?
echo "checks rc=$rc $(grep -E "^\[  PASSED  \]|^\[  FAILED  \]|FAILED TESTS?" "$O/test_gdn_verify.log" | head -6 | tr '\n' ' ')" >> "$O/checks.txt"
[ $rc -eq 124 ] && echo "checks: timed out (124)" >> "$O/checks.txt"
log "$(tail -1 "$O/checks.txt")"

# 2. compute-sanitizer on two K = 128 KVBuffer cases, while at least 60 s remain for the timing.
SAN=${SAN:-/usr/local/cuda/bin/compute-sanitizer}
cases='Cases/GdnVerifyKVBufferTest.*/K128_C16_T4_bf16_tree:Cases/GdnVerifyKVBufferTest.*/K128_C12_T5_bf16_chain_extreme_gates'
for tool in memcheck racecheck; do
  [ -x "$SAN" ] || { echo "$tool: no compute-sanitizer at $SAN" >> "$O/checks.txt"; break; }
  [ "$(left)" -gt 75 ] || { echo "$tool skipped (time)" >> "$O/checks.txt"; continue; }
  timeout "$(tmo 40 60)" "$SAN" --tool "$tool" --error-exitcode 3 "$BIN/test_gdn_verify" \
    --gtest_filter="$cases" --gtest_brief=1 > "$O/sanitizer_$tool.log" 2>&1
  rc=$?
  echo "$tool rc=$rc $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\[  PASSED|^\[  FAILED" "$O/sanitizer_$tool.log" | head -3 | tr '\n' ' ')" >> "$O/checks.txt"
  log "$(tail -1 "$O/checks.txt")"
done

# 3. Timing: kvbuf sweep (CUDA graphs of 36 layer pools, median), T = 4 and 5, C = 16.
for group in "fp32 1,8,64,128,256,512 60 25" "bf16 128,256 30 3"; do
  set -- $group
  [ "$(left)" -gt 10 ] || { log "timing $1 skipped (time)"; continue; }
  timeout "$(tmo "$3" "$4")" "$BIN/kvbuf" sweep --model qwen3-next-80b-a3b --kernels verify-kvbuffer \
    --batch "$2" --drafts 4,5 --chunk 16 --state-dtype "$1" --budget-s 0.12 \
    --out "$O/decode_unused_$1.csv" --verify-out "$R/verify_$1.csv" > "$O/sweep_$1.log" 2>&1 \
    || log "sweep $1 exited $?"
  log "timed $1"
done
rm -f "$O"/decode_unused_*.csv

# 4. Summary.
python3 - "$R" <<'PY' | tee "$R/summary.txt"
import csv, os, sys
out = sys.argv[1]
print("us per layer step (median), C = 16, qwen3-next-80b-a3b, 36 layer pools")
print(f"{'state':6s}{'entries':8s}{'T':>3s}{'batch':>7s}{'us':>10s}  note")
for dtype in ("fp32", "bf16"):
    p = os.path.join(out, f"verify_{dtype}.csv")
    if not os.path.exists(p):
        print(f"{dtype}: no CSV")
        continue
    for r in csv.DictReader(open(p)):
        try:
            us = f"{float(r.get('latency_us_median', '')):10.2f}"
        except ValueError:
            us = f"{'-':>10s}"
        print(f"{r.get('state_dtype', dtype):6s}{r.get('entry_dtype', '?'):8s}{r.get('drafts', '?'):>3s}"
              f"{r.get('batch', '?'):>7s}{us}  {r.get('note', '')}")
PY
echo "== checks (rc=0 and PASSED: matches the float64 reference; sanitizer rc=0: clean)" | tee -a "$R/summary.txt"
tee -a "$R/summary.txt" < "$O/checks.txt"
tar czf "$R/logs.tar.gz" -C "$O" . && rm -rf "$O"
log "done"
