"""Host side of the hardware probes: the TMA swizzle probe (`python -m ptxgemm swizzle-probe`).

`swizzle_probe_ptx` renders the probe's PTX (no GPU needed, used by `python -m ptxgemm dump`);
`run_swizzle_probe` runs it and returns the same grid as `ptxgemm.kernel.swizzle.tile_grid` predicts.
"""
from __future__ import annotations

import ctypes

import numpy as np

from ..errors import ConfigError, CudaError
from ..kernel import codegen
from ..kernel.stall_format import DEFAULT_TIMEOUT_NS, STALL_CODES
from ..kernel.swizzle import MODES, SPAN_BYTES
from ..runtime import arrays, driver, tensormap
from ..runtime.debug import StallRecords
from ..toolchain import compiler

PTX_VERSION = "8.0"
PROBE_THREADS = 128
ELEM_BYTES = 2  # the probe moves 16-bit integers: values are linear indices
MAX_BOX_ROWS = 256
MAX_DYNAMIC_SMEM = 232448  # H100/H200 opt-in limit per block
DIRECTIONS = ("store", "load")


def check_tile(mode: str, rows: int, cols: int) -> None:
    """Raise ConfigError naming the rule a probe tile breaks."""
    if mode not in MODES:
        raise ConfigError(f"--mode: must be one of {', '.join(MODES)} or all, got {mode!r}")
    if not 1 <= rows <= MAX_BOX_ROWS:
        raise ConfigError(f"--rows: a TMA box has 1..{MAX_BOX_ROWS} rows, got {rows}")
    if cols < 1 or (cols * ELEM_BYTES) % 16:
        raise ConfigError(f"--cols: a row must be a whole number of 16-byte chunks (a multiple of 8 elements), got {cols}")
    span = SPAN_BYTES[mode]
    if span is not None and cols * ELEM_BYTES != span:
        # TMA allows narrower boxes, but where their rows land is not what ptxgemm.kernel.swizzle models (dense rows
        # would map outside the tile), so the probe asks only what the model can answer.
        raise ConfigError(f"--cols: with {mode} swizzle a row must be exactly the swizzle span ({span} B = "
                          f"{span // ELEM_BYTES} elements), got {cols} elements = {cols * ELEM_BYTES} B")
    if cols > MAX_BOX_ROWS:
        raise ConfigError(f"--cols: a TMA box has at most {MAX_BOX_ROWS} elements per row, got {cols}")
    if rows * cols > 1 << 16:
        raise ConfigError(f"--rows x --cols: at most 65536 elements (values are 16-bit indices), got {rows * cols}")
    if rows * cols * ELEM_BYTES + 8 > MAX_DYNAMIC_SMEM:
        raise ConfigError(f"--rows x --cols: the tile must fit in {MAX_DYNAMIC_SMEM} B of shared memory")


def default_cols(mode: str) -> int:
    """One full swizzle span per row (128 B for 'none')."""
    return (SPAN_BYTES[mode] or 128) // ELEM_BYTES


def swizzle_probe_ptx(rows: int, cols: int, debug: bool = True) -> str:
    return codegen.render("swizzle_probe.ptx.j2", template_name="swizzle_probe.ptx.j2",
                          summary=f"TMA swizzle probe, {rows}x{cols} 16-bit tile", ptx_version=PTX_VERSION,
                          rows=rows, cols=cols, threads=PROBE_THREADS, debug=debug, stall_codes=STALL_CODES,
                          debug_timeout_ns=DEFAULT_TIMEOUT_NS)


def run_swizzle_probe(mode: str, direction: str, rows: int, cols: int) -> np.ndarray:
    """Ask the hardware; returns grid[r, c] with the meaning of `ptxgemm.kernel.swizzle.tile_grid`."""

    check_tile(mode, rows, cols)
    if direction not in DIRECTIONS:
        raise ConfigError(f"--direction: must be store, load or both, got {direction!r}")
    driver.require_sm90("running the swizzle probe")
    module = driver.load_module(compiler.compile_ptx(swizzle_probe_ptx(rows, cols)), "swizzle probe module")
    n = rows * cols
    smem = n * ELEM_BYTES + 16
    glob = arrays.DeviceArray.from_numpy(np.arange(n, dtype=np.uint16).reshape(rows, cols))
    tmap = tensormap.encode_tiled(glob, dims=(cols, rows), strides=(cols * ELEM_BYTES,), box=(cols, rows),
                                  swizzle=mode, l2_promotion="none")
    if direction == "store":
        glob.fill_bytes(0xFFFF, 2)
        fn = module.function("swizzle_probe_store")
        fn.set_max_dynamic_smem(smem)
        driver.launch(fn, (1,), (PROBE_THREADS,), [tmap], smem_bytes=smem)
        driver.synchronize(f"running the swizzle probe (store, {mode})")
        return glob.to_numpy().astype(np.int64)
    out = arrays.DeviceArray.empty((rows, cols), np.uint16)
    out.fill_bytes(0xFFFF, 2)
    records = StallRecords(1, PROBE_THREADS)
    fn = module.function("swizzle_probe_load")
    fn.set_max_dynamic_smem(smem)
    try:
        driver.launch(fn, (1,), (PROBE_THREADS,), [tmap, out, ctypes.c_uint64(records.device_pointer)],
                      smem_bytes=smem)
        driver.synchronize(f"running the swizzle probe (load, {mode})")
    except CudaError as e:
        records.raise_if_stalled(f"running the swizzle probe (load, {mode})", e)
        raise
    return out.to_numpy().astype(np.int64)
