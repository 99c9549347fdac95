"""`python -m ptxgemm bench`: ptxgemm against cuBLAS, side by side in one process, one timing method for both.

Method (the same for every implementation, ptxgemm.runtime.timing): L2 flushed (a memset twice its size) before each
launch, CUDA events around the launch alone on the same stream, rounds interleaved between implementations (the
order alternating each round), median over rounds. Inputs are random bf16 (never zeros); A is row-major (M, K), B
row-major (K, N), as numpy gives them. The peer is cuBLAS through torch.matmul when torch is importable, else CuPy
(both optional: imported only here, when the bench runs).

ptxgemm runs the config the library selects itself (gemm.GemmPlan with config=None), with the tune cache off unless
--use-tune-cache: a benchmark measures what a user gets without tuning. Each row records the tag of the config the
plan actually ran. rel_err is computed on the same fixed sample of rows for every implementation (a full float64
product of 16384x16384x8192 would take the CPU minutes).

    python -m ptxgemm bench                                    # default shapes -> bench_out/bench_<gpu>.json/.png
    python -m ptxgemm bench --quick                            # about a minute
    python -m ptxgemm bench --out docs/results/h100/bench --name issue9_run1   # .../bench_h100_issue9_run1.json
    python -m ptxgemm bench --variants pp128x192,coop256x128c2  # fixed configs timed beside the selected one
    python -m ptxgemm bench --summarize docs/results/h100/bench/bench_h100_*.json   # min/median/max over runs; no GPU needed
    python -m ptxgemm bench --in-dtype float8_e4m3fn [--scaling tensor|row|block]   # bench_<gpu>_fp8_<scaling>.json
    python -m ptxgemm bench --epilogue bias-gelu [--in-dtype D]    # fused vs plain vs plain + torch pass

The command line is ptxgemm/cli/bench.py; --summarize is ptxgemm/bench/summary.py; the fp8 and epilogue modes
(--in-dtype, --scaling, --epilogue) are ptxgemm/bench/modes.py, which reuses this module's shapes, groups, sampled
rows and float64 reference.
"""
from __future__ import annotations

import json
import math
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from .. import gemm
from ..errors import ConfigError
from ..kernel.config import GemmConfig
from ..runtime import arrays, driver, timing
from ..select import cost_model as select
from .row_log import RowLog

# --- shapes ------------------------------------------------------------------------------------------------------
K_SWEEP = (64, 128, 256, 512, 1024, 2048)
SEED_M, SEED_N = 8448, 9216  # 66 x 72 tiles of 128x128 = 36 waves of 132 SMs exactly
SQUARE_LLM_SHAPES = ((4096, 4096, 4096), (6144, 6144, 6144), (8192, 8192, 8192), (16384, 16384, 8192),
                     (4096, 14336, 4096), (4096, 4096, 14336))
SMALL_M_SHAPES = ((512, 8192, 8192), (128, 8192, 8192))
SMALL_M_MAX = 512            # a --shapes shape with M at most this counts as small-M
# The small-M suite (decode and small batches: too few tiles to fill the SMs), `--small-m`
SMALL_M_SUITE = tuple((m, n, k) for m in (1, 16, 64, 128, 256, 512)
                      for n, k in ((4096, 4096), (8192, 8192), (14336, 4096), (4096, 14336)))
QUICK_SHAPES = ((SEED_M, SEED_N, 64), (SEED_M, SEED_N, 512), (SEED_M, SEED_N, 2048), (4096, 4096, 4096),
                (8192, 8192, 8192), (4096, 14336, 4096), (512, 8192, 8192), (128, 8192, 8192))
# Shapes whose rows are not whole 16-byte lines (K or N not a multiple of 8 for bf16): TMA cannot read A or write C
# in place, so ptxgemm stages them (ptxgemm.plan.operands); cuBLAS falls back to kernels for unaligned leading dimensions
UNALIGNED_SHAPES = ((8191, 8191, 8191), (4095, 14335, 4095), (1000, 1000, 1001), (4096, 10922, 4096),
                    (4096, 4096, 4095), (2047, 2047, 2047))
