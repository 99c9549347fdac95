"""CPU tests of the bank-conflict model (ptxgemm/tools/banks.py), its CLI and the probe's host side.

The model's laws from issue 4: a conflict-free permutation costs the ideal count; 32 lanes on one bank cost
32 wavefronts for 4-byte stores; broadcast reads cost one.  Whether the rules behind them hold on the
hardware is tests/test_banks_gpu.py's job; the measured tables it wrote (docs/results/h200/banks/)
are checked here, row by row, without a GPU.
"""
from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ptxgemm.cli import banks as cli_banks
from ptxgemm.cli.main import main
from ptxgemm.tools import bank_patterns, bank_probe as probe, banks

REPO = Path(__file__).resolve().parent.parent
DOC = REPO / "docs" / "bank_conflicts.md"
H200_RUN1 = REPO / "docs" / "results" / "h200" / "banks" / "archive" / "bank_conflicts_h200_run1.md"
H200_RUN2 = REPO / "docs" / "results" / "h200" / "banks" / "archive" / "bank_conflicts_h200_run2.md"  # + the GEMM epilogue patterns
H200_RUN3 = REPO / "docs" / "results" / "h200" / "banks" / "bank_conflicts_h200.md"                   # + the lane-pair packing patterns


def permuted_conflict_free(op: banks.Op, rng: random.Random) -> list[int]:
    """Each phase's lanes take distinct slots of one 128-byte line, in random order, on random lines."""
    slots = banks.WAVEFRONT_BYTES // op.bytes_per_lane
    addresses = []
    for lanes in banks.phase_lane_groups(op):
        line = rng.randrange(0, 1000) * banks.WAVEFRONT_BYTES
        addresses += [line + s * op.bytes_per_lane for s in rng.sample(range(slots), len(lanes))]
    return addresses + [0] * (banks.WARP_SIZE - len(addresses))


# --------------------------------------------------------------------------------------------------------------
# The laws
# --------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("op", list(banks.OPS))
def test_a_conflict_free_permutation_costs_the_ideal_count(op):
    rng = random.Random(op)
    spec = banks.OPS[op]
    for _ in range(25):
        result = banks.simulate(op, permuted_conflict_free(spec, rng))
        assert result.wavefronts == result.ideal == banks.ideal_wavefronts(op)
        assert result.conflict_free
        assert all(a.degree == 1 for a in result.accesses)


@pytest.mark.parametrize("stride", [128, 256, 4096])
def test_32_lanes_on_one_bank_cost_32_for_4_byte_stores(stride):
    addresses = banks.strided_addresses(stride, base=5 * banks.BANK_BYTES)
    result = banks.simulate("st.b32", addresses)
    assert {a.bank for a in result.accesses} == {5}
    assert result.wavefronts == 32
    assert all(a.degree == 32 for a in result.accesses)


@pytest.mark.parametrize("op", ["ld.b8", "ld.b16", "ld.b32"])
@pytest.mark.parametrize("address", [0, 4, 1000, 4096 + 124])
def test_broadcast_reads_cost_one(op, address):
    address -= address % banks.OPS[op].bytes_per_lane
    assert banks.wavefronts(op, [address] * 32) == 1


@pytest.mark.parametrize("op, expected", [
    ("ld.v2.b32", 1), ("ld.v4.b32", 2),                           # LOAD_PAIR_PACKING (measured on the H200)
    ("ldmatrix.x1", 1), ("ldmatrix.x2", 2), ("ldmatrix.x4", 4),   # one phase per matrix, never packed
    ("st.v2.b32", 2), ("st.v4.b32", 4),                           # stores are never packed
])
def test_wide_broadcast_reads_cost_one_per_phase(op, expected):
    result = banks.simulate(op, [512] * 32)
    assert all(p.wavefronts == 1 for p in result.phases)
    assert result.wavefronts == result.ideal == expected


