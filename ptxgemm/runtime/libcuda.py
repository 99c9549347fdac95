"""libcuda's functions on the per-call path, called through ctypes: moving a bound tensor map, allocating a call's
result and freeing it, asking whether a stream is being captured (ptxgemm.runtime.recycling), reading or setting the
thread's current context (ptxgemm.runtime.devices), and the device of an address (cuda.bindings reads
CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL from the wrong field and answers 0 for every device: NVIDIA/cuda-python#2928).
One foreign call with plain integers, where cuda.bindings' wrappers build argument objects on every call: 0.6 against
1.25 us for cuTensorMapReplaceAddress on an H200 (`bench --host layer`; docs/perf-notes.md, issue 46). Everything
else goes through cuda.bindings. Where libcuda or a function cannot be found, `function` returns None and the caller
takes cuda.bindings' route, which does the same."""
from __future__ import annotations

import ctypes

_P, _U64, _SIZE, _INT = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_int

#: name -> (argument types, result type), as cuda.h declares them (handles and addresses as pointer-sized ints);
#: the plain names are the legacy-default-stream entry points, the ones cuda.bindings calls
SIGNATURES = {
    "cuTensorMapReplaceAddress": ([_P, _P], _INT),                         # (CUtensorMap*, void* address)
    "cuMemAllocFromPoolAsync": ([ctypes.POINTER(_U64), _SIZE, _P, _P], _INT),   # (CUdeviceptr*, size, pool, stream)
    "cuMemFreeAsync": ([_U64, _P], _INT),                                  # (CUdeviceptr, stream)
    "cuStreamIsCapturing": ([_P, ctypes.POINTER(_INT)], _INT),             # (stream, CUstreamCaptureStatus*)
    "cuCtxGetCurrent": ([ctypes.POINTER(_P)], _INT),                       # (CUcontext*)
    "cuCtxSetCurrent": ([_P], _INT),                                       # (CUcontext)
    "cuPointerGetAttribute": ([_P, _INT, _U64], _INT),                     # (void* data, attribute, CUdeviceptr)
}

_library = None
_functions: dict = {}


def function(name: str):
    """libcuda's `name` with its SIGNATURES types, or None where it cannot be loaded."""
    fn = _functions.get(name, False)
    if fn is not False:
        return fn
    global _library
    try:
        if _library is None:
            _library = ctypes.CDLL("libcuda.so.1")
        fn = getattr(_library, name)
        fn.argtypes, fn.restype = SIGNATURES[name]
    except (OSError, AttributeError):
        fn = None
    _functions[name] = fn
    return fn
