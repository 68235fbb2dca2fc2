#!/usr/bin/env python3
"""Regenerates the serving simulator's tables (results/serving_tables.md) and timelines from the
measured tables in results/, once per state dtype of the linear-attention state (`--state-dtype` of
`kvbuf step`, `simulate` and `capacity`): whole-model decode speedup per model, context and batch
(`kvbuf step`), the capacity at T = 4 (`kvbuf capacity`), the serving runs at T = 4 (`kvbuf simulate`,
timelines and their figures) and the held-out checks of the measured tables (`kvbuf step --held-out`).
Each state dtype's section names the measured tables it reads and the commits of their rows:
decode_h200.csv and verify_h200.csv for fp32, decode16_h200.csv and verify16_h200.csv (their rows of
that state dtype) for bf16 and fp16. Everything runs on the CPU from the committed CSVs and
calibration; nothing is timed here.

Usage: serving_report.py [--kvbuf build/bench/kvbuf] [--results results] [--out results/serving_tables.md]
                         [--state-dtype fp32,bf16]

Timelines and figures: serving_<model>_<method>_t4.csv and serving_<model>_t4.png for fp32,
serving_<model>_<method>_t4_<dtype>.csv and serving_<model>_t4_<dtype>.png for a 16-bit state.
"""
import argparse
import csv
import io
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# (model, tp): every hybrid family the catalog has, at the smallest TP whose weights fit one H200.
STEP_MODELS = [("qwen3.5-9b", 1), ("qwen3.5-27b", 1), ("qwen3.5-35b-a3b", 1), ("qwen3.5-122b-a10b", 2),
               ("qwen3.5-397b-a17b", 8), ("qwen3-next-80b-a3b", 2), ("nemotron-3-nano-30b-a3b", 1),
               ("nemotron-3-super-120b-a12b", 2)]
STEP_CONTEXTS = [4096, 32768]
STEP_BATCHES = [1, 32, 128, 256, 512]
STEP_CHUNK = 8
SERVING_MODELS = ["qwen3.5-35b-a3b", "nemotron-3-nano-30b-a3b"]
SERVING_ARGS = ["--drafts", "4", "--accept-rate", "0.7", "--chunk", "16", "--rate", "200", "--duration", "20",
                "--prompt-tokens", "2048", "--output-tokens", "512", "--seed", "1"]
HELD_OUT_MODELS = [None, "nemotron-3-nano-30b-a3b"]  # None: the GDN tables
# The state dtypes whose decode and verify tables are both measured (verify16_h200.csv holds bf16 only; an
# fp16 report takes its verify steps from the bytes model).
DEFAULT_STATE_DTYPES = ("fp32", "bf16")
STATE_DTYPES = ("fp32", "bf16", "fp16")
# The measured tables of each state dtype, as MeasuredLinearTable::load (sim/step_model.cpp) reads them.
TABLES = {"fp32": ("decode_h200.csv", "verify_h200.csv"), "bf16": ("decode16_h200.csv", "verify16_h200.csv"),
          "fp16": ("decode16_h200.csv", "verify16_h200.csv")}
SOURCE_MARK = {"measured": "m", "extrapolated": "e", "modelled": "M"}
SERVING_FIELDS = {
    "throughput_tok_s": r"throughput: ([\d.]+) output tokens/s",
    "max_running": r"concurrency: max (\d+)",
    "tpot_p50_ms": r"TPOT\s+p50 ([\d.]+) ms",
    "ttft_p50_s": r"TTFT\s+p50 ([\d.]+) s",
}


def state_of(row):
    return (row.get("state_dtype") or "").strip() or "fp32"


def table_rows(path, state):
    """The rows of a measured table that the step model reads at `state` (sim/step_model.cpp's
    MeasuredLinearTable::load): measured, steady state, that state dtype; decode: recurrent (in place),
    kvbuffer and direct (GDN: bf16 cached-u entries); verify: the classic chain rows and verify-kvbuffer.
    Returns (family, commit) of each."""
    if not os.path.isfile(path):
        return []
    out = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if not (r.get("latency_us_median") or "").strip() or state_of(r) != state:
                continue
            if float((r.get("context_tokens") or "0").strip() or 0) > 0:
                continue
            name = r.get("kernel") or r.get("method") or ""
            family = "Mamba-2" if name.startswith("mamba2-") else "GDN"
            name = name[len("mamba2-"):] if family == "Mamba-2" else name
            if "kernel" in r:
                gdn_entry = family == "Mamba-2" or (r.get("variant") == "cached-u" and r.get("entry_dtype") == "bf16")
                if not (name == "recurrent" or (name in ("kvbuffer", "direct") and gdn_entry)):
                    continue
            elif not ((name.startswith("verify-classic") and not name.endswith("-tree")) or name == "verify-kvbuffer"):
                continue
            out.append((family, r.get("commit", "")))
    return out


