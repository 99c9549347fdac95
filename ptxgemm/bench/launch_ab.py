"""Programmatic dependent launch on and off, side by side in one process (`python -m ptxgemm bench --pdl`; issue 46):
two plans of one problem, one made with the GEMM launched as a programmatic dependent of the kernel before it
(driver.PROGRAMMATIC_LAUNCH, the default) and one made without, timed interleaved by the bench's two short methods
(ptxgemm.runtime.timing): burst (L2 flushed before each launch, events around it) and back to back (a run of
launches, events around the run). The figure that decides whether PDL stays the default."""
from __future__ import annotations

import numpy as np

from ..runtime import arrays, driver, timing

#: a training step's GEMMs of 15-200 us (issue 47's set: its lowest rows and a few wide ones), and one long GEMM
SHAPES = ((4096, 896, 896), (4864, 896, 4096), (4096, 1536, 1536), (4096, 256, 1536), (1536, 1536, 4096),
          (256, 4096, 4096), (4096, 8960, 1536), (8192, 8192, 8192))
DEFAULT_ROUNDS = 15
BACK_TO_BACK_LAUNCHES = 50
WAYS = (("pdl", True), ("no_pdl", False))


def plans(shape: tuple[int, int, int]) -> dict:
    """{way: GemmPlan} of x (M, K) @ W^T with W (N, K) row-major (B K-major, a linear layer's), bf16, random
    values; the two plans share their arrays and differ only in the launch attribute."""
    from ..gemm import GemmPlan

    m, n, k = shape
    rng = np.random.default_rng(46)
    bf16 = np.dtype("bfloat16")
    a = arrays.DeviceArray.from_numpy(rng.standard_normal((m, k)).astype(bf16))
    b = arrays.DeviceArray.from_numpy(rng.standard_normal((n, k)).astype(bf16).T)
    out = arrays.DeviceArray.empty((m, n), bf16)
    made = {}
    for way, programmatic in WAYS:
        with driver.programmatic_launches(programmatic):
            made[way] = GemmPlan(a, b, out)
    return made


def measure(shapes=SHAPES, rounds: int = DEFAULT_ROUNDS) -> dict:
    """Both ways on each shape, both methods: {"gpu", "method", "rounds", "rows": [{"shape", "config",
    "burst_us": {way: us}, "back_to_back_us": {way: us}, "burst_speedup", "back_to_back_speedup"}]} (speedup: the
    time without PDL over the time with it). `rounds` >= 1: the CLI's rule (cli/bench.run_pdl)."""
    driver.require_sm90("timing programmatic dependent launch")
    rows = []
    for shape in shapes:
        ways = plans(shape)
        launchers = {way: plan.launch for way, plan in ways.items()}
        burst = timing.time_interleaved(launchers, rounds)
        b2b = timing.time_back_to_back(launchers, BACK_TO_BACK_LAUNCHES, rounds)
        rows.append({"shape": list(shape), "config": ways["pdl"].config.tag,
                     "burst_us": {w: t * 1e3 for w, t in burst.items()},
                     "back_to_back_us": {w: t * 1e3 for w, t in b2b.items()},
                     "burst_speedup": burst["no_pdl"] / burst["pdl"],
                     "back_to_back_speedup": b2b["no_pdl"] / b2b["pdl"]})
    return {"gpu": driver.device_info().name, "rounds": rounds,
            "method": "two plans of one problem (with and without the programmatic launch attribute), interleaved "
                      "round by round: burst (L2 flushed, events around one launch) and back to back "
                      f"({BACK_TO_BACK_LAUNCHES} launches, events around the run); median over rounds",
            "rows": rows}


def format_report(result: dict) -> str:
    lines = [f"# {result['gpu']}: programmatic dependent launch on / off (median of {result['rounds']} rounds; "
             "speedup = off / on)",
             f"{'shape':>18}  {'config':<16} {'burst on':>9} {'off':>9} {'x':>6}   {'b2b on':>9} {'off':>9} {'x':>6}"]
    for r in result["rows"]:
        b, s = r["burst_us"], r["back_to_back_us"]
        lines.append(f"{'x'.join(map(str, r['shape'])):>18}  {r['config']:<16} {b['pdl']:9.2f} {b['no_pdl']:9.2f} "
                     f"{r['burst_speedup']:6.3f}   {s['pdl']:9.2f} {s['no_pdl']:9.2f} {r['back_to_back_speedup']:6.3f}")
    return "\n".join(lines)
