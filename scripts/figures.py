#!/usr/bin/env python3
"""Draws every figure of results/ from its CSVs, as PNG and SVG, for Gated DeltaNet (Qwen3-Next) and
Mamba-2 (Nemotron-3 Nano):

    scripts/figures.py [--results results] [--gpu h200] [--out results/figures_h200] [--kvbuf build/bench/kvbuf]
                       [--only NAME,...] [--decode F] [--verify F] [--context F] [--public F] [--fla F]
                       [--public-mamba2 F] [--capacity F,...] [--ncu F] [--accuracy F]

Inputs, by default found in --results with the --gpu suffix (an input given by name must exist; a
default one that is missing only skips what needs it):
  decode_GPU.csv          `kvbuf sweep --out` rows; Mamba-2 rows are those whose kernel starts with
                          mamba2-; rows with a positive `context_tokens` are the short-context sweep
  context_GPU.csv         a short-context sweep run on its own (`kvbuf sweep --context ...`), read
                          for the short-context figure in place of decode_GPU.csv's context rows
  verify_GPU.csv          `kvbuf sweep --verify-out` rows
  public_GPU.csv          scripts/bench_public.py: the public kernels that install by name (fla-core, mamba-ssm,
                          FlashInfer) timed with kvbuf's method, each row with its package's version
  fla_GPU.csv             FLA's kernel timed with kvbuf's method before bench_public.py (scripts/bench_fla.py):
                          drawn where public_GPU.csv has no FLA rows
  public_mamba2_GPU.csv   recorded latencies of public Mamba-2 kernels (vLLM, ReplaySSM) on that GPU, decode
                          and verify (a verify row has its T in drafts), with their source
  capacity_GPU*.csv       `kvbuf capacity --measure --csv`
  ncu_bytes_GPU.csv       scripts/ncu_bytes.py (DRAM bytes measured by Nsight Compute)
  accuracy_GPU.csv        `kvbuf accuracy` (output and state error of fp32 / bf16 / fp16 states over one long
                          generation against the float64 reference)
  step_GPU*.csv           `kvbuf step --measure --out` (the whole-model decode step, measured and simulated)
With --kvbuf, the modelled lines come from that binary (`kvbuf bytes`, `kvbuf capacity`); then the
model-only figures (bytes per step, capacity, short-context memory) need no GPU CSV at all.
The figures are of fp32 states: of decode_GPU.csv, verify_GPU.csv, context_GPU.csv, ncu_bytes_GPU.csv
and the capacity CSVs they read the rows whose state_dtype is fp32 (or that have no such column: rows
written before it), as the modelled lines are; the paper preset also writes each model's engine-default
(16-bit) rows there. The bf16 decode lines beside them come from decode16_GPU.csv.

Figures (NAME_FAMILY.png/.svg, FAMILY gdn or mamba2): decode_latency, speedup_vs_chunk, verify,
short_context, bytes_per_step, telemetry, accuracy; and capacity.png/.svg (every catalog model) and
step.png/.svg (the whole-model step's KVBuffer speedup against batch, a panel per model and setting). A figure that has nothing
to draw is skipped with the reason printed. Exit status 0, or 2 with a message when an input is
malformed or an argument is bad.
"""
import argparse
import glob
import math
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["svg.hashsalt"] = "kvbuf"  # the same inputs give byte-identical SVGs
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.ticker import FuncFormatter  # noqa: E402
from results_csv import InputError, clock_limited, read_table  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
FIGURES = ("decode_latency", "speedup_vs_chunk", "verify", "capacity", "short_context", "bytes_per_step", "telemetry",
           "accuracy", "step")

# The paper's claims the figures are read against (results/README.md compares them).
PAPER_CAPACITY_RATIO_T4 = 5.0
PAPER_WHOLE_MODEL_SPEEDUP = 1.47


class Family:
    def __init__(self, name, title, model, recurrent, kvbuffer, direct, recurrent_oop=None):
        self.name, self.title, self.default_model = name, title, model
        self.recurrent, self.kvbuffer, self.direct, self.recurrent_oop = recurrent, kvbuffer, direct, recurrent_oop

    def owns(self, kernel):
        return kernel.startswith("mamba2-") == (self.name == "mamba2")


FAMILIES = (
    Family("gdn", "Gated DeltaNet", "qwen3-next-80b-a3b", "recurrent", "kvbuffer", "direct", "recurrent-oop"),
    Family("mamba2", "Mamba-2", "nemotron-3-nano-30b-a3b", "mamba2-recurrent", "mamba2-kvbuffer", "mamba2-direct"),
)


class Skip(Exception):
    """A figure with nothing to draw; the message says why."""


def measured(row):
    return bool((row.get("latency_us_median") or "").strip())


def state_of(row):
    """A row's state dtype: its state_dtype cell, fp32 where the column is absent or empty."""
    return (row.get("state_dtype") or "").strip() or "fp32"


def fp32_rows(rows):
    return None if rows is None else [r for r in rows if state_of(r) == "fp32"]


# ---------------------------------------------------------------- inputs


class Inputs:
    """Every input table, read once; None where the file is absent (and was not asked for)."""

    def __init__(self, args):
        res, gpu = args.results, args.gpu
        self.kvbuf = args.kvbuf

        def path(given, default):
            if given:
                return given, True
            return os.path.join(res, default), False

        def load(given, default, loader):
            p, explicit = path(given, default)
            if not explicit and not os.path.isfile(p):
                return None, p
            return loader(p), p

        # fp32 rows only (fp32_rows), as the modelled lines; the 16-bit ones are drawn from decode16.
        self.decode, self.decode_path = load(args.decode, f"decode_{gpu}.csv", load_decode)
        self.decode = fp32_rows(self.decode)
        # The decode kernels with 16-bit states (kvbuf sweep --state-dtype bf16,fp16), beside fp32.
        self.decode16, self.decode16_path = load(args.decode16, f"decode16_{gpu}.csv", load_decode)
        self.verify, self.verify_path = load(args.verify, f"verify_{gpu}.csv", load_verify)
        self.verify = fp32_rows(self.verify)
        # The short-context sweep (kvbuf sweep --context ...), where it ran apart from the decode sweep.
        self.context, self.context_path = load(args.context, f"context_{gpu}.csv", load_decode)
        self.context = fp32_rows(self.context)
        self.fla, self.fla_path = load(args.fla, f"fla_{gpu}.csv", load_fla)
        self.measured_public, self.measured_public_path = load(args.public, f"public_{gpu}.csv", load_measured_public)
        self.public, self.public_path = load(args.public_mamba2, f"public_mamba2_{gpu}.csv", load_public)
        self.ncu, self.ncu_path = load(args.ncu, f"ncu_bytes_{gpu}.csv", load_ncu)
        self.ncu = fp32_rows(self.ncu)
        self.accuracy, self.accuracy_path = load(args.accuracy, f"accuracy_{gpu}.csv", load_accuracy)
        cap_paths = args.capacity.split(",") if args.capacity else sorted(glob.glob(os.path.join(res, f"capacity_{gpu}*.csv")))
        self.capacity = [(p, fp32_rows(load_capacity(p))) for p in cap_paths]
        step_paths = args.step.split(",") if args.step else sorted(glob.glob(os.path.join(res, f"step_{gpu}*.csv")))
        self.step = [(p, load_step(p)) for p in step_paths]
        self._bytes_cache, self._capacity_cache = {}, {}

    # Modelled tables from the kvbuf binary (None without --kvbuf).
    def kvbuf_bytes(self, model, chunks):
        if not self.kvbuf:
            return None
        key = (model, tuple(chunks))
        if key not in self._bytes_cache:
            with tempfile.TemporaryDirectory() as tmp:
                out = os.path.join(tmp, "bytes.csv")
                stdout = run_kvbuf(self.kvbuf, ["bytes", "--model", model, "--batch", "1", "--chunk",
                                                ",".join(map(str, chunks)), "--summary", "--csv", out])
                rows = read_table(out, required=("mode", "tensor", "chunk", "commit"),
                                  floats=("read_bytes", "write_bytes", "total_bytes"))
            layers = re.search(r"(\d+) linear layers", stdout)
            if not layers:
                raise InputError(f"{self.kvbuf} bytes: no 'N linear layers' in its output")
            self._bytes_cache[key] = (rows, int(layers.group(1)))
        return self._bytes_cache[key]

    def kvbuf_capacity(self, extra):
        if not self.kvbuf:
            return None
        key = tuple(extra)
        if key not in self._capacity_cache:
            with tempfile.TemporaryDirectory() as tmp:
                out = os.path.join(tmp, "capacity.csv")
                run_kvbuf(self.kvbuf, ["capacity", *extra, "--csv", out])
                self._capacity_cache[key] = load_capacity(out)
        return self._capacity_cache[key]


