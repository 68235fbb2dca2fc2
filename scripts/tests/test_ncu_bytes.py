#!/usr/bin/env python3
"""CPU tests of scripts/ncu_bytes.py (no GPU, no ncu): its arguments, the ncu commands it would run,
and the join of a saved raw export (scripts/tests/data/ncu_raw_kvbuffer_b4_c2.csv, hand-written in
ncu's layout) with a sweep CSV: whole fill cycles of the timed graph, units scaled, ratio to the model.

    test_ncu_bytes.py
"""
import csv
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "ncu_bytes.py")
RAW = os.path.join(HERE, "data", "ncu_raw_kvbuffer_b4_c2.csv")
SWEEP = os.path.join(HERE, "data", "sweep_kvbuffer_b4_c2.csv")


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


class NcuBytes(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.out = os.path.join(self.tmp.name, "out.csv")

    def tearDown(self):
        self.tmp.cleanup()

    def join(self, raw=RAW, sweep=SWEEP, kernel="kvbuffer", batch="4", chunk="2"):
        return run("--from-export", raw, "--sweep-csv", sweep, "--kernels", kernel, "--batch", batch, "--chunk", chunk,
                   "--out", self.out)

    def write(self, name, text):
        path = os.path.join(self.tmp.name, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_join_takes_whole_cycles_of_the_timed_graph(self):
        r = self.join()
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.out) as f:
            (row,) = list(csv.DictReader(f))
        # The graph ran 29 steps; the last 28 (14 cycles of C = 2) count, 3 layers each:
        # reads 14 x (3000 + 1000) Kbyte, writes 14 x (600000 + 2400000) bytes.
        steps, layers = 28, 3
        read = 14 * (3000 + 1000) * 1e3 / (steps * layers)
        write = 14 * (600000 + 2400000) / (steps * layers)
        self.assertEqual(int(row["steps"]), steps)
        self.assertEqual(int(row["layers"]), layers)
        self.assertAlmostEqual(float(row["dram_read_bytes_per_layer_step"]), read, delta=1)
        self.assertAlmostEqual(float(row["dram_write_bytes_per_layer_step"]), write, delta=1)
        self.assertAlmostEqual(float(row["ratio"]), (read + write) / 1.6e6, places=3)
        self.assertEqual((row["mode"], row["gpu"], row["commit"]), ("kvbuffer", "NVIDIA H200", "abcdef123456"))

    def test_l2_sectors_next_to_the_dram_bytes(self):
        # The fixture with the two L2 metrics appended (sectors of 32 bytes): each graph launch asks L2 for
        # 5000 read and 1000 write sectors, so the row gives 14 x 2 x 5000 x 32 / (28 x 3) read bytes.
        with open(RAW) as f:
            lines = f.read().splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
        out = lines[:start] + [lines[start] + ',"lts__t_sectors_op_read.sum","lts__t_sectors_op_write.sum"',
                               lines[start + 1] + ',"sector","sector"']
        out += [line + (',"5,000","1000"' if '"graph"' in line else ',"7","3"') for line in lines[start + 2:] if line]
        r = self.join(raw=self.write("l2.csv", "\n".join(out) + "\n"))
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.out) as f:
            (row,) = list(csv.DictReader(f))
        self.assertAlmostEqual(float(row["l2_read_bytes_per_layer_step"]), 28 * 5000 * 32 / 84, delta=1)
        self.assertAlmostEqual(float(row["l2_write_bytes_per_layer_step"]), 28 * 1000 * 32 / 84, delta=1)
        r = self.join()  # an export without them leaves the cells empty
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.out) as f:
            (row,) = list(csv.DictReader(f))
        self.assertEqual((row["l2_read_bytes_per_layer_step"], row["l2_write_bytes_per_layer_step"]), ("", ""))

    def test_real_h200_export(self):
        # ncu 2025.3's export of `kvbuf sweep --kernels recurrent --batch 64` (e3456c7, trimmed to the
        # identity columns and the two metrics): 30 graph launches of one 36-layer step; the recurrent
        # step reads and writes each 2 MiB state once, so measured and modelled bytes agree closely.
        r = self.join(raw=os.path.join(HERE, "data", "ncu_raw_h200_recurrent_b64.csv"),
                      sweep=os.path.join(HERE, "data", "sweep_h200_recurrent_b64.csv"), kernel="recurrent",
                      batch="64", chunk="1")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.out) as f:
            (row,) = list(csv.DictReader(f))
        self.assertEqual((int(row["steps"]), int(row["layers"])), (30, 36))
        self.assertGreater(float(row["dram_read_bytes_per_layer_step"]), 64 * 2 ** 21)
        self.assertAlmostEqual(float(row["ratio"]), 1.0, delta=0.01)

    def test_dry_run_prints_one_ncu_run_per_point(self):
        work = os.path.join(self.tmp.name, "work")
        r = run("--kvbuf", "/opt/kvbuf", "--kernels", "recurrent,direct", "--batch", "1,64", "--chunk", "8,16",
                "--out", self.out, "--dry-run", "--work", work)
        self.assertEqual(r.returncode, 0, r.stderr)
        profiles = [line for line in r.stdout.splitlines() if " sweep " in line]
        self.assertEqual(len(profiles), 2 + 4, r.stdout)  # recurrent once per batch, direct per batch and C
        for line in profiles:
            self.assertIn("--clock-control none --graph-profiling graph", line)
            self.assertIn("dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sectors_op_read.sum", line)
            self.assertIn("--budget-s 0.001 --max-point-s 100000", line)  # profiling must not skip the point
        self.assertIn("--kernels direct --batch 64 --chunk 16", r.stdout)
        self.assertIn("--csv --page raw --print-units base", r.stdout)
        self.assertFalse(os.path.exists(self.out) or os.path.exists(work))  # a dry run writes nothing

    def test_state_dtype_picks_the_sweep_row_of_that_type(self):
        # A sweep CSV with the state_dtype column (every sweep since the axis) holds a row per state dtype; the
        # join takes the model's bytes of the row of --state-dtype and names it in the output's column.
        with open(SWEEP) as f:
            header, fp32_row = f.read().splitlines()[:2]
        bf16_row = fp32_row.replace(",1.6e+06,", ",8e+05,")
        sweep = self.write("sweep16.csv", "\n".join([header + ",state_dtype", fp32_row + ",fp32", bf16_row + ",bf16"]) + "\n")
        ratios = {}
        for state in ("fp32", "bf16"):
            r = run("--from-export", RAW, "--sweep-csv", sweep, "--kernels", "kvbuffer", "--batch", "4", "--chunk", "2",
                    "--state-dtype", state, "--out", self.out)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(self.out) as f:
                (row,) = list(csv.DictReader(f))
            self.assertEqual(row["state_dtype"], state)
            ratios[state] = float(row["ratio"])
        self.assertAlmostEqual(float(row["model_bytes_per_layer_step"]), 8e5)
        self.assertAlmostEqual(ratios["bf16"], 2 * ratios["fp32"], places=3)
        # The old sweep CSV (no state_dtype column) holds fp32 rows: the default finds its row, bf16 does not.
        r = self.join()
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(self.out) as f:
            self.assertEqual(list(csv.DictReader(f))[0]["state_dtype"], "fp32")
        r = run("--from-export", RAW, "--sweep-csv", SWEEP, "--kernels", "kvbuffer", "--batch", "4", "--chunk", "2",
                "--state-dtype", "bf16", "--out", self.out)
        self.assertEqual(r.returncode, 2)
        self.assertIn("no measured row for kvbuffer batch 4 chunk 2 state bf16", r.stderr)
        r = run("--from-export", RAW, "--sweep-csv", sweep, "--kernels", "kvbuffer", "--batch", "4", "--chunk", "2",
                "--state-dtype", "fp32,bf16", "--out", self.out)
        self.assertEqual(r.returncode, 2)
        self.assertIn("one state dtype", r.stderr)

    def test_dry_run_passes_the_state_dtype_to_the_sweep(self):
        r = run("--kvbuf", "/opt/kvbuf", "--kernels", "recurrent,kvbuffer,mamba2-verify-kvbuffer", "--model",
                "qwen3-next-80b-a3b", "--batch", "64,256", "--chunk", "2,8", "--drafts", "4", "--state-dtype",
                "bf16,fp16,bf16", "--out", self.out, "--dry-run", "--work", "W")
        self.assertEqual(r.returncode, 0, r.stderr)
        profiles = [line for line in r.stdout.splitlines() if " sweep " in line]
        # Per state dtype: recurrent 2 batches, kvbuffer 2 x 2 C, the verify only at C 8 (T 4 > C 2).
        self.assertEqual(len(profiles), 2 * (2 + 4 + 2), r.stdout)
        self.assertEqual(sum("--state-dtype bf16 " in line for line in profiles), 8)
        self.assertEqual(sum("--state-dtype fp16 " in line for line in profiles), 8)
        self.assertIn("--export W/kvbuffer_b256_c8_bf16 ", r.stdout)
        self.assertIn("W/recurrent_b64_c0_fp16_sweep.csv", r.stdout)
        # The default is fp32, passed as such, its files named as before.
        r = run("--kvbuf", "/opt/kvbuf", "--kernels", "recurrent", "--batch", "64", "--out", self.out, "--dry-run",
                "--work", "W")
        self.assertIn("--state-dtype fp32 ", r.stdout)
        self.assertIn("--export W/recurrent_b64_c0 ", r.stdout)

    def test_bad_arguments_exit_2(self):
        for args in (("--kernels", "verify-kvbuffer-tree"), ("--batch", "0"), ("--chunk", "x"), ("--drafts", "0"),
                     ("--state-dtype", "fp32,fp8")):
            r = run("--kvbuf", "k", "--out", self.out, "--dry-run", *args)
            self.assertEqual(r.returncode, 2, (args, r.stdout, r.stderr))
            self.assertIn(f"ncu_bytes.py: {args[0]}", r.stderr)
        r = run("--out", self.out)
        self.assertEqual(r.returncode, 2)
        self.assertIn("give --kvbuf", r.stderr)

    def test_dry_run_of_verify_points(self):
        r = run("--kvbuf", "/opt/kvbuf", "--kernels", "verify-classic-inplace,verify-kvbuffer", "--batch", "64",
                "--chunk", "4,8", "--drafts", "4,5", "--out", self.out, "--dry-run")
        self.assertEqual(r.returncode, 0, r.stderr)
        profiles = [line for line in r.stdout.splitlines() if " sweep " in line]
        # classic: T 4, 5 at chunk 0; kvbuffer: (C 4, T 4), (C 8, T 4), (C 8, T 5); T 5 > C 4 is skipped.
        self.assertEqual(len(profiles), 2 + 3, r.stdout)
        self.assertIn("--kernels verify-kvbuffer --batch 64 --chunk 8 ", r.stdout)
        self.assertNotIn("verify-kvbuffer_b64_c4_t5", r.stdout)
        self.assertTrue(all("--drafts" in line for line in profiles))

    def test_dry_run_of_mamba2_verify_points(self):
        r = run("--kvbuf", "/opt/kvbuf", "--model", "nemotron-3-nano-30b-a3b", "--kernels",
                "mamba2-verify-classic,mamba2-verify-kvbuffer", "--batch", "64,256", "--chunk", "16", "--drafts", "4",
                "--out", self.out, "--dry-run")
        self.assertEqual(r.returncode, 0, r.stderr)
        profiles = [line for line in r.stdout.splitlines() if " sweep " in line]
        self.assertEqual(len(profiles), 2 * 2, r.stdout)
        self.assertTrue(all("--drafts 4" in line for line in profiles))

    def test_a_failing_point_is_a_row_with_the_reason(self):
        r = run("--kvbuf", "/opt/kvbuf", "--ncu", "/bin/false", "--kernels", "recurrent,kvbuffer", "--batch", "64",
                "--chunk", "8", "--out", self.out, "--work", os.path.join(self.tmp.name, "work"))
        self.assertEqual(r.returncode, 1, r.stderr)
        with open(self.out) as f:
            rows = list(csv.DictReader(f))
        self.assertEqual([(x["kernel"], x["batch"], x["chunk"], x["state_dtype"]) for x in rows],
                         [("recurrent", "64", "0", "fp32"), ("kvbuffer", "64", "8", "fp32")])
        self.assertTrue(all(x["note"].startswith("not measured: kvbuf sweep under ncu exited 1") for x in rows), rows)
        self.assertTrue(all(x["ratio"] == "" for x in rows))

    def test_point_missing_from_the_sweep_csv(self):
        r = self.join(chunk="4")  # the sweep skipped C = 4
        self.assertEqual(r.returncode, 2)
        self.assertIn("no measured row for kvbuffer batch 4 chunk 4", r.stderr)

    def test_export_without_graph_workloads(self):
        with open(RAW) as f:
            text = "".join(line for line in f if '"graph"' not in line)
        r = self.join(raw=self.write("nograph.csv", text))
        self.assertEqual(r.returncode, 2)
        self.assertIn("no CUDA graph workloads", r.stderr)

    def test_export_without_the_metrics(self):
        r = self.join(raw=self.write("nometric.csv", '"ID","Kernel Name","dram__bytes_read.sum"\n"0","k","1"\n'))
        self.assertEqual(r.returncode, 2)
        self.assertIn("lacks dram__bytes_write.sum", r.stderr)

    def test_malformed_value_names_its_line(self):
        with open(RAW) as f:
            lines = f.readlines()
        lines[-1] = lines[-1].replace('"1,000.00"', '"lots"')
        r = self.join(raw=self.write("bad.csv", "".join(lines)))
        self.assertEqual(r.returncode, 2)
        self.assertIn(f"bad.csv:{len(lines)}: dram__bytes_read.sum: 'lots' is not a number", r.stderr)

    def test_not_an_ncu_export(self):
        r = self.join(raw=self.write("plain.csv", "a,b\n1,2\n"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("no ncu raw CSV header", r.stderr)


if __name__ == "__main__":
    unittest.main()
