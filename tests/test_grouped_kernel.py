"""The grouped kernel without a GPU: its config rules, its shared-memory tables, its PTX (assembled by ptxas without
spills, the parameters in the order the host packs them) and the dense kernels left as they were."""
from __future__ import annotations

import ctypes
import dataclasses

import full_run
import numpy as np
import pytest

from ptxgemm.toolchain.kernels import compile_gemm, render_gemm
from ptxgemm.errors import ConfigError
from ptxgemm.kernel.codegen import entry_params
from ptxgemm.plan.grouped_call import kernel_arguments
from ptxgemm.kernel.config import GemmConfig
from ptxgemm.kernel.hardware import MAX_GROUPS, SMEM_PER_BLOCK_OPTIN
from ptxgemm.plan import grouped as rules, grouped_call

TILES = ("coop128x256", "coop128x128", "coop256x128")


def _cfg(tag, form, **kw):
    return GemmConfig.from_tag(tag, grouped=form, **kw)


@pytest.mark.parametrize("form", ["contiguous", "masked"])
@pytest.mark.parametrize("tag", TILES + ("coop128x256sk", "coop128x256c2sk", "coop256x128sk"))
def test_grouped_kernels_assemble_without_spills(tag, form):
    cfg = _cfg(tag, form)
    fn = compile_gemm(cfg).report.functions["gemm_grouped"]
    assert fn.spill_store_bytes == 0 and fn.spill_load_bytes == 0, fn
    assert cfg.smem_bytes <= SMEM_PER_BLOCK_OPTIN
    # the tables sit after every barrier and hold G + 1 entries each
    entries = cfg.group_table_entries
    assert entries == MAX_GROUPS + 1   # no capacity given: the most the kernel takes
    assert cfg.smem_groups >= cfg.smem_src_full and cfg.smem_group_units == cfg.smem_groups + 4 * entries
    assert cfg.smem_group_units + 4 * entries <= cfg.smem_bytes


def test_fp8_and_fp16_grouped_kernels_assemble():
    for kw in (dict(in_dtype="float8_e4m3fn", out_dtype="bfloat16", a_major="k", b_major="k", alpha=True),
               dict(in_dtype="float16", out_dtype="float16", b_major="k")):
        fn = compile_gemm(_cfg("coop128x256", "contiguous", **kw)).report.functions["gemm_grouped"]
        assert fn.spill_store_bytes == 0, fn


def test_a_fused_default_that_spills_yields_to_the_next_tile():
    """fp8 with alpha and SiLU spills on coop128x256 (as the dense cooperative kernel does, by 4 bytes); the
    default config then takes the next tile that does not."""
    from ptxgemm.toolchain.kernels import spills
    from ptxgemm.plan.grouped_call import default_config

    p = rules.GroupedProblem("contiguous", 8, 32768, 4096, 7168, "float8_e4m3fn", None, "bfloat16", (32768, 4096))
    first = default_config(p, "k", fused=dict(alpha=True, activation="silu"))
    assert first.tag == "coop128x256" and spills(first)
    cfg = default_config(p, "k", fused=dict(alpha=True, activation="silu"), spill_check=spills)
    assert cfg.tag != "coop128x256" and not spills(cfg) and cfg.alpha and cfg.activation == "silu"


@pytest.mark.parametrize("kw, rule", [
    (dict(schedule="pingpong", block_m=128, block_n=128), "pingpong"),
    (dict(schedule="cooperative", cluster_n=2, block_n=256), "cluster_n"),
    (dict(schedule="cooperative", splits=2), "splits"),
    (dict(schedule="cooperative", source_dtype="bfloat16"), "source_dtype"),
    (dict(schedule="cooperative", block_n=208), "whole number"),
    (dict(schedule="cooperative", raster="hilbert"), "hilbert"),
    (dict(schedule="cooperative", group_sort=True), "group_sort: only for the k form"),
])
def test_grouped_config_rules_name_what_they_refuse(kw, rule):
    with pytest.raises(ConfigError, match=rule):
        GemmConfig(grouped="contiguous", **kw)
    with pytest.raises(ConfigError, match="grouped: must be"):
        GemmConfig(schedule="cooperative", grouped="k-major")
    with pytest.raises(ConfigError, match="k form takes per-tensor scales only"):
        GemmConfig(schedule="cooperative", grouped="k", a_major="mn", b_major="mn", bias="col")
    with pytest.raises(ConfigError, match="group_stream_hint: in the k form"):
        GemmConfig(schedule="cooperative", grouped="k", a_major="mn", b_major="mn", group_stream_hint=True)
    with pytest.raises(ConfigError, match="group_stream_hint: only for a grouped kernel"):
        GemmConfig(schedule="cooperative", group_stream_hint=False)
    with pytest.raises(ConfigError, match="group_sort: only for a grouped kernel"):
        GemmConfig(schedule="cooperative", group_sort=False)


@pytest.mark.parametrize("form, b_major, hint, loads", [
    ("contiguous", "k", None, 1), ("contiguous", "mn", None, 4), ("masked", "k", None, 1),
    ("contiguous", "k", False, 0), ("k", "mn", None, 0), (None, "k", None, 0)])
def test_the_l2_hint_marks_only_one_row_groups_b_loads(form, b_major, hint, loads):
    """group_stream_hint (on by default for the contiguous and masked forms): each of B's TMA boxes is issued twice,
    under %p_stream with the evict-first policy and under !%p_stream without it, and A's loads never carry it; off,
    and in the k form and the dense kernels, no load does (their PTX is what it was before the hint; the k form's
    C stores carry the store hint, test_the_store_hint_marks_cs_stores_only_where_it_is_on)."""
    kw = dict(a_major="mn", b_major="mn") if form == "k" else dict(b_major=b_major)
    cfg = GemmConfig.from_tag("coop128x256", grouped=form, **kw,
                              **({} if form is None else {"group_stream_hint": hint}))
    lines = [ln.strip() for ln in render_gemm(cfg).splitlines()]
    hinted = [ln for ln in lines if ".L2::cache_hint" in ln and "mbarrier::complete_tx" in ln]
    assert len(hinted) == loads and all(ln.startswith("@%p_stream ") and "%tmap_b" in ln for ln in hinted)
    plain_b = [ln for ln in lines if ln.startswith("@!%p_stream cp.async.bulk.tensor")]
    assert len(plain_b) == loads and all("%tmap_b" in ln for ln in plain_b)
    assert sum("createpolicy.fractional.L2::evict_first" in ln for ln in lines) == (1 if loads or cfg.store_hint else 0)