def run_kvbuf(kvbuf, argv):
    try:
        r = subprocess.run([kvbuf, *argv], capture_output=True, text=True)
    except OSError as e:
        raise InputError(f"--kvbuf {kvbuf}: {e.strerror}") from None
    if r.returncode != 0:
        raise InputError(f"{kvbuf} {' '.join(argv)} failed ({r.returncode}): {r.stderr.strip()}")
    return r.stdout


def load_decode(p):
    rows = read_table(p, required=("model", "kernel", "gpu", "commit"), ints=("batch", "chunk"),
                      floats=("latency_us_median", "bytes_per_layer_step", "gbps", "copy_gbps"),
                      optional_floats=("sm_clock_mhz", "power_w", "context_tokens"), keep=measured)
    for r in rows:
        if r["latency_us_median"] <= 0:
            raise InputError(f"{p}:{r['_line']}: latency_us_median must be positive")
    return rows


def load_verify(p):
    rows = read_table(p, required=("model", "method", "gpu", "commit"), ints=("batch", "drafts", "chunk"),
                      floats=("latency_us_median", "latency_us_per_token", "acceptance"), keep=measured)
    return [r for r in rows if not r["method"].endswith("-tree")]


def load_fla(p):
    return read_table(p, required=("model", "kernel", "gpu", "commit"), ints=("batch",),
                      floats=("latency_us_median",), keep=measured)


def load_measured_public(p):
    return read_table(p, required=("model", "kernel", "package_version", "state_dtype", "gpu", "commit"),
                      ints=("batch",), floats=("latency_us_median",), keep=measured)


# Display names of the public kernels (public_GPU.csv, public_mamba2_GPU.csv), as their users know
# them; an id not listed is shown as it is.
PUBLIC_KERNEL_NAMES = {
    "fla-fused-recurrent-vfirst-oop": "FLA fused_recurrent_gated_delta_rule",
    "flashinfer-gdn-decode-pretranspose": "FlashInfer gated_delta_rule_decode",
    "mamba-ssm-selective-state-update": "mamba-ssm selective_state_update",
    "vllm-selective-state-update": "vLLM selective_state_update",
    "vllm-verify-classic": "vLLM classic verify",
    "replayssm": "ReplaySSM decode",
    "replayssm-verify": "ReplaySSM verify",
}


def public_label(row):
    """Legend label of a recorded public-kernel figure: its kernel by name, ReplaySSM's buffer length L
    (the chunk column), T for a verify figure, and where the number comes from."""
    name = PUBLIC_KERNEL_NAMES.get(row["kernel"], row["kernel"])
    if row.get("chunk"):
        name += f", {'L' if row['kernel'].startswith('replayssm') else 'C'} = {row['chunk']}"
    if row.get("drafts") is not None:
        name += f", T = {int(row['drafts'])}"
    gpu = row.get("gpu")
    return f"{name} (public kernel, recorded {gpu + ' ' if gpu else ''}figures)"


def load_public(p):
    # A verify figure has its T in the drafts column; a decode one none (or no such column).
    return read_table(p, required=("model", "kernel", "gpu", "source"), ints=("batch",), floats=("latency_us",),
                      optional_floats=("drafts",))


def load_capacity(p):
    return read_table(p, required=("model", "kind", "gpu", "commit"),
                      ints=("drafts", "chunk", "tp", "context_tokens", "classic_max_requests_linear",
                            "kvbuffer_max_requests_linear", "measured_classic_max_requests",
                            "measured_kvbuffer_max_requests"),
                      floats=("ratio_linear", "measured_ratio", "weight_bytes", "gpu_memory_bytes"))


def load_ncu(p):
    return read_table(p, required=("model", "kernel", "mode", "gpu", "commit"), ints=("batch", "chunk", "steps"),
                      floats=("dram_bytes_per_layer_step", "model_bytes_per_layer_step", "ratio"),
                      keep=lambda r: not (r.get("note") or "").strip())  # a point ncu did not measure says why


def load_accuracy(p):
    return read_table(p, required=("family", "model", "method", "state_dtype", "entry_dtype", "gpu", "commit"),
                      ints=("chunk", "tokens", "window_tokens"),
                      floats=("out_rel_err", "out_rel_err_window", "out_max_abs_err"),
                      optional_floats=("state_rel_err", "state_rel_err_max_head", "state_rel_err_one_rounding"))


# ---------------------------------------------------------------- drawing helpers


def load_step(p):
    return read_table(p, required=("model", "method", "state_dtype", "gpu", "commit"),
                      ints=("tp", "batch", "context", "drafts"), floats=("measured_step_us", "simulated_step_us"),
                      optional_floats=("measured_speedup", "simulated_speedup"),
                      keep=lambda row: (row.get("measured_step_us") or "").strip() != "")


def provenance(*sources):
    """Caption text: for each (label, path, rows) its GPU and commits, from the rows' own columns."""
    parts = []
    for label, path, rows in sources:
        if not rows:
            continue
        gpus = sorted({r.get("gpu") for r in rows if r.get("gpu")})
        commits = sorted({r.get("commit") for r in rows if r.get("commit")})
        text = f"{label}: {os.path.basename(path)}"
        if gpus:
            text += f", {'/'.join(gpus)}"
        if commits:
            text += f", commit {'/'.join(c[:12] for c in commits)}"
        parts.append(text)
    return "; ".join(parts)


def new_figure(panels, title, max_cols=4):
    """A figure of `panels` axes, at most `max_cols` to a row (the step figure has one per setting)."""
    ncols = min(panels, max_cols)
    nrows = -(-panels // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(6.4 * ncols, 5.2 * nrows), squeeze=False)
    fig.suptitle(title, fontsize=12)
    flat = list(axes.flat)
    for ax in flat[panels:]:
        ax.set_visible(False)
    return fig, flat[:panels]


def caption(fig, text):
    width = int(fig.get_figwidth() * 17)
    fig.text(0.01, 0.01, "\n".join(textwrap.wrap(text, width)), fontsize=7, va="bottom", ha="left", color="0.25")


def note(ax, text, x=0.5, y=0.5):
    ax.text(x, y, text, transform=ax.transAxes, ha="center", va="center", fontsize=10, color="0.3", wrap=True,
            bbox=dict(boxstyle="round", fc="0.95", ec="0.7"))


def log_axes(ax, xlabel, ylabel, title, logy=True):
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)


