#!/usr/bin/env python3
"""Warp stall samples of one CUDA kernel per phase of its source: where an Nsight Compute profile's
time goes, phase by phase, and why (stall reasons) in each.

    ncu_phases.py SASS_CSV LISTING KERNEL_SOURCE [--kernel REGEX] [--lines N]

SASS_CSV: `ncu -i R.ncu-rep --page source --csv --print-source sass` (needs `--section SourceCounters`
when profiling): one section per profiled launch (a "Kernel Name" row, a header row, one row per
SASS instruction with its warp samples and stall_* columns); ncu may print a launch twice in a row,
the copy is dropped. Every launch of the kernel whose name matches --kernel (default: the first
section's) is summed.
LISTING: `nvdisasm -g -gi -c -fun SYMBOL_INDEX KERNEL.cubin` of the same build (the library built with
-lineinfo; the cubin from `cuobjdump -xelf all OBJECT`, the index from `cuobjdump -elf`; both tools
come with the CUDA toolkit, or PyPI's nvidia-cuda-nvdisasm and nvidia-cuda-cuobjdump): per
instruction, its source line and the lines it is inlined at. Each instruction is attributed to its
outermost line (the kernel body's), so an inlined helper counts where it is called; the file is
recognised by its base name, so the source may lie elsewhere than where it was built. The listing's
instructions must be the export's, opcode by opcode (exit 2 otherwise: another build).
KERNEL_SOURCE: the kernel's .cu, as built; its body is cut into phases at comments matching
`Phase N, name` (name: up to the first `.`, `:` or `(`); lines before the first marker form
"prologue", lines outside the file "(other file)". A warp waiting at a barrier is sampled at an
instruction after the BAR, often in the next phase: barrier samples count at the last BAR before.

Prints per phase: share of warp samples, of instructions executed, samples per instruction, and
the largest stall reasons (share of the phase's samples); then the --lines source lines with most
samples. Exit 0, 2 on unreadable or mismatched input.
"""
import argparse
import csv
import os
import re
import sys
from collections import Counter, defaultdict

MARKER = re.compile(r"Phase (\d+), ([^.:(]*)")
FRAME = re.compile(r'^\s*//## File "([^"]+)", line (\d+)(.*)$')
INSN = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;?\s*$")


def fail(msg):
    sys.exit(print(f"ncu_phases.py: {msg}", file=sys.stderr) or 2)


def launches(path, kernel_re):
    """[(header, rows)] of the matching kernel's launches, adjacent duplicates dropped."""
    sections, cur = [], None
    with open(path, newline="", errors="replace") as f:
        for r in csv.reader(f):
            if not r:
                continue
            if r[0] == "Kernel Name":
                cur = {"name": r[1], "header": None, "rows": []}
                sections.append(cur)
            elif cur is not None and r[0] == "Address":
                cur["header"] = r
            elif cur is not None and cur["header"] and len(r) == len(cur["header"]):
                cur["rows"].append(r)
    if not sections or not sections[0]["header"]:
        fail(f"{path}: no 'Kernel Name' / 'Address' sections (an ncu --print-source sass export?)")
    pick = re.compile(kernel_re) if kernel_re else None
    name = sections[0]["name"]
    out = []
    for s in sections:
        if (pick.search(s["name"]) if pick else s["name"] == name) and not (out and out[-1]["rows"] == s["rows"]):
            out.append(s)
    if not out:
        fail(f"{path}: no launch of a kernel matching {kernel_re!r}")
    return out


def listing(path):
    """[(offset, text, outermost (file, line) or None)] from nvdisasm -g -gi -c."""
    out, frames, new_group = [], [], True
    with open(path, errors="replace") as f:
        for line in f:
            m = FRAME.match(line)
            if m:
                if new_group:
                    frames, new_group = [], False
                frames.append((m.group(1), int(m.group(2))))
                continue
            m = INSN.match(line)
            if m:
                new_group = True
                out.append((int(m.group(1), 16), m.group(2), frames[-1] if frames else None))
    if not out:
        fail(f"{path}: no instructions (an `nvdisasm -g -gi -c` listing?)")
    return out


def normalise(text):
    text = re.sub(r"0x[0-9a-f]{9,}", "TARGET", text)  # ncu: absolute branch targets
    text = re.sub(r"`\(\.L_x_\d+\)", "TARGET", text)  # nvdisasm: labels
    text = text.replace(".reuse", "")  # nvdisasm: operand reuse flags, which ncu omits
    text = " ".join(text.replace(";", " ").split())
    n = 2 if text.startswith("@") else 1  # predicate and opcode
    words = text.split(" ", n)
    return words[:n], sorted(o.strip() for o in " ".join(words[n:]).split(","))  # operand order differs