def test_dense_kernels_keep_their_smem_map():
    """grouped=None adds nothing: the dense kernels' maps end where their barriers do."""
    for tag in ("coop128x256", "pp128x192"):
        cfg = GemmConfig.from_tag(tag)
        assert cfg.group_table_bytes == 0 and cfg.smem_bytes == cfg.smem_groups
        assert cfg.kernel_name == f"gemm_{cfg.schedule}"




@pytest.mark.parametrize("tag", ["coop128x256", "coop128x256c2sk"])
@pytest.mark.parametrize("form", ["contiguous", "masked"])
def test_the_host_packs_the_parameters_the_kernel_declares(form, tag):
    cfg = _cfg(tag, form)
    params = entry_params(render_gemm(cfg))
    names = [n for _, n in params]
    assert names[:3] == ["tmap_a", "tmap_b", "tmap_c"]
    problem = rules.GroupedProblem(form, 4, 300, 512, 256, "bfloat16", None, "bfloat16",
                                   (300, 512) if form == "contiguous" else (4, 300, 512))
    fix_up = (17, 0x3000, 0x4000) if cfg.stream_k else ()
    args = kernel_arguments(cfg, 300 * (4 if form == "masked" else 1), 512, 256, problem, 0x1000, 0x2000, 1024,
                            fix_up=fix_up)
    scalars = params[3:]
    assert len(args) == len(scalars), names
    width = {"u32": ctypes.c_uint32, "u64": ctypes.c_uint64, "f32": ctypes.c_float}
    for (ptype, pname), value in zip(scalars, args):
        assert isinstance(value, width[ptype]), (pname, value)
    by_name = dict(zip([n for _, n in scalars], [v.value for v in args]))
    assert by_name["param_groups"] == 4 and by_name["param_counts"] == 0x1000 and by_name["param_ldc"] == 1024
    assert by_name["param_group_rows"] == (300 if form == "masked" else 0)
    assert by_name["param_b_batch_step"] == 1 and by_name["param_a_batch_step"] == 0
    if cfg.stream_k:
        assert [by_name[p] for p in ("param_sk_fixup", "param_workspace", "param_flags")] == list(fix_up)


def test_the_search_covers_every_group():
    """The unit -> group search takes power-of-two steps from 0: their sum reaches the last group MAX_GROUPS - 1."""
    from ptxgemm.kernel.params import template_params

    steps = template_params(_cfg("coop128x256", "contiguous"))["group_search_steps"]
    assert sum(steps) >= MAX_GROUPS - 1 and all(s & (s - 1) == 0 for s in steps)


def test_a_smaller_capacity_gives_the_staging_its_second_slot():
    """The tables for 1024 groups (8 KB) cost coop128x256 one of its two staging slots per consumer; up to 256
    groups they do not."""
    big = _cfg("coop128x256", "contiguous")
    small = _cfg("coop128x256", "contiguous", group_capacity=256)
    assert (big.epi_slots, small.epi_slots) == (1, 2)
    assert small.num_stages == big.num_stages
    with pytest.raises(ConfigError, match="power of two"):
        _cfg("coop128x256", "contiguous", group_capacity=100)
    with pytest.raises(ConfigError, match="only for a grouped kernel"):
        GemmConfig.from_tag("coop128x256", group_capacity=16)


def test_the_default_tile_and_capacity():
    from ptxgemm.plan.grouped_call import default_config, group_capacity

    assert [group_capacity(g) for g in (1, 16, 17, 256, 257, 1024)] == [16, 16, 32, 256, 512, 1024]
    p = rules.GroupedProblem("masked", 4, 256, 4096, 7168, "bfloat16", None, "bfloat16", (4, 256, 4096))
    cfg = default_config(p, "k")
    assert cfg.grouped == "masked" and cfg.group_capacity == 16 and cfg.tag == "coop128x256"


def test_the_default_pairs_tall_groups_with_long_k_loops():
    """Pairs along M (cluster_m 2) where the mean group has PAIR_MIN_ROWS rows and a k-loop of MULTICAST_MIN_K, in
    16-bit: DeepGEMM's contiguous shapes and Mixtral's; not DeepSeek-V3's 128-row experts, the masked decode batches,
    the k form's short per-group K, or fp8."""
    from ptxgemm.plan.grouped_call import default_config

    def pick(form, groups, m, n, k, dtype="bfloat16"):
        shape = {"masked": (groups, m, n), "k": (groups, m, n)}.get(form, (m, n))
        return default_config(rules.GroupedProblem(form, groups, m, n, k, dtype, None, "bfloat16", shape),
                              "mn" if form == "k" else "k")

    assert pick("contiguous", 4, 32768, 4096, 7168).cluster_m == 2
    assert pick("contiguous", 8, 32768, 7168, 2048).tag == "coop128x256c2sk"
    assert pick("contiguous", 256, 32768, 4096, 7168).cluster_m == 1
    assert pick("masked", 4, 256, 4096, 7168).cluster_m == 1
    assert pick("k", 8, 4096, 14336, 32768).cluster_m == 2
    assert pick("k", 256, 2048, 7168, 32768).cluster_m == 1
    assert pick("contiguous", 4, 32768, 4096, 7168, "float8_e4m3fn").cluster_m == 1


