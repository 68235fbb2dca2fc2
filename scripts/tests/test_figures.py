#!/usr/bin/env python3
"""CPU tests of scripts/figures.py: every figure from the committed CSVs of results/, from tiny
synthetic CSVs that hold every input (Mamba-2 and short-context rows included), the model-only
figures from no GPU CSV at all, and exit status 2 with a message for malformed inputs.

    test_figures.py KVBUF_BINARY
"""
import csv
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "figures.py")
RESULTS = os.path.join(HERE, "..", "..", "results")
KVBUF = None

DECODE_COLUMNS = ["model", "kernel", "variant", "entry_dtype", "placement", "batch", "chunk", "layers", "rows_per_block",
                  "row_groups", "latency_us_median", "latency_us_min", "latency_us_max", "samples",
                  "bytes_per_layer_step", "gbps", "frac_copy_bw", "copy_gbps", "sm_clock_mhz", "power_w", "gpu",
                  "commit", "note", "context_tokens"]


def run(*args):
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True)


def stems(folder):
    names = os.listdir(folder)
    for n in names:
        if n.endswith(".png"):
            assert n[:-4] + ".svg" in names, f"{n} without its SVG"
            assert os.path.getsize(os.path.join(folder, n)) > 10000, f"{n} too small"
    return {n[:-4] for n in names if n.endswith(".png")}


