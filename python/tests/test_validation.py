#!/usr/bin/env python3
"""CPU tests of the module's argument checks (no GPU needed; ctest python_validation).

For every kernel function, from the layouts its header documents (SPECS below, written from
kernels/*/..._decode.h and ..._verify.h, not from the binding): the correct arguments on the CPU are
refused only for their device; then, argument by argument, a wrong dtype is a TypeError, a wrong
shape, a non-contiguous or a misaligned view a ValueError, a missing required one a TypeError,
each naming the argument; mixed devices, bad gates, bad choices and bad streams are refused too.
Every refusal must come before a launch: with the checks removed these calls would reach the kernels
and fail otherwise (no device here, a RuntimeError), so each test fails.

bfloat16 arrays are NumPy buffers exported through __dlpack__ (dlpack_arrays.py); float32 and
int32 arguments are plain NumPy arrays (nanobind's import), so both import paths are tested; with
PyTorch present, its CPU tensors too (the DLPack exchange path and the capsule fallback).

    PYTHONPATH=build/python python3 python/tests/test_validation.py
"""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

from dlpack_arrays import DTYPES, KDL_CUDA, array  # noqa: E402

import kvbuf  # noqa: E402

# F: floats of the GDN verify coefficient record at T = 2, C = 4 (kvbuf.gdn_verify_coef_shape).
DIMS = dict(B=3, T=2, H=2, HV=4, K=64, V=64, S=5, C=4, G=2, NH=4, P=16, N=64, F=48)


def shape(names):
    return tuple(int(n) if n.isdigit() else DIMS[n] for n in names)


# Per function: argument -> (dtype, shape in DIMS names, required). Allowed dtypes beyond the one
# listed are in OTHER_DTYPES (state pools, GDN entries).
GDN_STEP = dict(q=("bf16", "B H K", True), k=("bf16", "B H K", True), v=("bf16", "B HV V", True),
                g=("f32", "B HV", False), beta=("f32", "B HV", False), slot=("i32", "B", True))
GDN_KVB = dict(state=("f32", "S HV V K", True), buf_k=("bf16", "S C H K", True), buf_val=("bf16", "S C HV V", True),
               buf_gcum=("f32", "S C HV", True), fill=("i32", "S", False), has_state=("i32", "S", False),
               done_count=("i32", "S", False))
GDN_VERIFY = dict(q=("bf16", "B T H K", True), k=("bf16", "B T H K", True), v=("bf16", "B T HV V", True),
                  g=("f32", "B T HV", True), beta=("f32", "B T HV", True), slot=("i32", "B", True))
GDN_VPOOLS = dict(state=("f32", "S HV V K", True), buf_k=("bf16", "S C H K", True),
                  buf_val=("bf16", "S C HV V", True), buf_gcum=("f32", "S C HV", True), fill=("i32", "S", True),
                  has_state=("i32", "S", True), win_k=("bf16", "B T H K", True), win_u=("bf16", "B T HV V", True),
                  win_gcum=("f32", "B T HV", True), win_base=("i32", "B 2", True))
M2_STEP = dict(x=("bf16", "B NH P", True), dt=("bf16", "B NH", True), A=("f32", "NH", True),
               B=("bf16", "B G N", True), C=("bf16", "B G N", True), D=("f32", "NH", True), slot=("i32", "B", True))
M2_KVB = dict(state=("f32", "S NH P N", True), buf_k=("bf16", "S C G N", True), buf_val=("bf16", "S C NH P", True),
              buf_gcum=("f32", "S C NH", True), buf_beta=("f32", "S C NH", True), fill=("i32", "S", False),
              has_state=("i32", "S", False), done_count=("i32", "S", False))
M2_VERIFY = dict(x=("bf16", "B T NH P", True), dt=("bf16", "B T NH", True), A=("f32", "NH", True),
                 B=("bf16", "B T G N", True), C=("bf16", "B T G N", True), D=("f32", "NH", True),
                 slot=("i32", "B", True))
