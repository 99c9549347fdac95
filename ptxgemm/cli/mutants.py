"""`python -m ptxgemm mutants`: each synchronization instruction of a kernel deleted or weakened, and what on the
GPU kills each mutant (ptxgemm.tools.mutants). --list needs no GPU."""
from __future__ import annotations

import json
import sys

from ..errors import ConfigError
from ..kernel.config import GemmConfig
from ..kernel.layout import FILL_STAGES
from ..runtime import driver
from ..tools import mutant_catalog, mutants
from . import options

MUTANT_PRESETS = {"default": {}, "cluster": {"cluster_m": 2},
                  "cooperative": {"schedule": "cooperative", "block_m": 256},
                  "cooperative-cluster": {"schedule": "cooperative", "block_m": 256, "cluster_m": 2},
                  "cooperative-cluster-n": {"schedule": "cooperative", "block_m": 128, "block_n": 256, "cluster_n": 2},
                  "split": {"splits": 3},
                  # ... on the 64-row pingpong, whose final loads two partials at once (cfg.fixup_batch 2): with 4
                  # splits it adds a pair, then the last one alone, so both of its loops run under the mutants
                  "split-pairs": {"block_m": 64, "splits": 4},
                  # ... on a pair along M (B multicast): both CTAs on the same split of adjacent tiles, each with its
                  # own flag and partial slots (splitk.ptx.j2: tile = work * 2 + rank)
                  "split-cluster": {"block_m": 64, "cluster_m": 2, "splits": 4},
                  "cooperative-split": {"schedule": "cooperative", "block_m": 128, "block_n": 256, "splits": 3},
                  # the stream-K tail (streamk.ptx.j2): its fix-up's publish, poll and reset, single and in pairs
                  "stream-k": {"schedule": "cooperative", "block_m": 128, "block_n": 256, "stream_k": True},
                  "stream-k-cluster": {"schedule": "cooperative", "block_m": 128, "block_n": 256, "cluster_m": 2,
                                       "stream_k": True},
                  # the fused epilogue's source tile (its full/empty mbarriers), and blockwise fp8 promotion
                  # (col_pairs: the workloads' N are even and their bias a fresh allocation, so plans read it in pairs)
                  "epilogue": {"source_dtype": "bfloat16", "bias": "col", "activation": "gelu", "col_pairs": True},
                  "cooperative-epilogue": {"schedule": "cooperative", "block_m": 256, "source_dtype": "float16",
                                           "bias": "row", "activation": "silu"},
                  # the cooperative epilogue with a slot for every panel (cfg.epi_whole_tile): the whole tile staged
                  # in one batch, one wait, fence, pair of barriers and bulk group a tile
                  "cooperative-whole-tile": {"schedule": "cooperative", "block_m": 256, "stages": 3},
                  # the shape of the fuzzer's case that showed the source tile's read-then-reload race (issue 22):
                  # 64-row pingpong tiles, fp32 S and out (the longest S reads), column scales
                  "epilogue-fp32": {"block_m": 64, "in_dtype": "float16", "out_dtype": "float32",
                                    "source_dtype": "float32", "alpha": True, "col_scale": True, "activation": "relu",
                                    "col_pairs": True},
                  "blockwise": {"schedule": "cooperative", "block_m": 128, "block_n": 128,
                                "in_dtype": "float8_e4m3fn", "b_major": "k", "block_scale": True},
                  # issue 24's one-product-set mainloop: two m64 row blocks per consumer, each retired and promoted
                  # in turn, the stage released after the second
                  "blockwise-wide": {"schedule": "cooperative", "block_m": 256, "block_n": 128,
                                     "in_dtype": "float8_e4m3fn", "b_major": "k", "block_scale": True},
                  # issue 49's A scales brought by the producer's warp 0 (cfg.bs_a_in_smem): the pingpong two-set
                  # loop, each lane's cp.async.mbarrier.arrive.noinc on the stage's full barrier. A 3-stage ring: a
                  # full count one short leaves one arrival over per phase, which reaches the next use of the barrier,
                  # so the error grows by one each time a stage comes round; its ring must come round more often
                  # than the full count (33) in the workloads' k-loops for the stage to be read before it landed
                  "blockwise-narrow": {"block_m": 64, "block_n": 128, "in_dtype": "float8_e4m3fn", "b_major": "k",
                                       "block_scale": True, "stages": 3},
                  # issue 49's narrow unsplit tiles in a deep ring, which take the one-set loop (GemmConfig.
                  # bs_product_sets): the pingpong's one-set loop with A's scales brought by the producer; 9 stages,
                  # the shallowest ring that takes it, so that the workloads' k-loops bring each stage round
                  "blockwise-deep": {"block_m": 64, "block_n": 64, "in_dtype": "float8_e4m3fn", "b_major": "k",
                                     "block_scale": True, "stages": FILL_STAGES + 1},
                  # ... and the wide one-set pingpong the selection offers at small M (BLOCK_SCALE_SMALL_M_TILES:
                  # 64x24576x1536's pick), whose staging is three times the narrow tile's
                  "blockwise-small-m": {"block_m": 64, "block_n": 192, "in_dtype": "float8_e4m3fn", "b_major": "k",
                                        "block_scale": True},
                  # issue 49's A scales M-major, one TMA box a stage on the stage's full barrier (its bytes in the
                  # expect_tx: the "scale box uncounted" mutant), on the 256-row tile's one-set loop (3 stages)
                  "blockwise-mn": {"schedule": "cooperative", "block_m": 256, "block_n": 128,
                                   "in_dtype": "float8_e4m3fn", "b_major": "k", "block_scale": True,
                                   "block_scale_a_mn": True},
                  # issue 24's swap-AB under blockwise scales: the pingpong two-set loop with the tables' axes
                  # traded (the workloads' C-order outs make GemmPlan swap the problem, as the preset says)
                  "blockwise-swapped": {"block_m": 64, "block_n": 32, "c_major": "m", "in_dtype": "float8_e4m3fn",
                                        "b_major": "k", "block_scale": True, "block_scale_swapped": True},
                  # the grouped kernel (issue 25): its walk's scan and tables, and the row copy past a group's end
                  "grouped": {"schedule": "cooperative", "block_m": 128, "block_n": 256, "b_major": "k",
                              "grouped": "contiguous", "group_capacity": 512},
                  # ... on pairs along M (B multicast): the idle CTA's releases of its peer's stages
                  "grouped-pair": {"schedule": "cooperative", "block_m": 128, "block_n": 256, "b_major": "k",
                                   "cluster_m": 2, "grouped": "contiguous", "group_capacity": 512},
                  # ... with the stream-K tail cut on the device: its fix-up in the grouped kernel (workloads whose
                  # tail the device cuts: ptxgemm.tools.mutant_worker.GROUPED_SK_WORKLOADS)
                  "grouped-sk": {"schedule": "cooperative", "block_m": 128, "block_n": 256, "b_major": "k",
                                 "grouped": "contiguous", "group_capacity": 16, "stream_k": True},
                  "grouped-masked": {"schedule": "cooperative", "block_m": 128, "block_n": 128,
                                     "grouped": "masked", "group_capacity": 512},
                  "grouped-k": {"schedule": "cooperative", "block_m": 128, "block_n": 256, "a_major": "mn",
                                "b_major": "mn", "grouped": "k", "group_capacity": 64}}