def phases(source):
    """line -> phase label over the whole file (markers in order; before the first: prologue)."""
    with open(source, errors="replace") as f:
        lines = f.read().splitlines()
    label, out = "prologue", {}
    for i, text in enumerate(lines, 1):
        m = MARKER.search(text)
        if m:
            label = f"{m.group(1)} {m.group(2).strip()}"
        out[i] = label
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sass_csv")
    ap.add_argument("listing")
    ap.add_argument("kernel_source")
    ap.add_argument("--kernel", help="regex on the kernel name (default: the export's first kernel)")
    ap.add_argument("--lines", type=int, default=12, help="source lines to list (most samples first)")
    a = ap.parse_args()
    runs = launches(a.sass_csv, a.kernel)
    insns = listing(a.listing)
    header = runs[0]["header"]
    col = {n: i for i, n in enumerate(header)}
    need = ("Source", "Warp Stall Sampling (All Samples)", "Instructions Executed")
    if any(n not in col for n in need):
        fail(f"{a.sass_csv}: columns {need} expected")
    reasons = [n for n in header if n.startswith("stall_") and not n.endswith("(Not Issued)")]
    for run in runs:
        if len(run["rows"]) != len(insns):
            fail(f"{len(run['rows'])} instructions in the export, {len(insns)} in the listing: another build")
        for k, (row, ins) in enumerate(zip(run["rows"], insns)):
            if normalise(row[col["Source"]]) != normalise(ins[1]):
                fail(f"instruction {k} (offset {ins[0]:#x}): export {row[col['Source']].strip()!r}, "
                     f"listing {ins[1]!r}: another build")
    phase_of = phases(a.kernel_source)
    base = os.path.basename(a.kernel_source)
    samples, executed, stalls = Counter(), Counter(), defaultdict(Counter)
    per_line, line_stalls = Counter(), defaultdict(Counter)
    def place(outer):
        if outer and os.path.basename(outer[0]) == base:
            return phase_of.get(outer[1], "(past the end)"), outer[1]
        return ("(other file)" if outer else "(no line)"), None

    # A warp waiting at a barrier is sampled at an instruction after the BAR (the first it cannot
    # issue), often a statement of the next phase: its barrier samples go to the last BAR before it.
    bar_place, last_bar = [], None
    for _, text, outer in insns:
        bar_place.append(last_bar or place(outer))
        if text.split()[1 if text.startswith("@") else 0].startswith("BAR"):
            last_bar = place(outer)
    for run in runs:
        for k, (row, (_, _, outer)) in enumerate(zip(run["rows"], insns)):
            num = lambda n: float(row[col[n]] or 0)  # noqa: E731
            here = place(outer)
            executed[here[0]] += num("Instructions Executed")
            for n in reasons:
                key, where = bar_place[k] if n == "stall_barrier" else here
                samples[key] += num(n)
                stalls[key][n[len("stall_"):]] += num(n)
                if where is not None:
                    per_line[where] += num(n)
                    line_stalls[where][n[len("stall_"):]] += num(n)
    total_s, total_i = sum(samples.values()), sum(executed.values())
    if total_s <= 0:
        fail("no warp samples in the export (profiled without --section SourceCounters?)")
    print(f"{runs[0]['name'][:100]}: {len(runs)} launch(es), {total_s:.0f} warp samples, "
          f"{total_i:.0f} warp instructions")
    print(f"{'phase':36s} {'samples%':>8s} {'inst%':>6s} {'smp/kinst':>9s}  "
          "largest stall reasons (% of the phase's samples)")
    order = sorted(samples, key=lambda k: (1, int(k.split()[0])) if k[0].isdigit() else (0 if k == "prologue" else 2, 0))
    for k in order:
        top = sorted(stalls[k].items(), key=lambda kv: -kv[1])[:5]
        per = samples[k] / executed[k] * 1e3 if executed[k] else float("nan")
        print(f"{k[:36]:36s} {100 * samples[k] / total_s:8.1f} {100 * executed[k] / total_i:6.1f} {per:9.2f}  "
              + ", ".join(f"{n} {100 * v / samples[k]:.0f}" for n, v in top if v > 0 and samples[k] > 0))
    print(f"source lines of {a.kernel_source} with most samples (outermost line of each instruction):")
    with open(a.kernel_source, errors="replace") as f:
        text = f.read().splitlines()
    for line, s in per_line.most_common(a.lines):
        top = ", ".join(f"{n} {100 * v / s:.0f}" for n, v in line_stalls[line].most_common(2) if v > 0)
        print(f"  {line:5d} {100 * s / total_s:5.1f}% [{phase_of.get(line, '?')[:12]}] ({top}) "
              f"{text[line - 1].strip()[:70]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