def provenance(results, state):
    """One line naming the measured tables of `state` and the commits of the rows the simulator reads,
    per family."""
    parts = []
    for name in TABLES[state]:
        rows = table_rows(os.path.join(results, name), state)
        if not rows:
            parts.append(f"`{name}`: no {state} rows (modelled)")
            continue
        families = []
        for family in ("GDN", "Mamba-2"):
            commits = sorted({c for f, c in rows if f == family and c})
            if commits:
                families.append(f"{family} {', '.join(commits)}")
        parts.append(f"`{name}` ({'; '.join(families)})")
    return f"Measured tables, {state} rows, and the commits that measured them: " + ", ".join(parts) + "."


def suffixed(state):
    return "" if state == "fp32" else f"_{state}"


def state_args(state):
    return [] if state == "fp32" else ["--state-dtype", state]


def kvbuf(binary, args, results):
    cmd = [binary, *args, "--results", results]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"serving_report.py: {' '.join(cmd)} failed ({r.returncode}):\n{r.stderr}")
    return r.stdout


def step_rows(binary, results, model, tp, context, tmp_csv, state):
    kvbuf(binary, ["step", "--model", model, "--tp", str(tp), "--context", str(context), "--chunk", str(STEP_CHUNK),
                   "--batch", ",".join(map(str, STEP_BATCHES)), *state_args(state), "--csv", tmp_csv], results)
    with open(tmp_csv, newline="") as f:
        return list(csv.DictReader(f))


def speedup_table(binary, results, tmp_csv, state):
    head = "| model (tp) | context | " + " | ".join(f"batch {b}" for b in STEP_BATCHES) + " | linear share, classic |"
    lines = [head, "|" + "---|" * (len(STEP_BATCHES) + 3)]
    for model, tp in STEP_MODELS:
        for context in STEP_CONTEXTS:
            rows = step_rows(binary, results, model, tp, context, tmp_csv, state)
            cells, shares = [], []
            for b in STEP_BATCHES:
                at = {r["method"]: r for r in rows if int(r["batch"]) == b}
                kvb, classic = at["kvbuffer"], at["classic"]
                worst = max((kvb["linear_source"], classic["linear_source"]), key=list(SOURCE_MARK).index)
                cells.append(f"{float(kvb['speedup_vs_classic']):.3f}x {SOURCE_MARK[worst]}")
                shares.append(float(classic["linear_attn_us"]) / float(classic["total_us"]))
            lines.append(f"| {model} ({tp}) | {context} | " + " | ".join(cells) +
                         f" | {100 * min(shares):.0f}-{100 * max(shares):.0f}% |")
    return "\n".join(lines)


def serving_table(binary, results, state):
    lines = ["| model | method | max running | throughput (tok/s) | TPOT p50 (ms) | TTFT p50 (s) |",
             "|---|---|---|---|---|---|"]
    for model in SERVING_MODELS:
        classic = None
        timelines = []
        for method in ("classic", "kvbuffer"):
            timeline = os.path.join(results, f"serving_{model}_{method}_t4{suffixed(state)}.csv")
            out = kvbuf(binary, ["simulate", "--model", model, "--method", method, *SERVING_ARGS, *state_args(state),
                                 "--csv", timeline], results)
            v = {}
            for key, pattern in SERVING_FIELDS.items():
                m = re.search(pattern, out)
                if not m:
                    sys.exit(f"serving_report.py: kvbuf simulate printed no '{key}':\n{out}")
                v[key] = float(m.group(1))
            if classic is None:
                classic = v
                run, tput = f"{v['max_running']:.0f}", f"{v['throughput_tok_s']:.0f}"
            else:
                run = f"{v['max_running']:.0f} ({v['max_running'] / classic['max_running']:.2f}x)"
                tput = f"{v['throughput_tok_s']:.0f} ({v['throughput_tok_s'] / classic['throughput_tok_s']:.2f}x)"
            lines.append(f"| {model} | {method} | {run} | {tput} | {v['tpot_p50_ms']:.1f} | {v['ttft_p50_s']:.1f} |")
            timelines.append(timeline)
        figure = os.path.join(results, f"serving_{model}_t4{suffixed(state)}.png")
        subprocess.run([sys.executable, os.path.join(HERE, "plot_serving.py"), *timelines, "--out", figure],
                       check=True, stdout=subprocess.DEVNULL)
    return "\n".join(lines)


