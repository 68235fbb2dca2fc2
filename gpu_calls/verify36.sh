#!/usr/bin/env bash
# GPU call of branch verify36 (EXPERIMENT ONLY): the GDN KVBuffer verify kernel's variants
# (kVerifyVariants in kernels/gdn/gdn_verify_kvbuffer.cu, chosen by KVBUF_GDN_VERIFY_VARIANT) checked,
# timed against the current kernel (variant 0), the current kernel and the fastest variant profiled
# per phase, the fastest under compute-sanitizer. Run from the repo root after scripts/gpu_bundle.sh;
# writes under $OUT/verify36/, prints a compact summary; about 330 s at most (every step has a timeout
# and is skipped when the time left is short).
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
O=${OUT:-/tmp/out}/verify36
mkdir -p "$O"
BIN=$PWD/.gpu/bin
NCU=${NCU:-/usr/local/cuda/bin/ncu}
SAN=${SAN:-/usr/local/cuda/bin/compute-sanitizer}
VARIANTS=${VARIANTS:-0 5 3 8 2 4 1 6 9 7}  # most telling first: later ones go when time runs short
T0=$SECONDS
LIMIT=${LIMIT:-330}
left() { echo $((LIMIT - (SECONDS - T0))); }
tmo() { local t=$(( $(left) - $2 )); [ "$t" -lt "$1" ] && echo "$t" || echo "$1"; }  # timeout: at most $1 s, leaving $2 s
log() { echo "[$((SECONDS - T0))s] $*"; }
echo "verify36: commit $(cat .gpu/COMMIT 2>/dev/null), $(nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader 2>/dev/null)"

# Profile (ncu, SM clock locked by the profiler): 4 layer pools, batch 128, C = 16, the first step's
#    four verify launches and its one commit (the commit's share); stall reasons, source counters (per-line warp samples), launch stats,
#    occupancy, memory; per-phase warp samples from the source page (verify36_ncu_phases.py).
profile() {  # variant drafts tag
  local v=$1 t=$2 tag=$3 rep="$O/ncu_$3"
  [ "$(left)" -gt 50 ] || { log "profile $tag skipped (time)"; return; }
  [ -x "$NCU" ] || { log "no ncu at $NCU"; return; }
  local sweep=("$BIN/kvbuf" sweep --model qwen3-next-80b-a3b --kernels verify-kvbuffer --batch 128 --chunk 16
    --drafts "$t" --layer-pools 4 --budget-s 0.001 --out "$rep.sweep.csv" --verify-out "$rep.verify.csv")
  local sections=(--section WarpStateStats --section SourceCounters --section LaunchStats --section Occupancy
    --section MemoryWorkloadAnalysis --section SpeedOfLight)
  KVBUF_GDN_VERIFY_VARIANT=$v timeout "$(tmo 90 25)" "$NCU" "${sections[@]}" -k regex:gdn_verify_kvbuffer --launch-count 5 \
    --import-source yes --source-folders "$PWD/kernels" -f -o "$rep" "${sweep[@]}" > "$rep.log" 2>&1 \
  || KVBUF_GDN_VERIFY_VARIANT=$v timeout "$(tmo 90 25)" "$NCU" "${sections[@]}" -k regex:gdn_verify_kvbuffer --launch-count 5 \
    -f -o "$rep" "${sweep[@]}" >> "$rep.log" 2>&1 || { log "ncu $tag failed (tail of $rep.log):"; tail -3 "$rep.log"; }
  [ -f "$rep.ncu-rep" ] || return
  timeout 30 "$NCU" -i "$rep.ncu-rep" --page details --print-details all > "$rep.details.txt" 2>&1
  for view in cuda sass; do
    timeout 30 "$NCU" -i "$rep.ncu-rep" --page source --csv --print-source $view > "$rep.source_$view.csv" 2>&1
  done
  echo "== $tag: variant $v, T = $t, batch 128, C = 16 (ncu: the step's 4 verify launches, then its commit)"
  timeout 30 "$NCU" -i "$rep.ncu-rep" --page raw --csv > "$rep.raw.csv" 2>&1
  python3 - "$rep.raw.csv" <<'PY'
import csv, sys
rows = [r for r in csv.reader(l for l in open(sys.argv[1], errors="replace") if not l.startswith("=="))]
if len(rows) < 3:
    sys.exit(print("  (no raw metrics)"))
head, units, data = rows[0], rows[1], [r for r in rows[2:] if len(r) == len(rows[0])]
col = {n: i for i, n in enumerate(head)}
def num(x):
    try: return float(x.replace(",", ""))
    except ValueError: return None
show = [("gpu__time_duration.sum", "time"), ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "dram%"),
        ("lts__t_sector_hit_rate.pct", "L2hit%"), ("launch__registers_per_thread", "regs"),
        ("launch__shared_mem_per_block_dynamic", "dsmem"), ("launch__occupancy_limit_registers", "blk/SM(regs)"),
        ("launch__occupancy_limit_shared_mem", "blk/SM(smem)"), ("sm__warps_active.avg.pct_of_peak_sustained_active", "achOcc%"),
        ("smsp__issue_active.avg.pct_of_peak_sustained_active", "issue%"), ("smsp__warps_eligible.avg.per_cycle_active", "eligible"),
        ("smsp__inst_executed.sum", "warp-inst")]