M2_VPOOLS = dict(state=("f32", "S NH P N", True), buf_k=("bf16", "S C G N", True), buf_val=("bf16", "S C NH P", True),
                 buf_gcum=("f32", "S C NH", True), buf_beta=("f32", "S C NH", True), fill=("i32", "S", True),
                 has_state=("i32", "S", True), win_k=("bf16", "B T G N", True), win_u=("bf16", "B T NH P", True),
                 win_gcum=("f32", "B T NH", True), win_beta=("f32", "B T NH", True), win_base=("i32", "B 2", True))
ACCEPT = dict(accept_len=("i32", "B", True))

SPECS = {
    "gdn_decode_recurrent": {**GDN_STEP, "state": ("f32", "S HV V K", True), "out": ("bf16", "B HV V", False)},
    "gdn_decode_kvbuffer": {**GDN_STEP, **GDN_KVB, "out": ("bf16", "B HV V", False)},
    "gdn_decode_direct": {**GDN_STEP, **GDN_KVB},
    "gdn_verify_classic": {**GDN_VERIFY, "state": ("f32", "S HV V K", True),
                           "step_states": ("f32", "B T HV V K", False), "out": ("bf16", "B T HV V", False)},
    "gdn_verify_classic_commit": {"state": ("f32", "S HV V K", True), "slot": ("i32", "B", True),
                                  "step_states": ("f32", "B T HV V K", True), **ACCEPT},
    "gdn_verify_kvbuffer": {**GDN_VERIFY, **GDN_VPOOLS, "coef": ("f32", "B HV F", False),
                            "out": ("bf16", "B T HV V", False)},
    "gdn_verify_kvbuffer_commit": {"slot": ("i32", "B", True), **GDN_VPOOLS, **ACCEPT},
    "mamba2_decode_recurrent": {**M2_STEP, "state": ("f32", "S NH P N", True), "out": ("bf16", "B NH P", False)},
    "mamba2_decode_kvbuffer": {**M2_STEP, **M2_KVB},
    "mamba2_decode_direct": {**M2_STEP, **M2_KVB},
    "mamba2_verify_classic": {**M2_VERIFY, "state": ("f32", "S NH P N", True), "step_slot": ("i32", "B T", True)},
    "mamba2_verify_kvbuffer": {**M2_VERIFY, **M2_VPOOLS},
    "mamba2_verify_kvbuffer_commit": {"slot": ("i32", "B", True), **M2_VPOOLS, **ACCEPT},
}
STATE_NAMES = {"state", "step_states"}
GDN_ENTRY_NAMES = {"buf_k", "buf_val", "win_k", "win_u"}


def wrong_dtype(fn, name, dtype):
    """A dtype the argument does not take."""
    if name in STATE_NAMES:
        return "i32"
    if fn.startswith("gdn") and name in GDN_ENTRY_NAMES:
        return "i32"
    return {"bf16": "f32", "f32": "bf16", "i32": "i64"}[dtype]


def make(dtype, shp, device=None, layout="contiguous"):
    """float32 / int types as plain NumPy arrays on the CPU, everything else (and any other device
    or layout) as a DLArray."""
    if device is None and layout == "contiguous" and dtype != "bf16":
        return np.zeros(shp, DTYPES[dtype][2])
    return array(shp, dtype, device=device or (1, 0), layout=layout)


def arguments(fn, device=None, **override):
    args = {}
    for name, (dtype, dims, _) in SPECS[fn].items():
        args[name] = make(dtype, shape(dims.split()), device)
    args.update(override)
    return args


def call(fn, args):
    return getattr(kvbuf, fn)(**args)


