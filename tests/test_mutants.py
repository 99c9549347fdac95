"""The mutation tester without a GPU: the source map, the enumeration of synchronization points, the mutants'
text, and `python -m ptxgemm mutants --list`. (tests/test_gemm_gpu.py runs mutants on the GPU.)"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ptxgemm.kernel import codegen
from ptxgemm.kernel.config import SCALE_BLOCK, GemmConfig
from ptxgemm.kernel.params import template_params
from ptxgemm.toolchain import compiler
from ptxgemm.tools import mutant_catalog

KINDS_EVERY_CONFIG = {"mbarrier.init", "mbarrier.try_wait", "mbarrier.arrive.expect_tx", "mbarrier.arrive", "bar.sync",
                      "bar.arrive", "fence.proxy.async", "fence.mbarrier_init", "wgmma.fence", "wgmma.commit_group",
                      "wgmma.wait_group", "cp.async.bulk.commit_group", "cp.async.bulk.wait_group", "setmaxnreg",
                      "griddepcontrol.wait"}


@pytest.fixture(scope="module", params=[GemmConfig(), GemmConfig(cluster_m=2)], ids=["default", "cluster"])
def enumerated(request):
    return request.param, *mutant_catalog.enumerate_mutants(request.param)


def test_source_map_names_the_template_lines():
    cfg = GemmConfig()
    params = template_params(cfg)
    text, origins = codegen.render_with_origins(params["template_name"], **params)
    assert text == codegen.render(params["template_name"], **params)
    kernel = params["template_name"]   # the pingpong kernel's own template
    template = (codegen.template_dir() / kernel).read_text().splitlines()
    macros = {name: (codegen.template_dir() / name).read_text().splitlines()
              for name in ("mbarrier.ptx.j2", "tma.ptx.j2", "wgmma.ptx.j2")}
    for line, origin in zip(text.splitlines(), origins):
        if "bar.sync    %my_epi_bar" in line:  # written in the kernel template itself
            assert origin.template == kernel and not origin.calls
            assert "bar.sync    %my_epi_bar" in template[origin.line - 1]
        if "cp.async.bulk.wait_group.read" in line:  # a macro's text, called from the kernel template
            assert origin.template == "tma.ptx.j2" and "wait_group.read" in macros["tma.ptx.j2"][origin.line - 1]
            call_file, call_line = origin.calls[-1]
            assert call_file == kernel and "tma.wait_read" in template[call_line - 1]


def test_every_kind_of_synchronization_is_found(enumerated):
    cfg, ptx, found = enumerated
    kinds = {m.kind for m in found}
    expected = KINDS_EVERY_CONFIG | ({"barrier.cluster"} if cfg.cluster_m > 1 else set())
    assert kinds == expected
    assert sum(m.kind == "mbarrier.init" and m.mutation == "count+1" for m in found) == 2 * cfg.num_stages
    assert all(m.origin is not None and m.template.endswith(".j2") and m.template_line > 0 for m in found)
    assert len({m.id for m in found}) == len(found)
    # the stall report's own fences (debug build) are not the GEMM's synchronization
    assert not any("fence.sc" in m.instruction for m in found)


def test_a_mutant_changes_exactly_its_line(enumerated):
    cfg, ptx, found = enumerated
    lines = ptx.split("\n")
    for m in found:
        changed = mutant_catalog.apply(ptx, m).split("\n")
        assert len(changed) == len(lines)
        diff = [i for i, (x, y) in enumerate(zip(lines, changed)) if x != y]
        assert diff == [m.ptx_line - 1], m.id
        assert "MUTANT" in changed[m.ptx_line - 1]


def test_weakened_forms_assemble():
    """The mutants that rewrite an instruction (not delete it) are valid PTX: ptxas accepts them."""
    ptx, found = mutant_catalog.enumerate_mutants(GemmConfig())
    picks = {}
    for m in found:
        picks.setdefault(m.mutation, m)
    for mutation in ("wrong parity", "skipped", "count weakened", "N+1", ".read added", "bytes/2", "count-1"):
        compiler.compile_ptx(mutant_catalog.apply(ptx, picks[mutation]))


def test_cli_list_needs_no_gpu(tmp_path):
    out = tmp_path / "m.json"
    proc = subprocess.run([sys.executable, "-m", "ptxgemm", "mutants", "--list", "--preset", "default", "--preset",
                           "cluster", "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "bar.sync    %my_epi_bar, 256;" in proc.stdout and "score:" in proc.stdout
    data = json.loads(out.read_text())
    assert [c["config"]["cluster_m"] for c in data["configs"]] == [1, 2]
    record = data["configs"][0]["mutants"][0]
    assert {"instruction", "ptx_line", "template", "template_line", "status", "killed_by", "reason"} <= set(record)
    assert record["status"] == "not run"


def test_cli_rejects_unknown_kind():
    proc = subprocess.run([sys.executable, "-m", "ptxgemm", "mutants", "--list", "--kind", "bar.wait"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "--kind: must be one of" in proc.stderr


def test_split_k_synchronization_is_found_and_its_weakened_forms_assemble():
    """Split-K's fix-up adds a publish (red.release), a poll (ld.acquire) and a reset (st.relaxed), each mutated;
    --template keeps the mutants of splitk.ptx.j2's lines (its two bar.syncs among them) and no others."""
    ptx, found = mutant_catalog.enumerate_mutants(GemmConfig(splits=3))
    split = [m for m in found if mutant_catalog.in_template(m, "splitk.ptx.j2")]
    assert {(m.kind, m.mutation) for m in split} == {
        ("bar.sync", "deleted"), ("bar.sync", "count weakened"), ("red.release", "deleted"),
        ("red.release", "relaxed"), ("ld.acquire", "skipped"), ("ld.acquire", "relaxed"), ("st.relaxed", "deleted")}
    assert sum(m.kind == "bar.sync" and m.mutation == "deleted" for m in split) == 2
    assert not any(m.kind in ("red.release", "ld.acquire", "st.relaxed") for m in mutant_catalog.enumerate_mutants(GemmConfig())[1])
    for m in split:
        if m.mutation in ("relaxed", "skipped"):
            assert "MUTANT" in mutant_catalog.apply(ptx, m).split("\n")[m.ptx_line - 1]
            compiler.compile_ptx(mutant_catalog.apply(ptx, m))
    pre_publish = min((m for m in split if m.kind == "bar.sync" and m.mutation == "deleted"), key=lambda m: m.ptx_line)
    assert "(split-K)" in mutant_catalog.explain(pre_publish) and "before the leader's release" in mutant_catalog.explain(pre_publish)


