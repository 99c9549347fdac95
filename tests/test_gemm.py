"""The GEMM without a GPU: what ptxas made of it, the config's rules and derived numbers, operand checks."""
from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

import ptxgemm
from assemble import assemble_ahead
from ptxgemm import ConfigError, GemmConfig

CONFIGS = [GemmConfig(), GemmConfig(b_major="k"), GemmConfig(a_major="mn", b_major="k"),
           GemmConfig(out_dtype="float32"), GemmConfig(in_dtype="float16", out_dtype="float16"),
           GemmConfig(block_m=64, block_n=256), GemmConfig(block_n=192), GemmConfig(debug=True),
           GemmConfig(cluster_m=2), GemmConfig(cluster_m=2, b_major="k"), GemmConfig(cluster_m=2, debug=True),
           GemmConfig.from_tag("coop256x128"), GemmConfig.from_tag("coop128x256", a_major="mn", out_dtype="float32"),
           GemmConfig.from_tag("coop256x192", b_major="k"), GemmConfig.from_tag("coop256x128c2", debug=True),
           GemmConfig.from_tag("coop128x256cn2rn"), GemmConfig.from_tag("pp128x128cn2", a_major="mn", debug=True),
           GemmConfig.from_tag("pp128x160"), GemmConfig.from_tag("coop128x208", b_major="k", out_dtype="float32"),
           GemmConfig.from_tag("coop256x160", out_dtype="float16"), GemmConfig.from_tag("coop128x256rh"),
           GemmConfig.from_tag("pp128x128c2rh", b_major="k"), GemmConfig.from_tag("coop128x256c2sk"),
           GemmConfig.from_tag("coop256x128cn2sk", a_major="mn", out_dtype="float32"),
           GemmConfig.from_tag("coop128x256sk", b_major="k", debug=True)]


@pytest.fixture(scope="module")
def assembled_ahead():
    assemble_ahead(CONFIGS, sass=True)   # a cold cubin cache: every ptxas and nvdisasm at once (tests/assemble.py)


@pytest.fixture(scope="module", params=CONFIGS, ids=lambda c: c.describe())
def built(request, assembled_ahead):
    cfg = request.param
    kernel = ptxgemm.compile_gemm(cfg)
    return cfg, kernel, kernel.sass()


def test_sass_has_the_intended_instructions(built):
    cfg, kernel, sass = built
    ab = "BF16" if cfg.in_dtype == "bfloat16" else ""  # nvdisasm prints fp16 inputs with no type suffix
    hgmma = re.findall(r"HGMMA\.64x(\d+)x16\.F32(?:\.(BF16))?\b", sass)
    assert hgmma and all(n == str(cfg.block_n) and t == ab for n, t in hgmma), hgmma
    assert len(hgmma) == cfg.k_steps * cfg.m_halves  # one stage's wgmmas, unrolled once
    producer, consumer = cfg.register_split
    assert re.search(rf"USETMAXREG\.DEALLOC\.CTAPOOL 0x{producer:x}\b", sass)
    assert re.search(rf"USETMAXREG\.TRY_ALLOC\.CTAPOOL \w+, 0x{consumer:x}\b", sass)
    for op in ("UTMALDG", "UTMASTG", "SYNCS", "CCTL.PF"):  # CCTL.PF: prefetch.tensormap
        assert op in sass, op
    if cfg.out_itemsize == 2:
        assert "STSM" in sass
    assert not re.search(r"\b(LDL|STL)\b", sass), "local memory traffic (spills or a run-time indexed array)"
    if cfg.cluster_size > 1:
        assert "UTMALDG.3D.MULTICAST" in sass and "UCGABAR_WAIT" in sass
    if (cfg.a_major == "mn") or (cfg.b_major == "mn"):
        assert ".tnsp" in sass  # wgmma's transpose bit reads the MN-major operand in place


def test_ptxas_report_is_clean(built):
    cfg, kernel, _ = built
    report = kernel.report
    # No warning at all: the coded ones mean setmaxnreg was ignored or dropped (C7508, C7504) or that ptxas had to
    # serialize the wgmma pipeline or inject a wait_group itself (C7511, C7515, C7517, C7518): a synchronization
    # bug in the PTX that ptxas papered over. ptxgemm.tools.mutants counts any new warning as a killed mutant.
    assert not report.warnings, report.warnings
    fn = report.functions[cfg.kernel_name]
    assert fn.registers == cfg.entry_registers == 168
    assert fn.spill_store_bytes == fn.spill_load_bytes == fn.stack_bytes == 0


