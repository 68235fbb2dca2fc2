#!/usr/bin/env bash
# GPU call of branch portable: the kernel checks with the sm_90 build (.gpu/bin) and with the build for
# compute_80 PTX alone (.gpu/bin-ptx80, JIT-compiled by the driver, so the kernels run their Ampere
# path on this GPU: cp.async pieces on mbarriers for the bulk copies, plain launches for programmatic
# dependent launch), then the same decode and verify points timed with both (the Ampere path's
# timings on the H200 next to the Hopper path's: what the Hopper mechanisms are worth here, not an
# A100 figure). Bundle first: KVBUF_BUNDLE_PTX80=1 scripts/gpu_bundle.sh. Run from the repo root;
# writes under $OUT/portable/, prints a compact summary; at most about 290 s (every step has a timeout
# and is skipped when the time left is short).
set -u
cd "$(dirname "$0")/.."
export LD_LIBRARY_PATH=$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
O=${OUT:-/tmp/out}/portable
mkdir -p "$O"
BIN=$PWD/.gpu/bin
P80=$PWD/.gpu/bin-ptx80
# The JIT's output, kept between the PTX binaries (they hold the same kernels); not under $OUT.
export CUDA_CACHE_PATH=${CUDA_CACHE_PATH:-/tmp/kvbuf-ptx80-jit-cache}
export CUDA_CACHE_MAXSIZE=4294967296
T0=$SECONDS
LIMIT=${LIMIT:-290}
left() { echo $((LIMIT - (SECONDS - T0))); }
tmo() { local t=$(( $(left) - $2 )); [ "$t" -lt "$1" ] && echo "$t" || echo "$1"; }  # at most $1 s, leaving $2 s
log() { echo "[$((SECONDS - T0))s] $*"; }
echo "portable: commit $(cat .gpu/COMMIT 2>/dev/null), $(nvidia-smi --query-gpu=name,compute_cap --format=csv,noheader 2>/dev/null)"
[ -x "$P80/kvbuf" ] || echo "portable: no $P80/kvbuf (bundle with KVBUF_BUNDLE_PTX80=1): the Ampere path is not run"

# 1. Checks: `kvbuf check` (prints the GPU and the build's architectures, refuses a GPU it has no code
#    for; the quick cases) and the four kernel test binaries (every case). The PTX-80 build first:
#    its kvbuf check pays the JIT of most kernels (the cache serves the test binaries, which hold the
#    same kernels). The sm_90 build's checks come after the decode timing (the coordinator's GPU test
#    runs cover them too); every step is skipped when the time left is short.
kvbuf_check() {  # kvbuf_check NAME DIR TIMEOUT
  [ -x "$2/kvbuf" ] || return
  [ "$(left)" -gt 60 ] || { log "$1 kvbuf check: skipped (time)"; return; }
  timeout "$(tmo "$3" 40)" "$2/kvbuf" check > "$O/check_$1.log" 2>&1
  local rc=$?
  log "$1 kvbuf check: rc=$rc $(grep -E "^kvbuf: GPU" "$O/check_$1.log" | head -1)"
  grep -E "^GPU .* checks:" "$O/check_$1.log" | sed "s/^/  /"
  grep -E "^FAIL" "$O/check_$1.log" | head -5 | sed "s/^/  /"
}
kernel_tests() {  # kernel_tests NAME DIR TIMEOUT_EACH
  local t rc
  [ -x "$2/kvbuf" ] || return
  for t in test_gdn_decode test_gdn_verify test_mamba2_decode test_mamba2_verify; do
    [ -x "$2/$t" ] || { log "$1 $t: missing"; continue; }
    [ "$(left)" -gt 50 ] || { log "$1 $t: skipped (time)"; continue; }
    timeout "$(tmo "$3" 40)" "$2/$t" --gtest_brief=1 > "$O/${1}_$t.log" 2>&1
    local rc=$?
    log "$1 $t: rc=$rc $(grep -E "^\[  (PASSED|FAILED)  \] [0-9]" "$O/${1}_$t.log" | tr '\n' ' ')"
    grep -E "^\[  FAILED  \] [A-Za-z]" "$O/${1}_$t.log" | head -5 | sed "s/^/  /"
  done
}