def test_the_default_carries_the_stream_k_tail_where_the_dense_rule_weighs_it():
    """The stream-K tail (cut on the device, where only the unit count is known) in the contiguous and masked forms'
    default for 16-bit inputs with a k-loop of SK_MIN_K_TILES; not in the k form (its units' k-loops differ), fp8,
    short k-loops, groups of one unit row on average (memory-bound), or where no counts can fill a wave. Its
    arguments come exactly with it, and a launch whose k-tile numbers could overflow 32 bits is refused by name."""
    from ptxgemm.plan import grouped_call
    from ptxgemm.select.predict import SK_MIN_K_TILES

    def pick(form, groups, m, n, k, dtype="bfloat16"):
        shape = {"masked": (groups, m, n), "k": (groups, m, n)}.get(form, (m, n))
        return grouped_call.default_config(rules.GroupedProblem(form, groups, m, n, k, dtype, None, "bfloat16",
                                                                shape), "mn" if form == "k" else "k")

    assert pick("contiguous", 8, 32768, 4096, 7168).stream_k
    assert pick("contiguous", 64, 32768, 7168, 2048, "float16").stream_k
    assert pick("masked", 4, 256, 8192, 64 * SK_MIN_K_TILES).stream_k
    assert not pick("masked", 4, 256, 8192, 64 * SK_MIN_K_TILES - 64).stream_k
    assert not pick("masked", 4, 256, 4096, 7168).stream_k           # 4 x 2 x 16 = 128 units at most: no full wave
    assert not pick("masked", 32, 128, 4096, 7168).stream_k          # groups of one unit row
    assert not pick("contiguous", 256, 32768, 4096, 7168).stream_k   # 128 rows per group on average
    assert not pick("k", 8, 4096, 14336, 32768).stream_k
    assert not pick("contiguous", 8, 32768, 4096, 7168, "float8_e4m3fn").stream_k
    cfg = pick("contiguous", 8, 32768, 4096, 7168)
    p = rules.GroupedProblem("contiguous", 8, 32768, 4096, 7168, "bfloat16", None, "bfloat16", (32768, 4096))
    args = grouped_call.kernel_arguments(cfg, 32768, 4096, 7168, p, 0x1000, 0x2000, 8192, 0, None,
                                         (17, 0x3000, 0x4000))
    assert [a.value for a in args[-4:]] == [17, 0x3000, 0x4000, 0] and isinstance(args[-3], ctypes.c_uint64)
    with pytest.raises(ConfigError, match="^fix_up: "):
        grouped_call.kernel_arguments(cfg, 32768, 4096, 7168, p, 0x1000, 0x2000, 8192)
    with pytest.raises(ConfigError, match="^config.stream_k: .*32-bit"):
        grouped_call.check_stream_k(cfg, rules.GroupedProblem("contiguous", 8, 2 ** 24, 2 ** 16, 2 ** 16, "bfloat16",
                                                              None, "bfloat16", (2 ** 24, 2 ** 16)))


def test_the_store_hint_marks_cs_stores_only_where_it_is_on():
    """group_store_hint: C's TMA stores carry .L2::cache_hint with the evict-first policy, on by default for the k
    form only; every other store and load is untouched; a dense config refuses the field."""
    from ptxgemm.toolchain.kernels import render_gemm

    def stores(cfg):
        ptx = render_gemm(cfg)
        lines = [ln for ln in ptx.splitlines() if "cp.async.bulk.tensor" in ln and ".global.shared::cta" in ln]
        return len(lines), sum(".L2::cache_hint" in ln and "%l2_policy" in ln for ln in lines), ptx

    k = GemmConfig.from_tag("coop128x256", grouped="k", a_major="mn", b_major="mn", group_capacity=64)
    n, hinted, ptx = stores(k)
    assert k.store_hint and n == hinted == k.epi_panels and "createpolicy.fractional.L2::evict_first" in ptx
    assert ".L2::cache_hint" not in "".join(ln for ln in ptx.splitlines() if ".shared::cluster.global" in ln)
    off = dataclasses.replace(k, group_store_hint=False)
    assert stores(off)[1] == 0 and "createpolicy" not in stores(off)[2]
    rows = _cfg("coop128x256", "contiguous", group_capacity=64)
    assert not rows.store_hint and stores(rows)[1] == 0
    assert stores(dataclasses.replace(rows, group_store_hint=True))[1] == rows.epi_panels
    with pytest.raises(ConfigError, match="group_store_hint: only for a grouped kernel"):
        GemmConfig.from_tag("coop128x256", group_store_hint=True)


def test_the_fuzzers_grouped_cases_are_legal_and_reproducible():
    """Every drawn grouped case satisfies the argument rules (the fuzzer tests the kernel, not the checks), the
    draws repeat from the seed, and they cover both forms, every dtype, empty groups and G up to 256."""
    import numpy as np

    from ptxgemm.accuracy import DTYPES
    from ptxgemm.tools import fuzz_grouped

    class Like:
        def __init__(self, shape, dtype):
            self.shape, self.dtype = shape, np.dtype(DTYPES.get(dtype, dtype))

    specs = [fuzz_grouped.draw(np.random.default_rng([7, 25])) for _ in range(1)]
    rng = np.random.default_rng([7, 25])
    specs = [fuzz_grouped.draw(rng) for _ in range(300)]
    again = np.random.default_rng([7, 25])
    assert specs[:5] == [fuzz_grouped.draw(again) for _ in range(5)]
    for s in specs:
        g, n, k = s["groups"], s["n"], s["k"]
        b = Like((g, k, n), s["dtype"])
        if s["form"] == "contiguous":
            counts = np.cumsum(s["sizes"]).astype(np.int32)
            p = rules.parse(Like((sum(s["sizes"]) + s["extra_rows"], k), s["dtype"]), b, offs=counts)
        else:
            counts = np.array(s["sizes"], dtype=np.int32)
            p = rules.parse(Like((g, s["m_max"], k), s["dtype"]), b, masked_m=counts)
        assert p.groups == g and (k * np.dtype(DTYPES[s["dtype"]]).itemsize) % 16 == 0
    assert {s["form"] for s in specs} == {"contiguous", "masked"}
    assert {s["dtype"] for s in specs} == set(fuzz_grouped.DTYPES)
    assert any(0 in s["sizes"] for s in specs) and max(s["groups"] for s in specs) == 256


def test_the_k_form_assembles_and_reads_both_operands_mn_major():
    for tag in ("coop128x256", "coop128x128", "coop256x128"):
        cfg = _cfg(tag, "k", a_major="mn", b_major="mn", group_capacity=64)
        fn = compile_gemm(cfg).report.functions["gemm_grouped"]
        assert fn.spill_store_bytes == 0 and not compile_gemm(cfg).report.warning_codes, fn
    with pytest.raises(ConfigError, match="k form reads A and B MN-major"):
        _cfg("coop128x256", "k", a_major="k", b_major="mn")
    ptx = render_gemm(_cfg("coop128x256", "k", a_major="mn", b_major="mn", group_capacity=64))
    # the tail of a group's last k-tile is zeroed in A and B before the wgmmas, and empty groups write zeros
    assert "GROUPED_K_TAIL_DONE" in ptx and "GROUPED_EMPTY_UNIT" in ptx and "PRODUCER_NEXT:" in ptx
    dense = render_gemm(GemmConfig.from_tag("coop128x256"))
    assert "GROUPED_K_TAIL_DONE" not in dense and "PRODUCER_NEXT" not in dense


class _Fake:
    """A device array as the plan's layout code sees it: pointer, shape, byte strides, dtype, and views."""

    def __init__(self, shape, dtype, strides=None, ptr=1 << 20):
        import numpy as np

        self.shape, self.dtype, self.ptr = tuple(shape), np.dtype(dtype), ptr
        item = self.dtype.itemsize
        self.strides = strides or tuple(int(np.prod(shape[i + 1:])) * item for i in range(len(shape)))

    def view(self, shape, strides=None, offset=0, dtype=None):
        return _Fake(shape, self.dtype, strides, self.ptr + offset)


