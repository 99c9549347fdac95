"""Plans made on symbolic addresses, bound to real ones per call: what lets a plan be keyed by shapes, not memory.

A plan depends on each array's shape, byte strides, dtype, device and *address class* (its address modulo
ADDRESS_CLASS, the strictest alignment any planning rule reads: TMA's 16-byte base, the copy kernel's widest element,
the epilogue's paired vector loads), never on the address itself. So a call is planned once on stand-ins whose
addresses are symbolic: argument i (in the caller's order, `roles`) sits at `(i + 1) << ROLE_SHIFT` plus its address
class. Every address the plan then computes -- a tensor map's base, a pointer argument of a kernel, a staging copy's
source -- is some argument's symbolic base plus an offset (a view into it, a batch's start, a negated stride's far
end), and `decode` recovers which argument and what offset. Binding a call writes each such slot as that argument's
real base (its address less its class, so 16-byte aligned) plus the offset (ptxgemm.runtime.patch does the writing).

Real device addresses lie far below 2^(ROLE_SHIFT - 1) (CUDA's virtual addresses are 49 bits wide on Hopper), so a
real address -- a plan's own staging buffer, the copy kernel's zero page -- never decodes as symbolic.
Pure: no GPU, so the CPU tests plan on symbolic addresses and on real ones and compare.
"""
from __future__ import annotations

import numbers

import numpy as np

from ..errors import ConfigError
from ..kernel.config import dtype_name
from ..kernel.hardware import TMA_ALIGN

ADDRESS_CLASS = TMA_ALIGN   # the strictest alignment a rule reads (runtime/patch rebases with the same constant)
ROLE_SHIFT = 52
_HALF = 1 << (ROLE_SHIFT - 1)
MAX_ROLES = 8
#: the highest real address a plan can be bound to (anything above would decode as symbolic)
MAX_REAL_ADDRESS = _HALF - 1


def address_class(ptr: int) -> int:
    """What a plan may depend on of an address: its remainder modulo ADDRESS_CLASS, or -1 for null (an empty
    array's)."""
    return -1 if ptr == 0 else ptr % ADDRESS_CLASS


def symbolic(role: int, ptr: int) -> int:
    """The stand-in address of argument `role` whose real address is `ptr`: 0 stays 0 (nothing to bind)."""
    if ptr == 0:
        return 0
    if not 0 <= role < MAX_ROLES:
        raise ValueError(f"role {role}: at most {MAX_ROLES} arguments are bound")
    return ((role + 1) << ROLE_SHIFT) + ptr % ADDRESS_CLASS


def decode(value: int) -> tuple[int, int] | None:
    """(role, delta) of an address a plan computed from symbolic arguments -- the real one is base(role) + delta --
    or None for a real address (a buffer of the plan's own) or 0."""
    if value < _HALF:
        return None
    role = ((value + _HALF) >> ROLE_SHIFT) - 1
    return role, value - ((role + 1) << ROLE_SHIFT)


def base(ptr: int) -> int:
    """An argument's real base for `decode`'s deltas: its address less its class (the class is in the delta)."""
    return ptr - ptr % ADDRESS_CLASS


def rebase(value: int, ptrs) -> int:
    """The real address of `value`, an address a plan computed from symbolic arguments, for a call whose arguments
    are at `ptrs` (by role); a real address stays as it is."""
    place = decode(value)
    return value if place is None else base(ptrs[place[0]]) + place[1]


def check_real(roles, ptrs) -> tuple:
    """`ptrs` (the call's addresses, by role), or a ConfigError naming the first one a plan cannot bind."""
    for name, ptr in zip(roles, ptrs):
        if not 0 <= ptr <= MAX_REAL_ADDRESS:
            raise ConfigError(f"{name}: device address 0x{ptr:x} is outside what a plan can bind (0 to "
                              f"2^{ROLE_SHIFT - 1} - 1)")
    return ptrs


def signature(x) -> tuple | float | str | None:
    """What a plan depends on of one argument: None, a number's (or a host per-tensor scale's) value, or an array's
    shape, byte strides, dtype, device and address class. Anything with shape, strides, dtype and ptr is an array
    (its `device`, the CUDA ordinal, None where it has none: a stand-in, the emulator's host arrays)."""
    if x is None or isinstance(x, str):
        return x
    if isinstance(x, numbers.Number):
        return ("number", float(x))
    if isinstance(x, np.ndarray):   # host memory (run's per-tensor scales): the plan holds its value
        return ("host", x.shape, x.dtype.str, x.tobytes())
    return array_signature(tuple(x.shape), tuple(x.strides), dtype_name(x.dtype), int(x.ptr),
                           getattr(x, "device", None))


def array_signature(shape: tuple, strides: tuple, dtype_name: str, ptr: int, device: int | None) -> tuple:
    """`signature` of an array from its fields (matmul's per-call path calls this directly on a DeviceArray's). The
    device is there because a plan holds its device's kernel and buffers: the same call on another GPU is another
    plan, and arrays of one call on two devices never find one (the plan that would serve them refuses them)."""
    # an empty array's strides are never stepped (frameworks and uploads report anything there)
    return (shape, strides if 0 not in shape else None, dtype_name, device, address_class(ptr))


class StandIn:
    """An array as a plan sees it: shape, byte strides, dtype, and a symbolic address (`symbolic`)."""

    __slots__ = ("shape", "strides", "dtype", "ptr")

    def __init__(self, shape, strides, dtype, ptr: int):
        self.shape, self.strides = tuple(int(n) for n in shape), tuple(int(s) for s in strides)
        self.dtype, self.ptr = np.dtype(dtype), int(ptr)

    def view(self, shape, strides=None, offset: int = 0, dtype=None) -> "StandIn":
        """DeviceArray.view's rule on a stand-in: `shape` and byte `strides` (default C order) `offset` bytes on."""
        dtype = self.dtype if dtype is None else np.dtype(dtype)
        if strides is None:
            strides, step = [], dtype.itemsize
            for n in reversed(tuple(shape)):
                strides.insert(0, step)
                step *= int(n)
        return StandIn(shape, strides, dtype, self.ptr + int(offset))

    def __repr__(self) -> str:
        return f"StandIn(shape={self.shape}, strides={self.strides}, dtype={self.dtype.name}, ptr=0x{self.ptr:x})"


def stand_in(x, role: int, ptr: int | None = None) -> StandIn:
    """`x` (anything with shape, strides and dtype; its `ptr` unless `ptr` says where it will be) at argument
    `role`'s symbolic address."""
    return StandIn(x.shape, x.strides, x.dtype, symbolic(role, int(x.ptr if ptr is None else ptr)))


def stand_ins(args: dict, roles: tuple[str, ...], is_array) -> dict:
    """`args` by name with each array (`is_array(name, x)`) replaced by its stand-in at its role's symbolic
    address; numbers, None and host scalars stay as they are."""
    return {name: stand_in(x, roles.index(name)) if is_array(name, x) else x for name, x in args.items()}
