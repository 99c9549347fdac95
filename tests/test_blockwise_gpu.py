"""Blockwise fp8 scaling (DeepSeek-V3's recipe: 1x128 scales per row of A, 128x128 per block of B) on every tile that
carries it, with split-K and cluster pairs, against a float64 reference of the dequantized inputs.

Tiles up to 64x128 per consumer keep two sets of k-tile products and alternate them by the k-tile's parity
(blockscale.ptx.j2); wider ones keep one set of one m64 row block, and a tile whose columns reach into a second block of
B's scales promotes through the copy for where that block begins. The cases vary what that can get wrong: one k-tile
(only the drain of the even set), counts that leave the two-set loop through each of its four drains, a last k-tile cut
short by K (TMA fills zeros), several tiles per consumer on 3 CTAs (the sets and the ring's phase carry from tile to
tile), and split-K ranges of which the last runs past K (its scale reads are clamped to the table's last block), every
copy of the promotion of the 144-, 160- and 192-column tiles, and the one set over two row blocks of the 256x128 and
pingpong 128x128 tiles, and the swap-AB tiles with the problem swapped (the scale tables' axes traded), given and as
the selection picks them. CASES_MN run the unswapped tiles with scale_a M-major (rows adjacent, each k-block's column
padded to 16 bytes, DeepGEMM's and torch's layout), read by the producer's TMA box per stage. Inputs are random
(never zero), scales random positive, the output NaN-poisoned, every element checked against ptxgemm.accuracy's
bound.
"""
from __future__ import annotations

import dataclasses
import re
import zlib

import numpy as np
import pytest
from gemm_reference import matmul64, random_matrix

from ptxgemm import accuracy
from ptxgemm.kernel.config import GemmConfig, SCALE_BLOCK
from ptxgemm.kernel.schedule import plan_for
from ptxgemm.plan import operands
from ptxgemm.plan.epilogue import m_major_ld, m_major_table

gpu = pytest.mark.gpu
CTAS = 3
FP8 = "float8_e4m3fn"

