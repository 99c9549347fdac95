"""Every number a GEMM kernel derives from its config: tile and stage sizes, the shared-memory map, the epilogue's
staging panels, split-K's workspace, the register split and the wgmma descriptor constants, plus the named
barrier ids. They are properties of `KernelLayout`, which GemmConfig inherits, so each is read from the config it
follows from (cfg.smem_a, cfg.stage_bytes, ...) and defined here alone (those of the tile alone in `TileLayout`,
which kernel/tile.py's Tile inherits too, so that its rules read the same numbers); kernel/params.py hands them to the
templates, the host reads the same properties, and the PTX and the launch can never disagree.
"""
from __future__ import annotations

import functools

import numpy as np

from .grouped_walk import SORT_DEFAULT_MAX_GROUPS
from .hardware import (CONSUMERS, MAX_GROUPS, MAX_STAGES, MBARRIER_BYTES, REGISTERS_PER_SM, SMEM_PER_BLOCK_OPTIN,
                       SWIZZLE_BYTES, TMA_ALIGN, TMA_SMEM_ALIGN, WARP_LANES, WARPGROUP_THREADS, WARPS_PER_WARPGROUP, WGMMA_K_BYTES, WGMMA_M)

# Named barrier ids (bar.sync / bar.arrive). 0 is the whole CTA (init only).
BARRIER_CTA = 0
BARRIER_EPILOGUE_SYNC = (1, 2)     # the 128 threads of consumer 0 / 1 around their TMA store
BARRIER_MMA_ORDER = (3, 4)         # pingpong: consumer g waits on [g] before its mainloop; the other arrives on it
BARRIER_EPILOGUE_ORDER = (5, 6)    # pingpong: same, for the epilogue (one shared C staging buffer)
FLAG_BYTES = 4                     # split-K: one u32 arrival counter per output tile (and consumer half)
# split-K's final holds its accumulators and the values of the partials it loads at once in registers: at most this
# many 32-bit values (the 64x128 pingpong's 64 accumulators and two partials' 128; the 128-row tiles' 128
# accumulators take one partial at a time, as before)
FIXUP_REGISTER_BUDGET = 192
# A config without `stages` fills shared memory with stages up to this many: 192 KiB of operands in flight for the
# 64x128 pingpong and the cooperative tiles alike. A deeper ring (up to MAX_STAGES) is asked for by `stages`: the
# selection gives one to the 64x64 pingpong, whose 16 KiB stages would otherwise keep only 128 KiB in flight
# (select/predict.py, DEEP_RING_TILES). Measured on the H200 (issue 47, run 49): 13 stages against 8 ran the
# 64x64 pingpong's one-wave split-K weight gradients up to 12% faster, but the transposed tiles' small-M streams
# 1.5% slower on average (up to 18%), so the default stays.
FILL_STAGES = 8
SCALE_BYTES = 4                    # blockwise scaling: one fp32 scale
BS_B_SLOT_BYTES = 16               # a stage's B scales in shared memory: the tile's two blocks', padded to 16 bytes
# A's M-major scale box in the contiguous grouped kernel (bs_a_quads) starts on the 16-byte quad of rows that holds
# the tile's first row, and so spans a quad more than its rows; at most this many rows a box (+ the quad: 132 of
# TMA's 256 elements a dimension), a 256-row tile's in two boxes
BS_A_BOX_SPAN = 128


@functools.lru_cache(maxsize=None)   # the selection asks it for every candidate's every layout number
def itemsize(name: str) -> int:
    """Bytes per element of a dtype named as numpy names it (bfloat16 and fp8 too)."""
    import ml_dtypes  # noqa: F401

    return np.dtype(name).itemsize


