"""Reads the CSVs of results/ for scripts/figures.py, scripts/summary.py and scripts/ncu_bytes.py. Every problem with an
input file raises InputError with a message naming the file (and the line and column where one value
is wrong); the scripts print it and exit with status 2."""
import csv
import os


# The start of kvbuf sweep's note on a row timed with the SM clock held down (bench/gpu_telemetry.h,
# kClockLimitedNote); scripts/bench_public.py writes the same note.
CLOCK_LIMITED = "SM clock held down while timed"


def clock_limited(row):
    """Whether the row was timed with the SM clock held down (its note says so)."""
    return CLOCK_LIMITED in (row.get("note") or "")


def steady_state(row):
    """Whether a decode or verify row is of the steady state (`kvbuf sweep --context 0`, and every row
    of a sweep before the context axis) rather than of one short context."""
    return float((row.get("context_tokens") or "0").strip() or 0) == 0


class InputError(Exception):
    """A missing, empty or malformed input file, or a bad argument."""


def read_table(path, required=(), ints=(), floats=(), optional_floats=(), keep=lambda row: True):
    """Rows of the CSV at `path` as dicts. `required` columns must be in the header; of the rows that
    `keep` accepts (given the raw strings), the `ints` and `floats` columns are converted, and the
    `optional_floats` columns where the header has them (absent ones read None), an empty cell
    becoming None. Raises InputError on a missing file, no header, missing columns or a value that
    is not a number."""
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such file")
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        header = reader.fieldnames
        if not header:
            raise InputError(f"{path}: empty file (no CSV header)")
        missing = [c for c in list(required) + list(ints) + list(floats) if c not in header]
        if missing:
            raise InputError(f"{path}: lacks columns {', '.join(sorted(set(missing)))}")
        rows = []
        for line, row in enumerate(reader, start=2):
            if None in row:
                raise InputError(f"{path}:{line}: more cells than the header has columns")
            if not keep(row):
                continue
            for c in optional_floats:
                if c not in header:
                    row[c] = None
            present = [c for c in optional_floats if c in header]
            for columns, convert in ((ints, int), (floats, float), (present, float)):
                for c in columns:
                    text = (row[c] or "").strip()
                    try:
                        row[c] = convert(text) if text else None
                    except ValueError:
                        raise InputError(f"{path}:{line}: column {c}: '{text}' is not a number") from None
            row["_line"] = line
            rows.append(row)
    return rows