#: (tile tag, (M, N, K), what the case is for)
CASES = (
    ("coop128x128", (300, 260, 128), "one k-tile: only the even set, drain 0 at once"),
    ("coop128x128", (300, 260, 384), "3 k-tiles: the loop leaves through drain 2"),
    ("coop128x128", (300, 260, 2048), "16 k-tiles: drain 3; the ring wraps"),
    ("coop128x128", (333, 390, 2100), "17 k-tiles, the last cut short by K"),
    ("pp64x128", (200, 390, 1216), "pingpong, 10 k-tiles (drain 1), K not a multiple of 128"),
    ("pp64x128", (130, 260, 2176), "pingpong, 17 k-tiles"),
    ("coop128x64", (300, 200, 1920), "64-column tiles: one B scale column per two tiles"),
    ("pp64x64", (150, 330, 1408), "the smallest tile, 11 k-tiles"),
    ("pp64x64s13", (100, 650, 4224), "one set (narrow and unsplit) in the deep ring the small-M selection gives it: "
                                     "33 k-tiles, the ring of 13 wraps twice, rows past M"),
    ("pp64x32s16", (70, 200, 2176), "one set in a ring of 16 stages, 17 k-tiles, columns past N"),
    ("coop128x128c2", (520, 260, 1536), "a cluster pair multicasting B"),
    ("coop128x128cn2", (260, 520, 1664), "a cluster pair multicasting A"),
    ("pp64x128k3", (130, 390, 2176), "split-K 3 of 17 k-tiles: 6, 6 and 5, the last range past K"),
    ("coop128x128k2", (260, 260, 1920), "split-K 2 of 15 k-tiles: 8 and 7"),
    ("pp64x64k4", (64, 330, 7168), "split-K 4 at M = 64, DeepGEMM's small-M shape class"),
    # one product set (tiles too wide for two): each m64 row block issued, retired and promoted in turn
    ("coop128x192", (300, 520, 1408), "one set, 11 k-tiles; every copy of the promotion (B's second block at "
                                      "column 128 or 64)"),
    ("coop128x160", (260, 700, 1152), "one set; every copy of the promotion (t = 128, 96, 64, 32)"),
    ("coop128x144", (130, 1160, 640), "one set; every copy of the promotion (t = 16 .. 128, eight)"),
    ("coop256x128", (520, 260, 1664), "one set over two row blocks per consumer, B's one block"),
    ("pp128x128", (260, 390, 1152), "pingpong, one set over two row blocks per consumer"),
    ("coop128x192cn2", (260, 600, 1536), "one set in a cluster pair multicasting A; every copy of the promotion"),
    ("coop256x128c2", (1040, 260, 1280), "one set in a cluster pair multicasting B"),
    ("coop256x128cn2", (520, 520, 1664), "one set over two row blocks in a cluster pair multicasting A: the "
                                         "selection's pick at M = 4096 (BLOCK_SCALE_PAIR_A_TILES)"),
    ("coop128x160k2", (260, 330, 1920), "one set, split-K 2 of 15 k-tiles: 8 and 7"),
    ("coop128x112", (260, 460, 1280), "two sets with a second B block (t = 16, 32, 48, 64; 112: one block)"),
    # A's scales brought by the producer's warp 0 into a slot per stage (cfg.bs_a_in_smem: the unswapped tiles
    # whose ring and epilogue keep their counts with the slots, e.g. the 64-row pingpong and coop128x192); these aim
    # at it: rows past M (the copies clamp them to M - 1), split-K's last range past K (the copies' k-block clamped
    # to the table's last), the ring wrapping, the pingpong two-set loop and the cooperative one-set loop
    ("pp64x128", (100, 390, 1408), "two sets, A's scales in shared memory: rows past M, 11 k-tiles, the ring "
                                   "wraps"),
    ("pp64x128k3", (100, 260, 2944), "two sets, split-K 3 of 23 k-tiles: 8, 8 and 7, the last range past K, A's "
                                     "scales in shared memory"),
    ("pp64x64k2", (130, 200, 2432), "two sets, split-K 2 of 19 k-tiles: 10 and 9, the last range past K, A's "
                                    "scales in shared memory: rows past M"),
    ("coop128x192", (300, 400, 2176), "one set, A's scales in shared memory: rows past M, 17 k-tiles, the ring "
                                      "wraps"),
    # ... and the tiles whose ring or epilogue the slots would cut keep the consumers' loads: the 256-row tiles (4
    # stages), the pingpong and cooperative 128x128 (6 stages; 2 epilogue panel slots)
    ("coop256x128", (777, 390, 2304), "one set, A's scales loaded by the consumers: rows past M, 18 k-tiles"),
    ("coop256x128k2", (390, 260, 2944), "one set, split-K 2 of 23 k-tiles: 12 and 11, the last range past K, "
                                        "A's scales loaded by the consumers"),
    ("coop256x128c2", (1100, 390, 1664), "one set in a pair multicasting B, A's scales loaded by the consumers: "
                                         "the last pair's second tile row wholly past M"),
    ("pp128x128", (300, 390, 1408), "pingpong, one set, A's scales loaded by the consumers: rows past M"),
    ("coop128x128", (300, 390, 2944), "two sets (drain 2), A's scales loaded by the consumers: rows past M, 23 "
                                      "k-tiles"),
    # swap-AB (the transposed store; a row-major out computes C^T = B^T A^T): the kernel's rows are the caller's N
    # and take B's 128x128 scales, its columns the caller's rows, each with its own A scale
    ("pp64x32t", (40, 328, 1408), "swap-AB, 11 k-tiles: rows over three of B's scale blocks (the last partial), "
                                  "columns past M clamped"),
    ("pp128x16t", (9, 520, 2100), "swap-AB at a decode-sized M: 17 k-tiles, the last cut short by K"),
    ("pp128x32t", (70, 264, 256), "swap-AB, 2 k-tiles: the loop leaves through drain 1"),
    ("pp64x64tk2", (100, 392, 1920), "swap-AB with split-K 2 of 15 k-tiles: 8 and 7"),
)

