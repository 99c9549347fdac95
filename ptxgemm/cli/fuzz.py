"""`python -m ptxgemm fuzz`: random calls of run, matmul and GemmPlan against float64 (ptxgemm.tools.fuzz), on the
GPU or, with --emulate, on the plan emulator."""
from __future__ import annotations

import json
import os

from ..errors import ConfigError
from ..tools.fuzz import EmulatedBackend, GpuBackend, MAX_FLOPS, fuzz, gpu_slug


#: the command's --help text (its one-line summary is in ptxgemm/cli/main.py's table)
DESCRIPTION = ("Differential fuzzing: random calls of ptxgemm.run, matmul and GemmPlan (every "
               "layout, dtype, scaling and epilogue argument; device arrays of ptxgemm, torch "
               "and CuPy) against a float64 reference with ptxgemm.accuracy's elementwise "
               "bounds. A failure is shrunk and printed as a runnable snippet. Exit status 1 when "
               "any case is wrong, refused or crashed, or an illegal input's error does not "
               "name its argument; 2 on bad input or without a GPU (unless --emulate).")


def add_arguments(p) -> None:
    p.add_argument("--cases", type=int, default=1000, help="cases to run (default 1000)")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: a fresh one, printed)")
    p.add_argument("--out", default=None, help="directory for the report, fuzz_<gpu>_<seed>.json (default: none)")
    p.add_argument("--emulate", action="store_true",
                   help="run the plan emulator on the CPU instead of the GPU (default off)")
    p.add_argument("--max-flops", type=float, default=None,
                   help=f"largest problem, 2*batches*M*N*K (default {MAX_FLOPS['gpu']:g} on the GPU, "
                        f"{MAX_FLOPS['emulate']:g} emulated)")
    p.add_argument("--no-shrink", action="store_true", help="report failures as drawn (default: shrink them)")
    p.add_argument("--devices", type=int, default=1, metavar="N",
                   help="spread the dense cases over the first N CUDA devices of this process, one drawn per case "
                        "(its arrays and call there, the others' plans and contexts alive beside it: ptxgemm on "
                        "several GPUs at once); N GPUs needed, not with --emulate (default 1: the seed's draws as "
                        "they always were)")
    p.add_argument("--grouped", type=int, default=0, metavar="N",
                   help="also N random grouped_matmul cases (contiguous, masked and k-grouped forms, G up to 256, "
                        "empty and unaligned groups, sizes whose rows are not 16-byte multiples, every layout of a, "
                        "b and out, a share through grouped_run on numpy arrays; rows outside the groups checked "
                        "untouched) and the grouped API's illegal inputs; with --emulate, on the plan emulator; "
                        "with --out, their report also in fuzz_<gpu>_<seed>_grouped.json (default 0)")


def run(args) -> int:
    if args.cases < 1:
        raise ConfigError(f"--cases: must be >= 1, got {args.cases}")
    if args.max_flops is not None and args.max_flops <= 0:
        raise ConfigError(f"--max-flops: must be > 0, got {args.max_flops}")
    if args.grouped < 0:
        raise ConfigError(f"--grouped: must be >= 0, got {args.grouped}")
    if args.devices < 1:
        raise ConfigError(f"--devices: must be >= 1, got {args.devices}")
    if args.devices > 1 and args.emulate:
        raise ConfigError("--devices: the plan emulator has no devices; several GPUs are the GPU fuzzer's (drop "
                          "--emulate)")
    seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")
    backend = EmulatedBackend() if args.emulate else GpuBackend(args.devices)
    on = f" ({args.devices} devices)" if args.devices > 1 else ""
    print(f"fuzz: {args.cases} cases, seed {seed}, {backend.name} on {backend.device_name()}{on}", flush=True)
    report = fuzz(args.cases, seed, backend, max_flops=args.max_flops, shrink=not args.no_shrink,
                  devices=args.devices, log=lambda s: print(s, flush=True))
    print(f"{report['correct']} correct, {report['wrong']} wrong, {report['refused']} refused, "
          f"{report['crashed']} crashed in {report['seconds']} s (seed {seed}); illegal inputs: "
          f"{report['bad_inputs']['named']} of {report['bad_inputs']['checked']} name their argument")
    failed_grouped = False
    if args.grouped:
        from ..tools.fuzz_grouped import fuzz_grouped

        g = report["grouped"] = fuzz_grouped(args.grouped, seed, log=lambda s: print(s, flush=True),
                                             backend="emulate" if args.emulate else "gpu")
        print(f"grouped: {g['correct']} correct, {g['wrong']} wrong, {g['refused']} refused, {g['crashed']} crashed "
              f"in {g['seconds']} s; illegal inputs: {g['bad_inputs']['named']} of {g['bad_inputs']['checked']} "
              f"name their argument")
        for r in g["bad_inputs"]["misnamed"]:
            print(f"  misnamed: {r['label']}: expected {r['argument']!r}, got {r['error'][:150]}")
        failed_grouped = bool(g["wrong"] or g["refused"] or g["crashed"] or g["bad_inputs"]["misnamed"])
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        stem = f"fuzz_{gpu_slug(report['gpu']) if not args.emulate else 'emulated'}_{seed}"
        written = [(f"{stem}.json", report)]
        if args.grouped:   # the grouped cases' own report, their counts at the top (issue 48's result files)
            written.append((f"{stem}_grouped.json", {"gpu": report["gpu"], "seed": seed, **report["grouped"]}))
        for name, content in written:
            path = os.path.join(args.out, name)
            with open(path, "w") as f:
                json.dump(content, f, indent=1, default=str)
            print(f"wrote {path}")
    failed = (report["wrong"] or report["refused"] or report["crashed"] or report["bad_inputs"]["misnamed"]
              or failed_grouped)
    return 1 if failed else 0