def write_csv(path, columns, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow(r)


def synthetic_results(folder):
    """Tiny inputs of every kind, in the sweep's and the scripts' column layouts."""
    decode = []

    def add(model, kernel, batch, chunk, latency, state_bytes, context=""):
        decode.append({"model": model, "kernel": kernel, "variant": "cached-u", "entry_dtype": "bf16",
                       "placement": "in-place", "batch": batch, "chunk": chunk, "layers": 4, "rows_per_block": 16,
                       "row_groups": 0, "latency_us_median": latency, "latency_us_min": latency,
                       "latency_us_max": latency, "samples": 5, "bytes_per_layer_step": state_bytes * batch,
                       "gbps": state_bytes * batch / latency / 1e3, "frac_copy_bw": 0.5, "copy_gbps": 4000,
                       "sm_clock_mhz": 1980 - batch, "power_w": 100 + batch, "gpu": "Synthetic GPU",
                       "commit": "feedbeef0001", "note": "", "context_tokens": context})

    for fam, model, prefix in (("gdn", "qwen3-next-80b-a3b", ""), ("mamba2", "nemotron-3-nano-30b-a3b", "mamba2-")):
        for b in (1, 8, 64):
            add(model, prefix + "recurrent", b, 0, 2.0 * b + 2, 4e6)
            for c in (2, 4, 8):
                add(model, prefix + "kvbuffer", b, c, 1.2 * b + 2 + c / 8, 2.5e6)
                add(model, prefix + "direct", b, c, 0.3 * b * c / 4 + 1, 0.3e6 * c)
            for ctx in (16, 64, 256, 1024):
                add(model, prefix + "recurrent", b, 0, 2.0 * b + 2, 4e6, ctx)
                add(model, prefix + "direct", b, 64, 0.002 * b * ctx + 1, 12e3 * ctx, ctx)
    skipped = dict(decode[0], latency_us_median="", gbps="", note="skipped: needs 200 GiB")
    write_csv(os.path.join(folder, "decode_syn.csv"), DECODE_COLUMNS, decode + [skipped])
    verify_columns = ["model", "method", "batch", "drafts", "chunk", "layers", "acceptance", "tokens_per_step",
                      "latency_us_median", "latency_us_per_token", "gpu", "commit"]
    verify = []
    for method in ("verify-classic", "verify-classic-inplace", "verify-kvbuffer"):
        for b in (1, 64):
            for T in (1, 2, 4):
                lat = (3 if method != "verify-kvbuffer" else 1.5) * b * (1 + T / 4)
                verify.append({"model": "qwen3-next-80b-a3b", "method": method, "batch": b, "drafts": T,
                               "chunk": 8 if method == "verify-kvbuffer" else 0, "layers": 4, "acceptance": 0.7,
                               "tokens_per_step": 1 + T / 2, "latency_us_median": lat,
                               "latency_us_per_token": lat / (1 + T / 2), "gpu": "Synthetic GPU",
                               "commit": "feedbeef0002"})
    write_csv(os.path.join(folder, "verify_syn.csv"), verify_columns, verify)
    write_csv(os.path.join(folder, "fla_syn.csv"), ["model", "kernel", "batch", "latency_us_median", "gpu", "commit"],
              [{"model": "qwen3-next-80b-a3b", "kernel": "fla", "batch": b, "latency_us_median": 2.1 * b + 2,
                "gpu": "Synthetic GPU", "commit": "feedbeef0003"} for b in (1, 8, 64)])
    write_csv(os.path.join(folder, "public_mamba2_syn.csv"), ["model", "kernel", "chunk", "batch", "latency_us", "gpu",
                                                                "source"],
              [{"model": "nemotron-3-nano-30b-a3b", "kernel": "published", "chunk": "", "batch": b,
                "latency_us": 2.2 * b, "gpu": "H200", "source": "a test"} for b in (1, 8, 64)])
    cap_columns = ["model", "tp", "kind", "drafts", "chunk", "context_tokens", "gpu_memory_bytes", "weight_bytes",
                   "classic_linear_bytes_per_request", "kvbuffer_linear_bytes_per_request",
                   "classic_max_requests_linear", "kvbuffer_max_requests_linear", "ratio_linear",
                   "measured_classic_max_requests", "measured_kvbuffer_max_requests", "measured_ratio", "gpu", "commit"]
    write_csv(os.path.join(folder, "capacity_syn.csv"), cap_columns,
              [{"model": "qwen3-next-80b-a3b", "tp": 1, "kind": "gdn", "drafts": T, "chunk": 16,
                "context_tokens": 32768, "gpu_memory_bytes": 141 * 2 ** 30, "weight_bytes": 0,
                "classic_linear_bytes_per_request": 7.7e7 * (1 + T), "kvbuffer_linear_bytes_per_request": 8.4e7,
                "classic_max_requests_linear": 1960 // (1 + T), "kvbuffer_max_requests_linear": 1793,
                "ratio_linear": (1 + T) * 0.92, "measured_classic_max_requests": 1950 // (1 + T),
                "measured_kvbuffer_max_requests": 1780, "measured_ratio": (1 + T) * 0.9, "gpu": "Synthetic GPU",
                "commit": "feedbeef0004"} for T in (1, 2, 4)])
    ncu_columns = ["model", "kernel", "mode", "batch", "chunk", "drafts", "layers", "steps",
                   "dram_read_bytes_per_layer_step",
                   "dram_write_bytes_per_layer_step", "dram_bytes_per_layer_step", "model_bytes_per_layer_step",
                   "ratio", "gpu", "commit"]
    write_csv(os.path.join(folder, "ncu_bytes_syn.csv"), ncu_columns,
              [{"model": model, "kernel": kernel, "mode": mode, "batch": 64, "chunk": c, "layers": 4, "steps": 8,
                "dram_read_bytes_per_layer_step": 1.5e8, "dram_write_bytes_per_layer_step": 0.2e8,
                "dram_bytes_per_layer_step": 1.7e8, "model_bytes_per_layer_step": 1.6e8, "ratio": 1.0625,
                "gpu": "Synthetic GPU", "commit": "feedbeef0005"}
               for model, prefix in (("qwen3-next-80b-a3b", ""), ("nemotron-3-nano-30b-a3b", "mamba2-"))
               for kernel, mode, chunks in ((prefix + "recurrent", "recurrent", (0,)), (prefix + "kvbuffer", "kvbuffer",
                                                                                      (2, 4, 8)))
               for c in chunks] +
              [{"model": "qwen3-next-80b-a3b", "kernel": "verify-kvbuffer", "mode": "verify-kvbuffer", "batch": 64,
                "chunk": 16, "drafts": 4, "layers": 4, "steps": 16, "dram_read_bytes_per_layer_step": 1.4e8,
                "dram_write_bytes_per_layer_step": 0.4e8, "dram_bytes_per_layer_step": 1.8e8,
                "model_bytes_per_layer_step": 1.81e8, "ratio": 0.9945, "gpu": "Synthetic GPU", "commit": "feedbeef0005"}])
    write_csv(os.path.join(folder, "accuracy_syn.csv"), ACCURACY_COLUMNS, accuracy_rows())
    step_columns = ["model", "tp", "batch", "context", "method", "state_dtype", "chunk", "drafts", "measured_step_us",
                    "simulated_step_us", "measured_speedup", "simulated_speedup", "gpu", "commit", "note"]
    step = []
    for context in (256, 4096):
        for b in (1, 8, 64, 256):
            classic, kvb = 500 + 20 * b + context / 100, 500 + 12 * b + context / 100
            common = {"model": "qwen3.5-0.8b", "tp": 1, "batch": b, "context": context, "state_dtype": "fp32",
                      "drafts": 0, "gpu": "Synthetic GPU", "commit": "feedbeef0008", "note": ""}
            step.append(dict(common, method="classic", chunk=0, measured_step_us=classic, simulated_step_us=classic * 0.9,
                             measured_speedup="", simulated_speedup=""))
            step.append(dict(common, method="kvbuffer", chunk=16, measured_step_us=kvb, simulated_step_us=kvb * 0.9,
                             measured_speedup=classic / kvb, simulated_speedup=classic / kvb * 1.02))
    step.append(dict(step[-1], batch=512, measured_step_us="", simulated_step_us="", measured_speedup="",
                     simulated_speedup="", note="skipped: memory: needs 200 GiB"))
    write_csv(os.path.join(folder, "step_syn.csv"), step_columns, step)


ACCURACY_COLUMNS = ["family", "model", "method", "state_dtype", "entry_dtype", "chunk", "tokens", "out_rel_err",
                    "out_max_abs_err", "window_tokens", "out_rel_err_window", "out_ref_rms", "state_rel_err",
                    "state_rel_err_max_head", "state_rel_err_one_rounding", "state_ref_norm", "seed", "gpu", "commit",
                    "note"]


def accuracy_rows():
    """`kvbuf accuracy` rows of both families: fp32 / bf16 / fp16 states, classic and KVBuffer at C 16 and 48
    (a C that does not divide the sampling interval: no state between folds), GDN also with fp32 entries."""
    rows = []
    for family, model in (("gdn", "qwen3-next-80b-a3b"), ("mamba2", "nemotron-3-nano-30b-a3b")):
        for state, unit in (("fp32", 1e-7), ("bf16", 4e-3), ("fp16", 5e-4)):
            variants = [("recurrent", "none", 0, 1.0), ("kvbuffer", "bf16", 16, 0.3), ("kvbuffer", "bf16", 48, 0.2)]
            if family == "gdn":
                variants.append(("kvbuffer", "fp32", 16, 0.25))
            for method, entry, chunk, scale in variants:
                for t in range(64, 1025, 64):
                    err = unit * scale * (1 + t / 1024)
                    has_state = chunk == 0 or t % chunk == 0
                    rows.append({"family": family, "model": model, "method": method, "state_dtype": state,
                                 "entry_dtype": entry, "chunk": chunk, "tokens": t, "out_rel_err": err,
                                 "out_max_abs_err": err * 4, "window_tokens": 64, "out_rel_err_window": err,
                                 "out_ref_rms": 0.5, "state_rel_err": err * 1.1 if has_state else "",
                                 "state_rel_err_max_head": err * 2 if has_state else "",
                                 "state_rel_err_one_rounding": unit * 0.2 if has_state else "",
                                 "state_ref_norm": 40 if has_state else "", "seed": 1, "gpu": "Synthetic GPU",
                                 "commit": "feedbeef0007", "note": "" if has_state else "no state: S0 between folds"})
    return rows


PER_FAMILY = ("decode_latency", "speedup_vs_chunk", "short_context", "bytes_per_step", "telemetry", "accuracy")


class Figures(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.out = os.path.join(self.tmp.name, "figures")

    def tearDown(self):
        self.tmp.cleanup()

    def test_committed_results(self):
        r = run("--results", RESULTS, "--kvbuf", KVBUF, "--out", self.out)
        self.assertEqual(r.returncode, 0, r.stderr)
        expected = {f"{n}_gdn" for n in PER_FAMILY + ("verify",) if n != "accuracy"} | {
            "capacity", "decode_latency_mamba2", "short_context_mamba2", "bytes_per_step_mamba2"}
        self.assertTrue(expected <= stems(self.out), sorted(stems(self.out)))
        with open(os.path.join(RESULTS, "decode_h200.csv")) as f:
            decode_rows = list(csv.DictReader(f))
        if any(row["kernel"].startswith("mamba2-") for row in decode_rows):
            self.assertIn("speedup_vs_chunk_mamba2", stems(self.out))
        else:
            self.assertIn("decode_latency_mamba2: no measured Mamba-2 rows", r.stdout)
        with open(os.path.join(RESULTS, "verify_h200.csv")) as f:
            mamba2_verify = any(row["method"].startswith("mamba2-") for row in csv.DictReader(f))
        if mamba2_verify:
            self.assertIn("verify_mamba2", stems(self.out))
        else:
            self.assertIn("skip verify_mamba2:", r.stdout)
        # The context rows (the preset's, or a short-context sweep run apart as context_h200.csv) feed the
        # measured latency panels.
        has_context = any((row.get("context_tokens") or "0") != "0" for row in decode_rows)
        if has_context or os.path.isfile(os.path.join(RESULTS, "context_h200.csv")):
            self.assertNotIn("no context_tokens rows", r.stdout)
        # The 16-bit state rows, where measured, stand beside the fp32 ones, named in the caption.
        if os.path.isfile(os.path.join(RESULTS, "decode16_h200.csv")):
            for fam in ("gdn", "mamba2"):
                with open(os.path.join(self.out, f"decode_latency_{fam}.svg")) as f:
                    svg = f.read().replace("\n", "")
                self.assertIn("KVBuffer at its best C, bf16 state", svg)
                self.assertIn("decode16_h200.csv", svg)

    def test_synthetic_results_draw_every_figure(self):
        synthetic_results(self.tmp.name)
        r = run("--results", self.tmp.name, "--gpu", "syn", "--kvbuf", KVBUF, "--out", self.out)
        self.assertEqual(r.returncode, 0, r.stderr)
        expected = {f"{n}_{fam}" for n in PER_FAMILY for fam in ("gdn", "mamba2")} | {"verify_gdn", "capacity", "step"}
        self.assertEqual(stems(self.out), expected, r.stdout)
        with open(os.path.join(self.out, "step.svg")) as f:
            svg = f.read().replace("\n", "")
        for text in ("qwen3.5-0.8b (tp 1, fp32 state)", "context 4096", "paper: up to 1.47x", "feedbeef0008"):
            self.assertIn(text, svg)
        self.assertNotIn("needs GPU sweep", r.stdout)
        self.assertNotIn("no ncu rows", r.stdout)
        with open(os.path.join(self.out, "decode_latency_gdn.svg")) as f:
            svg = f.read()
        self.assertIn("feedbeef0001", svg.replace("\n", ""))  # the caption names the commit (SVG keeps text)
        # The accuracy figure: a row of panels per state dtype, every variant a line, the fp32 floor and
        # one rounding of the exact state beside the 16-bit ones.
        with open(os.path.join(self.out, "accuracy_gdn.svg")) as f:
            svg = f.read()
        for text in ("bf16 state: state error", "fp16 state: output error", "KVBuffer C = 48 (rounds every 48 tokens)",
                     "KVBuffer C = 16 (rounds every 16 tokens), fp32 entries", "fp32 classic recurrent (the floor)",
                     "one bf16 rounding of the exact state", "feedbeef0007"):
            self.assertIn(text, svg.replace("\n", ""))
        with open(os.path.join(self.out, "accuracy_mamba2.svg")) as f:
            self.assertNotIn("fp32 entries", f.read())
        # The bytes figure's last panel lists every kernel measured, verify kernels with their T.
        with open(os.path.join(self.out, "bytes_per_step_gdn.svg")) as f:
            svg = f.read()
        self.assertIn("verify-kvbuffer (T 4)", svg)
        self.assertIn("every kernel measured (decode and verify)", svg)

    def test_published_verify_figures_get_their_own_panel(self):
        # Published verify figures (public_mamba2 rows with a T in the drafts column) are drawn against
        # batch next to ours at that T, and stay out of the decode figure.
        synthetic_results(self.tmp.name)
        verify_path = os.path.join(self.tmp.name, "verify_syn.csv")
        with open(verify_path, newline="") as f:
            verify = list(csv.DictReader(f))
        columns = list(verify[0].keys())
        for method in ("mamba2-verify-classic", "mamba2-verify-kvbuffer"):
            for b in (1, 8, 64):
                for T in (1, 4, 5):
                    lat = (3 if method.endswith("classic") else 1.5) * b * (1 + T / 4)
                    verify.append(dict(verify[0], model="nemotron-3-nano-30b-a3b", method=method, batch=b, drafts=T,
                                       chunk=16 if method.endswith("kvbuffer") else 0, latency_us_median=lat,
                                       latency_us_per_token=lat / (1 + T / 2), commit="feedbeef0006"))
        write_csv(verify_path, columns, verify)
        public = [{"model": "nemotron-3-nano-30b-a3b", "kernel": "vllm-selective-state-update", "chunk": "", "batch": b,
                   "drafts": "", "latency_us": 2.2 * b, "gpu": "H200", "source": "a test"} for b in (1, 8, 64)]
        public += [{"model": "nemotron-3-nano-30b-a3b", "kernel": "replayssm", "chunk": 16, "batch": b,
                    "drafts": "", "latency_us": 1.9 * b, "gpu": "H200", "source": "a test"} for b in (1, 8, 64)]
        public += [{"model": "nemotron-3-nano-30b-a3b", "kernel": kernel, "chunk": "", "batch": b,
                    "drafts": 5, "latency_us": scale * b * 2.25, "gpu": "H200", "source": "a test"}
                   for kernel, scale in (("replayssm-verify", 2.0), ("other-verify", 2.5)) for b in (1, 8, 64)]
        write_csv(os.path.join(self.tmp.name, "public_mamba2_syn.csv"),
                  ["model", "kernel", "chunk", "batch", "drafts", "latency_us", "gpu", "source"], public)
        r = run("--results", self.tmp.name, "--gpu", "syn", "--kvbuf", KVBUF, "--out", self.out,
                "--only", "verify,decode_latency")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("verify_mamba2", stems(self.out), r.stdout)
        with open(os.path.join(self.out, "verify_mamba2.svg")) as f:
            svg = f.read()
        self.assertIn("T = 5 against batch, with the published figures", svg)
        # Labelled by the kernel's name as its users know it (an id without one as it is), with T.
        self.assertIn("ReplaySSM verify, T = 5 (public kernel, recorded H200 figures)", svg)
        self.assertIn("other-verify, T = 5 (public kernel, recorded H200 figures)", svg)
        self.assertRegex(svg, r"recorded\s+public\s+figures:\s+public_mamba2_syn\.csv")  # the caption
        with open(os.path.join(self.out, "decode_latency_mamba2.svg")) as f:
            svg = f.read()
        self.assertIn("vLLM selective_state_update (public kernel, recorded H200 figures)", svg)
        self.assertIn("ReplaySSM decode, L = 16 (public kernel, recorded H200 figures)", svg)
        self.assertNotIn("ReplaySSM verify", svg)
        self.assertNotIn("other-verify", svg)

    def test_measured_public_kernels_are_drawn_by_package(self):
        # public_GPU.csv (scripts/bench_public.py): each kernel with its package version, fp32 rows in
        # the decode figure of its family; FLA's rows there replace fla_GPU.csv's.
        synthetic_results(self.tmp.name)
        columns = ["model", "kernel", "package", "package_version", "state_dtype", "batch", "layers",
                   "latency_us_median", "gpu", "commit"]
        rows = [{"model": m, "kernel": k, "package": p, "package_version": v, "state_dtype": sd, "batch": b,
                 "layers": 4, "latency_us_median": f * b + 1, "gpu": "Synthetic GPU", "commit": "feedbeef0007"}
                for m, k, p, v in (("qwen3-next-80b-a3b", "fla-fused-recurrent-vfirst-oop", "fla-core", "9.9.1"),
                                   ("nemotron-3-nano-30b-a3b", "mamba-ssm-selective-state-update", "mamba-ssm", "9.9.2"))
                for sd, f in (("fp32", 2.0), ("bf16", 1.2)) for b in (1, 8, 64)]
        write_csv(os.path.join(self.tmp.name, "public_syn.csv"), columns, rows)
        r = run("--results", self.tmp.name, "--gpu", "syn", "--kvbuf", KVBUF, "--out", self.out,
                "--only", "decode_latency")
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(self.out, "decode_latency_gdn.svg")) as f:
            gdn = f.read()
        with open(os.path.join(self.out, "decode_latency_mamba2.svg")) as f:
            mamba2 = f.read()
        self.assertIn("FLA fused_recurrent_gated_delta_rule 9.9.1 (public, same method)", gdn)
        self.assertNotIn("fla (public, same method)", gdn)  # fla_syn.csv's rows give way
        self.assertNotIn("mamba-ssm", gdn)
        self.assertIn("mamba-ssm selective_state_update 9.9.2 (public, same method)", mamba2)
        self.assertIn("feedbeef0007", mamba2.replace("\n", ""))  # the caption names the commit

    def test_16bit_rows_stay_out_of_the_fp32_figures(self):
        # The paper preset writes each model's engine-default (bf16) rows into decode_GPU.csv and verify_GPU.csv,
        # `kvbuf capacity --state-dtype all` its 16-bit rows into the capacity CSV and ncu_bytes.py --state-dtype
        # bf16 its rows into the ncu CSV: the figures (fp32, as their modelled lines) leave them out.
        synthetic_results(self.tmp.name)
        bf16_commit = "b16b16b16b16"
        for name in ("decode_syn.csv", "verify_syn.csv", "capacity_syn.csv", "ncu_bytes_syn.csv"):
            path = os.path.join(self.tmp.name, name)
            with open(path, newline="") as f:
                rows = list(csv.DictReader(f))
            columns = list(rows[0].keys()) + ["state_dtype"]
            fast = [dict(r, state_dtype="bf16", commit=bf16_commit) for r in rows]
            for r in fast:
                for c in ("latency_us_median", "latency_us_per_token"):
                    if r.get(c):
                        r[c] = float(r[c]) / 10
            write_csv(path, columns, [dict(r, state_dtype="fp32" if i % 2 else "") for i, r in enumerate(rows)] + fast)
        r = run("--results", self.tmp.name, "--gpu", "syn", "--kvbuf", KVBUF, "--out", self.out,
                "--only", "decode_latency,verify,capacity,bytes_per_step")
        self.assertEqual(r.returncode, 0, r.stderr)
        for stem in ("decode_latency_gdn", "verify_gdn", "capacity", "bytes_per_step_gdn"):
            with open(os.path.join(self.out, stem + ".svg")) as f:
                svg = f.read().replace("\n", "")
            self.assertNotIn(bf16_commit, svg, stem)
            self.assertRegex(svg, "feedbeef000[1-5]", stem)  # the fp32 rows, with or without the column

    def test_model_only_figures_need_no_gpu_csv(self):
        r = run("--results", self.tmp.name, "--kvbuf", KVBUF, "--out", self.out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(stems(self.out), {"capacity", "short_context_gdn", "short_context_mamba2",
                                           "bytes_per_step_gdn", "bytes_per_step_mamba2"}, r.stdout)
        self.assertIn("skip decode_latency_gdn:", r.stdout)
        self.assertIn("skip accuracy_gdn: no Gated DeltaNet rows in", r.stdout)

    def test_decode_csv_without_telemetry_columns(self):
        old = os.path.join(RESULTS, "archive", "decode_h200_1221994.csv")  # written before sm_clock_mhz and power_w
        r = run("--results", self.tmp.name, "--decode", old, "--out", self.out, "--only", "telemetry,decode_latency")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(stems(self.out), {"telemetry_gdn", "decode_latency_gdn"}, r.stdout)
        with open(os.path.join(self.out, "telemetry_gdn.svg")) as f:
            self.assertIn("no sm_clock_mhz / power_w values", f.read())

    def test_clock_limited_rows_are_ringed(self):
        # A row whose note says the SM clock was held down gets a ring and a legend entry in its
        # family's telemetry figure; the other family's figure has neither.
        synthetic_results(self.tmp.name)
        path = os.path.join(self.tmp.name, "decode_syn.csv")
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        for r in rows:
            if r["kernel"] == "recurrent" and r["batch"] == "64" and not r["context_tokens"]:
                r["note"] = "SM clock held down while timed: power cap in 4 of 5 samples"
        write_csv(path, DECODE_COLUMNS, rows)
        r = run("--results", self.tmp.name, "--gpu", "syn", "--out", self.out, "--only", "telemetry")
        self.assertEqual(r.returncode, 0, r.stderr)
        svgs = {}
        for fam in ("gdn", "mamba2"):
            with open(os.path.join(self.out, f"telemetry_{fam}.svg")) as f:
                svgs[fam] = f.read().replace("\n", "")
        self.assertIn("timed with the SM clock held down", svgs["gdn"])
        self.assertNotIn("timed with the SM clock held down", svgs["mamba2"])

    def test_without_kvbuf_model_only_figures_are_skipped_with_a_reason(self):
        r = run("--results", self.tmp.name, "--out", self.out)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertFalse(os.path.exists(self.out) and stems(self.out))
        self.assertIn("skip capacity: no capacity model: give --kvbuf", r.stdout)

    def malformed(self, text, message):
        path = os.path.join(self.tmp.name, "decode_bad.csv")
        with open(path, "w") as f:
            f.write(text)
        r = run("--results", self.tmp.name, "--decode", path, "--out", self.out, "--only", "decode_latency")
        self.assertEqual(r.returncode, 2, (r.stdout, r.stderr))
        self.assertIn(message, r.stderr)

    def test_malformed_inputs_exit_2(self):
        header = ",".join(DECODE_COLUMNS)
        good = "m,recurrent,none,none,in-place,1,0,4,16,0,3.5,3.4,3.6,5,4e6,1100,0.25,4200,1980,130,G,c1,,"
        self.malformed("", "decode_bad.csv: empty file")
        self.malformed("model,kernel\nm,recurrent\n", "decode_bad.csv: lacks columns batch, bytes_per_layer_step")
        self.malformed(f"{header}\n{good}\n{good.replace(',3.5,', ',fast,')}\n",
                       "decode_bad.csv:3: column latency_us_median: 'fast' is not a number")
        self.malformed(f"{header}\n{good},extra\n", "decode_bad.csv:2: more cells than the header")
        self.malformed(f"{header}\n{good.replace(',3.5,', ',-1,')}\n", "latency_us_median must be positive")

    def test_bad_arguments_exit_2(self):
        for args, message in ((("--only", "everything"), "--only: unknown figures everything"),
                              (("--formats", "gif"), "--formats"),
                              (("--decode", os.path.join(self.tmp.name, "absent.csv")), "absent.csv: no such file"),
                              (("--kvbuf", os.path.join(self.tmp.name, "absent")), "not an executable file")):
            r = run("--results", self.tmp.name, "--out", self.out, *args)
            self.assertEqual(r.returncode, 2, (args, r.stdout, r.stderr))
            self.assertIn(message, r.stderr)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    KVBUF = sys.argv.pop(1)
    unittest.main()
