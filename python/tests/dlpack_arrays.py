"""Arrays with __dlpack__ for the module's CPU tests: a NumPy buffer exported with any DLPack dtype
(NumPy has no bfloat16) and any DLPack device (a "CUDA" array here is host memory: the tests give it
only to calls that must refuse before any launch), through ctypes and no other package.
"""
import ctypes

import numpy as np

KDL_CPU, KDL_CUDA = 1, 2
# name -> (DLPack type code, bits, NumPy storage dtype)
DTYPES = {
    "bf16": (4, 16, np.uint16),
    "f16": (2, 16, np.float16),
    "f32": (2, 32, np.float32),
    "i32": (0, 32, np.int32),
    "i64": (0, 64, np.int64),
}


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32), ("dtype", _DType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class _Managed(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_Managed))
_Managed._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]
_NO_DELETE = _DELETER(lambda _: None)  # the DLArray owns the memory

_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class DLArray:
    """`storage` (a NumPy array, any strides) exported through __dlpack__ as `dtype` (a DTYPES name)
    on `device` ((DLPack device type, id))."""

    def __init__(self, storage, dtype, device=(KDL_CPU, 0)):
        code, bits, np_dtype = DTYPES[dtype]
        if storage.dtype.itemsize * 8 != bits:
            raise ValueError("storage element size differs from the dtype's")
        self.storage, self.dtype, self.device = storage, dtype, device
        self.shape = storage.shape
        n = storage.ndim
        self._shape = (ctypes.c_int64 * max(n, 1))(*storage.shape)
        self._strides = (ctypes.c_int64 * max(n, 1))(*(s // storage.itemsize for s in storage.strides))
        self._managed = _Managed()
        t = self._managed.dl_tensor
        t.data = storage.ctypes.data
        t.device = _Device(*device)
        t.ndim = n
        t.dtype = _DType(code, bits, 1)
        t.shape = self._shape
        t.strides = self._strides
        t.byte_offset = 0
        self._managed.deleter = _NO_DELETE

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        return _capsule_new(ctypes.addressof(self._managed), b"dltensor", None)

    def __dlpack_device__(self):
        return self.device


def array(shape, dtype, device=(KDL_CPU, 0), layout="contiguous", rng=None):
    """A DLArray of `shape`: contiguous, "strided" (every last-axis element a second one apart, so
    not C-contiguous) or "offset" (contiguous, one element past an aligned start)."""
    np_dtype = DTYPES[dtype][2]
    rng = rng or np.random.default_rng(0)
    n = int(np.prod(shape)) if shape else 1
    if layout == "strided":
        base = np.zeros(tuple(shape[:-1]) + (2 * shape[-1],), np_dtype)
        storage = base[..., ::2]
    elif layout == "offset":  # starts one element past a 16-byte boundary
        base = np.zeros(n + 32, np_dtype)
        start = next(i for i in range(32) if (base.ctypes.data + i * base.itemsize) % 16 == base.itemsize)
        storage = base[start:start + n].reshape(shape)
    else:
        storage = np.zeros(shape, np_dtype)
    return DLArray(storage, dtype, device)
