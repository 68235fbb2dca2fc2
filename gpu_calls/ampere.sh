#!/usr/bin/env bash
# GPU run of the Ampere path whose copies a whole warp issues (kernels/common/arch.cuh), from the
# repository root: the 90-real binaries in .gpu/bin, the compute_80 PTX-only binaries (kvbuf and
# test_{gdn,mamba2}_{decode,verify}) in .gpu/bin-ptx80, libraries in .gpu/lib. Builds nothing.
# At most 295 s (every step under `timeout`, each given at most what is left of the budget).
# Order: the PTX build's sweep, its `kvbuf check`, the 90-real check and sweep, the PTX test binaries.
# Writes under $OUT/ampere/: ampere_path_h200_{ptx80,sm90}.csv (the 24 decode points of
# results/ampere_path_h200_*.csv, same `kvbuf sweep` command), one log per step, summary.txt.
# Success: every "GPU <family> checks: X of Y passed" line has X = Y and no FAIL line (the PTX run's
# log says "built for CUDA architectures 80-virtual"), each PTX test binary ends "[  PASSED  ]"
# with no FAILED line, no step times out, and the summary's ptx80 / sm90 ratio of the KVBuffer rows
# is well below the previous 1.7-2.7x (its "before" column: the committed results/ampere_path_h200_*.csv).
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
out=${OUT:?set OUT}/ampere
mkdir -p "$out"
bin=.gpu/bin
ptx=.gpu/bin-ptx80
# The driver's JIT of the PTX build, cached for the later PTX binaries (the same kernels).
export CUDA_CACHE_PATH=/tmp/kvbuf-ptx80-jit-cache
export CUDA_CACHE_MAXSIZE=4294967296
budget=295
start=$SECONDS
left() { echo $((budget - (SECONDS - start))); }
# step LABEL CAP_S CMD...: runs CMD under timeout min(CAP_S, what is left - 5), log in $out/LABEL.log.
step() {
  local label=$1 cap=$2
  shift 2
  local t
  t=$(left)
  t=$((t - 5 < cap ? t - 5 : cap))
  if [ "$t" -lt 5 ]; then
    echo "$label: not run (budget spent)"
    return 124
  fi
  timeout "$t" "$@" >"$out/$label.log" 2>&1
  local rc=$?
  echo "$label: rc $rc in $((SECONDS - start)) s of $budget$([ $rc = 124 ] && echo " (timed out at $t s)")"
  return $rc
}
cat .gpu/COMMIT 2>/dev/null && echo
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1

sweep() {  # label, kvbuf binary, CSV, cap in seconds
  step "$1" "$4" "$2" sweep --model qwen3-next-80b-a3b,nemotron-3-nano-30b-a3b \
    --kernels recurrent,kvbuffer,mamba2-recurrent,mamba2-kvbuffer --batch 64,256 --chunk 4,16 --context 0 \
    --state-dtype fp32,bf16 --budget-s 0.1 --out "$3" --verify-out "$out/$1_verify_unused.csv"
  echo "  $(tail -n +2 "$3" 2>/dev/null | wc -l) rows"
}
# 1. The Ampere-path timings first (the driver JIT-compiles only the decode kernels' modules here).
sweep sweep_ptx80 "$ptx/kvbuf" "$out/ampere_path_h200_ptx80.csv" 90
# 2. Every `kvbuf check` case on the Ampere path.
step check_ptx80 100 "$ptx/kvbuf" check
grep -E "^kvbuf: GPU|checks:|^FAIL" "$out/check_ptx80.log" | head -20
grep -q "built for CUDA architectures 80-virtual$" "$out/check_ptx80.log" || echo "FAIL: $ptx/kvbuf is not a compute_80 PTX-only build"
# 3. The 90-real build: every check, then the same points.
step check_sm90 25 "$bin/kvbuf" check
grep -E "^kvbuf: GPU|checks:|^FAIL" "$out/check_sm90.log" | head -20
sweep sweep_sm90 "$bin/kvbuf" "$out/ampere_path_h200_sm90.csv" 45

# 4. The PTX test binaries, the kernels with tile copies first (GDN verify has none: last).
for t in "test_gdn_decode:*" "test_mamba2_decode:*" "test_mamba2_verify:Mamba2VerifyKVBufferTest.*:Mamba2VerifyRowOrder.*:Mamba2VerifyCommitLayers.*" \
  "test_mamba2_verify:Mamba2VerifyClassicTest.*" "test_gdn_verify:*"; do
  exe=${t%%:*} filter=${t#*:}
  label=ptx80_${exe}_$(echo "${filter%%.*}" | tr -cd 'A-Za-z0-9')
  [ "$filter" = "*" ] && label=ptx80_$exe
  step "$label" 120 "$ptx/$exe" --gtest_brief=1 "--gtest_filter=$filter"
  echo "  $(grep -E "^\[  (PASSED|FAILED)  \]" "$out/$label.log" | tr '\n' ' ')"
  grep -E "^\[  FAILED  \] [A-Za-z]" "$out/$label.log" | head -10
done

# 5. Summary: us per layer (median), Ampere path against Hopper path, now and before.
python3 - "$out" results/ampere_path_h200_ptx80.csv results/ampere_path_h200_sm90.csv <<'PY' | tee "$out/summary.txt"
import csv, os, sys
out, before_ptx, before_sm90 = sys.argv[1:4]
def load(path):
    try:
        rows = list(csv.DictReader(open(path)))
    except OSError:
        return {}
    return {(r["model"], r["kernel"], r["state_dtype"], r["batch"], r["chunk"]): r for r in rows}
now_ptx = load(os.path.join(out, "ampere_path_h200_ptx80.csv"))
now_sm90 = load(os.path.join(out, "ampere_path_h200_sm90.csv"))
old_ptx, old_sm90 = load(before_ptx), load(before_sm90)
def us(r):
    return float(r["latency_us_median"]) if r and r.get("latency_us_median") else None
print("kernel state batch C | sm90 us | ptx80 us | ptx80/sm90 | before: sm90 / ptx80 us, ratio | note")
for key in sorted(set(now_ptx) | set(now_sm90) | set(old_ptx)):
    _, kernel, dtype, batch, chunk = key
    a, b = us(now_sm90.get(key)), us(now_ptx.get(key))
    oa, ob = us(old_sm90.get(key)), us(old_ptx.get(key))
    f = lambda x: f"{x:.2f}" if x is not None else "-"
    ratio = f"{b / a:.2f}" if a and b else "-"
    old = f"{f(oa)} / {f(ob)}, {ob / oa:.2f}" if oa and ob else "-"
    note = ((now_ptx.get(key) or {}).get("note") or (now_sm90.get(key) or {}).get("note") or "")[:50]
    print(f"{kernel} {dtype} {batch} {chunk} | {f(a)} | {f(b)} | {ratio} | {old} | {note}")
PY
echo "total $((SECONDS - start)) s"
