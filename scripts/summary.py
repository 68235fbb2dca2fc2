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
  measured (model) (the paper: 5x), a table per state dtype of capacity_GPU.csv (`kvbuf capacity
  --state-dtype all --measure`), with the model counting what the measurement allocates (the T
  verify-scratch entries) and the measured ratio against it.
Decode and verify print a table per state dtype: fp32 (the rows of decode_GPU.csv and verify_GPU.csv
without a state_dtype column, or with fp32 in it) first, then each 16-bit type, its rows of a model
taken from decode_GPU.csv / verify_GPU.csv where that file has any (the paper preset measures each
model's engine default), else from decode16_GPU.csv / verify16_GPU.csv; the 16-bit decode baselines
include the recorded public 16-bit kernels of public_16bit_GPU.csv and the 16-bit rows of public_GPU.csv.
A family or table without rows prints "no measurement". On a GPU other than the H200, the decode and
verify rows are also put next to the H200's (decode_h200.csv, verify_h200.csv) where both have the
point: each kernel at its best C per model, state dtype and batch. A latency timed while the driver
held the SM clock down (the power cap, a hardware or thermal slowdown: `kvbuf sweep` says so in the
row's note) is marked *, with a line under its table. Exit status 2 on a malformed CSV.
"""
import argparse
import os
import sys

from results_csv import InputError, clock_limited, read_table, steady_state

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
STATE_DTYPES = ("fp32", "bf16", "fp16")
LIMITED_MARK = "*"  # after a latency timed with the SM clock held down
# The recorded public recurrent decode kernels with a 16-bit state (public_16bit_GPU.csv), per family.
PUBLIC_16BIT_RECURRENT = {"Gated DeltaNet": ("vllm-gdn-packed-decode", "fla-fused-recurrent-vfirst"),
                          "Mamba-2": ("vllm-selective-state-update",)}
# The public kernels scripts/bench_public.py measures (public_GPU.csv), per family: at a 16-bit state
# too (its --state-dtype), baselines of that state's tables.
MEASURED_PUBLIC = {"Gated DeltaNet": ("flashinfer-gdn-decode-pretranspose",),
                   "Mamba-2": ("mamba-ssm-selective-state-update",)}


def state_of(row):
    """A row's state dtype: its state_dtype cell, fp32 where the column is absent or empty (the rows
    written before the axis)."""
    return (row.get("state_dtype") or "").strip() or "fp32"


def by_state(main, sixteen):
    """State dtype -> rows: the main CSV's rows of each dtype, and for a 16-bit dtype the 16-bit CSV's
    rows of every model that the main CSV has no row of at that dtype."""
    out = {}
    for d in STATE_DTYPES:
        rows = [r for r in main if state_of(r) == d]
        if d != "fp32":
            have = {r["model"] for r in rows}
            rows += [r for r in sixteen if state_of(r) == d and r["model"] not in have]
        if rows:
            out[d] = rows
    return out


def load(path, required, ints, floats):
    if not os.path.isfile(path):
        return None
    return read_table(path, required=required, ints=ints, floats=floats,
                      keep=lambda r: (r.get("latency_us_median") or "").strip() != "" and steady_state(r))


def latency(row):
    """The row's median latency, marked where the row was timed with the SM clock held down."""
    text = f"{row['latency_us_median']:.2f}"
    return text + LIMITED_MARK if clock_limited(row) else text


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
        out.append((batch, latency(rec), f"{latency(kvb)} [C {kvb['chunk']}]",
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


def measured_public(results, gpu):
    """The public kernels measured with kvbuf's method by scripts/bench_public.py (public_GPU.csv),
    every state dtype."""
    path = os.path.join(results, f"public_{gpu}.csv")
    if not os.path.isfile(path):
        return []
    return read_table(path, required=("model", "kernel", "state_dtype", "commit"), ints=("batch",),
                      floats=("latency_us_median",), keep=lambda r: (r["latency_us_median"] or "").strip() != "")


def public_decode(results, gpu, published, measured):
    """The public recurrent decode kernels with an fp32 state: those measured with kvbuf's method
    (`measured`, public_GPU.csv; FLA's of fla_GPU.csv where that has none) and the published Mamba-2
    decode figures (those of `published` without a T)."""
    rows = [r for r in measured if state_of(r) == "fp32"]
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
        out.append((batch, f"{latency(c)} ({c['method']})", f"{latency(k)} [C {k['chunk']}]",
                    f"{c['latency_us_median'] / k['latency_us_median']:.2f}x", k["commit"]))
    return out


def capacity_lines(rows, state):
    """The measured rows at T = 4 of one state dtype: measured ratio, the model's, the model's counting
    what --measure allocates (absent before that column: '-') and measured against it."""
    out = []
    for r in rows:
        if r["drafts"] != CAPACITY_DRAFTS or r["measured_ratio"] is None or state_of(r) != state:
            continue
        allocated = r.get("ratio_linear_allocated")
        out.append((r["model"], f"C {r['chunk']}, tp {r['tp']}", f"{r['measured_ratio']:.2f}x",
                    f"{r['ratio_linear']:.2f}x", f"{allocated:.2f}x" if allocated else "-",
                    f"{100 * (r['measured_ratio'] / allocated - 1):+.1f}%" if allocated else "-", r["commit"]))
    return out


def public_16bit(results, gpu):
    """The recorded public 16-bit decode figures (public_16bit_GPU.csv), as decode rows of their state dtype."""
    path = os.path.join(results, f"public_16bit_{gpu}.csv")
    if not os.path.isfile(path):
        return []
    return [{**r, "latency_us_median": r["latency_us"], "commit": "published", "chunk": r.get("chunk") or 0}
            for r in read_table(path, required=("model", "kernel", "state_dtype", "source"), ints=("batch",),
                                floats=("latency_us",))]


def table(title, header, lines):
    print(f"\n{title}")
    if not lines:
        print("  no measurement")
        return
    widths = [max(len(str(x)) for x in col) for col in zip(header, *lines)]
    for line in (header, *lines):
        print("  " + "  ".join(str(x).rjust(w) for x, w in zip(line, widths)))
    if any(LIMITED_MARK in str(x) for line in lines for x in line):
        print(f"  {LIMITED_MARK} timed with the SM clock held down (the row's note says how often); "
              "kvbuf sweep --rest-s lets the board cool between points")


def against_h200_lines(here, h200, name):
    """(model, name, state, batch[, drafts]) -> the best C's latency here and on the H200, and their ratio,
    for the points both GPUs measured."""
    def best(rows):
        out = {}
        for r in rows:
            key = (r["model"], r[name], state_of(r), r["batch"], r.get("drafts", ""))
            if key not in out or r["latency_us_median"] < out[key]["latency_us_median"]:
                out[key] = r
        return out
    mine, ref = best(here), best(h200)
    lines = []
    for key in sorted(set(mine) & set(ref)):
        a, b = mine[key]["latency_us_median"], ref[key]["latency_us_median"]
        lines.append((*[k for k in key if k != ""], f"{a:.2f} [C {mine[key]['chunk']}]",
                      f"{b:.2f} [C {ref[key]['chunk']}]", f"{a / b:.2f}x"))
    return lines


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
        decode16 = load(os.path.join(args.results, f"decode16_{args.gpu}.csv"), ("model", "kernel", "gpu", "commit"),
                        ("batch", "chunk"), ("latency_us_median",)) or []
        verify16 = load(os.path.join(args.results, f"verify16_{args.gpu}.csv"), ("model", "method", "gpu", "commit"),
                        ("batch", "chunk", "drafts"), ("latency_us_median",)) or []
        published = published_mamba2(args.results, args.gpu)
        measured = measured_public(args.results, args.gpu)
        public = public_decode(args.results, args.gpu, published, measured)
        public16 = public_16bit(args.results, args.gpu)
        capacity_path = os.path.join(args.results, f"capacity_{args.gpu}.csv")
        capacity = read_table(capacity_path, required=("model", "gpu", "commit"), ints=("drafts", "chunk", "tp"),
                              floats=("ratio_linear",), optional_floats=("measured_ratio", "ratio_linear_allocated")) \
            if os.path.isfile(capacity_path) else []
        h200_decode = h200_verify = []
        if args.gpu != "h200":
            h200_decode = load(os.path.join(args.results, "decode_h200.csv"), ("model", "kernel", "gpu", "commit"),
                               ("batch", "chunk"), ("latency_us_median",)) or []
            h200_verify = load(os.path.join(args.results, "verify_h200.csv"), ("model", "method", "gpu", "commit"),
                               ("batch", "chunk", "drafts"), ("latency_us_median",)) or []
    except InputError as e:
        print(f"summary.py: {e}", file=sys.stderr)
        return 2
    decode_by, verify_by = by_state(decode, decode16), by_state(verify, verify16)
    gpus = sorted({r["gpu"] for r in decode + verify + capacity + decode16 + verify16})
    print(f"== summary: {args.results} on {', '.join(gpus) or args.gpu}; us per layer per step, median"
          + (f"; main job wall time {args.wall_s:.0f} s" if args.wall_s is not None else ""))
    for state in STATE_DTYPES:
        if state != "fp32" and state not in decode_by and state not in verify_by:
            continue
        suffix = "" if state == "fp32" else f", {state} state"
        for title, recurrents, kvbuffer, prefix in FAMILIES:
            if state == "fp32":
                baselines = public
            else:
                recurrents = recurrents[:2] + PUBLIC_16BIT_RECURRENT[title] + MEASURED_PUBLIC[title]
                baselines = [r for r in public16 + measured if state_of(r) == state]
            table(f"{title} decode{suffix}: KVBuffer at its best C against the fastest recurrent decode "
                  f"(paper: up to {PAPER_DECODE_REDUCTION}% lower)",
                  ("batch", "recurrent", "kvbuffer [C]", "latency reduction", "commit", "fastest recurrent"),
                  decode_lines(decode_by.get(state, []) + baselines, recurrents, kvbuffer))
            table(f"{title} speculative verify{suffix}, T = {VERIFY_DRAFTS}: KVBuffer against the fastest classic",
                  ("batch", "classic", "kvbuffer [C]", "speedup", "commit"),
                  verify_lines(verify_by.get(state, []), prefix))
    table("Mamba-2 speculative verify against the published figures (ratio > 1: KVBuffer faster)",
          ("T", "batch", "kvbuffer [C]", "published", "kernel", "ratio", "our classic", "commit"),
          published_verify_lines(verify_by.get("fp32", []), published))
    for state in [d for d in STATE_DTYPES if d == "fp32" or any(state_of(r) == d for r in capacity)]:
        table(f"Concurrent requests at T = {CAPACITY_DRAFTS}, KVBuffer over classic, linear-attention pool, {state} "
              f"state (paper: {PAPER_CAPACITY_RATIO:g}x)",
              ("model", "config", "measured", "model", "model as allocated", "measured vs it", "commit"),
              capacity_lines(capacity, state))
    if args.gpu != "h200":
        table(f"Decode on {args.gpu} against the H200, each kernel at its best C (ratio > 1: slower here)",
              ("model", "kernel", "state", "batch", args.gpu, "h200", "ratio"),
              against_h200_lines(decode, h200_decode, "kernel"))
        table(f"Verify on {args.gpu} against the H200, each method at its best C (ratio > 1: slower here)",
              ("model", "method", "state", "batch", "T", args.gpu, "h200", "ratio"),
              against_h200_lines(verify, h200_verify, "method"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
