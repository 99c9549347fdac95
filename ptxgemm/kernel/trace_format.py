"""The trace buffer's format: what a traced kernel (ptxgemm/kernel/templates/trace.ptx.j2) writes and the decoder
(ptxgemm.tools.trace) reads. The single source of the layout, the role numbers and the event codes.

Buffer layout (little-endian):
  header   ctas*ROLES entries of HEADER_ENTRY_BYTES; entry cta*ROLES + role: u32 count, u32 smid, u32 dropped,
           u32 schedule (the index of the kernel's schedule in SCHEDULES: which paths its consumers' tiles take)
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
# consumer (value: tile index, the scheduler unit; in the cooperative schedule both consumers record every tile)
ORDER_ACQUIRED = 16     # pingpong: the math-order barrier passed; cooperative (no order barrier): the tile's
                        # coordinates are computed, its first stage is waited for next
MAINLOOP_START = 17     # the first stage's data arrived, first wgmma about to issue
MMA_ISSUED = 18         # every wgmma of the tile issued; (pingpong) the order barrier goes to the peer consumer
MMA_RETIRED = 19        # the last wgmma retired
EPILOGUE_START = 20     # pingpong: the epilogue-order barrier passed; cooperative: the epilogue begins (no barrier)
STORE_ISSUED = 21       # the tile's TMA stores were committed (cooperative: the last panel's; its epilogue ends here)
STORE_DRAINED = 22      # pingpong only: the store finished reading shared memory; the peer may reuse the staging
                        # buffer. The cooperative epilogue never waits for its own stores (they read on under the
                        # next mainloop; a slot is waited for only when rewritten), so it has no such instant.
# consumer, split-K (value: tile index); they come after EPILOGUE_START, in place of (a partial) or before (the final
# split) the ordinary epilogue (ptxgemm/kernel/templates/splitk.ptx.j2)
PARTIAL_STORED = 24     # a partial split: its fp32 accumulators are in its workspace slot and its leader raised the
                        # tile's flag (release); the tile ends here, with nothing stored to C
SPLITS_ARRIVED = 25     # the final split: the wait for the other splits' flags ended (every partial is published)
FIXUP_DONE = 26         # the final split: the partials are added to its accumulators and the flag reset (the
                        # fix-up); its ordinary epilogue follows

CODE_NAMES = {code: name for name, code in [
    ("ROLE_START", ROLE_START), ("ROLE_END", ROLE_END), ("EMPTY_ACQUIRED", EMPTY_ACQUIRED),
    ("TMA_ISSUED", TMA_ISSUED), ("ORDER_ACQUIRED", ORDER_ACQUIRED), ("MAINLOOP_START", MAINLOOP_START),
    ("MMA_ISSUED", MMA_ISSUED), ("MMA_RETIRED", MMA_RETIRED), ("EPILOGUE_START", EPILOGUE_START),
    ("STORE_ISSUED", STORE_ISSUED), ("STORE_DRAINED", STORE_DRAINED), ("PARTIAL_STORED", PARTIAL_STORED),
    ("SPLITS_ARRIVED", SPLITS_ARRIVED), ("FIXUP_DONE", FIXUP_DONE)]}
#: The codes by lower-case name, for templates (`trace_codes.mma_issued`), as stall_format.STALL_CODES is.
CODES = {name.lower(): code for code, name in CODE_NAMES.items()}

#: The schedules a traced kernel may run (GemmConfig.schedule), numbered as the header's schedule word numbers them.
SCHEDULES = ("pingpong", "cooperative")

#: The codes one producer k-tile writes, in order, between ROLE_START and ROLE_END.
PRODUCER_CYCLE = (EMPTY_ACQUIRED, TMA_ISSUED)
_TILE_HEAD = (ORDER_ACQUIRED, MAINLOOP_START, MMA_ISSUED, MMA_RETIRED, EPILOGUE_START)
_STORE = {"pingpong": (STORE_ISSUED, STORE_DRAINED), "cooperative": (STORE_ISSUED,)}
_FIXUP = (SPLITS_ARRIVED, FIXUP_DONE)
#: One pingpong tile without split-K: the codes a consumer writes for it, in order.
CONSUMER_CYCLE = _TILE_HEAD + _STORE["pingpong"]
#: Every consumer code, in the order a tile writes them (the columns of the decoder's tile table).
CONSUMER_CODES = CONSUMER_CYCLE + (PARTIAL_STORED,) + _FIXUP
BRACKET_RECORDS = 2  # ROLE_START and ROLE_END


def consumer_paths(schedule: str) -> dict[str, tuple[int, ...]]:
    """The code sequences a consumer may write for one tile in `schedule`: "tile" without split-K; with it
    "partial" (every split but the last) and "final" (the last, which waits for the others and adds them up)."""
    store = _STORE[schedule]
    return {"tile": _TILE_HEAD + store, "partial": _TILE_HEAD + (PARTIAL_STORED,), "final": _TILE_HEAD + _FIXUP + store}


def role_paths(schedule: str) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """Per role, the code sequences one of its cycles may write (a producer k-tile, a consumer tile)."""
    consumer = tuple(consumer_paths(schedule).values())
    return ((PRODUCER_CYCLE,), consumer, consumer)


def tile_records(schedule: str = "pingpong", split_k: bool = False) -> int:
    """Records the longest tile of a consumer writes (a split-K final split records its fix-up too)."""
    paths = consumer_paths(schedule)
    return max(len(paths["partial"]), len(paths["final"])) if split_k else len(paths["tile"])


HEADER_DTYPE = np.dtype([("count", "<u4"), ("smid", "<u4"), ("dropped", "<u4"), ("schedule", "<u4")])
RECORD_DTYPE = np.dtype([("time_ns", "<u8"), ("clock", "<u8"), ("code", "<u4"), ("value", "<u4"),
                         ("reserved", "<u8")])
assert HEADER_DTYPE.itemsize == HEADER_ENTRY_BYTES and RECORD_DTYPE.itemsize == RECORD_BYTES


def capacity_for(tiles_per_consumer_max: int, k_tiles_per_cta_max: int, schedule: str = "pingpong",
                 split_k: bool = False) -> int:
    """Records one role's slice must hold so that no role drops any (the busier of producer and consumer)."""
    producer = len(PRODUCER_CYCLE) * k_tiles_per_cta_max + BRACKET_RECORDS
    consumer = tile_records(schedule, split_k) * tiles_per_consumer_max + BRACKET_RECORDS
    return max(producer, consumer)


def header_bytes(ctas: int) -> int:
    """Byte offset of the first record (a multiple of 16, so the u64 times stay aligned)."""
    return ctas * ROLES * HEADER_ENTRY_BYTES


def buffer_bytes(ctas: int, capacity: int) -> int:
    return header_bytes(ctas) + ctas * ROLES * capacity * RECORD_BYTES
