#!/usr/bin/env python3
"""CPU tests of scripts/bench_public.py (no torch needed): argument errors, model lookup and the
bytes it takes from kvbuf's bytes model, checked against the recurrent decode's tensors computed
here from the catalog shapes (GDN: q, k, v, o bf16, g and beta fp32; Mamba-2: x, B, C, y bf16, dt
fp32; the state read and written, fp32 or bf16).

    test_bench_public.py KVBUF_BINARY
"""
import os
import subprocess
import sys
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench_public.py")
KVBUF = None


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, "--kvbuf", KVBUF, *args], capture_output=True, text=True)


sys.path.insert(0, os.path.dirname(SCRIPT))
import bench_public  # noqa: E402  (the module imports torch only in main)


class BenchPublic(unittest.TestCase):
    def test_clock_limit_note_as_the_sweep_writes_it(self):
        note = bench_public.clock_limit_note
        self.assertEqual(note([]), "")
        self.assertEqual(note([(1980, 300.0, 0), (1980, 310.0, 0x1 | 0x2 | 0x10)]), "")  # idle, app clocks, boost
        self.assertEqual(note([(1980, 300.0, None), (1850, 700.0, 0x4)]),  # unknown reasons are not counted
                         "SM clock held down while timed: power cap in 1 of 1 samples")
        self.assertEqual(note([(1850, 700.0, 0x4), (1700, 700.0, 0x4 | 0x40), (1980, 500.0, 0)]),
                         "SM clock held down while timed: power cap in 2 of 3 samples, "
                         "thermal slowdown in 1 of 3 samples")
        self.assertEqual(note([(1500, 600.0, 0x80)]), "SM clock held down while timed: hardware slowdown in 1 of 1 samples")

    def test_dry_run_gdn_bytes_are_the_recurrent_tensors(self):
        r = run("--kernels", "fla,flashinfer", "--gdn-model", "qwen3.5-27b", "--batch", "1,3,256", "--dry-run")
        self.assertEqual(r.returncode, 0, r.stderr)
        for kernel in ("fla (fla-fused-recurrent-vfirst-oop)", "flashinfer (flashinfer-gdn-decode-pretranspose)"):
            self.assertIn(f"{kernel}: qwen3.5-27b: H=16 HV=48 K=128 V=128, 48 layer pools, fp32 state", r.stdout)
        H, HV, K, V = 16, 48, 128, 128
        per_request = 2 * H * K * 2 + HV * V * 2 + 2 * HV * 4 + HV * V * 2 + 2 * HV * V * K * 4
        for batch in (1, 3, 256):
            self.assertIn(f"batch {batch}: {per_request * batch} bytes per layer per step", r.stdout)

    def test_dry_run_mamba2_bytes_and_bf16_state(self):
        r = run("--kernels", "mamba-ssm", "--batch", "1,3", "--state-dtype", "fp32,bf16", "--dry-run")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("mamba-ssm (mamba-ssm-selective-state-update): nemotron-3-nano-30b-a3b: G=8 NH=64 N=128 P=64, "
                      "23 layer pools, fp32 state", r.stdout)
        self.assertIn("23 layer pools, bf16 state", r.stdout)
        G, NH, N, P = 8, 64, 128, 64
        tokens = NH * P * 2 + 2 * G * N * 2 + NH * 4 + NH * P * 2
        for s in (4, 2):
            for batch in (1, 3):
                self.assertIn(f"batch {batch}: {(tokens + 2 * NH * P * N * s) * batch} bytes per layer per step",
                              r.stdout)

    def test_fla_has_no_bf16_state_rows(self):
        r = run("--kernels", "fla", "--state-dtype", "bf16", "--dry-run")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("fla: state dtype bf16 skipped", r.stdout)

    def test_layer_pools_override(self):
        r = run("--batch", "2", "--layer-pools", "4", "--dry-run")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.count("4 layer pools"), 3)

    def test_bad_arguments_are_usage_errors(self):
        for bad in (("--batch", "0"), ("--batch", "x"), ("--batch", "-4"), ("--batch", ""), ("--budget-s", "0"),
                    ("--kernels", "vllm"), ("--state-dtype", "fp8")):
            r = run(*bad, "--dry-run")
            self.assertEqual(r.returncode, 2, (bad, r.stdout, r.stderr))

    def test_unknown_model_fails_clearly(self):
        r = run("--gdn-model", "no-such-model", "--dry-run")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("unknown model", r.stderr)

    def test_a_model_of_the_other_family_is_refused(self):
        r = run("--kernels", "fla", "--gdn-model", "nemotron-3-nano-30b-a3b", "--dry-run")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("need a gdn model", r.stderr)
        r = run("--kernels", "mamba-ssm", "--mamba2-model", "qwen3-next-80b-a3b", "--dry-run")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("need a mamba2 model", r.stderr)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    KVBUF = sys.argv.pop(1)
    unittest.main()
