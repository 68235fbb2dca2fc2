#!/usr/bin/env python3
"""DRAM bytes of `kvbuf sweep` decode and verify points measured by Nsight Compute, next to the bytes
model's.

On a GPU machine (ncu reads the hardware counters), one ncu run per point:

    scripts/ncu_bytes.py --kvbuf BUNDLE/bin/kvbuf --model qwen3-next-80b-a3b --kernels recurrent,kvbuffer,direct \\
                         --batch 1,64,256 --chunk 4,8,16 --out results/ncu_bytes_h200.csv [--work DIR] [--ncu ncu]
    scripts/ncu_bytes.py --kvbuf BUNDLE/bin/kvbuf --kernels verify-classic-inplace,verify-kvbuffer --drafts 4 ...
    scripts/ncu_bytes.py --kvbuf BUNDLE/bin/kvbuf --kernels recurrent,kvbuffer,direct --state-dtype bf16,fp16 ...

--state-dtype (fp32 by default; a comma-separated list runs every point at each) passes through to
`kvbuf sweep --state-dtype`: the kernels keep their state pools in that type, and the model's bytes
come from the sweep CSV's row of that state dtype (a sweep CSV without a state_dtype column, written
before the axis, holds fp32 rows).

A verify point's sweep replays one verify + commit step of all layers per graph launch; its row comes
from the sweep's verify CSV (bytes per layer step at the acceptance rate the sweep draws).

Each point runs `kvbuf sweep --kernels K --batch B --chunk C` under
`ncu --clock-control none --graph-profiling graph --metrics dram__bytes_{read,write}.sum,lts__t_sectors_op_{read,write}.sum`:
the sweep captures one decode step (all layers) in a CUDA graph and replays it over whole flush
cycles, so each graph launch is one profiled workload (caches flushed before it, ncu's default).
`--budget-s 0.001` keeps the sweep to its minimum samples; `--max-point-s 100000` stops it from
skipping the point for the time the profiler adds. ncu names each graph launch's workload
"graph"; the last whole fill cycles of C steps of them (all launches replay the same step graph)
are summed and divided by steps x layers; the sweep's own CSV row gives the layers and the
bytes model's bytes per layer step (whole batch). The report and its raw CSV export stay in --work
for a second look.

Without a GPU, --dry-run prints the commands, and --from-export joins a saved raw export
(`ncu --import R.ncu-rep --csv --page raw --print-units base`) with a sweep CSV:

    scripts/ncu_bytes.py --from-export raw.csv --sweep-csv sweep.csv --kernels kvbuffer --batch 64 --chunk 8 \
                         [--state-dtype bf16] --out F

Output CSV, one row per point: model, kernel, mode, batch, chunk, drafts, state_dtype, layers, steps, DRAM read / write /
total bytes per layer step (whole batch), model_bytes_per_layer_step, ratio (measured / model), the bytes
the SMs asked of L2 (read, write; DRAM below them is L2 hits, L2 above the model is traffic the model does
not count), gpu, commit. Exit status 0, 1 when a run fails, 2 on bad arguments or a malformed input.
"""
import argparse
import csv
import os
import subprocess
import sys
import tempfile

from results_csv import InputError, read_table, steady_state

METRIC_READ, METRIC_WRITE = "dram__bytes_read.sum", "dram__bytes_write.sum"
# What the SMs asked of L2 (32-byte sectors): next to the DRAM bytes, it tells L2 hits (DRAM below L2) from
# bytes the model does not count (L2 above the model).
METRIC_L2_READ, METRIC_L2_WRITE = "lts__t_sectors_op_read.sum", "lts__t_sectors_op_write.sum"
SECTOR_BYTES = 32
GRAPH_WORKLOAD = "graph"  # ncu's kernel name for a whole CUDA graph launch under --graph-profiling graph
UNIT_SCALE = {"sector": SECTOR_BYTES, "byte": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9, "tbyte": 1e12,
              "kibyte": 2 ** 10, "mibyte": 2 ** 20, "gibyte": 2 ** 30}
