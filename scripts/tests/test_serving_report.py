#!/usr/bin/env python3
"""ctest entry: serving_report.py regenerates every table from a copy of the committed measured CSVs
and calibration (a row per model and context, speedups that parse, both serving runs with their
timelines and figures), and with no measured tables marks every linear-attention time modelled.
Usage: test_serving_report.py KVBUF"""
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


def report(kvbuf, results):
    subprocess.run([sys.executable, SCRIPT, "--kvbuf", kvbuf, "--results", results], check=True,
                   stdout=subprocess.DEVNULL)
    with open(os.path.join(results, "serving_tables.md")) as f:
        return f.read()


def speedup_rows(text):
    return [line for line in text.splitlines() if re.match(r"\| [\w.-]+ \(\d+\) \| \d+ \|", line)]


def main():
    kvbuf = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        measured = os.path.join(tmp, "measured")
        os.mkdir(measured)
        for f in glob.glob(os.path.join(RESULTS, "*_h200.csv")) + glob.glob(os.path.join(RESULTS, "calibrate_*.json")):
            shutil.copy(f, measured)
        text = report(kvbuf, measured)
        rows = speedup_rows(text)
        assert len(rows) == len(serving_report.STEP_MODELS) * len(serving_report.STEP_CONTEXTS), rows
        for row in rows:
            cells = re.findall(r"(\d+\.\d+)x ([meM])", row)
            assert len(cells) == len(serving_report.STEP_BATCHES), row
            assert all(0.5 < float(v) < 3 for v, _ in cells), row
        assert all(" m |" in r for r in rows if r.startswith("| qwen3.5-9b")), "GDN rows should be measured"
        assert "calibrated on" in text, "the committed calibration was not applied"
        for model in serving_report.SERVING_MODELS:
            assert os.path.getsize(os.path.join(measured, f"serving_{model}_t4.png")) > 10000, model
            assert re.search(rf"\| {re.escape(model)} \| kvbuffer \| \d+ \(\d+\.\d+x\)", text), model
        assert "largest error" in text and "| held-out batch |" in text, "no held-out check"

        empty = os.path.join(tmp, "empty")
        os.mkdir(empty)
        text = report(kvbuf, empty)
        assert all(re.findall(r"\d\.\d+x ([meM])", r) == ["M"] * len(serving_report.STEP_BATCHES)
                   for r in speedup_rows(text)), "without tables every time is modelled"
        assert "not available" in text and "no measured tables" in text
    print("serving_report.py: ok")


if __name__ == "__main__":
    main()