def test_the_k_form_maps_and_arguments():
    import ml_dtypes

    from ptxgemm import grouped as api

    bf16 = ml_dtypes.bfloat16
    m, total, n, g = 200, 464, 256, 4
    a = _Fake((total, m), bf16).view((m, total), (2, 2 * m))           # x.T of row-major x (total_K, M)
    b = _Fake((total, n), bf16)
    out = _Fake((g, m, n), bf16)
    problem = rules.GroupedProblem("k", g, m, n, total, "bfloat16", None, "bfloat16", (g, m, n))
    cfg = _cfg("coop128x256", "k", a_major="mn", b_major="mn", group_capacity=16)
    from ptxgemm.plan import grouped_layout

    lay = grouped_layout.plan("k", a, b, out)
    assert lay.staged == () and (lay.a_major, lay.b_major) == ("mn", "mn")
    specs, c_pitch = api._specs(cfg, problem, lay, (a.dtype, b.dtype, out.dtype))
    assert specs["tmap_a"].dims == (m, total, 1) and specs["tmap_a"].strides[0] == 2 * m
    assert specs["tmap_b"].dims == (n, total, 1) and specs["tmap_c"].dims == (n, m, g) and c_pitch == 2 * n
    # a K-contiguous a and an N-strided b are no longer refused: each is staged M-major (N-major), the copy
    # transposing it (tests/test_grouped_layout.py has every layout class)
    lay = grouped_layout.plan("k", _Fake((m, total), bf16), _Fake((n, total), bf16).view((total, n), (2, 2 * total)),
                              out)
    assert lay.staged == ("a", "b") and (lay.a.place.inner, lay.b.place.inner) == ("cols", "cols")
    args = kernel_arguments(cfg, m, n, total, problem, 0x1000, 0x2000, c_pitch)
    names = [nm for _, nm in entry_params(render_gemm(cfg))][3:]
    by_name = dict(zip(names, [v.value for v in args]))
    assert by_name["param_group_rows"] == total and by_name["param_b_batch_step"] == 0


