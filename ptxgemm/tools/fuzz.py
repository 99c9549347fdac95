"""The differential fuzzer: random calls of run, matmul and GemmPlan against a float64 reference.

`python -m ptxgemm fuzz --cases N --seed S [--out DIR] [--emulate]` draws N cases (ptxgemm.tools.fuzz_cases: every
argument, layout, dtype and epilogue), runs each through the library, and sorts the outcomes:

- correct: every element within ptxgemm.accuracy's bound, and no byte written outside `out`'s elements (emulated:
  in out's memory, and the inputs untouched; on the GPU: in the span an out with gaps was uploaded in);
- wrong: a result over its bound (NaN included: outputs start poisoned);
- refused: a ConfigError on an input numpy and the documented API accept, which is a bug like a wrong result;
- crashed: any other exception.

Each failure is shrunk (fuzz_shrink.shrink: the smallest case failing the same way) and printed as a runnable
snippet. The illegal inputs of fuzz_illegal.bad_specs are walked too: each must raise a ConfigError whose message
starts with the argument it names.

Two backends: the GPU (`gpu`: device arrays of ptxgemm, torch or CuPy) and the plan emulator (`emulate`,
ptxgemm.tools.emulator: everything but the PTX, on host memory), which CI runs without a GPU.
"""
from __future__ import annotations

import dataclasses
import re
import time
import traceback

import numpy as np

from ..errors import ConfigError
from ..runtime import driver
from ..runtime.arrays import DeviceArray, as_device_array
from . import emulator, fuzz_build, fuzz_cases, fuzz_illegal, fuzz_shrink, fuzz_snippets

OUTCOMES = ("correct", "wrong", "refused", "crashed")
#: the largest problem (2·batches·M·N·K) a case draws: the GPU's cases reach a few thousand along an axis; the
#: emulator's stay small enough that 2000 run in CI's minute on two cores
MAX_FLOPS = {"gpu": 4e10, "emulate": 3e7}
ARRAY_KINDS = {"gpu": ("device", "torch", "cupy"), "emulate": ("host",)}


def array_kinds(backend_name: str) -> tuple[str, ...]:
    """The backend's array kinds whose framework is installed (torch and CuPy are optional peers: a GPU machine
    without them fuzzes ptxgemm's own device arrays)."""
    import importlib.util

    return tuple(k for k in ARRAY_KINDS[backend_name] if k not in ("torch", "cupy") or importlib.util.find_spec(k))


@dataclasses.dataclass
class Outcome:
    kind: str          # one of OUTCOMES
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.kind != "correct"

    def same_failure(self, other: "Outcome") -> bool:
        """Whether `other` fails the same way (the shrinker keeps a smaller case only then): the same outcome and,
        for an exception, the same type and first words."""
        return self.kind == other.kind and (self.kind == "wrong" or _signature(self.detail) == _signature(other.detail))


def _signature(detail: str) -> str:
    return re.sub(r"[-+]?\d[\d.e+-]*", "#", detail.splitlines()[0] if detail else "")[:60]


# --- backends ------------------------------------------------------------------------------------------------

class EmulatedBackend:
    name = "emulate"

    def __init__(self):
        self.emulator = emulator

    def device_name(self) -> str:
        return "emulated (no GPU)"

    out_span = None   # as GpuBackend's: (the span out was uploaded in, out's offset in it, its bytes before)

    def call(self, case) -> np.ndarray:
        em, kw = self.emulator, dict(case.kwargs)
        self.out_span = None
        if case.entry == "run":
            return em.run(case.a, case.b, **kw)
        out = case.out
        if out is not None and out.size and not (out.flags.c_contiguous or out.flags.f_contiguous):
            # an out with gaps goes where the GPU fuzzer puts it: a span upload (DeviceArray.from_numpy), whose
            # element 0 is aligned (host memory keeps numpy's misalignment, which stages it); the inputs stay in
            # host memory, misaligned ones included
            out = em.upload(out)
            span = out.region_bytes()
            self.out_span = (span, out.ptr - out.region[0], span.copy())
            if case.c_is_out:
                kw["c"] = out
        if case.entry == "matmul":
            got = em.matmul(case.a, case.b, out, **kw)
        else:
            em.GemmPlan(case.a, case.b, out, **kw).launch()
            got = out
        return got.numpy().copy() if isinstance(got, em.HostArray) else np.asarray(got)

    def touched(self, case) -> str:
        """A byte of out's upload span outside out's elements that the call wrote, if any (after `call`)."""
        if self.out_span is None:
            return ""
        after, start, before = self.out_span
        return OUTSIDE_OUT if changed_outside(before, after, start, case.out) else ""


