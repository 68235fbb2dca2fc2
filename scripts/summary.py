#!/usr/bin/env python3
"""The main job's closing table: the paper's claims next to what the CSVs of results/ measured, per
model family (Gated DeltaNet: Qwen3-Next; Mamba-2: Nemotron-3 Nano).

    scripts/summary.py [--results results] [--gpu h200] [--wall-s SECONDS]

- decode: linear-attention latency reduction of KVBuffer at its best C against the fastest recurrent
  decode we know at that batch, ours (in place or out of place) or public (the kernels of
  public_GPU.csv measured by scripts/bench_public.py: FLA's, FlashInfer's, mamba-ssm's
  selective_state_update; FLA's of fla_GPU.csv where public_GPU.csv has none; vLLM's recorded
  selective_state_update of public_mamba2_GPU.csv), named in the last column (the paper: up to 45.17%);
- verify: KVBuffer verify at its best C against the fastest classic verify row, T = 4, per batch;
  and, where public_mamba2_GPU.csv has published verify figures (a drafts column), Mamba-2 at their
  T against them (ReplaySSM's buffered verify, vLLM's classic) and against our classic;
- capacity: concurrent requests at T = 4 drafts, KVBuffer over classic, linear-attention pool,
  measured (model) (the paper: 5x).
A family or table without rows prints "no measurement". Exit status 2 on a malformed CSV.
"""
import argparse
import os
import sys

from results_csv import InputError, read_table, steady_state

PAPER_DECODE_REDUCTION = 45.17  # percent, the paper's largest linear-attention decode latency reduction
PAPER_CAPACITY_RATIO = 5.0  # concurrent requests with 4 draft tokens
FAMILIES = (  # (title, recurrent kernels, ours and public, KVBuffer kernel, kernel prefix of the verify rows)
    ("Gated DeltaNet", ("recurrent", "recurrent-oop", "fla-fused-recurrent-vfirst-oop",
                        "flashinfer-gdn-decode-pretranspose"), "kvbuffer", "verify-"),
    ("Mamba-2", ("mamba2-recurrent", "vllm-selective-state-update", "mamba-ssm-selective-state-update"),
     "mamba2-kvbuffer", "mamba2-verify-"),
)
CAPACITY_DRAFTS = 4
VERIFY_DRAFTS = 4


def load(path, required, ints, floats):
    if not os.path.isfile(path):
        return None
    return read_table(path, required=required, ints=ints, floats=floats,
                      keep=lambda r: (r.get("latency_us_median") or "").strip() != "" and steady_state(r))


def fastest(rows, **match):
    hits = [r for r in rows if all(r[k] == v for k, v in match.items())]
    return min(hits, key=lambda r: r["latency_us_median"]) if hits else None


def decode_lines(rows, recurrents, kvbuffer):
    out = []
    baselines = [r for r in rows if r["kernel"] in recurrents]
    for batch in sorted({r["batch"] for r in baselines}):
        rec = fastest(baselines, batch=batch)
        kvb = fastest(rows, kernel=kvbuffer, batch=batch)
        if not kvb:
            continue
        reduction = 100 * (1 - kvb["latency_us_median"] / rec["latency_us_median"])
        out.append((batch, f"{rec['latency_us_median']:.2f}", f"{kvb['latency_us_median']:.2f} [C {kvb['chunk']}]",
                    f"{reduction:.1f}%", kvb["commit"], f"{rec['kernel']} ({rec['commit']})"))
    return out


def published_mamba2(results, gpu):
    """The published Mamba-2 figures (public_mamba2_GPU.csv: latency_us, the source in place of a
    commit; a verify figure has its T in the drafts column, a decode one none)."""
    published = os.path.join(results, f"public_mamba2_{gpu}.csv")
    if not os.path.isfile(published):
        return []
    return [{**r, "latency_us_median": r["latency_us"], "commit": "published"}
            for r in read_table(published, required=("model", "kernel", "source"), ints=("batch",),
                                floats=("latency_us",), optional_floats=("drafts",))]


def public_decode(results, gpu, published):
    """The public recurrent decode kernels measured with kvbuf's method (public_GPU.csv, fp32 states
    as the sweep's; FLA's of fla_GPU.csv where that has none) and the published Mamba-2 decode
    figures (those of `published` without a T)."""
    rows = []
    measured = os.path.join(results, f"public_{gpu}.csv")
    if os.path.isfile(measured):
        rows += [r for r in read_table(measured, required=("model", "kernel", "state_dtype", "commit"), ints=("batch",),
                                       floats=("latency_us_median",), keep=lambda r: r["latency_us_median"].strip())
                 if r["state_dtype"] == "fp32"]
    fla = os.path.join(results, f"fla_{gpu}.csv")
    if os.path.isfile(fla) and not any(r["kernel"] == "fla-fused-recurrent-vfirst-oop" for r in rows):
        rows += read_table(fla, required=("model", "kernel", "commit"), ints=("batch",), floats=("latency_us_median",))
    return rows + [r for r in published if r["drafts"] is None]


