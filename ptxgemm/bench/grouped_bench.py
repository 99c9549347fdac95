"""`python -m ptxgemm bench --set grouped`: the grouped GEMM against its peers on the `grouped` shape set
(ptxgemm/bench/grouped_shapes.py), in one process, by one method.

Peers (torch is an optional peer: the benchmark needs it, the library does not):
- contiguous: torch._grouped_mm (offs on the device, like ptxgemm), and a loop of ptxgemm GemmPlans, one per
  non-empty group (plans made beforehand; the loop only launches);
- masked: torch.bmm over every group's M_max rows (what a masked decode step does without a grouped kernel), and
  the same loop of ptxgemm plans over each group's masked_m rows;
- fp8 (--in-dtype float8_e4m3fn): torch._scaled_grouped_mm, which takes rowwise scales only. With --scaling row
  both run the same random rowwise scales (per token of a, per channel of each expert's b); with --scaling tensor
  ptxgemm runs per-tensor scales and the peer unit rowwise ones (a little more epilogue work for the peer).

Method: burst (L2 flushed before each launch, CUDA events around the launch, implementations interleaved, median of
`rounds`) and, beside it, back to back (20 launches in a row, warm L2: the method of DeepGEMM's published figures).
TFLOP/s count the rows the groups hold (2 x rows x N x K), never padding. B is K-major for every implementation
(a (G, N, K) array viewed as (G, K, N), as torch._grouped_mm wants it). Each row also carries the largest
difference between ptxgemm's output and the first peer's on the groups' rows, relative to the peer's largest value.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from . import deepgemm_peer, grouped_shapes, kernel_time
from ..plan.epilogue import m_major_table
from .row_log import RowLog
from .suite import geomean

METHOD = ("burst: L2 flushed before each launch, CUDA events around it, implementations interleaved, median of "
          "rounds; b2b: 20 launches back to back, warm L2, mean per launch, median of 3 rounds")


def _inputs(torch, case, dtype):
    """a, b (G, K, N) K-major, counts (int32, on the device) and the rows each group holds, for one case."""
    g, n, k = case.groups, case.n, case.k
    gen = torch.Generator(device="cuda").manual_seed(25)
    make = torch.bfloat16 if dtype == "float8_e4m3fn" else getattr(torch, dtype)
    if case.layout == "k":   # a = x.T of the activations x (total_K, M); b the gradients (total_K, N)
        total = sum(case.counts)
        x = torch.randn(total, case.m, device="cuda", dtype=make, generator=gen)
        b = torch.randn(total, n, device="cuda", dtype=make, generator=gen)
        return x.t(), b, torch.tensor(case.offs(), device="cuda", dtype=torch.int32)
    if case.layout == "contiguous":
        a = torch.randn(sum(case.counts), k, device="cuda", dtype=make, generator=gen)
        counts = torch.tensor(case.offs(), device="cuda", dtype=torch.int32)
    else:
        a = torch.randn(g, case.m_max, k, device="cuda", dtype=make, generator=gen)
        counts = torch.tensor(case.counts, device="cuda", dtype=torch.int32)
    b = torch.randn(g, n, k, device="cuda", dtype=make, generator=gen).transpose(1, 2)
    if dtype == "float8_e4m3fn":
        a, b = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn)
    return a, b, counts


def k_groups(torch, a, b, case, groups):
    """A k-form case's operands (a = x.T, b, as _inputs gives them) cut to `groups`, in that order: their K rows of
    x and b gathered, and the offs of those groups' K (the tools/ experiments on the k form's group order)."""
    starts = [0, *case.offs().tolist()]
    rows = torch.cat([torch.arange(starts[g], starts[g + 1], device=b.device) for g in groups])
    offs = torch.tensor([case.counts[g] for g in groups], device=b.device).cumsum(0).to(torch.int32)
    return a.t()[rows].contiguous().t(), b[rows].contiguous(), offs


def _group_rows(case):
    """(group, first row, end row) of each non-empty group: rows of a (contiguous) or of the group's matrix (k:
    every group, all M rows of its output)."""
    if case.layout == "k":
        return [(g, 0, case.m) for g in range(case.groups)]
    out, start = [], 0
    for g, c in enumerate(case.counts):
        if case.layout == "contiguous":
            if c:
                out.append((g, start, start + c))
            start += c
        elif c:
            out.append((g, 0, c))
    return out


def _block_scales(torch, case, a):
    """Random positive blockwise scales: scale_a one per row of a and 128 of K ((total_M, kb) or (G, M_max, kb)),
    scale_b one per expert and 128x128 block (G, kb, nb)."""
    gen = torch.Generator(device="cuda").manual_seed(26)
    kb, nb = -(-case.k // 128), -(-case.n // 128)
    sa = torch.rand(*a.shape[:-1], kb, device="cuda", generator=gen) * 1.5 + 0.5
    sb = torch.rand(case.groups, kb, nb, device="cuda", generator=gen) * 1.5 + 0.5
    return sa, sb


def _m_major(torch, sa):
    """scale_a's values M-major, as DeepGEMM's get_mn_major_tma_aligned_tensor lays them out for its own call:
    plan.epilogue's table (rows adjacent, each k-block's column padded to 16 bytes with NaN, never read), on sa's
    device."""
    table = torch.from_numpy(m_major_table(sa.cpu().numpy(), fill=float("nan"))).to(sa.device)
    return table.T[:sa.shape[0]]


def _row_scales(torch, case, a):
    """Random positive rowwise scales, shared by every implementation: scale_a one per row of a (a's shape without
    K), scale_b one per output column of each expert (G, N), float32 as torch._scaled_grouped_mm wants them."""
    gen = torch.Generator(device="cuda").manual_seed(27)
    sa = torch.rand(*a.shape[:-1], device="cuda", generator=gen) * 1.5 + 0.5
    sb = torch.rand(case.groups, case.n, device="cuda", generator=gen) * 1.5 + 0.5
    return sa, sb


def _returning(call):
    """A peer that returns its result (torch._grouped_mm has no out=): the launcher keeps the last result, so its
    time is the call's alone (allocation from torch's cache included, as in a model), never a copy's."""
    result = []

    def launch():
        result[:] = [call()]
    return launch, lambda: result[0]


