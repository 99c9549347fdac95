"""The traced kernel without a GPU: trace=False changes nothing, trace=True records every event the host decodes,
assembles cleanly, and the command says what it needs."""
from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import numpy as np
import pytest

import ptxgemm
from assemble import assemble_ahead
from ptxgemm import GemmConfig
from ptxgemm.kernel import trace_format
from ptxgemm.kernel.params import template_params
from ptxgemm.toolchain.kernels import render_gemm
from ptxgemm.tools import trace_decode

UNTRACED = [GemmConfig(), GemmConfig(block_n=192, out_dtype="float32"),
            GemmConfig(block_m=64, block_n=256, in_dtype="float16", out_dtype="float16", a_major="k", b_major="k"),
            GemmConfig(cluster_m=2, a_major="mn", b_major="mn"), GemmConfig(debug=True),
            GemmConfig.from_tag("coop128x256"), GemmConfig.from_tag("coop256x128c2"),
            GemmConfig.from_tag("coop128x256k4"), GemmConfig.from_tag("pp64x128k2"),
            GemmConfig.from_tag("coop128x256c2sk")]
TRACED = [GemmConfig(trace=True), GemmConfig(trace=True, cluster_m=2, a_major="mn"),
          GemmConfig(trace=True, block_m=64, block_n=256, out_dtype="float32"), GemmConfig(trace=True, block_n=192)]
#: the cooperative schedule and split-K, traced (each schedule's paths: trace_format.consumer_paths)
TRACED_PATHS = [GemmConfig.from_tag("coop128x256", trace=True), GemmConfig.from_tag("coop256x128c2", trace=True),
                GemmConfig.from_tag("coop128x256k4", trace=True), GemmConfig.from_tag("pp64x128k2", trace=True),
                GemmConfig.from_tag("coop256x192", trace=True, out_dtype="float32"),
                GemmConfig.from_tag("coop128x128", trace=True, in_dtype="float8_e4m3fn", b_major="k",
                                    block_scale=True, splits=2),
                GemmConfig.from_tag("coop128x256", trace=True, bias="col", activation="gelu", col_pairs=True),
                GemmConfig.from_tag("coop128x256c2sk", trace=True), GemmConfig.from_tag("coop256x128sk", trace=True)]


KERNEL_TEMPLATES = ("gemm_roles.ptx.j2", "gemm_consumer.ptx.j2", "gemm_pingpong.ptx.j2", "gemm_cooperative.ptx.j2",
                    "splitk.ptx.j2", "streamk.ptx.j2")


def without_blank_lines(ptx: str) -> str:
    """The PTX without whitespace-only lines: a trace macro renders nothing when tracing is off, which leaves its
    call site's indentation on a line of its own."""
    return "\n".join(line for line in ptx.split("\n") if line.strip())


def render_without_the_feature(config: GemmConfig) -> str:
    """The kernel as it would be had tracing never been written: its templates with every trace construct cut out
    of the source (each trace macro's call, the `{% if cfg.trace %}` blocks, the parameter list's comma, the
    macro import)."""
    import jinja2

    from ptxgemm.kernel import codegen

    cut = {}
    for name in KERNEL_TEMPLATES:
        source = (codegen.template_dir() / name).read_text()
        source = re.sub(r"^\{% if cfg\.trace %\}\n.*?^\{% endif %\}\n", "", source, flags=re.S | re.M)
        source = re.sub(r"^[ \t]*\{\{ trace\.\w+\(.*\) \}\}\n", "", source, flags=re.M)
        source = source.replace('{{ "," if cfg.trace }}', "")
        source = source.replace('{% import "trace.ptx.j2" as trace with context %}\n', "")
        assert "cfg.trace" not in source and "trace." not in source.replace("ptxgemm.tools.trace", ""), name
        cut[name] = source
    env = codegen.environment()
    env = env.overlay(loader=jinja2.ChoiceLoader([jinja2.DictLoader(cut), env.loader]))
    params = template_params(config)
    return without_blank_lines(env.get_template(params["template_name"]).render(**params))


@pytest.mark.parametrize("config", UNTRACED, ids=lambda c: c.describe())
def test_untraced_ptx_is_identical_to_a_build_without_the_feature(config):
    assert not config.trace
    assert without_blank_lines(render_gemm(config)) == render_without_the_feature(config)


