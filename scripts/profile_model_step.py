#!/usr/bin/env python3
"""Where a compiled training step of the model benchmark's models spends its time, stock against ptxgemm (issue 46
and 47's probes; needs a GPU, torch and transformers). Two layers at 4 x 1024 tokens, torch.compile, SGD, as
`python -m ptxgemm model` runs them.

    python scripts/profile_model_step.py kernels qwen2-1.5b OUT.json   # CUDA time by kernel name (torch.profiler)
    python scripts/profile_model_step.py gemms qwen2-1.5b OUT.json     # each GEMM op's shapes and its kernels' time
    python scripts/profile_model_step.py host qwen2-1.5b               # host time per ptxgemm call, stage by stage

`gemms` matches every GEMM op (ptxgemm::mm, aten::mm/addmm/...) to the kernels it launched, so a step's GEMM time
reads shape by shape (ptxgemm's kernels are all named gemm_cooperative or gemm_pingpong). `host` wraps the torch
op's implementation and its stages with timers (each wrapper adds well under a microsecond) and times one GEMM
through the op, through its implementation directly and through torch.mm."""
from __future__ import annotations

import collections
import copy
import json
import sys
import time

STEPS, WARM = 3, 5
GEMM_OPS = ("ptxgemm::mm", "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


def build(torch, arch: str):
    """{"stock": step, "ptxgemm": step}: compiled training steps of the two models, warmed up."""
    from ptxgemm.bench import transformer_models as M

    dev = torch.device("cuda")
    stock = M.build_stock(torch, arch, 2, M.DIMS[arch], dev)
    models = {"stock": stock, "ptxgemm": copy.deepcopy(stock)}
    M.ptxgemm_prepare(models["ptxgemm"], arch)
    ids = M.tokens(torch, M.DIMS[arch]["vocab_size"], 4, 1024, dev, 1)
    steps = {}
    for name, m in models.items():
        m.train()
        opt = torch.optim.SGD(m.parameters(), lr=1e-6)   # the model benchmark's optimizer
        steps[name] = M.train_step(torch, torch.compile(m, mode="default", dynamic=False), ids, opt)
        for _ in range(WARM):
            steps[name]()
    torch.cuda.synchronize()
    return steps


def profiled(torch, step, shapes: bool):
    acts = [torch.profiler.ProfilerActivity.CUDA] + ([torch.profiler.ProfilerActivity.CPU] if shapes else [])
    with torch.profiler.profile(activities=acts, record_shapes=shapes) as prof:
        for _ in range(STEPS):
            step()
        torch.cuda.synchronize()
    return prof.events()


def kernels(torch, steps) -> dict:
    out = {}
    for name, step in steps.items():
        t, n = collections.Counter(), collections.Counter()
        for e in profiled(torch, step, False):
            if e.device_type == torch.autograd.DeviceType.CUDA:
                t[e.name[:90]] += e.device_time_total / STEPS
                n[e.name[:90]] += 1 / STEPS
        out[name] = {"total_us": sum(t.values()),
                     "kernels": {k: [round(v, 1), round(n[k], 1)] for k, v in t.most_common(40)}}
        print(f"== {name}: GPU time per step {sum(t.values()) / 1e3:.2f} ms")
        for k, v in t.most_common(25):
            print(f"  {v:9.1f} us  x{n[k]:5.1f}  {k}")
    return out


def gemms(torch, steps) -> dict:
    out = {}
    for name, step in steps.items():
        per = collections.defaultdict(lambda: [0.0, 0, set()])
        total = 0.0
        for e in profiled(torch, step, True):
            if e.name in GEMM_OPS and e.kernels:
                key = f"{e.name} {e.input_shapes}"
                t = sum(k.duration for k in e.kernels) / STEPS
                per[key][0] += t
                per[key][1] += 1
                per[key][2].update(k.name[:60] for k in e.kernels)
                total += t
        ops = {k: [round(v[0], 1), v[1] // STEPS, sorted(v[2])] for k, v in sorted(per.items(), key=lambda p: -p[1][0])}
        out[name] = {"gemm_us_matched": total, "ops": ops}
        print(f"== {name}: GEMM ops' kernels {total / 1e3:.2f} ms per step")
        for k, v in ops.items():
            print(f"  {v[0]:9.1f} us x{v[1]}  {k[:150]}  {v[2]}")
    return out


def host(torch, steps) -> None:
    from ptxgemm import gemm
    from ptxgemm.runtime import driver, patch
    from ptxgemm.torch import ops, tensors

    for name, step in steps.items():   # the host's time to enqueue a step (no sync inside it) and the step's wall
        h, wall = [], []
        for _ in range(10):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            step()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            h.append(t1 - t0)
            wall.append(time.perf_counter() - t0)
        print(f"{name}: host enqueue {sorted(h)[5] * 1e3:.2f} ms, wall {sorted(wall)[5] * 1e3:.2f} ms per step "
              f"(median of 10)")
    spent, count = collections.Counter(), collections.Counter()

    def timed(label, fn):
        def wrapper(*a, **k):
            t = time.perf_counter_ns()
            try:
                return fn(*a, **k)
            finally:
                spent[label] += time.perf_counter_ns() - t
                count[label] += 1
        return wrapper
    ops.mm_impl = timed("mm_impl (all inside the op)", ops.mm_impl)
    ops._dense = timed("_dense", ops._dense)
    tensors.signature = timed("signature", tensors.signature)
    gemm.GemmPlan.launch_at = timed("launch_at", gemm.GemmPlan.launch_at)
    patch.AddressSlots.bind = timed("slots.bind", patch.AddressSlots.bind)
    driver.PreparedLaunch.__call__ = timed("cuLaunchKernelEx", driver.PreparedLaunch.__call__)
    for _ in range(10):
        steps["ptxgemm"]()
    torch.cuda.synchronize()
    calls = count["_dense"]
    print(f"per call over {calls} calls ({calls / 10:.0f} per step):")
    for k in spent:
        print(f"  {k:<30} {spent[k] / calls / 1e3:7.2f} us per GEMM call ({count[k] / calls:.1f} per call)")
    dev = torch.device("cuda")
    a = torch.randn(4096, 1536, device=dev, dtype=torch.bfloat16)
    b = torch.randn(1536, 256, device=dev, dtype=torch.bfloat16)
    for label, f in (("torch.ops.ptxgemm.mm.default", lambda: torch.ops.ptxgemm.mm.default(a, b)),
                     ("ops.mm_impl", lambda: ops.mm_impl(a, b)), ("torch.mm", lambda: torch.mm(a, b))):
        with torch.no_grad():
            for _ in range(50):
                f()
            torch.cuda.synchronize()
            t0 = time.perf_counter_ns()
            for _ in range(500):
                f()
            t1 = time.perf_counter_ns()
            torch.cuda.synchronize()
        print(f"{label:<32} {(t1 - t0) / 500 / 1e3:7.2f} us host per call (issue time, 4096x256x1536)")


def main(argv) -> int:
    if len(argv) < 2 or argv[0] not in ("kernels", "gemms", "host"):
        print(__doc__)
        return 2
    import torch

    mode, arch = argv[0], argv[1]
    steps = build(torch, arch)
    if mode == "host":
        host(torch, steps)
        return 0
    result = (kernels if mode == "kernels" else gemms)(torch, steps)
    if len(argv) > 2:
        with open(argv[2], "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
