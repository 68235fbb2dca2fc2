#!/usr/bin/env python3
"""CPU tests of scripts/accuracy_table.py: the markdown tables of a synthetic `kvbuf accuracy` CSV (every
variant a row in order, a "-" where the CSV holds no value), --out, and exit status 2 with a message
for a missing or malformed CSV and bad arguments.

    test_accuracy_table.py
"""
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "accuracy_table.py")
sys.path.insert(0, HERE)
from test_figures import ACCURACY_COLUMNS, accuracy_rows, write_csv  # noqa: E402


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


class AccuracyTable(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.csv = os.path.join(self.tmp.name, "accuracy_syn.csv")
        write_csv(self.csv, ACCURACY_COLUMNS, accuracy_rows())

    def tearDown(self):
        self.tmp.cleanup()

    def test_tables(self):
        r = run("--results", self.tmp.name, "--gpu", "syn", "--tokens", "128,1024,16384")
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertIn("**Gated DeltaNet, qwen3-next-80b-a3b** (`accuracy_syn.csv`: Synthetic GPU, commit feedbeef0007; "
                      "seed 1; errors relative to the float64 reference)", lines)
        self.assertIn("**Mamba-2, nemotron-3-nano-30b-a3b**", r.stdout)
        head = "| state | method | C | output @ 128 | output @ 1024 | output @ 16384 | state @ 128 | state @ 1024 | " \
               "state @ 16384 |"
        self.assertEqual(lines.count(head), 2)
        rows = [line for line in lines if line.startswith("| ") and line != head]
        # GDN: 3 states x (recurrent, C 16, C 48, C 16 fp32 entries); Mamba-2 without the fp32 entries.
        self.assertEqual(len(rows), 3 * 4 + 3 * 3)
        self.assertTrue(rows[0].startswith("| fp32 | classic recurrent | - | "), rows[0])
        self.assertTrue(rows[1].startswith("| fp32 | KVBuffer | 16 | "), rows[1])
        self.assertTrue(rows[3].startswith("| fp32 | KVBuffer, fp32 entries | 16 | "), rows[3])
        self.assertTrue(rows[4].startswith("| bf16 | classic recurrent | - | "), rows[4])
        # bf16 recurrent: err = 4e-3 (1 + t / 1024); the state 1.1 times it; no row at 16384 tokens.
        self.assertEqual(rows[4], "| bf16 | classic recurrent | - | 4.50e-03 | 8.00e-03 | - | 4.95e-03 | 8.80e-03 | - |")
        # C = 48 holds a whole state at 48-token folds only: 1024 is not one of them, 192 would be.
        c48 = next(line for line in rows if line.startswith("| bf16 | KVBuffer | 48 | "))
        self.assertEqual(c48.split(" | ")[-2:], ["-", "- |"])

    def test_out_file(self):
        out = os.path.join(self.tmp.name, "table.md")
        r = run("--csv", self.csv, "--out", out)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(out) as f:
            self.assertIn("| state | method | C | output @ 1024 | output @ 4096 | output @ 16384 |", f.read())

    def test_bad_inputs_exit_2(self):
        bad = os.path.join(self.tmp.name, "bad.csv")
        with open(bad, "w") as f:
            f.write("family,model\ngdn,m\n")
        empty = os.path.join(self.tmp.name, "empty.csv")
        write_csv(empty, ACCURACY_COLUMNS, [])
        for args, message in ((("--csv", os.path.join(self.tmp.name, "absent.csv")), "absent.csv: no such file"),
                              (("--csv", bad), "bad.csv: lacks columns"),
                              (("--csv", empty), "empty.csv: no rows"),
                              (("--csv", self.csv, "--tokens", "1024,x"), "--tokens: expected"),
                              (("--csv", self.csv, "--tokens", "0"), "--tokens: expected")):
            r = run(*args)
            self.assertEqual(r.returncode, 2, (args, r.stdout, r.stderr))
            self.assertIn(message, r.stderr)


if __name__ == "__main__":
    unittest.main()
