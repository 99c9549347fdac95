"""The address slots of prepared launches, rewritten per call: how a plan made once by shape runs on each call's memory.

A slot is a place that holds an argument's address: a pointer argument of a kernel (a ctypes value that
driver.PreparedLaunch's parameter array points at) or an encoded tensor map (moved with cuTensorMapReplaceAddress).
Each slot belongs to one of the call's arguments (its `role`) at a fixed `delta` from that argument's base; `bind`
fills every slot from the addresses of one call. Which slots there are is the planner's business (ptxgemm.plan.binding
decodes them from the symbolic addresses a plan was made on); this module only writes.

The driver copies a launch's parameters when the launch is enqueued (or captured into a CUDA graph), so slots may be
rewritten as soon as `launch` returns: the launches already queued keep the addresses they were given.
"""
from __future__ import annotations

import ctypes

from ..kernel.hardware import TMA_ALIGN as ADDRESS_CLASS   # ptxgemm.plan.binding's, from the same constant
from .tensormap import TensorMap, replace_address

#: ctypes types that can hold a device address in a launch's arguments (the copy kernel's strides are c_int64 and
#: its extents small: never addresses)
_POINTER_TYPES = (ctypes.c_uint64, ctypes.c_void_p)


class AddressSlots:
    """Every address slot of a plan's launches, by role; `bind(ptrs)` points them at one call's arguments."""

    def __init__(self):
        self.scalars: list[tuple[object, int, int]] = []    # (ctypes value, role, delta)
        self.maps: list[tuple[TensorMap, int, int]] = []    # (encoded map, role, delta)
        self.bound: tuple | None = None                     # the addresses the slots hold now, by role

    def collect(self, launches, decode) -> "AddressSlots":
        """Add every pointer argument of `launches` (driver.PreparedLaunch's) that `decode(value)` places as
        (role, delta); tensor maps are added by the caller as it encodes them (`add_map`)."""
        for launch in launches:
            for arg in launch.args:
                if isinstance(arg, _POINTER_TYPES) and arg.value:
                    place = decode(arg.value)
                    if place is not None:
                        self.scalars.append((arg, *place))
                elif isinstance(getattr(arg, "ptr", None), int) and decode(arg.ptr) is not None:
                    # an array argument is converted to its address inside the launch, out of reach here
                    raise TypeError(f"{launch.fn.name}: a bound address must be a ctypes.c_uint64 argument, not a "
                                    f"{type(arg).__name__}")
        return self

    def add_map(self, tmap: TensorMap, role: int, delta: int) -> None:
        self.maps.append((tmap, role, delta))

    def bind(self, ptrs: tuple) -> None:
        """Point every slot at its argument's base (`ptrs[role]` less its address class) plus its delta, rewriting
        only the slots of arguments that moved since the last bind (a model's weights stay put while its
        activations move). The caller serializes binds with the launches that read them."""
        old = self.bound
        if ptrs == old:
            return
        for value, role, delta in self.scalars:
            p = ptrs[role]
            if old is None or p != old[role]:
                value.value = p - p % ADDRESS_CLASS + delta
        for tmap, role, delta in self.maps:
            p = ptrs[role]
            if old is None or p != old[role]:
                replace_address(tmap, p - p % ADDRESS_CLASS + delta)
        self.bound = ptrs
