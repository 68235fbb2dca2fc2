#!/usr/bin/env python3
"""EXPERIMENT ONLY (branch verify36): where the GDN KVBuffer verify kernel's warp samples go, per
phase of kernels/gdn/gdn_verify_kvbuffer.cu (the "Phase N" comments of its body).

  verify36_ncu_phases.py SOURCE_CSV [SOURCE_CSV ...] --kernel-file kernels/gdn/gdn_verify_kvbuffer.cu

SOURCE_CSV: `ncu --import R --page source --csv --print-source cuda` (one row per CUDA source line)
or `--print-source cuda,sass` / `sass` exports. The first one with a usable line column and sample
columns is used. Rows of the kernel file are assigned to the phase whose marker precedes them;
rows of headers are grouped by file and enclosing function (inlined helpers). Prints, per phase:
warp samples (all, not issued), instructions executed, their shares, and the stall-reason columns
the export has (largest first). Exit 0 with a note when nothing could be parsed (never fails the run).
"""
import argparse
import csv
import io
import os
import re
import sys
from collections import defaultdict


def read_csv(path):
    with open(path, errors="replace") as f:
        text = f.read()
    lines = [l for l in text.splitlines() if not l.startswith("==")]
    # ncu may print a kernel title line before the header; the header is the first line with many commas
    start = 0
    for i, l in enumerate(lines):
        if l.count(",") >= 3 and l.startswith('"'):
            start = i
            break
    rows = list(csv.reader(io.StringIO("\n".join(lines[start:]))))
    if len(rows) < 2:
        return None, []
    return rows[0], rows[1:]


def number(text):
    try:
        return float(text.replace(",", "").replace("%", ""))
    except (ValueError, AttributeError):
        return None


def phase_map(kernel_file):
    """line number -> phase label for the verify kernel's body; also the kernel's first/last line."""
    with open(kernel_file) as f:
        src = f.read().splitlines()
    first = next(i for i, l in enumerate(src, 1) if "gdn_verify_kvbuffer_kernel(const KVBufferArgs p)" in l)
    last = next(i for i, l in enumerate(src, 1) if i > first and l.startswith("}"))
    labels = {}
    current = "1 coords/slot"
    names = {1: "1 coords/slot", 2: "2 issue loads", 3: "3 window operand B", 4: "4 keys fp32+tree",
             5: "5 key dots (solve coefs)", 6: "6 fold", 7: "7 row products", 8: "8 substitution+out",
             9: "9 commit scratch"}
    for i in range(first, last + 1):
        m = re.search(r"Phase (\d)", src[i - 1])
        if m:
            current = names.get(int(m.group(1)), "phase " + m.group(1))
        labels[i] = current
    return labels, src


def enclosing_function(path_cache, path, line):
    if path not in path_cache:
        try:
            with open(path) as f:
                path_cache[path] = f.read().splitlines()
        except OSError:
            path_cache[path] = None
    src = path_cache[path]
    if not src:
        return "?"
    for i in range(min(line, len(src)) - 1, -1, -1):
        m = re.search(r"(\w+)\s*\([^;]*$", src[i])
        if m and ("__device__" in src[i] or "__forceinline__" in src[i]):
            return m.group(1)
    return "?"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv", nargs="+")
    ap.add_argument("--kernel-file", required=True)
    ap.add_argument("--repo", default=".")
    args = ap.parse_args()
    labels, ksrc = phase_map(args.kernel_file)
    kbase = os.path.basename(args.kernel_file)
    text_to_line = defaultdict(list)
    for i, l in enumerate(ksrc, 1):
        if i in labels and l.strip():
            text_to_line[l.strip()].append(i)
    for path in args.csv:
        try:
            header, rows = read_csv(path)
        except OSError as e:
            print(f"  {path}: {e}")
            continue
        if not header:
            print(f"  {os.path.basename(path)}: no CSV rows")
            continue
        h = [c.strip() for c in header]
        low = [c.lower() for c in h]
        sample_cols = [i for i, c in enumerate(low) if "sampl" in c or c.startswith("stall") or "stall" in c]
        line_col = next((i for i, c in enumerate(low) if c in ("#", "line", "# line", "line number")), None)
        src_col = next((i for i, c in enumerate(low) if c in ("source", "source code")), None)
        file_col = next((i for i, c in enumerate(low) if c in ("file", "source file", "file name")), None)
        inst_col = next((i for i, c in enumerate(low) if "instructions executed" in c and "thread" not in c), None)
        if not sample_cols or (line_col is None and src_col is None):
            print(f"  {os.path.basename(path)}: columns not understood: {h[:12]}")
            continue
        agg = defaultdict(lambda: defaultdict(float))
        cache = {}
        unmapped = 0
        for r in rows:
            if len(r) < len(h):
                continue
            line = int(number(r[line_col])) if line_col is not None and number(r[line_col]) is not None else None
            fname = r[file_col] if file_col is not None else ""
            label = None
            # without a file column, a line number is the kernel file's when its text matches (or
            # when the export has no text: then header lines may be counted as kernel lines)
            same_text = src_col is None or not r[src_col].strip() or (
                line is not None and 0 < line <= len(ksrc) and ksrc[line - 1].strip() == r[src_col].strip())
            if line is not None and line in labels and (os.path.basename(fname) == kbase if fname else same_text):
                label = labels[line]
            elif src_col is not None and r[src_col].strip() in text_to_line:
                label = labels[text_to_line[r[src_col].strip()][0]]
            elif fname and line is not None:
                label = "inl " + os.path.basename(fname) + ":" + enclosing_function(cache, os.path.join(args.repo, fname) if not os.path.isabs(fname) else fname, line)
            if label is None:
                unmapped += 1
                label = "(other lines)"
            for i in sample_cols + ([inst_col] if inst_col is not None else []):
                v = number(r[i])
                if v is not None:
                    agg[label][h[i]] += v
        if not agg:
            print(f"  {os.path.basename(path)}: no rows mapped")
            continue
        all_col = next((h[i] for i in sample_cols if "all samples" in low[i]), h[sample_cols[0]])
        ni_col = next((h[i] for i in sample_cols if "not-issued" in low[i] or "not issued" in low[i]), None)
        total = sum(a.get(all_col, 0.0) for a in agg.values()) or 1.0
        itotal = sum(a.get(h[inst_col], 0.0) for a in agg.values()) if inst_col is not None else 0.0
        reason_cols = [h[i] for i in sample_cols if h[i] not in (all_col, ni_col)]
        print(f"  {os.path.basename(path)}: {len(rows)} rows, samples column '{all_col}'")
        print(f"    {'phase':30s} {'samples%':>8s} {'notIss%':>8s} {'instr%':>7s}  top stall columns")
        for label, a in sorted(agg.items(), key=lambda kv: -kv[1].get(all_col, 0.0)):
            s = a.get(all_col, 0.0)
            ni = a.get(ni_col, 0.0) if ni_col else 0.0
            ins = a.get(h[inst_col], 0.0) if inst_col is not None else 0.0
            top = sorted(((a.get(c, 0.0), c) for c in reason_cols), reverse=True)[:4]
            tops = ", ".join(f"{c.replace('Warp Stall Sampling', 'ws')[:28]} {100 * v / total:.1f}" for v, c in top if v > 0)
            print(f"    {label[:30]:30s} {100 * s / total:8.1f} {100 * ni / total:8.1f} "
                  f"{(100 * ins / itotal if itotal else 0):7.1f}  {tops}")
        return 0
    print("  (no source export could be parsed; raw exports kept)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
