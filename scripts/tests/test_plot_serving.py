#!/usr/bin/env python3
"""ctest entry: plot_serving.py draws a figure from a real `kvbuf simulate --csv` timeline and
refuses a CSV that is not one. Usage: test_plot_serving.py KVBUF"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PLOT = os.path.join(HERE, "..", "plot_serving.py")


def main():
    kvbuf = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        runs = []
        for method in ("classic", "kvbuffer"):
            csv_path = os.path.join(tmp, f"{method}.csv")
            subprocess.run([kvbuf, "simulate", "--model", "qwen3.5-9b", "--method", method, "--rate", "20",
                            "--duration", "5", "--seed", "3", "--csv", csv_path], check=True,
                           stdout=subprocess.DEVNULL)
            runs.append(csv_path)
        png = os.path.join(tmp, "t.png")
        subprocess.run([sys.executable, PLOT, *runs, "--out", png], check=True, stdout=subprocess.DEVNULL)
        assert os.path.getsize(png) > 10000, "figure too small"
        bad = os.path.join(tmp, "bad.csv")
        with open(bad, "w") as f:
            f.write("a,b\n1,2\n")
        r = subprocess.run([sys.executable, PLOT, bad, "--out", png], capture_output=True, text=True)
        assert r.returncode != 0 and "not a kvbuf simulate timeline" in r.stderr, r.stderr
    print("plot_serving.py: ok")


if __name__ == "__main__":
    main()
