"""Device probe (torch needed): L2 promotion 128B vs 256B for fp8 operand loads (blockwise on DeepGEMM's 18 shapes, and per-tensor at
M in {64,128} beside torch._scaled_mm). Same process, same configs, plans built with each promotion.

    PYTHONPATH=. python3 scripts/l2_promotion_probe.py ROUNDS block,tensor OUT.json

Found no gain from 256B (docs/perf-notes.md, issue 24, step 4); kept for the next GPU and for the order bias it
showed: the kernel method timed the same kernel 7-9% faster when it ran first."""
import json, sys, statistics, time
import numpy as np, ml_dtypes, torch
import ptxgemm.gemm as G
from ptxgemm.bench.suite import parse_tag
from ptxgemm.runtime import timing, arrays, driver
from ptxgemm.bench import kernel_time, deepgemm

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 3
which = sys.argv[2] if len(sys.argv) > 2 else "block,tensor"
rng = np.random.default_rng(7)
f8 = ml_dtypes.float8_e4m3fn

def rand_f8(shape):
    return (rng.integers(0, 256, shape, dtype=np.uint8) & 0xBF).view(f8)

def plan(a, b, out, cfg, promo, **kw):
    G.LOAD_L2_PROMOTION = promo
    try:
        return G.GemmPlan(a, b, out, cfg, **kw)
    finally:
        G.LOAD_L2_PROMOTION = "128B"

rows = []
def measure(tag, m, n, k, launchers):
    res = {}
    for r in range(ROUNDS):
        kern = kernel_time.kernel_ms(launchers, torch)
        burst = timing.time_interleaved(launchers, rounds=10)
        for name in launchers:
            res.setdefault(name, {"kernel": [], "burst": []})
            res[name]["kernel"].append(kern[name]); res[name]["burst"].append(burst[name])
    fl = 2.0 * m * n * k
    row = {"set": tag, "M": m, "N": n, "K": k, "published": deepgemm.published(m, n, k), "impls": {}}
    for name, d in res.items():
        row["impls"][name] = {meth: {"ms": v, "tflops_median": fl / statistics.median(v) / 1e9} for meth, v in d.items()}
    rows.append(row)
    line = f"{tag} {m}x{n}x{k} " + " ".join(f"{nm}: k{row['impls'][nm]['kernel']['tflops_median']:.0f}/b{row['impls'][nm]['burst']['tflops_median']:.0f}" for nm in launchers)
    print(line, flush=True)

if "block" in which:
    for (m, n, k) in deepgemm.SHAPES:
        a = rand_f8((m, k)); bt = rand_f8((n, k))
        da = arrays.DeviceArray.from_numpy(a); db = arrays.DeviceArray.from_numpy(np.asfortranarray(bt.T))
        sa = arrays.DeviceArray.from_numpy(rng.uniform(0.5, 2, (m, -(-k // 128))).astype(np.float32))
        sb = arrays.DeviceArray.from_numpy(rng.uniform(0.5, 2, (-(-k // 128), -(-n // 128))).astype(np.float32))
        outs = [arrays.DeviceArray.empty((m, n), ml_dtypes.bfloat16) for _ in range(8)]
        base = G.GemmPlan(da, db, outs[0], None, scale_a=sa, scale_b=sb)
        # the selection's pick, then other tiles (tile-only configs: the plan adds dtypes, layouts and scaling)
        cfgs = [base.config]
        if m <= 128:
            tags = ("pp64x192", "pp64x192k2", "pp64x128", "pp64x128k2", "coop128x128", "coop128x128k2", "pp64x64",
                    "pp64x64k2")
            cfgs += [parse_tag(t) for t in tags if t != base.config.tag]
        launchers = {}
        i = 0
        for c in cfgs:
            for promo in ("128B", "256B"):
                try:
                    p = plan(da, db, outs[i % 8], c, promo, scale_a=sa, scale_b=sb)
                except Exception as e:
                    print("skip", c.tag, promo, e); continue
                launchers[f"{c.tag}@{promo}"] = (lambda p=p: p.launch())
                i += 1
        measure("block", m, n, k, launchers)

if "tensor" in which:
    for (m, n, k) in [s for s in deepgemm.SHAPES if s[0] <= 128] + [(4096, 7168, 16384)]:
        a = rand_f8((m, k)); bt = rand_f8((n, k))
        da = arrays.DeviceArray.from_numpy(a); db = arrays.DeviceArray.from_numpy(np.asfortranarray(bt.T))
        ta = torch.from_numpy(a.view(np.uint8)).cuda().view(torch.float8_e4m3fn)
        tbt = torch.from_numpy(bt.view(np.uint8)).cuda().view(torch.float8_e4m3fn)
        one = torch.ones((), device="cuda")
        sa = torch.tensor(1.25, device="cuda"); sb = torch.tensor(0.75, device="cuda")
        out = arrays.DeviceArray.empty((m, n), ml_dtypes.bfloat16); out2 = arrays.DeviceArray.empty((m, n), ml_dtypes.bfloat16)
        p1 = plan(da, db, out, None, "128B", scale_a=sa, scale_b=sb)
        p2 = plan(da, db, out2, p1.config, "256B", scale_a=sa, scale_b=sb)
        launchers = {f"{p1.config.tag}@128B": lambda: p1.launch(), f"{p1.config.tag}@256B": lambda: p2.launch(),
                     "torch._scaled_mm": lambda: torch._scaled_mm(ta, tbt.t(), sa, sb, out_dtype=torch.bfloat16)}
        measure("tensor", m, n, k, launchers)

json.dump({"gpu": driver.device_info().name, "date": time.strftime("%Y-%m-%d %H:%M"), "rounds": ROUNDS,
           "method": "kernel: " + kernel_time.METHOD_KERNEL + "; burst: L2 flushed, isolated launches, median of 10 per round",
           "rows": rows}, open(sys.argv[3] if len(sys.argv) > 3 else "l2promo.json", "w"), indent=1)