for r in data:
    name = r[col["Kernel Name"]] if "Kernel Name" in col else "?"
    short = "commit" if "commit" in name else "verify"
    print("  " + short + ": " + ", ".join(f"{lab} {r[col[m]]}{'' if units[col[m]] in ('', '%') else ' ' + units[col[m]]}"
                                       for m, lab in show if m in col))
for suffix, unit in (("_per_issue_active.ratio", "cycles per issued instruction"), ("_per_warp_active.pct", "% of warp cycles")):
    stalls = {}
    for i, name in enumerate(head):
        if "issue_stalled_" in name and name.endswith(suffix) and "not_issued" not in name:
            vals = [num(r[i]) for r in data if num(r[i]) is not None and "commit" not in r[col.get("Kernel Name", 0)]]
            if vals: stalls[name.split("issue_stalled_")[1][: -len(suffix)]] = sum(vals) / len(vals)
    if stalls:
        print(f"  verify stalls ({unit}, mean of launches): " + ", ".join(
            f"{k} {v:.2f}" for k, v in sorted(stalls.items(), key=lambda kv: -kv[1])[:9]))
        break
else:
    print("  (no stall metrics among " + str(len(head)) + " raw columns)")
PY
  python3 gpu_calls/verify36_ncu_phases.py "$rep.source_cuda.csv" "$rep.source_sass.csv" \
    --kernel-file kernels/gdn/gdn_verify_kvbuffer.cu --repo "$PWD" 2>&1 | head -30
}
sanitize() {  # tool
  [ "$(left)" -gt 15 ] || { log "$1 skipped (time)"; return; }
  KVBUF_GDN_VERIFY_VARIANT=$BEST timeout "$(tmo 60 5)" "$SAN" --tool "$1" --error-exitcode 3 \
    "$BIN/test_gdn_verify" --gtest_filter="$cases" --gtest_brief=1 > "$O/sanitizer_$1_v$BEST.log" 2>&1
  log "$1 variant $BEST: rc=$? $(grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$O/sanitizer_$1_v$BEST.log" | head -2 | tr '\n' ' ')"
}
# 1. Checks: variant 0 every case of test_gdn_verify; the other variants every K = 128 KVBuffer case
#    (chains, trees, every accepted length, ragged fills, fp32 / bf16 / fp16 states; the variant runs
#    where it is built: bf16 entries, fp32 and bf16 states, T = 3..5; the rest is variant 0).
for v in $VARIANTS; do
  [ "$(left)" -gt 230 ] || { log "checks of variant $v skipped (time)"; echo "$v skipped" >> "$O/tests.txt"; continue; }
  filter='Cases/GdnVerifyKVBufferTest.*K128*'
  [ "$v" = 0 ] && filter='*'
  KVBUF_GDN_VERIFY_VARIANT=$v timeout 40 "$BIN/test_gdn_verify" --gtest_filter="$filter" --gtest_brief=1 > "$O/test_v$v.log" 2>&1
  rc=$?
  summary=$(grep -E "^\[  PASSED  \]|^\[  FAILED  \] [0-9]+ test|FAILED TEST" "$O/test_v$v.log" | head -3 | tr '\n' ' ')
  echo "$v rc=$rc $summary" >> "$O/tests.txt"
  log "checks variant $v: rc=$rc $summary"
done

# The current kernel's profile first (the issue asks for it before any change is judged).
profile 0 5 v0_T5

