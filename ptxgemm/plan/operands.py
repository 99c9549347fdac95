"""numpy's matmul on strided device memory: what the kernel reads and writes in place, and what is staged.

The kernel multiplies a batch of problems C[l] = A[l]·B[l] through rank-3 TMA maps (innermost first: the contiguous
axis, the other matrix axis, the batch). A map needs a unit-stride axis, a positive line stride that is a multiple of
16 bytes, a batch stride likewise, and a 16-byte aligned base. `plan_matmul` takes any two operands numpy's `a @ b`
takes (N-D with batch broadcasting, 1-D vectors, transposed, non-contiguous or negative-stride views, empty sizes)
and an optional output, and decides, without touching the GPU:

- the problem: batch shape, M, N, K, and numpy's result shape;
- for each of A, B, C a `View` (count, rows, cols, byte strides) and either a `Placement` (read or written in
  place) or a staging buffer: an operand TMA cannot read is copied once into a dense buffer whose line stride is
  rounded up to 16 bytes (the padding is never read: the map's extent stops at the true size, and TMA fills reads
  past it with zeros), and an output it cannot write is produced in such a buffer and copied out;
- two rewrites that keep every operand in place more often: C^T = B^T·A^T when the output is column-major (a
  GEMV's column output included), and folding a batch whose B is shared into the M dimension, one large problem
  instead of L small ones ((L, M, K) @ (K, N) when A and C are stacked row blocks).

Pure arithmetic on shapes and strides, so tests check every decision on the CPU (tests/test_operands.py runs the plan
on host memory against numpy for a thousand random cases).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from ..errors import ConfigError
from ..kernel.hardware import TMA_ALIGN


def round_up(x: int, to: int) -> int:
    return -(-x // to) * to


@dataclasses.dataclass(frozen=True)
class View:
    """`count` matrices of rows x cols elements at `ptr`, byte strides (batch, row, col). count 1 with a batch of
    problems means one matrix shared by all (numpy's broadcasting); the batch stride is then irrelevant."""

    ptr: int
    count: int
    rows: int
    cols: int
    strides: tuple[int, int, int]
    itemsize: int

    def transposed(self) -> "View":
        sb, sr, sc = self.strides
        return View(self.ptr, self.count, self.cols, self.rows, (sb, sc, sr), self.itemsize)


@dataclasses.dataclass(frozen=True)
class Placement:
    """How a TMA map covers a View in place: `inner` is the contiguous axis ("rows" or "cols"), `lead` the byte
    stride of the other axis, `batch` the byte stride between matrices (legal filler when count is 1)."""

    inner: str
    lead: int
    batch: int

    def map_dims(self, view: View) -> tuple[int, int, int]:
        """The map's extents, innermost first: contiguous axis, other axis, batch."""
        return (view.cols, view.rows, view.count) if self.inner == "cols" else (view.rows, view.cols, view.count)


def _is_unit(stride: int, extent: int, itemsize: int) -> bool:
    return stride == itemsize or extent == 1  # a dimension of extent 1 is never stepped: any stride will do


def placement(view: View, inners: tuple[str, ...]) -> Placement | None:
    """The first of `inners` ("cols", "rows") along which TMA can read or write `view` in place, or None."""
    if view.ptr == 0 or view.ptr % TMA_ALIGN:
        return None
    sb, sr, sc = view.strides
    for inner in inners:
        (ie, istride), (oe, ostride) = (((view.cols, sc), (view.rows, sr)) if inner == "cols"
                                        else ((view.rows, sr), (view.cols, sc)))
        if not _is_unit(istride, ie, view.itemsize):
            continue
        line = ie * view.itemsize
        lead = ostride if oe > 1 else round_up(line, TMA_ALIGN)  # never stepped: the smallest legal stride
        if lead <= 0 or lead % TMA_ALIGN or lead < line:
            continue
        plane = lead * oe
        batch = sb if view.count > 1 else plane
        if batch <= 0 or batch % TMA_ALIGN or batch < plane:
            continue
        return Placement(inner, lead, batch)
    return None


def stores_whole_chunks(view: View, place: Placement) -> bool:
    """Whether an output written in place through `place` ends every line on a 16-byte chunk. TMA's store writes a
    line's last chunk whole: on the H200 the bytes past a line's end up to the next 16-byte boundary were written
    (the grouped k form's C, issue 48, and the dense fuzzer's pitched outs, issue 46: docs/perf-notes.md). Inside a
    pitched array those bytes are someone else's elements, past the last line they are past the array, so an output
    whose lines are not whole chunks is staged: the staging buffer's line padding takes them."""
    extent = view.cols if place.inner == "cols" else view.rows
    return (extent * view.itemsize) % TMA_ALIGN == 0


def output_placement(view: View, inners: tuple[str, ...]) -> Placement | None:
    """`placement` for a View the kernel writes: TMA's rules and whole chunks (`stores_whole_chunks`)."""
    place = placement(view, inners)
    return place if place is not None and stores_whole_chunks(view, place) else None


@dataclasses.dataclass(frozen=True)
class Staging:
    """A dense buffer for a View TMA cannot use in place: `count` x `outer` lines of `lead` bytes, `inner` the
    contiguous axis (chosen as the source's own contiguous axis, so the copy reads and writes lines)."""

    inner: str
    lead: int
    outer: int
    count: int

    @property
    def nbytes(self) -> int:
        return self.count * self.outer * self.lead

    def placement(self) -> Placement:
        return Placement(self.inner, self.lead, self.lead * self.outer)

    def view(self, ptr: int, like: View) -> View:
        """The staged copy of `like` at `ptr`."""
        item = like.itemsize
        strides = (self.lead * self.outer, self.lead, item) if self.inner == "cols" else \
            (self.lead * self.outer, item, self.lead)
        return View(ptr, self.count, like.rows, like.cols, strides, item)


def _lines(view: View, inner: str) -> tuple[int, int]:
    """(lead bytes, lines) of a dense buffer holding `view` with `inner` contiguous: lines padded to 16 bytes."""
    ie, oe = (view.cols, view.rows) if inner == "cols" else (view.rows, view.cols)
    return round_up(ie * view.itemsize, TMA_ALIGN), oe


def staging_for(view: View, count: int, prefer: str) -> Staging:
    """The buffer a View is staged into: its own contiguous axis inner when it has one, else `prefer`."""
    sb, sr, sc = view.strides
    inner = prefer
    if abs(sc) == view.itemsize and view.cols > 1:
        inner = "cols"
    elif abs(sr) == view.itemsize and view.rows > 1:
        inner = "rows"
    return Staging(inner, *_lines(view, inner), count)


@dataclasses.dataclass(frozen=True)
class Copy:
    """One strided copy of `shape` (batch, rows, cols) elements between two byte-strided layouts."""

    dst_ptr: int
    dst_strides: tuple[int, int, int]
    src_ptr: int
    src_strides: tuple[int, int, int]
    shape: tuple[int, int, int]
    itemsize: int

    def normalized(self) -> "Copy":
        """The same element pairs with every destination stride positive (relayout's rule): an axis the
        destination walks backwards is walked forwards from its last element, in both layouts."""
        dp, sp, ds, ss = self.dst_ptr, self.src_ptr, list(self.dst_strides), list(self.src_strides)
        for i, e in enumerate(self.shape):
            if ds[i] < 0 and e > 1:
                dp += (e - 1) * ds[i]
                sp += (e - 1) * ss[i]
                ds[i], ss[i] = -ds[i], -ss[i]
            elif e == 1:
                ds[i] = abs(ds[i])
        return Copy(dp, tuple(ds), sp, tuple(ss), self.shape, self.itemsize)


def collapse_batch(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[int, int] | None:
    """(count, stride) of a batch walked as one index: (1, 0) when every problem reads the same matrix, (L, s) when
    the batch axes are one evenly strided run; None when they are not (a partly broadcast operand, or axes that do
    not nest), which staging resolves."""
    axes = [(e, s) for e, s in zip(shape, strides) if e != 1]
    if not axes or all(s == 0 for _, s in axes):
        return (1, 0)
    if any(s == 0 for _, s in axes):
        return None
    for (_, outer), (e, inner) in zip(axes, axes[1:]):
        if outer != inner * e:
            return None
    return (math.prod(e for e, _ in axes), axes[-1][1])


@dataclasses.dataclass(frozen=True)
class Operand:
    """One of A, B, C as the kernel sees it: `view` and `place` (its TMA map). A staged operand also keeps its
    `source` (the caller's memory, walked problem by problem: `walk` lists evenly strided runs of problems as
    (byte offset, byte stride, count), or None for the source's own batch stride) and the `staging` buffer it is
    copied into (inputs, before the GEMM) or out of (the output, after it); its `view` points at address 0 until
    `bind` gives it the buffer's."""

    name: str
    view: View
    place: Placement
    staging: Staging | None = None
    source: View | None = None
    walk: tuple[tuple[int, int, int], ...] | None = None

    @property
    def staged(self) -> bool:
        return self.staging is not None


@dataclasses.dataclass(frozen=True)
class MatmulPlan:
    """Everything the launch needs, in the kernel's terms (after any swap and fold)."""

    out_shape: tuple[int, ...]    # numpy's result shape
    batch_shape: tuple[int, ...]
    m: int
    n: int
    k: int
    batches: int                  # problems in the launch (1 after a fold)
    a: Operand | None = None      # None when there is nothing to multiply (empty output, or K = 0)
    b: Operand | None = None
    c: Operand | None = None
    s: Operand | None = None      # the fused epilogue's source matrix S (read like C: rows of the kernel's tile)
    swapped: bool = False         # computing C^T = B^T A^T
    folded: bool = False          # the batch folded into M
    fill: tuple[Copy, ...] = ()   # K = 0: zeros written over the output (copies from a zero source)
    zero_k: bool = False          # K = 0 run as K = 1 on zero operands (the fused epilogue adds c or a bias)

    @property
    def operands(self) -> tuple[Operand, ...]:
        return tuple(op for op in (self.a, self.b, self.c, self.s) if op is not None)

    def describe(self) -> str:
        if self.a is None:
            return f"{self.out_shape}: " + ("zeros (K = 0)" if self.fill else "empty, nothing to compute")
        parts = [f"{self.batches} x {self.m}x{self.n}x{self.k}"]
        parts += [f"{op.name.upper()} {'staged' if op.staged else 'in place'}" for op in self.operands]
        if self.swapped:
            parts.append("computed as C^T = B^T A^T")
        if self.folded:
            parts.append("batch folded into M")
        if self.zero_k:
            parts.append("K = 0 run on zero operands of K = 1")
        return ", ".join(parts)


def _operand_strides(shape, strides, batch_shape, vector: str | None):
    """(batch strides over `batch_shape`, rows, cols, row stride, col stride) of a matmul operand; a 1-D operand is
    a row (A, `vector` "row") or a column (B, "col") of one matrix."""
    if vector == "row":
        return (0,) * len(batch_shape), 1, shape[0], 0, strides[0]
    if vector == "col":
        return (0,) * len(batch_shape), shape[0], 1, strides[0], 0
    lead = len(batch_shape) - (len(shape) - 2)
    bstrides = []
    for i in range(len(batch_shape)):
        j = i - lead
        # broadcast (an axis the operand lacks, or of extent 1): every problem reads the same matrix along it
        bstrides.append(0 if j < 0 or shape[j] == 1 else strides[j])
    return tuple(bstrides), shape[-2], shape[-1], strides[-2], strides[-1]


def _batch_walk(batch_shape, bstrides) -> tuple[tuple[int, int, int], ...]:
    """The byte offsets of the matrices in problem order, as evenly strided runs (offset, stride, count)."""
    offsets = [sum(i * s for i, s in zip(idx, bstrides)) for idx in np.ndindex(*batch_shape)]
    runs, i = [], 0
    while i < len(offsets):
        step = offsets[i + 1] - offsets[i] if i + 1 < len(offsets) else 0
        j = i + 1
        while j < len(offsets) and offsets[j] - offsets[j - 1] == step:
            j += 1
        runs.append((offsets[i], step, j - i))
        i = j
    return tuple(runs)


def _view(ptr, itemsize, batch_shape, bstrides, rows, cols, sr, sc):
    """(View, walk): the collapsed batch when it collapses (walk None); else every problem, with the walk."""
    collapsed = collapse_batch(batch_shape, bstrides)
    if collapsed is not None:
        count, sb = collapsed
        return View(ptr, count, rows, cols, (sb, sr, sc), itemsize), None
    return View(ptr, math.prod(batch_shape), rows, cols, (0, sr, sc), itemsize), _batch_walk(batch_shape, bstrides)


def operand(name: str, view: View, walk, inners: tuple[str, ...], usable=None, written: bool = False) -> Operand:
    """In place when TMA can use the View along one of `inners` (preferred first), with whole-chunk lines if the
    kernel writes it (`written`: output_placement), and the kernel can use that placement (`usable(place)`, default:
    any: the grouped kernel's rules add to TMA's, ptxgemm.plan.grouped_layout), else staged."""
    place = None if walk is not None else output_placement(view, inners) if written else placement(view, inners)
    if place is not None and (usable is None or usable(place)):
        return Operand(name, view, place)
    # a buffer in the source's own major order when the kernel can use that order (the copy then moves whole
    # lines); the output has one order only: the kernel stores rows
    staging = staging_for(view, view.count, inners[0]) if len(inners) > 1 else \
        Staging(inners[0], *_lines(view, inners[0]), view.count)
    return Operand(name, staging.view(0, view), staging.placement(), staging, view, walk)


def check_extents(name: str, shape) -> None:
    """A device array's header may claim any shape (a view, a foreign exporter): a negative extent is refused here,
    naming the array, before any size derived from it (M, K, the result's shape) is blamed on another argument."""
    if any(int(e) < 0 for e in shape):
        raise ConfigError(f"{name}: every extent must be >= 0, got shape {tuple(int(e) for e in shape)}")


def check_distinct(name: str, shape, strides, itemsize: int | None = None) -> None:
    """An output must hold each of its elements once: a zero stride along an axis of extent > 1 is refused, naming
    the array (the kernel, or the copy out of a staging buffer, would write several results to one element). With
    `itemsize`, any overlap too, by the copy kernel's rule for a destination (ptxgemm.runtime.relayout, which a
    staged output is): ordered by stride (negative ones walked forwards), each axis' stride at least the span of the
    axes below it."""
    shape, strides = tuple(int(e) for e in shape), tuple(int(s) for s in strides)
    for e, s in zip(shape, strides):
        if s == 0 and e > 1:
            raise ConfigError(f"{name}: shape {shape} with byte strides {strides} has a zero stride: it would "
                              f"write several results to one element; pass an output that holds each element once")
    if itemsize is None or 0 in shape:
        return
    span = itemsize
    for e, s in sorted(((e, abs(s)) for e, s in zip(shape, strides) if e > 1), key=lambda d: d[1]):
        if s < span:
            raise ConfigError(f"{name}: shape {shape} with byte strides {strides} ({itemsize}-byte elements) "
                              f"overlaps itself: ordered by stride, each axis' stride must be at least the span of "
                              f"the axes below it; pass an output that holds each element once")
        span = s * (e - 1) + span


def plan_matmul(a_shape, a_strides, a_ptr: int, b_shape, b_strides, b_ptr: int, in_itemsize: int,
                out_itemsize: int, out_shape=None, out_strides=None, out_ptr: int = 0,
                transposed_store: bool = False, *, k_major: bool = False, indexed: tuple[bool, bool] = (False, False),
                swap: bool = True,
                zero_k_kernel: bool = False, source=None) -> MatmulPlan:
    """The launch plan of numpy's `a @ b` on strided device memory (byte strides). Without an output (out_shape
    None) only the problem is returned (a is None): the caller allocates a C-order output of `out_shape` and asks
    again with it. `transposed_store`: the kernel stores columns of its C (GemmConfig.c_major "m"), so a row-major
    output is computed as C^T = B^T A^T (swap-AB) and a column-major one directly.
    `k_major`: the kernel reads both operands only K-major (fp8): an operand that is not is staged K-major (the
    copy transposes it). `indexed`: whether the epilogue indexes (rows, columns) of the caller's result by
    position (a row or column vector): a batch folds into M only when nothing indexes the kernel's rows, which are
    the caller's columns in a swapped problem. `swap`:
    whether C^T = B^T A^T may be computed (not under blockwise scales: an output it would suit is staged instead).
    `zero_k_kernel`: with K = 0, run the kernel on zero operands of K = 1 (staged from nothing, so the fused
    epilogue still adds c and the bias) rather than filling zeros.
    `source`: (shape, byte strides, ptr, itemsize) of the fused epilogue's S, numpy's result shape, read as the
    output is written (swapped and folded with it; staged when TMA cannot read it in place, and staged once per
    problem when one S is broadcast over the batch)."""
    a_shape, b_shape = tuple(int(s) for s in a_shape), tuple(int(s) for s in b_shape)
    for name, shape in (("a", a_shape), ("b", b_shape)):
        if len(shape) == 0:
            raise ConfigError(f"{name}: matmul takes arrays of at least one dimension, got a 0-d array (numpy: "
                              f"'matmul: Input operand does not have enough dimensions'); use * for scalars")
        check_extents(name, shape)
    a_vec, b_vec = ("row" if len(a_shape) == 1 else None), ("col" if len(b_shape) == 1 else None)
    k = a_shape[-1]
    kb = b_shape[0] if b_vec else b_shape[-2]
    if k != kb:
        raise ConfigError(f"a @ b: a is {a_shape} and b is {b_shape}; a's last axis (K = {k}) must equal b's "
                          f"{'only' if b_vec else 'second-to-last'} axis ({kb})")
    try:
        batch_shape = tuple(np.broadcast_shapes(a_shape[:-2], b_shape[:-2]))
    except ValueError:
        raise ConfigError(f"a @ b: the batch axes of a {a_shape[:-2]} and b {b_shape[:-2]} do not broadcast "
                          f"(numpy's rule: compared from the right, equal or 1)") from None
    m = 1 if a_vec else a_shape[-2]
    n = 1 if b_vec else b_shape[-1]
    result = batch_shape + (() if a_vec else (m,)) + (() if b_vec else (n,))
    batches = math.prod(batch_shape)
    if out_shape is None:
        return MatmulPlan(result, batch_shape, m, n, k, batches)
    if tuple(out_shape) != result:
        raise ConfigError(f"out: shape must be {result} (numpy's a @ b for a {a_shape} and b {b_shape}), got "
                          f"{tuple(out_shape)}")
    if batches == 0 or m == 0 or n == 0:
        return MatmulPlan(result, batch_shape, m, n, k, batches)
    out_strides = tuple(int(s) for s in out_strides)
    check_distinct("out", result, out_strides)
    # the output as (batch..., M, N): a dropped vector axis has extent 1 (its stride is never used)
    o = list(out_strides)
    if a_vec:
        o.insert(len(batch_shape), 0)
    if b_vec:
        o.append(0)
    c_view, c_walk = _view(out_ptr, out_itemsize, batch_shape, tuple(o[:-2]), m, n, o[-2], o[-1])
    s_view = s_walk = None
    if source is not None:
        s_shape, s_strides, s_ptr, s_item = source
        if tuple(s_shape) != result:
            raise ConfigError(f"c: shape must be {result} (numpy's a @ b, which c is added to), got {tuple(s_shape)}")
        so = list(int(x) for x in s_strides)
        if a_vec:
            so.insert(len(batch_shape), 0)
        if b_vec:
            so.append(0)
        s_view, s_walk = _view(s_ptr, s_item, batch_shape, tuple(so[:-2]), m, n, so[-2], so[-1])
        if s_view.count == 1 and batches > 1:   # one S for every problem: the kernel reads S per problem
            s_view, s_walk = dataclasses.replace(s_view, count=batches), ((0, 0, batches),)
    if k == 0 and not zero_k_kernel:
        return MatmulPlan(result, batch_shape, m, n, k, batches, fill=tuple(_copies(c_view, c_walk, None)))

    zero_k = k == 0
    if zero_k:   # A (M x 1) and B (1 x N) of zeros, shared by every problem: staged from address 0 (a fill)
        k = 1
        a_view, a_walk = View(0, 1, m, k, (0, 0, 0), in_itemsize), None
        b_view, b_walk = View(0, 1, k, n, (0, 0, 0), in_itemsize), None
    else:
        ab, a_r, a_c, a_sr, a_sc = _operand_strides(a_shape, a_strides, batch_shape, a_vec)
        bb, b_r, b_c, b_sr, b_sc = _operand_strides(b_shape, b_strides, batch_shape, b_vec)
        a_view, a_walk = _view(a_ptr, in_itemsize, batch_shape, ab, a_r, a_c, a_sr, a_sc)
        b_view, b_walk = _view(b_ptr, in_itemsize, batch_shape, bb, b_r, b_c, b_sr, b_sc)

    # The kernel stores rows of C (or, transposed_store, columns). An output it cannot store in that order but whose
    # transpose it can is computed as C^T = B^T A^T: swap, and every operand stays where it is (a GEMV's column
    # output becomes one row; with the transposed store, a row-major output is swap-AB)
    c_inner = "rows" if transposed_store else "cols"
    swapped = False
    if (swap and c_walk is None and output_placement(c_view, (c_inner,)) is None
            and output_placement(c_view.transposed(), (c_inner,))):
        a_view, b_view, c_view = b_view.transposed(), a_view.transposed(), c_view.transposed()
        a_walk, b_walk = b_walk, a_walk
        if s_view is not None:
            s_view = s_view.transposed()
        m, n = n, m
        swapped = True

    # K-major first for A: numpy's C order; N-major first for B. fp8 (k_major): K-major only, else staged K-major
    a = operand("a", a_view, a_walk, ("cols",) if k_major else ("cols", "rows"))
    b = operand("b", b_view, b_walk, ("rows",) if k_major else ("cols", "rows"))
    # the kernel writes rows (columns: transposed_store), each ending on a whole chunk
    c = operand("c", c_view, c_walk, (c_inner,), written=True)
    s = operand("s", s_view, s_walk, ("cols",)) if s_view is not None else None   # read as rows of the tile
    plan = MatmulPlan(result, batch_shape, m, n, k, batches, a, b, c, s, swapped=swapped, zero_k=zero_k)
    return plan if indexed[1 if swapped else 0] else _fold(plan)


def _fold(plan: MatmulPlan) -> MatmulPlan:
    """(L, M, K) @ (K, N) with one shared B as one (L·M, K) @ (K, N) problem, when A (K-major) and C are stacked row
    blocks: L·M rows at one line stride. Staged operands qualify by construction (dense buffers)."""
    a, b, c, s = plan.a, plan.b, plan.c, plan.s
    if plan.batches == 1 or b.view.count != 1 or a.view.count == 1:
        return plan
    stacked = [op for op in (a, c, s) if op is not None]
    if any(op.place.inner != "cols" or op.place.batch != op.place.lead * plan.m for op in stacked):
        return plan
    rows = plan.batches * plan.m

    def folded(op: Operand) -> Operand:
        v = op.view
        return dataclasses.replace(op, view=View(v.ptr, 1, rows, v.cols, (op.place.lead * rows, op.place.lead,
                                                                       v.itemsize), v.itemsize),
                                   place=Placement("cols", op.place.lead, op.place.lead * rows))

    return dataclasses.replace(plan, m=rows, batches=1, a=folded(a), c=folded(c),
                               s=folded(s) if s is not None else None, folded=True)


def _copies(view: View, walk, dense: View | None, into_view: bool = True) -> list[Copy]:
    """Copies between `view` (the caller's memory, problem by problem along `walk` or its own batch stride) and
    `dense` (a staged View of every problem, in problem order); `dense` None means zeros (a fill). `into_view`:
    into the caller's memory (copy-out, fill), else out of it (staging)."""
    runs = walk if walk is not None else ((0, view.strides[0], view.count),)
    copies, first = [], 0
    for offset, step, count in runs:
        v_ptr, v_strides = view.ptr + offset, (step, view.strides[1], view.strides[2])
        shape = (count, view.rows, view.cols)
        if dense is None:
            d_ptr, d_strides = 0, (0, 0, 0)
        else:
            d_ptr, d_strides = dense.ptr + first * dense.strides[0], dense.strides
        pair = (v_ptr, v_strides, d_ptr, d_strides) if into_view else (d_ptr, d_strides, v_ptr, v_strides)
        copies.append(Copy(*pair, shape, view.itemsize).normalized())
        first += count
    return copies


def staging_copies(source: View, dense: View, into_source: bool) -> list[Copy]:
    """The copies between the caller's `source` (its own batch stride) and its staged copy `dense`: out of the
    source (staging an input) or, `into_source`, back into it (an output's copy-out)."""
    return _copies(source, None, dense, into_view=into_source)


def bind(plan: MatmulPlan, buffers: dict[str, int]) -> tuple[MatmulPlan, list[Copy], list[Copy]]:
    """The plan with each staged operand pointing at its buffer (`buffers`: name -> device address of its
    Staging's bytes), and the copies in (before the GEMM) and out (after it)."""
    ops, ins, outs = {}, [], []
    for op in plan.operands:
        if not op.staged:
            ops[op.name] = op
            continue
        ptr = buffers[op.name]
        ops[op.name] = dataclasses.replace(op, view=dataclasses.replace(op.view, ptr=ptr))
        dense = op.staging.view(ptr, op.source)  # every problem of the source, unfolded
        if op.name == "c":
            outs += _copies(op.source, op.walk, dense, into_view=True)
        else:
            ins += _copies(op.source, op.walk, dense, into_view=False)
    return dataclasses.replace(plan, a=ops["a"], b=ops["b"], c=ops["c"], s=ops.get("s")), ins, outs
