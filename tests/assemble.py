"""A test module's kernels assembled ahead, as many ptxas (and nvdisasm) at a time as there are cores.

On a cold cubin cache (a fresh machine's first run of the suite) each module that checks many kernels would run
ptxas and nvdisasm one after the other, about a second per kernel; assembled ahead, two cores take half that, and
the tests' own compile_gemm calls are cache hits. On a warm cache it costs the lookups alone.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

from ptxgemm.toolchain.kernels import compile_gemm


def assemble_ahead(configs, sass: bool = False) -> None:
    """compile_gemm of every config (and its SASS, with `sass`), into the cubin cache. A config that does not build
    is left to the test that builds it, which reports the failure with its own context."""
    def one(config) -> None:
        try:
            kernel = compile_gemm(config)
            if sass and kernel.cubin is not None:
                kernel.sass()
        except Exception:  # noqa: BLE001 - the test that builds this config reports it
            pass

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        list(pool.map(one, configs))