def test_ptx_is_readable_and_named_by_role():
    ptx = ptxgemm.render_gemm(GemmConfig())
    assert ".maxntid 384, 1, 1" in ptx and ".minnctapersm 1" in ptx
    assert re.search(r"^\.version (\d+)\.(\d+)$", ptx, re.M).groups() <= ("9", "0")
    for name in ("%acc0_0", "%acc1_63", "%phase", "%k_tile", "%stage", "%pos"):
        assert name in ptx
    # every barrier operation carries a comment saying who waits and who arrives
    for line in ptx.splitlines():
        if re.match(r"\s*(@\S+\s+)?(bar\.(sync|arrive)|mbarrier\.init)", line):
            idx = ptx.splitlines().index(line)
            context = "\n".join(ptx.splitlines()[max(0, idx - 2):idx + 1])
            assert "//" in context, f"uncommented barrier: {line.strip()}"


def test_config_derives_stages_and_smem():
    cfg = GemmConfig()
    assert cfg.num_stages == 6 and cfg.stage_bytes == 32768 and cfg.epilogue_bytes == 32768
    assert cfg.smem_bytes <= 232448
    assert cfg.register_split == (40, 232)
    assert 128 * cfg.register_split[0] + 256 * cfg.register_split[1] <= 65536
    assert GemmConfig(out_dtype="float32").num_stages == 5
    assert GemmConfig(stages=3).num_stages == 3
    assert GemmConfig(block_m=64, block_n=256).acc_registers == 128


def test_a_deep_ring_is_asked_for_and_reserves_its_own_barriers():
    """A config without `stages` fills shared memory up to FILL_STAGES (8), with barriers reserved for 8, so the
    default configs' layouts stay as they were; `stages` may ask for up to MAX_STAGES (16) where they fit
    (most_stages), each stage past 8 reserving its two barriers; more than fit is refused, naming the limit."""
    from ptxgemm.kernel.hardware import MAX_STAGES
    from ptxgemm.kernel.layout import FILL_STAGES

    narrow = GemmConfig(block_m=64, block_n=64)
    assert narrow.num_stages == FILL_STAGES == 8 and narrow.barrier_bytes == 2 * 8 * 8
    assert narrow.most_stages == 13 < MAX_STAGES
    deep = GemmConfig(block_m=64, block_n=64, stages=13)
    assert deep.barrier_bytes == 2 * 13 * 8 and deep.smem_empty == deep.smem_full + 13 * 8
    assert deep.smem_bytes <= 232448
    with pytest.raises(ConfigError, match=r"stages: 14 stages .* \(at most 13\)"):
        GemmConfig(block_m=64, block_n=64, stages=14)
    with pytest.raises(ConfigError, match="stages: must be in 2..16"):
        GemmConfig(block_m=64, block_n=64, stages=17)
    assert GemmConfig(stages=6).barrier_bytes == GemmConfig().barrier_bytes   # the default tile keeps its layout