LINE_ALIGN_ELEMENTS = 8      # bf16 elements per 16 bytes
GROUPS = ("seed_sweep", "square_llm", "small_m", "unaligned")   # geomean groups; "all" is every row
SAMPLE_ROWS = 64             # rows of the float64 reference, the same rows for every implementation
SAMPLE_SEED = 12345          # fixed, so every run and every implementation checks the same rows
METHOD = "L2 flushed before each launch, CUDA events around the launch, interleaved rounds, median"   # the burst one


def default_shapes():
    return [(SEED_M, SEED_N, k) for k in K_SWEEP] + list(SQUARE_LLM_SHAPES) + list(SMALL_M_SHAPES)


def group_of(m: int, n: int, k: int, line_elements: int = LINE_ALIGN_ELEMENTS) -> str:
    """The geomean group of a shape: unaligned rows (K or N not a whole number of 16-byte lines of `line_elements`
    elements: 8 for bf16, 16 for fp8), the seed K sweep (M, N = 8448, 9216), small-M (M <= 512), else square/LLM."""
    if k % line_elements or n % line_elements:
        return "unaligned"
    if (m, n) == (SEED_M, SEED_N):
        return "seed_sweep"
    if m <= SMALL_M_MAX:
        return "small_m"
    return "square_llm"


def gpu_slug(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100', 'NVIDIA H200' -> 'h200'; else the name's letters and digits."""
    m = re.search(r"\b([A-Za-z]{1,3}\d{2,4})\b", name.replace("NVIDIA", ""))
    if m:
        return m.group(1).lower()
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") or "gpu"


def parse_tag(spec: str, **fields):
    """A GemmConfig from its tag ('pp128x192', 'coop256x128c2'); the old '128x192' / '128x128c2' mean pingpong.
    `fields`: the operands the bench will give it (b_major: a pair along M splits K-major B where it cannot split
    MN-major B, so coop128x192c2 exists for K-major B only); the plan completes the rest from the arrays."""

    spec = spec.strip()
    if spec[:1].isdigit():
        spec = "pp" + spec
    return GemmConfig.from_tag(spec, **fields)


def geomean(values):
    values = [v for v in values if v is not None and v > 0]
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None


def row_group(row: dict) -> str:
    """A row's geomean group: the one it recorded (an fp8 row's lines hold 16 elements), else its shape's."""
    return row.get("group") or group_of(row["M"], row["N"], row["K"])


def geomeans(rows, key: str = "ratio") -> dict:
    """Geomean of the rows' ratios (`key`: "ratio", burst, or "sustained_ratio") per group and over all rows (None
    where a group has no row with one)."""
    out = {g: geomean([r.get(key) for r in rows if row_group(r) == g]) for g in GROUPS}
    out["all"] = geomean([r.get(key) for r in rows])
    return out


def sustained_fields(name: str, flops: float, ms: float, launches: int, window) -> dict:
    """One implementation's sustained figures for a row (prefix `name`: ptxgemm or cublas): its time and TFLOP/s
    over the window, the window's mean SM clock and board power, and joules per TFLOP of useful work."""
    return {f"{name}_sustained_ms": ms, f"{name}_sustained_tflops": flops / ms / 1e9,
            f"{name}_sustained_launches": launches, f"{name}_sustained_sm_mhz": window.sm_mhz,
            f"{name}_sustained_watts": window.watts,
            f"{name}_j_per_tflop": window.joules_per_tflop(flops * launches),
            f"{name}_sustained_clock_limits": window.clock_limits}


def variant_sustained_geomeans(rows) -> dict:
    """tag -> (geomean, min) of each fixed config's sustained ratio to cuBLAS (its own window in every row), for
    the tags with a ratio in every row that has variant windows."""
    out = {}
    for tag in sorted({t for r in rows for t in r.get("variant_sustained_ratios", {})}):
        vr = [r["variant_sustained_ratios"].get(tag) for r in rows if r.get("variant_sustained_ratios")]
        if vr and None not in vr:
            out[tag] = (geomean(vr), min(vr))
    return out


def time_sustained_pair(launchers: dict, names: list[str], seconds: float, gap_s: float, sampler) -> dict:
    """name -> (ms per launch, launches, power.Window) of one sustained window each, in `names`' order, with
    `gap_s` seconds of idle before each window (the board cools and the clock boosts again between kernels)."""
    out = {}
    for name in names:
        time.sleep(gap_s)
        (ms, launches), window = sampler.measure(lambda: timing.time_sustained(launchers[name], seconds))
        out[name] = (ms, launches, window)
    return out


