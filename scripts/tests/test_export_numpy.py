#!/usr/bin/env python3
"""NumPy reads what `kvbuf export` writes (CPU only; ctest runs it in CI).

A small GDN model (H 2, HV 4, K 16, V 8) and a small Mamba-2 model (G 2, NH 4, N 8, P 6), every
--mode that `kvbuf export --help` lists (GDN: both buffer variants where the mode has a buffer),
float64 and float32. check_export() requires:
  * manifest.json lists exactly the arrays of the layer kind, and the folder holds exactly the
    .npy files the manifest names;
  * np.load (allow_pickle=False) of every file gives the manifest's shape and dtype, the shape the
    manifest's dims, batch and steps give, the manifest's --dtype, C order and finite values;
  * the outputs and final states equal a NumPy recurrence written here from the manifest's layer
    formulas, run in float64 on the exported inputs and state0, within the reference's derived
    tolerance 16 (dim_k + dim_v + steps) u (u of the export's dtype; reference/cross_checks.h).
The last tests break an export on purpose (a wrong shape, a wrong dtype, one output value off by a
relative 1e-9, an array missing from the manifest) and require check_export() to reject each.

    test_export_numpy.py KVBUF_BINARY
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

KVBUF = None

GDN_MODEL = ["--kind", "gdn", "--key-heads", "2", "--value-heads", "4", "--head-k", "16", "--head-v", "8",
             "--layers", "1", "--batch", "2", "--steps", "13"]
MAMBA2_MODEL = ["--kind", "mamba2", "--key-heads", "2", "--value-heads", "4", "--head-k", "8", "--head-v", "6",
                "--layers", "1", "--batch", "2", "--steps", "11"]
# Buffer capacity 5 and 3 drafts with 2 accepted: the 11 and 13 tokens fold several times and
# leave a partial buffer (recurrent and chunk modes use only --chunk, as the prefill chunk).
MODE_ARGS = ["--chunk", "5", "--drafts", "3", "--accept", "2"]
BUFFERED_GDN_MODES = ("kvbuffer", "verify", "direct")  # the modes with a --variant
NPY_DTYPE = {"f64": "<f8", "f32": "<f4"}
UNIT_ROUNDOFF = {"f64": 2.0 ** -53, "f32": 2.0 ** -24}


def export_modes():
    """The --mode values `kvbuf export --help` lists ("a | b | c" or CLI11's "{a,b,c}")."""
    r = subprocess.run([KVBUF, "export", "--help"], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("kvbuf export --help failed: " + r.stderr)
    for line in r.stdout.splitlines():
        if re.match(r"\s*--mode\b", line):
            braces = re.search(r"\{([\w,-]+)\}", line)
            if braces:
                return braces.group(1).split(",")
            bars = re.search(r"(\w+(?:\s*\|\s*\w+)+)", line)
            if bars:
                return [m.strip() for m in bars.group(1).split("|")]
    raise RuntimeError("no mode list on the --mode line of `kvbuf export --help`:\n" + r.stdout)


def export(out_dir, model_args, mode, dtype, variant=None):
    args = [KVBUF, "export", *model_args, "--mode", mode, *MODE_ARGS, "--seed", "5", "--dtype", dtype,
            "--out", out_dir]
    if variant:
        args += ["--variant", variant]
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(" ".join(args) + " failed:\n" + r.stderr)


def expected_shapes(manifest):
    n, s, dims = manifest["batch"], manifest["steps"], manifest["model"]["dims"]
    if manifest["model"]["kind"] == "gdn":
        h, hv, k, v = dims["H"], dims["HV"], dims["K"], dims["V"]
        return {"q": (n, s, h, k), "k": (n, s, h, k), "v": (n, s, hv, v), "g": (n, s, hv), "beta": (n, s, hv),
                "state0": (n, hv, k, v), "state_final": (n, hv, k, v), "o": (n, s, hv, v)}
    g, nh, nst, p = dims["G"], dims["NH"], dims["N"], dims["P"]
    return {"x": (n, s, nh, p), "B": (n, s, g, nst), "C": (n, s, g, nst), "dt": (n, s, nh), "A": (nh,), "D": (nh,),
            "state0": (n, nh, p, nst), "state_final": (n, nh, p, nst), "y": (n, s, nh, p)}


def run_recurrence(a, out_name, step):
    """Every request n of the export from its state0, in float64, through its steps t:
    s, output = step(s, n, t). Returns the outputs (as out_name) and the final states."""
    out = np.zeros(a[out_name].shape)
    final = np.zeros(a["state_final"].shape)
    for n in range(out.shape[0]):
        s = a["state0"][n].astype(np.float64)
        for t in range(out.shape[1]):
            s, out[n, t] = step(s, n, t)
        final[n] = s
    return {out_name: out, "state_final": final}


def gdn_recurrence(a):
    """k <- k / sqrt(|k|^2 + 1e-6), q <- q / sqrt(|q|^2 + 1e-6) K^-0.5; S <- exp(g) S;
    u = beta (v - S^T k); S <- S + k u^T; o = S^T q (S: K x V per value head)."""
    h, k_dim = a["q"].shape[2:]
    hv = a["v"].shape[2]
    key_head = np.arange(hv) // (hv // h)

    def step(s, n, t):
        q = a["q"][n, t].astype(np.float64)
        k = a["k"][n, t].astype(np.float64)
        q = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6) * k_dim ** -0.5
        k = k / np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
        q, k = q[key_head], k[key_head]  # [HV, K]
        s = s * np.exp(a["g"][n, t].astype(np.float64))[:, None, None]
        u = a["beta"][n, t].astype(np.float64)[:, None] * (a["v"][n, t] - np.einsum("hkv,hk->hv", s, k))
        s = s + k[:, :, None] * u[:, None, :]
        return s, np.einsum("hkv,hk->hv", s, q)

    return run_recurrence(a, "o", step)


def mamba2_recurrence(a):
    """S <- exp(dt A) S + dt x B^T; y = S C + D x (S: P x N per head, head h in group h / (NH/G))."""
    nh = a["x"].shape[2]
    groups = a["B"].shape[2]
    group = np.arange(nh) // (nh // groups)
    A, D = a["A"].astype(np.float64), a["D"].astype(np.float64)

    def step(s, n, t):
        dt = a["dt"][n, t].astype(np.float64)
        x = a["x"][n, t].astype(np.float64)
        b = a["B"][n, t].astype(np.float64)[group]
        c = a["C"][n, t].astype(np.float64)[group]
        s = np.exp(dt * A)[:, None, None] * s + dt[:, None, None] * x[:, :, None] * b[:, None, :]
        return s, np.einsum("hpn,hn->hp", s, c) + D[:, None] * x

    return run_recurrence(a, "y", step)


def max_rel_err(x, ref):
    """max |x - ref| / max |ref|, inf on NaN (reference/cross_checks.h's measure)."""
    diff = np.abs(x.astype(np.float64) - ref).max()
    return float("inf") if np.isnan(diff) else diff / max(np.abs(ref).max(), np.finfo(np.float64).tiny)


def check_export(out_dir):
    """Every problem with the export in out_dir, as readable lines; empty when it is right."""
    with open(os.path.join(out_dir, "manifest.json")) as f:
        manifest = json.load(f)
    problems = []
    shapes = expected_shapes(manifest)
    entries = {e["name"]: e for e in manifest["arrays"]}
    if sorted(entries) != sorted(shapes):
        problems.append(f"manifest arrays {sorted(entries)}, expected {sorted(shapes)}")
    on_disk = sorted(f for f in os.listdir(out_dir) if f.endswith(".npy"))
    if on_disk != sorted(e["file"] for e in entries.values()):
        problems.append(f".npy files {on_disk} are not the manifest's {sorted(e['file'] for e in entries.values())}")
    dtype = NPY_DTYPE[manifest["dtype"]]
    arrays = {}
    for name, e in entries.items():
        arr = np.load(os.path.join(out_dir, e["file"]), allow_pickle=False)
        if arr.shape != tuple(e["shape"]):
            problems.append(f"{name}: np.load shape {arr.shape}, manifest {tuple(e['shape'])}")
        if name in shapes and arr.shape != shapes[name]:
            problems.append(f"{name}: shape {arr.shape}, the dims give {shapes[name]}")
        if arr.dtype.str != e["dtype"] or e["dtype"] != dtype:
            problems.append(f"{name}: np.load dtype {arr.dtype.str}, manifest {e['dtype']}, --dtype {dtype}")
        if arr.ndim > 1 and not arr.flags.c_contiguous:
            problems.append(f"{name}: not C order")
        if not np.isfinite(arr).all():
            problems.append(f"{name}: not finite")
        arrays[name] = arr
    if problems:
        return problems

    dims = manifest["model"]["dims"]
    gdn = manifest["model"]["kind"] == "gdn"
    expected = gdn_recurrence(arrays) if gdn else mamba2_recurrence(arrays)
    dim_k, dim_v = (dims["K"], dims["V"]) if gdn else (dims["N"], dims["P"])
    tol = 16 * (dim_k + dim_v + manifest["steps"]) * UNIT_ROUNDOFF[manifest["dtype"]]
    for name, ref in expected.items():
        err = max_rel_err(arrays[name], ref)
        if not err <= tol:
            problems.append(f"{name}: rel err {err:.3g} against the NumPy recurrence > tol {tol:.3g}")
    if manifest["mode"] == "direct" and np.any(arrays["state0"] != 0):
        problems.append("direct mode: state0 is not zeros")
    return problems


class ExportReadByNumpy(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="kvbuf_export_numpy_")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def fresh_dir(self, name):
        d = os.path.join(self.tmp, name)
        os.makedirs(d)
        return d

    def test_every_mode_both_kinds_both_dtypes(self):
        modes = export_modes()
        self.assertTrue({"recurrent", "kvbuffer", "verify"} <= set(modes), modes)
        runs = 0
        for kind, model in (("gdn", GDN_MODEL), ("mamba2", MAMBA2_MODEL)):
            for mode in modes:
                variants = ("cached-u", "raw") if kind == "gdn" and mode in BUFFERED_GDN_MODES else (None,)
                for variant in variants:
                    for dtype in ("f64", "f32"):
                        with self.subTest(kind=kind, mode=mode, variant=variant, dtype=dtype):
                            d = self.fresh_dir(f"{kind}_{mode}_{variant}_{dtype}")
                            export(d, model, mode, dtype, variant)
                            self.assertEqual(check_export(d), [])
                            runs += 1
        self.assertEqual(runs, 2 * (len(modes) + 3) + 2 * len(modes))

    def broken_copy(self, what):
        good = self.fresh_dir("good")
        export(good, GDN_MODEL, "kvbuffer", "f64")
        self.assertEqual(check_export(good), [])
        broken = os.path.join(self.tmp, what)
        shutil.copytree(good, broken)
        return broken

    def test_a_wrong_shape_fails(self):
        d = self.broken_copy("wrong_shape")
        q = np.load(os.path.join(d, "q.npy"))
        np.save(os.path.join(d, "q.npy"), np.ascontiguousarray(q.swapaxes(2, 3)))  # [N, S, K, H]
        problems = check_export(d)
        self.assertTrue(any(p.startswith("q: np.load shape") for p in problems), problems)

    def test_a_wrong_dtype_fails(self):
        d = self.broken_copy("wrong_dtype")
        path = os.path.join(d, "state0.npy")
        np.save(path, np.load(path).astype(np.float32))
        problems = check_export(d)
        self.assertTrue(any(p.startswith("state0: np.load dtype <f4") for p in problems), problems)

    def test_a_wrong_output_fails(self):
        d = self.broken_copy("wrong_output")
        path = os.path.join(d, "o.npy")
        o = np.load(path)
        o[1, 7, 2, 3] *= 1 + 1e-9  # far above the float64 tolerance (~7e-14), far below bf16's
        np.save(path, o)
        problems = check_export(d)
        self.assertTrue(any(p.startswith("o: rel err") for p in problems), problems)

    def test_an_array_missing_from_the_manifest_fails(self):
        d = self.broken_copy("missing_entry")
        path = os.path.join(d, "manifest.json")
        with open(path) as f:
            manifest = json.load(f)
        manifest["arrays"] = [e for e in manifest["arrays"] if e["name"] != "beta"]
        with open(path, "w") as f:
            json.dump(manifest, f)
        problems = check_export(d)
        self.assertTrue(any(p.startswith("manifest arrays") for p in problems), problems)
        self.assertTrue(any(p.startswith(".npy files") for p in problems), problems)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    KVBUF = sys.argv.pop(1)
    unittest.main()
