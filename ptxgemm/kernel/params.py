"""What the GEMM templates receive: template_params(cfg) is the single door from a GemmConfig into the jinja2
templates (ptxgemm/kernel/templates), so the PTX, the host launch code and the inspection report read the same
numbers. The templates compute nothing of their own."""
from __future__ import annotations

import math

from . import fast_div, grouped_walk, trace_format
from .config import GELU_CUBIC, GemmConfig, PTX_FLOAT_TYPES, PTX_VERSION, SCALE_BLOCK, SCALE_LOOKAHEAD, WGMMA_TYPES
from .hardware import DESC_ADDRESS_MASK, FULL_WARP_MASK, MBARRIER_BYTES, SWIZZLE_BYTES, WARP_LANES, WARPGROUP_THREADS
from .layout import (BARRIER_CTA, BARRIER_EPILOGUE_ORDER, BARRIER_EPILOGUE_SYNC, BARRIER_MMA_ORDER, FLAG_BYTES,
                     SCALE_BYTES, itemsize)
from .schedule import SK_MAX_SHARES
from .stall_format import STALL_CODES


def entry_maps(cfg: GemmConfig) -> tuple[str, ...]:
    """The tensor maps the GEMM kernel's `.entry` takes (each a `.param .align 64 .b8 NAME[128]`), in its order.
    The template declares them from this list and the dense and grouped launches pack them by it, so the kernel's
    order and the host's cannot drift apart: A, B and C; C's narrow last panel where block_n is not a whole number
    of panels; the epilogue's source S; A's blockwise scales where they are read M-major, by TMA."""
    return ("tmap_a", "tmap_b", "tmap_c",
            *(("tmap_c_tail",) if cfg.epi_tail_cols else ()),
            *(("tmap_source",) if cfg.has_source else ()),
            *(("tmap_scale_a",) if cfg.block_scale_a_mn else ()))


def template_params(cfg: GemmConfig) -> dict:
    """Everything the gemm templates read: the config itself (`cfg`) and the numbers and names it derives."""
    producer_regs, consumer_regs = cfg.register_split
    return {
        # one kernel template per schedule, named as its entry (the grouped kernel is a schedule of its own), and
        # its tile walk
        "template_name": f"{cfg.kernel_name}.ptx.j2",
        "scheduler_template": "grouped_scheduler.ptx.j2" if cfg.grouped else "scheduler.ptx.j2",
        "entry_maps": entry_maps(cfg),   # the entry's tensor maps, in the order the host packs them
        # a literal divisor's multiplier and shift (intdiv.ptx.j2's by_const: ptxas divides by a literal as slowly as
        # by a register)
        "div_magic": fast_div.magic,
        # the unit -> group search: power-of-two steps from group 0 whose sum reaches the last group the tables hold
        "max_groups": cfg.group_table_entries - 1,
        "group_search_steps": [1 << i for i in reversed(range((cfg.group_table_entries - 2).bit_length()))],
        # groups per lane of warp 0's scan, at most
        "group_lane_chunk": -(-(cfg.group_table_entries - 1) // WARP_LANES),
        # the k form's sort keys (grouped_walk.sort_key)
        "sort_index_bits": grouped_walk.SORT_INDEX_BITS,
        "sort_index_limit": grouped_walk.SORT_INDEX_LIMIT,
        "sort_max_k_tiles": grouped_walk.SORT_MAX_K_TILES,
        "summary": cfg.describe(),
        "ptx_version": PTX_VERSION,
        "cfg": cfg,
        "threads": cfg.threads,
        "consumer_release_arrivals": cfg.empty_arrivals,
        "producer_regs": producer_regs,
        "consumer_regs": consumer_regs,
        "desc_address_mask": DESC_ADDRESS_MASK,
        "desc_a_consts": cfg.descriptor_consts(cfg.a_major),
        "desc_b_consts": cfg.descriptor_consts(cfg.b_major),
        "trans_a": int(cfg.a_major == "mn"),
        "trans_b": int(cfg.b_major == "mn"),
        "a_type": WGMMA_TYPES[cfg.in_dtype],
        "b_type": WGMMA_TYPES[cfg.b_type],
        "debug": cfg.debug,
        "stall_codes": STALL_CODES,
        "debug_timeout_ns": cfg.debug_timeout_ns,
        "bar_cta": BARRIER_CTA,
        "bar_epi_sync": BARRIER_EPILOGUE_SYNC,
        "bar_mma_order": BARRIER_MMA_ORDER,
        "bar_epi_order": BARRIER_EPILOGUE_ORDER,
        "mbarrier_bytes": MBARRIER_BYTES,
        "swizzle_bytes": SWIZZLE_BYTES,                       # one swizzled row of a tile: the TMA box's line
        "panel_elems": SWIZZLE_BYTES // cfg.in_itemsize,      # elements of an MN-major operand per swizzled row
        "flag_bytes": FLAG_BYTES,
        # the register holding the current unit's k-tile count: a stream-K segment's own, or its split's under a
        # split lead, else every unit's
        "unit_k_tiles": "%k_count" if cfg.stream_k or cfg.split_lead else "%k_tiles",
        "sk_max_shares": SK_MAX_SHARES,                       # stream-K: a unit is cut into at most this many shares
        "quad_stride": WARPGROUP_THREADS * 16,
        "scale_block": SCALE_BLOCK,
        "scale_bytes": SCALE_BYTES,
        "scale_lookahead": SCALE_LOOKAHEAD,
        "warp_lanes": WARP_LANES,
        "full_warp_mask": FULL_WARP_MASK,
        "ptx_float": PTX_FLOAT_TYPES,
        "float_bytes": {name: itemsize(name) for name in PTX_FLOAT_TYPES},
        "gelu_cubic": GELU_CUBIC,
        "sqrt_2_over_pi": math.sqrt(2.0 / math.pi),
        "minus_log2e": -1.0 / math.log(2.0),
        "trace_codes": trace_format.CODES,
        "trace_roles": trace_format.ROLES,
        "trace_record_bytes": trace_format.RECORD_BYTES,
        "trace_header_entry_bytes": trace_format.HEADER_ENTRY_BYTES,
        "trace_schedule": trace_format.SCHEDULES.index(cfg.schedule),   # the header's schedule word
    }
