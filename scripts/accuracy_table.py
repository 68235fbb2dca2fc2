#!/usr/bin/env python3
"""Markdown tables of `kvbuf accuracy` (results/accuracy_GPU.csv), one per model: each variant's output
and state error against the float64 reference at chosen token counts, for results/README.md.

    scripts/accuracy_table.py [--results results] [--gpu h200] [--csv F] [--tokens 1024,4096,16384] [--out F]

Output error: rms over the tokens since the previous row of the CSV (out_rel_err_window: the 64 tokens
before with `--every 64`) over the rms of the reference's; state error: Frobenius, relative, of the
state the kernel holds in its pool. A token count the CSV does not hold (or a KVBuffer state between
folds) is a "-". Writes to stdout, or --out. Exit status 2 with a message on a missing or malformed CSV
or a bad argument.
"""
import argparse
import os
import sys

from results_csv import InputError, read_table

TITLES = {"gdn": "Gated DeltaNet", "mamba2": "Mamba-2"}
STATE_ORDER = ("fp32", "bf16", "fp16")


def load(path):
    return read_table(path, required=("family", "model", "method", "state_dtype", "entry_dtype", "gpu", "commit"),
                      ints=("chunk", "tokens"), floats=("out_rel_err_window",), optional_floats=("state_rel_err",))


def variant_key(r):
    state = STATE_ORDER.index(r["state_dtype"]) if r["state_dtype"] in STATE_ORDER else len(STATE_ORDER)
    return (state, r["state_dtype"], r["method"] != "recurrent", r["entry_dtype"] != "bf16", r["entry_dtype"], r["chunk"])


def method_label(r):
    if r["method"] == "recurrent":
        return "classic recurrent"
    return "KVBuffer" + ("" if r["entry_dtype"] == "bf16" else f", {r['entry_dtype']} entries")


def cell(value):
    return "-" if value is None else f"{value:.2e}"


def tables(rows, path, tokens):
    out = []
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == model]
        gpus = "/".join(sorted({r["gpu"] for r in mine}))
        commits = "/".join(sorted({r["commit"][:12] for r in mine}))
        title = TITLES.get(mine[0]["family"], mine[0]["family"])
        out.append(f"**{title}, {model}** (`{os.path.basename(path)}`: {gpus}, commit {commits}; seed "
                   f"{mine[0].get('seed', '?')}; errors relative to the float64 reference)")
        out.append("")
        head = ["state", "method", "C"] + [f"output @ {t}" for t in tokens] + [f"state @ {t}" for t in tokens]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "---|" * len(head))
        by_variant = {}
        for r in mine:
            by_variant.setdefault(variant_key(r), {})[r["tokens"]] = r
        for key in sorted(by_variant):
            at = by_variant[key]
            first = next(iter(at.values()))
            line = [first["state_dtype"], method_label(first), str(first["chunk"]) if first["chunk"] else "-"]
            line += [cell(at[t]["out_rel_err_window"]) if t in at else "-" for t in tokens]
            line += [cell(at[t]["state_rel_err"]) if t in at else "-" for t in tokens]
            out.append("| " + " | ".join(line) + " |")
        out.append("")
    return "\n".join(out)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default=os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                                                       "results")))
    ap.add_argument("--gpu", default="h200", help="file-name suffix: RESULTS/accuracy_GPU.csv")
    ap.add_argument("--csv", help="the accuracy CSV instead of RESULTS/accuracy_GPU.csv")
    ap.add_argument("--tokens", default="1024,4096,16384", help="comma-separated token counts")
    ap.add_argument("--out", help="markdown file to write (default: stdout)")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        return 2 if e.code else 0
    try:
        try:
            tokens = [int(t) for t in args.tokens.split(",")]
        except ValueError:
            raise InputError(f"--tokens: expected comma-separated positive integers, got '{args.tokens}'") from None
        if not tokens or any(t < 1 for t in tokens):
            raise InputError(f"--tokens: expected comma-separated positive integers, got '{args.tokens}'")
        path = args.csv or os.path.join(args.results, f"accuracy_{args.gpu}.csv")
        rows = load(path)
        if not rows:
            raise InputError(f"{path}: no rows")
    except InputError as e:
        print(f"accuracy_table.py: {e}", file=sys.stderr)
        return 2
    text = tables(rows, path, tokens)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
        print(f"wrote {args.out}")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