# --------------------------------------------------------------------------------------------------------------
# Peers: each prepares launch() over device-resident copies of the same data; result(rows) reads sampled rows
# --------------------------------------------------------------------------------------------------------------

class PtxgemmImpl:
    def __init__(self, config, name="ptxgemm"):
        self.config = config     # None: the library's own selection
        self.name = name

    def prepare(self, a, b, out_dtype):
        self.out = arrays.DeviceArray.empty((a.shape[0], b.shape[1]), out_dtype)
        self.out.poison()
        self.plan = gemm.GemmPlan(arrays.DeviceArray.from_numpy(a), arrays.DeviceArray.from_numpy(b), self.out, self.config)
        return self.plan.launch

    @property
    def tag(self) -> str:
        return self.plan.config.tag  # what the plan actually runs

    def result(self, rows):
        return self.out.to_numpy()[rows]


def torch_bf16(torch, x: np.ndarray):
    """A bfloat16 numpy array on the GPU as a torch tensor (through its bit pattern: torch has no numpy bf16)."""
    return torch.from_numpy(x.view(np.uint16)).view(torch.bfloat16).cuda()


def torch_rows(torch, t, rows: np.ndarray) -> np.ndarray:
    """Rows of a CUDA bf16 torch tensor as numpy bfloat16 (only those rows come to the host)."""
    import ml_dtypes

    picked = t[torch.from_numpy(rows).cuda()]
    return picked.cpu().view(torch.uint16).numpy().view(ml_dtypes.bfloat16)


class TorchImpl:
    name = "cublas (torch.matmul)"

    def __init__(self):
        import torch

        self.torch = torch

    def prepare(self, a, b, out_dtype):
        torch = self.torch
        ta, tb = torch_bf16(torch, a), torch_bf16(torch, b)
        self.out = torch.full((a.shape[0], b.shape[1]), float("nan"), dtype=torch.bfloat16, device="cuda")
        out = self.out
        return lambda: torch.matmul(ta, tb, out=out)

    def result(self, rows):
        return torch_rows(self.torch, self.out, rows)


class CupyImpl:
    name = "cublas (cupy.matmul)"

    def __init__(self):
        import cupy

        self.cp = cupy

    def prepare(self, a, b, out_dtype):
        cp = self.cp
        # CuPy has no bf16 GEMM dtype; this peer runs fp16 inputs of the same values (same FLOPs and bytes).
        ca, cb = cp.asarray(a.astype(np.float16)), cp.asarray(b.astype(np.float16))
        self.out = cp.full((a.shape[0], b.shape[1]), cp.nan, dtype=cp.float16)
        out = self.out
        return lambda: cp.matmul(ca, cb, out=out)

    def result(self, rows):
        return self.cp.asnumpy(self.out[self.cp.asarray(rows)])


def find_peer():
    try:
        import torch

        if torch.cuda.is_available():
            return TorchImpl()
    except ImportError:
        pass
    try:
        return CupyImpl()
    except ImportError:
        return None


# --------------------------------------------------------------------------------------------------------------
# Measurement
# --------------------------------------------------------------------------------------------------------------

def sample_rows(m: int) -> np.ndarray:
    """The fixed rows rel_err looks at for an M-row output: SAMPLE_ROWS of them (all when M is smaller)."""
    return np.sort(np.random.default_rng(SAMPLE_SEED).choice(m, size=min(SAMPLE_ROWS, m), replace=False))


def float64_reference(a, b):
    """a @ b in float64, on the GPU through torch when torch is there and built with CUDA (the peer already needs
    it), else numpy (a CPU-only torch build has no .cuda())."""
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():
        ta = torch.from_numpy(np.ascontiguousarray(a.astype(np.float64))).cuda()
        tb = torch.from_numpy(np.ascontiguousarray(b.astype(np.float64))).cuda()
        return (ta @ tb).cpu().numpy()
    return a.astype(np.float64) @ b.astype(np.float64)