DECODE_MODES = {"recurrent": "recurrent", "recurrent-oop": "recurrent", "kvbuffer": "kvbuffer",
                "kvbuffer-fp32": "kvbuffer", "kvbuffer-raw": "kvbuffer", "kvbuffer-poolfill": "kvbuffer",
                "kvbuffer-single": "kvbuffer", "kvbuffer-split": "kvbuffer", "direct": "direct",
                "direct-single": "direct", "direct-split": "direct", "mamba2-recurrent": "recurrent",
                "mamba2-kvbuffer": "kvbuffer", "mamba2-kvbuffer-poolfill": "kvbuffer", "mamba2-direct": "direct",
                "mamba2-direct-single": "direct", "mamba2-direct-split": "direct"}
VERIFY_MODES = {"verify-classic": "verify-classic", "verify-classic-inplace": "verify-classic",
                "verify-kvbuffer": "verify-kvbuffer", "mamba2-verify-classic": "verify-classic",
                "mamba2-verify-kvbuffer": "verify-kvbuffer"}
MODES = {**DECODE_MODES, **VERIFY_MODES}
UNBUFFERED = ("recurrent", "verify-classic")
STATE_DTYPES = ("fp32", "bf16", "fp16")
COLUMNS = ("model", "kernel", "mode", "batch", "chunk", "drafts", "state_dtype", "layers", "steps",
           "dram_read_bytes_per_layer_step",
           "dram_write_bytes_per_layer_step", "dram_bytes_per_layer_step", "model_bytes_per_layer_step", "ratio",
           "l2_read_bytes_per_layer_step", "l2_write_bytes_per_layer_step", "gpu", "commit", "note")


class RunError(Exception):
    """A command that failed on the GPU machine."""


def number(text, where):
    cleaned = text.replace(",", "").strip()
    try:
        return float(cleaned)
    except ValueError:
        raise InputError(f"{where}: '{text}' is not a number") from None


def parse_ncu_raw(path):
    """The workloads of an `ncu --csv --page raw` export, in order: dicts with id, name, graph
    (whether it is a whole graph launch), read and write (DRAM bytes), l2_read and l2_write (bytes the SMs
    asked of L2; None when the export lacks those metrics). Lines
    before the header (ncu's ==PROF== lines, comments) are skipped; a units row, if any, scales."""
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such file")
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise InputError(f"{path}: no ncu raw CSV header (a line starting with \"ID\")")
    table = list(csv.reader(lines[start:]))
    header = table[0]
    missing = [c for c in ("ID", "Kernel Name", METRIC_READ, METRIC_WRITE) if c not in header]
    if missing:
        raise InputError(f"{path}: the ncu export lacks {', '.join(missing)} (run ncu with --metrics "
                         f"{METRIC_READ},{METRIC_WRITE})")
    col = {name: header.index(name) for name in header}
    body = table[1:]
    first_line = start + 2
    has_l2 = METRIC_L2_READ in col and METRIC_L2_WRITE in col
    metrics = (METRIC_READ, METRIC_WRITE) + ((METRIC_L2_READ, METRIC_L2_WRITE) if has_l2 else ())
    # Without a units row, ncu's base units: bytes for DRAM, sectors for L2.
    scale = {m: (SECTOR_BYTES if m in (METRIC_L2_READ, METRIC_L2_WRITE) else 1.0) for m in metrics}
    if body and not body[0][col["ID"]].strip():
        for metric in scale:
            unit = body[0][col[metric]].strip().lower()
            if unit not in UNIT_SCALE:
                raise InputError(f"{path}: unit '{unit}' of {metric} is not a byte unit")
            scale[metric] = UNIT_SCALE[unit]
        body = body[1:]
        first_line += 1
    workloads = []
    for n, cells in enumerate(body, start=first_line):
        if not cells:
            continue
        if len(cells) != len(header):
            raise InputError(f"{path}:{n}: {len(cells)} cells, the header has {len(header)}")
        name = cells[col["Kernel Name"]]
        workloads.append({"id": cells[col["ID"]], "name": name, "graph": name.strip() == GRAPH_WORKLOAD,
                          "read": number(cells[col[METRIC_READ]], f"{path}:{n}: {METRIC_READ}") * scale[METRIC_READ],
                          "write": number(cells[col[METRIC_WRITE]], f"{path}:{n}: {METRIC_WRITE}") * scale[METRIC_WRITE],
                          "l2_read": number(cells[col[METRIC_L2_READ]], f"{path}:{n}: {METRIC_L2_READ}") *
                          scale[METRIC_L2_READ] if has_l2 else None,
                          "l2_write": number(cells[col[METRIC_L2_WRITE]], f"{path}:{n}: {METRIC_L2_WRITE}") *
                          scale[METRIC_L2_WRITE] if has_l2 else None})
    return workloads


