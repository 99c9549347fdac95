"""A grouped call's operands as its kernel reads and writes them: each of A, B and C in place where TMA can use it
as the kernel wants it, else staged through a dense buffer of the plan's own, as the dense GEMM stages
(ptxgemm.plan.operands' View, Placement, Staging and Copy, reused here).

What the grouped kernel reads and writes (gemm_grouped.ptx.j2):
- contiguous and masked forms: A one 2-D (rows, K) matrix read K-major (a masked A's G matrices stacked: (G x M_max,
  K) at one row pitch); B one (K, N) matrix per group, read N-major or K-major (fp8 K-major only: wgmma reads 8-bit
  types only so); C one 2-D (rows, N) matrix, stacked likewise, stored by TMA and, where a tile runs past its
  group's end, in 16-byte chunks of whole rows by the threads (grouped_store.ptx.j2), so an in-place C's rows
  must be whole chunks (N x itemsize a multiple of 16 bytes), or a row's last chunk would write past N;
- k form: A (M, total_K) read M-major (the layout of the (total_K, M) activations it is the transpose of), B
  (total_K, N) read N-major, C (G, M, N) one matrix per group; all through TMA only. Its C too must be whole
  chunks to stay in place: measured, not derived (on the H200 an in-place C whose rows were not whole chunks had
  bytes past N written, in 6 of the 8 fuzz cases of that class).

TMA needs a unit-stride inner axis, line and batch strides that are positive multiples of 16 bytes and a 16-byte
aligned base (operands.placement). An operand that breaks any of these, or the rules above, is staged: a dense
buffer (allocated once per plan) with its lines padded to 16 bytes (the padding is never read: the maps stop at the
true sizes, and TMA fills past them with zeros) and its matrices stacked, in the source's own major order where the
kernel reads that order (B), else in the kernel's (a transposing copy: an fp8 B stored N-major, a row-major A of
the k form). Inputs are copied in on every launch (the caller may have changed them since the last one); C is
copied out after the kernel.

A staged C of the contiguous and masked forms is first loaded with the caller's out, on every launch: the counts
live on the device, so the host cannot know which rows the kernel writes, and the copy out writes every row back;
loaded first, a row outside every group goes back with its own bits (a bit copy: NaN payloads too), so its values
never change, as the kernel's own contract says. (Copying back only the rows the kernel wrote would need the
counts on the host, a synchronization the grouped GEMM exists to avoid.) The k form writes every element of C (an
empty group's matrix is zeros), so its staged C is copied out only. Pure: no GPU, tested on the CPU.
"""
from __future__ import annotations

import dataclasses

from . import operands
from .operands import Operand, View

#: each array's axes as a View's (batch, rows, cols), by form and role: the matrices the kernel reads and writes
AXES = {
    ("contiguous", "a"): ("rows", "cols"), ("masked", "a"): ("batch", "rows", "cols"), ("k", "a"): ("cols", "rows"),
    ("contiguous", "b"): ("batch", "rows", "cols"), ("masked", "b"): ("batch", "rows", "cols"), ("k", "b"): ("rows", "cols"),
    ("contiguous", "c"): ("rows", "cols"), ("masked", "c"): ("batch", "rows", "cols"), ("k", "c"): ("batch", "rows", "cols"),
}


