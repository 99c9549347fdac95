"""fast.cu's kernel 12 as an optional bf16 peer (`bench --fastcu DIR`): built from its public sources, never shipped.

fast.cu (github.com/pranjalssh/fast.cu) is a series of hand-written Hopper bf16 GEMMs; its kernel 12 (128x256 tiles in
cluster pairs sharing B, a Hilbert walk, 128 of the SMs) was measured at parity with cuBLAS and a little ahead of it
under sustained load (issue 26). Its code is not part of ptxgemm: the caller points `--fastcu` at a checkout, and
this module compiles a small wrapper around its `examples/matmul/matmul_12.cuh` with the CUDA toolkit's nvcc into a
shared library in ptxgemm's cache (keyed by the sources and nvcc's version), then calls it through ctypes.

The kernel has its own layouts and limits, which the row states rather than hides:
- A (M, K) row-major, B as (N, K) row-major (K-major), C written column-major (M contiguous): the peer gets its own
  copies of the bench's A and B in those layouts, and its result rows are read back through the transpose;
- M a multiple of 256 (two 128-row tiles per cluster), N of 256, K of 64; other shapes are refused (FastCuRefused);
- it launches on the legacy default stream, where the bench's timing events are recorded;
- its host code keeps one set of tensor maps per M (a module-level cache keyed by M alone), so the wrapper clears
  that cache before each new problem (`reset`).
"""
from __future__ import annotations

import ctypes
import hashlib
import subprocess
from pathlib import Path

import numpy as np

from ..errors import ConfigError, ToolchainError
from ..runtime import arrays
from ..toolchain import compiler, locate

NAME = "fast.cu kernel 12"
DRIVER_LIBRARY = "libcuda.so.1"
HEADER = Path("examples") / "matmul" / "matmul_12.cuh"
# the kernel's tile multiples: BM x CLUSTER_M rows, BN columns, BK of K (runKernel12's constants)
M_MULTIPLE, N_MULTIPLE, K_MULTIPLE = 256, 256, 64

# fast.cu's own Makefile flags (its kernel is built as its author built it; -DNDEBUG is required: one of its host
# asserts names a variable that no longer exists)
NVCC_FLAGS = ("-std=c++17", "-O3", "-DNDEBUG", "-w", "--expt-relaxed-constexpr", "--expt-extended-lambda",
              "--use_fast_math", "-gencode", "arch=compute_90a,code=sm_90a")
# Our wrapper: the includes and helpers fast.cu's matmul.cu gives its headers, the header itself, and two C entry
# points. The header is fast.cu's; these lines are ptxgemm's.
WRAPPER = r"""
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda/barrier>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cassert>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

typedef __nv_bfloat16 bf16;
#define CEIL_DIV(M, N) (((M) + (N)-1) / (N))
static void cudaCheck(cudaError_t error, const char *file, int line) {
  if (error != cudaSuccess) {
    fprintf(stderr, "[fast.cu wrapper] CUDA error at %s:%d: %s\n", file, line, cudaGetErrorString(error));
    exit(1);
  }
}
#define cudaCheck(err) (cudaCheck(err, __FILE__, __LINE__))

#include "examples/matmul/matmul_12.cuh"

// forget the tensor maps and tile walk kept for the last M: the next call builds them for its own pointers
extern "C" int ptxgemm_fastcu_reset(void) { M12::_prev_m = 0; return 0; }

// one GEMM on the legacy default stream; the launch's error code (0: none)
extern "C" int ptxgemm_fastcu_k12(int M, int N, int K, void *A, void *B, void *C) {
  runKernel12(M, N, K, (bf16 *)A, (bf16 *)B, (bf16 *)C, nullptr);
  return (int)cudaGetLastError();
}
"""


class FastCuRefused(Exception):
    """fast.cu's kernel 12 does not run this problem (its tile multiples); the row says why and goes on without it."""


