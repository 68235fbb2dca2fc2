#!/usr/bin/env python3
"""CPU tests of scripts/ncu_phases.py on a small export, listing and kernel source written in the
layouts of ncu's `--page source --csv --print-source sass`, `nvdisasm -g -gi -c` and the kernels'
`Phase N, name` comments: per-phase shares, inlined lines counted at their call, barrier waits at
their barrier, a launch printed twice counted once, another build's listing refused.

    test_ncu_phases.py
"""
import os
import subprocess
import sys
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ncu_phases.py")

SOURCE = """\
__global__ void k() {
  // Phase 1, load. Reads.
  int a = x[threadIdx.x];
  __syncthreads();
  // Phase 2, solve: the substitution
  y[0] = helper(a);
}
"""

LISTING = """\
k:
\t//## File "/build/kernels/k.cu", line 3
        /*0000*/                   LDG.E R2, desc[UR4][R2.64] ;
\t//## File "/build/kernels/k.cu", line 4
        /*0010*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
\t//## File "/build/kernels/k.cu", line 6
        /*0020*/                   LOP3.LUT R4, RZ, R2.reuse, RZ, 0x33, !PT ;
\t//## File "/build/kernels/helper.h", line 9 inlined at "/build/kernels/k.cu", line 6
\t//## File "/build/kernels/k.cu", line 6
        /*0030*/              @!P0 BRA `(.L_x_0) ;
.L_x_0:
\t//## File "/build/kernels/k.cu", line 6
        /*0040*/                   STG.E desc[UR4][R6.64], R4 ;
"""

COLS = ["Address", "Source", "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (Not-issued Samples)",
        "# Samples", "Instructions Executed", "stall_barrier", "stall_long_sb", "stall_wait",
        "stall_barrier (Not Issued)"]


def section(kernel, rows):
    """rows: (source text, barrier, long_sb, wait, instructions executed)."""
    out = [f'"Kernel Name","{kernel}",', ",".join(f'"{c}"' for c in COLS)]
    for i, (text, bar, lsb, wait, inst) in enumerate(rows):
        total = bar + lsb + wait
        vals = [f"0x7f00000{i:02x}0", text, total, 0, total, inst, bar, lsb, wait, 0]
        out.append(",".join(f'"{v}"' for v in vals))
    return out


LAUNCH_A = [("      LDG.E R2, desc[UR4][R2.64]", 0, 0, 2, 10), ("      BAR.SYNC.DEFER_BLOCKING 0x0", 0, 0, 0, 10),
            ("      LOP3.LUT R4, RZ, R2, RZ, 0x33, !PT", 6, 4, 0, 10), ("@!P0  BRA 0x7f0000000040", 0, 0, 2, 10),
            ("      STG.E desc[UR4][R6.64], R4", 0, 0, 6, 10)]
LAUNCH_B = [(t, bar, lsb, wait + 1, inst) for t, bar, lsb, wait, inst in LAUNCH_A]


class NcuPhases(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.source = self.write("k.cu", SOURCE)
        self.listing = self.write("k.sass", LISTING)

    def tearDown(self):
        self.tmp.cleanup()

    def write(self, name, text):
        path = os.path.join(self.tmp.name, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def run_tool(self, sections, listing=None, *extra):
        csv_path = self.write("src.csv", "\n".join(sum(sections, [])) + "\n")
        return subprocess.run([sys.executable, SCRIPT, csv_path, listing or self.listing, self.source, *extra],
                              capture_output=True, text=True)

    def phase_rows(self, out):
        rows = {}
        for line in out.splitlines():
            for name in ("1 load", "2 solve"):
                if line.startswith(name):
                    rows[name] = line[36:].split()
        return rows

    def test_shares_per_phase_with_barrier_waits_at_their_barrier(self):
        # A printed twice (dropped), then B; another kernel's launch is not counted.
        r = self.run_tool([section("k()", LAUNCH_A), section("k()", LAUNCH_A), section("k()", LAUNCH_B),
                           section("other()", LAUNCH_B)])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("2 launch(es), 45 warp samples, 100 warp instructions", r.stdout)
        rows = self.phase_rows(r.stdout)
        # Phase 1: the LDG's waits (2 + 3), the BAR's (0 + 1) and the barrier waits sampled at the LOP3
        # after the BAR (6 + 6): 18 of 45 samples; instructions: LDG and BAR, 40 of 100.
        self.assertEqual(rows["1 load"][:2], ["40.0", "40.0"])
        self.assertEqual(rows["2 solve"][:2], ["60.0", "60.0"])
        self.assertIn("barrier 67", r.stdout)  # 12 of phase 1's 18 samples
        # The inlined helper line counts at its call (line 6: 27 samples), the barrier at line 4 (13).
        self.assertRegex(r.stdout, r"\n\s+6\s+60\.0% \[2 solve")
        self.assertRegex(r.stdout, r"\n\s+4\s+28\.9% \[1 load")

    def test_kernel_selected_by_regex(self):
        r = self.run_tool([section("k()", LAUNCH_A), section("other()", LAUNCH_B)], None, "--kernel", "^other")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("1 launch(es), 25 warp samples", r.stdout)

    def test_listing_of_another_build_is_refused(self):
        other = self.write("o.sass", LISTING.replace("LOP3.LUT R4", "IADD3 R4"))
        r = self.run_tool([section("k()", LAUNCH_A)], other)
        self.assertEqual(r.returncode, 2)
        self.assertIn("another build", r.stderr)
        short = self.write("s.sass", LISTING.split(".L_x_0:")[0])
        r = self.run_tool([section("k()", LAUNCH_A)], short)
        self.assertEqual(r.returncode, 2)
        self.assertIn("4 in the listing", r.stderr)

    def test_malformed_inputs_exit_2(self):
        r = self.run_tool([['"File Name","/x/k.cu"', '"Line No","Source"', '"1","int a;"']])
        self.assertEqual(r.returncode, 2)
        self.assertIn("no 'Kernel Name'", r.stderr)
        r = self.run_tool([section("k()", LAUNCH_A)], self.write("e.sass", "nothing\n"))
        self.assertEqual(r.returncode, 2)
        r = self.run_tool([section("k()", LAUNCH_A)], None, "--kernel", "absent")
        self.assertEqual(r.returncode, 2)


if __name__ == "__main__":
    unittest.main()