class Validation(unittest.TestCase):
    def assert_refused(self, exc, fn, args, *words):
        with self.assertRaises(exc) as cm:
            call(fn, args)
        msg = str(cm.exception)
        self.assertIn(fn, msg)
        for w in words:
            self.assertIn(w, msg)
        return msg

    def test_correct_arguments_are_refused_only_for_the_device(self):
        for fn in SPECS:
            with self.subTest(fn=fn):
                self.assert_refused(ValueError, fn, arguments(fn), "CUDA tensors", "is on cpu")

    def test_every_function_is_specified(self):
        names = {n for n in dir(kvbuf) if n.startswith(("gdn_", "mamba2_")) and not n.endswith("_shape")}
        self.assertEqual(names, set(SPECS))

    def test_wrong_dtype_is_a_type_error_naming_the_argument(self):
        for fn, spec in SPECS.items():
            for name, (dtype, dims, _) in spec.items():
                with self.subTest(fn=fn, arg=name):
                    bad = wrong_dtype(fn, name, dtype)
                    args = arguments(fn, **{name: make(bad, shape(dims.split()))})
                    self.assert_refused(TypeError, fn, args, name, "must be")

    def test_wrong_rank_is_a_value_error_naming_the_argument(self):
        for fn, spec in SPECS.items():
            for name, (dtype, dims, _) in spec.items():
                with self.subTest(fn=fn, arg=name):
                    args = arguments(fn, **{name: make(dtype, shape(dims.split()) + (2,))})
                    self.assert_refused(ValueError, fn, args, name, "has shape")

    def test_mismatched_dimension_is_a_value_error(self):
        for fn, spec in SPECS.items():
            uses = {}
            for _, dims, _ in spec.values():
                for d in dims.split():
                    uses[d] = uses.get(d, 0) + 1
            for name, (dtype, dims, _) in spec.items():
                for axis, d in enumerate(dims.split()):
                    if d == "2" or uses[d] == 1:  # a size no other argument states
                        continue
                    with self.subTest(fn=fn, arg=name, axis=axis):
                        shp = list(shape(dims.split()))
                        shp[axis] += 1
                        args = arguments(fn, **{name: make(dtype, tuple(shp))})
                        self.assert_refused(ValueError, fn, args, "has shape", "expected")

    def test_non_contiguous_is_a_value_error_naming_the_argument(self):
        for fn, spec in SPECS.items():
            for name, (dtype, dims, _) in spec.items():
                with self.subTest(fn=fn, arg=name):
                    args = arguments(fn, **{name: make(dtype, shape(dims.split()), layout="strided")})
                    self.assert_refused(ValueError, fn, args, name, "C-contiguous")

    def test_misaligned_floating_view_is_a_value_error(self):
        for fn, spec in SPECS.items():
            for name, (dtype, dims, _) in spec.items():
                if dtype.startswith("i"):
                    continue
                with self.subTest(fn=fn, arg=name):
                    args = arguments(fn, **{name: make(dtype, shape(dims.split()), layout="offset")})
                    self.assert_refused(ValueError, fn, args, name, "aligned")

    def test_missing_required_argument_is_a_type_error(self):
        for fn, spec in SPECS.items():
            for name, (_, _, required) in spec.items():
                if not required:
                    continue
                with self.subTest(fn=fn, arg=name):
                    args = arguments(fn)
                    del args[name]
                    self.assert_refused(TypeError, fn, args, f"missing required argument '{name}'")

    def test_unknown_keyword_is_a_type_error(self):
        with self.assertRaises(TypeError):
            kvbuf.gdn_decode_recurrent(**arguments("gdn_decode_recurrent"), qq=1)

    def test_positional_arguments_are_refused(self):
        with self.assertRaises(TypeError):
            kvbuf.gdn_decode_recurrent(*arguments("gdn_decode_recurrent").values())

    def test_a_non_array_is_a_type_error(self):
        self.assert_refused(TypeError, "gdn_decode_recurrent", arguments("gdn_decode_recurrent", q=[1, 2, 3]),
                            "q must be a tensor or array")

    def test_mixed_devices_are_refused(self):
        cuda0, cuda1 = (KDL_CUDA, 0), (KDL_CUDA, 1)
        for fn, spec in SPECS.items():
            name = list(spec)[-1]
            dtype, dims, _ = spec[name]
            with self.subTest(fn=fn):
                args = arguments(fn, device=cuda0, **{name: make(dtype, shape(dims.split()), device=cuda1)})
                self.assert_refused(ValueError, fn, args, name, "cuda:1", "one device")
                args = arguments(fn, device=cuda0, **{name: make(dtype, shape(dims.split()))})
                self.assert_refused(ValueError, fn, args, name, "is on cpu")

    def test_bad_stream_is_a_type_error_before_any_cuda_call(self):
        args = arguments("gdn_decode_recurrent", device=(KDL_CUDA, 0), stream="default")
        self.assert_refused(TypeError, "gdn_decode_recurrent", args, "stream must be")

    def test_gdn_gates_go_in_one_of_two_sets(self):
        fn = "gdn_decode_recurrent"
        B, HV = DIMS["B"], DIMS["HV"]
        cases = [
            (dict(g=None, beta=None), "g and beta, or as a, b, A_log and dt_bias"),
            (dict(beta=None), "g and beta go together"),
            (dict(g=None, beta=None, a=make("bf16", (B, HV))), "a, b, A_log and dt_bias go together"),
            (dict(a=make("bf16", (B, HV))), "one of the two"),
        ]
        for override, words in cases:
            with self.subTest(override=sorted(override)):
                self.assert_refused(ValueError, fn, arguments(fn, **override), words)
        raw_gates = dict(g=None, beta=None, a=make("bf16", (B, HV)), b=make("bf16", (B, HV)),
                         A_log=make("f32", (HV,)), dt_bias=make("f32", (HV,)))
        self.assert_refused(ValueError, fn, arguments(fn, **raw_gates), "CUDA tensors")
        bad = dict(raw_gates, dt_bias=make("f32", (HV + 1,)))
        self.assert_refused(ValueError, fn, arguments(fn, **bad), "dt_bias has shape")

    def test_fla_token_axis_is_accepted_for_decode_only(self):
        B, H, K = DIMS["B"], DIMS["H"], DIMS["K"]
        fn = "gdn_decode_kvbuffer"
        args = arguments(fn, q=make("bf16", (B, 1, H, K)), k=make("bf16", (B, 1, H, K)))
        self.assert_refused(ValueError, fn, args, "CUDA tensors")
        args = arguments(fn, q=make("bf16", (B, 2, H, K)))
        self.assert_refused(ValueError, fn, args, "q has shape")

    def test_choices_and_scalars(self):
        fn = "gdn_decode_kvbuffer"
        self.assert_refused(ValueError, fn, arguments(fn, variant="rawx"), "variant must be one of")
        self.assert_refused(ValueError, fn, arguments(fn, path="fast"), "path must be one of")
        self.assert_refused(ValueError, fn, arguments(fn, variant="raw"), "the raw variant needs buf_beta")
        self.assert_refused(TypeError, fn, arguments(fn, rows_per_block="16"), "rows_per_block must be an int")
        self.assert_refused(TypeError, fn, arguments(fn, every_row_has_state=1), "must be a bool")
        for fn in ("gdn_decode_recurrent", "gdn_decode_kvbuffer", "gdn_verify_kvbuffer", "mamba2_decode_recurrent",
                   "mamba2_decode_kvbuffer"):
            self.assert_refused(TypeError, fn, arguments(fn, pools_ready_at_launch=1), "must be a bool")

    def test_gdn_verify_coef_workspace(self):
        B, T, HV, C, F = DIMS["B"], DIMS["T"], DIMS["HV"], DIMS["C"], DIMS["F"]
        self.assertEqual(kvbuf.gdn_verify_coef_shape(B, HV, T, C), (B, HV, F))
        self.assertEqual(kvbuf.gdn_verify_coef_shape(128, 32, 5, 16)[2], 276)  # Qwen3-Next, T = 5, C = 16
        for bad in ((B, HV, 0, C), (B, HV, 9, 16), (B, HV, 5, 4), (B, 0, T, C), (B, HV, T, 65)):
            with self.assertRaises(ValueError):
                kvbuf.gdn_verify_coef_shape(*bad)
        fn = "gdn_verify_kvbuffer"
        self.assert_refused(ValueError, fn, arguments(fn, coef=make("f32", (B, HV, F + 4))), "coef must be float32",
                            str(F))
        self.assert_refused(ValueError, fn, arguments(fn, coef=None, path="split"), "path 'split' needs coef")
        self.assert_refused(ValueError, fn, arguments(fn, path="fast"), "path must be one of")
        self.assert_refused(ValueError, fn, arguments(fn, path="split"), "CUDA tensors")

    def test_one_entry_dtype_per_buffer(self):
        S, C, HV, V = DIMS["S"], DIMS["C"], DIMS["HV"], DIMS["V"]
        fn = "gdn_decode_kvbuffer"
        self.assert_refused(TypeError, fn, arguments(fn, buf_val=make("f32", (S, C, HV, V))), "buf_val is float32",
                            "buf_k is bfloat16")
        fn = "gdn_verify_classic"
        B, T, K = DIMS["B"], DIMS["T"], DIMS["K"]
        self.assert_refused(TypeError, fn, arguments(fn, step_states=make("bf16", (B, T, HV, V, K))), "must match")
        self.assert_refused(ValueError, fn, arguments(fn, step_states=None), "exactly one of step_slot")

    def test_time_launches_checks_like_the_call(self):
        # The C++ side of scripts/py_overhead.py takes the function's keyword arguments as a dict.
        fn = "gdn_decode_kvbuffer"
        with self.assertRaisesRegex(ValueError, "is on cpu"):
            kvbuf._C._time_launches(fn, 10, 3, False, arguments(fn))
        with self.assertRaisesRegex(TypeError, "takes no argument 'qq'"):
            kvbuf._C._time_launches(fn, 10, 3, False, {**arguments(fn), "qq": 1})
        with self.assertRaisesRegex(ValueError, "unknown kernel"):
            kvbuf._C._time_launches("gdn_decode_fast", 10, 3, False, arguments(fn))
        with self.assertRaisesRegex(TypeError, "q must be bfloat16"):
            kvbuf._C._time_launches(fn, 10, 3, False, arguments(fn, q=make("f32", (3, 2, 64))))

    def test_out_is_checked_before_the_device(self):
        B, HV, V = DIMS["B"], DIMS["HV"], DIMS["V"]
        fn = "gdn_decode_recurrent"
        self.assert_refused(ValueError, fn, arguments(fn, out=make("bf16", (B, HV, V + 1))), "out has shape")
        self.assert_refused(TypeError, fn, arguments(fn, out=make("f32", (B, HV, V))), "out must be bfloat16")


