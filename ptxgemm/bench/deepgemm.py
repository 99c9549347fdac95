"""The `deepgemm` shape set: DeepGEMM's 18 dense fp8 GEMM shapes with the TFLOP/s its README published for them.

These figures are not measured here and not measured the way ptxgemm's are. What they are, as published:
DeepGEMM's README of February 2025 (github.com/deepseek-ai/DeepGEMM, "Normal GEMMs for dense models"), measured
on an H800 SXM5 (the H100's SMs, clocks and fp8 peak; less NVLink) with NVCC 12.8, blockwise fp8 (1x128 scales
per activation row, 128x128 per weight block, promotion to fp32 on the CUDA cores), bf16 output, A (M, K) and B
given as (N, K), both K-major. Its test harness of the time (`bench_kineto` in tests/test_core.py's helpers) took the
mean kernel time of 30 back-to-back launches from the CUDA profiler; as far as that code shows, it did not flush
the L2 between them (later versions flush it with an 8 GB memset), so a shape whose B fits in the 50 MB L2 (N x K
up to about 40M fp8 values) may have been measured warm. A later README reports up to 1550 TFLOP/s after further
work; the table below is the one with per-shape figures.

A row of `bench --set deepgemm` puts ptxgemm's own TFLOP/s (this GPU, the burst method) beside the published
figure: `vs_published` = ptxgemm TFLOP/s / published TFLOP/s. Only the peers run in the same process (cuBLAS
through torch) are side-by-side measurements; the published column is a fixed reference point."""
from __future__ import annotations

PUBLISHED_SOURCE = ("DeepGEMM README (2025-02), 'Normal GEMMs for dense models': H800 SXM5, NVCC 12.8, blockwise "
                    "fp8 (1x128 x 128x128), bf16 output; mean kernel time of 30 back-to-back launches (CUDA "
                    "profiler), apparently without an L2 flush")

#: (M, N, K) -> published TFLOP/s
PUBLISHED_TFLOPS = {
    (64, 2112, 7168): 206, (64, 24576, 1536): 289, (64, 32768, 512): 219, (64, 7168, 16384): 336,
    (64, 4096, 7168): 287, (64, 7168, 2048): 295,
    (128, 2112, 7168): 352, (128, 24576, 1536): 535, (128, 32768, 512): 358, (128, 7168, 16384): 645,
    (128, 4096, 7168): 533, (128, 7168, 2048): 510,
    (4096, 2112, 7168): 1058, (4096, 24576, 1536): 990, (4096, 32768, 512): 590, (4096, 7168, 16384): 1358,
    (4096, 4096, 7168): 1304, (4096, 7168, 2048): 1025,
}

SHAPES = tuple(PUBLISHED_TFLOPS)


def published(m: int, n: int, k: int) -> float | None:
    """DeepGEMM's published TFLOP/s for (m, n, k), or None for a shape outside its table."""
    return PUBLISHED_TFLOPS.get((m, n, k))