class GpuBackend:
    """Each case on the GPU; with `devices` > 1 a case's arrays on the device its spec names (its "device", drawn by
    `fuzz`): one process calling on several GPUs, as ptxgemm.runtime.devices serves it."""
    name = "gpu"

    def __init__(self, devices: int = 1):
        self.driver = driver
        count = driver.device_count() if devices > 1 else 1
        if devices > count:
            raise ConfigError(f"devices: {devices}, but the driver sees {count} CUDA device(s)")
        self.devices = devices
        for ordinal in range(devices - 1, 0, -1):   # every device a case may draw: Hopper, or a clear refusal now
            driver.require_sm90("fuzzing on the GPU", ordinal)
        self.info = driver.require_sm90("fuzzing on the GPU")   # device 0's, current last

    def device_name(self) -> str:
        return self.info.name

    def _device(self, x, kind: str, ordinal: int = 0):
        """A device array of `kind` with x's values, shape and strides on device `ordinal` (a span upload, as
        to_device makes)."""
        arr = self.uploaded = DeviceArray.from_numpy(x, device=ordinal)   # torch's and CuPy's arrays are views of it
        if kind == "torch" and min(x.strides, default=0) >= 0:   # torch has no negative strides
            import torch
            return torch.from_dlpack(arr) if arr.size else torch.empty(x.shape, dtype=_torch_dtype(x.dtype),
                                                                        device=f"cuda:{ordinal}")
        if kind == "cupy" and x.dtype.name in ("float16", "float32"):   # CuPy has no bfloat16 or fp8
            import cupy
            # CuPy places an array of the array interface (which names no device) on its own current device; an
            # empty DeviceArray has no address, which CuPy's UnownedMemory refuses
            with cupy.cuda.Device(ordinal):
                return cupy.asarray(arr) if arr.size else cupy.empty(x.shape, x.dtype)
        return arr

    out_span = None   # (out's device view into the span it was uploaded in, the span's bytes before the call)

    def touched(self, case) -> str:
        """A byte of out's upload span outside out's elements that the call wrote, if any (after `call`)."""
        if self.out_span is None:
            return ""
        view, before = self.out_span
        return OUTSIDE_OUT if written_outside(view, case.out, before) else ""

    def call(self, case) -> np.ndarray:
        import ptxgemm

        ordinal = case.spec.get("device", 0)
        with ptxgemm.device(ordinal):   # run's uploads and the synchronize below go to the case's device
            return self._call(case, ordinal)

    def _call(self, case, ordinal: int) -> np.ndarray:
        import ptxgemm

        kw = dict(case.kwargs)
        self.out_span = None
        if case.entry == "run":
            return ptxgemm.run(case.a, case.b, **kw)
        kind = case.array_kind
        for name in ("c", "bias", "scale_a", "scale_b"):   # arrays go to the device; numbers stay numbers
            x = kw.get(name)
            if isinstance(x, np.ndarray) and not (case.c_is_out and name == "c"):
                kw[name] = self._device(x, kind, ordinal)
        a, b = self._device(case.a, kind, ordinal), self._device(case.b, kind, ordinal)
        out = None if case.out is None else self._device(case.out, kind, ordinal)
        if out is not None and case.out.size and not (case.out.flags.c_contiguous or case.out.flags.f_contiguous):
            # out's elements with gaps between them (a slice, a pitched layout): the span uploaded around them, as
            # it held before the call, so that the judge can see a byte of a gap written (the emulator's check,
            # on the device)
            view = self.uploaded   # from_numpy's view of its span buffer
            before = span_bytes(view)
            if before is not None:
                self.out_span = (view, before)
        if case.c_is_out:
            kw["c"] = out
        if case.entry == "matmul":
            got = ptxgemm.matmul(a, b, out, **kw)
        else:
            ptxgemm.GemmPlan(a, b, out, **kw).launch()
            got = out
        self.driver.synchronize("waiting for the fuzzed call")
        return as_device_array(got, "out").to_numpy()


