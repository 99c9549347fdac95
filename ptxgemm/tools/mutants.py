"""Mutation testing of the GEMM's synchronization: is every barrier, fence and wait shown necessary?

`python -m ptxgemm mutants` renders a config (in debug mode, so a barrier that never completes gives up and says
which one instead of hanging), finds every synchronization instruction in its PTX, and makes one mutant per way
of breaking it: the instruction deleted, or weakened (a wait that waits for less, a barrier count changed, the
wrong phase awaited). Each mutant is assembled here and run on the GPU in a worker process, on fixed workloads
in which both consumers of every CTA run several tiles and the k-loop wraps the stage ring, with every output
element checked against its bound (ptxgemm.accuracy). A mutant is killed by a wrong result, a reported stall, a
launch error, a hang (the worker is killed after a timeout) or by ptxas: rejected, or warning (tests/test_gemm.py
requires a build without any ptxas warning; ptxas warns when it has to serialize wgmma or inject a wait_group that
the PTX lacks). A mutant that survives stays in the table with
the reason it cannot be observed; an equivalent mutant (ptxas made the same machine code) is one such reason.

The worker runs in a child process because a killed mutant often takes the CUDA context with it (a trap) or
never finishes (a named barrier that is never completed cannot time out).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from .. import accuracy
from ..build import compiler
from ..errors import ToolchainError
from ..kernel import codegen
from ..kernel.config import GemmConfig, SCALE_BLOCK
from ..kernel.params import template_params
from ..kernel.schedule import plan_for
from ..runtime import driver
from ..runtime.debug import BarrierStall
from ptxgemm import DeviceArray
from ptxgemm.errors import CudaError
from ptxgemm.gemm import GemmKernel

DEBUG_TIMEOUT_NS = 50_000_000      # a correct kernel here finishes in under a millisecond; 50 ms means "never"
DEFAULT_TIMEOUT_S = 20.0           # per mutant, from its start in the worker: module load, launches and checks

# ---------------------------------------------------------------------------------------------------------------
# Synchronization points and their mutations
# ---------------------------------------------------------------------------------------------------------------

_INSTR = re.compile(r"^(?P<indent>\s*)(?P<guard>@!?%\w+\s+)?(?P<op>[a-z][\w.:]*)(?P<args>[^;]*);(?P<tail>.*)$")


def _delete(m):
    return f"{m['indent']}// MUTANT: deleted: {m['guard'] or ''}{m['op']}{m['args']};"


def _replace_args(m, args: str, op: str | None = None) -> str:
    return f"{m['indent']}{m['guard'] or ''}{op or m['op']}{args};   // MUTANT"


def _last_int(args: str) -> int:
    return int(re.findall(r"\d+", args)[-1])


def _with_last_int(args: str, value: int) -> str:
    head, _, _ = args.rpartition(re.findall(r"\d+", args)[-1])
    return f"{head}{value}"


def _init_plus(m):
    return _replace_args(m, _with_last_int(m["args"], _last_int(m["args"]) + 1))


def _init_minus(m):
    count = _last_int(m["args"])
    return _replace_args(m, _with_last_int(m["args"], count - 1)) if count > 1 else None


def _wait_skipped(m):
    ready = m["args"].split(",")[0].strip()
    return f"{m['indent']}setp.eq.u32 {ready}, 0, 0;   // MUTANT: the wait passes at once"


def _wait_wrong_parity(m):
    parts = [p.strip() for p in m["args"].split(",")]
    flipped = ", ".join(parts[:-1] + ["%mutant_parity"])
    return (f"{m['indent']}{{ .reg .b32 %mutant_parity; xor.b32 %mutant_parity, {parts[-1]}, 1; "
            f"{m['op']} {flipped}; }}   // MUTANT: waits for the other phase")


def _bytes_halved(m):
    return _replace_args(m, _with_last_int(m["args"], _last_int(m["args"]) // 2))


def _count_weakened(m):
    parts = [p.strip() for p in m["args"].split(",")]
    if len(parts) < 2 or not parts[-1].isdigit():
        return None
    count = int(parts[-1])
    weaker = count // 2 if count > 128 else count - 32
    return _replace_args(m, " " + ", ".join(parts[:-1] + [str(weaker)]))


def _group_plus_one(m):
    return _replace_args(m, _with_last_int(m["args"], _last_int(m["args"]) + 1))


def _read_only(m):
    return None if ".read" in m["op"] else _replace_args(m, m["args"], op=m["op"] + ".read")


def _relaxed(m):
    """The ordering dropped: red.release / ld.acquire become .relaxed (the same scope and access)."""
    op = re.sub(r"\.(release|acquire)\.", ".relaxed.", m["op"], count=1)
    return None if op == m["op"] else _replace_args(m, m["args"], op=op)


def _load_passes(m):
    """A polled load that reads the value the wait wants at once (all ones: at least any target)."""
    dest = m["args"].split(",")[0].strip()
    return f"{m['indent']}mov.u32 {dest}, 0xffffffff;   // MUTANT: the poll sees its target at once"


@dataclasses.dataclass(frozen=True)
class SyncKind:
    name: str                 # what the table calls it
    prefix: str               # the instruction's opcode starts with this
    mutations: tuple          # (mutation name, function(match) -> replacement line or None when not applicable)


DELETE = ("deleted", _delete)
SYNC_KINDS = (
    SyncKind("mbarrier.init", "mbarrier.init", (("count+1", _init_plus), ("count-1", _init_minus))),
    SyncKind("mbarrier.try_wait", "mbarrier.try_wait", (("skipped", _wait_skipped), ("wrong parity", _wait_wrong_parity))),
    SyncKind("mbarrier.arrive.expect_tx", "mbarrier.arrive.expect_tx", (DELETE, ("bytes/2", _bytes_halved))),
    SyncKind("mbarrier.arrive", "mbarrier.arrive", (DELETE,)),
    SyncKind("bar.sync", "bar.sync", (DELETE, ("count weakened", _count_weakened))),
    SyncKind("bar.arrive", "bar.arrive", (DELETE,)),
    SyncKind("barrier.cluster", "barrier.cluster", (DELETE,)),
    SyncKind("fence.proxy.async", "fence.proxy.async", (DELETE,)),
    SyncKind("fence.mbarrier_init", "fence.mbarrier_init", (DELETE,)),
    SyncKind("wgmma.fence", "wgmma.fence", (DELETE,)),
    SyncKind("wgmma.commit_group", "wgmma.commit_group", (DELETE,)),
    SyncKind("wgmma.wait_group", "wgmma.wait_group", (("N+1", _group_plus_one), DELETE)),
    SyncKind("cp.async.bulk.commit_group", "cp.async.bulk.commit_group", (DELETE,)),
    SyncKind("cp.async.bulk.wait_group", "cp.async.bulk.wait_group",
             (("N+1", _group_plus_one), (".read added", _read_only), DELETE)),
    SyncKind("setmaxnreg", "setmaxnreg", (DELETE,)),
    # split-K's fix-up (splitk.ptx.j2): a partial's publish, the final's poll of the flag, the flag's reset
    SyncKind("red.release", "red.release", (DELETE, ("relaxed", _relaxed))),
    SyncKind("ld.acquire", "ld.acquire", (("skipped", _load_passes), ("relaxed", _relaxed))),
    SyncKind("st.relaxed", "st.relaxed", (DELETE,)),
)


@dataclasses.dataclass
class Mutant:
    id: str
    instruction: str          # the original PTX instruction, trimmed
    kind: str
    mutation: str
    ptx_line: int             # 1-based line of the rendered (debug) PTX
    origin: codegen.LineOrigin | None
    replacement: str
    site: str = ""            # the text of the template line that made it (the macro call site): names the role
    status: str = "not run"   # "killed" | "survived" | "not run"
    killed_by: str = ""
    reason: str = ""

    @property
    def call_site(self) -> tuple[str, int]:
        """(template, line) of the outermost call that made the line: where a reader would change it."""
        if self.origin is None:
            return "?", 0
        return self.origin.calls[-1] if self.origin.calls else (self.origin.template, self.origin.line)

    @property
    def template(self) -> str:
        return self.call_site[0]

    @property
    def source_line(self) -> str:
        """The text of the template line that wrote the instruction (inside a macro: the macro's line)."""
        return _template_lines(self.origin.template)[self.origin.line - 1].strip() if self.origin else ""

    @property
    def template_line(self) -> int:
        return self.call_site[1]

    def record(self) -> dict:
        return {"id": self.id, "instruction": self.instruction, "mutation": self.mutation, "ptx_line": self.ptx_line,
                "template": self.template, "template_line": self.template_line,
                "macro": f"{self.origin.template}:{self.origin.line}" if self.origin and self.origin.calls else None,
                "site": self.site, "status": self.status, "killed_by": self.killed_by, "reason": self.reason}


def mutant_config(config: GemmConfig) -> GemmConfig:
    """The build the mutants are made from: the config in debug mode, with waits that give up after 50 ms."""
    return dataclasses.replace(config, debug=True, debug_timeout_ns=DEBUG_TIMEOUT_NS)


def enumerate_mutants(config: GemmConfig) -> tuple[str, list[Mutant]]:
    """(the debug build's PTX, every mutant of every synchronization instruction in it)."""
    cfg = mutant_config(config)
    params = template_params(cfg)
    # the same text render_gemm (and so GemmKernel) makes, with each line's template origin beside it
    ptx, origins = codegen.render_with_origins(params["template_name"], **params)
    mutants = []
    for number, (line, origin) in enumerate(zip(ptx.splitlines(), origins), start=1):
        m = _INSTR.match(line)
        if m is None:
            continue
        kind = next((k for k in SYNC_KINDS if m["op"].startswith(k.prefix)), None)
        if kind is None:
            continue
        for mutation, make in kind.mutations:
            replacement = make(m)
            if replacement is None:
                continue
            instruction = f"{m['guard'] or ''}{m['op']}{m['args']};".strip()
            mid = f"L{number}:{kind.name}:{mutation.replace(' ', '-')}"
            mutants.append(Mutant(mid, instruction, kind.name, mutation, number, origin, replacement,
                                  _site_text(origin)))
    return ptx, mutants


def in_template(mutant: Mutant, name: str) -> bool:
    """Whether the mutated line comes from template `name`: written there, or by a macro called from there."""
    o = mutant.origin
    return o is not None and (o.template == name or any(t == name for t, _ in o.calls))


@functools.lru_cache(maxsize=None)
def _template_lines(name: str) -> tuple[str, ...]:
    return tuple((codegen._template_dir() / name).read_text().splitlines())


def _site_text(origin) -> str:
    if origin is None:
        return ""
    name, line = origin.calls[-1] if origin.calls else (origin.template, origin.line)
    return _template_lines(name)[line - 1].strip()


def apply(ptx: str, mutant: Mutant) -> str:
    lines = ptx.split("\n")
    lines[mutant.ptx_line - 1] = mutant.replacement
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# Why a mutant cannot be observed: reasons, checked on the device (see docs/results/mutants_*.json)
# ---------------------------------------------------------------------------------------------------------------

_UNSEEN = "not observed on the H100 (docs/results/mutants_h100.json): "
#: (kind, mutations, text found in the call-site template line) -> why the mutant survives. Written from device runs;
#: a survivor not listed here is "unexplained", and the command exits 1 (the GPU test fails on it).
_UNSEEN_SPLIT = "not observed on the H100 (docs/results/mutants_split_h100.json): "
SURVIVOR_REASONS = (
    ("bar.sync", ("deleted",), "every partial store is issued before the release",
     _UNSEEN_SPLIT + "(split-K) a consumer's four warps run the same store sequence and reach the publish together, "
     "and the final, on another SM, sees the flag through L2 and only then loads; only this barrier promises that "
     "every warp's partial stores come before the leader's release"),
    ("red.release", ("relaxed",), "red.release",
     _UNSEEN_SPLIT + "(split-K) the partials are written with st.global and read with ld.global.cg, both served by "
     "L2, the GPU's point of coherence, and the relaxed flag update still leaves the SM after the stores the "
     "barrier ordered before it; the memory model promises the final sees them only through this release"),
    ("ld.acquire", ("relaxed",), "ld.acquire",
     _UNSEEN_SPLIT + "(split-K) the partials are read with ld.global.cg (L2, bypassing L1), issued only after the "
     "poll's value decided the branch and the barrier that follows; the memory model promises they see the "
     "partials only through this acquire"),
    ("fence.mbarrier_init", ("deleted",), "mbar.fence_init()",
     _UNSEEN + "the barrier inits reach the TMA unit long before the first complete_tx (microseconds later, after "
     "the CTA barrier and setmaxnreg); kept because the memory model promises init visibility to the async proxy "
     "and to the cluster only through this fence"),
    ("bar.sync", ("deleted",), "bar_cta",
     _UNSEEN + "a hidden order covers it: the consumers' setmaxnreg.inc cannot complete before the producer "
     "warpgroup's setmaxnreg.dec frees registers, and warp 0 executes that after thread 0's inits; the memory model "
     "does not promise that order, the barrier does"),
    ("barrier.cluster", ("deleted",), "barrier.cluster",
     _UNSEEN + "the two CTAs of a cluster start together, and a peer's first multicast or remote arrive comes "
     "microseconds after its own inits; the race needs one CTA of the pair to start late"),
    ("mbarrier.try_wait", ("skipped", "wrong parity"), "PRODUCER_WAIT_DRAIN",
     "redundant without a cluster: a CTA stays resident until its consumers finish, and they wait for every load "
     "they read (a drain wait on the other parity asks for a phase that has completed, so it passes at once, as a "
     "skipped one does); the drain exists for the cluster build, where a CTA must not exit while its peer still "
     "multicasts into it (killed there)"),
    ("setmaxnreg", ("deleted",), "setmaxnreg.inc",
     _UNSEEN + "this tile's consumer code fits in the 168 registers every thread gets at launch (128 accumulators "
     "plus addresses); the increase is headroom for ptxas, not a register the 128x128 code needs"),
    ("wgmma.wait_group", ("N+1", "deleted"), "mma.wait_group(1)",
     _UNSEEN + "a stage released before its wgmmas retired is refilled only after the producer's empty wait, a TMA "
     "issue and the load's latency from L2 (hundreds of ns), longer than the tensor cores need to finish reading it; "
     "a latent race the hardware's latencies hide"),
    ("fence.proxy.async", ("deleted",), "its shared stores become visible to the TMA unit",
     _UNSEEN + "by the time the leader has passed the 128-thread barrier and issued the TMA store, the stmatrix "
     "writes have reached shared memory; the memory model orders generic-proxy writes before an async-proxy read "
     "only through this fence"),
    ("fence.proxy.async", ("deleted",), "its reads of S are done",
     "not observed in the debug build, whose bounded waits slow the producer's reload of the source tile; the release "
     "build shows it (fuzz seed 22001, case 1133: S of the CTA's next tile in warp 0's rows), and "
     "tests/test_fuzz_gpu.py kills this mutant there"),
    ("bar.sync", ("deleted",), "the panel is complete",
     _UNSEEN + "(cooperative) the four warps of a consumer leave the slot-free barrier together and run the same "
     "stmatrix sequence, so all have written the panel before the leader's TMA store reads it; a latent race the "
     "warps' lockstep hides"),
    ("bar.sync", ("deleted",), "the staging buffer is complete",
     _UNSEEN + "the four warps of a consumer leave the epilogue-order barrier together and run the same stmatrix "
     "sequence, so all have written the staging buffer before the leader's TMA store reads it; a latent race the "
     "warps' lockstep hides"),
    ("cp.async.bulk.wait_group", ("N+1", ".read added", "deleted"), "may still be reading",
     _UNSEEN + "(cooperative) the last tile's stores were never waited for, and the leader exits right after "
     "issuing them; no later write targets their staging slots, and C was not seen incomplete, but only this "
     "wait promises that the bulk stores have read shared memory and written C before the CTA retires"),
    ("cp.async.bulk.wait_group", ("N+1", ".read added", "deleted"), "tma.wait_all(0)",
     "redundant: every store group was already waited for with .read before the epilogue-order arrive, so at exit "
     "only global writes can be pending, and the grid's completion includes them"),
)


def explain(mutant: Mutant) -> str:
    """The reason of the first SURVIVOR_REASONS entry whose kind and mutation match and whose text is in the
    call-site line or in the line that wrote the instruction; "" when none does."""
    for kind, mutations, needle, reason in SURVIVOR_REASONS:
        if (mutant.kind == kind and mutant.mutation in mutations
                and (needle in mutant.site or needle in mutant.source_line)):
            return reason
    return ""


# ---------------------------------------------------------------------------------------------------------------
# Assembling: what ptxas alone decides
# ---------------------------------------------------------------------------------------------------------------

def _kernel_sass(compiled) -> str:
    try:
        return compiled.sass()
    except Exception:  # noqa: BLE001 - no nvdisasm: fall back to comparing the cubins
        return ""


def build(ptx: str, mutants: list[Mutant], progress=None) -> dict[str, str]:
    """Assemble every mutant (cached on disk like any kernel). Mutants that ptxas rejects, or that provoke a warning
    the CPU tests forbid, are killed here; those whose machine code equals the original's survive as equivalent.
    Returns {mutant id: mutated PTX} for the mutants still to run."""

    original = compiler.compile_ptx(ptx)
    original_codes = original.report.warning_codes
    original_sass = _kernel_sass(original)
    to_run = {}
    for i, mutant in enumerate(mutants):
        if progress:
            progress(f"assembling {i + 1}/{len(mutants)} {mutant.id}")
        text = apply(ptx, mutant)
        try:
            compiled = compiler.compile_ptx(text)
        except ToolchainError as e:
            message = [ln for ln in str(e).splitlines() if "error" in ln.lower()] or str(e).splitlines()
            mutant.status, mutant.killed_by = "killed", f"ptxas rejected it: {message[-1].strip()[:160]}"
            continue
        new = sorted(compiled.report.warning_codes - original_codes)
        if new:
            first = next(w["message"] for w in compiled.report.warnings if w["code"] == new[0])
            mutant.status, mutant.killed_by = "killed", (f"ptxas warning {', '.join(new)} ({first[:70]}...; "
                                                         f"tests/test_gemm.py fails on any warning)")
            continue
        same = (compiled.cubin == original.cubin) or (original_sass and _kernel_sass(compiled) == original_sass)
        if same:
            mutant.status, mutant.reason = "survived", "equivalent: ptxas made the same machine code as the original"
            continue
        to_run[mutant.id] = text
    return to_run


# ---------------------------------------------------------------------------------------------------------------
# Workloads: shapes where both consumers of every CTA run several tiles and the ring wraps
# ---------------------------------------------------------------------------------------------------------------

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
                np.save(arrays[name]["path"], _raw(value))
            else:
                scalars[name] = value
        jobs.append({"workload": dataclasses.asdict(w), "paths": paths, "arrays": arrays, "scalars": scalars})
    return jobs


# ---------------------------------------------------------------------------------------------------------------
# The worker (a child process): run mutants until one takes the CUDA context down
# ---------------------------------------------------------------------------------------------------------------

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
    for job, (da, db, ref, bound, epi) in zip(jobs, loaded):
        w = job["workload"]
        out = DeviceArray.empty((w["m"], w["n"]), accuracy.DTYPES[config.out_dtype])
        try:
            plan = ptxgemm.GemmPlan(da, db, out, config, ctas=w["ctas"], kernel=kernel, **epi)
            for _ in range(repeats):
                out.poison()
                if plan.workspace is not None:   # split-K: stale partials (equal to this launch's) must not pass
                    plan.workspace.poison()
                plan.launch()     # debug build: synchronizes, and a stall becomes BarrierStall
                verdict = accuracy.check_bound(out.to_numpy(), ref, bound)
                if not verdict.ok:
                    return "killed", f"wrong result on {w['m']}x{w['n']}x{w['k']}: {verdict}"
        except BarrierStall as e:
            return "killed", f"stall reported: {e}"
        except CudaError as e:
            return "killed", f"CUDA error: {e}"
        finally:
            try:
                out.free()
            except CudaError:
                pass  # the context is gone (the error above says why); the worker exits after reporting it
    return "survived", ""


def _context_lost(killed_by: str) -> bool:
    """After these the worker's CUDA context is unusable, so it exits and the next mutant gets a fresh worker."""
    return killed_by.startswith(("CUDA error", "stall reported", "module load"))


def worker_main() -> int:
    """Reads a setup line, then one mutant per line, from stdin; writes start/result lines to stdout. Exits after a
    CUDA error (the context is gone) so that the parent starts a fresh worker for the next mutant."""
    import ptxgemm

    setup = json.loads(sys.stdin.readline())
    config = GemmConfig(**setup["config"])
    jobs = setup["jobs"]
    loaded = []
    in_dtype, b_dtype = accuracy.DTYPES[config.in_dtype], accuracy.DTYPES[config.b_type]
    for job in jobs:
        p = job["paths"]
        epi = dict(job.get("scalars", {}))
        for name, spec in job.get("arrays", {}).items():
            epi[name] = ptxgemm.to_device(np.load(spec["path"]).view(accuracy.DTYPES.get(spec["dtype"], spec["dtype"])))
        loaded.append((ptxgemm.to_device(np.load(p["a"]).view(in_dtype)), ptxgemm.to_device(np.load(p["b"]).view(b_dtype)),
                       np.load(p["ref"], mmap_mode="r"), np.load(p["bound"], mmap_mode="r"), epi))
    _emit(event="ready")
    for line in sys.stdin:
        task = json.loads(line)
        _emit(event="start", id=task["id"])
        status, killed_by = _run_one(config, Path(task["ptx_path"]).read_text(), jobs, loaded, setup["repeats"])
        _emit(event="result", id=task["id"], status=status, killed_by=killed_by)
        if _context_lost(killed_by):
            return 0
    return 0


class _Worker:
    """A worker process and a thread that turns its stdout into a queue (so reads can time out)."""

    def __init__(self, setup: dict):
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen([sys.executable, "-m", "ptxgemm.tools.mutants", "--worker"], stdin=subprocess.PIPE,
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


def run_on_gpu(config: GemmConfig, ptx: str, mutants: list[Mutant], texts: dict[str, str],
               timeout_s: float = DEFAULT_TIMEOUT_S, repeats: int = 2, workloads=WORKLOADS, progress=print) -> dict:
    """Run the unmutated debug build `ptx` (it must pass), then every mutant in `texts`; fill in each outcome.
    Returns {"workloads": [...], "baseline": ...}."""

    cfg = mutant_config(config)
    sm_count = driver.device_info().sm_count
    described = []
    for w in workloads:
        s = plan_for(cfg, w.m, w.n, w.k, sm_count, w.ctas)
        described.append({**dataclasses.asdict(w), **s.describe(),
                          "ring_wraps": s.ring_passes // cfg.num_stages})
    with tempfile.TemporaryDirectory(prefix="ptxgemm-mutants-") as tmp:
        tmp = Path(tmp)
        setup = {"config": dataclasses.asdict(cfg), "jobs": prepare_workloads(cfg, tmp, workloads), "repeats": repeats}
        queue_ = [("baseline", ptx)] + [(mid, texts[mid]) for mid in texts]
        for index, (mid, text) in enumerate(queue_):
            (tmp / f"m{index}.ptx").write_text(text)
        by_id = {m.id: m for m in mutants}
        baseline = None
        worker = None
        for index, (mid, text) in enumerate(queue_):
            path = tmp / f"m{index}.ptx"
            if worker is None:
                worker = _Worker(setup)
                ready = worker.read(timeout=300)
                if ready is None:
                    raise RuntimeError("mutant worker died while starting: " + "".join(worker.stderr))
            worker.send({"id": mid, "ptx_path": str(path)})
            t0 = time.monotonic()
            status, killed_by = None, ""
            try:
                while status is None:
                    rec = worker.read(timeout=max(0.1, timeout_s - (time.monotonic() - t0)))
                    if rec is None:
                        status, killed_by = "killed", "worker died: " + ("".join(worker.stderr).strip()[-300:]
                                                                          or "no message")
                    elif rec.get("event") == "result":
                        status, killed_by = rec["status"], rec["killed_by"]
            except queue.Empty:
                worker.kill()
                worker = None
                status, killed_by = "killed", f"timeout: no result within {timeout_s:.0f} s (hang)"
            elapsed = time.monotonic() - t0
            if worker is not None and (_context_lost(killed_by) or killed_by.startswith("worker died")):
                try:  # it exits by itself after a lost context; never hand it the next mutant
                    worker.proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    worker.kill()
                worker = None
            if mid == "baseline":
                baseline = {"status": status, "detail": killed_by, "seconds": round(elapsed, 2)}
                if status != "survived":
                    if worker:
                        worker.kill()
                    raise RuntimeError(f"the unmutated debug build fails its own workloads: {killed_by}")
            else:
                m = by_id[mid]
                m.status, m.killed_by = status, killed_by
                if status == "survived":
                    m.reason = explain(m) or "unexplained: not observed on these workloads"
            if progress:
                progress(f"[{index}/{len(queue_) - 1}] {mid}: {status} {killed_by[:100]} ({elapsed:.1f} s)")
        if worker is not None:
            worker.proc.stdin.close()
            worker.proc.wait(timeout=30)
    return {"workloads": described, "baseline": baseline}


# ---------------------------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------------------------

def format_table(config: GemmConfig, mutants: list[Mutant]) -> str:
    rows = [("id", "instruction", "template (call site)", "mutation", "outcome", "killed by / reason")]
    for m in mutants:
        rows.append((m.id, m.instruction[:48], f"{m.template}:{m.template_line}", m.mutation, m.status,
                     (m.killed_by or m.reason)[:110]))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    lines = [f"mutants of {config.describe()} (debug build)"]
    for r in rows:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r[:5], widths)) + "  " + r[5])
    lines.append(score_line(mutants))
    return "\n".join(lines)


def score_line(mutants: list[Mutant]) -> str:
    ran = [m for m in mutants if m.status != "not run"]
    killed = sum(m.status == "killed" for m in ran)
    explained = sum(m.status == "survived" and not m.reason.startswith("unexplained") for m in ran)
    unexplained = sum(m.reason.startswith("unexplained") for m in ran)
    if not ran:
        return f"score: {len(mutants)} mutants, none run"
    return (f"score: {killed}/{len(ran)} killed, {explained} survived with a reason, {unexplained} unexplained"
            + (f", {len(mutants) - len(ran)} not run" if len(ran) < len(mutants) else ""))


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        sys.exit(worker_main())
    sys.exit("usage: python -m ptxgemm mutants --help (this module's own entry is the GPU worker: --worker)")