def test_blockwise_a_scales_take_a_slot_per_stage_where_it_costs_nothing():
    """Dense unswapped blockwise kernels bring A's scales with the stage (cfg.bs_a_in_smem) where the slots (block_m
    fp32 per stage) leave the ring its stages and the cooperative epilogue its panel slots: the full barriers then
    wait for warp 0's 32 copying lanes besides the leader. The 256-row tiles (4 stages, 3 with the slots), the
    128x128 tiles (6 stages; 2 epilogue panel slots), swapped and grouped kernels keep the consumers' loads and
    their layout."""
    fp8 = dict(in_dtype="float8_e4m3fn", a_major="k", b_major="k", block_scale=True)
    narrow = GemmConfig.from_tag("pp64x128k2", **fp8)
    assert narrow.bs_a_in_smem and (narrow.bs_a_slot_bytes, narrow.bs_a_rows_per_copier) == (256, 2)
    # ... and B's, 16 bytes a stage, the walker's store arriving once more on the full barrier (cfg.bs_b_in_smem;
    # a pingpong tile: cfg.bs_b_walker)
    assert narrow.bs_b_in_smem and narrow.bs_b_walker and narrow.bs_b_slot_bytes == 16
    assert narrow.num_stages == 8 and narrow.full_arrivals == 34 and narrow.ring_stage_bytes == 24576 + 256 + 16
    assert narrow.smem_bs_b == narrow.smem_bs_a + 8 * 256 and narrow.smem_full == narrow.smem_bs_b + 8 * 16
    assert narrow.smem_bs_a == narrow.smem_source + narrow.source_bytes
    assert narrow.smem_bytes <= 232448 and narrow.smem_bs_a % 16 == 0
    wide192 = GemmConfig.from_tag("coop128x192", **fp8)
    assert wide192.bs_a_in_smem and wide192.num_stages == 5 and wide192.epi_slots == 1
    # a cooperative tile: B's scales by the leader's cp.async with each stage's loads, its noinc arrive counted (the
    # walker cost these tiles 1-6%, run 110)
    assert wide192.bs_b_in_smem and not wide192.bs_b_walker and wide192.full_arrivals == 34
    wide_ptx = ptxgemm.render_gemm(wide192)
    assert "BS_WALKER:" not in wide_ptx and "%bsp_q" not in wide_ptx
    assert wide_ptx.count("cp.async.ca.shared.global") == wide192.bs_a_rows_per_copier + 2   # and B's two blocks
    assert wide_ptx.count("cp.async.mbarrier.arrive.noinc") == 2   # A's copying lanes', then the leader's for B's
    for tag, stages, slots in (("coop256x128c2", 4, 1), ("coop128x128", 6, 2), ("pp128x128", 6, None)):
        kept = GemmConfig.from_tag(tag, **fp8)
        assert not kept.bs_a_in_smem and kept.num_stages == stages and kept.full_arrivals == 1, tag
        assert slots is None or kept.epi_slots == slots, tag
        assert kept.smem_full == kept.smem_bs_a and kept.bs_a_slot_bytes == kept.bs_b_slot_bytes == 0, tag
    plain = GemmConfig.from_tag("pp64x128k2")
    assert not plain.bs_a_in_smem and plain.full_arrivals == 1 and plain.smem_full == plain.smem_bs_a
    swapped = GemmConfig.from_tag("pp64x32t", **fp8, block_scale_swapped=True)
    assert not swapped.bs_a_in_smem and swapped.bs_a_slot_bytes == 0 and swapped.full_arrivals == 1
    grouped = GemmConfig.from_tag("coop128x128", **fp8, grouped="contiguous")
    assert not grouped.bs_a_in_smem and grouped.full_arrivals == 1
    ptx = ptxgemm.render_gemm(narrow)
    assert ptx.count(f"mbarrier.init.shared::cta.b64 [%full_bar], {narrow.full_arrivals};") == narrow.num_stages
    assert ptx.count("cp.async.ca.shared.global") == narrow.bs_a_rows_per_copier   # A's only: B's come from the walker
    # the walker (warp 1): the tile's first two batches of B scales, then each batch's registers reloaded at its last
    # k-tile; each stage picks from one set only, behind a branch, stores and arrives on the stage's full barrier
    walker = ptx[ptx.index("BS_WALKER:"):ptx.index("PRODUCER_EXIT:")]
    # entered only by warp 1's branch: the leader's drain must not run on into it (run 109: without the branch
    # below, the leader walked the ring again after its drain, waiting for releases that never came)
    before = [line.split("//")[0].strip() for line in ptx[:ptx.index("BS_WALKER:")].splitlines()]
    assert [line for line in before if line][-1] == "bra.uni     PRODUCER_EXIT;"
    assert walker.count("ld.global.nc.f32 %bsp_qe,") == walker.count("ld.global.nc.f32 %bsp_qo,") == 2
    assert walker.count("shfl.sync.idx.b32 %bsp_sb, %bsp_qe,") == walker.count("shfl.sync.idx.b32 %bsp_sb, %bsp_qo,") == 1
    store = walker.index(f"[%bsp_dst+{narrow.smem_bs_b}], ")
    assert store < walker.index("mbarrier.arrive.shared::cta.b64 _, [%full_bar]", store)
    assert "%bsp_q" not in ptx[ptx.index("PRODUCER:"):ptx.index("BS_WALKER:")]   # the leader's loop holds no batch
    assert "ld.shared.f32 %bs_sa_" in ptx and "ld.global.nc.f32 %bs_sa_" not in ptx
    for kept in (swapped, GemmConfig.from_tag("coop256x128c2", **fp8)):
        assert "ld.global.nc.f32 %bs_sa_" in ptxgemm.render_gemm(kept)


