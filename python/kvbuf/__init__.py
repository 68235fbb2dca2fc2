"""kvbuf: KV-buffered linear attention kernels (Gated DeltaNet and Mamba-2, decode and speculative
verify) on any DLPack tensors: PyTorch, CuPy, JAX; zero copy, on the caller's CUDA stream, and
capturable in CUDA graphs (torch.cuda.graph).

The kernel functions (kvbuf._C) are keyword-only and take the serving layouts of
kernels/gdn/gdn_decode.h, gdn_verify.h, kernels/mamba2/mamba2_decode.h and mamba2_verify.h: a state
pool indexed by slot as vLLM and SGLang keep it, FLA's q, k, v, g, beta, and Mamba-2's x, dt, A, B,
C, D, z. They check every argument before the launch (TypeError: a missing argument or a wrong
dtype; ValueError: shape, layout, alignment, device, or what a kernel has no instantiation for).
`stream=None` launches on the current stream of the tensors' framework (PyTorch:
torch.cuda.current_stream()); an int handle or a stream object picks another.

KVBufferCache (kvbuf.cache) owns the pools of a batch: allocate a slot, step, verify T drafts,
accept m, release.
"""
from ._C import (
    cuda_architectures,
    cuda_runtime_version,
    gdn_decode_direct,
    gdn_decode_kvbuffer,
    gdn_decode_recurrent,
    gdn_verify_classic,
    gdn_verify_classic_commit,
    gdn_verify_coef_shape,
    gdn_verify_kvbuffer,
    gdn_verify_kvbuffer_commit,
    mamba2_decode_direct,
    mamba2_decode_kvbuffer,
    mamba2_decode_recurrent,
    mamba2_verify_classic,
    mamba2_verify_kvbuffer,
    mamba2_verify_kvbuffer_commit,
)
from .cache import KVBufferCache

try:
    from importlib.metadata import PackageNotFoundError, version

    __version__ = version("kvbuf")
except PackageNotFoundError:  # the in-tree build (build/python)
    __version__ = "0+tree"

__all__ = [
    "KVBufferCache",
    "cuda_architectures",
    "cuda_runtime_version",
    "gdn_decode_direct",
    "gdn_decode_kvbuffer",
    "gdn_decode_recurrent",
    "gdn_verify_classic",
    "gdn_verify_classic_commit",
    "gdn_verify_coef_shape",
    "gdn_verify_kvbuffer",
    "gdn_verify_kvbuffer_commit",
    "mamba2_decode_direct",
    "mamba2_decode_kvbuffer",
    "mamba2_decode_recurrent",
    "mamba2_verify_classic",
    "mamba2_verify_kvbuffer",
    "mamba2_verify_kvbuffer_commit",
]
