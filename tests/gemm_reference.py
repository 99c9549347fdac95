"""Test helper: ptxgemm.accuracy's float64 reference, computed on the GPU through torch when it is there (the GPU
tests may use torch as an optional peer; the library never does), else with numpy on the CPU."""
from __future__ import annotations

import numpy as np

from ptxgemm import accuracy
from ptxgemm.accuracy import DTYPES, random_matrix  # noqa: F401 - re-exported for the tests


def matmul64(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    try:
        import torch

        if torch.cuda.is_available():
            tx = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64)).cuda()
            ty = torch.from_numpy(np.ascontiguousarray(y, dtype=np.float64)).cuda()
            return (tx @ ty).cpu().numpy()
    except ImportError:
        pass
    return x.astype(np.float64) @ y.astype(np.float64)


def reference(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(a @ b, |a| @ |b|) in float64."""
    return accuracy.reference(a, b, matmul64)


def check_result(out: np.ndarray, a: np.ndarray, b: np.ndarray) -> accuracy.Verdict:
    """Every element of `out` against ptxgemm.accuracy's bound for these operands."""
    ref, abs_product = reference(a, b)
    return accuracy.check(out, ref, abs_product, a.shape[1], in_dtype=np.dtype(a.dtype).name)
