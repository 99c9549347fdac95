"""`python -m ptxgemm bank-conflicts`: predict the shared-memory bank conflicts of one warp-wide instruction.

Three ways in:
  One instruction, your addresses (machine interface):
    python -m ptxgemm bank-conflicts --op st.v4.b32 --addresses 0,16,32,...  [--json]

  A 16x16 bf16 block stored with stmatrix.x4, layouts side by side:
    python -m ptxgemm bank-conflicts --pattern stmatrix-tile \\
        --layout naive --layout padded --layout swizzle128 [--row-bytes 128] [--pad 16]

  ptxgemm's own epilogue stores for a GEMM config:
    python -m ptxgemm bank-conflicts --kernel [--block-m 128] [--block-n 128] [--out-dtype bfloat16] [...]

The model and its rules are in ptxgemm/tools/banks.py (this module only parses and prints); docs/bank_conflicts.md says
which rules ncu has confirmed. Bad input prints one line on stderr and exits 2.
"""
from __future__ import annotations

import argparse
import json
from typing import Sequence

from ..errors import ConfigError
from ..kernel.epilogue_layout import epilogue_stores
from ..tools import banks
from . import options

TILE_PATTERN = "stmatrix-tile"
TILE_OP = "stmatrix.x4"
DEFAULT_LAYOUTS = ("naive", "padded", "swizzle128")


# --------------------------------------------------------------------------- #
# Formatting helpers
# --------------------------------------------------------------------------- #


def format_banks(access: banks.LaneAccess) -> str:
    """'5' for a one-bank access, '4-7' for a 16-byte one."""
    first, last = access.banks[0], access.banks[-1]
    return str(first) if first == last else f"{first}-{last}"


def verdict(result: banks.Result) -> str:
    if result.conflict_free:
        return f"{result.wavefronts} wavefront(s), ideal {result.ideal}: conflict-free"
    worst = max(a.degree for a in result.accesses)
    return (f"{result.wavefronts} wavefront(s), ideal {result.ideal}: "
            f"{result.wavefronts / result.ideal:g}x the ideal, worst bank {worst}-way")


def render_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Right-aligned plain-text columns."""
    cells = [list(map(str, headers))] + [list(map(str, r)) for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


# --------------------------------------------------------------------------- #
# --op: one instruction
# --------------------------------------------------------------------------- #


def parse_addresses(text: str) -> list[int]:
    """'0,16,0x20' -> [0, 16, 32]; decimal or 0x-prefixed hex."""
    values = []
    for position, item in enumerate(text.split(",")):
        item = item.strip()
        try:
            values.append(int(item, 0))
        except ValueError:
            raise ConfigError(f"--addresses: address {position} is not an integer: {item!r}") from None
    return values


def report_op(op: str, addresses: Sequence[int], as_json: bool) -> str:
    result = banks.simulate(op, addresses)
    if as_json:
        return json.dumps(result.to_json())
    rows = [(a.lane, a.address, hex(a.address), format_banks(a), a.phase, a.degree)
            for a in result.accesses]
    table = render_table(("lane", "address", "hex", "bank", "phase", "degree"), rows)
    phases = ", ".join(f"phase {p.index}: {p.wavefronts}" + (" (lane pairs packed)" if p.packed else "")
                       for p in result.phases)
    return f"{table}\n\n{op}: {verdict(result)}\nwavefronts per phase: {phases}"


# --------------------------------------------------------------------------- #
# --pattern stmatrix-tile: layouts side by side
# --------------------------------------------------------------------------- #


def describe_layout(layout: banks.TileLayout) -> str:
    swizzle = f", {layout.swizzle} TMA swizzle" if layout.swizzle != "none" else ""
    return f"{layout.name}: {layout.row_pitch}-byte rows{swizzle}"


def report_tile(layout_names: Sequence[str], row_bytes: int, pad: int, as_json: bool) -> str:
    layouts = [banks.tile_layout(name, row_bytes, pad) for name in layout_names]
    results = [banks.simulate(TILE_OP, banks.block_x4_addresses(layout)) for layout in layouts]
    if as_json:
        return json.dumps([
            {"layout": layout.name, "row_pitch": layout.row_pitch, "swizzle": layout.swizzle,
             **result.to_json()}
            for layout, result in zip(layouts, results)
        ])
    headers = ["lane", "phase", "row", "col"]
    for layout in layouts:
        headers += [f"{layout.name} addr", "bank", "deg"]
    rows = []
    for lane in range(banks.WARP_SIZE):
        row, col = banks.matrix_x4_lane_coords(lane)
        cells: list[object] = [lane, results[0].accesses[lane].phase, row, col]
        for result in results:
            access = result.accesses[lane]
            cells += [access.address, format_banks(access), access.degree]
        rows.append(cells)
    summary = "\n".join(f"  {describe_layout(l)} -> {verdict(r)}" for l, r in zip(layouts, results))
    title = (f"{TILE_OP} of a 16x16 bf16 block at the origin of a row-major tile "
             f"(lane l gives the start of row l%16, column 8*(l//16))")
    return f"{title}\n\n{render_table(headers, rows)}\n\nwavefronts per {TILE_OP}:\n{summary}"


# --------------------------------------------------------------------------- #
# --kernel: ptxgemm's epilogue
# --------------------------------------------------------------------------- #


def epilogue_instructions(config) -> list[tuple[str, list[int]]]:
    """Ask ptxgemm which shared-memory stores warp 0's epilogue issues for ``config``: [(op, addresses)]."""
    return [(op, list(addrs)) for op, addrs in epilogue_stores(config)]