def test_the_cut_removes_what_tracing_adds():
    """The comparison above is not vacuous: cut out of a traced render, the same blocks leave the untraced PTX."""
    assert render_without_the_feature(GemmConfig(trace=True)) != without_blank_lines(render_gemm(GemmConfig(trace=True)))
    assert (render_without_the_feature(GemmConfig(trace=True)).replace(", traced", "")
            == without_blank_lines(render_gemm(GemmConfig())))


def test_trace_flag_is_the_only_difference():
    plain, traced = render_gemm(GemmConfig()), render_gemm(GemmConfig(trace=True))
    assert "globaltimer" not in plain and "trace_" not in plain
    assert "%globaltimer" in traced and "%clock64" in traced


def _sections(ptx: str) -> dict[str, str]:
    """The producer's and the consumers' code of the kernel body."""
    producer = ptx[ptx.index("\nPRODUCER:"):ptx.index("\nCONSUMER:")]
    return {"producer": producer, "consumer": ptx[ptx.index("\nCONSUMER:"):]}


def _codes(text: str) -> list[int]:
    return [int(c) for c in re.findall(r"mov\.u32\s+%trace_word, (\d+);", text)]


@pytest.mark.parametrize("config", TRACED, ids=lambda c: c.describe())
def test_traced_ptx_records_each_roles_events_once_per_site(config):
    ptx = render_gemm(config)
    for name in ("trace_header_param", "trace_records_param", "trace_capacity_param", "trace_total_param"):
        assert f".param .u{64 if 'capacity' not in name and 'total' not in name else 32} {name}" in ptx
    sections = _sections(ptx)
    # one call site per event kind: the cycles ptxgemm.tools.trace's grammar expects, bracketed by start and end
    assert sorted(_codes(sections["producer"])) == sorted([trace_format.ROLE_START, *trace_format.PRODUCER_CYCLE, trace_format.ROLE_END])
    assert sorted(_codes(sections["consumer"])) == sorted([trace_format.ROLE_START, *trace_format.CONSUMER_CYCLE, trace_format.ROLE_END])
    # the record layout the decoder reads: timer at +0, cycles at +8, (code, value) at +16
    assert re.search(r"st\.global\.u64 \[%trace_addr\], %trace_stamp", ptx)
    assert re.search(r"st\.global\.u64 \[%trace_addr\+8\], %trace_stamp", ptx)
    assert re.search(r"st\.global\.v2\.u32 \[%trace_addr\+16\]", ptx)
    assert f"mad.wide.u32 %trace_addr, %trace_next, {trace_format.RECORD_BYTES}," in ptx
    assert f"mad.wide.u32 %trace_entry, %trace_slice, {trace_format.HEADER_ENTRY_BYTES}," in ptx


def _instructions(section: str) -> tuple[list[str], dict[str, int]]:
    """The section's instructions (comments and declarations dropped) and each label's index among them."""
    code, labels = [], {}
    for line in section.splitlines():
        line = line.split("//", 1)[0].strip()
        if not line or line in "{}" or line.startswith("."):
            continue
        if re.fullmatch(r"\w+:", line):
            labels[line[:-1]] = len(code)
        else:
            code.append(line)
    return code, labels


def writer_tile_paths(ptx: str) -> set[tuple[int, ...]]:
    """Every sequence of trace codes the consumers' writer thread (its warpgroup's leader: %p_leader true) can record
    from one pass of CONSUMER_TILE to the next (or to the end, closed by ROLE_END): the PTX's branches walked as a
    graph, both ways where the predicate is anything but the leader's. Loops record nothing, so (instruction,
    codes so far) states are finite."""
    code, labels = _instructions(ptx[ptx.index("\nCONSUMER_TILE:"):])
    start, found, seen = labels["CONSUMER_TILE"], set(), set()
    stack = [(start, ())]
    while stack:
        i, codes = stack.pop()
        if (i, codes) in seen:
            continue
        seen.add((i, codes))
        line = code[i]
        event = re.match(r"mov\.u32\s+%trace_word, (\d+);", line)
        if event:
            codes += (int(event.group(1)),)
        if line.startswith("ret"):
            found.add(codes)
            continue
        branch = re.match(r"(?:@(!?)(%\w+)\s+)?bra(?:\.uni)?\s+(\w+);", line)
        nexts = [i + 1]
        if branch:
            negated, predicate, target = branch.groups()
            taken = [labels[target]]
            if predicate is None or (predicate == "%p_leader" and not negated):
                nexts = taken
            elif predicate != "%p_leader":
                nexts = taken + nexts
        for j in nexts:
            if j == start:
                found.add(codes)
            else:
                stack.append((j, codes))
    return found


