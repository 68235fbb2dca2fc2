"""The public decode kernels that install by name from PyPI, loaded for kvbuf's GPU tests
(python/tests/test_gpu.py) and scripts/bench_public.py. Each loader returns (function, version) or
raises ImportError saying what is missing.

  fla-core     fla.ops.gated_delta_rule.fused_recurrent_gated_delta_rule (Triton)
  mamba-ssm    mamba_ssm.ops.triton.selective_state_update.selective_state_update (Triton). mamba-ssm
               installs without compiling its CUDA extension (MAMBA_SKIP_CUDA_BUILD=TRUE), but its
               package __init__ imports that extension (and its model code transformers): the Triton
               op's module is then loaded on its own, without the package __init__.
  flashinfer   flashinfer.gdn_decode.gated_delta_rule_decode_pretranspose (pool + indices; its
               float32 state path needs K, V >= 128)
"""
import importlib
import importlib.util
import os
import sys
import types
from importlib.metadata import PackageNotFoundError, version


def _version(dist):
    try:
        return version(dist)
    except PackageNotFoundError:
        return "unknown"


def fla_fused_recurrent():
    try:
        from fla.ops.gated_delta_rule import fused_recurrent_gated_delta_rule
    except ImportError as e:
        raise ImportError(f"fla-core is not importable (pip install fla-core): {e}") from e
    return fused_recurrent_gated_delta_rule, _version("fla-core")


def mamba_selective_state_update():
    name = "mamba_ssm.ops.triton.selective_state_update"
    try:
        module = importlib.import_module(name)
    except ImportError:
        spec = importlib.util.find_spec("mamba_ssm")  # locates the package without running it
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("mamba-ssm is not installed (MAMBA_SKIP_CUDA_BUILD=TRUE pip install mamba-ssm)")
        root = list(spec.submodule_search_locations)[0]
        for pkg, sub in (("mamba_ssm", ""), ("mamba_ssm.ops", "ops"), ("mamba_ssm.ops.triton", "ops/triton")):
            if pkg not in sys.modules:  # an empty package in its place: its submodules load from the files
                m = types.ModuleType(pkg)
                m.__path__ = [os.path.join(root, sub)]
                sys.modules[pkg] = m
        try:
            module = importlib.import_module(name)
        except ImportError as e:
            raise ImportError(f"mamba-ssm's Triton selective_state_update does not import: {e}") from e
    return module.selective_state_update, _version("mamba-ssm")


def flashinfer_gdn_decode():
    try:
        from flashinfer.gdn_decode import gated_delta_rule_decode_pretranspose
    except ImportError as e:
        raise ImportError(f"flashinfer is not importable (pip install flashinfer-python): {e}") from e
    return gated_delta_rule_decode_pretranspose, _version("flashinfer-python")