def _torch_dtype(dtype):
    import torch
    return getattr(torch, np.dtype(dtype).name)


# --- one case ------------------------------------------------------------------------------------------------

def evaluate(spec: dict, backend) -> Outcome:
    """Build, call and judge one case."""
    try:
        case = fuzz_build.build(spec)
        ref, bound = fuzz_build.reference(case)
        before = _snapshot(case)
    except Exception as e:   # the fuzzer's own bug: say so rather than blame the library
        return Outcome("crashed", f"fuzzer: {type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}")
    try:
        got = backend.call(case)
    except ConfigError as e:
        return Outcome("refused", f"ConfigError: {e}")
    except Exception as e:
        return Outcome("crashed", f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=6)}")
    got = np.asarray(got)
    if got.shape != ref.shape:
        return Outcome("wrong", f"result shape {got.shape}, numpy's is {ref.shape}")
    verdict = fuzz_build.verdict(case, got)
    if not verdict.ok:
        return Outcome("wrong", str(verdict))
    touched = backend.touched(case) or (_touched(case, before) if backend.name == "emulate" else "")
    if touched:
        return Outcome("wrong", touched)
    return Outcome("correct")


def _snapshot(case) -> dict:
    """Copies of the memory a call may not change: the inputs' bases, and out's base (only out's own elements may
    change there)."""
    snap = {}
    for name, x in (("a", case.a), ("b", case.b), *((k, v) for k, v in case.kwargs.items()
                                                     if isinstance(v, np.ndarray))):
        if not (name == "c" and case.c_is_out):
            snap[name] = (x, _base(x).copy())
    if case.out is not None:
        snap["out"] = (case.out, _base(case.out).copy())
    return snap


def _base(x: np.ndarray) -> np.ndarray:
    while isinstance(x.base, np.ndarray):
        x = x.base
    return x


def _touched(case, snap: dict) -> str:
    """What a call wrote where it may not (host memory, the emulator's case): any byte of an input's memory, or a
    byte of out's base that is not one of out's elements."""
    for name, (x, before) in snap.items():
        after = _base(x)
        if name != "out":
            if after.tobytes() != before.tobytes():
                return f"{name}: an input was written"
            continue
        start = x.__array_interface__["data"][0] - after.__array_interface__["data"][0]
        if changed_outside(before.reshape(-1).view(np.uint8), after.reshape(-1).view(np.uint8), start, x):
            return OUTSIDE_OUT
    return ""


OUTSIDE_OUT = "out: bytes outside out's elements were written"


def span_bytes(d_out):
    """The bytes of the span a DeviceArray with gaps was uploaded in (a copy; None for an array that is its own
    allocation): what `written_outside` compares with after the call."""
    base = getattr(d_out, "base", None)
    return None if base is None else base.to_numpy().view(np.uint8).reshape(-1).copy()


def written_outside(d_out, out: np.ndarray, before) -> int:
    """How many bytes of d_out's span outside the elements of `out` (the host array it was uploaded from: its shape
    and strides) differ from `before` (span_bytes before the call); 0 when there is no span."""
    if before is None:
        return 0
    return changed_outside(before, d_out.base.to_numpy().view(np.uint8).reshape(-1), d_out.ptr - d_out.base.ptr, out)


def changed_outside(before: np.ndarray, after: np.ndarray, start: int, out: np.ndarray) -> int:
    """How many bytes differ between `before` and `after` (one span of memory, as bytes) outside the elements of an
    array laid out as `out` (shape, strides, itemsize) whose element 0 lies `start` bytes in: every judge's check."""
    mine = element_bytes(after.size, start, out.shape, out.strides, out.itemsize)
    return int(np.count_nonzero(before[~mine] != after[~mine]))