class TileLayout:
    """The numbers the tile choice alone decides (mixed into kernel/tile.py's Tile, whose rules read them, and
    through KernelLayout into GemmConfig: `self` has the tile's fields)."""

    @property
    def cooperative(self) -> bool:
        return self.schedule == "cooperative"

    @property
    def consumer_m(self) -> int:
        """Rows of the tile one consumer computes: the whole tile (pingpong) or its half (cooperative)."""
        return self.block_m // CONSUMERS if self.cooperative else self.block_m

    @property
    def consumers_per_tile(self) -> int:
        return CONSUMERS if self.cooperative else 1

    @property
    def m_halves(self) -> int:
        """wgmma row blocks (m64) per consumer tile, each with its own accumulator registers."""
        return self.consumer_m // WGMMA_M

    @property
    def acc_registers(self) -> int:
        """fp32 accumulator registers per consumer thread: consumer_m*block_n / 128."""
        return self.consumer_m * self.block_n // WARPGROUP_THREADS

    @property
    def acc_per_half(self) -> int:
        return self.block_n // 2

    @property
    def cluster_size(self) -> int:
        """CTAs per cluster: cluster_m x cluster_n (one of them is 1)."""
        return self.cluster_m * self.cluster_n

    @property
    def unit_rows(self) -> int:
        """Rows of one scheduler unit: a tile's, or a cluster pair's two tiles' along M (the grouped walk counts a
        group's units in these)."""
        return self.block_m * self.cluster_m

    @property
    def transposed_store(self) -> bool:
        return self.c_major == "m"

    @property
    def split_k(self) -> bool:
        return self.splits > 1