def rel_err(out, ref):
    """‖out − ref‖ / ‖ref‖ over the sampled rows: a one-number summary for the table (correctness is the GPU
    tests' elementwise bound)."""
    denom = np.linalg.norm(ref)
    return float(np.linalg.norm(out.astype(np.float64) - ref) / (denom if denom else 1.0))


def max_err(out, ref):
    """max |out - ref| / max |ref| over the sampled rows: the largest single error, on the scale of the output."""
    denom = float(np.max(np.abs(ref))) if ref.size else 0.0
    return float(np.max(np.abs(out.astype(np.float64) - ref)) / (denom if denom else 1.0)) if ref.size else 0.0


def read_clocks() -> dict:
    query = "clocks.sm,clocks.mem,clocks.max.sm,power.draw,temperature.gpu"
    try:
        text = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"], capture_output=True,
                              text=True, timeout=10).stdout.strip().splitlines()[0]
        return dict(zip(query.split(","), (v.strip() for v in text.split(","))))
    except Exception as e:  # noqa: BLE001 - clocks are informative only
        return {"error": str(e)}


def parse_shapes(text: str) -> list[tuple[int, int, int]]:
    shapes = []
    for s in filter(None, (p.strip() for p in text.split(","))):
        parts = s.lower().split("x")
        if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
            raise ConfigError(f"--shapes: {s!r} is not MxNxK with positive whole numbers (e.g. 4096x4096x4096)")
        shapes.append(tuple(int(p) for p in parts))
    if not shapes:
        raise ConfigError("--shapes: names no shape")
    return shapes


def require_device():
    """The GPU's info, or a ConfigError saying that bench needs one (every bench mode starts here)."""

    reason = driver.no_device_reason()
    if reason:
        raise ConfigError(f"bench runs the kernels, so it needs an sm_90 GPU (H100/H200), and there is none here: "
                          f"{reason.rstrip('.')}. --summarize needs none")
    return driver.device_info()

