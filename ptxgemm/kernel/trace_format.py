"""The trace buffer's format: what a traced kernel (ptxgemm/kernel/templates/trace.ptx.j2) writes and the decoder
(ptxgemm.tools.trace) reads. The single source of the layout, the role numbers and the event codes.

Buffer layout (little-endian):
  header   ctas*ROLES entries of HEADER_ENTRY_BYTES; entry cta*ROLES + role: u32 count, u32 smid, u32 dropped, u32 0
  records  from header_bytes(ctas): ctas*ROLES*capacity records of RECORD_BYTES; record j of (cta, role) at index
           (cta*ROLES + role)*capacity + j: u64 time_ns, u64 clock, u32 code, u32 value, u64 0
"""
from __future__ import annotations

import numpy as np


ROLES = 3
PRODUCER, CONSUMER0, CONSUMER1 = 0, 1, 2
CONSUMER_ROLES = (CONSUMER0, CONSUMER1)
ROLE_NAMES = ("producer", "consumer 0", "consumer 1")
HEADER_ENTRY_BYTES = 16
RECORD_BYTES = 32
TIMER_TICK_NS = 32  # %globaltimer advances in 32 ns steps on Hopper

# any role
ROLE_START = 1          # setup done; value: k-tiles per output tile
ROLE_END = 2            # value 0: about to exit
# producer (value: pos, the running k-tile number of this CTA's load sequence)
EMPTY_ACQUIRED = 8      # the wait for a free ring stage finished
TMA_ISSUED = 9          # the stage's A and B loads were issued
# consumer (value: tile index)
ORDER_ACQUIRED = 16     # the math-order barrier passed
MAINLOOP_START = 17     # the first stage's data arrived, first wgmma about to issue
MMA_ISSUED = 18         # every wgmma of the tile issued; the order barrier goes to the peer consumer
MMA_RETIRED = 19        # the last wgmma retired
EPILOGUE_START = 20     # the epilogue-order barrier passed
STORE_ISSUED = 21       # the TMA store was committed
STORE_DRAINED = 22      # the store finished reading shared memory; the peer may reuse the staging buffer

CODE_NAMES = {code: name for name, code in [
    ("ROLE_START", ROLE_START), ("ROLE_END", ROLE_END), ("EMPTY_ACQUIRED", EMPTY_ACQUIRED),
    ("TMA_ISSUED", TMA_ISSUED), ("ORDER_ACQUIRED", ORDER_ACQUIRED), ("MAINLOOP_START", MAINLOOP_START),
    ("MMA_ISSUED", MMA_ISSUED), ("MMA_RETIRED", MMA_RETIRED), ("EPILOGUE_START", EPILOGUE_START),
    ("STORE_ISSUED", STORE_ISSUED), ("STORE_DRAINED", STORE_DRAINED)]}
#: The codes by lower-case name, for templates (`trace_codes.mma_issued`), as stall_format.STALL_CODES is.
CODES = {name.lower(): code for code, name in CODE_NAMES.items()}

#: The codes one producer k-tile / one consumer tile writes, in order, between ROLE_START and ROLE_END.
PRODUCER_CYCLE = (EMPTY_ACQUIRED, TMA_ISSUED)
CONSUMER_CYCLE = (ORDER_ACQUIRED, MAINLOOP_START, MMA_ISSUED, MMA_RETIRED, EPILOGUE_START, STORE_ISSUED,
                  STORE_DRAINED)
ROLE_CYCLES = (PRODUCER_CYCLE, CONSUMER_CYCLE, CONSUMER_CYCLE)
BRACKET_RECORDS = 2  # ROLE_START and ROLE_END

HEADER_DTYPE = np.dtype([("count", "<u4"), ("smid", "<u4"), ("dropped", "<u4"), ("reserved", "<u4")])
RECORD_DTYPE = np.dtype([("time_ns", "<u8"), ("clock", "<u8"), ("code", "<u4"), ("value", "<u4"),
                         ("reserved", "<u8")])
assert HEADER_DTYPE.itemsize == HEADER_ENTRY_BYTES and RECORD_DTYPE.itemsize == RECORD_BYTES


def capacity_for(tiles_per_consumer_max: int, k_tiles_per_cta_max: int) -> int:
    """Records one role's slice must hold so that no role drops any (the busier of producer and consumer)."""
    producer = len(PRODUCER_CYCLE) * k_tiles_per_cta_max + BRACKET_RECORDS
    consumer = len(CONSUMER_CYCLE) * tiles_per_consumer_max + BRACKET_RECORDS
    return max(producer, consumer)


def header_bytes(ctas: int) -> int:
    """Byte offset of the first record (a multiple of 16, so the u64 times stay aligned)."""
    return ctas * ROLES * HEADER_ENTRY_BYTES


def buffer_bytes(ctas: int, capacity: int) -> int:
    return header_bytes(ctas) + ctas * ROLES * capacity * RECORD_BYTES