class KernelLayout(TileLayout):
    """The derived numbers of a GemmConfig (mixed into it: `self` is the config, its fields validated)."""

    @property
    def block_k(self) -> int:
        """K per pipeline stage: one 128-byte swizzle row of K (64 elements of a 16-bit type, 128 of fp8), the
        only depth a stage can have with the 128-byte swizzle every operand uses."""
        return SWIZZLE_BYTES // self.in_itemsize

    # --- sizes -----------------------------------------------------------------------------------------
    @property
    def in_itemsize(self) -> int:
        return itemsize(self.in_dtype)

    @property
    def out_itemsize(self) -> int:
        return itemsize(self.out_dtype)

    @property
    def k_steps(self) -> int:
        """wgmma instructions along K per stage (WGMMA_K_BYTES each)."""
        return self.block_k * self.in_itemsize // WGMMA_K_BYTES

    @property
    def mma_k(self) -> int:
        """K of one wgmma instruction: 16 for 16-bit inputs, 32 for fp8."""
        return WGMMA_K_BYTES // self.in_itemsize

    @property
    def a_stage_bytes(self) -> int:
        return self.block_m * self.block_k * self.in_itemsize

    @property
    def b_panels(self) -> int:
        """64-column panels an MN-major B tile is loaded as (one TMA box each); the last is loaded whole even when
        block_n is not a multiple of 64, and wgmma reads only its first block_n % 64 columns."""
        return -(-self.block_n // 64)

    @property
    def b_stage_bytes(self) -> int:
        rows = self.b_panels * 64 if self.b_major == "mn" else self.block_n
        return rows * self.block_k * self.in_itemsize

    @property
    def b_rows_per_cta(self) -> int:
        """N extent of the B box each CTA of a cluster loads (and multicasts to the whole cluster)."""
        return self.block_n // self.cluster_m

    @property
    def a_rows_per_cta(self) -> int:
        """M extent of the A box each CTA of a cluster loads (and, with cluster_n 2, multicasts to the pair)."""
        return self.block_m // self.cluster_n

    @property
    def empty_arrivals(self) -> int:
        """Arrivals that release a stage: lane 0 of every consumer warp that read it (one consumer's 4 in pingpong,
        both consumers' 8 in cooperative), in every CTA whose smem the stage's multicast writes (with a cluster,
        the peer's producer refills our stage too)."""
        return WARPS_PER_WARPGROUP * self.consumers_per_tile * self.cluster_size

    @property
    def consumer_a_offset(self) -> int:
        """Bytes from a stage's A tile to the rows consumer 1 reads (cooperative; 0 in pingpong): consumer_m rows,
        i.e. m_halves m64 row blocks of the operand's layout (K-major: 64 lines of 128 B; MN-major: one panel)."""
        if not self.cooperative:
            return 0
        return self.m_halves * (self.descriptor_consts(self.a_major)["half_step"] << 4)

    @property
    def stage_bytes(self) -> int:
        """Bytes one stage's TMA loads deliver: the full boxes, even where they hang past the matrix (zero fill);
        with A's scales M-major (block_scale_a_mn), their boxes too."""
        return self.a_stage_bytes + self.b_stage_bytes + self.bs_a_box_bytes

    @property
    def ring_stage_bytes(self) -> int:
        """Shared memory one stage of the ring takes: its operands and, with the scales in shared memory, A's slot
        and B's (what the stage counts divide by)."""
        return self.a_stage_bytes + self.b_stage_bytes + self.bs_a_slot_bytes + self.bs_b_slot_bytes

    # --- blockwise scaling: A's scales brought with the stage (blockscale.ptx.j2) ------------------------------
    @property
    def bs_a_in_smem(self) -> bool:
        """Whether the producer brings each stage's A scales (one fp32 per tile row, of the stage's k-block) into a
        slot beside the stage, where the consumers read them after the full wait they make anyway, instead of every
        consumer thread loading its rows' scales from global memory two k-tiles ahead (issue 49: ~8 instructions of
        64-bit address arithmetic per k-tile per consumer warp, and the L1 traffic ncu saw). Dense, unswapped
        blockwise kernels only: swapped ones index A's scales by the tile's columns, the grouped kernel's rows run
        per group (both keep the loads). And only where the slots cost nothing (_bs_a_slots_free): measured on the
        H200 (runs 60-62, DeepGEMM's dense set, flushed kernel durations), the 64-row pingpong tiles of its M = 64
        and 128 rows gained 4-9% with them, while the 256x128 tiles, whose ring they cut from 4 stages to 3, lost
        2-3.5% at M = 4096, and the 128x128 cooperative tile, whose epilogue they cut to one panel slot, about 2%.
        With A's scales M-major (block_scale_a_mn) always, the contiguous grouped kernel's included (its tile rows
        are rows of A's whole table, the group's first row plus the tile's): a TMA box brings them, and the slot is
        what that costs."""
        if not self.block_scale or self.block_scale_swapped:
            return False
        return self.block_scale_a_mn or (self.grouped is None and self._bs_a_slots_free)

    @property
    def _bs_a_slots_free(self) -> bool:
        """Whether the scale slots (A's block_m fp32 and B's BS_B_SLOT_BYTES per stage) fit beside the ring without
        costing it a stage or the cooperative epilogue a panel slot: the same counts with and without them."""
        slot, operands = self.block_m * SCALE_BYTES + BS_B_SLOT_BYTES, self.a_stage_bytes + self.b_stage_bytes
        if self.stages is None:
            stages = self._filled_stages(operands)
            if self._filled_stages(operands + slot) < stages:
                return False
        else:
            stages = self.stages
            if stages * (operands + slot) > self._room_for_stages(stages):
                return False
        return (not self.cooperative
                or self._cooperative_slots_for(stages, operands + slot)
                == self._cooperative_slots_for(stages, operands))

    @property
    def bs_a_slot_bytes(self) -> int:
        """One stage's A scales: block_m fp32 (rows past M hold row M - 1's), and the quad the boxes add (bs_a_quads),
        padded to where the next stage's box may land (TMA_SMEM_ALIGN); 0 without bs_a_in_smem."""
        if not self.bs_a_in_smem:
            return 0
        rows = self.block_m + (self.bs_a_quad_rows if self.bs_a_quads else 0)
        return -(-rows * SCALE_BYTES // TMA_SMEM_ALIGN) * TMA_SMEM_ALIGN

    @property
    def bs_a_quad_rows(self) -> int:
        """Rows of one 16-byte quad of A's M-major table (TMA_ALIGN / SCALE_BYTES = 4): where a box may start."""
        return TMA_ALIGN // SCALE_BYTES

    @property
    def bs_a_quads(self) -> bool:
        """Whether A's M-major scale boxes start on the quad of rows that holds the tile's first row, rather than at
        that row: in the contiguous grouped kernel, whose tile rows start at a group's first row (any row of the
        table), where a box starting there would start at an unaligned byte, and TMA faults (TMA_ALIGN). The boxes
        then span a quad more, and the consumers read their rows (m0 mod 4) further on. The dense kernel's tiles
        start at multiples of block_m, whose boxes start aligned."""
        return self.block_scale_a_mn and self.grouped == "contiguous"

    @property
    def bs_a_boxes(self) -> int:
        """TMA boxes a stage's A scales take (block_scale_a_mn): one of the tile's rows; with bs_a_quads one per
        BS_A_BOX_SPAN rows, each a quad longer, box i starting i * BS_A_BOX_SPAN rows after the first: a 256-row
        tile's two boxes overlap in one quad, which both write with the same bytes before the full wait."""
        return -(-self.block_m // BS_A_BOX_SPAN) if self.bs_a_quads else 1

    @property
    def bs_a_box_step(self) -> int:
        """Rows from one A scale box's first row to the next's (and scales from its slot to the next's): the tile's
        rows shared evenly by bs_a_boxes."""
        return self.block_m // self.bs_a_boxes

    @property
    def bs_a_box_rows(self) -> int:
        """Rows of one A scale box (block_scale_a_mn): block_m, or with bs_a_quads its step plus the quad."""
        if not self.bs_a_quads:
            return self.block_m
        return self.bs_a_box_step + self.bs_a_quad_rows

    @property
    def bs_a_box_bytes(self) -> int:
        """Bytes a stage's A scale boxes deliver (what the full barrier's expect_tx counts for them)."""
        return self.bs_a_boxes * self.bs_a_box_rows * SCALE_BYTES if self.block_scale_a_mn else 0

    @property
    def bs_a_copiers(self) -> int:
        """Producer threads that copy a stage's A scales (the whole of warp 0, whose lane 0 also issues the TMA
        loads), each arriving once per stage on its full barrier; 0 without bs_a_in_smem, and 0 with A's scales
        M-major (the leader's TMA box brings them, counted in stage_bytes)."""
        return WARP_LANES if self.bs_a_in_smem and not self.block_scale_a_mn else 0

    @property
    def bs_a_rows_per_copier(self) -> int:
        """Scales each copier copies per stage: rows lane, lane + 32, ... of the tile."""
        return self.block_m // WARP_LANES

    @property
    def bs_b_in_smem(self) -> bool:
        """Whether the producer's warpgroup also brings each stage's B scales (the tile's one or two 128-column blocks
        of the stage's k-block, 4 bytes each) into a slot beside A's, where the consumers read them with A's after
        the full wait: no batch of B scales per tile in the consumers, whose load at a tile's start (its address
        needs the tile's coordinates) delayed the first promotion by an L2 round trip (issue 49, the short-K rows).
        Wherever A's scales are in shared memory, but in the grouped kernel: each group has its own table of B's
        scales, whose offset the consumers' lane batches add (blockscale.tile_setup). Who brings them:
        bs_b_walker."""
        return self.bs_a_in_smem and self.grouped is None

    @property
    def bs_b_walker(self) -> bool:
        """Whether the producer's warp 1, the B scale walker, brings B's scales (bs_b_in_smem): it holds them in
        batches of 32 k-tiles and stores each stage's before its own arrive, so the leader's TMA loads wait on no
        scale. Pingpong tiles only; the cooperative ones keep the leader's cp.async copy with each stage's loads
        and its noinc arrive. Measured side by side (H200, DeepGEMM's set, run 110): the walker took 3.5% off the
        pingpong 14 us rows (128x4096x7168 14.7 -> 14.2, 64x4096x7168 14.2 -> 13.7) but added 1-6% to every
        cooperative row (4096x2112x7168 coop128x192 95 -> 101 us, the coop256x128cn2 rows +1-2%)."""
        return self.bs_b_in_smem and not self.cooperative

    @property
    def bs_b_slot_bytes(self) -> int:
        """One stage's B scales: two fp32 (the tile's first block's and its second's), padded to 16 bytes."""
        return BS_B_SLOT_BYTES if self.bs_b_in_smem else 0

    @property
    def full_arrivals(self) -> int:
        """Arrivals that complete a stage's full barrier (besides its TMA bytes): the producer leader's
        arrive.expect_tx and, with A's scales in shared memory, each copier's cp.async.mbarrier.arrive.noinc (noinc:
        the arrive does not add itself to the pending count, so the init count holds it), and with B's, one more: the
        B scale walker's (lane 0 of the producer's warp 1) once it stored the stage's (bs_b_walker), or else the
        leader's second, a noinc one, once its copies of them landed."""
        return 1 + self.bs_a_copiers + int(self.bs_b_in_smem)

    @property
    def epi_panel_cols(self) -> int:
        """Output columns per 128-byte swizzle panel of the C staging buffer (64 for 16-bit, 32 for fp32)."""
        return SWIZZLE_BYTES // self.out_itemsize

    @property
    def epi_panels(self) -> int:
        """Output panels per tile: along N, the last one possibly a narrower tail (epi_tail_cols); with the
        transposed store, along the consumer's M (a whole number: block_m is a multiple of 64)."""
        if self.transposed_store:
            return self.consumer_m // self.epi_panel_cols
        return -(-self.block_n // self.epi_panel_cols)

    @property
    def epi_tail_cols(self) -> int:
        """Columns of the last output panel when block_n is not a whole number of panels (0: no tail). The tail is
        staged unswizzled, rows of epi_tail_bytes, and stored through a second tensor map whose box is that narrow:
        a full-width box would overwrite the next tile's columns."""
        return 0 if self.transposed_store else self.block_n % self.epi_panel_cols

    @property
    def epi_tail_bytes(self) -> int:
        return self.epi_tail_cols * self.out_itemsize

    @property
    def epi_panel_bytes(self) -> int:
        """One panel, one TMA store box: consumer_m rows x 128 B; transposed, block_n rows (of C^T's columns, i.e.
        of C's rows) x 128 B of M."""
        return (self.block_n if self.transposed_store else self.consumer_m) * SWIZZLE_BYTES

    @property
    def epi_box_rows(self) -> int:
        """Rows of one store box: the consumer's M rows, or (transposed) the tile's N columns."""
        return self.block_n if self.transposed_store else self.consumer_m

    @property
    def epi_slots(self) -> int:
        """Panel slots of staging per consumer. Pingpong: the whole tile (one buffer the consumers take turns
        with). Cooperative: as many as fit beside the stages, a divisor of epi_panels so that panel p always
        goes to slot p % epi_slots; a slot is rewritten only once the store that read it last is done."""
        if not self.cooperative:
            return self.epi_panels
        return self._cooperative_slots(self.num_stages)

    @property
    def epi_whole_tile(self) -> bool:
        """Cooperative with a slot for every panel: the consumer stages its whole tile in one batch (one wait for
        its previous tile's stores, one fence, two barriers, one bulk group a tile, as the pingpong's epilogue and
        DeepGEMM's do) instead of panel by panel, where each panel pays its own wait, fence and barriers so that a
        slot can be rewritten by the next panel of the same tile."""
        return self.cooperative and not self.transposed_store and self.epi_slots == self.epi_panels > 1

    def _cooperative_slots(self, stages: int) -> int:
        return self._cooperative_slots_for(stages, self.ring_stage_bytes)

    def _cooperative_slots_for(self, stages: int, ring_stage_bytes: int) -> int:
        room = (SMEM_PER_BLOCK_OPTIN - self.barrier_bytes - self.source_bytes - self.group_table_bytes
                - stages * ring_stage_bytes)
        fit = room // (CONSUMERS * self.epi_panel_bytes)
        return max((d for d in range(1, self.epi_panels + 1) if self.epi_panels % d == 0 and d <= fit), default=0)

    @property
    def epilogue_bytes(self) -> int:
        """C staging. Pingpong: one buffer of the whole tile, shared by both consumers in turn (the epilogue order
        barrier serialises them). Cooperative: epi_slots panels per consumer, consumer g's after consumer 0's."""
        if not self.cooperative:
            return self.epi_panels * self.epi_panel_bytes
        return CONSUMERS * self.epi_slots * self.epi_panel_bytes

    @property
    def consumer_staging_bytes(self) -> int:
        """Bytes from consumer 0's staging to consumer 1's (cooperative); 0 in pingpong, where they share it."""
        return self.epi_slots * self.epi_panel_bytes if self.cooperative else 0

    @property
    def barrier_bytes(self) -> int:
        # full[] and empty[], sized for the largest ring a default config fills (FILL_STAGES) or for the stages asked
        # for, so that a config's default ring does not depend on itself; the source tile's full and empty
        return self._barrier_bytes_for(self.stages)

    def _barrier_bytes_for(self, stages: int | None) -> int:
        """barrier_bytes for a ring of `stages` (None: a default config's, FILL_STAGES)."""
        return 2 * max(FILL_STAGES, stages or 0) * MBARRIER_BYTES + (2 * MBARRIER_BYTES if self.has_source else 0)

    # --- the fused epilogue -------------------------------------------------------------------------------
    @property
    def has_source(self) -> bool:
        return self.source_dtype is not None

    @property
    def fused(self) -> bool:
        """Whether the epilogue does more than cast the accumulators (fusion.ptx.j2's `apply` is emitted)."""
        return bool(self.alpha or self.device_scales or self.row_scale or self.col_scale or self.has_source
                    or self.bias or self.activation)

    @property
    def fused_registers(self) -> int:
        """Values the fused epilogue keeps live beside the accumulators (fusion.ptx.j2): two per row block for each
        row vector, two for each column vector, the source's eight values per row block (16 columns of each), four
        packed registers and its address, alpha, and the activation's two temporaries."""
        row_vectors = int(self.row_scale) + int(self.bias == "row")
        col_vectors = int(self.col_scale) + int(self.bias == "col")
        return (2 * self.m_halves * row_vectors + 2 * col_vectors + (8 * self.m_halves + 6 if self.has_source else 0)
                + int(self.alpha or self.device_scales) + (2 if self.activation else 0))

    @property
    def b_type(self) -> str:
        return self.b_dtype or self.in_dtype

    @property
    def src_itemsize(self) -> int:
        return itemsize(self.source_dtype) if self.has_source else 0

    @property
    def src_panel_cols(self) -> int:
        """Source columns per 128-byte swizzle panel (one TMA box of block_m rows)."""
        return SWIZZLE_BYTES // self.src_itemsize

    @property
    def src_panels(self) -> int:
        return self.block_n // self.src_panel_cols

    @property
    def src_panel_bytes(self) -> int:
        """One source panel: the whole tile's block_m rows (both consumers' halves in cooperative) x 128 B."""
        return self.block_m * SWIZZLE_BYTES

    @property
    def source_bytes(self) -> int:
        """The source tile's buffer: one tile, loaded by the producer once the tile's k-tiles are issued."""
        return self.src_panels * self.src_panel_bytes if self.has_source else 0

    @property
    def source_readers(self) -> int:
        """Arrivals that free the source buffer: every thread of the consumers that read it (each after its own
        shared-memory loads)."""
        return WARPGROUP_THREADS * self.consumers_per_tile

    @property
    def num_stages(self) -> int:
        """Pipeline depth: `stages` if given, else as many stages as shared memory holds, up to FILL_STAGES."""
        return self.stages if self.stages is not None else self.max_stages

    @property
    def max_stages(self) -> int:
        """The stages a config without `stages` gets: as many as shared memory holds beside the least epilogue
        buffer, up to FILL_STAGES (the cooperative epilogue makes do with one panel slot per consumer, so stages come
        first)."""
        return self._filled_stages(self.ring_stage_bytes)

    def _filled_stages(self, ring_stage_bytes: int) -> int:
        """max_stages for a ring whose stages take `ring_stage_bytes` each."""
        return min(FILL_STAGES, self._room_for_stages(FILL_STAGES) // ring_stage_bytes)

    @property
    def most_stages(self) -> int:
        """The deepest ring shared memory holds beside the least epilogue buffer, up to MAX_STAGES (each stage past
        FILL_STAGES also takes its two barriers' bytes): what `stages` may ask for."""
        filled = self.max_stages
        if filled < FILL_STAGES:
            return filled            # a deeper ring cannot fit where a default one does not fill FILL_STAGES
        # past FILL_STAGES each stage also reserves its full and empty barriers
        deep = ((self._room_for_stages(0) + 2 * FILL_STAGES * MBARRIER_BYTES)
                // (self.ring_stage_bytes + 2 * MBARRIER_BYTES))
        return max(filled, min(MAX_STAGES, deep))

    def _room_for_stages(self, stages: int) -> int:
        """Shared memory left for a ring of `stages` (its barriers reserved) beside the least epilogue buffer."""
        least_epilogue = (CONSUMERS * self.epi_panel_bytes if self.cooperative
                          else self.epi_panels * self.epi_panel_bytes)
        return (SMEM_PER_BLOCK_OPTIN - least_epilogue - self.source_bytes
                - self._barrier_bytes_for(stages) - self.group_table_bytes)

    # --- split-K -----------------------------------------------------------------------------------------
    @property
    def partial_bytes(self) -> int:
        """One consumer's fp32 partial tile in the workspace: its accumulators, stored as [quad][thread] float4s so
        that a warp's 32 lanes write (and the fix-up reads) 512 contiguous bytes per instruction."""
        return self.acc_registers * WARPGROUP_THREADS * 4

    @property
    def partial_quads(self) -> int:
        """float4 stores per thread per partial tile."""
        return self.acc_registers // 4

    @property
    def fixup_batch(self) -> int:
        """Partial tiles a split-K final loads at once before adding them in split order (splitk.ptx.j2): two where
        the accumulators and two partials' values fit FIXUP_REGISTER_BUDGET, so the second's loads are in flight
        under the first's (one L2 round trip per two partials); else one."""
        return 2 if 3 * self.acc_registers <= FIXUP_REGISTER_BUDGET else 1

    # --- shared-memory map (byte offsets from the 1024-aligned dynamic smem base) -------------------------
    @property
    def smem_a(self) -> int:
        return 0

    @property
    def smem_b(self) -> int:
        return self.num_stages * self.a_stage_bytes

    @property
    def smem_c(self) -> int:
        return self.smem_b + self.num_stages * self.b_stage_bytes

    @property
    def smem_source(self) -> int:
        return self.smem_c + self.epilogue_bytes

    @property
    def smem_bs_a(self) -> int:
        """The stages' A scale slots (bs_a_in_smem), stage s's at smem_bs_a + s * bs_a_slot_bytes; empty otherwise."""
        return self.smem_source + self.source_bytes

    @property
    def smem_bs_b(self) -> int:
        """The stages' B scale slots (bs_b_in_smem), stage s's at smem_bs_b + s * bs_b_slot_bytes; empty otherwise."""
        return self.smem_bs_a + self.num_stages * self.bs_a_slot_bytes

    @property
    def smem_full(self) -> int:
        return self.smem_bs_b + self.num_stages * self.bs_b_slot_bytes

    @property
    def smem_empty(self) -> int:
        return self.smem_full + self.num_stages * MBARRIER_BYTES

    @property
    def smem_src_full(self) -> int:
        """The source tile's barriers (with a source): full, then empty, after the ring's."""
        return self.smem_empty + self.num_stages * MBARRIER_BYTES

    @property
    def smem_groups(self) -> int:
        """The grouped kernel's tables, after every barrier: group_ends (G + 1 u32: a leading 0, then each group's
        row end) at smem_groups, then group_units (G + 1 u32: a leading 0, then the units of groups 0..g)."""
        return self.smem_src_full + (2 * MBARRIER_BYTES if self.has_source else 0)

    @property
    def group_table_entries(self) -> int:
        """Entries of each table: a leading 0, then one per group the kernel can take."""
        return (self.group_capacity or MAX_GROUPS) + 1

    @property
    def stream_hint(self) -> bool:
        """B's loads for a one-row group's unit carry L2::evict_first (GemmConfig.group_stream_hint; None: on for
        the contiguous and masked forms, whose groups own rows of A and a whole B each)."""
        return self.grouped in ("contiguous", "masked") and self.group_stream_hint is not False

    @property
    def store_hint(self) -> bool:
        """C's TMA stores carry L2::evict_first (GemmConfig.group_store_hint; None: on for the k form, whose G
        outputs of M x N are written once each and outweigh its operands many times over)."""
        if self.grouped is None:
            return False
        return self.group_store_hint if self.group_store_hint is not None else self.grouped == "k"

    @property
    def group_sorted(self) -> bool:
        """The k form walks its groups longest k-loop first (GemmConfig.group_sort; None: on where the tables hold
        at most grouped_walk.SORT_DEFAULT_MAX_GROUPS groups)."""
        if self.grouped != "k" or self.group_sort is False:
            return False
        return bool(self.group_sort) or self.group_table_entries - 1 <= SORT_DEFAULT_MAX_GROUPS

    @property
    def group_table_bytes(self) -> int:
        """Both tables of the grouped kernel (0 for the dense one), rounded up to 16 bytes."""
        return -(-2 * 4 * self.group_table_entries // 16) * 16 if self.grouped else 0

    @property
    def smem_group_units(self) -> int:
        return self.smem_groups + 4 * self.group_table_entries

    @property
    def smem_bytes(self) -> int:
        return self.smem_groups + self.group_table_bytes

    # --- registers -------------------------------------------------------------------------------------
    @property
    def threads(self) -> int:
        return 3 * WARPGROUP_THREADS  # producer + two consumers

    @property
    def register_split(self) -> tuple[int, int]:
        """(producer, consumer) registers per thread after setmaxnreg (CUTLASS's pingpong rule)."""
        return (24, 240) if self.acc_registers >= 208 else (40, 232)

    @property
    def entry_registers(self) -> int:
        """What ptxas gives every thread at entry with .maxntid 384 and 1 CTA/SM: 65536/384 rounded down to 8."""
        return REGISTERS_PER_SM // self.threads // 8 * 8

    # --- wgmma descriptors -----------------------------------------------------------------------------
    def descriptor_consts(self, major: str) -> dict:
        """Constant parts of a 128B-swizzled GMMA shared-memory descriptor for one operand tile.

        K-major tile: rows of one 128-byte K line each; SBO = 8 rows x 128 B; LBO unused (1).
          k16 step: +32 B. m64 half h: +h*64*128 B.
        MN-major tile: panels of 64 MN-elements (128 B) x block_k rows of K, one TMA box each;
          SBO = 8 K-rows x 128 B (next 8 K), LBO = one panel (next 64 MN-elements).
          k16 step: +16 rows x 128 B. m64 half h: +h panels.
        """
        line = SWIZZLE_BYTES
        if major == "k":
            lbo, sbo = 16, 8 * line
            k_step, half_step = WGMMA_K_BYTES, WGMMA_M * line
        else:
            panel = self.block_k * line
            lbo, sbo = panel, 8 * line
            k_step, half_step = (WGMMA_K_BYTES // self.in_itemsize) * line, panel
        layout_128b = 1
        hi = (layout_128b << 30) | (sbo >> 4)       # bits 62-63 layout, bits 32-45 SBO
        lo_const = (lbo >> 4) << 16                  # bits 16-29 LBO; bits 0-13 take (address >> 4)
        return {"hi": hi, "lo": lo_const, "k_step": k_step >> 4, "half_step": half_step >> 4}