def legend(ax, **kw):
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, **kw)


def best_by(rows, key):
    """key(row) -> the row with the lowest median latency."""
    best = {}
    for r in rows:
        k = key(r)
        if k not in best or r["latency_us_median"] < best[k]["latency_us_median"]:
            best[k] = r
    return best


def pick_batches(available, wanted=(1, 8, 64, 256, 512), most=5):
    chosen = [b for b in wanted if b in available]
    return chosen if chosen else sorted(available)[:most]


def family_rows(inputs, fam, context=False):
    """The family's measured decode rows of one model (the first named), regular or short-context
    (from the context CSV where there is one)."""
    source = inputs.context if context and inputs.context else inputs.decode
    rows = [r for r in source or [] if fam.owns(r["kernel"]) and bool(r.get("context_tokens")) == context]
    if rows:
        model = rows[0]["model"]
        rows = [r for r in rows if r["model"] == model]
    return rows


def model_of(inputs, fam):
    rows = family_rows(inputs, fam)
    return rows[0]["model"] if rows else fam.default_model


# ---------------------------------------------------------------- 1. decode latency vs batch


def fig_decode_latency(inputs, fam):
    rows = family_rows(inputs, fam)
    public, public_sources = [], []
    # Measured public kernels of this family (bench_public.py), fp32 states as the sweep's rows.
    mine = [r for r in inputs.measured_public or [] if r["state_dtype"] == "fp32"
            and (r["kernel"].startswith("mamba-ssm") if fam.name == "mamba2" else not r["kernel"].startswith("mamba"))]
    public += [(f"{PUBLIC_KERNEL_NAMES.get(r['kernel'], r['kernel'])} {r['package_version']} (public, same method)",
                r["batch"], r["latency_us_median"], r) for r in mine]
    public_sources.append(("public kernels, same method", inputs.measured_public_path, mine))
    if fam.name == "gdn" and inputs.fla and not any(r["kernel"] == "fla-fused-recurrent-vfirst-oop" for r in mine):
        public += [(f"{r['kernel']} (public, same method)", r["batch"], r["latency_us_median"], r) for r in inputs.fla]
        public_sources.append(("FLA", inputs.fla_path, inputs.fla))
    elif fam.name == "mamba2" and inputs.public:
        decode_public = [r for r in inputs.public if r["drafts"] is None]
        public += [(public_label(r), r["batch"], r["latency_us"], r) for r in decode_public]
        public_sources.append(("recorded public figures", inputs.public_path, decode_public))
    if not rows and not public:
        raise Skip(f"no measured {fam.title} decode rows in {inputs.decode_path} and no public baseline")
    model = rows[0]["model"] if rows else public[0][3]["model"]
    fig, (ax,) = new_figure(1, f"{fam.title} decode, {model}: latency per layer vs batch")
    by = best_by(rows, lambda r: (r["kernel"], r["batch"]))
    direct_chunk = max((r["chunk"] for r in rows if r["kernel"] == fam.direct), default=None)
    lines = [(fam.recurrent, "recurrent (in place)", "o-"), (fam.recurrent_oop, "recurrent (out of place)", "s-"),
             (fam.kvbuffer, "KVBuffer at its best C", "D-")]
    for kernel, label, style in lines:
        pts = sorted((b, r) for (k, b), r in by.items() if k == kernel)
        if not pts:
            continue
        ax.plot([b for b, _ in pts], [r["latency_us_median"] for _, r in pts], style, label=label, ms=4)
        if kernel == fam.kvbuffer:
            for b, r in pts:
                ax.annotate(f"C={r['chunk']}", (b, r["latency_us_median"]), fontsize=6, textcoords="offset points",
                            xytext=(3, -9))
    if direct_chunk:
        pts = sorted((r["batch"], r["latency_us_median"]) for r in rows
                     if r["kernel"] == fam.direct and r["chunk"] == direct_chunk)
        ax.plot(*zip(*pts), "v-", ms=4, label=f"direct mode, C={direct_chunk} (stateless, context < {direct_chunk})")
    rows16 = [r for r in inputs.decode16 or [] if fam.owns(r["kernel"]) and r.get("state_dtype") == "bf16"
              and not r.get("context_tokens")]
    by16 = best_by(rows16, lambda r: (r["kernel"], r["batch"]))
    for kernel, label, style in ((fam.recurrent, "recurrent (in place), bf16 state", "o:"),
                                 (fam.kvbuffer, "KVBuffer at its best C, bf16 state", "D:")):
        pts = sorted((b, r["latency_us_median"]) for (k, b), r in by16.items() if k == kernel)
        if pts:
            ax.plot(*zip(*pts), style, ms=3, alpha=0.8, label=label)
    by_public = defaultdict(list)
    for label, b, lat, _ in public:
        by_public[label].append((b, lat))
    for label, pts in by_public.items():
        ax.plot(*zip(*sorted(pts)), "x--", ms=6, label=label)
    rec = sorted((b, r) for (k, b), r in by.items() if k == fam.recurrent)
    if rec:
        ax.plot([b for b, _ in rec], [r["bytes_per_layer_step"] / r["copy_gbps"] / 1e3 for _, r in rec], "k:", lw=1.2,
                label="copy roofline: recurrent bytes / measured copy GB/s")
    kvb = sorted((b, r) for (k, b), r in by.items() if k == fam.kvbuffer)
    if kvb:
        ax.plot([b for b, _ in kvb], [r["bytes_per_layer_step"] / r["copy_gbps"] / 1e3 for _, r in kvb], "k-.", lw=1,
                label="copy roofline: KVBuffer bytes (its best C) / copy GB/s")
    log_axes(ax, "batch (requests per step)", "latency per layer per step (us, median)",
             "all linear layers' pools, one CUDA graph per step, whole flush cycles")
    if not rows:
        note(ax, f"no measurement of kvbuf's {fam.title} kernels\n({fam.recurrent}, {fam.kvbuffer}, {fam.direct} rows)"
                 f"\nin {os.path.basename(inputs.decode_path)}: needs the GPU sweep", x=0.62, y=0.18)
        print(f"decode_latency_{fam.name}: no measured {fam.title} rows in {inputs.decode_path}; "
              "drawn with the public numbers only, marked 'no measurement'")
    legend(ax)
    sources = [("kvbuf", inputs.decode_path, rows), *public_sources]
    if rows16:
        sources.append(("kvbuf, bf16 states", inputs.decode16_path, rows16))
    caption(fig, provenance(*sources) +
            (". Roofline = modelled bytes (sim/bytes_model.h) / the copy bandwidth measured in the same run." if rows else
             ". No kvbuf rows: no roofline (it needs the copy bandwidth measured in the sweep)."))
    return fig


# ---------------------------------------------------------------- 2. speedup and bytes per token vs C


def modelled_bytes_per_request(inputs, fam, model, chunks, rows):
    """mode -> {C: modelled bytes per request per layer step} (C 0: independent of C), from kvbuf
    bytes when given, else from the sweep rows' bytes column. Returns (table, source text)."""
    table = defaultdict(dict)
    kb = inputs.kvbuf_bytes(model, chunks) if chunks else None
    if kb:
        for r in kb[0]:
            mode = mode_of_bytes_row(r["mode"])
            if mode:
                c = int(r["chunk"]) if r["chunk"] else 0
                table[mode][c] = table[mode].get(c, 0) + r["total_bytes"]
        return table, f"model: kvbuf bytes --model {model} (commit {kb[0][0]['commit'][:12]})"
    for r in rows:
        mode = mode_of_kernel(fam, r["kernel"])
        if mode:
            table[mode][r["chunk"] if mode != "recurrent" else 0] = r["bytes_per_layer_step"] / r["batch"]
    return table, "model: the sweep CSV's bytes_per_layer_step (sim/bytes_model.h)"


