#!/usr/bin/env bash
# kvb16 GPU call (H200, at most 330 s: the timeouts below sum to it): checks and times this branch's 16-bit-state candidates
# against today's kernels, which the experiment-only switches select:
#   GDN single KVBuffer kernel, S0 [k | q] on the tensor cores (default) / FMA row loop
#     (KVBUF_KVB16_ROWLOOP=fma);
#   Mamba-2 KVBuffer, S0 . C_t on the tensor cores (default) / FMA (KVBUF_KVB16_ROWLOOP=fma);
#   Mamba-2 recurrent at batch <= 8, 4 rows per warp (default) / 2 (KVBUF_M2REC_PAIR_ROWS=2).
# Run from the repo root after scripts/gpu_bundle.sh; writes under $OUT/kvb16/.
set -u
export LD_LIBRARY_PATH=$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
B=$PWD/.gpu/bin
O=${OUT:-/tmp/out}/kvb16
mkdir -p "$O"
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
t0=$(date +%s)
step() { echo "[$(( $(date +%s) - t0 ))s] $*"; }
summary=()
note() { summary+=("$*"); }
gtest_result() { grep -E '^\[  (PASSED|FAILED)  \]' "$1" | head -2 | tr '\n' ' '; }

# 1. Checks against the float64 reference: every case, fp32 + bf16 + fp16, candidates on (default).
step "test_gdn_decode"
timeout 50 "$B/test_gdn_decode" > "$O/test_gdn_decode.txt" 2>&1
note "test_gdn_decode (candidates): rc=$? $(gtest_result "$O/test_gdn_decode.txt")"
grep -E '^\[  FAILED  \]' "$O/test_gdn_decode.txt" | head -20
grep -B2 -A8 -m3 'Failure' "$O/test_gdn_decode.txt" | head -40
step "test_mamba2_decode"
timeout 35 "$B/test_mamba2_decode" > "$O/test_mamba2_decode.txt" 2>&1
note "test_mamba2_decode (candidates): rc=$? $(gtest_result "$O/test_mamba2_decode.txt")"
grep -E '^\[  FAILED  \]' "$O/test_mamba2_decode.txt" | head -20
grep -B2 -A8 -m3 'Failure' "$O/test_mamba2_decode.txt" | head -40

# 2. compute-sanitizer memcheck of each new kernel on small 16-bit cases.
step "memcheck"
timeout 25 "$SAN" --tool memcheck --error-exitcode 9 "$B/test_gdn_decode" \
  --gtest_filter='*state_bf16_tile128_cachedu_fp32_C16_b3:*state_fp16_tile128_rowmeta_C8_b3_mixed_direct:*state_fp16_kvbuffer_cachedu_bf16_C4_b3' \
  > "$O/memcheck_gdn.txt" 2>&1
note "memcheck gdn mma: rc=$? $(grep -E 'ERROR SUMMARY' "$O/memcheck_gdn.txt" | tr '\n' ' ') $(gtest_result "$O/memcheck_gdn.txt")"
timeout 25 "$SAN" --tool memcheck --error-exitcode 9 "$B/test_mamba2_decode" \
  --gtest_filter='*kvbuffer_bf16_C4_b3:*kvbuffer_fp16_C16_b64_mixed_direct_z:*recurrent_bf16_nemotron_nano_shape_N64_b8_z:*recurrent_fp16_P64_N128_b3_z' \
  > "$O/memcheck_m2.txt" 2>&1
note "memcheck m2 mma + quad: rc=$? $(grep -E 'ERROR SUMMARY' "$O/memcheck_m2.txt" | tr '\n' ' ') $(gtest_result "$O/memcheck_m2.txt")"