@pytest.mark.parametrize("config", TRACED + TRACED_PATHS, ids=lambda c: c.describe())
def test_every_path_through_a_tile_records_one_of_the_schedules_paths(config):
    """Walked through the consumer's branches, each tile records exactly the codes of one of its schedule's paths
    (the grammar ptxgemm.tools.trace_decode checks), a split-K tile a partial's or the final's, a stream-K segment
    a whole tile's, a partial's or a final's, and the loop's exit ROLE_END alone: the events sit where the decoder
    expects them on every branch, split-K's and stream-K's included."""
    paths = trace_format.consumer_paths(config.schedule)
    expected = ({paths["partial"], paths["final"]} if config.split_k else
                {paths["tile"], paths["partial"], paths["final"]} if config.stream_k else {paths["tile"]})
    assert writer_tile_paths(render_gemm(config)) == expected | {(trace_format.ROLE_END,)}


@pytest.mark.parametrize("config", TRACED_PATHS, ids=lambda c: c.describe())
def test_cooperative_and_split_k_record_each_event_once_per_site(config):
    ptx = render_gemm(config)
    sections = _sections(ptx)
    assert sorted(_codes(sections["producer"])) == sorted([trace_format.ROLE_START, *trace_format.PRODUCER_CYCLE,
                                                           trace_format.ROLE_END])
    paths = trace_format.consumer_paths(config.schedule)
    codes = set(paths["partial"] + paths["final"]) if config.split_k or config.stream_k else set(paths["tile"])
    assert sorted(_codes(sections["consumer"])) == sorted([trace_format.ROLE_START, *codes, trace_format.ROLE_END])
    # the header's fourth word: the schedule, so the decoder knows the paths
    word = trace_format.SCHEDULES.index(config.schedule)
    assert re.search(r"st\.global\.v4\.u32 \[%trace_entry\], \{ %trace_count, %trace_smid, %trace_zero, "
                     + (str(word) if word else "%trace_zero") + r" \}", ptx)


def test_cooperative_records_no_wait_for_its_stores():
    """Tracing must not change the schedule: the cooperative epilogue's bulk-store waits and barriers are the
    untraced kernel's (a store wait once per panel, before its slot is rewritten), none added for an event. (The
    one wait tracing adds is the mainloop's, on the first stage's full barrier, which both schedules share.)"""
    for tag in ("coop128x256", "coop256x128", "coop128x256k4"):
        plain = render_gemm(GemmConfig.from_tag(tag))
        traced = render_gemm(GemmConfig.from_tag(tag, trace=True))
        for pattern in (r"cp\.async\.bulk\.wait_group(\.read)? \d+;", r"bar\.sync\b", r"\bred\.", r"ld\.acquire"):
            assert len(re.findall(pattern, traced)) == len(re.findall(pattern, plain)), (tag, pattern)


def test_consumer_hand_over_is_recorded_before_the_arrive():
    """MMA_ISSUED and STORE_DRAINED carry times no later than the peer's next ORDER_ACQUIRED / EPILOGUE_START only
    if they are taken before the arrive that lets the peer go: the GPU test's no-overlap check rests on it."""
    consumer = _sections(render_gemm(GemmConfig(trace=True)))["consumer"]
    lines = consumer.splitlines()

    def index(pattern, after=0):
        return next(i for i, line in enumerate(lines) if i >= after and re.search(pattern, line))

    issued = index(rf"%trace_word, {trace_format.MMA_ISSUED};")
    assert issued < index(r"bar\.arrive %peer_mma_bar", issued - 40)
    drained = index(rf"%trace_word, {trace_format.STORE_DRAINED};")
    assert drained < index(r"bar\.arrive %peer_epi_bar", drained - 40)


@pytest.fixture(scope="module")
def traced_assembled_ahead():
    assemble_ahead(TRACED + TRACED_PATHS, sass=True)   # a cold cubin cache: all at once (tests/assemble.py)