def test_cooperative_config_splits_the_tile_between_the_consumers():
    """Both consumers share each tile: each holds half of its rows, a stage is released by both consumers' 8 warps,
    and the epilogue stages panel slots (not the whole tile) so that four stages fit at 256x128."""
    cfg = GemmConfig(schedule="cooperative", block_m=256)
    assert (cfg.consumer_m, cfg.m_halves, cfg.acc_registers) == (128, 2, 128)
    assert cfg.empty_arrivals == 8 and GemmConfig.from_tag("coop256x128c2").empty_arrivals == 16
    assert cfg.consumer_a_offset == 128 * 128                       # K-major A: 128 rows of 128 B
    assert GemmConfig.from_tag("coop256x128", a_major="mn").consumer_a_offset == 2 * 64 * 128   # two panels
    assert cfg.stage_bytes == 49152 and cfg.num_stages == 4
    assert (cfg.epi_panels, cfg.epi_slots, cfg.epi_panel_bytes) == (2, 1, 16384)
    assert cfg.epilogue_bytes == 2 * 16384 and cfg.smem_bytes <= 232448
    wide = GemmConfig.from_tag("coop128x256")
    assert (wide.consumer_m, wide.num_stages, wide.epi_panels, wide.epi_slots) == (64, 4, 4, 2)
    assert wide.epi_panels % wide.epi_slots == 0
    for tag in ("pp128x128", "pp64x256", "coop256x128c2", "pp128x192g16s3", "coop128x256", "coop128x256cn2rn",
                "pp128x128g4rns4", "coop128x256rh"):
        assert GemmConfig.from_tag(tag).tag == tag
    with pytest.raises(ConfigError, match="tag"):
        GemmConfig.from_tag("256x128")


def test_a_tile_that_is_not_whole_panels_stores_its_tail_through_its_own_map():
    """block_n 208 (bf16): three 64-column panels plus a 16-column tail, staged unswizzled and stored through
    tmap_c_tail (a full-width box would write into the next tile); MN-major B loads four whole 64-column panels."""
    cfg = GemmConfig.from_tag("coop128x208")
    assert (cfg.epi_panels, cfg.epi_tail_cols, cfg.epi_tail_bytes, cfg.b_panels) == (4, 16, 32, 4)
    assert cfg.b_stage_bytes == 4 * 64 * 128 and GemmConfig.from_tag("coop128x208", b_major="k").b_stage_bytes == 208 * 128
    ptx = ptxgemm.render_gemm(cfg)
    assert ".param .align 64 .b8 tmap_c_tail[128]" in ptx and "m64n208k16" in ptx
    stores = re.findall(r"cp\.async\.bulk\.tensor\.3d\.global\.shared::cta\.bulk_group \[(%tmap_c\w*),", ptx)
    assert stores == ["%tmap_c"] * 3 + ["%tmap_c_tail"]
    assert "tmap_c_tail" not in ptxgemm.render_gemm(GemmConfig.from_tag("coop128x256"))


def test_cooperative_ptx_has_no_order_barriers_and_defers_the_store_wait():
    ptx = ptxgemm.render_gemm(GemmConfig.from_tag("coop256x128"))
    assert "%my_mma_bar" not in ptx and "bar.arrive" not in ptx      # no pingpong ordering
    assert ".entry gemm_cooperative(" in ptx
    body = ptx[ptx.index("CONSUMER:"):]
    # one wait per panel, before the slot is rewritten: never right after a store
    waits = re.findall(r"cp\.async\.bulk\.wait_group\.read (\d+);", body)
    assert waits == ["0", "0"]


