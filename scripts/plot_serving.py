#!/usr/bin/env python3
"""Plot `kvbuf simulate --csv` timelines: running requests, memory and throughput over time.

Usage: plot_serving.py TIMELINE.csv [TIMELINE.csv ...] --out FIGURE.png
Each CSV is one simulation (one model, GPU, method); the runs are overlaid, labelled by method,
C and T from the CSV's own columns. Throughput is output tokens per second over windows of
--window-s simulated seconds.
"""
import argparse
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLUMNS = ("time_s", "step_us", "prefill_us", "running", "waiting", "tokens", "memory_bytes", "model", "gpu", "tp",
           "method", "chunk", "drafts", "acceptance")


def read_timeline(path):
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            sys.exit(f"plot_serving.py: {path}: not a kvbuf simulate timeline (missing {', '.join(missing)})")
        rows = list(reader)
    if not rows:
        sys.exit(f"plot_serving.py: {path}: no rows")
    return rows


def label(rows):
    r = rows[0]
    text = r["method"] + (f" C={r['chunk']}" if r["method"] == "kvbuffer" else "")
    if int(r["drafts"]) > 0:
        text += f", T={r['drafts']} a={r['acceptance']}"
    return text


def windowed_throughput(times, tokens, window):
    out_t, out_v = [], []
    start, acc = times[0], 0
    for t, n in zip(times, tokens):
        acc += n
        if t - start >= window:
            out_t.append((start + t) / 2)
            out_v.append(acc / (t - start))
            start, acc = t, 0
    return out_t, out_v


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", nargs="+", help="timelines written by kvbuf simulate --csv")
    ap.add_argument("--out", required=True, help="figure to write (.png or .svg)")
    ap.add_argument("--window-s", type=float, default=5.0, help="throughput window, simulated seconds")
    args = ap.parse_args()
    if args.window_s <= 0:
        sys.exit("plot_serving.py: --window-s must be positive")
    runs = [read_timeline(p) for p in args.csv]
    fig, axes = plt.subplots(3, 1, figsize=(8, 9), sharex=True)
    for rows in runs:
        t = [float(r["time_s"]) for r in rows]
        lab = label(rows)
        axes[0].plot(t, [int(r["running"]) for r in rows], label=lab)
        axes[1].plot(t, [float(r["memory_bytes"]) / 1e9 for r in rows], label=lab)
        wt, wv = windowed_throughput(t, [int(r["tokens"]) for r in rows], args.window_s)
        axes[2].plot(wt, wv, label=lab)
    first = runs[0][0]
    axes[0].set_ylabel("running requests")
    axes[1].set_ylabel("GPU memory held (GB)")
    axes[2].set_ylabel("output tokens / s")
    axes[2].set_xlabel("simulated time (s)")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend()
    # A timeline names its state dtype (a state_dtype column; older ones have none: fp32).
    states = sorted({r.get("state_dtype") or "fp32" for rows in runs for r in rows[:1]})
    fig.suptitle(f"kvbuf simulate: {first['model']} on {first['gpu']} x tp {first['tp']}, {'/'.join(states)} states")
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