def test_loads_whose_lane_pairs_share_addresses_are_packed():
    pairs = [(lane // 2) * 8 for lane in range(32)]              # a[n] == a[n^1], 128 bytes
    pairs2 = [((lane // 4) * 2 + lane % 2) * 8 for lane in range(32)]   # a[n] == a[n^2]
    halves = [(lane % 16) * 8 for lane in range(32)]             # a[n] == a[n^16]: not a packing pair
    for addresses, packed, expected in ((pairs, True, 1), (pairs2, True, 1), (halves, False, 2)):
        result = banks.simulate("ld.v2.b32", addresses)
        assert banks.packed_load(result.op, addresses) is packed
        assert [p.packed for p in result.phases] == [packed] * len(result.phases)
        assert result.wavefronts == result.ideal == expected
    assert banks.phase_lane_groups(banks.OPS["ld.v4.b32"], addresses=[0] * 32) == [tuple(range(16)),
                                                                                   tuple(range(16, 32))]
    assert banks.wavefronts("st.v2.b32", pairs) == 2               # stores: half-warps as ever
    # packed or not, the phases' wavefronts add and conflicts count within a phase
    split = [0, 8, 16, 24, 128, 136, 144, 152, 64, 72, 80, 88, 192, 200, 208, 216]
    assert banks.wavefronts("ld.v2.b32", [split[lane // 2] for lane in range(32)]) == 2
    assert banks.wavefronts("ld.v2.b32", [split[lane // 2] for lane in range(32)],
                            banks.HardwareRules(paired_load_lane_masks=())) == 4


def test_reads_of_different_bytes_of_one_word_are_a_broadcast():
    assert banks.wavefronts("ld.b8", [lane for lane in range(32)]) == 1      # 8 words, 4 lanes each
    assert banks.wavefronts("ld.b16", [2 * lane for lane in range(32)]) == 1


# --------------------------------------------------------------------------------------------------------------
# Phases and strides
# --------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("op, phases", [
    ("st.b8", [range(32)]), ("ld.b16", [range(32)]), ("st.b32", [range(32)]),
    ("ld.v2.b32", [range(16), range(16, 32)]),
    ("st.v4.b32", [range(8), range(8, 16), range(16, 24), range(24, 32)]),
    ("ldmatrix.x1", [range(8)]), ("stmatrix.x2", [range(8), range(8, 16)]),
    ("ldmatrix.x4.trans", [range(0, 8), range(8, 16), range(16, 24), range(24, 32)]),
])
def test_lanes_are_grouped_into_phases_by_width(op, phases):
    assert banks.phase_lane_groups(banks.OPS[op]) == [tuple(p) for p in phases]


@pytest.mark.parametrize("op, expected", [
    ("st.b32", {4: 1, 8: 2, 16: 4, 32: 8, 64: 16, 128: 32, 132: 1}),
    ("ld.b16", {4: 1, 8: 2, 16: 4, 32: 8, 64: 16, 128: 32, 132: 1}),
    ("ld.v2.b32", {8: 2, 16: 4, 32: 8, 64: 16, 128: 32}),
    ("st.v4.b32", {16: 4, 32: 8, 64: 16, 128: 32}),
])
def test_row_major_strides(op, expected):
    for stride, wavefronts in expected.items():
        assert banks.wavefronts(op, banks.strided_addresses(stride)) == wavefronts, stride


@pytest.mark.parametrize("op, expected", [
    ("ldmatrix.x1", {16: 1, 32: 2, 64: 4, 128: 8, 144: 1}),
    ("stmatrix.x2", {16: 2, 32: 4, 64: 8, 128: 16, 144: 2}),
    ("stmatrix.x4", {16: 4, 32: 8, 64: 16, 128: 32, 144: 4}),
])
def test_matrix_row_pitches(op, expected):
    for pitch, wavefronts in expected.items():
        assert banks.wavefronts(op, banks.strided_addresses(pitch)) == wavefronts, pitch


def test_conflicts_only_count_within_a_phase():
    # lanes 0-15 and 16-31 of a v2 access use the same 128 bytes: two conflict-free half-warps
    assert banks.wavefronts("st.v2.b32", [(lane % 16) * 8 for lane in range(32)]) == 2
    # each quarter-warp of a v4 access is 2-way on its own half of the banks
    quarter_split = [((lane // 8) % 2) * 64 + (lane // 16) * 256 + (lane % 4) * 16 + ((lane % 8) // 4) * 128
                     for lane in range(32)]
    assert banks.wavefronts("ld.v4.b32", quarter_split) == 8


def test_trans_moves_data_not_addresses():
    rng = random.Random(7)
    for _ in range(50):
        addresses = [rng.randrange(0, 4096) * 16 for _ in range(32)]
        for base in ("ldmatrix", "stmatrix"):
            assert banks.simulate(f"{base}.x4", addresses).to_json()["phases"] == \
                banks.simulate(f"{base}.x4.trans", addresses).to_json()["phases"]


def test_x1_and_x2_ignore_the_other_lanes():
    rows = banks.strided_addresses(16, 8)
    assert banks.wavefronts("ldmatrix.x1", rows) == 1
    assert banks.wavefronts("ldmatrix.x1", rows + [-1, 3, 5] * 8) == 1   # unused lanes are not checked
    assert banks.wavefronts("stmatrix.x2", banks.strided_addresses(16, 16)) == 2


def test_wavefronts_are_bounded_by_ideal_and_by_serial_service():
    rng = random.Random(11)
    for op in banks.OPS.values():
        for _ in range(40):
            addresses = [rng.randrange(0, 2048) * op.bytes_per_lane for _ in range(32)]
            result = banks.simulate(op, addresses)
            assert result.ideal <= result.wavefronts
            for phase in result.phases:
                assert phase.wavefronts <= len(phase.lanes) * op.banks_per_lane


def test_degree_is_the_distinct_words_on_the_lanes_bank():
    addresses = [0, 128, 256] + [4 * lane for lane in range(3, 32)]     # bank 0: 3 words
    result = banks.simulate("ld.b32", addresses)
    assert result.wavefronts == 3
    assert [a.degree for a in result.accesses[:4]] == [3, 3, 3, 1]


def test_json_shape():
    data = banks.simulate("st.v4.b32", banks.strided_addresses(16)).to_json()
    assert data["op"] == "st.v4.b32" and data["wavefronts"] == 4 and data["ideal"] == 4
    assert data["banks_per_lane"] == 4
    assert [p["lanes"] for p in data["phases"]] == [list(range(q * 8, q * 8 + 8)) for q in range(4)]
    assert data["phases"][0]["banks"] == [0, 4, 8, 12, 16, 20, 24, 28]
    assert all(p["wavefronts"] == 1 for p in data["phases"])


# --------------------------------------------------------------------------------------------------------------
# Bad input
# --------------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("op, addresses, message", [
    ("st.b128", [0] * 32, "unknown op"),
    ("st.b32", [0] * 31, "needs 32 lane addresses"),
    ("ldmatrix.x2", [0] * 15, "needs 16 lane addresses"),
    ("st.b32", [0] * 33, "a warp has 32 lanes"),
    ("st.b32", [2] + [0] * 31, "not 4-byte aligned"),
    ("ld.v2.b32", [0] * 31 + [4], "not 8-byte aligned"),
    ("stmatrix.x4", [8] * 32, "not 16-byte aligned"),
    ("ld.b16", [1] * 32, "not 2-byte aligned"),
    ("st.b32", [-4] + [0] * 31, "negative"),
    ("st.b32", [banks.SHARED_WINDOW_BYTES] + [0] * 31, "out of range"),
    ("ld.v4.b32", [banks.SHARED_WINDOW_BYTES - 8] * 32, "out of range"),
])
def test_bad_input_is_rejected(op, addresses, message):
    with pytest.raises(banks.BankModelError, match=message):
        banks.simulate(op, addresses)


# --------------------------------------------------------------------------------------------------------------
# Rules
# --------------------------------------------------------------------------------------------------------------

def test_rule_knobs_change_the_prediction():
    no_merge = banks.HardwareRules(store_merge=False)
    packed = banks.strided_addresses(2)
    assert banks.wavefronts("st.b16", packed) == 1
    assert banks.wavefronts("st.b16", packed, no_merge) == 2
    assert banks.wavefronts("st.b32", [0] * 32, no_merge) == 32
    assert banks.wavefronts("ld.b32", [0] * 32, no_merge) == 1          # loads still broadcast
    whole_warp = banks.HardwareRules(lanes_per_phase_by_width={1: 32, 2: 32, 4: 32, 8: 32, 16: 32})
    assert banks.wavefronts("st.v4.b32", banks.strided_addresses(16), whole_warp) == 4
    no_packing = banks.HardwareRules(paired_load_lane_masks=())
    assert banks.wavefronts("ld.v4.b32", [256] * 32) == 2
    assert banks.wavefronts("ld.v4.b32", [256] * 32, no_packing) == 4


def test_every_rule_is_documented():
    text = DOC.read_text()
    for name in banks.RULES:
        assert name in text, f"docs/bank_conflicts.md does not mention rule {name}"


# --------------------------------------------------------------------------------------------------------------
# Layouts
# --------------------------------------------------------------------------------------------------------------

def test_the_seed_example():
    costs = {name: banks.wavefronts("stmatrix.x4", banks.block_x4_addresses(banks.tile_layout(name)))
             for name in banks.LAYOUTS}
    assert costs == {"naive": 32, "padded": 4, "swizzle32": 4, "swizzle64": 4, "swizzle128": 4}


@pytest.mark.parametrize("name", ["swizzle32", "swizzle64", "swizzle128"])
@pytest.mark.parametrize("op", ["stmatrix.x4", "ldmatrix.x4.trans"])
def test_every_block_of_a_swizzled_tile_is_conflict_free(name, op):
    layout = banks.tile_layout(name)
    cols = layout.row_pitch // banks.ELEMENT_BYTES
    for row0 in range(0, 64, 16):
        for col0 in range(0, cols, 16):
            assert banks.simulate(op, banks.block_x4_addresses(layout, row0, col0)).conflict_free, (row0, col0)


@pytest.mark.parametrize("row_bytes", [128, 256, 512])
def test_padding_by_one_chunk_removes_the_conflicts(row_bytes):
    naive = banks.tile_layout("naive", row_bytes)
    padded = banks.tile_layout("padded", row_bytes, 16)
    assert banks.wavefronts("stmatrix.x4", banks.block_x4_addresses(naive)) == 32
    assert banks.wavefronts("stmatrix.x4", banks.block_x4_addresses(padded)) == 4


@pytest.mark.parametrize("kwargs, message", [
    ({"name": "naive", "row_bytes": 100}, "multiple of 16"),
    ({"name": "naive", "row_bytes": 16}, "16-column block"),
    ({"name": "padded", "pad": 8}, "pad must be"),
    ({"name": "diagonal"}, "unknown layout"),
])
def test_bad_layouts_are_rejected(kwargs, message):
    with pytest.raises(banks.BankModelError, match=message):
        banks.tile_layout(**kwargs)


# --------------------------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------------------------

def csv_addresses(addresses):
    return ",".join(map(str, addresses))


def run_cli(capsys, *argv):
    """`python -m ptxgemm bank-conflicts ARGV` in this process: (exit status, stdout, stderr)."""
    try:
        code = main(["bank-conflicts", *argv])
    except SystemExit as exc:              # argparse's own errors exit
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_json(capsys):
    code, out, err = run_cli(capsys, "--op", "st.b32", "--addresses", csv_addresses(banks.strided_addresses(128)),
                             "--json")
    assert code == 0 and err == ""
    data = json.loads(out)
    assert (data["op"], data["wavefronts"], data["ideal"]) == ("st.b32", 32, 1)
    [phase] = data["phases"]
    assert phase["lanes"] == list(range(32)) and phase["banks"] == [0] * 32 and phase["wavefronts"] == 32


def test_cli_table(capsys):
    code, out, _ = run_cli(capsys, "--op", "ld.v4.b32", "--addresses", csv_addresses(banks.strided_addresses(32)))
    assert code == 0
    header = out.splitlines()[0].split()
    assert header[:2] == ["lane", "address"] and {"bank", "phase", "degree"} <= set(header)
    assert re.search(r"^\s*31\s+992\s+0x3e0\s+24-27\s+3\s+2$", out, re.M)
    assert "8 wavefront(s), ideal 4" in out


def test_cli_accepts_hex_and_ignores_unused_lanes(capsys):
    rows = ",".join(hex(16 * r) for r in range(8))
    code, out, _ = run_cli(capsys, "--op", "ldmatrix.x1", "--addresses", rows + ",3,5", "--json")
    assert code == 0 and json.loads(out)["wavefronts"] == 1


@pytest.mark.parametrize("argv, message", [
    (["--op", "st.b64", "--addresses", "0"], "unknown op"),
    (["--op", "st.b32", "--addresses", "0,4,8"], "needs 32 lane addresses"),
    (["--op", "ldmatrix.x4", "--addresses", csv_addresses([0] * 16)], "needs 32 lane addresses"),
    (["--op", "st.v2.b32", "--addresses", csv_addresses([4] * 32)], "not 8-byte aligned"),
    (["--op", "st.b32", "--addresses", csv_addresses([-4] + [0] * 31)], "negative"),
    (["--op", "st.b32", "--addresses", csv_addresses([1 << 20] * 32)], "out of range"),
    (["--op", "st.b32", "--addresses", "0,x"], "not an integer"),
    (["--op", "st.b32"], "needs --addresses"),
    ([], "required"),
    (["--pattern", "stmatrix-tile", "--layout", "diagonal"], "invalid choice"),
    (["--pattern", "stmatrix-tile", "--row-bytes", "100"], "multiple of 16"),
])
def test_cli_errors_are_one_line_and_exit_2(capsys, argv, message):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("python -m ptxgemm bank-conflicts: error: ") and message in err


def test_cli_as_a_program(tmp_path):
    """The real entry point, run from another directory: errors on stderr, exit 2."""
    command = ["-m", "ptxgemm", "bank-conflicts"]
    ok = subprocess.run([sys.executable, *command, "--op", "ld.b32", "--addresses", csv_addresses([0] * 32),
                         "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0 and json.loads(ok.stdout)["wavefronts"] == 1
    bad = subprocess.run([sys.executable, *command, "--op", "ld.b32", "--addresses", "-4"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stdout == "" and len(bad.stderr.splitlines()) == 1
    assert bad.stderr.startswith("python -m ptxgemm bank-conflicts: error: ")
    assert list(tmp_path.iterdir()) == []


def test_cli_tile_pattern_runs_from_another_directory(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "ptxgemm", "bank-conflicts", "--pattern", "stmatrix-tile"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "swizzle128: 128-byte rows, 128B TMA swizzle -> 4 wavefront(s), ideal 4: conflict-free" in proc.stdout


@pytest.mark.parametrize("argv, message", [
    (["--op", "st.b32", "--addresses", "0", "--block-n", "64"], "--block-n: GEMM config options go with --kernel"),
    (["--pattern", "stmatrix-tile", "--out-dtype", "float32"], "--out-dtype: GEMM config options go with --kernel"),
    (["--pattern", "stmatrix-tile", "--addresses", "0"], "--addresses: goes with --op"),
])
def test_cli_options_of_another_mode_are_refused(capsys, argv, message):
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err


def test_cli_tile_pattern(capsys):
    code, out, _ = run_cli(capsys, "--pattern", "stmatrix-tile", "--layout", "naive", "--layout", "padded",
                           "--layout", "swizzle128")
    assert code == 0
    assert "naive: 128-byte rows -> 32 wavefront(s), ideal 4" in out
    assert "padded: 144-byte rows -> 4 wavefront(s), ideal 4: conflict-free" in out
    assert "swizzle128: 128-byte rows, 128B TMA swizzle -> 4 wavefront(s), ideal 4: conflict-free" in out
    assert len([line for line in out.splitlines() if re.match(r"^\s*\d+\s+[0-3]\s+\d+\s+(0|8)\s", line)]) == 32


def test_cli_tile_pattern_json_and_options(capsys):
    code, out, _ = run_cli(capsys, "--pattern", "stmatrix-tile", "--layout", "padded", "--row-bytes", "256",
                           "--pad", "32", "--json")
    assert code == 0
    [entry] = json.loads(out)
    assert entry["layout"] == "padded" and entry["row_pitch"] == 288 and entry["wavefronts"] == 8


@pytest.fixture
def fake_epilogue(monkeypatch):
    """A stand-in for ptxgemm.kernel.epilogue_layout.epilogue_stores, to test the CLI's --kernel plumbing on its own: block_n=64
    stores into padded rows (conflict-free), any other config into naive 128-byte rows (8-way)."""
    seen = []

    def epilogue_stores(config):
        seen.append(config)
        layout = banks.TileLayout("fake", 144 if config.block_n == 64 else 128)
        return [("stmatrix.x4", banks.block_x4_addresses(layout, 0, 16 * i)) for i in range(config.block_n // 32)]

    monkeypatch.setattr(cli_banks, "epilogue_stores", epilogue_stores)
    return seen


def test_cli_kernel_reports_each_store(capsys, fake_epilogue):
    code, out, _ = run_cli(capsys, "--kernel", "--block-n", "64", "--out-dtype", "float16")
    assert code == 0
    assert (fake_epilogue[0].block_n, fake_epilogue[0].out_dtype) == (64, "float16")
    assert "all 2 stmatrix.x4 conflict-free: 4 wavefronts each (ideal 4)" in out
    code, out, _ = run_cli(capsys, "--kernel", "--json")
    data = json.loads(out)
    assert code == 0 and data["conflict_free"] is False
    assert [(s["op"], s["wavefronts"], s["ideal"]) for s in data["stores"]] == [("stmatrix.x4", 32, 4)] * 4
    code, out, _ = run_cli(capsys, "--kernel")
    assert "4 of 4 stmatrix.x4 conflicted; worst 32 wavefronts (ideal 4)" in out


@pytest.mark.parametrize("argv, message", [
    (["--block-n", "100"], "block_n: must be"),
    (["--out-dtype", "int8"], "invalid choice"),
])
def test_cli_kernel_bad_config_is_one_line(capsys, fake_epilogue, argv, message):
    code, out, err = run_cli(capsys, "--kernel", *argv)
    assert code == 2 and out == "" and err.count("\n") == 1 and message in err


def test_cli_kernel_on_ptxgemms_epilogue(capsys):
    pytest.importorskip("ptxgemm.kernel.epilogue_layout")
    code, out, _ = run_cli(capsys, "--kernel")
    assert code == 0 and "all 16 stmatrix.x4 conflict-free: 4 wavefronts each (ideal 4)" in out
    code, out, _ = run_cli(capsys, "--kernel", "--out-dtype", "float32", "--json")
    assert code == 0 and {s["op"] for s in json.loads(out)["stores"]} == {"st.v2.b32"}


# --------------------------------------------------------------------------------------------------------------
# The probe's host side (no GPU)
# --------------------------------------------------------------------------------------------------------------

EXPECTED_SASS = {
    "st.b8": "STS.U8", "st.b16": "STS.U16", "st.b32": "STS", "st.v2.b32": "STS.64", "st.v4.b32": "STS.128",
    "ld.b8": "LDS.U8", "ld.b16": "LDS.U16", "ld.b32": "LDS", "ld.v2.b32": "LDS.64", "ld.v4.b32": "LDS.128",
    "stmatrix.x1": "STSM.16.M88", "stmatrix.x2": "STSM.16.M88.2", "stmatrix.x4": "STSM.16.M88.4",
    "stmatrix.x4.trans": "STSM.16.MT88.4", "ldmatrix.x1": "LDSM.16.M88", "ldmatrix.x2": "LDSM.16.M88.2",
    "ldmatrix.x4": "LDSM.16.M88.4", "ldmatrix.x4.trans": "LDSM.16.MT88.4",
}


def shared_opcodes_by_kernel(sass: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    kernel = None
    for line in sass.splitlines():
        if m := re.match(r"^\.text\.(\w+):", line):
            kernel = m.group(1)
            found[kernel] = set()
        elif kernel and (m := re.search(r"\b((?:ST|LD)S(?:M)?(?:\.[A-Z0-9]+)*)\b", line)):
            found[kernel].add(m.group(1))
    return found


def test_probe_assembles_to_exactly_one_shared_instruction_per_kernel():
    from ptxgemm.toolchain import compiler
    from ptxgemm.errors import ToolchainError

    kernel = compiler.compile_ptx(probe.probe_ptx())
    assert set(kernel.report.functions) == {probe.kernel_name(op) for op in banks.OPS}
    try:
        sass = kernel.sass()
    except ToolchainError as exc:
        pytest.skip(f"no SASS to inspect: {exc}")
    opcodes = shared_opcodes_by_kernel(sass)
    assert opcodes == {probe.kernel_name(op): {mnemonic} for op, mnemonic in EXPECTED_SASS.items()}


def test_pattern_catalogue_covers_the_issue():
    patterns = bank_patterns.all_patterns()
    names = [p.name for p in patterns]
    assert len(names) == len(set(names))
    assert {p.op for p in patterns} == set(banks.OPS)
    strides = {int(m.group(1)) for p in patterns if (m := re.search(r"st\.b32 stride (\d+)$", p.name))}
    assert strides == {4, 8, 16, 32, 64, 128, 132}
    for layout in banks.LAYOUTS:
        for op in ("stmatrix.x4", "ldmatrix.x4"):
            assert f"{op} 16x16 block, {layout}" in names
    assert {p.op for p in patterns if p.group == "epilogue"} == {"stmatrix.x4", "st.v2.b32"}
    exercised = {rule for p in patterns for rule in p.rules}
    assert exercised == set(banks.RULES)
    for p in patterns:
        assert len(p.addresses) == 32
        p.simulate()                                   # valid input for the model
    assert probe.smem_bytes_for(patterns) <= banks.SHARED_WINDOW_BYTES


SAMPLE_NCU_CSV = '''==PROF== Connected to process 4242 (/usr/bin/python3.11)
==PROF== Profiling "bank_probe_st_b32" - 0: 0%....50%....100% - 1 pass
==PROF== Profiling "bank_probe_ld_v4_b32" - 1: 0%....50%....100% - 1 pass
ran 2 bank-conflict patterns on NVIDIA H100 80GB HBM3
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","4242","python3.11","127.0.0.1","bank_probe_st_b32","1","7","(32, 1, 1)","(1, 1, 1)","0","9.0","Command line profiler metrics","l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum","","0"
"0","4242","python3.11","127.0.0.1","bank_probe_st_b32","1","7","(32, 1, 1)","(1, 1, 1)","0","9.0","Command line profiler metrics","l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum","","2,048"
"1","4242","python3.11","127.0.0.1","bank_probe_ld_v4_b32","1","7","(32, 1, 1)","(1, 1, 1)","0","9.0","Command line profiler metrics","l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum","","320"
"1","4242","python3.11","127.0.0.1","bank_probe_ld_v4_b32","1","7","(32, 1, 1)","(1, 1, 1)","0","9.0","Command line profiler metrics","l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum","","0"
==PROF== Disconnected from process 4242
'''


def test_ncu_csv_is_paired_with_the_patterns():
    launches = probe.parse_ncu_csv(SAMPLE_NCU_CSV)
    assert [(l["id"], l["kernel"]) for l in launches] == [(0, "bank_probe_st_b32"), (1, "bank_probe_ld_v4_b32")]
    patterns = [bank_patterns.Pattern("st.b32 stride 128", "st.b32", tuple(banks.strided_addresses(128)), "stride",
                              ("BANK_MAPPING",)),
                bank_patterns.Pattern("ld.v4.b32 stride 16", "ld.v4.b32", tuple(banks.strided_addresses(16)), "stride",
                              ("PHASE_BY_WIDTH",))]
    first, second = probe.pair(patterns, launches, iterations=64)
    assert (first.predicted, first.measured, first.other, first.ok) == (32, 32, 0, True)
    assert (second.predicted, second.measured, second.ok) == (4, 5, False)
    report = probe.results_markdown([first, second], {"gpu": "NVIDIA H100 80GB HBM3", "iterations": 64})
    assert "model vs ncu on NVIDIA H100 80GB HBM3" in report and "**1 of 2 patterns match the model.**" in report
    assert "| BANK_MAPPING | 1 | confirmed |" in report
    assert "| PHASE_BY_WIDTH | 1 | REFUTED by 1: ld.v4.b32 stride 16 |" in report
    with pytest.raises(probe.MeasureError, match="expected bank_probe_ld_v4_b32"):
        probe.pair(patterns[::-1][:1] + patterns[1:], launches[::-1], 64)
    with pytest.raises(probe.MeasureError, match="profiled 2 probe launches, expected 1"):
        probe.pair(patterns[:1], launches, 64)


def test_ncu_command_profiles_only_the_probe():
    cmd = probe.ncu_command("ncu", Path("/tmp/log.csv"), Path("/tmp/m.json"), only="stride")
    joined = " ".join(cmd)
    for metric in probe.METRICS.values():
        assert metric in joined
    assert "--csv" in cmd and "regex:^bank_probe_" in cmd and cmd[-2:] == ["--only", "stride"]


# --------------------------------------------------------------------------------------------------------------
# The measured tables (docs/results/h200/banks/): the model against every row, no GPU
# --------------------------------------------------------------------------------------------------------------

ROW = re.compile(r"^\| (?P<group>[\w-]+) \| (?P<name>.+?) \| `(?P<op>[\w.]+)` \| (?P<predicted>\d+) \| "
                 r"(?P<ideal>\d+) \| (?P<measured>[\d.]+) \| (?P<other>[\d.]+) \| (?P<match>yes|\*\*NO\*\*) \|$")


def measured_rows(path: Path) -> list[dict]:
    """The pattern rows of a table written by `python -m ptxgemm bank-probe --measure`; checks none was skipped."""
    text = path.read_text()
    rows = [m.groupdict() for line in text.splitlines() if (m := ROW.match(line))]
    total = re.search(r"\*\*(\d+) of (\d+) patterns match the model\.\*\*", text)
    assert total, f"{path.name}: no 'N of M patterns match' line"
    assert len(rows) == int(total.group(2)), f"{path.name}: parsed {len(rows)} rows, the table says {total.group(2)}"
    return rows


def _measured_patterns(path):
    patterns = {p.name: p for p in bank_patterns.all_patterns()}
    rows = measured_rows(path)
    for row in rows:
        assert row["name"] in patterns, f"measured pattern {row['name']!r} is no longer in the probe's catalogue"
        assert patterns[row["name"]].op == row["op"], row["name"]
    return [(patterns[row["name"]], row) for row in rows]


@pytest.fixture(scope="module")
def h200_run1():
    return _measured_patterns(H200_RUN1)


@pytest.mark.parametrize("path, count", [(H200_RUN1, 194), (H200_RUN2, 230), (H200_RUN3, 242)],
                         ids=["run1", "run2", "run3"])
def test_the_model_predicts_every_measured_h200_row(path, count):
    measured = _measured_patterns(path)
    assert len(measured) == count
    bad = []
    for pattern, row in measured:
        assert float(row["other"]) == 0, row["name"]
        if pattern.simulate().wavefronts != float(row["measured"]):
            bad.append(f"{row['name']}: model {pattern.simulate().wavefronts}, measured {row['measured']}")
    assert not bad, f"{len(bad)} of {len(measured)} H200 measurements differ from ptxgemm.tools.banks:\n" + "\n".join(bad)


def test_the_probe_still_builds_the_measured_addresses(h200_run1):
    """The table stores no addresses: the model as it was for that run (no LOAD_PAIR_PACKING) must reproduce its
    'predicted' column, else the pattern catalogue changed under the measurements.  That old model misses
    exactly the two rows that refuted it."""
    before = banks.HardwareRules(paired_load_lane_masks=())
    missed = set()
    for pattern, row in h200_run1:
        old = banks.simulate(pattern.op, pattern.addresses, before).wavefronts
        assert old == int(row["predicted"]), row["name"]
        if old != float(row["measured"]):
            missed.add(row["name"])
    assert missed == {"ld.v2.b32 all lanes one address", "ld.v4.b32 all lanes one address"}


def test_whole_warp_load_phases_do_not_fit_the_h200_run(h200_run1):
    """The other candidate for the two broadcast rows -- loads always in phases of 32 lanes (8 B) and 16 lanes
    (16 B) with same-word broadcast -- misses the half/quarter-warp reuse and split rows."""
    whole = banks.HardwareRules(lanes_per_phase_by_width={1: 32, 2: 32, 4: 32, 8: 32, 16: 16})
    missed = {row["name"] for pattern, row in h200_run1 if pattern.kind == banks.LOAD
              and banks.simulate(pattern.op, pattern.addresses, whole).wavefronts != float(row["measured"])}
    assert missed == {"ld.v2.b32 half-warps on the same 128 B", "ld.v2.b32 half-warps 2-way on disjoint banks",
                      "ld.v4.b32 quarter-warps on the same 128 B",
                      "ld.v4.b32 quarter-warps 2-way on disjoint bank halves"}


def test_pairing_patterns_tell_the_packing_candidates_apart():
    patterns = [p for p in bank_patterns.all_patterns() if p.group == "pairing"]
    candidates = [banks.HardwareRules(paired_load_lane_masks=m) for m in ((1, 2), (1,), (2,), ())]
    counts = {p.name: [banks.simulate(p.op, p.addresses, r).wavefronts for r in candidates] for p in patterns}
    # every pair of candidates disagrees on some pattern
    for i in range(len(candidates)):
        for j in range(i + 1, len(candidates)):
            assert any(c[i] != c[j] for c in counts.values()), (candidates[i], candidates[j])
    assert counts["ld.v2.b32 lane pairs n, n^1 share an address"] == [1, 1, 2, 2]
    assert counts["ld.v4.b32 lane pairs n, n^2 share an address"] == [2, 4, 2, 4]
    assert counts["ld.v4.b32 lane pairs n, n^1, half-warp 0 2-way"] == [3, 3, 4, 4]