class TorchTensors(unittest.TestCase):
    """PyTorch CPU tensors: the DLPack exchange table (torch >= 2.10) and the capsule fallback (a
    subclass that hides the table)."""

    @classmethod
    def setUpClass(cls):
        try:
            import torch
        except ImportError:
            raise unittest.SkipTest("torch is not installed")
        cls.torch = torch

    def tensors(self, fn, wrap=lambda t: t):
        torch = self.torch
        dt = {"bf16": torch.bfloat16, "f32": torch.float32, "i32": torch.int32}
        return {n: wrap(torch.zeros(shape(d.split()), dtype=dt[t])) for n, (t, d, _) in SPECS[fn].items()}

    def check(self, wrap):
        torch = self.torch
        for fn in SPECS:
            with self.subTest(fn=fn):
                with self.assertRaisesRegex(ValueError, "is on cpu"):
                    call(fn, self.tensors(fn, wrap))
        args = self.tensors("gdn_decode_kvbuffer", wrap)
        args["q"] = wrap(args["q"].float())
        with self.assertRaisesRegex(TypeError, "q must be bfloat16, got float32"):
            call("gdn_decode_kvbuffer", args)
        args = self.tensors("gdn_decode_kvbuffer", wrap)
        args["k"] = wrap(torch.zeros(DIMS["B"], DIMS["K"], DIMS["H"], dtype=torch.bfloat16).transpose(1, 2))
        with self.assertRaisesRegex(ValueError, "k must be C-contiguous"):
            call("gdn_decode_kvbuffer", args)

    def test_exchange_path(self):
        if not hasattr(self.torch.Tensor, "__dlpack_c_exchange_api__"):
            self.skipTest("this torch has no __dlpack_c_exchange_api__")
        self.check(lambda t: t)

    def test_capsule_fallback(self):
        class Plain(self.torch.Tensor):
            __dlpack_c_exchange_api__ = None
            __c_dlpack_exchange_api__ = None

        self.check(lambda t: t.as_subclass(Plain))


if __name__ == "__main__":
    unittest.main()