#: the command's --help text (its one-line summary is in ptxgemm/cli/main.py's table)
DESCRIPTION = ("Mutation testing of the GEMM's barriers, fences and waits (see ptxgemm/tools/mutants.py). "
               "--list needs no GPU; a run needs an sm_90 GPU.")


def add_arguments(p) -> None:
    p.add_argument("--preset", action="append", choices=sorted(MUTANT_PRESETS), default=None,
                   help="a named config to mutate (repeatable; default: the config options below, i.e. the default "
                        "kernel); 'cluster' is the default kernel with cluster_m=2, 'cooperative' the "
                        "cooperative 256x128 one, 'cooperative-cluster' that with cluster_m=2, "
                        "'cooperative-cluster-n' the cooperative 128x256 with cluster_n=2 (A multicast), 'split' the "
                        "default kernel with split-K 3, 'split-pairs' the pingpong 64x128 with split-K 4 (its final "
                        "adds the partials two at a time), 'split-cluster' that on pairs along M (cluster_m=2), "
                        "'cooperative-split' the cooperative 128x256 with split-K 3, "
                        "'stream-k' the cooperative 128x256 with the stream-K tail, 'stream-k-cluster' that with "
                        "cluster_m=2, "
                        "'epilogue' the default kernel adding a bf16 source tile, a column bias and gelu, "
                        "'cooperative-epilogue' the cooperative 256x128 with an fp16 source, a row bias and silu, "
                        "'cooperative-whole-tile' the cooperative 256x128 on 3 stages, which stages its whole tile "
                        "at once (a slot per panel), "
                        "'epilogue-fp32' the pingpong 64x128 fp16 -> fp32 with an fp32 source, column scales and "
                        "relu, "
                        "'blockwise' the fp8 cooperative 128x128 with blockwise scales (two product sets), "
                        "'blockwise-wide' the fp8 cooperative 256x128 with blockwise scales (one product set), "
                        "'blockwise-narrow' the fp8 pingpong 64x128 with blockwise scales (A's scales brought by "
                        "the producer into shared memory), "
                        "'blockwise-deep' the fp8 pingpong 64x64 with blockwise scales in the shallowest ring that "
                        "takes the one-set loop, 'blockwise-small-m' the fp8 pingpong 64x192 with blockwise "
                        "scales (the one-set loop on a wide tile), "
                        "'blockwise-mn' the fp8 cooperative 256x128 with blockwise scales, A's M-major by one TMA box "
                        "a stage, "
                        "'blockwise-swapped' the fp8 pingpong 64x32 swap-AB tile with blockwise scales (the "
                        "problem swapped, the scale tables' axes traded), "
                        "'grouped' the grouped kernel "
                        "(contiguous, 128x256, B K-major), 'grouped-pair' the same on pairs along M (B multicast), "
                        "'grouped-sk' the same with the stream-K tail (cut on the device), "
                        "'grouped-masked' its masked form (128x128) and 'grouped-k' "
                        "its k form (weight gradients, both operands MN-major) on grouped workloads")
    p.add_argument("--list", action="store_true",
                   help="enumerate the mutants without a GPU and without running them (default off: run them)")
    p.add_argument("--build", action="store_true", help="with --list: also assemble every mutant (kills the ones "
                                                          "ptxas rejects, finds equivalent ones) (default off)")
    p.add_argument("--kind", action="append", default=None,
                   help="only mutants of this instruction kind, one of "
                        f"{', '.join(sorted(k.name for k in mutant_catalog.SYNC_KINDS))} (repeatable; default: all)")
    p.add_argument("--template", default=None,
                   help="only mutants of lines a template wrote, itself or through its macros, e.g. splitk.ptx.j2 "
                        "(default: all)")
    p.add_argument("--json", default=None, help="write the results as JSON to this path (default: none)")
    p.add_argument("--timeout", type=float, default=mutants.DEFAULT_TIMEOUT_S,
                   help=f"seconds a mutant may run before it counts as hung (default {mutants.DEFAULT_TIMEOUT_S:.0f})")
    p.add_argument("--repeats", type=int, default=2, help="launches per workload per mutant (default 2)")
    options.add_config_arguments(p.add_argument_group("GEMM configuration (when no --preset is given)"))