def mode_of_bytes_row(mode):
    for name in ("recurrent", "kvbuffer", "direct"):
        if mode == name or mode.startswith(name + "-") or mode.startswith(name + " "):
            return name
    return None


def mode_of_kernel(fam, kernel):
    return {fam.recurrent: "recurrent", fam.kvbuffer: "kvbuffer", fam.direct: "direct"}.get(kernel)


def fig_speedup_vs_chunk(inputs, fam):
    rows = family_rows(inputs, fam)
    rec = {r["batch"]: r for r in best_by([r for r in rows if r["kernel"] == fam.recurrent], lambda r: r["batch"]).values()}
    kvb = [r for r in rows if r["kernel"] == fam.kvbuffer and r["batch"] in rec]
    if not kvb:
        raise Skip(f"no measured {fam.recurrent} and {fam.kvbuffer} rows at the same batch in {inputs.decode_path}")
    model = kvb[0]["model"]
    fig, (ax_sp, ax_bt) = new_figure(2, f"{fam.title} decode, {model}: KVBuffer against recurrent vs buffer capacity C")
    batches = pick_batches({r["batch"] for r in kvb})
    chunks = sorted({r["chunk"] for r in kvb})
    cmap = plt.get_cmap("viridis")
    for i, b in enumerate(batches):
        pts = sorted((r["chunk"], rec[b]["latency_us_median"] / r["latency_us_median"]) for r in kvb if r["batch"] == b)
        ax_sp.plot(*zip(*pts), "o-", ms=4, color=cmap(i / max(1, len(batches) - 1)), label=f"measured, batch {b}")
    modelled, model_source = modelled_bytes_per_request(inputs, fam, model, chunks, rows)
    if modelled.get("recurrent") and modelled.get("kvbuffer"):
        rec_bytes = modelled["recurrent"][0]
        cs = sorted(c for c in modelled["kvbuffer"] if c in chunks)
        ax_sp.plot(cs, [rec_bytes / modelled["kvbuffer"][c] for c in cs], "k--", lw=1.2,
                   label="modelled: recurrent bytes / KVBuffer bytes")
        ax_bt.axhline(rec_bytes / 1e6, color="k", lw=1, ls=":", label="recurrent (modelled)")
        ax_bt.plot(cs, [modelled["kvbuffer"][c] / 1e6 for c in cs], "k--", lw=1.2, label="KVBuffer (modelled)")
        if modelled.get("direct"):
            cd = sorted(c for c in modelled["direct"] if c in chunks)
            ax_bt.plot(cd, [modelled["direct"][c] / 1e6 for c in cd], "k-.", lw=1, label="direct mode (modelled)")
    ax_sp.axhline(1.0, color="0.5", lw=1)
    log_axes(ax_sp, "buffer capacity C (tokens)", "speedup: recurrent latency / KVBuffer latency",
             "measured speedup and its bytes-model limit", logy=False)
    ncu = [r for r in inputs.ncu or [] if r["model"] == model and r["kernel"] == fam.kvbuffer]
    for i, b in enumerate(batches):
        pts = sorted((r["chunk"], r["dram_bytes_per_layer_step"] / r["batch"] / 1e6) for r in ncu if r["batch"] == b)
        if pts:
            ax_bt.plot(*zip(*pts), "o", ms=5, color=cmap(i / max(1, len(batches) - 1)),
                       label=f"measured DRAM bytes (ncu), batch {b}")
    log_axes(ax_bt, "buffer capacity C (tokens)", "MB per request per layer per step (1 MB = 1e6 B)",
             "bytes per token: modelled, and measured by Nsight Compute")
    if not ncu:
        ax_bt.text(0.5, 0.92, "no ncu measurement (scripts/ncu_bytes.py)", transform=ax_bt.transAxes, ha="center",
                   fontsize=8, color="0.35")
    legend(ax_sp)
    legend(ax_bt)
    caption(fig, provenance(("kvbuf", inputs.decode_path, rows), ("ncu", inputs.ncu_path, ncu)) + f"; {model_source}. "
            "Speedup over the best recurrent (in place) row at each batch; KVBuffer with cached-u bf16 entries.")
    return fig


# ---------------------------------------------------------------- 3. speculative verify vs T


def fig_verify(inputs, fam):
    prefix = "mamba2-" if fam.name == "mamba2" else ""
    rows = [r for r in inputs.verify or [] if fam.owns(r["method"])]
    if not rows:
        raise Skip(f"no measured {fam.title} verify rows ({inputs.verify_path})")
    classic = best_by([r for r in rows if r["method"] in (prefix + "verify-classic", prefix + "verify-classic-inplace")],
                      lambda r: (r["batch"], r["drafts"]))
    kvb = best_by([r for r in rows if r["method"] == prefix + "verify-kvbuffer"], lambda r: (r["batch"], r["drafts"]))
    if not classic or not kvb:
        raise Skip(f"{inputs.verify_path} needs both classic and {prefix}verify-kvbuffer rows")
    model = rows[0]["model"]
    acceptance = rows[0]["acceptance"]
    published = [r for r in inputs.public or [] if r["drafts"] is not None and r["model"] == model] \
        if fam.name == "mamba2" else []
    fig, axes = new_figure(3 if published else 2, f"{fam.title} speculative verify, {model}: classic vs KVBuffer vs drafts T")
    ax_step, ax_tok = axes[:2]
    batches = pick_batches({b for b, _ in kvb}, wanted=(1, 64, 256), most=3)
    colors = plt.get_cmap("tab10")
    for i, b in enumerate(batches):
        for table, style in ((classic, "s--"), (kvb, "o-")):
            pts = sorted((T, r) for (bb, T), r in table.items() if bb == b)
            ts = [T for T, _ in pts]
            ax_step.plot(ts, [r["latency_us_median"] for _, r in pts], style, ms=4, color=colors(i))
            ax_tok.plot(ts, [r["latency_us_per_token"] for _, r in pts], style, ms=4, color=colors(i))
    for ax in (ax_step, ax_tok):
        for i, b in enumerate(batches):
            ax.plot([], [], "-", color=colors(i), label=f"batch {b}")
        ax.plot([], [], "ks--", ms=4, label="classic (fastest: copy commit or in place)")
        ax.plot([], [], "ko-", ms=4, label="KVBuffer at its best C")
    for ax, ylabel, title in ((ax_step, "latency per layer per verify step (us, median)", "per verify step"),
                              (ax_tok, "us per layer per accepted token",
                               f"per accepted token (acceptance {acceptance}, E[m] = (1 - a^T) / (1 - a))")):
        ax.set_yscale("log")
        ax.set_xlabel("tokens verified per step T")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        legend(ax, ncol=2, loc="upper left")
    sources = [("kvbuf", inputs.verify_path, rows)]
    if published:
        verify_vs_published(axes[2], classic, kvb, published)
        sources.append(("recorded public figures", inputs.public_path, published))
    caption(fig, provenance(*sources) +
            ". Verify + commit of a chain of T tokens; classic writes a state per token, KVBuffer writes T entries.")
    return fig


