#!/usr/bin/env bash
# GPU call of branch verify36d (EXPERIMENT ONLY): the GDN KVBuffer verify kernel's variants of v21
# (kVerifyVariants in kernels/gdn/gdn_verify_kvbuffer.cu, chosen by KVBUF_GDN_VERIFY_VARIANT; each
# includes the ones before it: 1 phase 7's row products one TF32 product per k-step for 16-bit
# states (exact), 2 + the merge's column factors, 3 + the solve's coefficients read as rows of
# 16-byte vectors) checked against the float64 reference, memcheck of variant 3 on two small cases,
# and timed against the current kernel (variant 0, run first and last).
# Needs .gpu/bin/{test_gdn_verify,kvbuf} of this branch (libraries in .gpu/lib); prints a compact
# summary and writes three files under $OUT/verify36d/: summary.txt, verify_runs.csv (every run's
# sweep rows, with its run and variant in front) and logs.tar.gz (test, sanitizer and sweep logs,
# the per-run CSVs); about 170 s, at most LIMIT (230) s: every step has a timeout and is skipped
# when the time left is short.
# Success: every variant "rc=0 [  PASSED  ] 19 tests", "memcheck v3 rc=0" (0 errors), and the table
# with every point; the variants' ratios to variant 0 are the measurement (predictions: notes, v21).
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
R=${OUT:-/tmp/out}/verify36d
mkdir -p "$R"
O=$(mktemp -d)  # the runs' files; what comes back is packed into $R at the end
BIN=$PWD/.gpu/bin
VARIANTS="0 1 2 3"
RUNS="0a 1 2 3 0b"  # timing order: variant 0 first and last (0a, 0b), the drift between them is the noise floor
T0=$SECONDS
LIMIT=${LIMIT:-230}
left() { echo $((LIMIT - (SECONDS - T0))); }
tmo() { local t=$(( $(left) - $2 )); [ "$t" -lt "$1" ] && echo "$t" || echo "$1"; }  # at most $1 s, leaving $2 s
log() { echo "[$((SECONDS - T0))s] $*"; }
echo "verify36d: commit $(cat .gpu/COMMIT 2>/dev/null || git rev-parse --short HEAD 2>/dev/null), $(nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader 2>/dev/null)"
: > "$O/tests.txt"

# 1. Checks: test_gdn_verify's 19 K = 128 KVBuffer cases (chains, trees, every accepted length, ragged
#    fills, fp32 and bf16 entries, fp32 / bf16 / fp16 states; 4 of them new with this branch: T = 5
#    trees with bf16 entries for fp32, bf16 and fp16 states, T = 3 < TMAX) with each variant. The variants are built
#    for K = 128, bf16 entries, fp32 and bf16 states, T = 3..5 (TMAX 4, 5); the other cases run variant 0.
for v in $VARIANTS; do
  [ "$(left)" -gt 130 ] || { log "checks of variant $v skipped (time)"; echo "$v skipped (time)" >> "$O/tests.txt"; continue; }
  KVBUF_GDN_VERIFY_VARIANT=$v timeout "$(tmo 40 130)" "$BIN/test_gdn_verify" --gtest_filter='Cases/GdnVerifyKVBufferTest.*K128*' \
    --gtest_brief=1 > "$O/test_v$v.log" 2>&1
  rc=$?
  summary=$(grep -E "^\[  PASSED  \]|^\[  FAILED  \] [0-9]+ test|FAILED TEST" "$O/test_v$v.log" | head -3 | tr '\n' ' ')
  echo "$v rc=$rc $summary" >> "$O/tests.txt"
  log "checks variant $v: rc=$rc $summary"
done

# 2. compute-sanitizer memcheck of variant 3 (every change of v21: the static shared arrays, the
#    vector loads of the coefficient rows) on two check cases: fp32 state T = 3 (TMAX 4), bf16 state
#    T = 5.
SAN=${SAN:-/usr/local/cuda/bin/compute-sanitizer}
cases='Cases/GdnVerifyKVBufferTest.*/K128_C6_T3_bf16_tree:Cases/GdnVerifyKVBufferTest.*/state_bf16_K128_C12_T5_bf16_tree'
if [ ! -x "$SAN" ]; then
  log "no compute-sanitizer at $SAN"; echo "memcheck v3: no compute-sanitizer" >> "$O/tests.txt"