# 2. Timing: the sweep (CUDA graphs of 36 layer pools, median), T = 4 and 5, C = 16, fp32 at batch
#    1..512 and bf16 states at 128 / 256; variants interleaved point group by point group.
for group in "fp32 1,8,64,128,256,512" "bf16 128,256"; do
  set -- $group
  for v in $VARIANTS; do
    [ "$(left)" -gt 100 ] || { log "timing $group v$v skipped (time)"; continue; }
    KVBUF_GDN_VERIFY_VARIANT=$v timeout "$(tmo 60 100)" "$BIN/kvbuf" sweep --model qwen3-next-80b-a3b --kernels verify-kvbuffer \
      --batch "$2" --drafts 4,5 --chunk 16 --state-dtype "$1" --budget-s 0.12 \
      --out "$O/decode_unused_v$v.csv" --verify-out "$O/verify_v$v.csv" >> "$O/sweep_v$v.log" 2>&1 \
      || log "sweep v$v $group exited $?"
  done
done
python3 - "$O" $VARIANTS <<'EOF' | tee "$O/timing.txt"
import csv, os, sys
out, variants = sys.argv[1], sys.argv[2:]
rep = {"1": 13.51, "8": 16.45, "64": 74.47, "128": 136.96, "256": 265.99, "512": 525.44}
rows = {}
for v in variants:
    p = os.path.join(out, f"verify_v{v}.csv")
    if not os.path.exists(p):
        continue
    for r in csv.DictReader(open(p)):
        key = (r.get("state_dtype", "fp32"), r["drafts"], r["batch"])
        try:
            rows[(v, key)] = (float(r["latency_us_median"]), float(r.get("frac_copy_bw") or "nan"))
        except ValueError:
            rows[(v, key)] = (float("nan"), float("nan"))
keys = sorted({k for (_, k) in rows}, key=lambda k: (k[0], int(k[1]), int(k[2])))
print("us per layer (median), C = 16; frac = bytes model / copy bandwidth; ReplaySSM T=5 fp32 recorded")
print(f"{'state T batch':16s}" + "".join(f"{'v' + v:>15s}" for v in variants) + f"{'ReplaySSM':>10s}")
best = {}
for k in keys:
    line = f"{k[0]:5s} {k[1]:>2s} {k[2]:>6s}  "
    for v in variants:
        t = rows.get((v, k))
        line += f"{t[0]:8.2f} ({t[1]:.2f})" if t else f"{'-':>15s}"
    line += f"{rep.get(k[2], float('nan')):10.2f}" if k[:2] == ("fp32", "5") else f"{'':10s}"
    print(line)
# the fastest variant: least geometric mean of its time over variant 0's at fp32, batch >= 64
import math
score = {}
for v in variants:
    r = [rows[(v, k)][0] / rows[("0", k)][0] for k in keys
         if k[0] == "fp32" and int(k[2]) >= 64 and (v, k) in rows and ("0", k) in rows]
    if r and all(x == x for x in r):
        score[v] = math.exp(sum(map(math.log, r)) / len(r))
print("geomean time / variant 0 (fp32, batch >= 64): " + ", ".join(f"v{v} {s:.3f}" for v, s in score.items()))
ok = {l.split()[0] for l in open(os.path.join(out, "tests.txt")) if " rc=0 " in l} if os.path.exists(os.path.join(out, "tests.txt")) else set()
cands = [v for v in score if v in ok and v != "0"]
best = min(cands, key=lambda v: score[v]) if cands else "0"
open(os.path.join(out, "best.txt"), "w").write(best + "\n")
print(f"fastest variant that passed its checks: v{best}")
EOF
BEST=$(cat "$O/best.txt" 2>/dev/null || echo 0)

# 3. The fastest variant profiled at T = 5, compute-sanitizer memcheck on small check cases of it, both
#    kernels profiled at T = 4, racecheck of the fastest.
cases='Cases/GdnVerifyKVBufferTest.*/K128_C16_T4_bf16_tree:Cases/GdnVerifyKVBufferTest.*/K128_C12_T5_bf16_chain_extreme_gates'
[ "$BEST" != 0 ] && profile "$BEST" 5 "v${BEST}_T5"
sanitize memcheck
profile 0 4 v0_T4
[ "$BEST" != 0 ] && profile "$BEST" 4 "v${BEST}_T4"
sanitize racecheck
echo "== checks per variant"; cat "$O/tests.txt"
log "done"