def run(args) -> int:
    if args.repeats < 1 or args.timeout <= 0:
        raise ConfigError("--repeats must be >= 1 and --timeout > 0")
    known = {k.name for k in mutant_catalog.SYNC_KINDS}
    for kind in args.kind or ():
        if kind not in known:
            raise ConfigError(f"--kind: must be one of {', '.join(sorted(known))}, got {kind!r}")
    configs = ([GemmConfig(**MUTANT_PRESETS[p]) for p in args.preset] if args.preset
               else [options.config_from_args(args)])
    if not args.list:
        driver.require_sm90("running mutants (use --list to enumerate them without a GPU)")
    result = {"configs": []}
    unexplained = 0
    for config in configs:
        ptx, found = mutant_catalog.enumerate_mutants(config)
        if args.kind:
            found = [m for m in found if m.kind in args.kind]
        if args.template:
            found = [m for m in found if mutant_catalog.in_template(m, args.template)]
        extra = {}
        if args.build or not args.list:
            texts = mutants.build(ptx, found, progress=lambda s: print(s, file=sys.stderr, flush=True))
            if not args.list:
                extra = mutants.run_on_gpu(config, ptx, found, texts, timeout_s=args.timeout, repeats=args.repeats,
                                           progress=lambda s: print(s, file=sys.stderr, flush=True))
        print(mutants.format_table(config, found), flush=True)
        unexplained += sum(m.reason.startswith("unexplained") for m in found)
        result["configs"].append({"config": config.fields(), "description": config.describe(),
                                  "mutated_build": "debug (bounded waits, "
                                                   f"{mutant_catalog.DEBUG_TIMEOUT_NS // 1_000_000} ms)",
                                  **extra, "mutants": [m.record() for m in found]})
    if not args.list:
        info = driver.device_info()
        result = {"gpu": info.name, "driver": info.driver_version_str, "sm_count": info.sm_count, **result}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 1 if unexplained else 0
