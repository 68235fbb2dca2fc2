#!/usr/bin/env python3
"""CPU tests of scripts/summary.py: the committed results/ (numbers recomputed here from the CSVs),
a results folder with Mamba-2 rows only, and exit status 2 on a malformed CSV."""
import csv
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "summary.py")
RESULTS = os.path.join(HERE, "..", "..", "results")


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


def section(stdout, title_start):
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title_start))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith("  ")), len(lines))
    return lines[start + 1:end]


class Summary(unittest.TestCase):
    def test_committed_results(self):
        r = run("--results", RESULTS, "--wall-s", "600")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("main job wall time 600 s", r.stdout)
        with open(os.path.join(RESULTS, "decode_h200.csv")) as f:
            # Steady-state rows only: a short-context row of kvbuffer runs in direct mode.
            rows = [x for x in csv.DictReader(f)
                    if x["latency_us_median"] and not x.get("note") and (x.get("context_tokens") or "0") == "0"]
        # The baseline is the fastest recurrent decode known: ours in place or out of place, or FLA's.
        with open(os.path.join(RESULTS, "fla_h200.csv")) as f:
            rows += list(csv.DictReader(f))
        rec = min(float(x["latency_us_median"]) for x in rows
                  if x["kernel"] in ("recurrent", "recurrent-oop", "fla-fused-recurrent-vfirst-oop") and x["batch"] == "256")
        kvb = min(float(x["latency_us_median"]) for x in rows if x["kernel"] == "kvbuffer" and x["batch"] == "256")
        gdn = section(r.stdout, "Gated DeltaNet decode")
        line_256 = next(line for line in gdn if line.split()[0] == "256")
        self.assertIn(f"{100 * (1 - kvb / rec):.1f}%", line_256)
        self.assertIn("up to 45.17% lower", r.stdout)
        self.assertIn("(paper: 5x)", r.stdout)

    def mamba2_summary(self, decode_csv):
        """scripts/summary.py on a results folder holding only this decode CSV: its stdout."""
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "decode_h200.csv"), "w") as f:
                f.write(decode_csv)
            r = run("--results", tmp)
            self.assertEqual(r.returncode, 0, r.stderr)
            (line,) = section(r.stdout, "Mamba-2 decode")[1:]
            self.assertEqual(line.split()[:6], ["64", "70.00", "35.00", "[C", "16]", "50.0%"])
            return r.stdout

    def test_mamba2_rows_only(self):
        out = self.mamba2_summary("model,kernel,batch,chunk,latency_us_median,gpu,commit,note\n"
                                  "nemotron-3-nano-30b-a3b,mamba2-recurrent,64,0,70.0,NVIDIA H200,abc,\n"
                                  "nemotron-3-nano-30b-a3b,mamba2-kvbuffer,64,8,40.0,NVIDIA H200,abc,\n"
                                  "nemotron-3-nano-30b-a3b,mamba2-kvbuffer,64,16,35.0,NVIDIA H200,abc,\n"
                                  "nemotron-3-nano-30b-a3b,mamba2-kvbuffer,64,64,,NVIDIA H200,abc,"
                                  "\"skipped: no memory, none\"\n")
        self.assertEqual(section(out, "Gated DeltaNet decode"), ["  no measurement"])

    def test_context_rows_and_measured_rows_with_a_note(self):
        # kvbuf sweep --context: a short-context row (direct mode, faster) is not the steady decode;
        # a measured row whose note only explains (Mamba-2: "z gate ...") is a measurement.
        note = "z gate and dt softplus in the kernel"
        self.mamba2_summary("model,kernel,batch,chunk,latency_us_median,gpu,commit,note,context_tokens\n"
                            f"nemotron-3-nano-30b-a3b,mamba2-recurrent,64,0,70.0,NVIDIA H200,abc,{note},0\n"
                            f"nemotron-3-nano-30b-a3b,mamba2-kvbuffer,64,16,35.0,NVIDIA H200,abc,{note},0\n"
                            f"nemotron-3-nano-30b-a3b,mamba2-kvbuffer,64,16,5.0,NVIDIA H200,abc,{note},4\n")

    def test_clock_limited_rows_are_marked(self):
        # A row timed under the power cap (kvbuf sweep's note, after the Mamba-2 kernels' own) is marked,
        # with a line under its table; the others are not.
        capped = "z gate and dt softplus in the kernel; SM clock held down while timed: power cap in 9 of 20 samples"
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "decode_h200.csv"), "w") as f:
                f.write("model,kernel,batch,chunk,latency_us_median,gpu,commit,note\n"
                        "nemotron-3-nano-30b-a3b,mamba2-recurrent,64,0,70.0,NVIDIA H200,abc,\n"
                        f"nemotron-3-nano-30b-a3b,mamba2-kvbuffer,64,16,35.0,NVIDIA H200,abc,\"{capped}\"\n"
                        "nemotron-3-nano-30b-a3b,mamba2-recurrent,128,0,140.0,NVIDIA H200,abc,\n"
                        "nemotron-3-nano-30b-a3b,mamba2-kvbuffer,128,16,75.0,NVIDIA H200,abc,\n")
            r = run("--results", tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = section(r.stdout, "Mamba-2 decode")
        self.assertEqual(lines[1].split()[:4], ["64", "70.00", "35.00*", "[C"])
        self.assertEqual(lines[2].split()[:4], ["128", "140.00", "75.00", "[C"])
        self.assertIn("* timed with the SM clock held down", lines[3])
        self.assertNotIn("timed with the SM clock held down", "\n".join(section(r.stdout, "Gated DeltaNet decode")))

    def test_a_faster_public_kernel_is_the_baseline(self):
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "decode_h200.csv"), "w") as f:
                f.write("model,kernel,batch,chunk,latency_us_median,gpu,commit\n"
                        "nemotron-3-nano-30b-a3b,mamba2-recurrent,1,0,3.8,NVIDIA H200,abc\n"
                        "nemotron-3-nano-30b-a3b,mamba2-kvbuffer,1,8,4.2,NVIDIA H200,abc\n"
                        "nemotron-3-nano-30b-a3b,mamba2-recurrent,64,0,70.0,NVIDIA H200,abc\n"
                        "nemotron-3-nano-30b-a3b,mamba2-kvbuffer,64,8,35.0,NVIDIA H200,abc\n")
            with open(os.path.join(tmp, "public_mamba2_h200.csv"), "w") as f:
                f.write("model,kernel,chunk,batch,latency_us,gpu,source\n"
                        "nemotron-3-nano-30b-a3b,vllm-selective-state-update,,1,3.5,H200,recorded H200 figure\n"
                        "nemotron-3-nano-30b-a3b,vllm-selective-state-update,,64,71.0,H200,recorded H200 figure\n"
                        "nemotron-3-nano-30b-a3b,replayssm,16,64,49.0,H200,recorded H200 figure\n")
            r = run("--results", tmp)
            self.assertEqual(r.returncode, 0, r.stderr)
            b1, b64 = section(r.stdout, "Mamba-2 decode")[1:]
            self.assertEqual(b1.split()[:5] + b1.split()[-2:], ["1", "3.50", "4.20", "[C", "8]",
                                                                "vllm-selective-state-update", "(published)"])
            self.assertIn("-20.0%", b1)  # 1 - 4.2 / 3.5
            self.assertEqual(b64.split()[1], "70.00")  # ours, faster than vLLM there; ReplaySSM is not recurrent
            self.assertIn("mamba2-recurrent (abc)", b64)

    def test_measured_public_kernels_are_baselines(self):
        # public_GPU.csv (scripts/bench_public.py): its fp32 rows are recurrent baselines of their
        # family (a bf16-state row is not: the sweep's rows are fp32); its FLA rows replace fla_GPU.csv's.
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "decode_h200.csv"), "w") as f:
                f.write("model,kernel,batch,chunk,latency_us_median,gpu,commit\n"
                        "nemotron-3-nano-30b-a3b,mamba2-recurrent,64,0,70.0,NVIDIA H200,abc\n"
                        "nemotron-3-nano-30b-a3b,mamba2-kvbuffer,64,8,35.0,NVIDIA H200,abc\n"
                        "qwen3-next-80b-a3b,recurrent,64,0,68.0,NVIDIA H200,abc\n"
                        "qwen3-next-80b-a3b,kvbuffer,64,8,40.0,NVIDIA H200,abc\n")
            with open(os.path.join(tmp, "public_h200.csv"), "w") as f:
                f.write("model,kernel,package,package_version,state_dtype,batch,latency_us_median,gpu,commit\n"
                        "nemotron-3-nano-30b-a3b,mamba-ssm-selective-state-update,mamba-ssm,2.3.2,fp32,64,60.0,NVIDIA H200,def\n"
                        "nemotron-3-nano-30b-a3b,mamba-ssm-selective-state-update,mamba-ssm,2.3.2,bf16,64,30.0,NVIDIA H200,def\n"
                        "qwen3-next-80b-a3b,fla-fused-recurrent-vfirst-oop,fla-core,0.6.0,fp32,64,69.0,NVIDIA H200,def\n")
            with open(os.path.join(tmp, "fla_h200.csv"), "w") as f:
                f.write("model,kernel,batch,latency_us_median,gpu,commit\n"
                        "qwen3-next-80b-a3b,fla-fused-recurrent-vfirst-oop,64,50.0,NVIDIA H200,old\n")
            r = run("--results", tmp)
            self.assertEqual(r.returncode, 0, r.stderr)
            (m,) = section(r.stdout, "Mamba-2 decode")[1:]
            self.assertEqual(m.split()[:6], ["64", "60.00", "35.00", "[C", "8]", "41.7%"])
            self.assertIn("mamba-ssm-selective-state-update (def)", m)
            (g,) = section(r.stdout, "Gated DeltaNet decode")[1:]
            self.assertIn("recurrent (abc)", g)  # 68 us: FLA's 69 of public_h200.csv, not fla_h200.csv's 50

    def test_published_verify_figures(self):
        # A published verify figure (a T in the drafts column) is compared with KVBuffer verify at that
        # T and batch, and is not a recurrent decode baseline.
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "decode_h200.csv"), "w") as f:
                f.write("model,kernel,batch,chunk,latency_us_median,gpu,commit\n"
                        "nemotron-3-nano-30b-a3b,mamba2-recurrent,64,0,70.0,NVIDIA H200,abc\n"
                        "nemotron-3-nano-30b-a3b,mamba2-kvbuffer,64,8,35.0,NVIDIA H200,abc\n")
            with open(os.path.join(tmp, "verify_h200.csv"), "w") as f:
                f.write("model,method,batch,drafts,chunk,latency_us_median,gpu,commit\n"
                        "nemotron-3-nano-30b-a3b,mamba2-verify-classic,64,5,0,200.0,NVIDIA H200,abc\n"
                        "nemotron-3-nano-30b-a3b,mamba2-verify-kvbuffer,64,5,8,90.0,NVIDIA H200,abc\n"
                        "nemotron-3-nano-30b-a3b,mamba2-verify-kvbuffer,64,5,16,80.0,NVIDIA H200,abc\n")
            with open(os.path.join(tmp, "public_mamba2_h200.csv"), "w") as f:
                f.write("model,kernel,chunk,batch,drafts,latency_us,gpu,source\n"
                        "nemotron-3-nano-30b-a3b,vllm-selective-state-update,,64,,71.0,H200,recorded H200 figure\n"
                        "nemotron-3-nano-30b-a3b,replayssm-verify,,64,5,60.0,H200,recorded H200 figure\n")
            r = run("--results", tmp)
            self.assertEqual(r.returncode, 0, r.stderr)
            (decode_line,) = section(r.stdout, "Mamba-2 decode")[1:]
            self.assertIn("mamba2-recurrent (abc)", decode_line)  # the 60 us verify figure is no decode baseline
            (line,) = section(r.stdout, "Mamba-2 speculative verify against the published")[1:]
            self.assertEqual(line.split(), ["5", "64", "80.00", "[C", "16]", "60.00", "replayssm-verify", "0.75x",
                                            "200.00", "abc"])

    def test_state_dtypes_get_their_own_tables(self):
        # The paper preset writes a model's engine-default (bf16) rows into decode_h200.csv next to the fp32
        # ones: the fp32 table ignores them, the bf16 table takes them, and takes decode16_h200.csv's rows only
        # for a model the main CSV has no bf16 row of. Rows without a state_dtype column are fp32.
        head = "model,kernel,batch,chunk,latency_us_median,gpu,commit,state_dtype\n"
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "decode_h200.csv"), "w") as f:
                f.write(head +
                        "qwen3-next-80b-a3b,recurrent,64,0,70.0,NVIDIA H200,abc,fp32\n"
                        "qwen3-next-80b-a3b,kvbuffer,64,8,40.0,NVIDIA H200,abc,\n"
                        "qwen3-next-80b-a3b,recurrent,64,0,36.0,NVIDIA H200,abc,bf16\n"
                        "qwen3-next-80b-a3b,kvbuffer,64,4,30.0,NVIDIA H200,abc,bf16\n")
            with open(os.path.join(tmp, "decode16_h200.csv"), "w") as f:
                f.write(head +
                        "qwen3-next-80b-a3b,recurrent,64,0,30.0,NVIDIA H200,old,bf16\n"
                        "qwen3-next-80b-a3b,kvbuffer,64,4,20.0,NVIDIA H200,old,bf16\n"
                        "nemotron-3-nano-30b-a3b,mamba2-recurrent,64,0,40.0,NVIDIA H200,old,bf16\n"
                        "nemotron-3-nano-30b-a3b,mamba2-kvbuffer,64,4,36.0,NVIDIA H200,old,bf16\n")
            with open(os.path.join(tmp, "public_16bit_h200.csv"), "w") as f:
                f.write("model,kernel,chunk,batch,state_dtype,latency_us,gpu,source\n"
                        "qwen3-next-80b-a3b,vllm-gdn-packed-decode,,64,bf16,35.0,H200,recorded\n"
                        "qwen3-next-80b-a3b,vllm-gdn-packed-decode,,64,fp16,1.0,H200,recorded\n")
            r = run("--results", tmp)
            self.assertEqual(r.returncode, 0, r.stderr)
            (fp32,) = section(r.stdout, "Gated DeltaNet decode: ")[1:]
            self.assertEqual(fp32.split()[:6], ["64", "70.00", "40.00", "[C", "8]", "42.9%"])
            (bf16,) = section(r.stdout, "Gated DeltaNet decode, bf16 state: ")[1:]
            # Ours from decode_h200.csv (not decode16's faster rows of an older run); vLLM's recorded bf16
            # figure is the fastest recurrent.
            self.assertEqual(bf16.split()[:6], ["64", "35.00", "30.00", "[C", "4]", "14.3%"])
            self.assertIn("vllm-gdn-packed-decode (published)", bf16)
            (m2,) = section(r.stdout, "Mamba-2 decode, bf16 state: ")[1:]
            self.assertEqual(m2.split()[:6], ["64", "40.00", "36.00", "[C", "4]", "10.0%"])
            self.assertNotIn("fp16 state", r.stdout)  # a public figure alone opens no table

    def test_capacity_per_state_dtype(self):
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "capacity_h200.csv"), "w") as f:
                f.write("model,tp,drafts,chunk,state_dtype,ratio_linear,measured_ratio,ratio_linear_allocated,gpu,commit\n"
                        "qwen3-next-80b-a3b,1,4,16,fp32,4.576419,4.4910,4.481505,NVIDIA H200,abc\n"
                        "qwen3-next-80b-a3b,1,4,16,bf16,4.233807,4.0800,4.077596,NVIDIA H200,abc\n"
                        "qwen3-next-80b-a3b,1,5,16,bf16,5.0,4.9,4.8,NVIDIA H200,abc\n")
            r = run("--results", tmp)
            self.assertEqual(r.returncode, 0, r.stderr)
            (fp32,) = section(r.stdout, "Concurrent requests at T = 4, KVBuffer over classic, linear-attention pool, "
                                        "fp32 state (paper: 5x)")[1:]
            self.assertEqual(fp32.split(), ["qwen3-next-80b-a3b", "C", "16,", "tp", "1", "4.49x", "4.58x", "4.48x",
                                            "+0.2%", "abc"])
            (bf16,) = section(r.stdout, "Concurrent requests at T = 4, KVBuffer over classic, linear-attention pool, "
                                        "bf16 state")[1:]
            self.assertEqual(bf16.split()[5:], ["4.08x", "4.23x", "4.08x", "+0.1%", "abc"])
            self.assertNotIn("fp16 state (paper", r.stdout)
        # The committed fp32 measurement predates the allocated-model column: '-' there.
        r = run("--results", RESULTS)
        line = next(x for x in section(r.stdout, "Concurrent requests at T = 4") if "qwen3-next-80b-a3b" in x)
        self.assertEqual(line.split()[5:7], ["4.49x", "4.58x"])

    def test_malformed_csv_exits_2(self):
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "decode_h200.csv"), "w") as f:
                f.write("model,kernel,batch,chunk,latency_us_median,gpu,commit\nm,recurrent,x,0,1.0,g,c\n")
            r = run("--results", tmp)
            self.assertEqual(r.returncode, 2)
            self.assertIn("decode_h200.csv:2: column batch: 'x' is not a number", r.stderr)

    def test_another_gpu_against_the_h200(self):
        header = "model,kernel,batch,chunk,latency_us_median,gpu,commit,note\n"
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "decode_h200.csv"), "w") as f:
                f.write(header + "m,kvbuffer,64,8,30.0,NVIDIA H200,abc,\nm,kvbuffer,64,16,20.0,NVIDIA H200,abc,\n"
                        "m,recurrent,256,0,100.0,NVIDIA H200,abc,\n")
            with open(os.path.join(tmp, "decode_a100-80gb.csv"), "w") as f:
                f.write(header + "m,kvbuffer,64,8,50.0,NVIDIA A100-SXM4-80GB,def,\n"
                        "m,kvbuffer,64,16,60.0,NVIDIA A100-SXM4-80GB,def,\nm,recurrent,128,0,90.0,NVIDIA A100-SXM4-80GB,def,\n")
            r = run("--results", tmp, "--gpu", "a100-80gb")
            self.assertEqual(r.returncode, 0, r.stderr)
            lines = section(r.stdout, "Decode on a100-80gb against the H200")
            # Each GPU's best C (8 on the A100, 16 on the H200); the batches only one GPU measured are left out.
            self.assertEqual(len(lines), 2, lines)
            self.assertEqual(lines[1].split(), ["m", "kvbuffer", "fp32", "64", "50.00", "[C", "8]", "20.00", "[C", "16]",
                                                "2.50x"])
            self.assertEqual(section(r.stdout, "Verify on a100-80gb against the H200"), ["  no measurement"])
            self.assertNotIn("against the H200", run("--results", tmp).stdout)


if __name__ == "__main__":
    unittest.main()