elif [ "$(left)" -gt 120 ]; then
  KVBUF_GDN_VERIFY_VARIANT=3 timeout "$(tmo 45 100)" "$SAN" --tool memcheck --error-exitcode 3 "$BIN/test_gdn_verify" \
    --gtest_filter="$cases" --gtest_brief=1 > "$O/sanitizer_memcheck_v3.log" 2>&1
  rc=$?
  echo "memcheck v3 rc=$rc $(grep -E "ERROR SUMMARY|^\[  PASSED|^\[  FAILED" "$O/sanitizer_memcheck_v3.log" | head -2 | tr '\n' ' ')" >> "$O/tests.txt"
  log "memcheck variant 3: rc=$rc"
else
  log "memcheck skipped (time)"; echo "memcheck v3 skipped (time)" >> "$O/tests.txt"
fi

# 3. Timing: kvbuf sweep (CUDA graphs of 36 layer pools, median), T = 4 and 5, C = 16, fp32 states at
#    batch 1..512, then bf16 states at 128, 256; one run per variant, interleaved, variant 0 first
#    and last. Each run writes its own CSV (the sweep skips points already in its CSV).
for group in "fp32 1,8,64,128,256,512 30" "bf16 128,256 12"; do
  set -- $group
  for run in $RUNS; do
    v=${run:0:1}
    [ "$(left)" -gt "$3" ] || { log "timing $1 run $run skipped (time)"; continue; }
    KVBUF_GDN_VERIFY_VARIANT=$v timeout "$(tmo 60 5)" "$BIN/kvbuf" sweep --model qwen3-next-80b-a3b --kernels verify-kvbuffer \
      --batch "$2" --drafts 4,5 --chunk 16 --state-dtype "$1" --budget-s 0.12 \
      --out "$O/decode_unused_$1_$run.csv" --verify-out "$O/verify_$1_$run.csv" >> "$O/sweep_$run.log" 2>&1 \
      || log "sweep $1 run $run exited $?"
    log "timed $1 run $run"
  done
done
rm -f "$O"/decode_unused_*.csv

# 4. Summary: us per layer step (median) per run, ratio to variant 0 (mean of its two runs).
python3 - "$O" $RUNS <<'PY' | tee "$R/summary.txt"
import csv, glob, math, os, sys
out, runs = sys.argv[1], sys.argv[2:]
t = {}
for run in runs:
    for p in glob.glob(os.path.join(out, f"verify_*_{run}.csv")):
        for r in csv.DictReader(open(p)):
            try:
                t[(run, (r["state_dtype"], int(r["drafts"]), int(r["batch"])))] = float(r["latency_us_median"])
            except (KeyError, ValueError):
                pass
keys = sorted({k for (_, k) in t}, key=lambda k: (k[0] != "fp32", k[1], k[2]))
def base(k):
    v = [t[(r, k)] for r in ("0a", "0b") if (r, k) in t]
    return sum(v) / len(v) if v else None
print("us per layer step (median), C = 16, qwen3-next-80b-a3b, 36 layer pools; (ratio to the mean of runs 0a, 0b)")
print(f"{'state T batch':16s}" + "".join(f"{'v' + r:>16s}" for r in runs))
for k in keys:
    b = base(k)
    line = f"{k[0]:5s} {k[1]:>2d} {k[2]:>6d}  "
    for r in runs:
        x = t.get((r, k))
        line += f"{x:8.2f} ({x / b:5.3f})" if x is not None and b else f"{'-':>16s}"
    print(line)
for r in runs:
    ratios = [t[(r, k)] / base(k) for k in keys if k[0] == "fp32" and k[2] >= 64 and (r, k) in t and base(k)]
    per_t = {T: [t[(r, k)] / base(k) for k in keys if k[0] == "fp32" and k[1] == T and k[2] >= 64 and (r, k) in t and base(k)]
             for T in (4, 5)}
    gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs)) if xs else float("nan")
    bf16 = [t[(r, k)] / base(k) for k in keys if k[0] == "bf16" and (r, k) in t and base(k)]
    print(f"run {r}: geomean ratio fp32 batch >= 64: {gm(ratios):.3f} (T=4 {gm(per_t[4]):.3f}, T=5 {gm(per_t[5]):.3f}; {len(ratios)} points); bf16: {gm(bf16):.3f} ({len(bf16)} points)")
PY
echo "== checks per variant (rc=0 and PASSED: the variant matches the float64 reference; sanitizer rc=0: clean)" | tee -a "$R/summary.txt"
tee -a "$R/summary.txt" < "$O/tests.txt"
python3 - "$O" "$R/verify_runs.csv" $RUNS <<'PY'
import csv, os, sys
out, dst, runs = sys.argv[1], sys.argv[2], sys.argv[3:]
w = None
with open(dst, "w", newline="") as f:
    for dtype in ("fp32", "bf16"):
        for run in runs:
            p = os.path.join(out, f"verify_{dtype}_{run}.csv")
            if not os.path.exists(p):
                continue
            for r in csv.DictReader(open(p)):
                if w is None:
                    w = csv.DictWriter(f, ["run", "variant"] + list(r.keys()), extrasaction="ignore")
                    w.writeheader()
                w.writerow({"run": run, "variant": run[0], **r})
PY
tar czf "$R/logs.tar.gz" -C "$O" . && rm -rf "$O"
log "done"
