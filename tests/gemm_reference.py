"""Shared by the GEMM tests and tools/bench.py: random operands and a float64 reference.

The reference is float64 on the GPU through torch when torch is importable (the GPU tests may use it as a peer;
the library never does), else numpy float64 on the CPU.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

DTYPES = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float32": np.float32}
#: ‖out−ref‖/‖ref‖ bounds by output dtype (bf16 output rounds to 8 bits of mantissa)
TOLERANCE = {"bfloat16": 1e-2, "float16": 5e-3, "float32": 5e-3}


def random_matrix(rng: np.random.Generator, rows: int, cols: int, dtype: str, order: str = "C") -> np.ndarray:
    """Standard-normal values rounded to `dtype`; never zeros (zeros hide unwritten outputs)."""
    x = rng.standard_normal((rows, cols), dtype=np.float32)
    return np.asarray(x.astype(DTYPES[dtype]), order=order)


def reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b in float64 from the exact (already rounded) input values."""
    try:
        import torch

        if torch.cuda.is_available():
            ta = torch.from_numpy(np.ascontiguousarray(a.astype(np.float64))).cuda()
            tb = torch.from_numpy(np.ascontiguousarray(b.astype(np.float64))).cuda()
            return (ta @ tb).cpu().numpy()
    except ImportError:
        pass
    return a.astype(np.float64) @ b.astype(np.float64)


def relative_error(out: np.ndarray, ref: np.ndarray) -> float:
    """‖out − ref‖ / ‖ref‖ (Frobenius); NaN anywhere in `out` gives NaN, which fails every bound."""
    out64 = out.astype(np.float64)
    denom = np.linalg.norm(ref)
    return float(np.linalg.norm(out64 - ref) / (denom if denom else 1.0))
