"""The GPU side of the mutation tester: the workloads each mutant runs (operands, epilogue arguments and their
float64 references, written to files once), and the worker process that loads a mutant's cubin, runs it on them
and reports what killed it. A worker is its own process (`python -m ptxgemm.tools.mutant_worker --worker`) because
a mutant that traps takes its CUDA context with it."""
from __future__ import annotations

import dataclasses
import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from .. import accuracy
from ..errors import CudaError
from ..gemm import GemmKernel
from ..kernel import grouped_walk
from ..kernel.config import GemmConfig, SCALE_BLOCK
from ..plan.epilogue import m_major_ld, m_major_table
from ..runtime.arrays import DeviceArray
from ..runtime.debug import BarrierStall


@dataclasses.dataclass(frozen=True)
class Workload:
    m: int
    n: int
    k: int
    ctas: int | None      # None: one CTA per SM, the default launch
    seed: int

    def describe(self) -> str:
        return f"{self.m}x{self.n}x{self.k}, " + (f"{self.ctas} CTAs" if self.ctas else "one CTA per SM")


#: The full-grid shape is where a reviewer's deleted epilogue-order bar.sync went unnoticed by the old suite; the
#: small-grid one gives every consumer 15 tiles and every tile 20 k-tiles (3+ passes over the ring).
WORKLOADS = (Workload(4224, 9216, 128, None, 11), Workload(1900, 2040, 1256, 8, 12))


@dataclasses.dataclass(frozen=True)
class GroupedWorkload:
    """A grouped kernel's workload (GemmConfig.grouped): rows per group (contiguous) or masked_m (masked, each group
    a matrix of m_max rows), N, K, the grid and the seed."""

    sizes: tuple[int, ...]
    n: int
    k: int
    ctas: int | None
    seed: int
    m_max: int | None = None
    bad: tuple[tuple[int, int], ...] = ()   # (group, count) written over the counts: values the kernel must clamp
    m: int | None = None                    # k form: the rows of every group's output (sizes are then K)

    def counts(self) -> list[int]:
        """The counts the kernel reads: offs (cumulative) or masked_m, with the `bad` entries written over them."""
        c = list(self.sizes) if self.m_max else [int(x) for x in np.cumsum(self.sizes)]
        for g, v in self.bad:
            c[g] = v
        return c

    @property
    def rows(self) -> int:
        """Rows of A and C as the kernel sees them (2-D; the k form: its G outputs of M rows, stacked)."""
        if self.m:
            return len(self.sizes) * self.m
        return len(self.sizes) * self.m_max if self.m_max else sum(self.sizes) + 40   # 40 rows past the last end

    def describe(self) -> str:
        form = (f"k form, M {self.m}, total_K {sum(self.sizes)}" if self.m else
                f"masked, M_max {self.m_max}" if self.m_max else "contiguous")
        return (f"{len(self.sizes)} groups ({form}, {sum(self.sizes)} rows), N {self.n}, K {self.k}, "
                + (f"{self.ctas} CTAs" if self.ctas else "one CTA per SM"))