@pytest.mark.usefixtures("traced_assembled_ahead")
@pytest.mark.parametrize("config", TRACED + TRACED_PATHS, ids=lambda c: c.describe())
def test_traced_build_is_clean(config):
    kernel = ptxgemm.compile_gemm(config)
    assert not kernel.report.warnings, kernel.report.warnings
    fn = kernel.report.functions[config.kernel_name]
    assert fn.registers == config.entry_registers
    # tracing must not push the kernel's registers to local memory, not even at 128x192 (192 accumulators of 232)
    assert fn.spill_store_bytes == fn.spill_load_bytes == 0
    assert not re.search(r"\b(LDL|STL)\b", kernel.sass())


def test_traced_config_is_its_own_kernel():
    traced = GemmConfig(trace=True)
    assert traced != GemmConfig() and "traced" in traced.describe() and "traced" not in GemmConfig().describe()
    assert dataclasses.replace(traced, trace=False) == GemmConfig()


def test_trace_command_says_it_needs_a_gpu(tmp_path):
    from ptxgemm.runtime import driver

    if driver.no_device_reason() is None:
        pytest.skip("a GPU is present: the command would run (tests/test_trace_gpu.py covers that)")
    proc = subprocess.run([sys.executable, "-m", "ptxgemm", "trace", "--m", "256", "--n", "256", "--k", "256",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "trace runs the kernel, so it needs an sm_90 GPU" in proc.stderr
    assert not any(tmp_path.iterdir())  # nothing half-written


def test_trace_command_rejects_bad_sizes(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "ptxgemm", "trace", "--m", "-5", "--n", "256", "--k", "256",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--m: must be >= 1, got -5" in proc.stderr


def test_capacity_covers_the_busiest_role_of_a_schedule():
    """The plan sizes every slice from its schedule: the busiest producer loads ring_passes k-tiles, the busiest
    consumer runs max_tiles_per_consumer tiles (both with ROLE_START and ROLE_END)."""
    from ptxgemm.kernel.schedule import plan_schedule

    for m, n, k, ctas in ((8448, 9216, 1024, None), (1000, 1000, 1000, 3), (300, 5000, 64, 7)):
        sched = plan_schedule(m, n, k, 128, 128, 64, 1, 132, ctas)
        capacity = trace_format.capacity_for(sched.max_tiles_per_consumer, sched.ring_passes)
        producer = 2 + len(trace_format.PRODUCER_CYCLE) * sched.ring_passes
        consumer = 2 + len(trace_format.CONSUMER_CYCLE) * sched.max_tiles_per_consumer
        assert capacity == max(producer, consumer)


@pytest.mark.parametrize("tag", ["coop128x256", "coop128x256k4", "pp64x128k2", "coop256x128c2"])
def test_capacity_of_cooperative_and_split_k_plans(tag):
    """A cooperative consumer records every tile of its CTA; a split-K tile up to its final's fix-up events: the
    slice holds the longest path a tile of the config takes, times the busiest consumer's tiles."""
    from ptxgemm.kernel.schedule import plan_for

    config = GemmConfig.from_tag(tag)
    paths = trace_format.consumer_paths(config.schedule)
    longest = max(len(paths["partial"]), len(paths["final"])) if config.split_k else len(paths["tile"])
    for m, n, k, ctas in ((256, 4096, 8192, None), (1000, 1000, 1000, 3), (8192, 8192, 1024, None)):
        sched = plan_for(config, m, n, k, 132, ctas)
        if config.cooperative:
            assert sched.max_tiles_per_consumer == -(-sched.units // sched.clusters)  # every step of the walk
        capacity = trace_format.capacity_for(sched.max_tiles_per_consumer, sched.ring_passes, config.schedule,
                                             config.split_k)
        assert capacity == max(2 + 2 * sched.ring_passes, 2 + longest * sched.max_tiles_per_consumer)
    assert trace_format.tile_records("cooperative") == 6 and trace_format.tile_records("pingpong", True) == 9


def test_refine_times_places_cycle_stamps_on_the_timer_through_the_anchors():
    """A 1755 MHz SM: each role stamps %globaltimer (32 ns steps) on its first and last record only and %clock64 on
    all. The decoded times keep the cycles' order, fall within a timer step of the truth, and the fit gives the
    clock back."""
    rng = np.random.default_rng(1)
    base = 1_700_000_000_000_000_000           # %globaltimer counts ns since an epoch: keep it integer
    events = 200
    records = np.zeros((1, trace_format.ROLES, events), trace_format.RECORD_DTYPE)
    truth = np.zeros((trace_format.ROLES, events), np.int64)
    for role in range(trace_format.ROLES):
        true_ns = base + 123 + role * 50 + np.cumsum(rng.integers(5, 400, size=events))
        truth[role] = true_ns
        records["clock"][0, role] = np.rint((true_ns - base) * 1.755).astype(np.int64) + 10_000_000
        records["code"][0, role] = trace_format.ROLE_START
        for j in (0, events - 1):                      # the anchors
            records["time_ns"][0, role, j] = true_ns[j] // trace_format.TIMER_TICK_NS * trace_format.TIMER_TICK_NS
    fine, ns_per_cycle = trace_decode.refine_times(records, np.full((1, trace_format.ROLES), events))
    assert np.all(np.diff(fine[0], axis=-1) >= 0)
    assert np.max(np.abs(fine[0] - truth)) <= trace_format.TIMER_TICK_NS
    assert abs(1e3 / ns_per_cycle[0] - 1755) < 2


def test_refine_times_needs_two_anchors():
    records = np.zeros((1, trace_format.ROLES, 4), trace_format.RECORD_DTYPE)
    records["clock"][0, 0] = [1, 2, 3, 4]
    records["time_ns"][0, 0, 0] = 1000
    with pytest.raises(ValueError, match="CTA 0 has 1 timer anchors"):
        trace_decode.refine_times(records, np.array([[4, 0, 0]]))


def test_config_variants_for_side_by_side_traces():
    from ptxgemm.tools.tracing import config_variant

    base = GemmConfig(b_major="k")
    assert config_variant(base, "block_n=192, cluster_m=1") == GemmConfig(b_major="k", block_n=192)
    assert config_variant(base, "out-dtype=float32").out_dtype == "float32"
    for spec, match in (("trace=1", "must be NAME=VALUE"), ("block_n", "must be NAME=VALUE"), ("", "names no field"),
                        ("block_n=100", "block_n: must be a multiple of 16")):
        with pytest.raises(ptxgemm.ConfigError, match=match):
            config_variant(base, spec)


def test_trace_takes_every_dense_schedule_and_refuses_the_grouped_kernel():
    for tag in ("coop128x256", "coop128x256k4", "pp64x128k2", "coop256x128c2", "coop128x256cn2"):
        assert GemmConfig.from_tag(tag, trace=True).trace
    with pytest.raises(ptxgemm.ConfigError, match="trace: the grouped kernel records no timeline"):
        GemmConfig.from_tag("coop128x128", grouped="contiguous", trace=True)


@pytest.mark.parametrize("args, what", [
    (["--compare", "pingpong,coop"], "--compare: must name two or more of pingpong, cooperative"),
    (["--compare", "pingpong"], "--compare: must name two or more"),
    (["--compare", "pingpong,cooperative", "--block-n", "128"], "so --block-n cannot be given with it"),
    (["--compare", "pingpong,cooperative", "--sm-count", "0"], "--sm-count must be >= 1"),
])
def test_trace_compare_is_checked_before_the_gpu(tmp_path, args, what):
    proc = subprocess.run([sys.executable, "-m", "ptxgemm", "trace", "--m", "256", "--n", "256", "--k", "256",
                           "--out", str(tmp_path), *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and what in proc.stderr, proc.stderr


def test_compare_picks_each_schedule_from_the_selection():
    """--compare's configs: the selection's preferred config of each schedule (split-K where it splits)."""
    from ptxgemm.select.cost_model import DEFAULT_DEVICE
    from ptxgemm.tools.tracing import schedule_picks

    operands = {"in_dtype": "bfloat16", "out_dtype": "bfloat16", "a_major": "k", "b_major": "mn"}
    picks = schedule_picks(128, 4096, 8192, operands, ["pingpong", "cooperative"], device=DEFAULT_DEVICE)
    assert [c.schedule for c in picks] == ["pingpong", "cooperative"]
    assert all(c.split_k and not c.transposed_store for c in picks)
