#!/usr/bin/env bash
# GPU calls of the stepsim branch (H200, from the repo root, binaries in .gpu/bin; at most 145 s, about 40 s expected):
#  1. the GPU test bench/step/tests/step_profile_check.sh: Qwen3.5-0.8B batch 64 and 128, context 1024,
#     both methods, whole step + a separate terms-only run; the profile-based step within 10% of the
#     measured step and speedup, and the check failing with the GEMM term dropped;
#  2. one speculative point, T = 4 at acceptance 0.7, Qwen3.5-0.8B batch 64 context 1024, both
#     methods, measured with tokens/s per request and per GPU, then the simulator on the same point
#     with the measured rows as its profile (it prints the same tokens/s).
set -uo pipefail
export LD_LIBRARY_PATH=$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
o=${OUT:?}/stepsim
mkdir -p "$o"
kvbuf=.gpu/bin/kvbuf
echo "stepsim: commit $(git rev-parse --short=12 HEAD 2>/dev/null || echo '?'), $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"

timeout 100 bash bench/step/tests/step_profile_check.sh "$kvbuf" results "$o/test" >"$o/test.log" 2>&1
echo "1. GPU test step_profile_check.sh: exit $?"
grep -E "^profile|step within|speedup within|worst|term sources|PASS|FAIL" "$o/test.log"

timeout 35 "$kvbuf" step --measure --model qwen3.5-0.8b --batch 64 --context 1024 --drafts 4 --acceptance 0.7 \
  --method classic,kvbuffer --results results --out "$o/step_t4.csv" >"$o/step_t4.log" 2>&1
echo "2. T = 4 measured: exit $?"
grep -E "^ +64 |E\[m\]" "$o/step_t4.log"
timeout 10 "$kvbuf" step --model qwen3.5-0.8b --batch 64 --context 1024 --drafts 4 --acceptance 0.7 --results results \
  --profile "$o/step_t4.csv" --csv "$o/sim_t4.csv" >"$o/sim_t4.log" 2>&1
echo "   T = 4 simulated from that profile: exit $?"
grep -E "^ +64 |E\[m\]" "$o/sim_t4.log"
cut -d, -f1-8,11,22,29-32 "$o/step_t4.csv"
