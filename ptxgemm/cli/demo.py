"""`python -m ptxgemm demo`: the main job of a fresh install.

With a Hopper GPU: multiply random bf16 matrices with `ptxgemm.run`, check the result against float64, and time
the kernel (L2 flushed before each launch, CUDA events, median). Without one: build the kernel anyway and show
what ptxas made of it (the part of the pipeline that needs no GPU), then say why nothing ran.
"""
from __future__ import annotations

import re

import ml_dtypes
import numpy as np

from .. import gemm
from ..kernel.config import GemmConfig
from ..runtime import arrays, driver, timing
from ..select.cost_model import choose
from ..toolchain.kernels import compile_gemm

SASS_MARKERS = ("HGMMA", "UTMALDG", "UTMASTG", "STSM", "SYNCS", "USETMAXREG")
CHECK_ROWS = 256  # rows of the float64 reference (the whole matrix would take the CPU seconds)
TIMED_LAUNCHES = 20


def describe_build(config: GemmConfig) -> str:
    kernel = compile_gemm(config)
    lines = [f"kernel: {config.describe()}",
             f"  shared memory {config.smem_bytes} B, threads {config.threads}, registers at entry / producer / "
             f"consumer: {config.entry_registers} / {config.register_split[0]} / {config.register_split[1]}"]
    if kernel.cubin is None:
        lines.append("  no ptxas found: the driver would JIT the PTX; no SASS to show")
        return "\n".join(lines)
    fn = kernel.report.functions[config.kernel_name]
    sass = kernel.sass()
    counts = ", ".join(f"{m} x{count}" for m, count in ((m, len(re.findall(r"\b" + m, sass))) for m in SASS_MARKERS))
    lines.append(f"  ptxas {kernel.ptxas_version}: {fn.registers} registers, {fn.spill_store_bytes} B spilled, "
                 f"warnings: {sorted(kernel.report.warning_codes) or 'none'}")
    lines.append(f"  SASS: {counts}")
    return "\n".join(lines)


def run_demo(m: int, n: int, k: int, seed: int = 0) -> int:
    config, source = choose(m, n, k)  # what GemmPlan picks for this shape (the GPU's tables, or an H100's without one)
    print(f"config for {m}x{n}x{k}: {config.tag} ({source})")
    print(describe_build(config))
    reason = driver.no_device_reason()
    if reason is None:
        cc = driver.device_info().compute_capability
        if cc != (9, 0):
            reason = f"the GPU is sm_{cc[0]}{cc[1]}; ptxgemm's kernels need sm_90 (H100/H200)"
    if reason is not None:
        print(f"no GPU run: {reason}")
        return 0
    info = driver.device_info()
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k), dtype=np.float32).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n), dtype=np.float32).astype(ml_dtypes.bfloat16)
    c = gemm.run(a, b)
    rows = rng.choice(m, size=min(CHECK_ROWS, m), replace=False)
    ref = a[rows].astype(np.float64) @ b.astype(np.float64)
    err = float(np.linalg.norm(c[rows].astype(np.float64) - ref) / np.linalg.norm(ref))
    print(f"{info.name}: c = ptxgemm.run(a, b) for {m}x{k} @ {k}x{n} bf16; "
          f"relative error vs float64 on {len(rows)} random rows: {err:.2e}")

    plan = gemm.GemmPlan(arrays.DeviceArray.from_numpy(a), arrays.DeviceArray.from_numpy(b),
                    arrays.DeviceArray.empty((m, n), a.dtype), config)
    ms = timing.time_interleaved({"ptxgemm": plan.launch}, TIMED_LAUNCHES)["ptxgemm"]
    print(f"kernel time {ms:.3f} ms = {plan.flops / ms / 1e9:.0f} TFLOP/s (median of {TIMED_LAUNCHES}, "
          f"L2 flushed before each; `python -m ptxgemm bench` compares with cuBLAS)")
    return 0 if err < 1e-2 else 1


#: the command's --help text (its one-line summary is in ptxgemm/cli/main.py's table)
DESCRIPTION = ("Multiply random bf16 matrices with ptxgemm.run, check the result against "
               "float64 and time the kernel; without an H100/H200, build the kernel, show what "
               "ptxas made of it and say why nothing ran.")


def add_arguments(p) -> None:
    for dim in ("m", "n", "k"):
        p.add_argument(f"--{dim}", type=int, default=4096, help=f"problem size {dim.upper()} (default 4096)")


def run(args) -> int:
    return run_demo(args.m, args.n, args.k)
