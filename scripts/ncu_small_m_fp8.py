"""Device target for ncu (torch needed for the 0-d scales): 64x7168x16384 fp8, blockwise pp64x128 (56 CTAs),
pp64x128k2 (112) and pp64x192k2 (76), and per-tensor with the selection's tile; each launched twice.

    ncu --kernel-name regex:gemm_ --launch-count 8 --clock-control none --section SpeedOfLight \
        --section MemoryWorkloadAnalysis --section WarpStateStats --csv --page details \
        python3 scripts/ncu_small_m_fp8.py

Docs/perf-notes.md, issue 24, step 4 reads its DRAM throughputs."""
import ml_dtypes
import numpy as np

import ptxgemm.gemm as G
from ptxgemm.bench.suite import parse_tag
from ptxgemm.runtime import arrays, driver

rng = np.random.default_rng(1)
m, n, k = 64, 7168, 16384
f8 = ml_dtypes.float8_e4m3fn
rb = lambda s: (rng.integers(0, 256, s, dtype=np.uint8) & 0xBF).view(f8)
da = arrays.DeviceArray.from_numpy(rb((m, k))); db = arrays.DeviceArray.from_numpy(np.asfortranarray(rb((n, k)).T))
sa = arrays.DeviceArray.from_numpy(rng.uniform(0.5, 2, (m, k // 128)).astype(np.float32))
sb = arrays.DeviceArray.from_numpy(rng.uniform(0.5, 2, (k // 128, n // 128)).astype(np.float32))
out = arrays.DeviceArray.empty((m, n), ml_dtypes.bfloat16)
# a tag's tile; the plan adds the dtypes, layouts and blockwise scaling from its arrays (as bench --variants)
plans = [G.GemmPlan(da, db, out, parse_tag(t), scale_a=sa, scale_b=sb) for t in ("pp64x128", "pp64x128k2", "pp64x192k2")]
import torch
ts, tt = torch.tensor(1.0, device="cuda"), torch.tensor(1.0, device="cuda")
plans.append(G.GemmPlan(da, db, arrays.DeviceArray.empty((m, n), ml_dtypes.bfloat16), None, scale_a=ts, scale_b=tt))
for p in plans:
    print(p.config.describe(), flush=True)
    for _ in range(2):
        p.launch()
    driver.synchronize()
