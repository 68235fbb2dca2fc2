#!/usr/bin/env python3
"""ctest entry: serving_report.py regenerates every table from a copy of the committed measured CSVs
and calibration, a section per state dtype (fp32 and bf16 by default: a row per model and context,
speedups that parse, both serving runs with their timelines and figures, the held-out checks, the
measured tables and the commits of their rows named), and with no measured tables marks every
linear-attention time modelled.
Usage: test_serving_report.py KVBUF"""
import csv
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "serving_report.py")
RESULTS = os.path.join(HERE, "..", "..", "results")
sys.path.insert(0, os.path.join(HERE, ".."))
import serving_report  # noqa: E402


def report(kvbuf, results, *extra):
    subprocess.run([sys.executable, SCRIPT, "--kvbuf", kvbuf, "--results", results, *extra], check=True,
                   stdout=subprocess.DEVNULL)
    with open(os.path.join(results, "serving_tables.md")) as f:
        return f.read()


def speedup_rows(text):
    return [line for line in text.splitlines() if re.match(r"\| [\w.-]+ \(\d+\) \| \d+ \|", line)]


def sections(text):
    """State dtype -> the text of its section (## <dtype> states)."""
    parts = re.split(r"^## (\w+) states$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def commits(path, state, prefix):
    """The commits of a measured table's rows of one state dtype and family (kernel or method prefix)."""
    with open(path, newline="") as f:
        return {r["commit"] for r in csv.DictReader(f)
                if (r.get("state_dtype") or "fp32") == state and r["latency_us_median"]
                and (r.get("kernel") or r.get("method")).startswith(prefix)}


def main():
    kvbuf = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        measured = os.path.join(tmp, "measured")
        os.mkdir(measured)
        for f in glob.glob(os.path.join(RESULTS, "*_h200.csv")) + glob.glob(os.path.join(RESULTS, "calibrate_*.json")):
            shutil.copy(f, measured)
        text = report(kvbuf, measured)
        by_state = sections(text)
        assert list(by_state) == list(serving_report.DEFAULT_STATE_DTYPES), list(by_state)
        for state, part in by_state.items():
            rows = speedup_rows(part)
            assert len(rows) == len(serving_report.STEP_MODELS) * len(serving_report.STEP_CONTEXTS), (state, rows)
            for row in rows:
                cells = re.findall(r"(\d+\.\d+)x ([meM])", row)
                assert len(cells) == len(serving_report.STEP_BATCHES), row
                assert all(0.5 < float(v) < 3 for v, _ in cells), row
            assert all(" m |" in r for r in rows if r.startswith("| qwen3.5-9b")), f"{state}: GDN rows should be measured"
            for model in serving_report.SERVING_MODELS:
                suffix = "" if state == "fp32" else f"_{state}"
                assert os.path.getsize(os.path.join(measured, f"serving_{model}_t4{suffix}.png")) > 10000, model
                with open(os.path.join(measured, f"serving_{model}_kvbuffer_t4{suffix}.csv")) as f:
                    assert f.readline().rstrip().endswith(",state_dtype") and f.readline().rstrip().endswith("," + state)
                assert re.search(rf"\| {re.escape(model)} \| kvbuffer \| \d+ \(\d+\.\d+x\)", part), model
            assert "largest error" in part and "| held-out batch |" in part, f"{state}: no held-out check"
            assert f"{state} states" in part, state  # the capacity and held-out outputs name the state dtype
            # The provenance line names every commit of the rows the simulator reads, per family.
            decode_file, verify_file = serving_report.TABLES[state]
            line = next(x for x in part.splitlines() if x.startswith("Measured tables"))
            for name in (decode_file, verify_file):
                for c in commits(os.path.join(RESULTS, name), state, "mamba2-"):
                    assert c in line, (state, name, c, line)
            assert f"`{decode_file}` (GDN " in line and f"`{verify_file}` (GDN " in line, line
        assert "--state-dtype bf16 --csv results/serving_<model>_<method>_t4_bf16.csv" in by_state["bf16"]
        assert "--state-dtype" not in by_state["fp32"].split("### Held-out")[0]
        assert "calibrated on" in text, "the committed calibration was not applied"

        empty = os.path.join(tmp, "empty")
        os.mkdir(empty)
        text = report(kvbuf, empty, "--state-dtype", "bf16")
        assert list(sections(text)) == ["bf16"]
        assert all(re.findall(r"\d\.\d+x ([meM])", r) == ["M"] * len(serving_report.STEP_BATCHES)
                   for r in speedup_rows(text)), "without tables every time is modelled"
        assert "not available" in text and "no measured tables" in text
        assert "`decode16_h200.csv`: no bf16 rows (modelled)" in text
    print("serving_report.py: ok")


if __name__ == "__main__":
    main()
