"""The epilogue's shared-memory addresses agree with the 128B swizzle the TMA store expects, and cover the tile."""
import pytest

from ptxgemm.kernel.config import GemmConfig
from ptxgemm.kernel.epilogue_layout import element_offset, epilogue_stores

CONFIGS = [GemmConfig(), GemmConfig(out_dtype="float32"), GemmConfig(block_m=64, block_n=256),
           GemmConfig(block_n=192, out_dtype="float16"), GemmConfig(block_n=160), GemmConfig(block_n=176, out_dtype="float32"),
           GemmConfig(block_m=64, block_n=208, out_dtype="float16"), GemmConfig(block_m=64, block_n=80, out_dtype="float32")]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.describe())
def test_every_output_byte_written_once_where_tma_reads_it(cfg):
    """Map each lane's store back to (row, col) through the accumulator layout and compare with the swizzle."""
    written = {}
    for warp in range(4):
        stores = epilogue_stores(cfg, warp)
        for index, (op, addrs) in enumerate(stores):
            for lane, addr in enumerate(addrs):
                if op == "stmatrix.x4":
                    h, c = divmod(index, cfg.block_n // 16)
                    row = 64 * h + 16 * warp + (lane % 8) + 8 * ((lane >> 3) & 1)
                    cols = range(16 * c + 8 * (lane >> 4), 16 * c + 8 * (lane >> 4) + 8)   # one 16-byte row
                else:
                    h, rest = divmod(index, 2 * (cfg.block_n // 8))
                    j, half = divmod(rest, 2)
                    row = 64 * h + 16 * warp + (lane >> 2) + 8 * half
                    cols = range(8 * j + 2 * (lane & 3), 8 * j + 2 * (lane & 3) + 2)    # one 8-byte pair
                assert addr == element_offset(cfg, row, cols[0]), (op, warp, index, lane)
                for i, col in enumerate(cols):
                    byte = addr + i * cfg.out_itemsize
                    assert byte == element_offset(cfg, row, col)
                    assert byte not in written
                    written[byte] = (row, col)
    assert len(written) == cfg.block_m * cfg.block_n