def held_out_summary(text):
    """Per held-out batch: points, those beyond 10%, the largest error (from `kvbuf step --held-out`)."""
    by_batch = {}
    for m in re.finditer(r"^(\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s+[\d.]+\s+[\d.]+\s+([+-][\d.]+)%", text, re.M):
        kernel, batch, chunk, drafts, err = m.group(1), int(m.group(2)), m.group(3), m.group(4), float(m.group(5))
        by_batch.setdefault(batch, []).append((abs(err), f"{kernel} C {chunk} T {drafts}: {err:+.1f}%"))
    lines = ["| held-out batch | points | beyond 10% | largest error |", "|---|---|---|---|"]
    for batch, errs in sorted(by_batch.items()):
        beyond = sorted((e for e in errs if e[0] > 10), reverse=True)
        worst = ", ".join(w for _, w in beyond[:4]) + (" ..." if len(beyond) > 4 else "")
        lines.append(f"| {batch} | {len(errs)} | {len(beyond)}{' (' + worst + ')' if beyond else ''} | "
                     f"{max(e for e, _ in errs):.1f}% |")
    return "\n".join(lines)


def state_section(doc, a, state, tmp_csv):
    """The tables of one state dtype, under their own heading."""
    flag = "" if state == "fp32" else f" --state-dtype {state}"
    doc.write(f"## {state} states\n\n{provenance(a.results, state)}\n\n")
    doc.write(f"### Whole-model decode speedup, KVBuffer (C = {STEP_CHUNK}) over classic, no speculation\n\n")
    doc.write(f"`kvbuf step --model M --tp N --context L --chunk 8 --batch 1,32,128,256,512{flag}`; m: linear attention "
              "measured, e: extrapolated beyond the measured batches, M: modelled (bytes model, no table); the last "
              "column is the linear layers' share of the classic step over the batches.\n\n")
    doc.write(speedup_table(a.kvbuf, a.results, tmp_csv, state) + "\n\n")
    os.remove(tmp_csv)
    capacity = ["capacity", "--model", "all", "--drafts", "4", "--chunk", "16", "--context", "32768", "--weights-gib", "0",
                *state_args(state)]
    doc.write(f"### Capacity at T = 4 drafts\n\n```\n$ kvbuf {' '.join(capacity)}\n")
    doc.write(subprocess.run([a.kvbuf, *capacity], capture_output=True, text=True, check=True).stdout)
    doc.write("```\n\n### Serving at T = 4, acceptance 0.7, C = 16 (one H200)\n\n")
    doc.write(f"`kvbuf simulate --model M --method classic|kvbuffer {' '.join(SERVING_ARGS)}{flag} --csv "
              f"results/serving_<model>_<method>_t4{suffixed(state)}.csv`\n\n")
    doc.write(serving_table(a.kvbuf, a.results, state) + "\n\n")
    doc.write("### Held-out checks of the measured tables\n\n")
    for model in HELD_OUT_MODELS:
        args = ["step", "--held-out"] + (["--model", model] if model else []) + state_args(state)
        r = subprocess.run([a.kvbuf, *args, "--results", a.results], capture_output=True, text=True)
        name = model or "qwen3-next-80b-a3b (GDN)"
        if r.returncode != 0:
            doc.write(f"#### {name}\n\nnot available: {r.stderr.strip()}\n\n")
            continue
        doc.write(f"#### {name}\n\n{held_out_summary(r.stdout)}\n\n```\n$ kvbuf {' '.join(args)}\n{r.stdout}```\n\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kvbuf", default=os.path.join(HERE, "..", "build", "bench", "kvbuf"))
    ap.add_argument("--results", default=os.path.join(HERE, "..", "results"))
    ap.add_argument("--out", default=None, help="markdown file (default: RESULTS/serving_tables.md)")
    ap.add_argument("--state-dtype", default=",".join(DEFAULT_STATE_DTYPES),
                    help="state dtypes, comma-separated, a section each (fp32, bf16, fp16)")
    a = ap.parse_args()
    states = list(dict.fromkeys(a.state_dtype.split(",")))
    unknown = [d for d in states if d not in STATE_DTYPES]
    if unknown:
        ap.error(f"--state-dtype: {', '.join(unknown)} not in {', '.join(STATE_DTYPES)}")
    out_path = a.out or os.path.join(a.results, "serving_tables.md")
    tmp_csv = out_path + ".step.tmp.csv"
    doc = io.StringIO()
    doc.write("# Serving simulator tables (generated by scripts/serving_report.py; do not edit)\n\n")
    # The GPU line, where each term comes from, and the operator profile where one is used.
    head = kvbuf(a.kvbuf, ["step", "--model", "qwen3.5-9b", "--batch", "1"], a.results).splitlines()[1:4]
    head = [l.replace(os.path.join(a.results, ""), "results/") for l in head if l.startswith(("GPU ", "terms:", "profile "))]
    doc.write("\n".join(head) + "\n\n")
    doc.write(f"A section per state dtype of the linear-attention state ({', '.join(states)}): `--state-dtype` of "
              "`kvbuf step`, `simulate` and `capacity` takes the linear layers from that state type's measured tables "
              "and sizes each request's pools with it, both methods alike.\n\n")
    for state in states:
        state_section(doc, a, state, tmp_csv)
    with open(out_path, "w") as f:
        f.write(doc.getvalue().rstrip("\n") + "\n")
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
