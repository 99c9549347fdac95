"""The `grouped` shape set of issue 25: the MoE expert GEMMs the grouped benchmark (bench/grouped_bench.py) times, with their group counts
drawn reproducibly (a fixed seed per case), so every run and every peer sees the same groups.

- DeepGEMM's 10 grouped shapes with the TFLOP/s its README (2025-02, H800, fp8 blockwise) published: four
  contiguous (every group the same size, a multiple of 128 rows, as DeepGEMM requires) and six masked.
- Mixtral-8x7B prefill: 8 experts, top-2 routing of 16384 tokens (32768 routed rows), the up and down projections
  (N x K = 14336 x 4096 and 4096 x 14336); the rows per expert drawn from a multinomial with equal odds.
- DeepSeek-V3's routed experts: 256 experts, top-8 routing of 4096 tokens (32768 routed rows), N x K = 4096 x 7168
  (gate and up fused) and 7168 x 2048 (down); the expert popularity drawn from a Zipf law (exponent 1.1), so a few
  experts take thousands of rows and many take a handful or none.
- Decode: masked batches of 32 experts (one rank of a 256-expert model split 8 ways), at most 128 rows each, the
  counts uniform in 0..128, both DeepSeek-V3 projections.
- Weight gradients (the k-grouped form): the Mixtral and DeepSeek-V3 routings above as each expert's K, M x N the
  expert's weight.

Nothing here needs a GPU: tests/test_grouped_shapes.py holds the draws fixed."""
from __future__ import annotations

import dataclasses

import numpy as np

DEEPGEMM_SOURCE = ("DeepGEMM README (2025-02), 'Grouped GEMMs for MoE models': H800 SXM5, NVCC 12.8, fp8 blockwise, "
                   "bf16 output")


@dataclasses.dataclass(frozen=True)
class GroupedCase:
    """One benchmark row: the form, N, K, the rows (contiguous, masked) or K (k-grouped) of each group, and for a
    masked case the rows each group's matrix holds (M_max)."""

    name: str
    layout: str                  # "contiguous", "masked" or "k" (as ptxgemm.plan.grouped.FORMS)
    n: int
    k: int
    counts: tuple[int, ...]      # per group: rows (contiguous, masked) or K (k-grouped)
    m_max: int | None = None     # masked: the rows of each group's matrix
    published_tflops: float | None = None
    m: int | None = None         # k-grouped: the rows of every group's output (the weight's input features)

    @property
    def groups(self) -> int:
        return len(self.counts)

    @property
    def m_per_group(self) -> float:
        """Rows per group: the mean count, or M for the k-grouped form (whose counts are K)."""
        return float(self.m) if self.layout == "k" else sum(self.counts) / len(self.counts)

    @property
    def flops(self) -> float:
        """2 x rows x N x K summed over the groups (k-grouped: 2 x M x N x the groups' K)."""
        if self.layout == "k":
            return 2.0 * self.m * self.n * sum(self.counts)
        return 2.0 * sum(self.counts) * self.n * self.k

    def offs(self) -> np.ndarray:
        """The cumulative ends, int32 (contiguous and k-grouped)."""
        return np.cumsum(self.counts, dtype=np.int64).astype(np.int32)


def _deepgemm() -> list[GroupedCase]:
    cases = []
    for groups, m, n, k, tflops in ((4, 8192, 4096, 7168, 1297), (4, 8192, 7168, 2048, 1099),
                                    (8, 4096, 4096, 7168, 1288), (8, 4096, 7168, 2048, 1093)):
        cases.append(GroupedCase(f"deepgemm-contiguous-{groups}x{m}-{n}x{k}", "contiguous", n, k, (m,) * groups,
                                 published_tflops=tflops))
    for groups, m, n, k, tflops in ((1, 1024, 4096, 7168, 1233), (1, 1024, 7168, 2048, 925),
                                    (2, 512, 4096, 7168, 1040), (2, 512, 7168, 2048, 916),
                                    (4, 256, 4096, 7168, 932), (4, 256, 7168, 2048, 815)):
        cases.append(GroupedCase(f"deepgemm-masked-{groups}x{m}-{n}x{k}", "masked", n, k, (m,) * groups, m_max=m,
                                 published_tflops=tflops))
    return cases


def routed_counts(experts: int, rows: int, popularity: np.ndarray, seed: int) -> tuple[int, ...]:
    """Rows per expert when `rows` routed rows pick experts with the odds `popularity` (normalized here)."""
    p = np.asarray(popularity, dtype=np.float64)
    return tuple(int(c) for c in np.random.default_rng(seed).multinomial(rows, p / p.sum()))


def zipf_popularity(experts: int, exponent: float, seed: int) -> np.ndarray:
    """Zipf odds 1 / rank^exponent, the ranks shuffled over the experts (the popular ones are not the first)."""
    odds = 1.0 / np.arange(1, experts + 1) ** exponent
    return np.random.default_rng(seed).permutation(odds)


def _models() -> list[GroupedCase]:
    mixtral = routed_counts(8, 16384 * 2, np.ones(8), seed=2501)
    deepseek = routed_counts(256, 4096 * 8, zipf_popularity(256, 1.1, seed=2502), seed=2503)
    decode = tuple(int(c) for c in np.random.default_rng(2504).integers(0, 129, size=32))
    return [
        GroupedCase("mixtral-8x7b-prefill-up", "contiguous", 14336, 4096, mixtral),
        GroupedCase("mixtral-8x7b-prefill-down", "contiguous", 4096, 14336, mixtral),
        GroupedCase("deepseek-v3-experts-gate-up", "contiguous", 4096, 7168, deepseek),
        GroupedCase("deepseek-v3-experts-down", "contiguous", 7168, 2048, deepseek),
        GroupedCase("deepseek-v3-decode-gate-up", "masked", 4096, 7168, decode, m_max=128),
        GroupedCase("deepseek-v3-decode-down", "masked", 7168, 2048, decode, m_max=128),
        # the weight gradients of the same routings, dW_g = x_g^T dy_g: M x N is the weight, K each expert's tokens
        GroupedCase("mixtral-8x7b-wgrad-up", "k", 14336, 0, mixtral, m=4096),
        GroupedCase("deepseek-v3-wgrad-gate-up", "k", 4096, 0, deepseek, m=7168),
        GroupedCase("deepseek-v3-wgrad-down", "k", 7168, 0, deepseek, m=2048),
    ]


CASES = tuple(_deepgemm() + _models())
