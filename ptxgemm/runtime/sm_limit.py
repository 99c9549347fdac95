"""How many SMs ptxgemm's GEMMs may take on a device: all of them, or fewer, so that a kernel on another stream finds
SMs free while a GEMM runs (DeepGEMM's `set_num_sms`, CUTLASS's `max_active_clusters`).

ptxgemm's kernels are persistent: a plan launches one CTA per SM and each CTA walks its share of the tiles. A
collective of torch.distributed (FSDP's all-gather of the next layer's weights, a reduce-scatter of gradients) runs
its own kernel on its own stream at the same time; it gets an SM only when a CTA ends, so beside a full persistent
grid it waits for the whole GEMM, or the GEMM's last CTAs wait for it. With a limit of n SMs a plan made after
`set_sm_limit(n)` launches at most n CTAs (clusters whole), and the selection ranks tiles for n SMs.

Process-wide per device. Setting it drops every cached plan (ptxgemm.plan.cache listens), so the next call plans
again for the new count; plans already held (a GemmPlan, a captured CUDA graph) keep the grid they were made with.
"""
from __future__ import annotations

import dataclasses
import numbers

from ..errors import ConfigError
from . import devices, driver

#: device ordinal -> the most SMs a GEMM plan may use there; absent: all of them
_limits: dict[int, int] = {}
#: called with no argument after every change (ptxgemm.plan.cache registers its clear_all)
_listeners: list = []


def set_sm_limit(limit: int | None, device: int | None = None) -> None:
    """Plans made from now on for device `device` (None: the thread's current device) use at most `limit` SMs
    (an int >= 1; None: all of them again). Above the device's SM count it changes nothing. Every cached plan is
    dropped."""
    ordinal = devices.resolve(device, "device")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, numbers.Integral) or limit < 1):
        raise ConfigError(f"limit: a number of SMs (an int >= 1), or None for all of them, got {limit!r}")
    if limit is None:
        _limits.pop(ordinal, None)
    else:
        _limits[ordinal] = int(limit)
    for listener in _listeners:
        listener()


def sm_limit(device: int | None = None) -> int | None:
    """The limit set_sm_limit set for device `device` (None: the thread's current device), or None."""
    return _limits.get(devices.resolve(device, "device"))


def applied(info):
    """`info` (a driver.DeviceInfo) as planning sees it: its sm_count cut to its device's limit."""
    limit = _limits.get(info.ordinal)
    if limit is None or limit >= info.sm_count:
        return info
    return dataclasses.replace(info, sm_count=limit)


def planning_info(what: str, ordinal: int | None = None):
    """driver.require_sm90(what, ordinal) as a plan uses it: the device's facts with the SMs it may take (applied)."""
    return applied(driver.require_sm90(what, ordinal))


def on_change(listener) -> None:
    """Call `listener()` after every change of a limit."""
    _listeners.append(listener)
