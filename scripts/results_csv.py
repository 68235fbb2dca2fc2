"""Reads a results CSV of `kvbuf sweep` for the plot scripts: exits with a message when the file has
no rows or lacks a needed column, and converts the named columns to int or float. Rows that record
why a point did not run (a non-empty `note`) carry no measurement and are left out."""
import csv
import sys


def load_rows(path, who, ints=(), floats=(), other=()):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    rows = [r for r in rows if not r.get("note")]
    if not rows:
        sys.exit(f"{who}: {path} has no measured rows")
    missing = set(ints) | set(floats) | set(other)
    missing -= set(rows[0])
    if missing:
        sys.exit(f"{who}: {path} lacks columns {sorted(missing)}")
    for r in rows:
        for c in ints:
            r[c] = int(r[c])
        for c in floats:
            r[c] = float(r[c])
    return rows