def test_a_cooperative_consumer_with_a_slot_per_panel_stages_its_whole_tile_at_once():
    """cfg.epi_whole_tile (the 3-stage 256x128 and blockwise fp8 M-major tiles, where every panel has its own slot):
    one wait for the previous tile's stores, one fence, two barriers and one bulk group a tile, as the pingpong's
    epilogue (and DeepGEMM's); with fewer slots than panels each panel keeps its own wait, fence, barriers and
    group, so that a slot's next panel waits only for the store that read it."""
    whole = GemmConfig.from_tag("coop256x128s3")
    assert whole.epi_whole_tile and whole.epi_slots == whole.epi_panels == 2
    fp8 = dict(in_dtype="float8_e4m3fn", b_major="k", block_scale=True, block_scale_a_mn=True)
    assert GemmConfig.from_tag("coop256x128cn2", **fp8).epi_whole_tile
    assert not GemmConfig.from_tag("coop256x128").epi_whole_tile            # 4 stages, one slot for two panels
    assert not GemmConfig.from_tag("coop128x256").epi_whole_tile            # 4 panels, 2 slots
    assert not GemmConfig.from_tag("pp128x128").epi_whole_tile              # the pingpong stages its tile anyway
    for cfg, panels, groups in ((whole, 2, 1), (GemmConfig.from_tag("coop256x128"), 2, 2),
                                (GemmConfig.from_tag("coop128x256"), 4, 4)):
        body = ptxgemm.render_gemm(cfg)
        body = body[body.index("CONSUMER:"):body.index("CONSUMER_EXIT:")]
        epilogue = body[body.index("setp.lt.u32 %p_row_in"):]
        assert len(re.findall(r"cp\.async\.bulk\.wait_group\.read", epilogue)) == groups, cfg.tag
        assert epilogue.count("bar.sync    %epi_sync_bar, 128;") == 2 * groups, cfg.tag
        assert epilogue.count("fence.proxy.async.shared::cta;") == groups, cfg.tag
        assert epilogue.count("cp.async.bulk.commit_group;") == groups, cfg.tag
        assert epilogue.count("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group") == panels, cfg.tag
    # the whole tile's wait asks for every older group: the tile's stores are one group
    assert "cp.async.bulk.wait_group.read 0;" in ptxgemm.render_gemm(whole)


def test_a_pair_along_m_splits_k_major_b_in_whole_swizzle_atoms():
    """cluster_m 2 shares B, each CTA loading half of its rows: K-major B's halves start on whole 8-row swizzle
    atoms (block_n a multiple of 16), so 192 and 112 pair up (DeepGEMM's 128x192 pair for N = 2112); MN-major B's
    halves would cut its 64-column panels. The selection keeps the measured pairs (block_n a multiple of 128)."""
    from ptxgemm.select import tiles

    for block_n, half in ((192, 96), (112, 56)):
        cfg = GemmConfig(schedule="cooperative", block_m=128, block_n=block_n, cluster_m=2, b_major="k")
        assert cfg.b_rows_per_cta == half and half * 128 % 1024 == 0
        assert f"mad.lo.u32  %b_tile, %rank, {half * 128}" in ptxgemm.render_gemm(cfg)
        with pytest.raises(ConfigError, match="MN-major B's 64-column panels"):
            GemmConfig(schedule="cooperative", block_m=128, block_n=block_n, cluster_m=2, b_major="mn")
    for b_major in ("k", "mn"):
        offered = tiles._candidates_for(tiles.CANDIDATE_TILES, tiles.CLUSTER_SHAPES, (), (), (1,),
                                             "bfloat16", "bfloat16", "k", b_major)
        assert offered and not [c.tag for c in offered if c.cluster_m > 1 and c.block_n % 128]


@pytest.mark.parametrize("kwargs, rule", [
    (dict(block_m=96), "block_m"), (dict(block_n=100), "block_n"), (dict(block_n=320), "block_n"),
    (dict(block_n=40), "block_n"), (dict(block_n=8), "block_n"), (dict(block_n=208), "block_m x block_n"), (dict(block_n=160, cluster_m=2), "cluster_m"),
    (dict(stages=1), "stages"), (dict(stages=7), "stages"),
    (dict(in_dtype="float32"), "in_dtype"), (dict(out_dtype="int8"), "out_dtype"), (dict(b_major="x"), "major"),
    (dict(group_m=0), "group_m"), (dict(cluster_m=4), "cluster_m"), (dict(cluster_m=2, block_n=192), "cluster_m"),
    (dict(schedule="stream"), "schedule"), (dict(schedule="cooperative", block_m=64), "block_m"),
    (dict(block_m=256), "block_m"), (dict(schedule="cooperative", block_m=256, block_n=256), "block_m x block_n"),
    (dict(schedule="cooperative", block_m=256, grouped="contiguous", trace=True), "trace: the grouped kernel"),
    (dict(cluster_n=3), "cluster_n"), (dict(block_m=64, block_n=256, cluster_n=2), "cluster_n"),
    (dict(cluster_m=2, cluster_n=2), "not both"), (dict(raster="snake"), "raster"),
])
def test_config_rejects(kwargs, rule):
    with pytest.raises(ConfigError, match=rule):
        GemmConfig(**kwargs)


