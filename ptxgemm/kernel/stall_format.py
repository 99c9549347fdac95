"""The debug stall record's format: what a debug kernel's bounded mbarrier wait writes when it gives up
(ptxgemm/kernel/templates/mbarrier.ptx.j2, `report_stall`) and ptxgemm.runtime.debug reads back.
"""
from __future__ import annotations

RECORD_BYTES = 32
MAGIC = 0x57A1
DEFAULT_TIMEOUT_NS = 2_000_000_000

#: The mbarrier waits that can report a stall. Templates refer to them by name (`stall_codes.full`, passed in by
#: `template_params`), the stall record carries the number. Named barriers (bar.sync) cannot time out, so the
#: consumers' order barriers have no code: a stall elsewhere traps the whole grid anyway.
STALL_CODES = {"full": 1, "empty": 2, "drain": 3, "split": 4, "source_full": 5, "source_empty": 6}
BARRIER_NAMES = {
    STALL_CODES["full"]: "full (TMA load landed; waited on by a consumer)",
    STALL_CODES["empty"]: "empty (stage released by a consumer; waited on by the producer)",
    STALL_CODES["drain"]: "producer drain (final wait on every empty stage)",
    STALL_CODES["split"]: ("split-K flag (the last split waiting for the partials; 'parity' holds the count it saw, "
                           "'smem_address' the count it waits for, 'detail' the work tile)"),
    STALL_CODES["source_full"]: "source full (the epilogue's S tile landed; waited on by a consumer)",
    STALL_CODES["source_empty"]: "source empty (S tile read by the consumers; waited on by the producer)",
}
