"""Where the GEMM epilogue's shared-memory stores go: a Python mirror of ptxgemm/kernel/templates/epilogue.ptx.j2.

The C staging buffer holds the consumer tile as `epi_panels` panels of block_m rows x 128 bytes in TMA's
128B swizzle; a last panel narrower than 64 columns (GemmConfig.epi_tail_cols) unswizzled, rows of
epi_tail_bytes. `epilogue_stores` lists, for one warp, every store instruction the epilogue issues with the
byte offset (from the 1024-aligned buffer base) each lane supplies. `python -m ptxgemm bank-conflicts --kernel`
feeds these to the bank-conflict model; tests check them against ptxgemm.kernel.swizzle, i.e. against where TMA expects
the bytes.
"""
from __future__ import annotations

from .config import GemmConfig
from .hardware import SWIZZLE_BYTES, WARP_LANES
from .swizzle import swizzle_address

ROWS_PER_WARP = 16


def epilogue_stores(config: GemmConfig, warp: int = 0) -> list[tuple[str, list[int]]]:
    """[(op, [32 lane byte offsets])] in issue order for consumer warp `warp` (0..3)."""
    out = []
    tail_panel = config.epi_panels - 1 if config.epi_tail_cols else None
    for h in range(config.m_halves):
        if config.out_itemsize == 2:
            for c in range(config.block_n // 16):
                addrs = []
                for lane in range(WARP_LANES):
                    row = 64 * h + ROWS_PER_WARP * warp + (lane % 8) + 8 * ((lane >> 3) & 1)
                    if c // 4 == tail_panel:   # unswizzled: 16 columns of 2 bytes per block, 8 per lane
                        addrs.append((c // 4) * config.epi_panel_bytes + row * config.epi_tail_bytes
                                     + (c % 4) * 32 + 16 * (lane >> 4))
                        continue
                    chunk = ((c % 4) * 2 + (lane >> 4)) ^ (row % 8)
                    addrs.append((c // 4) * config.epi_panel_bytes + row * SWIZZLE_BYTES + chunk * 16)
                out.append(("stmatrix.x4", addrs))
        else:
            for j in range(config.block_n // 8):
                for half_row in (0, 8):
                    addrs = []
                    for lane in range(WARP_LANES):
                        row = 64 * h + ROWS_PER_WARP * warp + (lane >> 2) + half_row
                        if j // 4 == tail_panel:   # unswizzled: 8 columns of 4 bytes per block, 2 per lane
                            addrs.append((j // 4) * config.epi_panel_bytes + row * config.epi_tail_bytes
                                         + (j % 4) * 32 + 8 * (lane & 3))
                            continue
                        chunk = (2 * (j % 4) + ((lane & 3) >> 1)) ^ (row % 8)
                        addrs.append((j // 4) * config.epi_panel_bytes + row * SWIZZLE_BYTES + chunk * 16
                                     + 8 * (lane & 1))
                    out.append(("st.v2.b32", addrs))
    return out


def stmatrix_addresses(config: GemmConfig, warp: int = 0) -> list[list[int]]:
    """Lane byte offsets of every stmatrix.x4 the epilogue issues (16-bit outputs; fp32 uses st.v2.b32)."""
    return [addrs for op, addrs in epilogue_stores(config, warp) if op.startswith("stmatrix")]


def element_offset(config: GemmConfig, row: int, col: int) -> int:
    """Byte offset in the staging buffer of output element (row, col) of the tile, as the TMA store reads it."""

    panel, col_in_panel = divmod(col, config.epi_panel_cols)
    if config.epi_tail_cols and panel == config.epi_panels - 1:   # the tail: unswizzled rows of epi_tail_bytes
        return panel * config.epi_panel_bytes + row * config.epi_tail_bytes + col_in_panel * config.out_itemsize
    linear = row * SWIZZLE_BYTES + col_in_panel * config.out_itemsize
    return panel * config.epi_panel_bytes + int(swizzle_address(linear, "128B"))