def verify_vs_published(ax, classic, kvb, published):
    """Latency per verify step against batch at the published figures' T: ours (classic, KVBuffer at its
    best C) next to each published kernel."""
    T = int(published[0]["drafts"])
    for table, style, label in ((classic, "s--", "classic (ours, fastest)"), (kvb, "o-", "KVBuffer at its best C (ours)")):
        pts = sorted((b, r["latency_us_median"]) for (b, t), r in table.items() if t == T)
        ax.plot([b for b, _ in pts], [v for _, v in pts], style, ms=4, label=label)
    for kernel in sorted({r["kernel"] for r in published if int(r["drafts"]) == T}):
        mine = [r for r in published if r["kernel"] == kernel and int(r["drafts"]) == T]
        pts = sorted((r["batch"], r["latency_us"]) for r in mine)
        ax.plot([b for b, _ in pts], [v for _, v in pts], "^:", ms=5, label=public_label(mine[0]))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch (requests)")
    ax.set_ylabel("latency per layer per verify step (us, median)")
    ax.set_title(f"T = {T} against batch, with the published figures", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    legend(ax, loc="upper left")


# ---------------------------------------------------------------- 4. capacity vs T, every catalog model


def fig_capacity(inputs):
    measured_sets = [(p, [r for r in rows if r["measured_kvbuffer_max_requests"] is not None]) for p, rows in inputs.capacity]
    reference = next((rows[0] for _, rows in inputs.capacity if rows), None)
    if reference:
        config = {"chunk": reference["chunk"], "context": reference["context_tokens"], "tp": reference["tp"],
                  "gib": reference["gpu_memory_bytes"] / 2 ** 30, "weights_gib": reference["weight_bytes"] / 2 ** 30}
    else:
        config = {"chunk": 16, "context": 32768, "tp": 1, "gib": 141.0, "weights_gib": 0.0}
    modelled = inputs.kvbuf_capacity(["--model", "all", "--drafts", "all", "--chunk", str(config["chunk"]),
                                      "--context", str(config["context"]), "--tp", str(config["tp"]),
                                      "--gpu-mem-gib", f"{config['gib']:g}", "--weights-gib", f"{config['weights_gib']:g}"])
    model_source = f"kvbuf capacity (commit {modelled[0]['commit'][:12]})" if modelled else "kvbuf capacity"
    if modelled is None:
        modelled = [r for _, rows in inputs.capacity for r in rows if r["chunk"] == config["chunk"]]
        model_source = "the model columns of the capacity CSV"
    if not modelled:
        raise Skip("no capacity model: give --kvbuf or a capacity CSV")
    fig, (ax_n, ax_r) = new_figure(2, "Concurrent requests in the linear-attention pool: classic speculative decoding vs "
                                      "KVBuffer, every catalog model")
    models = list(dict.fromkeys(r["model"] for r in modelled))
    cmap = plt.get_cmap("tab20")
    color = {m: cmap(i % 20) for i, m in enumerate(models)}
    for m in models:
        pts = sorted((r["drafts"], r) for r in modelled if r["model"] == m)
        ts = [T for T, _ in pts]
        ax_n.plot(ts, [r["kvbuffer_max_requests_linear"] for _, r in pts], "-", color=color[m], lw=1.2, label=m)
        ax_n.plot(ts, [r["classic_max_requests_linear"] for _, r in pts], "--", color=color[m], lw=1)
        ax_r.plot(ts, [r["ratio_linear"] for _, r in pts], "-", color=color[m], lw=1.2, label=m)
    for p, rows in measured_sets:
        for r in rows:
            c = color.get(r["model"], "k")
            ax_n.plot(r["drafts"], r["measured_kvbuffer_max_requests"], "o", color=c, ms=4)
            ax_n.plot(r["drafts"], r["measured_classic_max_requests"], "s", color=c, ms=4, mfc="none")
            if r["measured_ratio"] is not None:
                marker = "o" if r["chunk"] == config["chunk"] else "^"
                ax_r.plot(r["drafts"], r["measured_ratio"], marker, color=c, ms=4)
    ax_n.plot([], [], "k-", label="KVBuffer (model)")
    ax_n.plot([], [], "k--", label="classic (model)")
    ax_n.plot([], [], "ko", ms=4, label="KVBuffer (measured)")
    ax_n.plot([], [], "ks", ms=4, mfc="none", label="classic (measured)")
    other_chunks = sorted({r["chunk"] for _, rows in measured_sets for r in rows} - {config["chunk"]})
    ax_r.plot([], [], "ko", ms=4, label=f"measured, C={config['chunk']}")
    for c in other_chunks:
        ax_r.plot([], [], "k^", ms=4, label=f"measured, C={c}")
    ax_r.plot([4], [PAPER_CAPACITY_RATIO_T4], "*", color="crimson", ms=11, label="paper: 5x at 4 drafts")
    ax_n.set_yscale("log")
    for ax, ylabel, title in ((ax_n, "max concurrent requests (linear-attention pool)", "requests that fit"),
                              (ax_r, "KVBuffer / classic requests", "ratio (model: exact bytes ratio)")):
        ax.set_xlabel("tokens verified per step T")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    ax_n.legend(fontsize=6, ncol=2)
    ax_r.legend(fontsize=6, ncol=2)
    caption(fig, f"Model: {model_source}, {config['gib']:g} GiB, weights {config['weights_gib']:g} GiB (the pool alone), "
                 f"context {config['context']}, C={config['chunk']}, tp {config['tp']}, fp32 states (the 16-bit rows of the "
                 "capacity CSV are in scripts/summary.py's tables); classic keeps 1 + T states and conv "
                 "windows per request and layer, KVBuffer one state, one conv window and C entries. Measured: " +
            (provenance(*[("capacity", p, rows) for p, rows in measured_sets]) or "none"))
    return fig


# ---------------------------------------------------------------- 5. short context


def memory_per_request(inputs, model, chunk):
    """Per request over all linear layers: (recurrent state + conv, buffered at C, conv alone, one entry),
    from kvbuf capacity (T = 1 at C and C + 1) and kvbuf bytes (the state per layer); None without --kvbuf."""
    at_c = inputs.kvbuf_capacity(["--model", model, "--drafts", "1", "--chunk", str(chunk), "--weights-gib", "0"])
    at_c1 = inputs.kvbuf_capacity(["--model", model, "--drafts", "1", "--chunk", str(chunk + 1), "--weights-gib", "0"])
    kb = inputs.kvbuf_bytes(model, [chunk])
    if at_c is None or kb is None:
        return None
    rows, layers = kb
    state = sum(r["read_bytes"] for r in rows if r["mode"] == "recurrent" and r["tensor"].startswith("state"))
    recurrent = float(at_c[0]["classic_linear_bytes_per_request"]) / 2
    buffered = float(at_c[0]["kvbuffer_linear_bytes_per_request"])
    entry = float(at_c1[0]["kvbuffer_linear_bytes_per_request"]) - buffered
    if state <= 0 or entry <= 0:
        raise InputError(f"{inputs.kvbuf}: no state or entry bytes for {model}")
    return {"recurrent": recurrent, "buffered": buffered, "conv": recurrent - state * layers, "entry": entry,
            "commit": at_c[0]["commit"]}


def fig_short_context(inputs, fam):
    context_rows = family_rows(inputs, fam, context=True)
    model = context_rows[0]["model"] if context_rows else model_of(inputs, fam)
    chunk = 16
    mem = memory_per_request(inputs, model, chunk)
    if mem is None and not context_rows:
        raise Skip("needs --kvbuf (modelled memory) or decode rows with a context_tokens column (measured latency)")
    fig, (ax_lat, ax_mem) = new_figure(2, f"{fam.title}, {model}: short contexts, direct mode vs buffered vs recurrent")
    if context_rows:
        by = best_by(context_rows, lambda r: (r["kernel"], r["batch"], r["context_tokens"]))
        batches = pick_batches({b for _, b, _ in by}, wanted=(1, 64, 256), most=3)
        colors = plt.get_cmap("tab10")
        for i, b in enumerate(batches):
            series = {}
            for kernel, label, style in ((fam.recurrent, "recurrent", "s--"), (fam.kvbuffer, "KVBuffer", "D-"),
                                         (fam.direct, "direct", "o-")):
                pts = sorted((ctx, r["latency_us_median"]) for (k, bb, ctx), r in by.items() if k == kernel and bb == b)
                if pts:
                    series[kernel] = pts
                    ax_lat.plot(*zip(*pts), style, ms=4, color=colors(i), label=f"{label}, batch {b}")
            cross = crossover(series.get(fam.direct), series.get(fam.recurrent))
            if cross:
                ax_lat.axvline(cross, color=colors(i), ls=":", lw=1)
                ax_lat.annotate(f"direct = recurrent\nat ~{cross:.0f} tokens", (cross, ax_lat.get_ylim()[0]), fontsize=6,
                                color=colors(i), textcoords="offset points", xytext=(3, 10 + 18 * i))
        log_axes(ax_lat, "context length (tokens)", "latency per layer per step (us, median)", "measured latency")
        legend(ax_lat)
    else:
        ax_lat.set_axis_off()
        note(ax_lat, "latency vs context: needs GPU sweep\n(decode rows with a context_tokens column)")
        print(f"short_context_{fam.name}: no context_tokens rows in {inputs.decode_path}; latency panel marked "
              "'needs GPU sweep'")
    if mem:
        contexts = [2 ** i for i in range(0, 13)]
        mib = 2 ** 20
        cross = (mem["recurrent"] - mem["conv"]) / mem["entry"]
        ax_mem.plot(contexts, [mem["recurrent"] / mib] * len(contexts), "s--", ms=3, label="recurrent: state + conv window")
        ax_mem.plot(contexts, [mem["buffered"] / mib] * len(contexts), "D-", ms=3,
                    label=f"KVBuffer: state + conv + C={chunk} entries")
        direct = [c for c in contexts if c <= 2 ** math.ceil(math.log2(cross)) * 2]
        ax_mem.plot(direct, [(mem["conv"] + c * mem["entry"]) / mib for c in direct], "o-", ms=3,
                    label="direct mode: conv + one entry per context token (no state)")
        ax_mem.axvline(cross, color="crimson", ls=":", lw=1.2)
        ax_mem.annotate(f"crossover: direct = recurrent\nat {cross:.0f} tokens", (cross, mem["recurrent"] / mib),
                        fontsize=7, color="crimson", textcoords="offset points", xytext=(5, -30))
        log_axes(ax_mem, "context length (tokens)", "linear-attention memory per request, all layers (MiB)",
                 "modelled memory per request")
        legend(ax_mem)
    else:
        ax_mem.set_axis_off()
        note(ax_mem, "modelled memory: give --kvbuf")
    context_path = inputs.context_path if inputs.context else inputs.decode_path
    caption(fig, (provenance(("kvbuf", context_path, context_rows)) + "; " if context_rows else "") +
            (f"memory: kvbuf capacity and kvbuf bytes (commit {mem['commit'][:12]}), fp32 state, bf16 entries; the "
             "full-attention KV, the same for every mode, is left out" if mem else ""))
    return fig


def crossover(direct, recurrent):
    """The context where direct latency first reaches recurrent's (linear interpolation), or None."""
    if not direct or not recurrent:
        return None
    rec = dict(recurrent)
    pts = [(c, lat - rec[c]) for c, lat in direct if c in rec]
    for (c0, d0), (c1, d1) in zip(pts, pts[1:]):
        if d0 < 0 <= d1:
            return c0 + (c1 - c0) * (-d0) / (d1 - d0)
    return None


# ---------------------------------------------------------------- 6. bytes per step, modelled vs measured


def fig_bytes_per_step(inputs, fam):
    rows = family_rows(inputs, fam)
    model = model_of(inputs, fam)
    ncu = [r for r in inputs.ncu or [] if r["model"] == model and mode_of_kernel(fam, r["kernel"])]
    chunks = sorted({r["chunk"] for r in rows if r["chunk"]} | {r["chunk"] for r in ncu if r["chunk"]}) or \
        [1, 2, 4, 8, 16, 32, 64]
    modelled, model_source = modelled_bytes_per_request(inputs, fam, model, chunks, rows)
    if not modelled and not ncu:
        raise Skip(f"no bytes model for {model}: give --kvbuf, measured {fam.title} decode rows or an ncu CSV")
    fig, (ax_b, ax_r, ax_k) = new_figure(3, f"{fam.title}, {model}: bytes per layer per step, modelled vs measured")
    styles = {"recurrent": ("k", ":"), "kvbuffer": ("tab:blue", "--"), "direct": ("tab:green", "-.")}
    for mode, (color, ls) in styles.items():
        table = modelled.get(mode)
        if not table:
            continue
        if mode == "recurrent":
            ax_b.axhline(table[0] / 1e6, color=color, ls=ls, lw=1.2, label="recurrent (model)")
        else:
            cs = sorted(c for c in table if c)
            ax_b.plot(cs, [table[c] / 1e6 for c in cs], color=color, ls=ls, lw=1.2, label=f"{mode} (model)")
    markers = "ovsD^<>p"
    batches = sorted({r["batch"] for r in ncu})
    for mode, (color, _) in styles.items():
        for i, b in enumerate(batches):
            pts = sorted((r["chunk"] or 1, r) for r in ncu if mode_of_kernel(fam, r["kernel"]) == mode and r["batch"] == b)
            if not pts:
                continue
            cs = [c for c, _ in pts]
            where = " (no C: drawn at C = 1)" if mode == "recurrent" else ""
            ax_b.plot(cs, [r["dram_bytes_per_layer_step"] / r["batch"] / 1e6 for _, r in pts], markers[i % 8],
                      color=color, ms=5, label=f"{mode}, batch {b} (ncu){where}")
            ax_r.plot(cs, [r["ratio"] for _, r in pts], markers[i % 8] + "-", color=color, ms=5,
                      label=f"{mode}, batch {b}")
    log_axes(ax_b, "buffer capacity C (tokens)", "MB per request per layer per step (1 MB = 1e6 B)",
             "per request (model, and DRAM bytes read + written)")
    ax_r.axhline(1.0, color="0.5", lw=1)
    log_axes(ax_r, "buffer capacity C (tokens)", "measured DRAM bytes / modelled bytes", "measured / model", logy=False)
    if not ncu:
        note(ax_r, "no measurement: run scripts/ncu_bytes.py on a GPU\n(Nsight Compute DRAM bytes per step)")
        print(f"bytes_per_step_{fam.name}: no ncu rows for {model}; drawn with the model only")
    legend(ax_b)
    legend(ax_r)
    every = ratio_per_kernel(ax_k, [r for r in inputs.ncu or [] if r["model"] == model and fam.owns(r["kernel"])])
    caption(fig, model_source + ("; " + provenance(("ncu", inputs.ncu_path, every)) if every else "") +
            ". Buffered modes averaged over a flush cycle of C steps with staggered fills; direct mode over fills 0..C-1.")
    return fig


def ratio_per_kernel(ax, ncu):
    """Measured / modelled bytes of every decode and verify kernel measured, one row per kernel, one marker per
    batch and C (T drafts for verify rows). Returns the rows drawn."""
    drafts = defaultdict(set)  # verify kernel -> its T values
    for r in ncu:
        if r["mode"].startswith("verify"):
            drafts[r["kernel"]].add(str(r.get("drafts") or ""))
    kernels = sorted({r["kernel"] for r in ncu}, key=lambda k: (k in drafts, k))
    colors = dict(zip(sorted({r["batch"] for r in ncu}), ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple")))
    labelled = set()
    for y, kernel in enumerate(kernels):
        pts = sorted((r for r in ncu if r["kernel"] == kernel), key=lambda r: (r["batch"], r["chunk"]))
        for i, r in enumerate(pts):
            at = (r["ratio"], y + 0.12 * (i - (len(pts) - 1) / 2))
            ax.plot(*at, "o", color=colors.get(r["batch"], "k"), ms=5,
                    label=None if r["batch"] in labelled else f"batch {r['batch']}")
            labelled.add(r["batch"])
            if r["chunk"]:
                ax.annotate(f"C {r['chunk']}", at, fontsize=6, xytext=(4, -2), textcoords="offset points")
    ax.set_yticks(range(len(kernels)),
                  [k + (f" (T {'/'.join(sorted(drafts[k]))})" if k in drafts else "") for k in kernels], fontsize=7)
    ax.axvline(1.0, color="0.5", lw=1)
    for edge in (0.9, 1.1):
        ax.axvline(edge, color="0.5", lw=0.8, ls=":")
    ax.set_xlabel("measured DRAM bytes / modelled bytes (dotted: +-10%)")
    ax.set_title("every kernel measured (decode and verify)", fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    if not ncu:
        note(ax, "no measurement: run scripts/ncu_bytes.py on a GPU")
    else:
        ax.legend(fontsize=7, loc="lower right")
    return ncu


# ---------------------------------------------------------------- 7. bandwidth, SM clock and power vs batch


def fig_telemetry(inputs, fam):
    rows = family_rows(inputs, fam)
    if not rows:
        raise Skip(f"no measured {fam.title} decode rows in {inputs.decode_path}")
    model = rows[0]["model"]
    has_telemetry = any(r.get("sm_clock_mhz") for r in rows)
    fig, (ax_bw, ax_clk, ax_pw) = new_figure(3, f"{fam.title} decode, {model}: achieved bandwidth, SM clock and board "
                                                "power vs batch")
    by = best_by(rows, lambda r: (r["kernel"], r["batch"]))
    kernels = [k for k in (fam.recurrent, fam.recurrent_oop, fam.kvbuffer, fam.direct) if k]
    limited_label = "timed with the SM clock held down (row note)"
    for kernel in kernels:
        pts = sorted((b, r) for (k, b), r in by.items() if k == kernel)
        if not pts:
            continue
        label = kernel + (" (best C)" if kernel in (fam.kvbuffer, fam.direct) else "")
        bs = [b for b, _ in pts]
        ax_bw.plot(bs, [r["gbps"] for _, r in pts], "o-", ms=4, label=label)
        if has_telemetry:
            ax_clk.plot(bs, [r.get("sm_clock_mhz") for _, r in pts], "o-", ms=4, label=label)
            ax_pw.plot(bs, [r.get("power_w") for _, r in pts], "o-", ms=4, label=label)
            limited = [(b, r) for b, r in pts if clock_limited(r)]
            if limited:  # kvbuf sweep's note: the power cap or a slowdown held the clock down
                ax_clk.plot([b for b, _ in limited], [r.get("sm_clock_mhz") for _, r in limited], "o", ms=10,
                            mfc="none", mec="red", label=limited_label)
                limited_label = None
    copy = sorted({r["copy_gbps"] for r in rows})
    ax_bw.axhline(copy[-1], color="k", ls="--", lw=1, label=f"measured copy {copy[-1]:.0f} GB/s")
    log_axes(ax_bw, "batch (requests per step)", "GB/s (modelled bytes / median latency, 1 GB = 1e9 B)",
             "achieved bandwidth", logy=False)
    log_axes(ax_clk, "batch (requests per step)", "SM clock (MHz, NVML mean over samples)", "SM clock", logy=False)
    log_axes(ax_pw, "batch (requests per step)", "board power (W, NVML mean over samples)", "board power", logy=False)
    if not has_telemetry:
        for ax in (ax_clk, ax_pw):
            note(ax, f"no sm_clock_mhz / power_w values in\n{os.path.basename(inputs.decode_path)}")
    for ax in (ax_bw, ax_clk, ax_pw):
        legend(ax)
    caption(fig, provenance(("kvbuf", inputs.decode_path, rows)) + ". Each kernel at its fastest C per batch.")
    return fig


# ---------------------------------------------------------------- 8. 16-bit states over a long generation

STATE_ORDER = ("fp32", "bf16", "fp16")
CHUNK_COLORS = {8: "tab:blue", 16: "tab:orange", 32: "tab:purple", 64: "tab:green"}


def accuracy_variant(row):
    """(method, entry dtype, C) of an accuracy row, and its legend label."""
    if row["method"] == "recurrent":
        return ("recurrent", "", 0), "classic recurrent (rounds every token)"
    label = f"KVBuffer C = {row['chunk']} (rounds every {row['chunk']} tokens)"
    if row["entry_dtype"] != "bf16":
        label += f", {row['entry_dtype']} entries"
    return ("kvbuffer", row["entry_dtype"], row["chunk"]), label


def fig_accuracy(inputs, fam):
    rows = [r for r in inputs.accuracy or [] if r["family"] == fam.name]
    if not rows:
        raise Skip(f"no {fam.title} rows in {inputs.accuracy_path} (kvbuf accuracy)")
    model = rows[0]["model"]
    rows = [r for r in rows if r["model"] == model]
    states = [s for s in STATE_ORDER if any(r["state_dtype"] == s for r in rows)]
    states += sorted({r["state_dtype"] for r in rows} - set(states))
    fig, grid = plt.subplots(len(states), 2, figsize=(12.8, 4.0 * len(states) + 0.8), squeeze=False)
    fig.suptitle(f"{fam.title}, {model}: error against the float64 reference over one generation, by state dtype",
                 fontsize=12)
    floor = sorted((r["tokens"], r) for r in rows if r["method"] == "recurrent" and r["state_dtype"] == "fp32")
    for (ax_out, ax_state), state in zip(grid, states):
        mine = [r for r in rows if r["state_dtype"] == state]
        variants = {}
        for r in mine:
            key, label = accuracy_variant(r)
            variants.setdefault(key, (label, []))[1].append(r)
        for key in sorted(variants, key=lambda k: (k[0] != "recurrent", k[1] != "bf16", k[2])):
            label, pts = variants[key]
            pts.sort(key=lambda r: r["tokens"])
            color = "k" if key[0] == "recurrent" else CHUNK_COLORS.get(key[2], None)
            style = "--" if key[1] == "fp32" else "-"
            ax_out.plot([r["tokens"] for r in pts], [r["out_rel_err_window"] for r in pts], style, color=color, lw=1.2,
                        label=label)
            with_state = [r for r in pts if r["state_rel_err"] is not None]
            ax_state.plot([r["tokens"] for r in with_state], [r["state_rel_err"] for r in with_state], style,
                          color=color, lw=1.2, label=label)
        if state != "fp32" and floor:
            ax_out.plot([t for t, _ in floor], [r["out_rel_err_window"] for _, r in floor], ":", color="0.5", lw=1.2,
                        label="fp32 classic recurrent (the floor)")
            ax_state.plot([t for t, _ in floor], [r["state_rel_err"] for _, r in floor], ":", color="0.5", lw=1.2,
                          label="fp32 classic recurrent (the floor)")
        once = sorted((r["tokens"], r["state_rel_err_one_rounding"]) for r in mine
                      if r["method"] == "recurrent" and r["state_rel_err_one_rounding"] is not None)
        if state != "fp32" and once:
            ax_state.plot([t for t, _ in once], [v for _, v in once], "-.", color="0.65", lw=1,
                          label=f"one {state} rounding of the exact state")
        for ax, what, ylabel in ((ax_out, "output error", "output error (relative rms)"),
                                 (ax_state, "state error", "state error (relative Frobenius)")):
            log_axes(ax, "tokens decoded", ylabel, f"{state} state: {what}")
            legend(ax, loc="best")
    caption(fig, provenance(("kvbuf accuracy", inputs.accuracy_path, rows)) +
            ". One request, one layer at the catalog shapes, decoded token by token by each kernel. Output error: rms "
            "of the bf16 outputs' difference over the tokens since the previous point, over the reference's rms. State "
            "error: of the state the kernel holds in its pool. "
            "A KVBuffer state is compared where the token count is a multiple of its C (right after a fold). With an "
            "fp32 state, what KVBuffer adds to the floor is its entries' rounding (GDN's bf16 k and u; Mamba-2's "
            "entries hold their bf16 inputs exactly).")
    return fig


# ---------------------------------------------------------------- 9. whole-model step


def fig_step(inputs):
    rows = [(p, r) for p, table in inputs.step for r in table if r["measured_speedup"] is not None]
    if not rows:
        raise Skip("no measured KVBuffer rows in step_GPU*.csv (kvbuf step --measure)")
    panels = defaultdict(list)  # (model, tp, state, T, MoE routing) -> rows
    for _, r in rows:
        panels[(r["model"], r["tp"], r["state_dtype"], r["drafts"], r.get("routing") or "uniform")].append(r)
    keys = sorted(panels)
    fig, axes = new_figure(len(keys), "Whole-model step: KVBuffer speedup\n(solid measured, dashed simulated)")
    cmap = plt.get_cmap("viridis")
    contexts = sorted({r["context"] for _, r in rows})
    color = {c: cmap(i / max(1, len(contexts) - 1) * 0.9) for i, c in enumerate(contexts)}
    for ax, key in zip(axes, keys):
        model, tp, state, drafts, routing = key
        for c in contexts:
            pts = sorted((r["batch"], r) for r in panels[key] if r["context"] == c)
            if not pts:
                continue
            batches = [b for b, _ in pts]
            ax.plot(batches, [r["measured_speedup"] for _, r in pts], "o-", color=color[c], lw=1.4, ms=4,
                    label=f"context {c}")
            ax.plot(batches, [r["simulated_speedup"] for _, r in pts], "--", color=color[c], lw=1)
        ax.axhline(1.0, color="0.5", lw=0.8)
        ax.axhline(PAPER_WHOLE_MODEL_SPEEDUP, color="crimson", lw=0.8, ls=":", label="paper: up to 1.47x")
        setting = f"tp {tp}, {state} state" + (f", T = {drafts}" if drafts else "") + (
            f", {routing} routing" if routing != "uniform" else "")
        log_axes(ax, "batch (requests)", "classic step / KVBuffer step", f"{model} ({setting})", logy=False)
        legend(ax)
    caption(fig, "Each point one rank's whole decode step captured as one CUDA graph (random weights of the model's "
                 "shapes), KVBuffer at its C against classic at the same batch and context; dashed: the step model "
                 "(kvbuf step) at the same point. " + provenance(*[("measured", p, t) for p, t in inputs.step]))
    return fig


DRAW = {"decode_latency": fig_decode_latency, "speedup_vs_chunk": fig_speedup_vs_chunk, "verify": fig_verify,
        "capacity": fig_capacity, "short_context": fig_short_context, "bytes_per_step": fig_bytes_per_step,
        "telemetry": fig_telemetry, "accuracy": fig_accuracy, "step": fig_step}
# Figures drawn once for the whole catalog (file NAME.png), not per family.
EVERY_MODEL = ("capacity", "step")


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default=os.path.normpath(os.path.join(HERE, "..", "results")),
                    help="folder of the input CSVs")
    ap.add_argument("--gpu", default="h200", help="file-name suffix of the inputs (decode_GPU.csv, ...)")
    ap.add_argument("--out", help="output folder (default RESULTS/figures_GPU)")
    ap.add_argument("--kvbuf", help="the kvbuf binary, for the modelled lines (kvbuf bytes, kvbuf capacity)")
    ap.add_argument("--only", help=f"comma-separated figure names: {', '.join(FIGURES)}")
    ap.add_argument("--formats", default="png,svg", help="comma-separated: png, svg")
    for name in ("decode", "decode16", "verify", "context", "public", "fla", "public-mamba2", "ncu", "accuracy"):
        ap.add_argument(f"--{name}", help=f"the {name} CSV instead of the default in --results")
    ap.add_argument("--capacity", help="comma-separated capacity CSVs instead of RESULTS/capacity_GPU*.csv")
    ap.add_argument("--step", help="comma-separated `kvbuf step --measure` CSVs instead of RESULTS/step_GPU*.csv")
    try:
        args = ap.parse_args(argv)
    except SystemExit as e:
        raise SystemExit(2 if e.code else 0) from None
    only = args.only.split(",") if args.only else list(FIGURES)
    unknown = [n for n in only if n not in FIGURES]
    if unknown:
        raise InputError(f"--only: unknown figures {', '.join(unknown)} (known: {', '.join(FIGURES)})")
    formats = args.formats.split(",")
    if not formats or any(f not in ("png", "svg") for f in formats):
        raise InputError(f"--formats: expected png and/or svg, got '{args.formats}'")
    if args.kvbuf and not os.access(args.kvbuf, os.X_OK):
        raise InputError(f"--kvbuf {args.kvbuf}: not an executable file")
    if not os.path.isdir(args.results):
        raise InputError(f"--results {args.results}: not a folder")
    args.only, args.formats = only, formats
    args.out = args.out or os.path.join(args.results, f"figures_{args.gpu}")
    return args


def main(argv):
    try:
        args = parse_args(argv)
        inputs = Inputs(args)
        os.makedirs(args.out, exist_ok=True)
        written, skipped = 0, 0
        for name in args.only:
            for fam in FAMILIES if name not in EVERY_MODEL else (None,):
                stem = name if fam is None else f"{name}_{fam.name}"
                try:
                    fig = DRAW[name](inputs) if fam is None else DRAW[name](inputs, fam)
                except Skip as why:
                    print(f"skip {stem}: {why}")
                    skipped += 1
                    continue
                fig.tight_layout(rect=(0, 0.07, 1, 1))
                for fmt in args.formats:
                    path = os.path.join(args.out, f"{stem}.{fmt}")
                    fig.savefig(path, dpi=120, metadata={"Date": None} if fmt == "svg" else None)
                    print(f"wrote {path}")
                plt.close(fig)
                written += 1
        print(f"{written} figures written, {skipped} skipped")
        return 0
    except InputError as e:
        print(f"figures.py: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