# 2. Timing, same points with both builds: decode of both families at batch 64 and 256, fp32 and bf16
#    states, C = 4 and 16, steady state (24 points, about 10 s each build); verify (T = 4, C = 16)
#    where time is left. CUDA graphs of the model's layer pools, median of the sweep's samples.
sweep() {  # sweep NAME DIR decode|verify
  local name=$1 dir=$2
  [ -x "$dir/kvbuf" ] || return
  [ "$(left)" -gt 45 ] || { log "$name $3 timing skipped (time)"; return; }
  if [ "$3" = decode ]; then
    timeout "$(tmo 50 30)" "$dir/kvbuf" sweep --model qwen3-next-80b-a3b,nemotron-3-nano-30b-a3b \
      --kernels recurrent,kvbuffer,mamba2-recurrent,mamba2-kvbuffer --batch 64,256 --chunk 4,16 --context 0 \
      --state-dtype fp32,bf16 --budget-s 0.1 --out "$O/decode_$name.csv" --verify-out "$O/verify_unused_$name.csv" \
      >> "$O/sweep_$name.log" 2>&1
  else
    timeout "$(tmo 40 25)" "$dir/kvbuf" sweep --model qwen3-next-80b-a3b,nemotron-3-nano-30b-a3b \
      --kernels verify-kvbuffer,mamba2-verify-kvbuffer --batch 64,256 --chunk 16 --drafts 4 --context 0 \
      --state-dtype fp32,bf16 --budget-s 0.1 --out "$O/decode_unused_$name.csv" --verify-out "$O/verify_$name.csv" \
      >> "$O/sweep_$name.log" 2>&1
  fi
  local rc=$?
  log "$name $3 sweep: rc=$rc"
}

kvbuf_check ptx80 "$P80" 150
kernel_tests ptx80 "$P80" 60
sweep sm90 "$BIN" decode
sweep ptx80 "$P80" decode
kvbuf_check sm90 "$BIN" 40
kernel_tests sm90 "$BIN" 40
sweep sm90 "$BIN" verify
sweep ptx80 "$P80" verify

python3 - "$O" <<'PY' | tee "$O/timing.txt"
import csv, os, sys
out = sys.argv[1]
def rows(path, name):
    if not os.path.exists(path):
        return {}
    got = {}
    for r in csv.DictReader(open(path)):
        if (r.get("latency_us_median") or "").strip():
            key = (r["model"].split("-")[0], r[name], r.get("state_dtype") or "fp32", r["batch"], r.get("chunk", ""))
            got[key] = float(r["latency_us_median"])
    return got
print("Ampere path (compute_80 PTX, JIT) against the Hopper path (sm_90) on this GPU, us per layer, median")
print(f"{'model':<10} {'kernel':<24} {'state':<5} {'batch':>5} {'C':>3} {'sm_90':>9} {'ptx80':>9} {'ratio':>6}")
for kind, name in (("decode", "kernel"), ("verify", "method")):
    h, a = rows(os.path.join(out, f"{kind}_sm90.csv"), name), rows(os.path.join(out, f"{kind}_ptx80.csv"), name)
    for key in sorted(set(h) | set(a)):
        hv, av = h.get(key), a.get(key)
        ratio = f"{av / hv:.2f}" if hv and av else "-"
        fmt = lambda v: f"{v:.2f}" if v else "-"
        print(f"{key[0]:<10} {key[1]:<24} {key[2]:<5} {key[3]:>5} {key[4]:>3} {fmt(hv):>9} {fmt(av):>9} {ratio:>6}")
PY
log "done"