#: scale_a M-major (GemmConfig.block_scale_a_mn): (tile tag, (M, N, K), what the case is for); M is never a
#: multiple of 4 where rows run past M, so the table's columns are padded (its column stride is not M)
CASES_MN = (
    ("pp64x128", (101, 390, 1408), "two sets, A's M-major scales by TMA: rows past M, 11 k-tiles, the ring wraps"),
    ("pp64x64k4", (64, 330, 7168), "split-K 4 at M = 64: DeepGEMM's small-M class, A's M-major scales by TMA"),
    ("pp64x64s13", (101, 650, 4224), "one set (narrow and unsplit) in the deep ring, A's M-major scales by TMA: "
                                     "33 k-tiles, rows past M"),
    ("pp64x64k2", (130, 200, 2432), "split-K 2 of 19 k-tiles: 10 and 9, the last range past K, A's M-major scales "
                                    "by TMA: rows past M"),
    ("coop128x128", (301, 390, 2944), "two sets (drain 2), A's M-major scales by TMA: rows past M, 23 k-tiles"),
    ("coop128x192", (301, 400, 2176), "one set, A's M-major scales by TMA: rows past M, 17 k-tiles, the ring wraps"),
    ("pp128x128", (301, 390, 1408), "pingpong, one set, A's M-major scales by TMA: rows past M"),
    ("coop256x128", (777, 390, 2304), "one set, A's M-major scales by TMA: rows past M, 18 k-tiles"),
    ("coop256x128k2", (390, 260, 2944), "one set, split-K 2 of 23 k-tiles: 12 and 11, the last range past K, A's "
                                        "M-major scales by TMA"),
    ("coop256x128cn2", (521, 520, 1664), "one set in a cluster pair multicasting A, A's M-major scales by TMA: "
                                         "each CTA loads its own"),
    ("coop256x128c2", (1101, 390, 1664), "one set in a pair multicasting B, A's M-major scales by TMA: the last "
                                         "pair's second tile row wholly past M"),
    ("coop128x192c2", (1101, 400, 2176), "one set in a pair multicasting B in 96-row halves (DeepGEMM's tile for "
                                         "4096x2112x7168), A's M-major scales by TMA: the last pair's second tile "
                                         "row wholly past M, the ring wraps"),
)


