"""Hopper's numbers (sm_90a: H100, H200): what one block may hold, what one instruction moves, and the fixed
shape of ptxgemm's CTA (a producer warpgroup and two consumers). kernel/layout.py derives every other number from
these and a config's fields."""
from __future__ import annotations

SMEM_PER_BLOCK_OPTIN = 232448      # bytes of dynamic shared memory one block may use (227 KB)
REGISTERS_PER_SM = 65536
WARPGROUP_THREADS = 128
SWIZZLE_BYTES = 128                # every operand and the epilogue use TMA's 128-byte swizzle
SWIZZLE_PERIOD = 1024              # 8 lines x 128 B: swizzled buffers start on this boundary
WGMMA_M = 64                       # rows of one wgmma instruction
WGMMA_K_BYTES = 32                 # one wgmma consumes 32 bytes of K: k16 of a 16-bit type, k32 of an 8-bit one
MBARRIER_BYTES = 8
TMA_ALIGN = 16                     # bytes: base address, line and batch strides of every TMA map, and where a load's
                                   # box starts in its innermost dimension (H200, run 80: a box of fp32 scales
                                   # starting at row 201 faulted with CUDA_ERROR_ILLEGAL_INSTRUCTION; at 200, 204 not)
TMA_SMEM_ALIGN = 128               # bytes: a TMA load's shared-memory destination
DESC_ADDRESS_MASK = 0x3FFFF        # a GMMA descriptor encodes bits 4..17 of the shared-memory address
MAX_STAGES = 16                    # the deepest load ring a config may ask for (its barriers' reservation)
WARP_LANES = 32
FULL_WARP_MASK = 0xFFFFFFFF        # shfl.sync's member mask: every lane of the warp
WARPS_PER_WARPGROUP = 4           # a stage is released by lane 0 of every consumer warp that read it
CONSUMERS = 2                      # consumer warpgroups per CTA (warpgroups 1 and 2; the producer is 0)
# Grouped GEMM: the kernel keeps two tables of G + 1 u32 in shared memory (each group's row end and its running unit
# count, after a leading 0), so G is bounded by the room they take (8 KB at this many groups, beside the stages);
# models of 2025 route to at most 384 experts.
MAX_GROUPS = 1024