def summarize_stores(op: str, results: Sequence[banks.Result]) -> str:
    """One line per op: how many stores, and whether they are all at their ideal count."""
    worst = max(results, key=lambda r: r.wavefronts)
    if all(r.conflict_free for r in results):
        return (f"all {len(results)} {op} conflict-free: "
                f"{worst.wavefronts} wavefronts each (ideal {worst.ideal})")
    bad = sum(not r.conflict_free for r in results)
    return f"{bad} of {len(results)} {op} conflicted; worst {worst.wavefronts} wavefronts (ideal {worst.ideal})"


def report_kernel(config, as_json: bool) -> str:
    stores = [(op, banks.simulate(op, addrs)) for op, addrs in epilogue_instructions(config)]
    if as_json:
        return json.dumps({
            "config": config.describe(),
            "conflict_free": all(r.conflict_free for _, r in stores),
            "stores": [{"op": op, "wavefronts": r.wavefronts, "ideal": r.ideal, "conflict_free": r.conflict_free}
                       for op, r in stores],
        })
    if not stores:
        return f"{config.describe()}: the epilogue issues no shared-memory stores"
    rows = [(i, op, r.wavefronts, r.ideal, "yes" if r.conflict_free else "NO")
            for i, (op, r) in enumerate(stores)]
    table = render_table(("store", "op", "wavefronts", "ideal", "conflict-free"), rows)
    by_op: dict[str, list[banks.Result]] = {}
    for op, result in stores:
        by_op.setdefault(op, []).append(result)
    summary = "\n".join(summarize_stores(op, results) for op, results in by_op.items())
    return f"epilogue shared-memory stores of warp 0 for {config.describe()}\n\n{table}\n\n{summary}"


# --------------------------------------------------------------------------- #
# The command
# --------------------------------------------------------------------------- #


#: the command's --help text (its one-line summary is in ptxgemm/cli/main.py's table)
DESCRIPTION = ("Predict how many wavefronts one warp-wide shared-memory instruction takes on "
               "Hopper, and why: give one of --op (with --addresses), --pattern or --kernel. The "
               "model's rules are in ptxgemm/tools/banks.py; docs/bank_conflicts.md says which ones ncu "
               "confirmed. No GPU needed.")


def add_arguments(p) -> None:
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--op", metavar="OP",
                      help=f"one warp-wide instruction: {', '.join(banks.OPS)} (no default; one of --op, --pattern "
                           f"and --kernel is required)")
    mode.add_argument("--pattern", choices=[TILE_PATTERN],
                      help=f"a preset: {TILE_PATTERN}, a 16x16 bf16 block stored with stmatrix.x4 (no default)")
    mode.add_argument("--kernel", action="store_true",
                      help="ptxgemm's epilogue shared-memory stores (stmatrix, or st.v2 for fp32) for the GEMM config "
                           "the options below describe (default off)")
    p.add_argument("--addresses", metavar="A0,A1,...",
                   help="with --op: the lanes' shared-memory byte addresses, lane 0 first, decimal or 0x hex "
                        "(required with --op; no default)")
    p.add_argument("--json", action="store_true", help="machine-readable output (default off: tables)")
    tile = p.add_argument_group(f"--pattern {TILE_PATTERN} options")
    tile.add_argument("--layout", action="append", choices=banks.LAYOUTS,
                      help=f"layout to show, one of {', '.join(banks.LAYOUTS)}; repeat for side by side "
                           f"(default: {' '.join(DEFAULT_LAYOUTS)})")
    tile.add_argument("--row-bytes", type=int, default=banks.DEFAULT_ROW_BYTES,
                      help="bytes per tile row for naive and padded (default %(default)s)")
    tile.add_argument("--pad", type=int, default=banks.DEFAULT_PAD_BYTES,
                      help="padding bytes per row for padded (default %(default)s)")
    options.add_config_arguments(p.add_argument_group(
        "--kernel options: the GEMM config (ptxgemm.kernel.config.GemmConfig), as for the other commands"))


def prepare_argv(argv: Sequence[str]) -> list[str]:
    """Turn '--addresses -4,0,...' into '--addresses=-4,0,...' (ptxgemm/cli/main.py calls this before parsing).

    argparse takes a value that starts with '-' (and is not a plain negative
    number) for an option, so a list led by a negative address would fail with a
    confusing usage error instead of the model's 'negative address' message.
    """
    out: list[str] = []
    items = list(argv)
    i = 0
    while i < len(items):
        if items[i] == "--addresses" and i + 1 < len(items):
            out.append(f"--addresses={items[i + 1]}")
            i += 2
        else:
            out.append(items[i])
            i += 1
    return out


def report(args: argparse.Namespace) -> str:
    config_options = options.given(args, (*options.TILE_OPTIONS, *options.OPERAND_OPTIONS,
                                             *options.BUILD_FLAGS))
    if config_options and not args.kernel:
        raise ConfigError(f"{', '.join(config_options)}: GEMM config options go with --kernel")
    if args.op is not None:
        if args.addresses is None:
            raise ConfigError("--op: needs --addresses A0,A1,... (the 32 lanes' byte addresses)")
        return report_op(args.op, parse_addresses(args.addresses), args.json)
    if args.addresses is not None:
        raise ConfigError("--addresses: goes with --op")
    if args.pattern == TILE_PATTERN:
        layouts = args.layout or list(DEFAULT_LAYOUTS)
        return report_tile(list(dict.fromkeys(layouts)), args.row_bytes, args.pad, args.json)
    return report_kernel(options.config_from_args(args), args.json)


def run(args: argparse.Namespace) -> int:
    print(report(args))
    return 0