def timed_graph_bytes(workloads, cycle, where):
    """(steps, DRAM read, DRAM write, L2 read, L2 write bytes; the L2 ones None when not measured) over the whole
    cycles of `cycle` steps at the end of the graph launches (one launch = one decode step of all layers)."""
    launches = [w for w in workloads if w["graph"]]
    if not launches:
        raise InputError(f"{where}: no CUDA graph workloads (was ncu run with --graph-profiling graph?)")
    steps = len(launches) // cycle * cycle
    if steps == 0:
        raise InputError(f"{where}: the graph ran {len(launches)} steps, less than one fill cycle of {cycle}")
    whole = launches[len(launches) - steps:]
    l2 = [None if any(w[k] is None for w in whole) else sum(w[k] for w in whole) for k in ("l2_read", "l2_write")]
    return (steps, sum(w["read"] for w in whole), sum(w["write"] for w in whole), *l2)


def state_of(row):
    """A sweep row's state dtype: its state_dtype cell, fp32 where the column is absent or empty (rows
    written before the axis)."""
    return (row.get("state_dtype") or "").strip() or "fp32"


def sweep_row(path, kernel, batch, chunk, drafts, state_dtype="fp32"):
    """The sweep's measured row of the point: the decode CSV's `kernel` or the verify CSV's `method`, at
    the state dtype."""
    verify = kernel in VERIFY_MODES
    name = "method" if verify else "kernel"
    rows = read_table(path, required=("model", name, "gpu", "commit"),
                      ints=("batch", "chunk", "layers") + (("drafts",) if verify else ()),
                      floats=("bytes_per_layer_step",),
                      keep=lambda r: bool((r.get("latency_us_median") or "").strip()) and steady_state(r))
    for r in rows:
        if r[name] == kernel and r["batch"] == batch and r["chunk"] == chunk and (not verify or r["drafts"] == drafts) \
                and state_of(r) == state_dtype:
            return r
    what = f"{kernel} batch {batch} chunk {chunk}" + (f" T {drafts}" if verify else "") + f" state {state_dtype}"
    raise InputError(f"{path}: no measured row for {what}")


def join(raw_path, sweep_path, kernel, batch, chunk, drafts=0, state_dtype="fp32"):
    """One output row: the graph launches' DRAM bytes per layer step next to the sweep row's model."""
    row = sweep_row(sweep_path, kernel, batch, chunk, drafts, state_dtype)
    steps, read, write, l2_read, l2_write = timed_graph_bytes(parse_ncu_raw(raw_path), max(chunk, 1), raw_path)
    per_step = steps * row["layers"]
    measured = (read + write) / per_step
    model = row["bytes_per_layer_step"]
    if not model or model <= 0:
        raise InputError(f"{sweep_path}:{row['_line']}: bytes_per_layer_step must be positive")
    return {"model": row["model"], "kernel": kernel, "mode": MODES[kernel], "batch": batch, "chunk": chunk,
            "drafts": drafts, "state_dtype": state_dtype,
            "layers": row["layers"], "steps": steps, "dram_read_bytes_per_layer_step": f"{read / per_step:.6g}",
            "dram_write_bytes_per_layer_step": f"{write / per_step:.6g}", "dram_bytes_per_layer_step": f"{measured:.6g}",
            "model_bytes_per_layer_step": f"{model:.6g}", "ratio": f"{measured / model:.4f}",
            "l2_read_bytes_per_layer_step": "" if l2_read is None else f"{l2_read / per_step:.6g}",
            "l2_write_bytes_per_layer_step": "" if l2_write is None else f"{l2_write / per_step:.6g}", "gpu": row["gpu"],
            "commit": row["commit"], "note": ""}