# 3. Timing (kvbuf sweep: CUDA graphs over the model's layer pools, us per layer, median).
GDN="--model qwen3-next-80b-a3b --layer-pools 0 --budget-s 0.2"
M2="--model nemotron-3-nano-30b-a3b --layer-pools 0 --budget-s 0.2"
BATCH=1,8,64,128,256,512
step "sweep GDN kvbuffer, tensor cores"
timeout 40 "$B/kvbuf" sweep $GDN --kernels kvbuffer --state-dtype bf16 --batch $BATCH --chunk 4,8,16 --out "$O/gdn_mma.csv" > "$O/sweep_gdn_mma.log" 2>&1
note "sweep gdn mma rc=$?"
timeout 10 "$B/kvbuf" sweep $GDN --kernels kvbuffer --state-dtype fp16 --batch 256 --chunk 4,8 --out "$O/gdn_mma_fp16.csv" > "$O/sweep_gdn_mma_fp16.log" 2>&1
note "sweep gdn mma fp16 rc=$?"
step "sweep GDN kvbuffer, FMA"
KVBUF_KVB16_ROWLOOP=fma timeout 20 "$B/kvbuf" sweep $GDN --kernels kvbuffer --state-dtype bf16 --batch 64,256,512 --chunk 4,8 --out "$O/gdn_fma.csv" > "$O/sweep_gdn_fma.log" 2>&1
note "sweep gdn fma rc=$?"
step "sweep GDN recurrent"
timeout 15 "$B/kvbuf" sweep $GDN --kernels recurrent --state-dtype bf16 --batch $BATCH --out "$O/gdn_rec.csv" > "$O/sweep_gdn_rec.log" 2>&1
note "sweep gdn recurrent rc=$?"
step "sweep Mamba-2 kvbuffer, tensor cores / FMA"
timeout 30 "$B/kvbuf" sweep $M2 --kernels mamba2-kvbuffer --state-dtype bf16 --batch $BATCH --chunk 4,8,16 --out "$O/m2_mma.csv" > "$O/sweep_m2_mma.log" 2>&1
note "sweep m2 mma rc=$?"
KVBUF_KVB16_ROWLOOP=fma timeout 15 "$B/kvbuf" sweep $M2 --kernels mamba2-kvbuffer --state-dtype bf16 --batch 64,256 --chunk 4,8 --out "$O/m2_fma.csv" > "$O/sweep_m2_fma.log" 2>&1
note "sweep m2 fma rc=$?"
step "sweep Mamba-2 recurrent, 4 / 2 rows per warp, 16-row one-warp blocks"
timeout 12 "$B/kvbuf" sweep $M2 --kernels mamba2-recurrent --state-dtype bf16 --batch 1,8,32,64 --out "$O/m2_rec_quad.csv" > "$O/sweep_m2_rec_quad.log" 2>&1
note "sweep m2 recurrent quad rc=$?"
KVBUF_M2REC_PAIR_ROWS=2 timeout 8 "$B/kvbuf" sweep $M2 --kernels mamba2-recurrent --state-dtype bf16 --batch 1,8 --out "$O/m2_rec_pair.csv" > "$O/sweep_m2_rec_pair.log" 2>&1
note "sweep m2 recurrent pair rc=$?"
timeout 8 "$B/kvbuf" sweep $M2 --kernels mamba2-recurrent --state-dtype bf16 --batch 1,8 --rows-per-block 16 --out "$O/m2_rec_rows16.csv" > "$O/sweep_m2_rec_rows16.log" 2>&1
note "sweep m2 recurrent rows16 rc=$?"

# 4. ncu of the new GDN kernel at batch 256, bf16, C = 4 (one launch after warm-up).
step "ncu"
timeout 35 "$NCU" --kernel-name regex:gdn_decode_kvbuffer_mma_kernel --launch-skip 3 --launch-count 1 --csv \
  --metrics gpu__time_duration.sum,sm__inst_issued.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,smsp__inst_executed.sum \
  "$B/kvbuf" sweep --model qwen3-next-80b-a3b --kernels kvbuffer --state-dtype bf16 --batch 256 --chunk 4 --layer-pools 1 \
  --budget-s 0.05 --out "$O/ncu_sweep.csv" > "$O/ncu.txt" 2>&1
note "ncu rc=$?"

echo "==== summary ($(( $(date +%s) - t0 )) s)"
printf '%s\n' "${summary[@]}"
python3 - "$O" <<'PY'
import csv, sys, os
o = sys.argv[1]
def rows(f):
    p = os.path.join(o, f)
    try:
        return list(csv.DictReader(open(p)))
    except OSError:
        return []
def best(rs):
    b = {}
    for r in rs:
        try: v = float(r["latency_us_median"])
        except (ValueError, KeyError, TypeError): continue
        k = (r.get("state_dtype", "?"), int(r["batch"]))
        if k not in b or v < b[k][0]: b[k] = (v, r.get("chunk", ""))
    return b
def show(title, f):
    rs = rows(f)
    b = best(rs)
    print("%s [%s]" % (title, f))
    for dt in sorted({k[0] for k in b}):
        print("  %-5s " % dt + "  ".join("b%d %.2f[C%s]" % (k[1], b[k][0], b[k][1]) for k in sorted(b) if k[0] == dt))
    for r in [r for r in rs if not r.get("latency_us_median")][:4]:
        print("  no timing: batch", r.get("batch"), "C", r.get("chunk"), r.get("note"))
show("GDN kvbuffer, tensor cores, best C", "gdn_mma.csv")
show("GDN kvbuffer fp16, tensor cores, best C", "gdn_mma_fp16.csv")
show("GDN kvbuffer, FMA, best C", "gdn_fma.csv")
show("GDN recurrent", "gdn_rec.csv")
show("Mamba-2 kvbuffer, tensor cores, best C", "m2_mma.csv")
show("Mamba-2 kvbuffer, FMA, best C", "m2_fma.csv")
show("Mamba-2 recurrent, 4 rows per warp", "m2_rec_quad.csv")
show("Mamba-2 recurrent, 2 rows per warp", "m2_rec_pair.csv")
show("Mamba-2 recurrent, 16-row one-warp blocks", "m2_rec_rows16.csv")
for f in ("gdn_mma.csv", "gdn_fma.csv", "m2_mma.csv", "m2_fma.csv"):
    r256 = [r for r in rows(f) if r.get("batch") == "256"]
    print("  %s batch 256 per C: " % f + "  ".join("%s C%s %s" % (r.get("state_dtype"), r.get("chunk"), r.get("latency_us_median")) for r in r256))
PY
echo "ncu (GDN tensor-core kernel, bf16, batch 256, C 4):"
grep -E '"(gpu__time_duration.sum|sm__inst_issued|dram__throughput|launch__registers|sm__warps_active|launch__occupancy_limit|smsp__inst_executed)' "$O/ncu.txt" | awk -F'","' '{print "  " $(NF-2) " " $(NF-1) " " $NF}' | head -12
grep -iE "^==(ERROR|WARNING)==" "$O/ncu.txt" | head -3