def element_bytes(nbytes: int, start: int, shape, strides, itemsize: int) -> np.ndarray:
    """A mask over `nbytes` bytes of memory: True where an element of the array (`shape`, byte `strides`) whose
    element 0 is `start` bytes in lies."""
    mine = np.zeros(nbytes, bool)
    if 0 not in tuple(shape):
        offsets = start + sum(np.arange(e).reshape((-1,) + (1,) * (len(shape) - 1 - i)) * st
                              for i, (e, st) in enumerate(zip(shape, strides)))
        for byte in range(itemsize):
            mine[np.ravel(offsets) + byte] = True
    return mine


# --- the campaign --------------------------------------------------------------------------------------------

def bad_input_checks() -> list[dict]:
    """Each illegal call of fuzz_illegal.bad_specs against ptxgemm.run (rejected before the GPU): its ConfigError must
    start with the argument it names."""
    import ptxgemm

    results = []
    for label, argument, make in fuzz_illegal.bad_specs():
        args, kwargs = make()
        try:
            ptxgemm.run(*args, **kwargs)
            results.append({"label": label, "argument": argument, "ok": False, "error": "accepted"})
        except ConfigError as e:
            ok = str(e).startswith(f"{argument}:") or str(e).startswith(f"{argument} ")
            results.append({"label": label, "argument": argument, "ok": ok, "error": f"ConfigError: {e}"})
        except Exception as e:
            results.append({"label": label, "argument": argument, "ok": False, "error": f"{type(e).__name__}: {e}"})
    return results


def fuzz(cases: int, seed: int, backend, *, max_flops: float | None = None, shrink: bool = True,
         entries=("run", "matmul", "plan"), devices: int = 1, log=print) -> dict:
    """Run `cases` random cases from `seed`; the report (JSON-ready). `devices` > 1: each case's arrays on one of
    the first `devices` CUDA devices, drawn per case (the spec's "device"; a GpuBackend of as many devices); with 1
    the draws are the same as they always were for a seed."""
    rng = np.random.default_rng(seed)
    max_flops = MAX_FLOPS[backend.name] if max_flops is None else max_flops
    counts = dict.fromkeys(OUTCOMES, 0)
    failures, start = [], time.perf_counter()
    for i in range(cases):
        spec = fuzz_cases.draw_spec(rng, max_flops=max_flops, entries=entries,
                                    array_kinds=array_kinds(backend.name))
        if devices > 1:   # drawn after the spec, so a seed's specs are the same on one device
            spec["device"] = int(rng.integers(devices))
        outcome = evaluate(spec, backend)
        counts[outcome.kind] += 1
        if outcome.failed:
            record = {"case": i, "outcome": outcome.kind, "detail": outcome.detail, "spec": spec}
            if shrink and len(failures) < 20:
                small = fuzz_shrink.shrink(spec, lambda s: outcome.same_failure(evaluate(s, backend)))
                record["shrunk"] = small
                record["snippet"] = fuzz_snippets.snippet(small)
                record["shrunk_detail"] = evaluate(small, backend).detail
            failures.append(record)
            log(f"case {i}: {outcome.kind}: {outcome.detail.splitlines()[0] if outcome.detail else ''}")
            if "snippet" in record:
                log(f"shrunk to:\n{record['snippet']}")
        if (i + 1) % 500 == 0:
            log(f"{i + 1}/{cases} cases: " + ", ".join(f"{counts[k]} {k}" for k in OUTCOMES))
    bad = bad_input_checks()
    return {"gpu": backend.device_name(), "backend": backend.name, "seed": seed, "cases": cases, "devices": devices,
            **counts,
            "seconds": round(time.perf_counter() - start, 1), "max_flops": max_flops,
            "bad_inputs": {"checked": len(bad), "named": sum(r["ok"] for r in bad),
                           "misnamed": [r for r in bad if not r["ok"]]},
            "failures": failures}


def gpu_slug(name: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'h100' (the results' file names)."""
    m = re.search(r"\b([A-Z]\d{2,4}[A-Z]?)\b", name)
    return m.group(1).lower() if m else re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