def published_verify_lines(rows, published):
    """Mamba-2 KVBuffer verify at its best C against each published verify figure at the same batch
    and T, with our fastest classic row beside it."""
    out = []
    figures = [r for r in published if r["drafts"] is not None]
    for T in sorted({int(r["drafts"]) for r in figures}):
        ours = [r for r in rows if r["method"].startswith("mamba2-verify-") and not r["method"].endswith("-tree")
                and r["drafts"] == T]
        for batch in sorted({r["batch"] for r in figures if int(r["drafts"]) == T}):
            k = fastest(ours, method="mamba2-verify-kvbuffer", batch=batch)
            c = fastest([r for r in ours if r["method"].startswith("mamba2-verify-classic")], batch=batch)
            if not k:
                continue
            for p in sorted((r for r in figures if int(r["drafts"]) == T and r["batch"] == batch),
                            key=lambda r: r["kernel"]):
                ratio = p["latency_us_median"] / k["latency_us_median"]
                out.append((T, batch, f"{k['latency_us_median']:.2f} [C {k['chunk']}]", f"{p['latency_us_median']:.2f}",
                            p["kernel"], f"{ratio:.2f}x", f"{c['latency_us_median']:.2f}" if c else "-", k["commit"]))
    return out


def verify_lines(rows, prefix):
    out = []
    family = [r for r in rows if r["method"].startswith(prefix) and not r["method"].endswith("-tree")
              and r["drafts"] == VERIFY_DRAFTS]
    classic = [r for r in family if r["method"].startswith(prefix + "classic")]
    buffered = [r for r in family if r["method"] == prefix + "kvbuffer"]
    for batch in sorted({r["batch"] for r in buffered}):
        c = fastest(classic, batch=batch)
        k = fastest(buffered, batch=batch)
        if not c:
            continue
        out.append((batch, f"{c['latency_us_median']:.2f} ({c['method']})", f"{k['latency_us_median']:.2f} [C {k['chunk']}]",
                    f"{c['latency_us_median'] / k['latency_us_median']:.2f}x", k["commit"]))
    return out


def capacity_lines(rows):
    out = []
    for r in rows:
        if r["drafts"] != CAPACITY_DRAFTS or r["measured_ratio"] is None:
            continue
        out.append((r["model"], f"C {r['chunk']}, tp {r['tp']}", f"{r['measured_ratio']:.2f}x",
                    f"{r['ratio_linear']:.2f}x", r["commit"]))
    return out


def table(title, header, lines):
    print(f"\n{title}")
    if not lines:
        print("  no measurement")
        return
    widths = [max(len(str(x)) for x in col) for col in zip(header, *lines)]
    for line in (header, *lines):
        print("  " + "  ".join(str(x).rjust(w) for x, w in zip(line, widths)))


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default="results")
    ap.add_argument("--gpu", default="h200")
    ap.add_argument("--wall-s", type=float, help="the main job's wall time, printed with the table")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return 2 if e.code else 0
    try:
        decode = load(os.path.join(args.results, f"decode_{args.gpu}.csv"), ("model", "kernel", "gpu", "commit"),
                      ("batch", "chunk"), ("latency_us_median",)) or []
        verify = load(os.path.join(args.results, f"verify_{args.gpu}.csv"), ("model", "method", "gpu", "commit"),
                      ("batch", "chunk", "drafts"), ("latency_us_median",)) or []
        published = published_mamba2(args.results, args.gpu)
        public = public_decode(args.results, args.gpu, published)
        capacity_path = os.path.join(args.results, f"capacity_{args.gpu}.csv")
        capacity = read_table(capacity_path, required=("model", "gpu", "commit"), ints=("drafts", "chunk", "tp"),
                              floats=("ratio_linear",), optional_floats=("measured_ratio",)) \
            if os.path.isfile(capacity_path) else []
    except InputError as e:
        print(f"summary.py: {e}", file=sys.stderr)
        return 2
    gpus = sorted({r["gpu"] for r in decode + verify + capacity})
    print(f"== summary: {args.results} on {', '.join(gpus) or args.gpu}; us per layer per step, median"
          + (f"; main job wall time {args.wall_s:.0f} s" if args.wall_s is not None else ""))
    for title, recurrents, kvbuffer, prefix in FAMILIES:
        table(f"{title} decode: KVBuffer at its best C against the fastest recurrent decode "
              f"(paper: up to {PAPER_DECODE_REDUCTION}% lower)",
              ("batch", "recurrent", "kvbuffer [C]", "latency reduction", "commit", "fastest recurrent"),
              decode_lines(decode + public, recurrents, kvbuffer))
        table(f"{title} speculative verify, T = {VERIFY_DRAFTS}: KVBuffer against the fastest classic",
              ("batch", "classic", "kvbuffer [C]", "speedup", "commit"), verify_lines(verify, prefix))
    table("Mamba-2 speculative verify against the published figures (ratio > 1: KVBuffer faster)",
          ("T", "batch", "kvbuffer [C]", "published", "kernel", "ratio", "our classic", "commit"),
          published_verify_lines(verify, published))
    table(f"Concurrent requests at T = {CAPACITY_DRAFTS}, KVBuffer over classic, linear-attention pool "
          f"(paper: {PAPER_CAPACITY_RATIO:g}x)", ("model", "config", "measured", "model", "commit"),
          capacity_lines(capacity))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
