"""The rules of a grouped GEMM's arguments (issue 25; docs/design/grouped-gemm-issue25.md): which of the three forms
the shapes make, each checked here and only here, before anything reaches the GPU.

    contiguous   a (total_M, K), b (G, K, N), offs (G,) cumulative row ends      -> (total_M, N)
    masked       a (G, M_max, K), b (G, K, N), masked_m (G,) rows per group     -> (G, M_max, N)
    k-grouped    a (M, total_K), b (total_K, N), offs (G,) cumulative K ends    -> (G, M, N)

The counts (offs or masked_m) are int32 vectors the kernel reads on the device: the plan never depends on their
values. Counts given as host arrays are checked here as well (they are about to be uploaded anyway); device ones
cannot be without a synchronization, and the kernel clamps each group's range instead."""
from __future__ import annotations

import dataclasses

import numpy as np

from ..errors import ConfigError
from .checks import b_dtype_of, check_dtypes, check_out_dtype, dtype_name
from .operands import check_extents
from ..kernel import grouped_walk
from ..kernel.config import default_out_dtype

from ..kernel.hardware import MAX_GROUPS

FORMS = ("contiguous", "masked", "k")


@dataclasses.dataclass(frozen=True)
class GroupedProblem:
    """What the shapes say: the form, G, the sizes (m: total_M, M_max or M; k: K, or total_K for the k-grouped
    form), the dtypes and the output's shape."""

    form: str
    groups: int
    m: int
    n: int
    k: int
    in_dtype: str
    b_dtype: str | None
    out_dtype: str
    out_shape: tuple[int, ...]

    @property
    def counts_name(self) -> str:
        return "masked_m" if self.form == "masked" else "offs"

    def describe(self) -> str:
        sizes = {"contiguous": f"total_M {self.m}, N {self.n}, K {self.k}",
                 "masked": f"M_max {self.m}, N {self.n}, K {self.k}",
                 "k": f"M {self.m}, N {self.n}, total_K {self.k}"}[self.form]
        return f"{self.form} grouped GEMM, {self.groups} groups, {sizes}, {self.in_dtype} -> {self.out_dtype}"


def _shape(x) -> tuple[int, ...]:
    return tuple(int(d) for d in x.shape)


def _form(a, b, offs, masked_m) -> str:
    if offs is None and masked_m is None:
        raise ConfigError("offs, masked_m: a grouped GEMM needs the group sizes: offs (cumulative row ends, with a "
                          "2-D a and a 3-D b; cumulative K ends, with a 2-D a and a 2-D b) or masked_m (rows per "
                          "group, with a 3-D a and a 3-D b)")
    if offs is not None and masked_m is not None:
        raise ConfigError("offs, masked_m: give one: offs for the contiguous and k-grouped forms, masked_m for the "
                          "masked one")
    ra, rb = len(a.shape), len(b.shape)
    if masked_m is not None:
        if (ra, rb) != (3, 3):
            raise ConfigError(f"a, b: with masked_m, a is (G, M_max, K) and b (G, K, N); got a {ra}-D a and a "
                              f"{rb}-D b")
        return "masked"
    if (ra, rb) == (2, 3):
        return "contiguous"
    if (ra, rb) == (2, 2):
        return "k"
    raise ConfigError(f"a, b: with offs, a is 2-D and b is 3-D (contiguous: (total_M, K) and (G, K, N)) or both are "
                      f"2-D (k-grouped: (M, total_K) and (total_K, N)); got a {ra}-D a and a {rb}-D b")


def _counts(name: str, counts, groups: int | None) -> int:
    """The number of groups the counts vector holds (checked: an array, 1-D int32, one entry per group when b says
    how many, 1..MAX_GROUPS entries)."""
    if not (hasattr(counts, "shape") and hasattr(counts, "dtype")):   # a list or a number: not read as an array
        raise ConfigError(f"{name}: must be a 1-D int32 array (numpy on the host, or a device array), got "
                          f"{type(counts).__name__}")
    shape = _shape(counts)
    check_extents(name, shape)
    if len(shape) != 1:
        raise ConfigError(f"{name}: must be a 1-D vector, one entry per group; got shape {shape}")
    if dtype_name(counts.dtype) != "int32":
        raise ConfigError(f"{name}: must be int32 (the kernel reads it as such), got {dtype_name(counts.dtype)}")
    if groups is not None and shape[0] != groups:
        raise ConfigError(f"{name}: one entry per group: b has {groups} groups, {name} has {shape[0]} entries")
    if not 1 <= shape[0] <= MAX_GROUPS:
        raise ConfigError(f"{name}: 1 to {MAX_GROUPS} groups, got {shape[0]}")
    return shape[0]