@dataclasses.dataclass(frozen=True)
class GroupedLayout:
    """A, B and C (operands.Operand: the kernel's View and TMA placement, and for a staged one its Staging and the
    caller's View) of one grouped call; `c` None while the call's out is yet to be allocated."""

    form: str
    a: Operand
    b: Operand
    c: Operand | None = None

    @property
    def a_major(self) -> str:
        return "mn" if self.form == "k" else "k"

    @property
    def b_major(self) -> str:
        """N-major ("mn") when B's lines run along N (the View's columns), else K-major."""
        return "mn" if self.b.place.inner == "cols" else "k"

    @property
    def preload(self) -> bool:
        """Whether a staged C is loaded with the caller's out before the kernel (see the module's docstring)."""
        return self.c is not None and self.c.staged and self.form != "k"

    @property
    def operands(self) -> tuple[Operand, ...]:
        return tuple(op for op in (self.a, self.b, self.c) if op is not None)

    @property
    def staged(self) -> tuple[str, ...]:
        """The names of the staged operands ("a", "b", "c")."""
        return tuple(op.name for op in self.operands if op.staged)

    def describe(self) -> str:
        words = []
        for op in self.operands:
            major = {"a": self.a_major, "b": self.b_major, "c": "row"}[op.name]
            where = "staged" + (" (loaded first)" if op.name == "c" and self.preload else "") if op.staged else \
                "in place"
            words.append(f"{op.name.upper()} {where}, {major}-major" if op.name != "c" else f"C {where}")
        return ", ".join(words)


def view_of(x, form: str, role: str) -> View:
    """`x` (anything with shape, byte strides, dtype and ptr) as the View of its role ("a", "b", "c") in `form`."""
    dims = {"batch": (1, 0)}
    for axis, extent, stride in zip(AXES[(form, role)], x.shape, x.strides):
        dims[axis] = (int(extent), int(stride))
    (count, sb), (rows, sr), (cols, sc) = dims["batch"], dims["rows"], dims["cols"]
    return View(int(x.ptr), count, rows, cols, (sb, sr, sc), x.dtype.itemsize)


def _operand(name: str, view: View, inners: tuple[str, ...], stacked: bool = False,
             written: bool = False) -> Operand:
    """operands.operand with the grouped kernel's rule on a placement: its matrices stacked at one line pitch
    (`stacked`: read as one 2-D matrix); `written` (C) as operands.operand's; else staged (in the source's own major
    order where `inners` allows it)."""
    def usable(place) -> bool:
        return not (stacked and view.count > 1 and place.batch != place.lead * view.rows)
    return operands.operand(name, view, None, inners, usable, written)


def plan(form: str, a, b, out=None, *, b_fp8: bool = False) -> GroupedLayout:
    """What the kernel reads in place and what is staged, for the arrays of a checked grouped call (out None: A and
    B only). `b_fp8`: B is an 8-bit type, read K-major only. An out whose elements overlap (two results in one
    element) is refused (ConfigError naming it)."""
    rows_form = form != "k"
    la = _operand("a", view_of(a, form, "a"), ("cols",), stacked=rows_form)
    lb = _operand("b", view_of(b, form, "b"), ("rows",) if b_fp8 else ("cols", "rows") if rows_form else ("cols",))
    lc = None
    if out is not None:
        if 0 not in tuple(out.shape):   # an empty array's strides are never stepped
            operands.check_distinct("out", out.shape, out.strides, out.dtype.itemsize)
        # whole chunks in every form (operands.stores_whole_chunks): the row forms' row store writes them, and
        # the k form's TMA store does too
        lc = _operand("c", view_of(out, form, "c"), ("cols",), stacked=rows_form, written=True)
    return GroupedLayout(form, la, lb, lc)


def bind(layout: GroupedLayout, buffers: dict[str, int]) -> tuple[GroupedLayout, list, list]:
    """The layout with each staged operand at its buffer (`buffers`: name -> address of its Staging's bytes), and
    the copies in (before the kernel: the staged inputs, and the caller's out into a preloaded C) and out (after it:
    a staged C back into the caller's out)."""
    ops, ins, outs = {}, [], []
    for op in layout.operands:
        if not op.staged:
            continue
        dense = op.staging.view(buffers[op.name], op.source)
        ops[op.name] = dataclasses.replace(op, view=dense)
        if op.name != "c" or layout.preload:
            ins += operands.staging_copies(op.source, dense, into_source=False)
        if op.name == "c":
            outs += operands.staging_copies(op.source, dense, into_source=True)
    return dataclasses.replace(layout, **ops), ins, outs