def points(kernels, batches, chunks, drafts, state_dtypes=("fp32",)):
    """(kernel, batch, chunk, T, state dtype) to run; chunk 0 for the unbuffered kernels and T 0 for
    decode, as the sweep writes them; a KVBuffer verify only where T <= C."""
    out = []
    for state in state_dtypes:
        for kernel in kernels:
            for batch in batches:
                for chunk in ([0] if MODES[kernel] in UNBUFFERED else chunks):
                    for t in (drafts if kernel in VERIFY_MODES else [0]):
                        if MODES[kernel] == "verify-kvbuffer" and t > chunk:
                            continue
                        out.append((kernel, batch, chunk, t, state))
    return out


def commands(args, kernel, batch, chunk, drafts, work, state_dtype="fp32"):
    stem = os.path.join(work, f"{kernel}_b{batch}_c{chunk}" + (f"_t{drafts}" if drafts else "") +
                        ("" if state_dtype == "fp32" else f"_{state_dtype}"))
    profile = [args.ncu, "--clock-control", "none", "--graph-profiling", "graph", "--metrics",
               f"{METRIC_READ},{METRIC_WRITE},{METRIC_L2_READ},{METRIC_L2_WRITE}", "--export", stem, "--force-overwrite",
               args.kvbuf, "sweep", "--model", args.model, "--kernels", kernel, "--batch", str(batch),
               "--chunk", str(max(chunk, 1)), "--state-dtype", state_dtype, "--budget-s", "0.001",
               "--max-point-s", "100000", "--out", stem + "_sweep.csv",
               "--verify-out", stem + "_verify.csv"] + (["--drafts", str(drafts)] if drafts else [])
    export = [args.ncu, "--import", stem + ".ncu-rep", "--csv", "--page", "raw", "--print-units", "base"]
    return profile, export, stem


def positive_list(text, name):
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise InputError(f"--{name}: expected positive integers, got '{text}'") from None
    if not values or any(v < 1 for v in values):
        raise InputError(f"--{name}: expected positive integers, got '{text}'")
    return values


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kvbuf", help="the CUDA build's kvbuf (GPU runs)")
    ap.add_argument("--ncu", default="ncu", help="the Nsight Compute CLI")
    ap.add_argument("--model", default="qwen3-next-80b-a3b")
    ap.add_argument("--kernels", default="recurrent,kvbuffer,direct", help="decode or verify kernels of kvbuf sweep")
    ap.add_argument("--batch", default="1,64,256")
    ap.add_argument("--chunk", default="4,8,16", help="buffer capacities C of the buffered kernels")
    ap.add_argument("--drafts", default="4", help="tokens per verify step T of the verify kernels")
    ap.add_argument("--state-dtype", default="fp32",
                    help="state dtypes of the kernels (kvbuf sweep --state-dtype), comma-separated: fp32, bf16, fp16")
    ap.add_argument("--out", required=True, help="CSV to write")
    ap.add_argument("--work", help="folder for the ncu reports and exports (default: a temporary folder)")
    ap.add_argument("--dry-run", action="store_true", help="print the commands only")
    ap.add_argument("--from-export", help="a saved `ncu --csv --page raw` export of one point (no GPU)")
    ap.add_argument("--sweep-csv", help="with --from-export: the sweep CSV of the same run")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        raise SystemExit(2 if e.code else 0) from None
    args.kernels = args.kernels.split(",")
    unknown = [k for k in args.kernels if k not in MODES]
    if unknown:
        raise InputError(f"--kernels: {', '.join(unknown)} not decode or verify kernels of kvbuf sweep "
                         f"(known: {', '.join(MODES)})")
    args.batch = positive_list(args.batch, "batch")
    args.chunk = positive_list(args.chunk, "chunk")
    args.drafts = positive_list(args.drafts, "drafts")
    args.state_dtype = list(dict.fromkeys(args.state_dtype.split(",")))
    unknown = [d for d in args.state_dtype if d not in STATE_DTYPES]
    if unknown:
        raise InputError(f"--state-dtype: {', '.join(unknown)} not a state dtype of kvbuf sweep "
                         f"(known: {', '.join(STATE_DTYPES)})")
    if args.from_export:
        if not args.sweep_csv:
            raise InputError("--from-export needs --sweep-csv")
        if len(args.kernels) != 1 or len(args.batch) != 1 or len(args.chunk) != 1 or len(args.drafts) != 1 or \
                len(args.state_dtype) != 1:
            raise InputError("--from-export joins one point: give one kernel, one batch, one chunk, one T and one "
                             "state dtype")
    elif not args.kvbuf:
        raise InputError("give --kvbuf (GPU runs) or --from-export with --sweep-csv")
    return args