def run_bench(shapes, rounds: int, config=None, variant_configs=(), out="bench_out", name: str | None = None,
              tune_cache: str = "off", b_major: str = "mn", sustained: float | None = None,
              sustained_gap: float = 1.0, fastcu: str | None = None) -> int:
    """Time every shape with ptxgemm (`config`, or None: the library's own selection), each of `variant_configs`
    and the cuBLAS peer in the same interleaved rounds; print the table and write bench_<gpu>[_<name>].json and .png
    to `out`. `b_major`: B row-major ("mn", numpy's C order) or column-major ("k"), the same memory for every
    implementation. `tune_cache` only labels the run: the caller has set PTXGEMM_TUNE_CACHE before any selection.
    `sustained`: also one back-to-back window of that many seconds per implementation and shape (timing.
    time_sustained; the order alternating shape by shape, `sustained_gap` seconds idle before each), with the SM
    clock, power and energy NVML reports (bench/power.py), reported beside the burst figures. `fastcu`: a fast.cu
    checkout whose kernel 12 is timed as a second peer wherever it runs the shape (bench/fastcu.py; rows gain
    fastcu_* fields, `fastcu_ratio` = its ms / ptxgemm's)."""
    import ml_dtypes

    from . import fastcu as fastcu_peer, power


    info = require_device()
    peer = find_peer()
    second = fastcu_peer.FastCuImpl(fastcu_peer.source_dir(fastcu)) if fastcu else None
    variants = [PtxgemmImpl(c, f"ptxgemm {c.tag}") for c in variant_configs]
    main_impl = PtxgemmImpl(config)
    impls = [main_impl] + variants + ([peer] if peer else [])
    config_desc = config.describe() if config else f"library selection (select_config; tune cache {tune_cache})"
    print(f"# {info.name}, {info.sm_count} SMs, driver {info.driver_version_str}; peer: "
          f"{peer.name if peer else 'none'}{'; ' + second.name if second else ''}; ptxgemm config: {config_desc}; "
          f"{rounds} rounds, median", flush=True)
    sampler = power.Sampler(driver.pci_bus_id()) if sustained else None
    if sampler is not None and sampler.note:
        print(f"# sustained: {sampler.note}", flush=True)

    rows = []
    header = (f"{'M':>6} {'N':>6} {'K':>6} | {'config':<14} | {'ptxgemm ms':>10} {'TFLOP/s':>8} | {'cuBLAS ms':>10} "
              f"{'TFLOP/s':>8} | {'ratio':>6} | {'rel_err':>9} {'cublas err':>10}")
    print(header)
    print("-" * len(header))
    print("(ratio = cuBLAS ms / ptxgemm ms: above 1, ptxgemm is faster)")
    stem = f"bench_{gpu_slug(info.name)}" + (f"_{name}" if name else "")
    log = RowLog(out, stem, {"gpu": info.name, "set": "suite", "config": config_desc, "rounds": rounds,
                             "b_major": b_major, "method": METHOD})
    rng = np.random.default_rng(0)
    for m, n, k in shapes:
        a = rng.standard_normal((m, k), dtype=np.float32).astype(ml_dtypes.bfloat16)
        b = rng.standard_normal((k, n), dtype=np.float32).astype(ml_dtypes.bfloat16)
        if b_major == "k":
            b = np.asfortranarray(b)
        launchers = {impl.name: impl.prepare(a, b, np.dtype(ml_dtypes.bfloat16)) for impl in impls}
        shape_impls, refused = list(impls), None
        if second is not None:
            try:
                launchers[second.name] = second.prepare(a, b, np.dtype(ml_dtypes.bfloat16))
                shape_impls.append(second)
            except fastcu_peer.FastCuRefused as e:
                refused = str(e)
        times = timing.time_interleaved(launchers, rounds, warmup=3)
        picked = sample_rows(m)
        ref = float64_reference(a[picked], b)
        errs = {impl.name: rel_err(impl.result(picked), ref) for impl in shape_impls}
        flops = 2.0 * m * n * k
        ours = times["ptxgemm"]
        theirs = times.get(peer.name) if peer else None
        if config is not None:
            source = "fixed (--config)"
        else:
            chosen, how = select.choose(m, n, k, b_major=b_major, device=info)
            source = how if chosen.tag == main_impl.tag else "GemmPlan default (not the selection)"
        row = {"M": m, "N": n, "K": k, "config": main_impl.tag, "config_source": source, "group": group_of(m, n, k),
               "ptxgemm_ms": ours, "cublas_ms": theirs, "ratio": theirs / ours if theirs else None,
               "rel_err": errs["ptxgemm"], "cublas_rel_err": errs.get(peer.name) if peer else None,
               "rel_err_rows": len(picked),
               "ptxgemm_tflops": flops / ours / 1e9, "cublas_tflops": flops / theirs / 1e9 if theirs else None,
               "variants": {v.tag: times[v.name] for v in variants},
               "variant_ratios": {v.tag: (theirs / times[v.name] if theirs else None) for v in variants},
               "variant_rel_err": {v.tag: errs[v.name] for v in variants}}
        if second is not None:
            fast = times.get(second.name)
            row.update({"fastcu_ms": fast, "fastcu_tflops": flops / fast / 1e9 if fast else None,
                        "fastcu_ratio": fast / ours if fast else None, "fastcu_rel_err": errs.get(second.name),
                        "fastcu_refused": refused})
        if sustained:
            names = [main_impl.name] + [v.name for v in variants] + ([peer.name] if peer else []) + \
                ([second.name] if second is not None and second.name in launchers else [])
            windows = time_sustained_pair(launchers, names if len(rows) % 2 == 0 else names[::-1], sustained,
                                          sustained_gap, sampler)
            for impl_name, prefix in ((main_impl.name, "ptxgemm"), (peer.name if peer else None, "cublas"),
                                      (second.name if second else None, "fastcu")):
                if impl_name in windows:
                    row.update(sustained_fields(prefix, flops, *windows[impl_name]))
            theirs_s = row.get("cublas_sustained_ms")
            row["sustained_ratio"] = theirs_s / row["ptxgemm_sustained_ms"] if theirs_s else None
            if variants:   # each fixed config's own window, in the same alternation as the selection's
                row["variants_sustained"] = {v.tag: sustained_fields("ptxgemm", flops, *windows[v.name])
                                             for v in variants}
                row["variant_sustained_ratios"] = {
                    v.tag: theirs_s / row["variants_sustained"][v.tag]["ptxgemm_sustained_ms"] if theirs_s else None
                    for v in variants}
            if row.get("fastcu_sustained_ms"):
                row["fastcu_sustained_ratio"] = row["fastcu_sustained_ms"] / row["ptxgemm_sustained_ms"]
            row["energy_source"] = windows[main_impl.name][2].energy_source
            held = {name: w.held_down for name, (_, _, w) in windows.items() if w.held_down}
            if held:   # the board, not the power limit, set a window's clock: its figures do not measure kernels
                row["sustained_held_down"] = held
        rows.append(row)
        log.add(row)
        ratio = row["ratio"] if row["ratio"] is not None else float("nan")
        print(f"{m:>6} {n:>6} {k:>6} | {row['config']:<14} | {ours:>10.4f} {row['ptxgemm_tflops']:>8.1f} | "
              f"{(theirs or float('nan')):>10.4f} {(row['cublas_tflops'] or float('nan')):>8.1f} | "
              f"{ratio:>6.3f} | {row['rel_err']:>9.2e} {(row['cublas_rel_err'] or float('nan')):>10.2e}"
              + "".join(f" | {v.tag}: {times[v.name]:.4f} ms ({(theirs or math.nan) / times[v.name]:.3f})"
                        for v in variants), flush=True)
        if sustained:
            def fmt(x, spec):
                return format(x, spec) if x is not None else "-"
            print(f"{'':>20} | sustained {sustained:g} s: ptxgemm {row['ptxgemm_sustained_tflops']:.1f} TFLOP/s @ "
                  f"{fmt(row['ptxgemm_sustained_sm_mhz'], '.0f')} MHz {fmt(row['ptxgemm_sustained_watts'], '.0f')} W "
                  f"{fmt(row['ptxgemm_j_per_tflop'], '.3f')} J/TFLOP"
                  + (f" | cuBLAS {row['cublas_sustained_tflops']:.1f} @ {fmt(row['cublas_sustained_sm_mhz'], '.0f')} "
                     f"MHz {fmt(row['cublas_sustained_watts'], '.0f')} W {fmt(row['cublas_j_per_tflop'], '.3f')} "
                     f"J/TFLOP | ratio {row['sustained_ratio']:.3f}" if row.get("sustained_ratio") else ""),
                  flush=True)
            for tag, v in row.get("variants_sustained", {}).items():
                print(f"{'':>20} | sustained {tag}: {v['ptxgemm_sustained_tflops']:.1f} TFLOP/s @ "
                      f"{fmt(v['ptxgemm_sustained_sm_mhz'], '.0f')} MHz, ratio "
                      f"{fmt(row['variant_sustained_ratios'][tag], '.3f')}", flush=True)
            for name, limits in row.get("sustained_held_down", {}).items():
                print(f"{'':>20} | WARNING: {name}'s window was held down by {', '.join(limits)} (NVML's clock "
                      f"event reasons), not by the power limit: its sustained figures do not measure the kernel",
                      flush=True)
        if second is not None:
            print(f"{'':>20} | {second.name}: " + (f"refused ({refused})" if refused else
                  f"{row['fastcu_ms']:.4f} ms {row['fastcu_tflops']:.1f} TFLOP/s, its ms / ptxgemm's "
                  f"{row['fastcu_ratio']:.3f}, rel_err {row['fastcu_rel_err']:.2e}"
                  + (f"; sustained {row['fastcu_sustained_tflops']:.1f} TFLOP/s @ "
                     f"{row['fastcu_sustained_sm_mhz'] or float('nan'):.0f} MHz, ratio "
                     f"{row['fastcu_sustained_ratio']:.3f}" if row.get("fastcu_sustained_ratio") else "")),
                  flush=True)
        del launchers
        for impl in shape_impls:
            impl.out = None
            if hasattr(impl, "plan"):
                impl.plan = None

    means = geomeans(rows)
    ratios = [r["ratio"] for r in rows if r["ratio"] is not None]
    min_ratio = min(ratios) if ratios else None
    summary = {}
    if ratios:
        summary = {"geomean_ratio": means["all"], "min_ratio": min_ratio}
        if means["seed_sweep"] is not None:
            summary["seed_k_sweep_geomean_ratio"] = means["seed_sweep"]
        print("-" * len(header))
        print("geomean cuBLAS ms / ptxgemm ms: " + ", ".join(
            f"{g} {v:.3f}" if v is not None else f"{g} -" for g, v in means.items()) + f"; min {min_ratio:.3f}")
    sustained_means = geomeans(rows, "sustained_ratio") if sustained else None
    if sustained_means and sustained_means["all"] is not None:
        s_ratios = [r["sustained_ratio"] for r in rows if r.get("sustained_ratio")]
        summary.update({"sustained_geomean_ratio": sustained_means["all"], "sustained_min_ratio": min(s_ratios)})
        print("sustained geomean cuBLAS ms / ptxgemm ms: " + ", ".join(
            f"{g} {v:.3f}" if v is not None else f"{g} -" for g, v in sustained_means.items())
            + f"; min {min(s_ratios):.3f}")
        for tag, (g, low) in variant_sustained_geomeans(rows).items():
            summary[f"sustained_geomean_ratio {tag}"] = g
            print(f"sustained geomean cuBLAS ms / ptxgemm {tag} ms: {g:.3f}; min {low:.3f}")
    result = {"gpu": info.name, "driver": info.driver_version_str, "sm_count": info.sm_count, "clocks": read_clocks(),
              "tune_cache": tune_cache, "peer": peer.name if peer else None, "config": config_desc, "rounds": rounds,
              "second_peer": (f"{second.name} from {second.root} (its layouts: A row-major, B K-major, C "
                              f"column-major; fastcu_ratio = its ms / ptxgemm's)" if second else None),
              "b_major": b_major,
              "method": METHOD,
              "sustained_method": (f"one back-to-back window of >= {sustained:g} s per implementation and shape, no "
                                   f"flush, CUDA events around the window, {sustained_gap:g} s idle before each, the "
                                   f"order alternating by shape; SM clock and power: NVML every "
                                   f"{power.SAMPLE_INTERVAL_S * 1000:.0f} ms, means after the first "
                                   f"{power.SETTLE_S:g} s; energy: NVML's counter" if sustained else None),
              "sustained_note": sampler.note if sampler is not None else None,
              "sustained_geomeans": sustained_means,
              "rel_err_method": f"{SAMPLE_ROWS} fixed rows (seed {SAMPLE_SEED}) against float64, the same for every "
                                "implementation",
              "date": time.strftime("%Y-%m-%d %H:%M:%S"), "geomeans": means, "min_ratio": min_ratio,
              "summary": summary, "rows": rows}
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{stem}.json").write_text(json.dumps(result, indent=1))
    log.close()
    plot(rows, out_dir / f"{stem}.png", info.name)
    print(f"wrote {out_dir / (stem + '.json')} and {out_dir / (stem + '.png')}")
    return 0



