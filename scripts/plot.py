#!/usr/bin/env python3
"""Plots a `kvbuf sweep` decode CSV: latency and GB/s against batch per kernel at its best chunk C,
and the speedup over recurrent (in place) against C per batch; with --fla, the public FLA kernel's
rows from scripts/bench_fla.py as one more line.

    scripts/plot.py results/decode_h200.csv [results/decode_h200.png] [--fla results/fla_h200.csv]
"""
import argparse
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from results_csv import load_rows  # noqa: E402


def load(path):
    return load_rows(path, "plot.py", ints=("batch", "chunk"), floats=("latency_us_median", "gbps"),
                     other=("kernel", "copy_gbps", "gpu", "commit", "model"))


def main():
    ap = argparse.ArgumentParser(usage=__doc__)
    ap.add_argument("csv")
    ap.add_argument("png", nargs="?")
    ap.add_argument("--fla", help="scripts/bench_fla.py CSV measured in the same session")
    args = ap.parse_args()
    out = args.png or args.csv.rsplit(".", 1)[0] + ".png"
    rows = load(args.csv)
    if args.fla:
        for r in load_rows(args.fla, "plot.py", ints=("batch",), floats=("latency_us_median", "gbps"),
                           other=("kernel",)):
            rows.append(dict(r, chunk=0))
    best = {}  # (kernel, batch) -> row with the lowest median latency over C
    for r in rows:
        key = (r["kernel"], r["batch"])
        if key not in best or r["latency_us_median"] < best[key]["latency_us_median"]:
            best[key] = r
    kernels = sorted({k for k, _ in best}, key=lambda k: [r["kernel"] for r in rows].index(k))
    copy_gbps = float(rows[0]["copy_gbps"])

    fig, axes = plt.subplots(1, 3, figsize=(18, 5.2))
    ax_lat, ax_bw, ax_sp = axes
    for k in kernels:
        pts = sorted((b, r) for (kk, b), r in best.items() if kk == k)
        xs = [b for b, _ in pts]
        ax_lat.plot(xs, [r["latency_us_median"] for _, r in pts], marker="o", label=k)
        ax_bw.plot(xs, [r["gbps"] for _, r in pts], marker="o", label=k)
        for b, r in pts:
            if r["chunk"] > 0:
                ax_lat.annotate(f"C={r['chunk']}", (b, r["latency_us_median"]), fontsize=6,
                                textcoords="offset points", xytext=(3, 3))
    for ax in (ax_lat, ax_bw):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch (requests)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    ax_lat.set_yscale("log")
    ax_lat.set_ylabel("latency per layer per step (us, median)")
    ax_lat.set_title("latency at each kernel's best C")
    ax_bw.axhline(copy_gbps, color="k", ls="--", lw=1, label="copy")
    ax_bw.set_ylabel("achieved GB/s (bytes model / latency)")
    ax_bw.set_title(f"bandwidth (dashed: measured copy {copy_gbps:.0f} GB/s)")

    rec = {b: r["latency_us_median"] for (k, b), r in best.items() if k == "recurrent"}
    by_batch = defaultdict(list)
    for r in rows:
        if r["kernel"] == "kvbuffer" and r["batch"] in rec:
            by_batch[r["batch"]].append((r["chunk"], rec[r["batch"]] / r["latency_us_median"]))
    for b in sorted(by_batch):
        pts = sorted(by_batch[b])
        ax_sp.plot([c for c, _ in pts], [s for _, s in pts], marker="o", label=f"batch {b}")
    ax_sp.axhline(1.0, color="k", lw=1)
    ax_sp.set_xscale("log", base=2)
    ax_sp.set_xlabel("buffer capacity C")
    ax_sp.set_ylabel("speedup of kvbuffer over recurrent (in place)")
    ax_sp.set_title("kvbuffer (cached-u, bf16 entries) vs C")
    ax_sp.grid(True, which="both", alpha=0.3)
    ax_sp.legend(fontsize=8)

    fig.suptitle(f"GDN decode, {rows[0]['model']}, {rows[0]['gpu']}, commit {rows[0]['commit']}")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