@pytest.mark.parametrize("preset", ["default", "epilogue", "cooperative-epilogue", "cooperative-whole-tile",
                                    "blockwise", "blockwise-swapped", "blockwise-deep", "blockwise-small-m", "split",
                                    "split-pairs", "grouped",
                                    "grouped-masked", "grouped-k"])
def test_presets_enumerate_with_every_line_traced_to_its_template(preset):
    """No GPU: each preset's debug build renders, its source map lines up with the plain render (a Jinja comment on
    an instruction line once broke that), and every synchronization instruction has mutants."""
    from ptxgemm.cli.mutants import MUTANT_PRESETS

    _, found = mutant_catalog.enumerate_mutants(GemmConfig(**MUTANT_PRESETS[preset]))
    assert found and all(m.origin is not None for m in found)


@pytest.mark.parametrize("preset", ["blockwise", "blockwise-wide", "blockwise-swapped"])
def test_blockwise_workloads_end_a_tile_in_every_copy_of_the_loop(preset):
    """Each copy of the unrolled blockwise k-loop has its own drain (the two-set loop) or its own full wait (the
    one-set loop); a copy where no workload's tiles end leaves its drain unrun, and its mutants survive unseen."""
    from ptxgemm.cli.mutants import MUTANT_PRESETS
    from ptxgemm.tools.mutant_worker import workloads_for

    cfg = GemmConfig(**MUTANT_PRESETS[preset])
    ends = {(-(-w.k // cfg.block_k) - 1) % cfg.bs_unroll for w in workloads_for(cfg)}
    assert cfg.bs_unroll > 2 and ends == set(range(cfg.bs_unroll))
    assert all(w.k % 16 == 0 for w in workloads_for(cfg)[2:])   # fp8 rows: 16-byte TMA strides


def test_the_swapped_preset_runs_a_decode_workload_that_streams_its_weight():
    """A full-barrier wait skipped in one copy of the k-loop reads a stage whose bytes are in flight only where the
    consumer outruns TMA: a swap-AB tile on a decode-sized M, one column tile, a weight too large for L2 to hold."""
    from ptxgemm.cli.mutants import MUTANT_PRESETS
    from ptxgemm.tools.mutant_worker import workloads_for

    cfg = GemmConfig(**MUTANT_PRESETS["blockwise-swapped"])
    decode = [w for w in workloads_for(cfg) if w.m <= cfg.block_n]
    assert decode and all(w.n * w.k >= 45 << 20 and w.ctas is None for w in decode)


def test_a_workload_run_is_guarded_and_frees_its_output():
    """The worker's guard: a run's own verdict passes through, a reported stall or a CUDA error is a kill, and the
    output is freed in every case (even when freeing fails after a lost context)."""
    from ptxgemm.errors import CudaError
    from ptxgemm.runtime.debug import BarrierStall
    from ptxgemm.tools.mutant_worker import _guarded

    class Out:
        def __init__(self, fails=False):
            self.freed, self.fails = 0, fails

        def free(self):
            self.freed += 1
            if self.fails:
                raise CudaError("CUDA_ERROR_ILLEGAL_ADDRESS", "freeing")

    def raises(e):
        def run():
            raise e
        return run

    out = Out()
    assert _guarded(lambda: None, out) is None and out.freed == 1
    assert _guarded(lambda: ("killed", "wrong result"), out) == ("killed", "wrong result")
    stall = _guarded(raises(BarrierStall("BARRIER_STALL", "running")), out)
    assert stall[0] == "killed" and stall[1].startswith("stall reported")
    lost = Out(fails=True)
    assert _guarded(raises(CudaError("CUDA_ERROR_ILLEGAL_INSTRUCTION", "running")), lost)[1].startswith("CUDA error")
    assert lost.freed == 1 and out.freed == 3


def test_the_split_pairs_preset_runs_the_final_that_adds_two_partials_at_once():
    """The split-K mutants (tests/test_splitk_gpu.py) also run on a final that adds its partials two at a time
    (cfg.fixup_batch 2): with 4 splits it takes a pair, then the last one alone, so the publish, the poll, its sync
    and the reset are broken around both loops. Each such instruction has its mutants there."""
    from ptxgemm.cli.mutants import MUTANT_PRESETS

    cfg = GemmConfig(**MUTANT_PRESETS["split-pairs"])
    assert cfg.fixup_batch == 2 and cfg.splits - 1 > cfg.fixup_batch and (cfg.splits - 1) % cfg.fixup_batch
    ptx, found = mutant_catalog.enumerate_mutants(cfg)
    assert "_ADD_BATCH:" in ptx
    kinds = {(m.kind, m.mutation) for m in found if mutant_catalog.in_template(m, "splitk.ptx.j2")}
    assert {("red.release", "deleted"), ("ld.acquire", "skipped"), ("st.relaxed", "deleted"),
            ("bar.sync", "deleted")} <= kinds


def test_the_producer_copied_a_scales_arrive_is_mutated_and_counted_in_the_full_init():
    """Blockwise scaling with A's scales brought by the producer's warp 0 (cfg.bs_a_in_smem): each lane's
    cp.async.mbarrier.arrive.noinc on the stage's full barrier is deleted, or made to count itself (no .noinc: the
    arrival the init holds for it never comes), and every full barrier's init count holds the copiers' arrivals
    (its count+1 and count-1 mutants stand for a count that forgets them). tests/test_blockwise_gpu.py runs them."""
    from ptxgemm.cli.mutants import MUTANT_PRESETS

    cfg = GemmConfig(**MUTANT_PRESETS["blockwise-narrow"])
    assert cfg.bs_a_in_smem and cfg.full_arrivals == 34   # the leader's arrive, 32 lanes' A copies, the B walker's
    assert not GemmConfig(**MUTANT_PRESETS["blockwise-wide"]).bs_a_in_smem   # its ring would lose a stage
    ptx, found = mutant_catalog.enumerate_mutants(cfg)
    arrives = [m for m in found if m.kind == "cp.async.mbarrier.arrive"]
    # the copying lanes' arrive, two mutants (B's scales come from the walker, warp 1, whose arrive is a plain one
    # after its store: deleted, it hangs the stage)
    assert {m.mutation for m in arrives} == {"deleted", "counted"} and len(arrives) == 2
    walker = [m for m in found if m.kind.startswith("mbarrier.arrive") and "[%full_bar]" in m.instruction
              and "expect_tx" not in m.instruction]
    assert walker and {m.mutation for m in walker} >= {"deleted"}, walker
    assert all(mutant_catalog.in_template(m, "blockscale.ptx.j2") for m in arrives)
    counted = next(m for m in arrives if m.mutation == "counted")
    assert ".noinc" not in mutant_catalog.apply(ptx, counted).split("\n")[counted.ptx_line - 1]
    compiler.compile_ptx(mutant_catalog.apply(ptx, counted))
    full_inits = [m for m in found if m.kind == "mbarrier.init" and "[%full_bar], 34;" in m.instruction]
    assert len(full_inits) == 2 * cfg.num_stages   # count+1 and count-1 of each stage's
    # the swapped blockwise kernel keeps its global loads of A's scales: no such arrive, full counts 1
    swapped = GemmConfig(**MUTANT_PRESETS["blockwise-swapped"])
    assert not swapped.bs_a_in_smem
    assert not any(m.kind == "cp.async.mbarrier.arrive" for m in mutant_catalog.enumerate_mutants(swapped)[1])


def test_the_one_set_loops_probe_has_mutants():
    """The blockwise one-set loop's probe of the next stage (pipeline.consumer_probe: mbarrier.test_wait, standing for
    the next k-tile's wait when it reads true) is a synchronization instruction: made to read true at once, or asked
    about the other phase, in every copy of the loop; both assemble."""
    from ptxgemm.cli.mutants import MUTANT_PRESETS

    cfg = GemmConfig(**MUTANT_PRESETS["blockwise-wide"])
    ptx, found = mutant_catalog.enumerate_mutants(cfg)
    probes = [m for m in found if m.kind == "mbarrier.test_wait"]
    assert len(probes) == 2 * cfg.bs_unroll and {m.mutation for m in probes} == {"skipped", "wrong parity"}
    for m in probes[:2]:
        compiler.compile_ptx(mutant_catalog.apply(ptx, m))


def test_the_m_major_scale_box_is_counted_in_the_stage_expect_tx(tmp_path):
    """Blockwise scaling with A's scales M-major (cfg.block_scale_a_mn): the producer's leader loads them with one TMA
    box a stage, its bytes in the stage's expect_tx; the mutant that leaves them out ("scale box uncounted") lets the
    consumers read the slot before the box lands, and assembles. The worker hands such configs their scale_a M-major
    (a padded (kb, ld) table, viewed back). tests/test_blockwise_gpu.py runs the mutants."""
    from ptxgemm.cli.mutants import MUTANT_PRESETS
    from ptxgemm.tools import mutant_worker

    cfg = GemmConfig(**MUTANT_PRESETS["blockwise-mn"])
    assert cfg.block_scale_a_mn and cfg.bs_a_copiers == 0 and cfg.full_arrivals == 2   # + the leader's B copies
    ptx, found = mutant_catalog.enumerate_mutants(cfg)
    box = [m for m in found if m.mutation == "scale box uncounted"]
    assert len(box) == 1 and f", {cfg.stage_bytes};" in box[0].instruction
    line = mutant_catalog.apply(ptx, box[0]).split("\n")[box[0].ptx_line - 1]
    assert f", {cfg.stage_bytes - cfg.block_m * 4};" in line
    compiler.compile_ptx(mutant_catalog.apply(ptx, box[0]))
    assert not any(m.mutation == "scale box uncounted"
                   for m in mutant_catalog.enumerate_mutants(GemmConfig(**MUTANT_PRESETS["blockwise-wide"]))[1])
    # the worker's table for a small problem of the preset's kind (its own workloads' float64 references take seconds)
    jobs = mutant_worker.prepare_workloads(cfg, tmp_path, (mutant_worker.Workload(301, 136, 272, None, 11),))
    spec = jobs[0]["arrays"]["scale_a"]
    m, kb, ld = spec["m_major"]
    assert ld % 4 == 0 and ld >= m and mutant_worker.np.load(spec["path"]).shape == (kb, ld)
    # every workload's table is one the plan reads M-major (one k-block is both layouts, read C-contiguous: the
    # worker's plan would then demand a config without the box, and the unmutated build fail its own workloads)
    from types import SimpleNamespace
    from ptxgemm.plan.epilogue import _m_major, m_major_ld
    for w in mutant_worker.workloads_for(cfg):
        kb, ld = -(-w.k // SCALE_BLOCK), m_major_ld(w.m)
        table = SimpleNamespace(shape=(w.m, kb), strides=(4, 4 * ld), dtype=mutant_worker.np.float32, ptr=0)
        assert _m_major(table, "scale_a"), w


def test_the_exit_wait_is_explained_by_its_own_schedule():
    """The consumers' exit wait (tma.wait_all): in the pingpong every store group was drained before the epilogue
    order's arrive, so its mutants are redundant there; in the cooperative and grouped kernels the last tile's stores
    are still in flight, and the reason says so. Both schedules share the exit macro, which says which it is."""
    cases = ((GemmConfig(), "redundant"), (GemmConfig(schedule="cooperative", block_m=256), "(cooperative)"),
             (GemmConfig(schedule="cooperative", block_m=128, block_n=256, b_major="k", grouped="contiguous",
                         group_capacity=512), "(cooperative)"))
    for cfg, reason in cases:
        exits = [m for m in mutant_catalog.enumerate_mutants(cfg)[1]
                 if m.kind == "cp.async.bulk.wait_group" and "wait_all" in m.site]
        assert exits and all(reason in mutant_catalog.explain(m) for m in exits), (cfg.tag, exits)


def test_the_whole_tile_epilogue_mutants_assemble():
    """No GPU: the preset cooperative-whole-tile stages its whole tile, and each of its epilogue's mutants (the
    ones tests/test_gemm_gpu.py runs) assembles, so the GPU test measures the kernel, not ptxas."""
    from ptxgemm.cli.mutants import MUTANT_PRESETS

    cfg = GemmConfig(**MUTANT_PRESETS["cooperative-whole-tile"])
    assert cfg.epi_whole_tile
    ptx, found = mutant_catalog.enumerate_mutants(cfg)
    kinds = ("bar.sync", "cp.async.bulk.wait_group", "cp.async.bulk.commit_group", "fence.proxy.async")
    mine = [m for m in found if m.kind in kinds and mutant_catalog.in_template(m, "gemm_cooperative.ptx.j2")]
    assert {n for n in ("the slots are free", "the tile is complete", "have read them", "one group for the tile")
            if any(n in m.site for m in mine)} == {"the slots are free", "the tile is complete", "have read them",
                                                   "one group for the tile"}
    for m in mine:
        compiler.compile_ptx(mutant_catalog.apply(ptx, m))


def test_the_one_set_pingpong_epilogue_survivors_are_explained_for_it_alone():
    """The blockwise-deep preset's survivors in the pingpong's epilogue order (run 93: four unexplained; run 98,
    after the handoff moved to the last wgmma issue: the store's commit deleted and the wait for its read one group
    short) take the one-set loop's reason, and only in a narrow one-set pingpong: the same lines of the default
    pingpong, of the two-set blockwise pingpongs and of the wide one-set pingpong (pp64x192, which kills them in run
    98) stay unexplained if they survive (tests/test_gemm_gpu.py kills them in the default kernel). The committed
    run 98's survivors with that reason are exactly the mutants it covers, and run 93's unexplained ones include
    them."""
    import gzip
    from pathlib import Path
    from ptxgemm.cli.mutants import MUTANT_PRESETS

    def one_set_explained(preset):
        cfg = GemmConfig(**MUTANT_PRESETS[preset])
        return {m.id for m in mutant_catalog.enumerate_mutants(cfg)[1]
                if "(pingpong, one product set, a narrow tile)" in mutant_catalog.explain(m, cfg)}, cfg

    deep, cfg = one_set_explained("blockwise-deep")
    assert cfg.bs_product_sets == 1 and cfg.schedule == "pingpong"
    assert {i.split(":", 1)[1] for i in deep} == {"cp.async.bulk.commit_group:deleted", "cp.async.bulk.wait_group:N+1"}
    found = mutant_catalog.enumerate_mutants(cfg)[1]
    narrow = "(pingpong, one product set, a narrow tile)"
    assert not any(narrow in mutant_catalog.explain(m) for m in found)   # the config unknown: no config's reason
    for preset in ("default", "blockwise-swapped", "blockwise-narrow", "blockwise-small-m"):
        assert not one_set_explained(preset)[0], preset
    path = Path(__file__).resolve().parents[1] / "docs/results/h200/mutants/mutants_blockwise_pingpong_h200.json.gz"
    runs = json.loads(gzip.open(path).read())["runs"]
    first, now = runs["r93_blockwise_deep"]["configs"][0], runs["r98_blockwise_deep"]["configs"][0]
    fields = cfg.fields()   # the fields added since run 98 (split_lead) at their defaults: the same kernel
    assert first["config"] == now["config"] == {name: fields[name] for name in first["config"]}
    assert all(fields[name] == getattr(GemmConfig, name) for name in fields.keys() - first["config"].keys())
    # by instruction and mutation, not by id: a later change of the kernel moves the PTX lines the ids name
    covered = {(m.instruction, m.mutation) for m in found if m.id in deep}
    assert {(m["instruction"], m["mutation"]) for m in now["mutants"]
            if m["status"] == "survived" and "(pingpong, one product set, a narrow tile)" in m["reason"]} == covered
    assert not any(m["reason"].startswith("unexplained") for m in now["mutants"])
    assert covered < {(m["instruction"], m["mutation"]) for m in first["mutants"]
                      if m["reason"].startswith("unexplained")}