#: 300 small groups (empty ones among them; counts read by ten warps, scanned by warp 0 in chunks of 10) on the full
#: grid, and a few tall unaligned ones on 8 CTAs, whose units walk the ring several times across groups.
#: Device counts the host cannot check are clamped by the scan, so the first workload of each form writes some over
#: the counts: offs that drop to 0 over whole lane chunks (warp 0's lanes take 10 groups each at G = 300): 2 lanes,
#: then 18, so that the start of the lane after them comes from 3 and 19 lanes back through every step of the
#: max-scan; and one offs past the rows. masked_m below 0 and past M_max.
_DROPS = (tuple((g, 0) for g in range(50, 70)) + tuple((g, 0) for g in range(100, 280)) + ((290, 10 ** 6),))
#: ... and runs of 2, 4 and 8 dropped lanes, each followed by a lane whose first group drops too: a max-scan missing
#: its step of 2, 4 or 8 gives that lane too low a start, and a later group then recomputes earlier groups' rows with
#: its own B. On 2 CTAs the later group's units run last, so its wrong rows are the ones left in C (a model of the
#: scan with each step deleted: docs/results/h100/mutants/README.md).
_LANE_DROPS = tuple((g, 0) for a, b in ((20, 41), (50, 91), (100, 181)) for g in range(a, b))
GROUPED_WORKLOADS = {
    "contiguous": (GroupedWorkload(tuple((7 * i) % 29 for i in range(300)), 1024, 128, None, 21, bad=_DROPS),
                   GroupedWorkload((0, 300, 1, 640, 129, 0, 1100), 1024, 1256, 8, 22),
                   GroupedWorkload(tuple((7 * i) % 29 for i in range(300)), 256, 128, 2, 25, bad=_LANE_DROPS)),
    "masked": (GroupedWorkload(tuple((5 * i) % 67 for i in range(300)), 512, 128, None, 23, m_max=64,
                               bad=((7, -3), (100, 90), (101, 1 << 30))),
               GroupedWorkload((0, 256, 1, 129, 200, 77), 768, 1256, 8, 24, m_max=256)),
    # the k form: K per group, empty ones and tails of every length mod 64 (the zeroed rows of a last k-tile), on
    # the full grid and on 8 CTAs whose units walk the ring across groups of different k-loop lengths
    "k": (GroupedWorkload(tuple((13 * i) % 150 for i in range(40)), 512, 0, None, 26, m=256, bad=((9, 0),)),
          GroupedWorkload((0, 700, 1, 64, 65, 0, 1300), 384, 0, 8, 27, m=520),
          # offs that drop to 0 over 2 and then 18 whole lanes (64 groups: 2 per lane of warp 0): with monotone offs
          # every group's start is its predecessor's end whatever the scan says, so only drops show a lost step
          # of the max-scan (each step, and the exclusive shift, gives some group a wrong K range here)
          GroupedWorkload(tuple((13 * i) % 150 for i in range(64)), 256, 0, None, 28, m=256,
                          bad=tuple((g, 0) for a, b in ((10, 14), (20, 56)) for g in range(a, b)))),
}


#: The grouped kernel's stream-K tail (cut on the device where a share and its fix-up are shorter than a unit:
#: grouped_walk.tail_schedule): 34 units of 40 k-tiles (K a few elements short) on 11 CTAs, empty, one-row and
#: unaligned groups, whose one tail unit is cut into 4 shares (a final and 3 partials); and 272 units on the whole
#: grid, whose last 8 are cut likewise (on 132 SMs).
GROUPED_SK_WORKLOADS = (GroupedWorkload((0, 1, 130, 257, 0, 384, 129, 700), 512, 40 * 64 - 8, 11, 34),
                        GroupedWorkload((2100, 2100, 0, 2100, 2100), 1024, 40 * 64, None, 35))