#: the kernel-duration methods (kernel_time.kernel_ms), by the suffix of the row fields they fill: whether the L2 is
#: flushed before each call
KERNEL_METHODS = {"": False, "_flushed": True}


def kernel_fields(kernel: dict, flops: float, published_tflops: float | None) -> dict:
    """A row's kernel-duration fields from `kernel` ({suffix: {implementation: ms}}, KERNEL_METHODS' suffixes; an
    empty dict where the method did not run): per suffix, ptxgemm's ms and its TFLOP/s over DeepGEMM's published
    figure, and DeepGEMM's ms measured here, by its own method, with its time over ptxgemm's (above 1: ptxgemm is
    faster). None where a figure is missing."""
    out = {}
    for suffix, ms in kernel.items():
        ours, theirs = ms.get("ptxgemm"), ms.get(deepgemm_peer.NAME)
        out[f"ptxgemm_kernel{suffix}_ms"] = ours
        out[f"vs_published_kernel{suffix}"] = (flops / ours / 1e9 / published_tflops if ours and published_tflops
                                               else None)
        out[f"deepgemm_kernel{suffix}_ms"] = theirs
        out[f"vs_deepgemm_kernel{suffix}"] = theirs / ours if theirs and ours else None
    return out


def _peers(torch, ptxgemm, case, a, b, counts, dtype, scales=None, scaling="tensor", dg=None):
    """name -> (launcher, its output after a launch) of each peer this case has (blockwise `scales`: DeepGEMM first
    when `dg` (the deep_gemm module) is given and runs the form, then the loop of dense blockwise plans; no library
    in the device's torch runs a blockwise grouped GEMM; rowwise `scales`: the same vectors for
    torch._scaled_grouped_mm and the loop)."""
    peers = {}
    if scales is not None and scaling == "block":
        sa, sb = scales
        if dg is not None and case.layout in deepgemm_peer.GROUPED_FORMS:
            launch, dg_out = deepgemm_peer.grouped_launcher(dg, torch, case, a, b, scales)
            peers[deepgemm_peer.NAME] = (launch, lambda: dg_out)
        out = torch.empty(*a.shape[:-1], case.n, device="cuda", dtype=torch.bfloat16)
        plans = []
        for g, s, e in _group_rows(case):
            if case.layout == "contiguous":
                plans.append(ptxgemm.GemmPlan(a[s:e], b[g], out[s:e], scale_a=sa[s:e], scale_b=sb[g]))
            else:
                plans.append(ptxgemm.GemmPlan(a[g, s:e], b[g], out[g, s:e], scale_a=sa[g, s:e], scale_b=sb[g]))
        peers["ptxgemm matmul per group"] = (lambda: [p.launch() for p in plans], lambda: out)
        return peers
    if dtype == "float8_e4m3fn":
        if case.layout == "contiguous" and hasattr(torch, "_scaled_grouped_mm"):
            sa, sb = scales if scaling == "row" else (
                torch.ones(a.shape[0], device="cuda", dtype=torch.float32),
                torch.ones(case.groups, case.n, device="cuda", dtype=torch.float32))
            peers["torch._scaled_grouped_mm"] = _returning(
                lambda: torch._scaled_grouped_mm(a, b, sa, sb, offs=counts, out_dtype=torch.bfloat16))
    elif case.layout in ("k", "contiguous"):
        peers["torch._grouped_mm"] = _returning(lambda: torch._grouped_mm(a, b, offs=counts))
    else:
        out = torch.empty(case.groups, case.m_max, case.n, device="cuda", dtype=a.dtype)
        peers["torch.bmm"] = (lambda: torch.bmm(a, b, out=out), lambda: out)
    # the loop of dense ptxgemm plans, one per non-empty group (k: one per group; K = 0 gives zeros)
    shape = (case.groups, case.m) if case.layout == "k" else tuple(a.shape[:-1])
    loop_out = torch.empty(*shape, case.n, device="cuda", dtype=torch.bfloat16 if dtype == "float8_e4m3fn" else a.dtype)
    plans = []
    k_ends = [0, *case.offs().tolist()] if case.layout == "k" else None
    for g, s, e in _group_rows(case):
        rows = slice(s, e) if case.layout == "contiguous" else (g, slice(s, e))
        row_scales = {"scale_a": scales[0][rows], "scale_b": scales[1][g]} if scaling == "row" else {}
        if case.layout == "k":
            plans.append(ptxgemm.GemmPlan(a[:, k_ends[g]:k_ends[g + 1]], b[k_ends[g]:k_ends[g + 1]], loop_out[g]))
        else:
            plans.append(ptxgemm.GemmPlan(a[rows], b[g], loop_out[rows], **row_scales))
    peers["ptxgemm matmul per group"] = (lambda: [p.launch() for p in plans], lambda: loop_out)
    return peers