def open_rows(path):
    """A CSV writer whose rows reach the disk as they are written."""
    f = open(path, "w", newline="")
    w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    f.flush()
    return f, w


def run_points(args):
    """Profiles every point, a row each as measured; a point whose run fails is a row with the reason.
    Returns the number of failed points."""
    work = args.work or ("WORK" if args.dry_run else tempfile.mkdtemp(prefix="ncu_bytes_"))
    todo = points(args.kernels, args.batch, args.chunk, args.drafts, args.state_dtype)
    if args.dry_run:
        for kernel, batch, chunk, drafts, state in todo:
            profile, export, stem = commands(args, kernel, batch, chunk, drafts, work, state)
            print(" ".join(profile))
            print(" ".join(export) + f" > {stem}_raw.csv")
        return 0
    os.makedirs(work, exist_ok=True)
    f, out = open_rows(args.out)
    failed = 0
    with f:
        for kernel, batch, chunk, drafts, state in todo:
            profile, export, stem = commands(args, kernel, batch, chunk, drafts, work, state)
            print(f"{kernel} batch {batch} chunk {chunk}" + (f" T {drafts}" if drafts else "") + f" state {state}: "
                  "profiling", flush=True)
            try:
                run = subprocess.run(profile, capture_output=True, text=True)
                with open(stem + "_ncu.log", "w") as log:
                    log.write(run.stdout + run.stderr)
                if run.returncode != 0:
                    raise RunError(f"kvbuf sweep under ncu exited {run.returncode} (log {stem}_ncu.log)")
                with open(stem + "_raw.csv", "w") as raw:
                    exported = subprocess.run(export, stdout=raw, stderr=subprocess.PIPE, text=True)
                if exported.returncode != 0:
                    raise RunError(f"ncu --import exited {exported.returncode}: {exported.stderr.strip()}")
                sweep_csv = stem + ("_verify.csv" if kernel in VERIFY_MODES else "_sweep.csv")
                row = join(stem + "_raw.csv", sweep_csv, kernel, batch, chunk, drafts, state)
                print(f"  {row['dram_bytes_per_layer_step']} B per layer step measured, "
                      f"{row['model_bytes_per_layer_step']} modelled: ratio {row['ratio']}", flush=True)
            except (RunError, InputError, OSError) as e:
                failed += 1
                print(f"  not measured: {e}", file=sys.stderr, flush=True)
                row = {"model": args.model, "kernel": kernel, "mode": MODES[kernel], "batch": batch, "chunk": chunk,
                       "drafts": drafts, "state_dtype": state, "note": f"not measured: {e}".replace("\n", " ")}
            out.writerow(row)
            f.flush()
    print(f"wrote {args.out} ({len(todo)} rows, {failed} not measured); ncu reports and exports in {work}")
    return failed


def main(argv):
    try:
        args = parse_args(argv)
        if args.from_export:
            kernel = args.kernels[0]
            row = join(args.from_export, args.sweep_csv, kernel, args.batch[0],
                       0 if MODES[kernel] in UNBUFFERED else args.chunk[0],
                       args.drafts[0] if kernel in VERIFY_MODES else 0, args.state_dtype[0])
            f, out = open_rows(args.out)
            with f:
                out.writerow(row)
            print(f"wrote {args.out} (1 row)")
            return 0
        return 1 if run_points(args) else 0
    except InputError as e:
        print(f"ncu_bytes.py: {e}", file=sys.stderr)
        return 2
    except (RunError, OSError) as e:
        print(f"ncu_bytes.py: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