def block_scale_workloads(config: GemmConfig) -> tuple[Workload, ...]:
    """WORKLOADS, then as many as it takes for tiles to end in every copy of the blockwise k-loop's body
    (GemmConfig.bs_unroll): each copy has its own drain, and a copy no workload ends in leaves its drain's release
    unrun (the two-set loop's third and fourth drains survived their deletion on WORKLOADS alone, whose tiles have
    1 and 10 k-tiles). The added ones are small grids with ragged edges and K a few elements short of whole
    k-tiles (a multiple of 16, as the fp8 rows' TMA needs)."""
    base = WORKLOADS
    if config.block_scale_a_mn:   # one k-block's table is both layouts at once, and the plan reads it C-contiguous
        # (plan.epilogue._m_major), so where WORKLOADS has K of one block, K spans two: 144, a whole k-tile and one
        # 16 elements long (TMA fills the rest with zeros)
        base = tuple(w if w.k > SCALE_BLOCK else dataclasses.replace(w, k=SCALE_BLOCK + 16) for w in WORKLOADS)
    k_tiles = [-(-w.k // config.block_k) for w in base]
    ends = {(n - 1) % config.bs_unroll for n in k_tiles}
    added = []
    n = max(k_tiles)
    while len(ends) < config.bs_unroll:
        n += 1
        if (n - 1) % config.bs_unroll not in ends:
            ends.add((n - 1) % config.bs_unroll)
            added.append(Workload(1040 - 136 * len(added), 1176 - 136 * len(added), n * config.block_k - 48, 8,
                                  13 + len(added)))
    if config.block_scale_swapped:
        added.append(_decode_workload(config))
    if config.bs_b_walker:
        # the B scale walker's batches of 32 k-tiles: tiles of 72 run two whole batches and the start of a third, so
        # the odd batches' pick and the even batches' reload at their last k-tile are read, and the walker laps the
        # ring; with every tile under 33 k-tiles only the even batch is read (the odd pick's deletion survived on
        # WORKLOADS, run 108)
        added.append(Workload(264, 392, 72 * config.block_k - 48, 8, 18))
    return base + tuple(added)


def _decode_workload(config: GemmConfig) -> Workload:
    """A decode-shaped problem for swap-AB (the shapes it is for): 24 rows (one narrow column tile), N = 6144, and K
    of 16 passes over the unrolled k-loop (64 k-tiles at an unroll of 4), the last 48 elements short, on every SM.
    The weight (50 MB of fp8, as large as the H100's L2) streams from HBM while each k-tile's wgmma is a few hundred
    cycles, so every consumer reaches each stage as its bytes land: a full-barrier wait skipped in any copy of the
    k-loop reads a stage in flight. On the compute-bound WORKLOADS the producer runs stages ahead, and the skipped
    wait of the fourth copy survived (H100, mutants_blockwise_swapped_h100)."""
    k_tiles = 16 * config.bs_unroll
    return Workload(24, 6144, k_tiles * config.block_k - 48, None, 17)


def stream_k_workloads(config: GemmConfig) -> tuple[Workload, ...]:
    """What the stream-K tail's fix-up needs to be exercised (ptxgemm.kernel.schedule.Schedule.cluster_walk):
    - 5 clusters over 12 units of 20 k-tiles: 10 whole, then 2 cut into shares of 8 k-tiles, so both tail units
      have a final and two partials, and the middle cluster's share is a partial of one unit, then the final of the
      next; edges partial in M, N and K;
    - the whole grid over 180 units of 20 k-tiles (96 cluster units in pairs): one full wave, then a tail of 48 (30)
      units in shares of 8 (10) k-tiles;
    - the whole grid over three full waves and a tail of 52 units (26 cluster units in pairs) of 9 k-tiles."""
    rows, cols = 4 * config.cluster_m * config.block_m - 8, 3 * config.cluster_n * config.block_n - 8
    return (Workload(rows, cols, 20 * config.block_k - 8, 5 * config.cluster_size, 31),
            Workload(1900, 3000, 1256, None, 32), Workload(2000, 7000, 520, None, 33))


def workloads_for(config: GemmConfig):
    if config.grouped:
        return GROUPED_SK_WORKLOADS if config.stream_k else GROUPED_WORKLOADS[config.grouped]
    if config.stream_k:
        return stream_k_workloads(config)
    return block_scale_workloads(config) if config.block_scale else WORKLOADS


def _grouped_k_job(config: GemmConfig, w: GroupedWorkload, directory: Path, i: int) -> dict:
    """A k-form workload: x (total_K, M) row-major (A is its transpose), b (total_K, N) row-major, the counts, and
    the reference and bound of every group's (M, N) output, stacked (an empty group's is zeros)."""
    rng = np.random.default_rng(w.seed)
    total = sum(w.sizes)
    x = accuracy.random_matrix(rng, total, w.m, config.in_dtype)
    b = accuracy.random_matrix(rng, total, w.n, config.b_type)
    counts = np.array(w.counts(), dtype=np.int32)
    ref = np.zeros((len(w.sizes) * w.m, w.n))
    bound = np.zeros_like(ref)
    for g, (s, e) in enumerate(grouped_walk.ranges("k", counts.tolist(), total)):
        rows = slice(g * w.m, (g + 1) * w.m)
        if e > s:
            r, absp = accuracy.reference(x[s:e].T, b[s:e])
            ref[rows], bound[rows] = r, accuracy.error_bound(r, absp, e - s, config.out_dtype, config.in_dtype)
        else:
            bound[rows] = accuracy.error_bound(np.zeros((w.m, w.n)), np.zeros((w.m, w.n)), 1, config.out_dtype,
                                               config.in_dtype)
    return _saved_job(w, directory, i, x, b, ref, bound, counts)


def _grouped_job(config: GemmConfig, w: GroupedWorkload, directory: Path, i: int) -> dict:
    """A grouped workload's operands (A as the kernel's 2-D rows, B as (G, N, K) when K-major else (G, K, N)), its
    counts, and the reference and bound of every row (NaN where no group covers the row)."""
    rng = np.random.default_rng(w.seed)
    g = len(w.sizes)
    a = accuracy.random_matrix(rng, w.rows, w.k, config.in_dtype)
    k_major = config.b_major == "k"
    b = np.stack([accuracy.random_matrix(rng, w.n, w.k, config.b_type) if k_major else
                  accuracy.random_matrix(rng, w.k, w.n, config.b_type) for _ in range(g)])
    ref = np.full((w.rows, w.n), np.nan)
    bound = np.full((w.rows, w.n), np.nan)
    counts = np.array(w.counts(), dtype=np.int32)
    # each group's rows as the kernel clamps its counts (the walk's model), in A's 2-D rows
    spans = grouped_walk.ranges(config.grouped, counts.tolist(), w.m_max or w.rows)
    for gi, (s, e) in enumerate(spans):
        if w.m_max:
            s, e = s + gi * w.m_max, e + gi * w.m_max
        if e > s:
            bg = b[gi].T if k_major else b[gi]
            r, absp = accuracy.reference(a[s:e], bg)
            ref[s:e], bound[s:e] = r, accuracy.error_bound(r, absp, w.k, config.out_dtype, config.in_dtype)
    return _saved_job(w, directory, i, a, b, ref, bound, counts)


def _saved_job(w: GroupedWorkload, directory: Path, i: int, a, b, ref, bound, counts) -> dict:
    """A grouped job: its operands (raw words), reference, bound and counts saved as .npy files the worker maps."""
    paths = {}
    for name, arr in (("a", _raw(a)), ("b", _raw(b)), ("ref", ref.astype(np.float32)),
                      ("bound", bound.astype(np.float32)), ("counts", counts)):
        paths[name] = str(directory / f"w{i}_{name}.npy")
        np.save(paths[name], arr)
    return {"workload": dataclasses.asdict(w), "paths": paths, "arrays": {}, "scalars": {}}


def _operands(config: GemmConfig, w: Workload):
    rng = np.random.default_rng(w.seed)
    a = accuracy.random_matrix(rng, w.m, w.k, config.in_dtype, order="C" if config.a_major == "k" else "F")
    b = accuracy.random_matrix(rng, w.k, w.n, config.in_dtype, order="F" if config.b_major == "k" else "C")
    return a, b


def _epilogue_args(config: GemmConfig, w: Workload, rng) -> dict:
    """The fused epilogue's arguments (numbers and numpy arrays, as run() takes them) that make a plan carry the
    config's epilogue: a source tile, a bias, scales (ptxgemm.plan.epilogue reads the kind from the shapes)."""

    args = {}
    if config.has_source:
        args["c"], args["beta"] = accuracy.random_matrix(rng, w.m, w.n, config.source_dtype), 0.5
    if config.bias:
        shape = (w.n,) if config.bias == "col" else (w.m, 1)
        args["bias"] = rng.standard_normal(shape).astype(accuracy.DTYPES[config.bias_dtype])
    if config.activation:
        args["activation"] = config.activation
    if config.alpha:
        args["alpha"] = -0.75
    positive = (lambda shape: rng.uniform(0.5, 2.0, size=shape).astype(np.float32))
    if config.device_scales:
        args["scale_a"], args["scale_b"] = positive((1,)), positive((1,))   # the worker uploads them: device scalars
    if config.row_scale:
        args["scale_a"] = positive((w.m, 1))
    if config.col_scale:
        args["scale_b"] = positive((w.n,))
    if config.block_scale:
        kb = -(-w.k // SCALE_BLOCK)
        args["scale_a"], args["scale_b"] = positive((w.m, kb)), positive((kb, -(-w.n // SCALE_BLOCK)))
    return args


def _raw(arr: np.ndarray) -> np.ndarray:
    """An array as its raw words: .npy has no bfloat16 or fp8 (they would load back as void)."""
    return arr.view(np.dtype(f"u{arr.dtype.itemsize}"))


def prepare_workloads(config: GemmConfig, directory: Path, workloads=WORKLOADS) -> list[dict]:
    """Operands, epilogue arguments, reference and bound of every workload, saved as .npy files the worker maps
    (computed once)."""
    jobs = []
    for i, w in enumerate(workloads):
        if isinstance(w, GroupedWorkload):
            jobs.append((_grouped_k_job if config.grouped == "k" else _grouped_job)(config, w, directory, i))
            continue
        a, b = _operands(config, w)
        args = _epilogue_args(config, w, np.random.default_rng(w.seed + 1))
        if config.fused or config.block_scale:
            ref, bound = accuracy.fused_reference(a, b, args, config.out_dtype, config.block_scale)
        else:
            ref, absp = accuracy.reference(a, b)
            bound = accuracy.error_bound(ref, absp, w.k, config.out_dtype, config.in_dtype)
        paths = {}
        for name, arr in (("a", _raw(a)), ("b", _raw(b)), ("ref", ref.astype(np.float32)),
                          ("bound", bound.astype(np.float32))):
            paths[name] = str(directory / f"w{i}_{name}.npy")
            np.save(paths[name], arr)
        arrays, scalars = {}, {}
        for name, value in args.items():
            if isinstance(value, np.ndarray):
                arrays[name] = {"path": str(directory / f"w{i}_{name}.npy"), "dtype": value.dtype.name}
                if name == "scale_a" and config.block_scale_a_mn:   # M-major: saved as its padded (kb, ld) table
                    arrays[name]["m_major"] = (*value.shape, m_major_ld(value.shape[0]))
                    value = m_major_table(value)
                np.save(arrays[name]["path"], _raw(value))
            else:
                scalars[name] = value
        jobs.append({"workload": dataclasses.asdict(w), "paths": paths, "arrays": arrays, "scalars": scalars})
    return jobs


def _emit(**record):
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def _run_one(config: GemmConfig, ptx: str, jobs: list[dict], loaded: list, repeats: int) -> tuple[str, str]:
    """("killed"|"survived", what killed it) for one kernel over every workload, `repeats` launches each."""
    import ptxgemm

    try:
        kernel = GemmKernel(config, ptx=ptx)
    except CudaError as e:
        return "killed", f"module load failed: {e}"
    if config.grouped:
        return _run_grouped(config, kernel, jobs, loaded, repeats)
    for job, (da, db, ref, bound, epi) in zip(jobs, loaded):
        w = job["workload"]
        out = DeviceArray.empty((w["m"], w["n"]), accuracy.DTYPES[config.out_dtype])

        def run():
            plan = ptxgemm.GemmPlan(da, db, out, config, ctas=w["ctas"], kernel=kernel, **epi)
            for _ in range(repeats):
                out.poison()
                if plan.workspace is not None:   # split-K: stale partials (equal to this launch's) must not pass
                    plan.workspace.poison()
                plan.launch()     # debug build: synchronizes, and a stall becomes BarrierStall
                verdict = accuracy.check_bound(out.to_numpy(), ref, bound)
                if not verdict.ok:
                    return "killed", f"wrong result on {w['m']}x{w['n']}x{w['k']}: {verdict}"
            return None
        outcome = _guarded(run, out)
        if outcome:
            return outcome
    return "survived", ""


def _guarded(run, out) -> tuple[str, str] | None:
    """run()'s outcome ("killed", why) or None, a reported stall or a CUDA error being a kill too; `out` is freed
    either way (after a lost context that fails too, and the worker exits after reporting the kill)."""
    try:
        return run()
    except BarrierStall as e:
        return "killed", f"stall reported: {e}"
    except CudaError as e:
        return "killed", f"CUDA error: {e}"
    finally:
        try:
            out.free()
        except CudaError:
            pass


def _run_grouped(config: GemmConfig, kernel, jobs: list[dict], loaded: list, repeats: int) -> tuple[str, str]:
    """One grouped kernel over every grouped workload: each group's rows within the bound, every other row still
    holding its poison bit for bit."""
    import ptxgemm

    for job, (da, db, ref, bound, counts) in zip(jobs, loaded):
        w = GroupedWorkload(**{**job["workload"], "sizes": tuple(job["workload"]["sizes"]),
                               "bad": tuple(tuple(x) for x in job["workload"]["bad"])})
        g = len(w.sizes)
        shape = (g, w.m, w.n) if w.m else (g, w.m_max, w.n) if w.m_max else (w.rows, w.n)
        out = DeviceArray.empty(shape, accuracy.DTYPES[config.out_dtype])
        covered = ~np.isnan(ref[:, 0])

        def run():
            kw = {"masked_m" if w.m_max else "offs": counts}
            if w.m:     # A is the transpose of the loaded x (total_K, M)
                item = da.dtype.itemsize
                a = da.view((w.m, sum(w.sizes)), (item, w.m * item))
            else:
                a = da.view((g, w.m_max, w.k)) if w.m_max else da
            plan = ptxgemm.GroupedPlan(a, db, out=out, config=config, ctas=w.ctas, kernel=kernel, **kw)
            for _ in range(repeats):
                out.poison()
                if plan.workspace is not None:   # stream-K: stale partials (equal to this launch's) must not pass
                    plan.workspace.poison()
                plan.launch()     # debug build: synchronizes, and a stall becomes BarrierStall
                got = out.to_numpy().reshape(w.rows, w.n)
                verdict = accuracy.check_bound(got[covered], ref[covered], bound[covered])
                if not verdict.ok:
                    return "killed", f"wrong result on {w.describe()}: {verdict}"
                bits = got[~covered].view(np.uint16 if got.dtype.itemsize == 2 else np.uint32)
                poison = 0x7FFF if got.dtype.itemsize == 2 else 0x7FFFFFFF
                if bits.size and not np.all(bits == poison):
                    return "killed", f"a row outside every group was written on {w.describe()}"
            return None
        outcome = _guarded(run, out)
        if outcome:
            return outcome
    return "survived", ""


def context_lost(killed_by: str) -> bool:
    """After these the worker's CUDA context is unusable, so it exits and the next mutant gets a fresh worker."""
    return killed_by.startswith(("CUDA error", "stall reported", "module load"))


def worker_main() -> int:
    """Reads a setup line, then one mutant per line, from stdin; writes start/result lines to stdout. Exits after a
    CUDA error (the context is gone) so that the parent starts a fresh worker for the next mutant."""
    import ptxgemm
    from ..plan import grouped_call

    grouped_call.UNVERIFIED = {}   # the tester runs the kernel's every part, verified on the device or not yet

    setup = json.loads(sys.stdin.readline())
    config = GemmConfig(**setup["config"])
    jobs = setup["jobs"]
    loaded = []
    in_dtype, b_dtype = accuracy.DTYPES[config.in_dtype], accuracy.DTYPES[config.b_type]
    for job in jobs:
        p = job["paths"]
        if config.grouped:   # A as 2-D rows; B (G, K, N), viewed from (G, N, K) when K-major; the counts
            db = ptxgemm.to_device(np.load(p["b"]).view(b_dtype))
            if config.b_major == "k" and config.grouped != "k":
                g, n, k = db.shape
                item = db.dtype.itemsize
                db = db.view((g, k, n), (n * k * item, item, k * item))
            loaded.append((ptxgemm.to_device(np.load(p["a"]).view(in_dtype)), db, np.load(p["ref"]),
                           np.load(p["bound"]), ptxgemm.to_device(np.load(p["counts"]))))
            continue
        epi = dict(job.get("scalars", {}))
        for name, spec in job.get("arrays", {}).items():
            epi[name] = ptxgemm.to_device(np.load(spec["path"]).view(accuracy.DTYPES.get(spec["dtype"], spec["dtype"])))
            if "m_major" in spec:   # the padded table, viewed (M, kb) with its rows adjacent
                m, kb, ld = spec["m_major"]
                epi[name] = epi[name].view((m, kb), (4, 4 * ld))
        loaded.append((ptxgemm.to_device(np.load(p["a"]).view(in_dtype)), ptxgemm.to_device(np.load(p["b"]).view(b_dtype)),
                       np.load(p["ref"], mmap_mode="r"), np.load(p["bound"], mmap_mode="r"), epi))
    _emit(event="ready")
    for line in sys.stdin:
        task = json.loads(line)
        _emit(event="start", id=task["id"])
        status, killed_by = _run_one(config, Path(task["ptx_path"]).read_text(), jobs, loaded, setup["repeats"])
        _emit(event="result", id=task["id"], status=status, killed_by=killed_by)
        if context_lost(killed_by):
            return 0
    return 0


class Worker:
    """A worker process and a thread that turns its stdout into a queue (so reads can time out)."""

    def __init__(self, setup: dict):
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen([sys.executable, "-m", "ptxgemm.tools.mutant_worker", "--worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                     start_new_session=True)
        self.lines: queue.Queue = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._pump, args=(self.proc.stdout, self.lines), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.proc.stderr, None), daemon=True).start()
        self.send(setup)

    def _pump(self, stream, sink):
        for line in stream:
            if sink is None:
                self.stderr.append(line)
                del self.stderr[:-20]
            else:
                sink.put(line)
        if sink is not None:
            sink.put(None)

    def send(self, obj):
        self.proc.stdin.write(json.dumps(obj) + "\n")
        self.proc.stdin.flush()

    def read(self, timeout: float):
        """The next record, None at exit, or raises queue.Empty after `timeout` seconds. Lines that are not JSON
        (something printed to stdout) are kept with stderr's tail for the report."""
        deadline = time.monotonic() + timeout
        while True:
            line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            if line is None:
                return None
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                self.stderr.append(line)

    def kill(self):
        try:
            os.killpg(self.proc.pid, 9)
        except ProcessLookupError:
            pass
        self.proc.wait()


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        sys.exit(worker_main())
    sys.exit("usage: python -m ptxgemm mutants --help (this module's own entry is the GPU worker: --worker)")
