"""A pure-Python model of where TMA's swizzle modes put bytes in shared memory.

Hopper's swizzle is a function of the *absolute* shared-memory byte address: the 16-byte chunk index
(address bits 4..6) is XORed with the 128-byte line index (bits 7..9), masked to the mode's width:

    128B: a ^ (((a >> 7) & 7) << 4)   period 1024 B (8 lines of 128 B)
     64B: a ^ (((a >> 7) & 3) << 4)   period  512 B
     32B: a ^ (((a >> 7) & 1) << 4)   period  256 B
    none: a

TMA, wgmma descriptors and every hand-computed smem address (stmatrix, ld.shared) must agree on this.
`python -m ptxgemm swizzle-probe` asks the hardware and compares with this model.
"""
from __future__ import annotations

import numpy as np

MODES = ("none", "32B", "64B", "128B")
#: bytes of one swizzled row (the TMA "span"); a box's inner extent may not exceed it
SPAN_BYTES = {"none": None, "32B": 32, "64B": 64, "128B": 128}
#: XOR mask applied to the 128-byte line index
_LINE_MASK = {"none": 0, "32B": 1, "64B": 3, "128B": 7}
CHUNK_BYTES = 16
LINE_BYTES = 128


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise ValueError(f"swizzle mode: must be one of {', '.join(MODES)}, got {mode!r}")
    return mode


def period_bytes(mode: str) -> int:
    """Bytes after which the pattern repeats; also the smem alignment a swizzled tile needs."""
    check_mode(mode)
    return LINE_BYTES * (_LINE_MASK[mode] + 1) if mode != "none" else CHUNK_BYTES


def swizzle_address(addr, mode: str):
    """Physical smem byte address of logical byte address `addr` (int or numpy int array). An involution."""
    mask = _LINE_MASK[check_mode(mode)]
    return addr ^ (((addr >> 7) & mask) << 4)


def tile_grid(rows: int, cols: int, mode: str, elem_bytes: int = 2) -> np.ndarray:
    """Model of a rows×cols tile (row-major, dense rows of cols elements) moved by TMA with `mode` swizzle.

    Returns grid[r, c] = linear element index on the *other* side of the copy:
    - store (smem → global): the smem element index whose value lands at global (r, c);
    - load (global → smem): the global linear index whose value lands at smem position r·cols + c.
    Both are the same function because the swizzle is an involution on byte addresses.
    """
    lin = np.arange(rows * cols, dtype=np.int64).reshape(rows, cols) * elem_bytes
    return (swizzle_address(lin, mode) // elem_bytes).astype(np.int64)


def format_grid(grid: np.ndarray, elem_bytes: int = 2) -> str:
    """One line per row; 16-byte chunks separated by ' | ' so the chunk permutation is visible at a glance."""
    per_chunk = CHUNK_BYTES // elem_bytes
    width = len(str(int(grid.max()))) if grid.size else 1
    lines = []
    for row in grid:
        chunks = [" ".join(f"{int(v):>{width}}" for v in row[i:i + per_chunk]) for i in range(0, len(row), per_chunk)]
        lines.append(" | ".join(chunks))
    return "\n".join(lines)
