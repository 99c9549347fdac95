"""The distributed model benchmark's harness (ptxgemm/bench/distributed.py) on the CPU, run on every rank of a
torchrun job by tests/test_distributed.py: transformers' Llama and Mixtral at toy widths, gloo, the ptxgemm peer on
the reference kernels tests/distributed_checks.py registers for the ops' CPU key, torch.compile's aot_eager backend;
rank 0 writes the rows where the CLI would (bench.distributed.write_row) and errors.json.

    python -m torch.distributed.run --standalone --nproc-per-node 2 tests/distributed_bench_cpu.py \
        --config llama-tp,llama-fsdp,mixtral-fsdp --out DIR"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))   # distributed_checks and tiny_models, beside this file

from tiny_models import TINY  # noqa: E402 - after the path


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--modes", default="eager,compiled")
    args = p.parse_args(argv)

    import distributed_checks

    from ptxgemm.bench import distributed as bench_dist, ranks

    torch, dist, mesh = ranks.init("cpu")
    count = distributed_checks.install_cpu_kernels(torch)

    def counters():   # the reference kernels' calls stand for ptxgemm's plan_stats()
        return {"plans_made": 0, "plan_hits": 0, "calls": count(), "host_us": 0.0}

    sizes = bench_dist.Sizes(layers=2, batch=2, seq=32, accuracy_batch=2, accuracy_seq=32, iters=1, repeats=2)
    rows, errors = [], []
    for config in args.config.split(","):
        arch, parallel = bench_dist.CONFIGS[config]
        got, failed = bench_dist.run_config(torch, dist, mesh, arch, parallel, sizes,
                                            modes=tuple(args.modes.split(",")), device="cpu", dims=TINY[arch],
                                            backend="aot_eager", counters=counters,
                                            log=lambda s: print(s, flush=True))
        rows += got
        errors += [{"config": config, **e} for e in failed]
    if dist.get_rank() == 0:
        for row in rows:
            print(f"wrote {bench_dist.write_row(row, args.out, 'cpu')}", flush=True)
        (Path(args.out) / "errors.json").write_text(json.dumps(errors))
        print(bench_dist.format_table(rows), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