def check_host_counts(problem: GroupedProblem, counts: np.ndarray) -> None:
    """The values of counts given on the host: offs non-decreasing from 0 to at most the total (total_M, or
    total_K), masked_m within 0..M_max."""
    v = np.asarray(counts).astype(np.int64)
    if problem.form == "masked":
        bad = np.flatnonzero((v < 0) | (v > problem.m))
        if bad.size:
            raise ConfigError(f"masked_m: each entry must lie in 0..M_max ({problem.m}); masked_m[{bad[0]}] is "
                              f"{v[bad[0]]}")
        return
    total = problem.m if problem.form == "contiguous" else problem.k
    what = "total_M" if problem.form == "contiguous" else "total_K"
    if v[0] < 0:
        raise ConfigError(f"offs: cumulative ends start at 0 or more; offs[0] is {v[0]}")
    drops = np.flatnonzero(np.diff(v) < 0)
    if drops.size:
        i = drops[0] + 1
        raise ConfigError(f"offs: cumulative ends never decrease; offs[{i}] = {v[i]} < offs[{i - 1}] = {v[i - 1]}")
    if v[-1] > total:
        raise ConfigError(f"offs: the last end ({v[-1]}) is past {what} ({total})")


def parse(a, b, *, offs=None, masked_m=None, out=None, out_dtype=None) -> GroupedProblem:
    """The grouped problem of these arguments (anything with shape and dtype: numpy or device arrays, or stand-ins),
    every rule checked; ConfigError names the argument and the rule. Host counts (numpy arrays) are also checked by
    value (check_host_counts)."""
    in_dtype = check_dtypes(a, b)
    sa, sb = _shape(a), _shape(b)
    check_extents("a", sa)   # before any size derived from them is blamed on the counts or on out
    check_extents("b", sb)
    form = _form(a, b, offs, masked_m)
    if form == "masked":
        if sa[0] != sb[0]:   # before the counts: a masked_m that matches one of them is not the one at fault
            raise ConfigError(f"a, b: one matrix per group in each: a has {sa[0]}, b has {sb[0]}")
        groups = _counts("masked_m", masked_m, sb[0])
        if sa[2] != sb[1]:
            raise ConfigError(f"a, b: K differs: a (G, M_max, K) has K = {sa[2]}, b (G, K, N) has K = {sb[1]}")
        m, n, k, out_shape = sa[1], sb[2], sa[2], (sa[0], sa[1], sb[2])
    elif form == "contiguous":
        groups = _counts("offs", offs, sb[0])
        if sa[1] != sb[1]:
            raise ConfigError(f"a, b: K differs: a (total_M, K) has K = {sa[1]}, b (G, K, N) has K = {sb[1]}")
        m, n, k, out_shape = sa[0], sb[2], sa[1], (sa[0], sb[2])
    else:
        groups = _counts("offs", offs, None)
        if sa[1] != sb[0]:
            raise ConfigError(f"a, b: total_K differs: a (M, total_K) has {sa[1]}, b (total_K, N) has {sb[0]}")
        m, n, k, out_shape = sa[0], sb[1], sa[1], (groups, sa[0], sb[1])
    if out is not None:
        check_extents("out", _shape(out))
        od = check_out_dtype(out.dtype, "out")
        if out_dtype is not None and check_out_dtype(out_dtype) != od:
            raise ConfigError(f"out_dtype: {dtype_name(out_dtype)} differs from out's dtype {od}; give one of them")
        if _shape(out) != out_shape:
            raise ConfigError(f"out: the {form} form's result is {out_shape}, out is {_shape(out)}")
    else:
        od = check_out_dtype(out_dtype) if out_dtype is not None else default_out_dtype(in_dtype)
    problem = GroupedProblem(form, groups, m, n, k, in_dtype, b_dtype_of(a, b), od, out_shape)
    counts = masked_m if form == "masked" else offs
    if isinstance(counts, np.ndarray):
        check_host_counts(problem, counts)
    return problem


def group_ranges(problem: GroupedProblem, counts: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) of each group along its grouped dimension (rows: contiguous and masked, where a masked group
    starts at 0 of its own matrix; K: k-grouped), clamped as the kernel clamps device counts
    (ptxgemm.kernel.grouped_walk.ranges)."""
    total = problem.k if problem.form == "k" else problem.m
    return grouped_walk.ranges(problem.form, np.asarray(counts).tolist(), total)


def reference(problem: GroupedProblem, a: np.ndarray, b: np.ndarray, counts: np.ndarray,
              out: np.ndarray | None = None) -> np.ndarray:
    """The grouped product in float64, as the kernel must compute it: group g's rows (or K range) times its own b.
    Rows outside every group (contiguous: past the last end; masked: past masked_m[g]) keep `out`'s values (NaN when
    no `out` is given): the kernel never writes them."""
    a64, b64 = np.asarray(a).astype(np.float64), np.asarray(b).astype(np.float64)
    res = np.full(problem.out_shape, np.nan) if out is None else np.asarray(out).astype(np.float64).copy()
    for g, (s, e) in enumerate(group_ranges(problem, counts)):
        if problem.form == "contiguous":
            res[s:e] = a64[s:e] @ b64[g]
        elif problem.form == "masked":
            res[g, :e] = a64[g, :e] @ b64[g]
        else:
            res[g] = a64[:, s:e] @ b64[s:e]
    return res