def test_a_config_is_five_parts_read_and_made_by_its_flat_fields():
    """Issue 51: GemmConfig holds five parts (docs/design/config-parts-issue51.md) and is still spoken of field by
    field: made, read, replaced, compared, hashed, pickled and written out flat."""
    import copy
    import dataclasses
    import pickle

    from ptxgemm.kernel.config import FIELD_PARTS
    from ptxgemm.kernel.config_parts import Fusion, Instrumentation
    from ptxgemm.kernel.tile import Tile

    assert [f.name for f in dataclasses.fields(GemmConfig)] == ["tile", "operands", "fusion", "grouping",
                                                                "instrumentation"]
    cfg = GemmConfig(schedule="cooperative", block_m=256, bias="col", activation="gelu", in_dtype=np.float16)
    assert (cfg.block_m, cfg.bias, cfg.in_dtype, cfg.tile.block_m, cfg.fusion.bias) == (256, "col", "float16", 256,
                                                                                         "col")
    assert GemmConfig.block_m == 128 and GemmConfig.raster == "m"   # the class reads each field's default
    assert cfg.tag == "coop256x128" and cfg.tile == Tile.from_tag("coop256x128")
    # a flat field overrides its part: dataclasses.replace passes the parts and the change
    debug = dataclasses.replace(cfg, debug=True)
    assert debug.debug and debug.instrumentation == Instrumentation(debug=True) and debug.tile is cfg.tile
    assert cfg.replace(debug=True) == debug != cfg and hash(dataclasses.replace(debug, debug=False)) == hash(cfg)
    assert GemmConfig(tile=cfg.tile, fusion=Fusion(bias="col"), activation="gelu", in_dtype="float16") == cfg
    assert GemmConfig(**cfg.fields()) == cfg and list(cfg.fields()) == list(FIELD_PARTS) and len(FIELD_PARTS) == 39
    assert {GemmConfig(block_n=192): 1}[GemmConfig(block_n=np.int64(192))] == 1   # value-based keys
    assert pickle.loads(pickle.dumps(cfg)) == cfg and copy.deepcopy(cfg) == cfg and eval(repr(cfg)) == cfg
    assert repr(GemmConfig(block_n=192)) == "GemmConfig(block_n=192)"
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.block_m = 128
    with pytest.raises(TypeError, match="block_k"):
        GemmConfig(block_k=64)
    with pytest.raises(ConfigError, match="tile: must be a Tile"):
        GemmConfig(tile={"block_m": 64})
    with pytest.raises(ConfigError, match="debug_timeout_ns"):
        GemmConfig(debug_timeout_ns=0)
    # each part checks its own rules where it is made
    with pytest.raises(ConfigError, match="block_m"):
        Tile(schedule="cooperative", block_m=64)
    with pytest.raises(ConfigError, match="activation"):
        Fusion(activation="tanh")


def _bf16(shape, order="C"):
    return np.ones(shape, dtype=ml_dtypes.bfloat16, order=order)


@pytest.mark.parametrize("a, b, match", [
    (_bf16((4, 16)), _bf16((8, 16)), "must equal"),                      # K mismatch
    (_bf16((2, 4, 16)), _bf16((3, 16, 8)), "do not broadcast"),
    (np.ones((4, 16), np.float32), _bf16((16, 8)), "astype"),            # says how to convert
    (np.ones((4, 16), np.float64), _bf16((16, 8)), "not supported"),
    (_bf16((4, 16)), np.ones((16, 8), np.float16), "same dtype"),
    (np.ones((4, 16), np.int8), _bf16((16, 8)), "not supported"),
    (_bf16(()), _bf16((16, 8)), "at least one dimension"),
])
def test_run_rejects_before_touching_the_gpu(a, b, match):
    with pytest.raises(ConfigError, match=match):
        ptxgemm.run(a, b)