TOGGLES = ("hint", "store-hint", "stream-k", "sort")
"""The --variants that toggle one GemmConfig field of the default plan (run's docstring says which)."""


def run(rounds: int, in_dtype: str, out_dir: str, name: str | None, variants: str = "",
        scaling: str = "tensor", deepgemm_dir: str | None = None, scale_a_major: str = "k") -> int:
    """variants: "" (none), "all" (the other grouped tiles and the TOGGLES, timed beside the default), "hint" (the
    L2 hint of one-row groups' B toggled only), "store-hint" (the L2 hint of C's stores toggled only), "stream-k"
    (the stream-K tail toggled only, where the kernel takes it), "sort" (the k form's group order toggled only) or
    tags (comma-separated: those tiles). scale_a_major "m": the contiguous cases give ptxgemm's grouped kernel
    scale_a M-major (_m_major: the same values, the layout DeepGEMM is given)."""
    import torch

    import ptxgemm
    from ..runtime import driver, timing

    info = driver.require_sm90("the grouped benchmark")
    gpu = info.name
    rows = []
    from ..plan import grouped_call

    block = scaling == "block"
    dg = deepgemm_peer.load(deepgemm_dir) if deepgemm_dir is not None else None
    if dg is not None:
        print(f"# {gpu}; peer {deepgemm_peer.describe(dg)}", flush=True)
    held = {"block": "blockwise", "row": "vectors"}.get(scaling)
    if held in grouped_call.UNVERIFIED:
        print(f"bench --set grouped --scaling {scaling}: that grouped kernel has not run on a GPU yet "
              f"(ptxgemm.plan.grouped_call.UNVERIFIED); nothing to time")
        return 0
    # with DeepGEMM beside it: its own 10 shapes only (the cases its published table has), the run kept short
    cases = [c for c in grouped_shapes.CASES if dg is None or c.published_tflops]
    amn = block and scale_a_major == "m"
    path = Path(out_dir) / (f"bench_{gpu.replace(' ', '_')}_grouped_{in_dtype}"
                            f"{'_' + scaling if scaling != 'tensor' else ''}{'_amn' if amn else ''}"
                            f"{'_' + name if name else ''}.json")
    log = RowLog(out_dir, path.stem, {"gpu": gpu, "set": "grouped", "in_dtype": in_dtype, "scaling": scaling,
                                      **({"scale_a_major": "m (contiguous cases)"} if amn else {}),
                                      "rounds": rounds, "method": METHOD})
    for case in cases:
        log.sync(rows)   # the last case's rows (a case adds one per peer, or its refusal)
        if case.layout == "k" and ("k" in grouped_call.UNVERIFIED or in_dtype == "float8_e4m3fn"):
            continue   # the k form runs once its GPU tests pass, and reads 16-bit operands only
        a, b, counts = _inputs(torch, case, in_dtype)
        kw = {"masked_m" if case.layout == "masked" else "offs": counts}
        scales = (_block_scales(torch, case, a) if block else _row_scales(torch, case, a) if scaling == "row" else
                  None)
        scale = ({"scale_a": scales[0], "scale_b": scales[1]} if scales is not None else
                 {"scale_a": 1.0, "scale_b": 1.0} if in_dtype == "float8_e4m3fn" else {})
        if amn and case.layout == "contiguous":
            scale["scale_a"] = _m_major(torch, scales[0])
        plan = ptxgemm.GroupedPlan(a, b, **kw, **scale)
        mine = torch.from_dlpack(plan.out)
        peers, refused = {}, {}
        for peer, (launch, result) in _peers(torch, ptxgemm, case, a, b, counts, in_dtype, scales, scaling,
                                             dg).items():
            try:   # a peer that refuses these groups (alignment rules) is reported, not timed
                launch()
                torch.cuda.synchronize()
                peers[peer] = (launch, result)
            except Exception as e:  # noqa: BLE001 - the peer's own error, recorded in the results
                refused[peer] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
                print(f"{case.name:34s} {peer:26s} refused: {refused[peer]}", flush=True)
        # the grouped kernel's other tiles, timed beside the default's (what the default config should learn)
        # (into the default's output: a k-form output is G x M x N, 15 GB for DeepSeek-V3's gate-up weights)
        # and the L2 hint for one-row groups' B loads toggled (GemmConfig.group_stream_hint)
        tags = (grouped_call.GROUPED_TILES if variants == "all" else ()
                if variants in ("",) + TOGGLES else variants.split(","))
        others = {tag: ptxgemm.GemmConfig.from_tag(tag) for tag in tags if tag != plan.config.tag}
        if variants in ("all", "hint") and case.layout != "k":
            hint = not plan.config.stream_hint
            others[f"{plan.config.tag} hint={'on' if hint else 'off'}"] = dataclasses.replace(
                plan.config, group_stream_hint=hint)
        if variants in ("all", "store-hint"):
            hint = not plan.config.store_hint
            others[f"{plan.config.tag} store-hint={'on' if hint else 'off'}"] = dataclasses.replace(
                plan.config, group_store_hint=hint)
        if variants in ("all", "stream-k"):
            tail = not plan.config.stream_k
            try:   # the k form, blockwise scales: no tail to toggle
                others[f"{plan.config.tag} stream-k={'on' if tail else 'off'}"] = dataclasses.replace(
                    plan.config, stream_k=tail)
            except ptxgemm.ConfigError:
                pass
        if variants in ("all", "sort") and case.layout == "k":
            order = not plan.config.group_sorted
            others[f"{plan.config.tag} sort={'on' if order else 'off'}"] = dataclasses.replace(
                plan.config, group_sort=order)
        timed = {f"ptxgemm {label}": ptxgemm.GroupedPlan(a, b, **kw, **scale, out=plan.out, config=cfg).launch
                 for label, cfg in others.items()}
        launchers = {"ptxgemm": plan.launch, **timed, **{p: f for p, (f, _) in peers.items()}}
        burst = timing.time_interleaved(launchers, rounds)
        b2b = timing.time_back_to_back({k: v for k, v in launchers.items() if k not in timed})
        # DeepGEMM's own method where its figure is compared (kernel durations from the profiler, L2 flushed)
        # (DeepGEMM beside it when it runs this case: both by the same function, one process; ptxgemm's plan made
        # again without PDL, kernel_time's rule)
        kernel = {suffix: {} for suffix in KERNEL_METHODS}
        if block and case.published_tflops:
            with driver.programmatic_launches(False):
                unchained = ptxgemm.GroupedPlan(a, b, **kw, **scale, out=plan.out, config=plan.config).launch
            by_kernel = {"ptxgemm": unchained}
            if deepgemm_peer.NAME in peers:
                by_kernel[deepgemm_peer.NAME] = peers[deepgemm_peer.NAME][0]
            kernel = {suffix: kernel_time.kernel_ms(by_kernel, torch, flush=flush)
                      for suffix, flush in KERNEL_METHODS.items()}
        torch.cuda.synchronize()
        if refused:
            rows.append({"case": case.name, "layout": case.layout, "groups": case.groups, "N": case.n, "K": case.k,
                         "in_dtype": in_dtype, "refused": refused})
        first_peer, (_, result) = next(iter(peers.items()))
        peer_out = result()
        diffs = []
        for g, s, e in _group_rows(case):
            mine_rows = mine[s:e] if case.layout == "contiguous" else mine[g, s:e]
            peer_rows = peer_out[s:e] if case.layout == "contiguous" else peer_out[g, s:e]
            if case.layout == "k" and not case.counts[g]:   # an empty group: both must be zeros
                diffs.append(float(mine_rows.float().abs().max() + peer_rows.float().abs().max()))
                continue
            ref = peer_rows.float()
            diffs.append(float((mine_rows.float() - ref).abs().max() / ref.abs().max().clamp_min(1e-30)))
        flops = case.flops
        for peer in peers:
            rows.append({
                "case": case.name, "layout": case.layout, "groups": case.groups,
                "m_per_group": case.m_per_group, "N": case.n, "K": case.k, "in_dtype": in_dtype,
                "scaling": scaling if in_dtype == "float8_e4m3fn" else None,
                "ptxgemm_ms": burst["ptxgemm"], "peer": peer, "peer_ms": burst[peer],
                "ptxgemm_tflops": flops / burst["ptxgemm"] / 1e9, "peer_tflops": flops / burst[peer] / 1e9,
                "speedup": burst[peer] / burst["ptxgemm"],
                "ptxgemm_b2b_ms": b2b["ptxgemm"], "peer_b2b_ms": b2b[peer],
                "speedup_b2b": b2b[peer] / b2b["ptxgemm"],
                "published_tflops": case.published_tflops, "config": plan.config.tag,
                # against DeepGEMM's published figure (blockwise only: the figure is for that recipe), burst and
                # back to back (the method of the published figures)
                "vs_published": (flops / burst["ptxgemm"] / 1e9 / case.published_tflops
                                 if block and case.published_tflops else None),
                "vs_published_b2b": (flops / b2b["ptxgemm"] / 1e9 / case.published_tflops
                                     if block and case.published_tflops else None),
                **kernel_fields(kernel, flops, case.published_tflops),
                "max_rel_diff_vs_" + first_peer: max(diffs) if diffs else 0.0,
                "variants_ms": {v.split(" ", 1)[1]: burst[v] for v in timed},
            })
            r = rows[-1]
            print(f"{case.name:34s} {peer:26s} ptxgemm {r['ptxgemm_tflops']:7.1f}  peer {r['peer_tflops']:7.1f}  "
                  f"x{r['speedup']:.3f} (b2b x{r['speedup_b2b']:.3f})  {r['config']}  diff {max(diffs):.2e}",
                  flush=True)
        del a, b, counts, plan, peers, mine, timed, launchers   # the variants' plans hold a and b too
        torch.cuda.empty_cache()
    log.sync(rows)
    summary = {}
    for peer in sorted({r["peer"] for r in rows if "peer" in r}):
        sp = [r["speedup"] for r in rows if r.get("peer") == peer]
        summary[peer] = {"shapes": len(sp), "geomean": geomean(sp),
                         "min": min(sp)}
        print(f"geomean vs {peer}: {summary[peer]['geomean']:.3f} over {len(sp)} shapes (min {min(sp):.3f})")
    for label in sorted({v for r in rows for v in r.get("variants_ms", {})}):
        # the default's speed over the variant's, in the same rounds (> 1: the default ahead); a case per row pair
        ratios = {r["case"]: r["variants_ms"][label] / r["ptxgemm_ms"] for r in rows
                  if label in r.get("variants_ms", {})}
        summary[f"default_vs {label}"] = {"shapes": len(ratios), "geomean": geomean(ratios.values()),
                                          "min": min(ratios.values()), "max": max(ratios.values()),
                                          "per_case": ratios}
        print(f"default vs {label}: geomean {geomean(ratios.values()):.3f} over {len(ratios)} shapes (min "
              f"{min(ratios.values()):.3f}, max {max(ratios.values()):.3f})")
    for key in ("vs_published", "vs_published_b2b", "vs_published_kernel", "vs_published_kernel_flushed",
                "vs_deepgemm_kernel", "vs_deepgemm_kernel_flushed"):
        vs = {r["case"]: r[key] for r in rows if r.get(key)}
        if vs:
            summary[key] = {"shapes": len(vs), "geomean": geomean(vs.values()),
                            "min": min(vs.values())}
            print(f"{key}: geomean {summary[key]['geomean']:.3f} over {len(vs)} of DeepGEMM's shapes "
                  f"(min {summary[key]['min']:.3f})")
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"gpu": gpu, "method": METHOD, "method_kernel": kernel_time.METHOD_KERNEL,
                                **({"scale_a_major": "m (contiguous cases)"} if amn else {}),
                                "rounds": rounds, "rows": rows,
                                "summary": summary, "published_source": grouped_shapes.DEEPGEMM_SOURCE}, indent=1))
    log.close()
    print(f"wrote {path}")
    return 0