def plot(rows, path: Path, gpu: str):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot", file=sys.stderr)
        return
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.5))
    sweep = [r for r in rows if (r["M"], r["N"]) == (SEED_M, SEED_N)]
    other = [r for r in rows if (r["M"], r["N"]) != (SEED_M, SEED_N)]
    if sweep:
        ks = [r["K"] for r in sweep]
        ax1.plot(ks, [r["ptxgemm_tflops"] for r in sweep], "o-", label="ptxgemm")
        if sweep[0]["cublas_tflops"]:
            ax1.plot(ks, [r["cublas_tflops"] for r in sweep], "s--", label="cuBLAS")
        ax1.set_xscale("log", base=2)
        ax1.set_xlabel("K")
        ax1.set_ylabel("TFLOP/s")
        ax1.set_title(f"M={SEED_M}, N={SEED_N}")
        ax1.legend()
        ax1.grid(alpha=0.3)
    if other:
        labels = [f"{r['M']}x{r['N']}x{r['K']}\n{r.get('config', '')}" for r in other]
        x = np.arange(len(other))
        ax2.bar(x - 0.2, [r["ptxgemm_tflops"] for r in other], 0.4, label="ptxgemm")
        if other[0]["cublas_tflops"]:
            ax2.bar(x + 0.2, [r["cublas_tflops"] for r in other], 0.4, label="cuBLAS")
        ax2.set_xticks(x, labels, rotation=20, fontsize=7)
        ax2.set_ylabel("TFLOP/s")
        ax2.legend()
        ax2.grid(alpha=0.3, axis="y")
    fig.suptitle(f"bf16 GEMM on {gpu}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