def source_dir(given: str) -> Path:
    """The fast.cu checkout at `given`; ConfigError (a bad --fastcu) when it does not hold kernel 12."""
    root = Path(given)
    if not (root / HEADER).is_file():
        raise ConfigError(f"--fastcu: {root} has no {HEADER}; point it at a checkout of "
                          f"github.com/pranjalssh/fast.cu")
    return root


def supported(m: int, n: int, k: int) -> str | None:
    """None if kernel 12 runs (m, n, k), else why not."""
    bad = [f"{name} = {v} is not a multiple of {mult}" for name, v, mult in
           (("M", m, M_MULTIPLE), ("N", n, N_MULTIPLE), ("K", k, K_MULTIPLE)) if v % mult]
    return "; ".join(bad) or None


def build(root: Path) -> Path:
    """The wrapper's shared library, compiled once per (wrapper, header, nvcc version) into ptxgemm's cache."""
    nvcc = locate.find_tool("nvcc")
    if nvcc is None:
        raise ToolchainError("fast.cu: nvcc not found (PTXGEMM_NVCC, CUDA_HOME, CUDA_PATH, /usr/local/cuda or "
                             "PATH): building its kernel needs the CUDA toolkit")
    header = (root / HEADER).read_bytes()
    key = hashlib.sha256(WRAPPER.encode() + header + locate.tool_version(str(nvcc)).encode()).hexdigest()[:20]
    out_dir = compiler.cache_dir() / "fastcu"
    lib = out_dir / f"fastcu_k12_{key}.so"
    if lib.is_file():
        return lib
    out_dir.mkdir(parents=True, exist_ok=True)
    src = out_dir / f"fastcu_k12_{key}.cu"
    src.write_text(WRAPPER)
    # not linked against libcuda: its one driver call (cuTensorMapEncodeTiled) is resolved at load time from the
    # driver library FastCuImpl loads first, so the build needs no driver (nor the toolkit's stubs) where it runs
    cmd = [str(nvcc), *NVCC_FLAGS, "-shared", "-Xcompiler", "-fPIC", f"-I{root}", str(src), "-o", str(lib)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise ToolchainError(f"fast.cu: building kernel 12 failed ({' '.join(cmd)}):\n{done.stderr[-2000:]}")
    return lib


class FastCuImpl:
    """The bench's peer interface (prepare -> launcher, result(rows)) around kernel 12."""

    name = NAME

    def __init__(self, root: Path):
        self.root = root
        lib = build(root)
        ctypes.CDLL(DRIVER_LIBRARY, mode=ctypes.RTLD_GLOBAL)   # the driver's symbols for the wrapper (see build)
        self.lib = ctypes.CDLL(str(lib))
        self.lib.ptxgemm_fastcu_k12.argtypes = [ctypes.c_int] * 3 + [ctypes.c_void_p] * 3
        self.lib.ptxgemm_fastcu_k12.restype = ctypes.c_int
        self.out = None

    def prepare(self, a: np.ndarray, b: np.ndarray, out_dtype):
        """A launcher for a (M, K) @ b (K, N), bf16 in and out, on this peer's own copies in its layouts."""
        m, k = a.shape
        n = b.shape[1]
        why = supported(m, n, k)
        if why:
            raise FastCuRefused(why)
        da = arrays.DeviceArray.from_numpy(np.ascontiguousarray(a))
        db = arrays.DeviceArray.from_numpy(np.ascontiguousarray(b.T))          # (N, K) row-major: K-major B
        self.out = arrays.DeviceArray.empty((n, m), out_dtype)                 # C column-major: C^T row-major
        self.out.poison()
        self.lib.ptxgemm_fastcu_reset()
        fn, out = self.lib.ptxgemm_fastcu_k12, self.out

        def launch():
            err = fn(m, n, k, da.ptr, db.ptr, out.ptr)
            if err:
                raise RuntimeError(f"{NAME}: launch failed with cudaError {err} at {m}x{n}x{k}")
        return launch

    def result(self, rows):
        return self.out.to_numpy()[:, rows].T