def test_run_rejects_bad_out_dtype():
    with pytest.raises(ConfigError, match="out_dtype"):
        ptxgemm.run(_bf16((8, 16)), _bf16((16, 8)), out_dtype=np.int32)


def test_no_multi_line_macro_is_guarded_from_outside():
    """`@p {{ macro() }}` guards only the macro's first instruction: every predicated call site must expand to
    exactly one instruction (multi-instruction macros take their predicate as an argument instead)."""
    import pathlib

    from ptxgemm.kernel import codegen

    env = codegen.environment()
    for path in sorted(pathlib.Path(codegen.template_dir()).glob("*.j2")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            m = re.match(r"\s*@%\w+\s+\{\{\s*(\w+)\.(\w+)\(", line)
            if not m:
                continue
            module = {"mbar": "mbarrier.ptx.j2", "tma": "tma.ptx.j2"}[m.group(1)]
            macro = getattr(env.get_template(module).make_module({"debug": False}), m.group(2))
            args = ["%x"] * (len(macro.arguments))
            body = [ln for ln in macro(*args).splitlines() if ln.strip() and not ln.strip().startswith("//")]
            assert len(body) == 1, f"{path.name}:{number}: predicated call of {m.group(2)}, which emits {len(body)} lines"


def test_descriptors_mask_the_address_before_shifting():
    """(addr & 0x3FFFF) >> 4: without the mask, a cluster CTA's high shared-window bits land in the LBO field
    (harmless for K-major operands, which ignore LBO; wrong results for MN-major ones, seen on the H200)."""
    ptx = ptxgemm.render_gemm(GemmConfig(cluster_m=2))
    lines = ptx.splitlines()
    shifts = [i for i, line in enumerate(lines) if re.match(r"\s*shr\.u32\s+(%lo_[ab]0), \1, 4;", line)]
    assert len(shifts) == 2  # stage 0's low words, once per consumer; later stages add whole 16-byte units
    for i in shifts:
        reg = re.match(r"\s*shr\.u32\s+(%lo_[ab]0)", lines[i]).group(1)
        assert re.match(rf"\s*and\.b32\s+{reg}, %\w+, 0x3ffff;", lines[i - 1]), lines[i - 1]


K_LOOP_BUDGET = {GemmConfig(): 51, GemmConfig(block_n=192): 51, GemmConfig(cluster_m=2): 55,
                 GemmConfig(block_m=64, block_n=256): 39, GemmConfig.from_tag("coop256x128"): 51,
                 GemmConfig.from_tag("coop128x256"): 39, GemmConfig.from_tag("coop256x128c2"): 55}


@pytest.mark.parametrize("config", list(K_LOOP_BUDGET), ids=lambda c: c.describe())
def test_consumer_k_loop_stays_lean(config):
    """The pipeline layer's point: the consumer's k-tile loop is its HGMMAs plus a few uniform-datapath instructions
    (running stage/phase, no division; 32-bit descriptor words built in uniform registers, no R2UR moves).
    It was 82 instructions at 128x128 before; docs/perf-notes.md tracks the number per change."""
    from ptxgemm.tools.dump import k_loop_report

    loop = k_loop_report(ptxgemm.compile_gemm(config).sass())
    assert loop["hgmma"] == config.k_steps * config.m_halves
    assert loop["r2ur"] == 0
    assert loop["instructions"] <= K_LOOP_BUDGET[config]


def test_the_split_k_final_loads_two_partials_at_once_where_registers_allow():
    """fixup_batch: the 64-row tiles (at most 64 accumulators per thread) add their partials two at a time, the
    loads of both issued before the adds (splitk.ptx.j2's add_partials), the 128-row tiles one at a time, whose PTX
    is what it was (tests/test_ptx_hashes.py)."""
    from ptxgemm.toolchain.kernels import render_gemm

    narrow, wide = GemmConfig(block_m=64, block_n=128, splits=4), GemmConfig(splits=4)
    assert (narrow.fixup_batch, wide.fixup_batch) == (2, 1)
    ptx = render_gemm(narrow)
    body = ptx[ptx.index("_ADD_BATCH:"):]
    body = body[:body.index("_ADD:")]
    loads, adds = body.count("ld.global.cg.v4.f32"), body.count("add.f32")
    assert loads == 2 * narrow.partial_quads and adds == 2 * 4 * narrow.partial_quads
    assert body.rindex("ld.global.cg.v4.f32") < body.index("add.f32")    # every load before the first add
    assert "_ADD_BATCH:" not in render_gemm(wide)


def test_a_split_lead_lengthens_the_last_split_only():
    """GemmConfig.split_lead: the tag carries it after the split count (pp64x64k3l8s13) and not in the tile tag; it
    needs split-K and is refused with blockwise scales; the schedule gives the partials (k_tiles - lead) // splits
    k-tiles each and the final the rest, up to K exactly, and without a lead the splits are what they were."""
    from ptxgemm.kernel.schedule import effective_splits, plan_for

    cfg = GemmConfig.from_tag("pp64x64k3l8s13", a_major="mn", b_major="mn")
    assert (cfg.splits, cfg.split_lead, cfg.stages, cfg.tile_tag) == (3, 8, 13, "pp64x64s13")   # no walk in it
    assert GemmConfig.from_tag(cfg.tag).tag == "pp64x64k3l8s13" and "final split 8 k-tiles longer" in cfg.describe()
    with pytest.raises(ConfigError, match="split_lead: lengthens the last split's k-range, so it needs split-K"):
        GemmConfig(block_m=64, split_lead=4)
    with pytest.raises(ConfigError, match="split_lead: must be an integer in 0..64"):
        GemmConfig(block_m=64, splits=2, split_lead=65)
    with pytest.raises(ConfigError, match="split_lead: blockwise scaling"):
        GemmConfig.from_tag("pp64x64k2l4", in_dtype="float8_e4m3fn", b_major="k", block_scale=True)
    with pytest.raises(ConfigError, match="tag"):
        GemmConfig.from_tag("pp64x64l4")                       # a lead without a split count
    assert effective_splits(256, 3, 8) == (3, 82, 92)          # 82 + 82 + 92 = 256
    assert effective_splits(56, 2, 9) == (2, 23, 33)
    assert effective_splits(5, 8, 2) == (5, 1, 1)              # never an empty split
    assert effective_splits(257, 3) == (3, 86, 86)             # no lead: ceil(257 / 3) each, the last past K
    sched = plan_for(cfg, 128, 896, 16384, 132)
    assert (sched.k_tiles, sched.final_k_tiles, sched.units, sched.ring_passes) == (82, 92, 84, 92)
    assert [sched.unit_k_tiles(u) for u in range(6)] == [82, 82, 92] * 2
    assert plan_for(GemmConfig.from_tag("pp64x64k3s13"), 128, 896, 16384, 132).final_k_tiles == 86


def test_a_split_lead_gives_each_role_its_units_own_count():
    """The lead's kernel reads the final's count from param_k_last; the producer and each consumer take a unit's
    count from its split (splitk.k_count), the pingpong consumer 1 starts after consumer 0's first unit's count and
    each consumer skips its own unit's and its peer's next unit's counts; without a lead none of it is there."""
    from ptxgemm.toolchain.kernels import render_gemm

    ptx = render_gemm(GemmConfig.from_tag("pp64x64k2l9s13", in_dtype="float8_e4m3fn", b_major="k",
                                          out_dtype="bfloat16"))
    assert ".param .u32 param_k_last," in ptx and "ld.param.u32 %k_last, [param_k_last];" in ptx
    assert ptx.count("selp.u32    %k_count, %k_last, %k_tiles, %p_last_split;") == 2   # producer, consumer
    assert "setp.lt.u32 %p_more, %k_tile, %k_count;" in ptx and "setp.lt.u32 %p_more_k, %k_tile, %k_count;" in ptx
    assert "@%p_cons1 mov.u32 %pos, %first_count;" in ptx
    assert "add.u32     %pos, %pos, %k_count;" in ptx and "add.u32     %pos, %pos, %peer_count;" in ptx
    assert "mad.lo.u32  %pos, %k_tiles, 2, %pos;" not in ptx
    even = render_gemm(GemmConfig.from_tag("pp64x64k2s13", in_dtype="float8_e4m3fn", b_major="k",
                                           out_dtype="bfloat16"))
    assert "k_last" not in even and "%k_count" not in even and "mad.lo.u32  %pos, %k_tiles, 2, %pos;" in even
    coop = render_gemm(GemmConfig.from_tag("coop128x256k2l4"))
    assert "add.u32     %pos, %pos, %k_count;" in coop and "peer_count" not in coop