def _ctas(cfg: GemmConfig) -> int:
    """CTAS, rounded up to whole clusters."""
    return -(-CTAS // cfg.cluster_size) * cfg.cluster_size


def _config(tag: str, a_mn: bool = False) -> GemmConfig:
    """The tag's config as GemmPlan completes it for these cases' C-order outputs: a transposed tile swaps the
    problem, and the scale tables' axes with it; `a_mn`: scale_a M-major."""
    base = GemmConfig.from_tag(tag, b_major="k")   # K-major B first: a pair along M may split it where MN-major cannot
    return dataclasses.replace(base, in_dtype=FP8, out_dtype="bfloat16", a_major="k", b_major="k", block_scale=True,
                               block_scale_swapped=base.transposed_store, block_scale_a_mn=a_mn)


def _kernel_shape(cfg: GemmConfig, shape):
    """(M, N, K) as the kernel sees it: the caller's N and M traded when swapped."""
    m, n, k = shape
    return (n, m, k) if cfg.block_scale_swapped else shape


@pytest.mark.parametrize("tag, shape, why", CASES, ids=[f"{c[0]}-{'x'.join(map(str, c[1]))}" for c in CASES])
def test_each_case_exercises_what_it_claims(tag, shape, why):
    cfg = _config(tag)
    s = plan_for(cfg, *_kernel_shape(cfg, shape), 132, _ctas(cfg))
    k_blocks = -(-shape[2] // SCALE_BLOCK)
    if "one k-tile" in why:
        assert s.k_tiles == 1
    if "split-K" in why:
        assert s.splits == cfg.splits > 1 and s.splits * s.k_tiles >= k_blocks
        if "past K" in why:
            assert s.splits * s.k_tiles > k_blocks
    else:
        assert s.k_tiles == k_blocks
    if "cut short" in why or "not a multiple" in why:
        assert shape[2] % SCALE_BLOCK
    drain = re.search(r"drain (\d)", why)
    if drain:   # the two-set loop's copy that the tile's last k-tile ends in (GemmConfig.bs_unroll)
        assert cfg.bs_product_sets == 2 and (s.k_tiles - 1) % cfg.bs_unroll == int(drain.group(1))
    if "ring wraps" in why:
        assert s.k_tiles > cfg.num_stages
    assert s.units > _ctas(cfg), s.describe()   # a CTA runs several units: the sets carry across tiles
    assert ("one set" in why) == (cfg.bs_product_sets == 1)
    assert ("swap-AB" in why) == cfg.block_scale_swapped
    if "A's scales in shared memory" in why:   # brought by the producer's warp 0 (the other cases run either path)
        assert cfg.bs_a_in_smem
    if "A's scales loaded by the consumers" in why:
        assert not cfg.bs_a_in_smem
    assert not (cfg.bs_a_in_smem and cfg.block_scale_swapped)
    if "rows past M" in why:
        assert shape[0] % cfg.block_m
    if "wholly past M" in why:   # the pair's tile rows: the last pair's second lies below M
        assert -(-shape[0] // cfg.block_m) % cfg.cluster_m
    # the planner computes the problem swapped only where TMA can write the C-order out's transpose in place (its
    # rows whole 16-byte lines): otherwise it stages the out and the kernel takes the scales unswapped
    m, n, k = shape
    lay = operands.plan_matmul((m, k), (k, 1), 1 << 20, (k, n), (1, k), 2 << 20, 1, 2, (m, n), (2 * n, 2), 3 << 20,
                               cfg.transposed_store, k_major=True, swap=cfg.transposed_store)
    assert lay.swapped == cfg.block_scale_swapped, lay
    if cfg.block_scale_swapped:   # the rows: at least two of B's scale blocks; the columns: past M in the last tile
        assert shape[1] > SCALE_BLOCK and shape[0] % cfg.block_n
        return
    starts = {min(SCALE_BLOCK - j * cfg.block_n % SCALE_BLOCK, cfg.block_n) for j in range(-(-shape[1] // cfg.block_n))}
    if "every copy" in why:
        assert starts == set(cfg.bs_b_boundaries), (starts, cfg.bs_b_boundaries)
    if "second B block" in why:
        assert len(starts) > 1 and cfg.bs_b_boundaries[0] == cfg.block_n


@pytest.mark.parametrize("tag, shape, why", CASES_MN, ids=[f"{c[0]}-{'x'.join(map(str, c[1]))}" for c in CASES_MN])
def test_each_m_major_case_exercises_what_it_claims(tag, shape, why):
    """No GPU: the M-major cases run the TMA box (no copying lanes, its bytes in the stage's), with their table's
    columns padded, and what each names."""
    cfg = _config(tag, a_mn=True)
    s = plan_for(cfg, *shape, 132, _ctas(cfg))
    k_blocks = -(-shape[2] // SCALE_BLOCK)
    assert cfg.bs_a_in_smem and cfg.bs_a_copiers == 0 and cfg.full_arrivals == 1 + cfg.bs_b_in_smem
    assert cfg.stage_bytes == cfg.a_stage_bytes + cfg.b_stage_bytes + cfg.block_m * 4
    assert cfg.ring_stage_bytes == cfg.stage_bytes + cfg.bs_b_slot_bytes
    assert cfg.smem_bs_a % 128 == 0    # TMA's shared-memory destination alignment
    assert m_major_ld(shape[0]) != shape[0] or shape[0] % 4 == 0
    ptx = __import__("ptxgemm").render_gemm(cfg)
    # no copying lanes for A: the only cp.async are the leader's of B's scales (cfg.bs_b_in_smem) on cooperative
    # tiles, one arrive; on pingpong ones the walker, warp 1, brings them (cfg.bs_b_walker): no cp.async at all
    assert "tmap_scale_a" in ptx and "%bsp_row" not in ptx
    assert ptx.count("cp.async.mbarrier.arrive") == int(cfg.bs_b_in_smem and not cfg.bs_b_walker)
    assert ptx.count("BS_WALKER:") == int(cfg.bs_b_walker) and cfg.bs_b_walker == (cfg.bs_b_in_smem and not cfg.cooperative)
    if "split-K" in why:
        assert s.splits == cfg.splits > 1 and s.splits * s.k_tiles >= k_blocks
        if "past K" in why:
            assert s.splits * s.k_tiles > k_blocks
    else:
        assert s.k_tiles == k_blocks
    if "ring wraps" in why:
        assert s.k_tiles > cfg.num_stages
    if "rows past M" in why:
        assert shape[0] % cfg.block_m and shape[0] % 4
    if "wholly past M" in why:
        assert -(-shape[0] // cfg.block_m) % cfg.cluster_m
    assert ("one set" in why) == (cfg.bs_product_sets == 1)
    assert s.units > _ctas(cfg), s.describe()


def test_an_m_major_scale_a_is_planned_unswapped_and_a_misaligned_one_refused():
    """No GPU (the emulator's plan): an M-major scale_a selects the unswapped kernel with the TMA box even at a
    decode-sized M (the swap-AB kernel reads A's scales per thread), equals the C-contiguous table's result, and a
    column stride that is not a multiple of 16 bytes is refused, naming the rule."""
    from ptxgemm.errors import ConfigError
    from ptxgemm.tools import emulator

    rng = np.random.default_rng(77)
    for m, n, k in ((24, 1032, 640), (130, 260, 1408)):
        a = random_matrix(rng, m, k, FP8)
        b = random_matrix(rng, k, n, FP8, order="F")
        kb, nb = -(-k // SCALE_BLOCK), -(-n // SCALE_BLOCK)
        sa = rng.uniform(0.5, 2.0, (m, kb)).astype(np.float32)
        sb = rng.uniform(0.5, 2.0, (kb, nb)).astype(np.float32)
        sa_mn = m_major_table(sa).T[:m]
        out = emulator.HostArray.empty((m, n), np.dtype(accuracy.DTYPES["bfloat16"]))
        plan = emulator.GemmPlan(emulator._as_host(a, "a"), emulator._as_host(b, "b"), out, scale_a=sa_mn, scale_b=sb)
        assert plan.config.block_scale_a_mn and not plan.config.block_scale_swapped, plan.config.describe()
        plan.launch()
        rows = emulator.matmul(a, b, scale_a=sa, scale_b=sb)
        assert np.array_equal(out.numpy().view(np.uint16), rows.view(np.uint16))
        if m == 24:   # a swap-AB tile given (the out's transpose is writable: the problem would swap)
            with pytest.raises(ConfigError, match=r"block_scale_a_mn: .* unswapped dense and contiguous grouped kernels only"):
                emulator.matmul(a, b, scale_a=sa_mn, scale_b=sb, config=GemmConfig.from_tag("pp64x32t"))
    with pytest.raises(ConfigError, match=r"scale_a: an M-major .* multiple of 16 bytes"):
        emulator.matmul(a[:6], b, scale_a=np.asfortranarray(sa[:6]), scale_b=sb)



def test_the_cases_leave_the_two_set_loop_through_every_drain():
    two_set = [_config(tag) for tag, _, _ in CASES if _config(tag).bs_product_sets == 2]
    unroll = {c.bs_unroll for c in two_set}
    assert len(unroll) == 1
    named = {int(d) for _, _, why in CASES for d in re.findall(r"drain (\d)", why)}
    assert named == set(range(unroll.pop()))


def test_the_one_set_loop_probes_the_next_stage_under_its_last_promotion():
    """No GPU: each copy of the one-set loop probes the next k-tile's full barrier (mbarrier.test_wait) right after it
    releases its own stage, before its last row block's promotion, and skips its own wait where the previous copy's
    probe read true; the two-set loop has no probe. ptxas keeps the probe ahead of the FFMAs (the SASS of
    coop256x128cn2: SYNCS.PHASECHK.TRANS64 among the first FFMAs of the promotion, the blocking TRYWAIT after them)."""
    import ptxgemm

    one = _config("coop256x128cn2")
    ptx = ptxgemm.render_gemm(one)
    assert one.bs_product_sets == 1
    assert ptx.count("mbarrier.test_wait.parity") == one.bs_unroll
    assert ptx.count("@%p_full_ready bra BS_FULL_READY_ONE_") == one.bs_unroll
    body = ptx[ptx.index("BS_K_ONE:"):ptx.index("BS_K_ONE_DONE:")]
    for copy in body.split("BS_FULL_READY_ONE_")[1:]:
        probe = copy.find("mbarrier.test_wait")
        if probe < 0:
            continue
        # after the release (the empty arrive), before the promotion's first fma
        assert copy.rfind("mbarrier.arrive", 0, probe) >= 0 and copy.find("fma.rn.f32", probe) > probe
    assert "mbarrier.test_wait" not in ptxgemm.render_gemm(_config("pp64x128"))


@pytest.mark.parametrize("tag", ["coop256x128cn2", "coop256x128", "coop128x192", "pp64x64k3", "pp64x128", "pp64x32t"])
def test_b_scales_first_picks_wait_for_the_first_wgmmas(tag):
    """No GPU: at a tile's start the consumer loads B's first batch of scales, and the shfl that picks a k-tile's
    scale from it waits for that load; so no shfl may stand between the batch's load and the tile's first wgmma (in
    both loops: the one-set and the two-set), or the load's latency delays the first issue (issue 49, the short-K
    rows). Checked in the PTX; the SASS keeps the order (behind a branch ptxas does not move them across)."""
    import ptxgemm

    for a_mn in (False, True) if not tag.endswith("t") else (False,):
        cfg = _config(tag, a_mn=a_mn)
        ptx = ptxgemm.render_gemm(cfg)
        if cfg.bs_b_in_smem:   # B's scales come with the stage: no batch, no pick, read from the slot after the wait
            assert "shfl.sync.idx.b32 %bs_sb" not in ptx and f"+{cfg.smem_bs_b}]" in ptx, (tag, a_mn)
            continue
        start = ptx.index("// B's scales of k-tiles 0..")
        first_mma = ptx.index("wgmma.mma_async", start)
        assert "shfl.sync.idx" not in ptx[start:first_mma], (tag, a_mn)
        assert "shfl.sync.idx" in ptx[first_mma:ptx.index("fma.rn.f32", first_mma)], (tag, a_mn)


def _problem(rng, m, n, k):
    """Random fp8 operands (B K-major), random positive blockwise scales and a NaN-poisoned bf16 out: the host
    arrays, the scale arguments, and the out."""
    import ptxgemm

    a = random_matrix(rng, m, k, FP8)
    b = random_matrix(rng, k, n, FP8, order="F")
    kb, nb = -(-k // SCALE_BLOCK), -(-n // SCALE_BLOCK)
    args = {"scale_a": rng.uniform(0.5, 2.0, (m, kb)).astype(np.float32),
            "scale_b": rng.uniform(0.5, 2.0, (kb, nb)).astype(np.float32)}
    out = ptxgemm.DeviceArray.empty((m, n), np.dtype(accuracy.DTYPES["bfloat16"]))
    out.poison()
    return a, b, args, out


def _plan(a, b, args, out, config=None, **kw):
    import ptxgemm

    return ptxgemm.GemmPlan(ptxgemm.to_device(a), ptxgemm.to_device(b), out, config, **kw,
                            **{key: ptxgemm.to_device(v) for key, v in args.items()})


def _verdict(a, b, args, out):
    """The out against the float64 product of the dequantized inputs, element by element within the bound."""
    ref, bound = accuracy.fused_reference(a, b, args, "bfloat16", True, matmul64)
    return accuracy.check_bound(out.to_numpy(), ref, bound)


@gpu
@pytest.mark.parametrize("tag, shape, why", CASES, ids=[f"{c[0]}-{'x'.join(map(str, c[1]))}" for c in CASES])
def test_blockwise_case(tag, shape, why):
    a, b, args, out = _problem(np.random.default_rng(zlib.crc32(f"{tag}{shape}".encode())), *shape)
    cfg = _config(tag)
    plan = _plan(a, b, args, out, GemmConfig.from_tag(tag, b_major="k"), ctas=_ctas(cfg))
    assert plan.config == cfg, plan.config.describe()
    plan.launch()
    verdict = _verdict(a, b, args, out)
    assert verdict.ok, f"{why}; {cfg.describe()}: {verdict}"
    plan.launch()   # again, on the same plan: split-K's flags were reset, the result is bitwise the same
    again = out.to_numpy()
    plan.launch()
    assert np.array_equal(again.view(np.uint16), out.to_numpy().view(np.uint16)), "not deterministic"


@gpu
@pytest.mark.parametrize("tag, shape, why", CASES_MN, ids=[f"{c[0]}-{'x'.join(map(str, c[1]))}" for c in CASES_MN])
def test_blockwise_m_major_case(tag, shape, why):
    import ptxgemm

    m, n, k = shape
    a, b, args, out = _problem(np.random.default_rng(zlib.crc32(f"mn{tag}{shape}".encode())), *shape)
    kb = args["scale_a"].shape[1]
    padded = m_major_table(args["scale_a"], np.nan)   # the padding is never read
    table = ptxgemm.to_device(padded)
    scale_a = table.view((m, kb), (4, 4 * m_major_ld(m)))
    cfg = _config(tag, a_mn=True)
    plan = ptxgemm.GemmPlan(ptxgemm.to_device(a), ptxgemm.to_device(b), out, GemmConfig.from_tag(tag, b_major="k"),
                            ctas=_ctas(cfg), scale_a=scale_a, scale_b=ptxgemm.to_device(args["scale_b"]))
    assert plan.config == cfg, plan.config.describe()
    plan.launch()
    verdict = _verdict(a, b, args, out)
    assert verdict.ok, f"{why}; {cfg.describe()}: {verdict}"


@gpu
def test_the_selection_runs_a_decode_sized_problem_swapped():
    """No config: at M = 24 with a short k-loop the selection puts pp64x32t (select.cost_model.BLOCK_SCALE_SWAP_TILE)
    ahead of an unsplit first pick, the planner swaps the problem, and the result is within the bound. Where this
    GPU's table prefers a split (the H200's: pp64x64 split-K 4), the swap tile yields to it, as the rule says."""
    a, b, args, out = _problem(np.random.default_rng(2432), 24, 1032, 640)
    plan = _plan(a, b, args, out)
    if plan.config.tile_tag != "pp64x32t":
        assert plan.config.splits > 1 and not plan.config.transposed_store, plan.config.describe()
    else:
        assert plan.config.block_scale_swapped, plan.config.describe()
    plan.launch()
    verdict = _verdict(a, b, args, out)
    assert verdict.ok, f"{plan.config.describe()}: {verdict}"


@gpu
def test_mutants_of_the_a_scales_arrive_and_the_full_count_are_killed(tmp_path):
    """A's scales brought by the producer (cfg.bs_a_in_smem): each copying lane's cp.async.mbarrier.arrive.noinc
    deleted or made to count itself, and every barrier's init count one more or one less (the full barriers' count
    holds the 32 copying lanes besides the leader's arrive), on the pingpong 64x128 tile (preset blockwise-narrow):
    each caught, as a stall or a wrong result."""
    import json
    import subprocess
    import sys

    out = tmp_path / "mutants.json"
    proc = subprocess.run([sys.executable, "-m", "ptxgemm", "mutants", "--preset", "blockwise-narrow", "--kind",
                           "cp.async.mbarrier.arrive", "--kind", "mbarrier.init", "--json", str(out)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = json.loads(out.read_text())["configs"][0]["mutants"]
    arrives = [r for r in records if r["instruction"].startswith("cp.async.mbarrier.arrive.noinc")]
    full = [r for r in records if r["instruction"].startswith("mbarrier.init") and "[%full_bar], 34;" in r["instruction"]]
    # the copying lanes' arrive, deleted and counted (B's scales come from the walker on this pingpong tile: its
    # plain arrive is the walker mutants' own, tests/test_mutants.py)
    assert len(arrives) == 2 and full, records
    assert all(r["status"] == "killed" for r in arrives + full), [r for r in arrives + full if r["status"] != "killed"]


@gpu
def test_mutants_of_the_m_major_scale_box_are_killed(tmp_path):
    """A's M-major scales by the producer's TMA box (cfg.block_scale_a_mn, preset blockwise-mn: coop256x128, 3
    stages): the stage's expect_tx deleted, halved, or without the box's bytes ("scale box uncounted": the consumers
    may read the slot before it lands); and the leader's arrive once its copies of B's scales landed
    (cfg.bs_b_in_smem) deleted or made to count itself: each caught, as a stall or a wrong result."""
    import json
    import subprocess
    import sys

    out = tmp_path / "mutants.json"
    proc = subprocess.run([sys.executable, "-m", "ptxgemm", "mutants", "--preset", "blockwise-mn", "--kind",
                           "mbarrier.arrive.expect_tx", "--kind", "cp.async.mbarrier.arrive", "--json", str(out)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = json.loads(out.read_text())["configs"][0]["mutants"]
    assert {r["mutation"] for r in records} >= {"deleted", "bytes/2", "scale box uncounted", "counted"}, records
    assert all(r["status"] == "killed" for r in records), [r for r in records if r["status"] != "killed"]
