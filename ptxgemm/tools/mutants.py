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
import queue
import subprocess
import tempfile
import time
from pathlib import Path

from ..errors import ToolchainError
from ..kernel.config import GemmConfig
from ..kernel.schedule import plan_for
from ..runtime import driver
from ..toolchain import compiler
from .mutant_catalog import Mutant, apply, explain, mutant_config
from .mutant_worker import Worker, context_lost, prepare_workloads, workloads_for

DEFAULT_TIMEOUT_S = 20.0           # per mutant, from its start in the worker: module load, launches and checks

# ---------------------------------------------------------------------------------------------------------------
# Synchronization points and their mutations
# ---------------------------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------------------------
# Why a mutant cannot be observed: reasons, checked on the device (see docs/results/*/mutants/)
# ---------------------------------------------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------------------------------------------
# The worker (a child process): run mutants until one takes the CUDA context down
# ---------------------------------------------------------------------------------------------------------------


def run_on_gpu(config: GemmConfig, ptx: str, mutants: list[Mutant], texts: dict[str, str],
               timeout_s: float = DEFAULT_TIMEOUT_S, repeats: int = 2, workloads=None, progress=print) -> dict:
    """Run the unmutated debug build `ptx` (it must pass), then every mutant in `texts`; fill in each outcome.
    Returns {"workloads": [...], "baseline": ...}."""

    cfg = mutant_config(config)
    workloads = workloads_for(cfg) if workloads is None else workloads
    sm_count = driver.device_info().sm_count
    described = []
    for w in workloads:
        if cfg.grouped:   # the walk depends on the counts: the workload says what it holds
            described.append({**dataclasses.asdict(w), "describe": w.describe()})
            continue
        s = plan_for(cfg, w.m, w.n, w.k, sm_count, w.ctas)
        described.append({**dataclasses.asdict(w), **s.describe(),
                          "ring_wraps": s.ring_passes // cfg.num_stages})
    with tempfile.TemporaryDirectory(prefix="ptxgemm-mutants-") as tmp:
        tmp = Path(tmp)
        setup = {"config": cfg.fields(), "jobs": prepare_workloads(cfg, tmp, workloads), "repeats": repeats}
        queue_ = [("baseline", ptx)] + [(mid, texts[mid]) for mid in texts]
        for index, (mid, text) in enumerate(queue_):
            (tmp / f"m{index}.ptx").write_text(text)
        by_id = {m.id: m for m in mutants}
        baseline = None
        worker = None
        for index, (mid, text) in enumerate(queue_):
            path = tmp / f"m{index}.ptx"
            if worker is None:
                worker = Worker(setup)
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
            if worker is not None and (context_lost(killed_by) or killed_by.startswith("worker died")):
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
                    m.reason = explain(m, config) or "unexplained: not observed on these workloads"
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
