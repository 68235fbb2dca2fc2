#!/usr/bin/env python3
"""CPU tests of scripts/bench_fla.py (no torch needed): argument errors, model lookup and the bytes
it takes from kvbuf's bytes model, checked against the recurrent decode's tensors computed here from
the catalog shape (q, k, v, o bf16, g and beta fp32, fp32 state read and written).

    test_bench_fla.py KVBUF_BINARY
"""
import os
import subprocess
import sys
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench_fla.py")
KVBUF = None


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, "--kvbuf", KVBUF, *args], capture_output=True, text=True)


class BenchFla(unittest.TestCase):
    def test_dry_run_bytes_are_the_recurrent_tensors(self):
        r = run("--model", "qwen3.5-27b", "--batch", "1,3,256", "--dry-run")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("H=16 HV=48 K=128 V=128, 48 layer pools", r.stdout)
        H, HV, K, V = 16, 48, 128, 128
        per_request = 2 * H * K * 2 + HV * V * 2 + 2 * HV * 4 + HV * V * 2 + 2 * HV * V * K * 4
        for batch in (1, 3, 256):
            self.assertIn(f"batch {batch}: {per_request * batch} bytes per layer per step", r.stdout)

    def test_layer_pools_override(self):
        r = run("--batch", "2", "--layer-pools", "4", "--dry-run")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("4 layer pools", r.stdout)

    def test_bad_batch_is_a_usage_error(self):
        for bad in ("0", "x", "-4", ""):
            r = run("--batch", bad, "--dry-run")
            self.assertEqual(r.returncode, 2, (bad, r.stdout, r.stderr))

    def test_bad_budget_is_a_usage_error(self):
        self.assertEqual(run("--budget-s", "0", "--dry-run").returncode, 2)

    def test_unknown_model_fails_clearly(self):
        r = run("--model", "no-such-model", "--dry-run")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("unknown model", r.stderr)

    def test_mamba_model_is_refused(self):
        r = run("--model", "nemotron-3-nano-30b-a3b", "--dry-run")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("needs a gdn model", r.stderr)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    KVBUF = sys.argv.pop(1)
    unittest.main()
