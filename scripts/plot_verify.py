#!/usr/bin/env python3
"""Plots a `kvbuf sweep` verify CSV: latency per verify step and per accepted token against batch
for each method and draft count T, and KVBuffer's speedup against T over the faster classic row
(in place, committed by index, or with a copy commit) at each batch and T.

    scripts/plot_verify.py results/verify_h200.csv [results/verify_h200.png]
"""
import sys
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from results_csv import load_rows  # noqa: E402

CLASSIC = ("verify-classic", "verify-classic-inplace")
METHODS = CLASSIC + ("verify-kvbuffer",)


def load(path):
    rows = load_rows(path, "plot_verify.py", ints=("batch", "drafts"),
                     floats=("latency_us_median", "latency_us_per_token"),
                     other=("model", "method", "chunk", "acceptance", "gpu", "commit"))
    out = [r for r in rows if r["method"] in METHODS]
    if not out:
        sys.exit(f"plot_verify.py: {path} has no {' or '.join(METHODS)} rows")
    return out


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    path = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) == 3 else path.rsplit(".", 1)[0] + ".png"
    rows = load(path)
    # (method, T) -> {batch: row with the lowest median over C}
    best = defaultdict(dict)
    for r in rows:
        cur = best[(r["method"], r["drafts"])].get(r["batch"])
        if cur is None or r["latency_us_median"] < cur["latency_us_median"]:
            best[(r["method"], r["drafts"])][r["batch"]] = r
    drafts = sorted({r["drafts"] for r in rows})
    batches = sorted({r["batch"] for r in rows})
    first = rows[0]
    fig, axes = plt.subplots(1, 3, figsize=(18, 5.2))
    cmap = plt.get_cmap("viridis")
    for i, T in enumerate(drafts):
        color = cmap(i / max(1, len(drafts) - 1))
        for method, style in zip(METHODS, (":", "--", "-")):
            pts = best.get((method, T), {})
            xs = sorted(pts)
            if not xs:
                continue
            label = f"{method.removeprefix('verify-')} T={T}"
            axes[0].plot(xs, [pts[b]["latency_us_median"] for b in xs], style, marker="o", color=color, label=label)
            axes[1].plot(xs, [pts[b]["latency_us_per_token"] for b in xs], style, marker="o", color=color, label=label)
    for b_i, b in enumerate(batches):
        ts, speedups = [], []
        for T in drafts:
            classic = [best.get((m, T), {}).get(b) for m in CLASSIC]
            classic = [r for r in classic if r]
            c = min(classic, key=lambda r: r["latency_us_median"]) if classic else None
            k = best.get(("verify-kvbuffer", T), {}).get(b)
            if c and k:
                ts.append(T)
                speedups.append(c["latency_us_median"] / k["latency_us_median"])
        if ts:
            axes[2].plot(ts, speedups, marker="o", label=f"batch {b}", color=plt.get_cmap("tab10")(b_i % 10))
    for ax, title, ylabel in (
        (axes[0], "verify step (dotted: classic + copy commit, dashed: classic in place)",
         "latency per layer per verify step (us, median)"),
        (axes[1], f"per accepted token (acceptance {first['acceptance']})", "us per layer per accepted token"),
    ):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("batch (requests)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6, ncol=2)
    axes[2].axhline(1.0, color="black", linewidth=1)
    axes[2].set_xlabel("tokens verified per step T")
    axes[2].set_ylabel("fastest classic latency / KVBuffer verify latency")
    axes[2].set_title("KVBuffer verify speedup over the fastest classic row")
    axes[2].grid(True, alpha=0.3)
    axes[2].legend(fontsize=7)
    fig.suptitle(f"GDN speculative verify, {first['model']}, {first['gpu']}, commit {first['commit']}")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
