"""The GPU's DRAM write ceiling beside the grouped k form's outputs (issue 25 step 11): torch's fill_ of 7.5 and 15 GB
of bf16 (writes only) and a 2 GB copy (read + write), CUDA events, median of 10 after 2 warm-ups.

    python3 scripts/write_bandwidth.py out/write_bw.json"""
import json
import sys

import torch


def median_ms(fn, reps=12, warm=2):
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    times = sorted(times[warm:])
    return times[len(times) // 2]


result = {"gpu": torch.cuda.get_device_name()}
for gb in (7.5, 15.0):
    elements = int(gb * 1e9 / 2)
    ms = median_ms(lambda t=torch.empty(elements, dtype=torch.bfloat16, device="cuda"): t.fill_(1.0))
    result[f"fill_{gb}GB"] = {"ms": ms, "TBps": elements * 2 / ms / 1e9}
a = torch.ones(int(1e9), dtype=torch.bfloat16, device="cuda")
b = torch.empty_like(a)
ms = median_ms(lambda: b.copy_(a))
result["copy_2GB"] = {"ms": ms, "TBps_read_plus_write": 2 * a.numel() * 2 / ms / 1e9}
print(json.dumps(result, indent=1))
json.dump(result, open(sys.argv[1], "w"), indent=1)
