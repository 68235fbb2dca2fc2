#!/usr/bin/env bash
# Host-only test: the architecture layer (kernels/common/arch.cuh) emits each Hopper mechanism in code
# for compute_90 and none of them in code for compute_80 (the Ampere path), and each path's copy
# issuers: on compute_90 one thread and barriers of one arrival; on compute_80 a warp whose lanes
# take their pieces by lane id after lane 0 initialised the barriers for 32 arrivals. It exists
# because a wrapper that compiles to nothing (programmatic dependent launch lost without an error)
# passes every numerical check and shows only as a slower kernel.
#   arch_layer_ptx.sh NVCC SOURCE_DIR
set -euo pipefail
nvcc=${1:?usage: arch_layer_ptx.sh NVCC SOURCE_DIR}
src_dir=${2:?usage: arch_layer_ptx.sh NVCC SOURCE_DIR}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
probe=$src_dir/kernels/common/tests/arch_layer_probe.cu
"$nvcc" -std=c++17 -arch=compute_90 -ptx -I"$src_dir" "$probe" -o "$work/sm90.ptx"
"$nvcc" -std=c++17 -arch=compute_80 -ptx -I"$src_dir" "$probe" -o "$work/sm80.ptx"
hopper=(griddepcontrol.wait griddepcontrol.launch_dependents cp.async.bulk.shared mbarrier.arrive.expect_tx
        fence.proxy.async mbarrier.try_wait)
ampere=(cp.async.cg.shared.global cp.async.mbarrier.arrive.noinc mbarrier.test_wait)
# The barrier's arrival count, as mbarrier.init's immediate.
init_count() { grep -E -o 'mbarrier\.init\.shared::cta\.b64 \[[^]]+\], [0-9]+;' "$1" | grep -E -o '[0-9]+;$' | tr -d ';' | sort -u | tr '\n' ' '; }
status=0
[ "$(init_count "$work/sm90.ptx")" = "1 " ] || { echo "FAIL: compute_90 barriers' arrival count is '$(init_count "$work/sm90.ptx")', not 1"; status=1; }
[ "$(init_count "$work/sm80.ptx")" = "32 " ] || { echo "FAIL: compute_80 barriers' arrival count is '$(init_count "$work/sm80.ptx")', not 32"; status=1; }
for insn in %laneid bar.warp.sync; do
  grep -q -F "$insn" "$work/sm80.ptx" || { echo "FAIL: compute_80 code lacks $insn (the warp's copy issuers)"; status=1; }
  if grep -q -F "$insn" "$work/sm90.ptx"; then echo "FAIL: compute_90 code has $insn (one copy issuer)"; status=1; fi
done
for insn in "${hopper[@]}"; do
  grep -q -F "$insn" "$work/sm90.ptx" || { echo "FAIL: compute_90 code lacks $insn"; status=1; }
  if grep -q -F "$insn" "$work/sm80.ptx"; then echo "FAIL: compute_80 code has $insn"; status=1; fi
done
for insn in "${ampere[@]}"; do
  grep -q -F "$insn" "$work/sm80.ptx" || { echo "FAIL: compute_80 code lacks $insn"; status=1; }
done
[ $status = 0 ] && echo "arch layer: compute_90 has ${hopper[*]}, barriers of 1 arrival; compute_80 has ${ampere[*]}, %laneid, bar.warp.sync, barriers of 32 arrivals and none of those"
exit $status