def test_dump_writes_the_grouped_kernel(tmp_path):
    """`python -m ptxgemm dump --grouped FORM` writes the grouped kernel's PTX and SASS, without a GPU."""
    import json
    import subprocess
    import sys

    for form in ("contiguous", "k"):
        out = tmp_path / form
        proc = subprocess.run([sys.executable, "-m", "ptxgemm", "dump", "--m", "512", "--n", "1024", "--k", "2048",
                               "--grouped", form, "--out", str(out)], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        report = json.loads((out / "report.json").read_text())
        assert report["config"]["fields"]["grouped"] == form and "grouped" in report["schedule"]
        assert ".visible .entry gemm_grouped" in (out / "gemm.ptx").read_text()


def test_the_grouped_epilogue_maps_per_group_arguments_and_refuses_what_is_unverified(monkeypatch):
    """scale_a per token, scale_b and bias per group, blockwise tables per group: each becomes the dense epilogue's
    argument on group 0 plus the stride the kernel adds per group; while unverified each is refused by name."""
    import numpy as np


    def convert(x, name):
        return x

    f32 = np.float32
    p = rules.GroupedProblem("contiguous", 4, 700, 256, 1000, "float8_e4m3fn", None, "bfloat16", (700, 256))
    # the table of parts held back until their GPU tests pass (empty now): a part in it is refused by its argument
    monkeypatch.setattr(grouped_call, "UNVERIFIED", {
        "vectors": ("scale_a, scale_b, bias", "rowwise scales"), "blockwise": ("scale_a, scale_b", "blockwise scales")})
    with pytest.raises(ConfigError, match="^scale_a, scale_b, bias: .*has not yet run on a GPU"):
        grouped_call.grouped_epilogue(p, 1.0, _Fake((700,), f32), _Fake((4, 256), f32), None, None, convert)
    with pytest.raises(ConfigError, match="^scale_a, scale_b: .*blockwise.*has not yet run"):
        grouped_call.grouped_epilogue(p, 1.0, _Fake((700, 8), f32), _Fake((4, 8, 2), f32), None, None, convert)
    monkeypatch.setattr(grouped_call, "UNVERIFIED", {})
    fused, strides = grouped_call.grouped_epilogue(p, 1.0, _Fake((700,), f32), _Fake((4, 256), f32), _Fake((4, 256), f32),
                                           "silu", convert)
    assert fused.row_scale.shape == (700,) and fused.col_scale.shape == (256,) and fused.bias_axis == "col"
    assert strides == {"col_scale": 256, "bias": 256}
    fused, strides = grouped_call.grouped_epilogue(p, 1.0, 0.5, 2.0, _Fake((256,), f32), None, convert)
    assert fused.alpha == 1.0 and strides == {}   # a shared bias: stride 0
    fused, strides = grouped_call.grouped_epilogue(p, 1.0, _Fake((700, 8), f32), _Fake((4, 8, 2), f32), None, None, convert)
    assert fused.block_a.shape == (700, 8) and fused.block_b.shape == (8, 2) and strides == {}
    masked = rules.GroupedProblem("masked", 4, 128, 256, 1000, "float8_e4m3fn", None, "bfloat16", (4, 128, 256))
    fused, _ = grouped_call.grouped_epilogue(masked, 1.0, _Fake((4, 128), f32), None, None, None, convert)
    assert fused.row_scale.shape == (512,)
    with pytest.raises(ConfigError, match="^bias: the grouped GEMM adds a bias per column"):
        grouped_call.grouped_epilogue(p, 1.0, None, None, _Fake((700, 1), f32), None, convert)
    cfg = _cfg("coop128x128", "contiguous", in_dtype="float8_e4m3fn", out_dtype="bfloat16", a_major="k",
               b_major="k", col_scale=True, bias="col", row_scale=True)
    names = [nm for _, nm in entry_params(render_gemm(cfg))]
    assert names.index("param_bias_group_stride") == names.index("param_ldc") + 1
    args = kernel_arguments(cfg, 700, 256, 1000, p, 1, 2, 512, 0, {"bias": 256, "col_scale": 256})
    assert [a.value for a in args][-3:] == [256, 256, 0]


def test_one_block_per_group_is_refused_not_read_as_one_scale_for_all():
    """Blockwise per expert with K <= 128 and N <= 128: each group's table is one block, which the dense epilogue
    would read as one per-tensor scale (group 0's) for every group; refused by name instead (the emulated fuzzer's
    blockwise draws found it)."""
    import numpy as np

    f32 = np.float32
    p = rules.GroupedProblem("contiguous", 4, 32, 128, 64, "float8_e4m3fn", None, "bfloat16", (32, 128))
    with pytest.raises(ConfigError, match=r"^scale_b: a blockwise table of one block per group"):
        grouped_call.grouped_epilogue(p, 1.0, _Fake((32, 1), f32), _Fake((4, 1, 1), f32), None, None,
                                      lambda x, name: x)
    one = rules.GroupedProblem("contiguous", 1, 32, 128, 64, "float8_e4m3fn", None, "bfloat16", (32, 128))
    fused, _ = grouped_call.grouped_epilogue(one, 1.0, _Fake((32, 1), f32), _Fake((1, 1, 1), f32), None, None,
                                             lambda x, name: x)
    assert fused.device_b is not None or fused.block_b is not None   # one group: its one scale is every group's


def test_the_emulated_grouped_fuzzer_finds_nothing(monkeypatch):
    """CI's net under the grouped plans: random grouped calls through ptxgemm.grouped.plan_launch on the plan
    emulator (the kernel's parameters read by name from its PTX, A, B and C through the tensor maps' specs, every
    byte inside its allocation), each group's rows within the bound and every other row untouched; the grouped API's
    illegal inputs named (grouped_run's too); then the same with every part of the kernel taken. Issue 48's draws
    are among them: sizes off the 16-byte grid, every layout (staged or in place), fp8 B N-major, grouped_run on
    numpy arrays: 0 wrong, 0 refused."""
    import os

    from ptxgemm.tools.fuzz_grouped import fuzz_grouped

    seed = int.from_bytes(os.urandom(4), "little")
    cases = full_run.pick(60, 150, "emulated grouped fuzz cases")
    report = fuzz_grouped(cases, seed, log=lambda s: None, backend="emulate")
    assert (report["correct"], report["bad_inputs"]["misnamed"]) == (cases, []), (seed, report["failures"][:2])
    monkeypatch.setattr(grouped_call, "UNVERIFIED", {})
    cases = full_run.pick(40, 100, "emulated grouped fuzz cases, every part taken")
    report = fuzz_grouped(cases, seed, log=lambda s: None, backend="emulate")
    assert report["correct"] == cases, (seed, report["failures"][:2])


def test_a_grid_cap_that_splits_a_pair_keeps_single_ctas():
    """A caller's ctas that cannot hold the default's pairs whole gets single CTAs (as the dense selection does); a
    given pair config with such a cap is refused by name before anything reaches the GPU."""
    import numpy as np

    from ptxgemm import grouped as grouped_api
    from ptxgemm.tools import emulator

    a = np.zeros((4 * 2048, 2048), np.float16)
    b = np.zeros((4, 2048, 256), np.float16)
    offs = np.array([2048, 4096, 6144, 8192], np.int32)

    def plan(**kw):
        return grouped_api.plan_launch(a, b, offs=offs, convert=emulator._as_host, upload=emulator.upload,
                                       allocate=emulator.HostArray.empty, sm_count=lambda: 132,
                                       spill_check=lambda cfg: False, **kw)

    assert plan().config.cluster_m == 2 and plan(ctas=4).config.cluster_m == 2
    assert plan(ctas=3).config.cluster_m == 1
    with pytest.raises(ConfigError, match="ctas: must be a positive whole number of 2-CTA clusters"):
        plan(ctas=3, config=GemmConfig.from_tag("coop128x256c2"))


def test_a_grouped_call_is_keyed_by_signature_not_address():
    """grouped_matmul's plan cache: numbers by value, device arrays by shape, strides, dtype and address class
    (never the address: a step's new activations find the plan); host memory the plan would copy (counts, a host
    vector) is not keyable, so such a call plans anew."""
    import numpy as np

    from ptxgemm.grouped import host_or_number, signatures

    dev, moved, odd = _Fake((4, 256), np.float32), _Fake((4, 256), np.float32), _Fake((4, 256), np.float32)
    moved.ptr, odd.ptr = dev.ptr + (1 << 20), dev.ptr + 8
    sig = signatures({"a": dev, "scale_a": 2.0})
    assert sig == signatures({"a": moved, "scale_a": 2.0})
    assert sig != signatures({"a": odd, "scale_a": 2.0}) and sig != signatures({"a": dev, "scale_a": 3.0})
    assert host_or_number(np.ones(4, np.float32)) and host_or_number(0.5) and not host_or_number(dev)


#: registers every probe entry declares: what the scheduler's macros read and write outside their own scopes
_PROBE_REGS = ("%smem_base", "%thread", "%tile", "%m", "%tiles_m", "%tiles_n", "%num_tiles", "%rank", "%m0", "%n0",
               "%batch", "%row_end", "%k_tiles", "%k_start", "%k_valid")


def _probe_ptx(cfg, body, params: tuple[str, ...], fields: tuple[str, ...]) -> str:
    """A macro of cfg's rendered grouped_scheduler.ptx.j2 (`body(sched)` renders it) in an entry `probe` of its own,
    for the PTX interpreter (tests/ptx_sim.py). The entry takes `params` (".u32 param_x", ...: those named after a
    register of _PROBE_REGS are loaded into it, the macros read the rest themselves) and then param_out;
    %smem_base is 0, so the tables sit at the config's own offsets of the caller's shared memory; %tile and
    %thread are the thread's index. After the macro each thread stores `fields` as u32 at
    out + 4 x len(fields) x its index (read back by _probe_results)."""
    from ptxgemm.kernel.codegen import environment
    from ptxgemm.kernel.params import template_params

    sched = environment().get_template("grouped_scheduler.ptx.j2").make_module(vars=template_params(cfg))
    names = [p.split()[1] for p in params]
    loads = "\n".join(f"    ld.param.u32 %{nm[6:]}, [{nm}];" for p, nm in zip(params, names)
                      if p.startswith(".u32") and f"%{nm[6:]}" in _PROBE_REGS)
    stores = "\n".join(f"    st.global.u32 [%dst+{4 * i}], {r};" for i, r in enumerate(fields))
    declared = ", ".join(f".param {p}" for p in (*params, ".u64 param_out"))
    return f""".version 8.0
.target sm_90a
.address_size 64
.visible .entry probe({declared})
{{
    .reg .u32 {", ".join(_PROBE_REGS)};
    .reg .u64 %dst, %offset;
    mov.u32 %smem_base, 0;
    mov.u32 %thread, %tid.x;
    mov.u32 %tile, %tid.x;
{loads}
{body(sched)}
    ld.param.u64 %dst, [param_out];
    mul.wide.u32 %offset, %thread, {4 * len(fields)};
    add.u64 %dst, %dst, %offset;
{stores}
    ret;
}}
"""


def _probe_results(memory, out: int, threads: int, fields: int) -> list[tuple]:
    """What each of `threads` threads of a _probe_ptx entry stored: `fields` u32 each."""
    return [tuple(sum(memory.written[out + 4 * (fields * t + f) + b] << (8 * b) for b in range(4))
                  for f in range(fields)) for t in range(threads)]


def _table_bytes(tables: dict) -> dict:
    """Shared memory holding u32 tables, {byte address: value}, from {first address: [entries]}."""
    return {base + 4 * i + b: (int(v) >> (8 * b)) & 0xFF
            for base, entries in tables.items() for i, v in enumerate(entries) for b in range(4)}


def _tile_coords(sched) -> str:
    return sched.tile_coords("%tile", "%m0", "%n0", "%batch")


@pytest.mark.parametrize("tag", ["coop128x128", "coop128x128c2"])
@pytest.mark.parametrize("form", ["contiguous", "masked"])
def test_the_kernels_unit_arithmetic_is_the_models(form, tag):
    """tile_coords of the rendered template, run by the PTX interpreter (tests/ptx_sim.py) on tables laid out as
    warp 0 writes them, gives every position the unit the Python walk (ptxgemm.kernel.grouped_walk) gives it: the
    same group, first row and column, and group end, for skewed, empty, one-row and unaligned groups; with a pair
    along M (c2), each rank's tile of the unit."""
    import math

    import numpy as np
    from ptx_sim import Kernel, Memory

    from ptxgemm.kernel import grouped_walk

    rng = np.random.default_rng(2511)
    counts = [int(c) for c in rng.choice([0, 1, 5, 64, 128, 129, 300, 700], size=37)]
    bm, bn, n = 128, 128, 3 * 128 + 40                      # 4 tile columns, the last a partial one
    cfg = _cfg(tag, form, group_capacity=64)
    pair = cfg.cluster_m
    if form == "masked":
        m_max = 700
        ends = [g * m_max + min(c, m_max) for g, c in enumerate(counts)]
        values, total = counts, m_max
    else:
        ends = list(np.cumsum(counts))
        values, total = ends, ends[-1]
    tiles_n = math.ceil(n / bn)
    per_group = grouped_walk.units_per_group(form, values, total, 0, n, bm, bn, pair)
    shared = _table_bytes({cfg.smem_groups: [0] + ends, cfg.smem_group_units: [0] + list(np.cumsum(per_group))})
    units = sum(per_group)
    out = 1 << 20
    walks = grouped_walk.walk(form, values, total, 0, n, bm, bn, ctas=pair, cluster_m=pair)
    ptx = _probe_ptx(cfg, _tile_coords, (".u32 param_groups", ".u32 param_group_rows", ".u32 param_tiles_n",
                                         ".u32 param_num_tiles", ".u32 param_rank"),
                     ("%m0", "%n0", "%batch", "%row_end"))
    for rank in range(pair):
        memory = Memory({}, set(range(out, out + 16 * units)), {})
        Kernel(ptx, "probe").run(1, units, [len(counts), m_max if form == "masked" else 0, tiles_n, units, rank, out],
                                 memory, shared=Memory(shared, set(), {}))
        got = _probe_results(memory, out, units, 4)
        want = [(u.m0 + (u.group * m_max if form == "masked" else 0), u.n0, u.group,
                 u.row_end + (u.group * m_max if form == "masked" else 0)) for u in walks[rank]]
        assert got == want


@pytest.mark.parametrize("tag", ["coop128x128", "coop128x128c2"])
@pytest.mark.parametrize("sort", [False, None])
def test_the_k_forms_unit_arithmetic_is_the_models(sort, tag):
    """The k form's tile_coords, run by the PTX interpreter on tables laid out as warp 0 writes them, gives each
    position the unit the Python walk gives it: the group, the tile and the group's K range (first K, k-tiles, the
    K of the last k-tile), in index order or, sorted (GemmConfig.group_sort), longest k-loop first
    (grouped_walk.k_order), on single CTAs and pairs."""
    import math

    import numpy as np
    from ptx_sim import Kernel, Memory

    from ptxgemm.kernel import grouped_walk

    ks = [0, 1, 64, 65, 300, 0, 7, 65]                      # empty groups, ties, whole and partial k-tiles
    ends = [int(e) for e in np.cumsum(ks)]
    m, n, bm, bn, bk = 300, 3 * 128 + 40, 128, 128, 64
    cfg = _cfg(tag, "k", a_major="mn", b_major="mn", group_capacity=8, group_sort=sort)
    assert cfg.group_sorted == (sort is None) and cfg.block_k == bk
    pair = cfg.cluster_m
    tiles_m, tiles_n = math.ceil(m / (bm * pair)), math.ceil(n / bn)
    units = tiles_m * tiles_n * len(ks)
    order = grouped_walk.k_order(ends, ends[-1], bk)
    assert order == [4, 3, 7, 1, 2, 6, 0, 5]            # k-tiles 5, 2, 2, 1, 1, 1, 0, 0
    shared = _table_bytes({cfg.smem_groups: [0] + ends,
                           cfg.smem_group_units: [0] + (order if cfg.group_sorted else [])})
    out = 1 << 20
    ptx = _probe_ptx(cfg, _tile_coords, (".u32 param_m", ".u32 param_tiles_m", ".u32 param_tiles_n",
                                         ".u32 param_rank"),
                     ("%m0", "%n0", "%batch", "%k_start", "%k_tiles", "%k_valid"))
    walks = grouped_walk.walk("k", ends, ends[-1], m, n, bm, bn, ctas=pair, cluster_m=pair,
                              block_k=bk if cfg.group_sorted else None)
    spans = grouped_walk.ranges("k", ends, ends[-1])
    for rank in range(pair):
        memory = Memory({}, set(range(out, out + 24 * units)), {})
        Kernel(ptx, "probe").run(1, units, [m, tiles_m, tiles_n, rank, out], memory,
                                 shared=Memory(shared, set(), {}))
        got = _probe_results(memory, out, units, 6)
        want = []
        for u in walks[rank]:
            s, e = spans[u.group]
            k_tiles = math.ceil((e - s) / bk)
            want.append((u.m0, u.n0, u.group, s, k_tiles, e - s - (k_tiles - 1) * bk if k_tiles else bk))
        assert got == want
        assert [g for g, *_ in [w[2:3] for w in want[::tiles_m * tiles_n]]] == (order if sort is None else
                                                                                list(range(len(ks))))


def test_the_sort_keys_are_distinct_and_rank_the_longest_k_loop_first():
    """grouped_walk.sort_key, which the kernel's warp 0 computes: distinct and positive for every group the tables
    can hold, larger for a longer k-loop, and for equal k-loops larger for the lower index; k-loops past
    SORT_MAX_K_TILES tie."""
    from ptxgemm.kernel import grouped_walk as w
    from ptxgemm.kernel.hardware import MAX_GROUPS

    keys = {w.sort_key(t, g) for t in (0, 1, 2, w.SORT_MAX_K_TILES) for g in range(MAX_GROUPS)}
    assert len(keys) == 4 * MAX_GROUPS and min(keys) > 0 and max(keys) < 1 << 32
    assert w.sort_key(2, 900) > w.sort_key(1, 0) and w.sort_key(1, 3) > w.sort_key(1, 4)
    assert w.sort_key(w.SORT_MAX_K_TILES + 5, 1) == w.sort_key(w.SORT_MAX_K_TILES, 1)
    assert w.k_order([0, 0, 128], 128, 64) == [2, 0, 1]


def test_the_sort_is_on_by_default_for_the_k_form_up_to_its_table_size():
    """group_sort None: sorted where the tables hold at most SORT_DEFAULT_MAX_GROUPS groups (the rank sort costs
    the square of the tables); True sorts any table; False and the other forms never; the sorted kernel's warp 0
    ranks the groups by shfl, the unsorted one has no such loop."""
    from ptxgemm.kernel.grouped_walk import SORT_DEFAULT_MAX_GROUPS

    def k(**kw):
        return _cfg("coop128x256", "k", a_major="mn", b_major="mn", **kw)
    assert k(group_capacity=SORT_DEFAULT_MAX_GROUPS).group_sorted
    assert not k(group_capacity=2 * SORT_DEFAULT_MAX_GROUPS).group_sorted
    assert k(group_capacity=2 * SORT_DEFAULT_MAX_GROUPS, group_sort=True).group_sorted
    assert not k(group_capacity=8, group_sort=False).group_sorted
    assert not _cfg("coop128x256", "contiguous", group_capacity=8).group_sorted
    sorted_ptx, plain_ptx = (render_gemm(k(group_capacity=8, group_sort=s)) for s in (None, False))
    assert "GROUP_SORT_LANE" in sorted_ptx and "shfl.sync.idx" in sorted_ptx
    assert "GROUP_SORT_LANE" not in plain_ptx


@pytest.mark.parametrize("form, sort", [("contiguous", None), ("masked", None), ("k", None), ("k", False)])
@pytest.mark.parametrize("groups", [1, 7, 37, 256])
def test_warp_0s_scan_and_sort_build_the_models_tables(form, sort, groups):
    """after_init of the rendered template, run by the PTX interpreter with warp 0's shuffles in lockstep (and a
    second warp that only meets the CTA barrier), writes the tables the Python walk reads: each group's clamped
    end, its first unit (contiguous, masked) or, in the sorted k form, the groups longest k-loop first
    (grouped_walk.k_order); and the walk's unit count. The counts hold empty groups, ties, offs that fall back
    (clamped to the running max) for one group and for runs of 2 to 17 whole lanes (so every step of the
    max-scan carries some lane's start), run past the total, and masked counts below 0 and past M_max."""
    import math

    import numpy as np
    from ptx_sim import Kernel, Memory, Scratch

    from ptxgemm.kernel import grouped_walk

    rng = np.random.default_rng(groups * 7 + len(form))
    cap = 1 << max(groups - 1, 0).bit_length()
    kw = dict(a_major="mn", b_major="mn", group_sort=sort) if form == "k" else {}
    cfg = _cfg("coop128x256", form, group_capacity=cap, **kw)
    assert cfg.group_sorted == (form == "k" and sort is None)
    sizes = rng.choice([0, 0, 1, 5, 63, 64, 65, 128, 129, 300, 700], size=groups)
    m, n, m_max = 520, 600, 300
    if form == "masked":
        values = [int(c) for c in sizes]
        values[0] = -3 if groups > 1 else values[0]
        values[-1] = m_max + 40
        total = m_max
    else:
        values = [int(v) for v in np.cumsum(sizes)]
        if groups > 2:
            values[1] = 0                                   # offs falling back: clamped to the running max
        chunk = -(-groups // 32)                            # groups per lane of warp 0
        # ... over runs of 2, 4 and 8 whole lanes, or with 256 groups (8 per lane) 2, 4 and 17: each step of the
        # max-scan carries some lane's start
        for first, last in ((2, 4), (5, 9), (10, 18) if groups < 256 else (14, 31)):
            for g in range(first * chunk, min(last * chunk, groups - 1)):
                values[g] = 0
        total = values[-1] - 10 if values[-1] > 10 else values[-1]   # the last offs past the total
    tiles_n = math.ceil(n / cfg.block_n)
    tiles_m = math.ceil(m / cfg.block_m)
    counts_at, out = 1 << 16, 1 << 20
    readable = {counts_at + 4 * g + b: ((v & 0xFFFFFFFF) >> (8 * b)) & 0xFF
                for g, v in enumerate(values) for b in range(4)}
    memory = Memory(readable, set(range(out, out + 4 * 64)), {})
    shared = Scratch()
    ptx = _probe_ptx(cfg, lambda sched: sched.after_init(),
                     (".u64 param_counts", ".u32 param_groups", ".u32 param_group_rows", ".u32 param_m",
                      ".u32 param_tiles_m", ".u32 param_tiles_n"), ("%num_tiles",))
    Kernel(ptx, "probe").run(
        1, 64, [counts_at, groups, m_max if form == "masked" else (total if form == "k" else 0), total, tiles_m,
                tiles_n, out], memory, shared=shared)
    spans = grouped_walk.ranges(form, values, total)
    ends = [shared.u32(cfg.smem_groups + 4 * (g + 1)) for g in range(groups)]
    base = [g * m_max if form == "masked" else 0 for g in range(groups)]
    assert ends == [b + e for b, (_, e) in zip(base, spans)] and shared.u32(cfg.smem_groups) == 0
    units = _probe_results(memory, out, 1, 1)[0][0]                  # thread 0's (every thread has it)
    if form == "k":
        assert units == tiles_m * tiles_n * groups
        if cfg.group_sorted:
            order = [shared.u32(cfg.smem_group_units + 4 * (s + 1)) for s in range(groups)]
            assert order == grouped_walk.k_order(values, total, cfg.block_k)
    else:
        per_group = grouped_walk.units_per_group(form, values, total, 0, n, cfg.block_m, cfg.block_n)
        firsts = [shared.u32(cfg.smem_group_units + 4 * (g + 1)) for g in range(groups)]
        assert firsts == list(np.cumsum(per_group)) and units == sum(per_group)


@pytest.mark.parametrize("tag", [None, "coop128x128c2", "coop256x128"])
def test_an_m_major_blockwise_scale_a_is_read_by_the_producers_box_in_the_contiguous_form(tag):
    """A contiguous grouped call's scale_a (total_M, kb) M-major (DeepGEMM's and torch's layout): the config takes
    block_scale_a_mn (A's scales by the producer's TMA box at the tile's row of the whole table; B's stay with the
    consumers, who add each group's table offset), the plan a fourth tensor map after C's, and the emulated kernel
    the same result as with the table C-contiguous, bit for bit; a masked call's M-major table is refused by name."""
    import ml_dtypes

    import ptxgemm
    from ptxgemm.plan.epilogue import m_major_table
    from ptxgemm.tools import emulator

    rng = np.random.default_rng(49)
    sizes, k, n = [200, 0, 1, 333, 130], 1008, 384
    g, kb, nb, total = len(sizes), -(-k // 128), -(-n // 128), sum(sizes)
    a = rng.standard_normal((total, k)).astype(ml_dtypes.float8_e4m3fn)
    b = rng.standard_normal((g, n, k)).astype(ml_dtypes.float8_e4m3fn).transpose(0, 2, 1)
    sa = rng.uniform(0.5, 2.0, (total, kb)).astype(np.float32)
    sa_m, sb = m_major_table(sa, np.nan).T[:total], rng.uniform(0.5, 2.0, (g, kb, nb)).astype(np.float32)
    offs = np.cumsum(sizes).astype(np.int32)
    config = GemmConfig.from_tag(tag, b_major="k") if tag else None
    got = emulator.grouped_run(a, b, offs=offs, scale_a=sa_m, scale_b=sb, config=config)
    want = emulator.grouped_run(a, b, offs=offs, scale_a=np.ascontiguousarray(sa_m), scale_b=sb, config=config)
    assert np.array_equal(np.asarray(got).view(np.uint16), np.asarray(want).view(np.uint16))
    cfg = GemmConfig.from_tag(tag or "coop128x128", in_dtype="float8_e4m3fn", b_major="k", block_scale=True,
                              block_scale_a_mn=True, grouped="contiguous", group_capacity=8)
    assert cfg.bs_a_in_smem and not cfg.bs_b_in_smem and cfg.full_arrivals == 1
    ptx = ptxgemm.render_gemm(cfg)
    # the boxes start on the quad holding the tile's first row (run 80: a box at row 201 faulted), the consumers
    # read from m0 mod 4 on
    assert "and.b32     %bsp_row, %m0, 0xFFFFFFFC;" in ptx and "and.b32     %tmp, %m0, 3;" in ptx
    assert ptx.count("[%tmap_scale_a, {%bsp_row, %bsp_kb}]") == cfg.bs_a_boxes and "{%m0, %bsp_kb}" not in ptx
    assert "ld.global.nc.f32 %bs_sa_" not in ptx
    masked_a = rng.standard_normal((g, 336, k)).astype(ml_dtypes.float8_e4m3fn)
    table = np.zeros((kb, g * 336), np.float32).T
    with pytest.raises(ConfigError, match="scale_a: an M-major blockwise table"):
        emulator.grouped_run(masked_a, b, masked_m=np.array(sizes, np.int32), scale_a=table, scale_b=sb)


@pytest.mark.parametrize("tag", ["coop128x128", "coop256x128", "coop128x128c2"])
def test_the_contiguous_forms_scale_boxes_start_aligned_and_cover_the_tile_from_any_row(tag):
    """The contiguous grouped kernel's tile rows start at a group's first row, any row of A's M-major table. TMA faults
    on a box whose innermost start is not 16-byte aligned (H200, run 80: groups 200, 0, 1, 333, 130 faulted, 200, 0,
    4, 332, 132 did not), so each box starts at the quad holding the tile's first row: for every first row, every
    box starts on a 16-byte boundary, the boxes hold the tile's block_m rows, they land inside the stage's slot,
    each slot starts where TMA may write (128 bytes), and the expect_tx counts every box byte."""
    from ptxgemm.kernel.hardware import TMA_ALIGN, TMA_SMEM_ALIGN
    from ptxgemm.kernel.layout import SCALE_BYTES

    cfg = GemmConfig.from_tag(tag, in_dtype="float8_e4m3fn", b_major="k", block_scale=True, block_scale_a_mn=True,
                              grouped="contiguous", group_capacity=8)
    assert cfg.bs_a_quads and cfg.bs_a_box_rows <= 256   # TMA's box extent
    span = cfg.block_m // cfg.bs_a_boxes
    for m0 in range(0, 1031):
        first = m0 & ~(cfg.bs_a_quad_rows - 1)
        boxes = [(first + i * span, first + i * span + cfg.bs_a_box_rows) for i in range(cfg.bs_a_boxes)]
        assert all(lo * SCALE_BYTES % TMA_ALIGN == 0 for lo, _ in boxes), m0
        held = set().union(*(range(lo, hi) for lo, hi in boxes))
        assert set(range(m0, m0 + cfg.block_m)) <= held, m0
        assert max(i * span + cfg.bs_a_box_rows for i in range(cfg.bs_a_boxes)) * SCALE_BYTES <= cfg.bs_a_slot_bytes
    assert cfg.smem_bs_a % TMA_SMEM_ALIGN == 0 and cfg.bs_a_slot_bytes % TMA_SMEM_ALIGN == 0
    assert cfg.stage_bytes == cfg.a_stage_bytes + cfg.b_stage_bytes + cfg.bs_a_boxes * cfg.bs_a_box_rows * SCALE_BYTES
    assert f"mbarrier.arrive.expect_tx.shared::cta.b64 _, [%full_bar], {cfg.stage_bytes};" in render_gemm(cfg)
    dense = dataclasses.replace(cfg, grouped=None, group_capacity=None)
    assert not dense.bs_a_quads and dense.bs_a_boxes == 1 and dense.bs_a_box_rows == dense.block_m
