"""The tune cache: the measured winner of `ptxgemm.tune` per GPU and problem, in one JSON file.

Location: <PTXGEMM_CACHE_DIR or ~/.cache/ptxgemm>/tune.json, beside the cubin cache
(ptxgemm.toolchain.compiler.cache_dir).
An entry is keyed by GPU name, SM count, driver version, (m, n, k), dtypes and operand majors: a winner measured on
another GPU, another driver or another layout says nothing about this one. Each entry keeps every candidate's
time too, so the cost model's tables (ptxgemm.select.tile_costs) can be refitted from the cache.

PTXGEMM_TUNE_CACHE=off (or 0) turns the cache off: select_config does not look entries up and tune does not store
them (`python -m ptxgemm bench` sets it, so a benchmark measures the library's own heuristic unless asked otherwise).
"""
from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from pathlib import Path

from ..errors import ConfigError
from ..kernel.config import GemmConfig
from ..toolchain import compiler

log = logging.getLogger("ptxgemm.tune")

ENV_VAR = "PTXGEMM_TUNE_CACHE"
FILE_NAME = "tune.json"
FORMAT = 1                       # bumped when an entry's meaning changes; files of another format are ignored
_ON, _OFF = ("", "on", "1"), ("off", "0")

_memo: dict = {}                 # path -> ((mtime_ns, size), entries): select_config runs per GemmPlan


def enabled() -> bool:
    """False when PTXGEMM_TUNE_CACHE is 'off' or '0'; ConfigError on a value that is neither on nor off (a typo
    must not silently leave the cache on)."""
    value = os.environ.get(ENV_VAR, "").strip().lower()
    if value in _OFF:
        return False
    if value in _ON:
        return True
    raise ConfigError(f"{ENV_VAR}: must be 'on' or '1' (the default) or 'off' or '0', got {value!r}")


def path() -> Path:
    return compiler.cache_dir() / FILE_NAME


def generation():
    """What a remembered selection depends on of the tune cache: None when the cache is off, else its file and that
    file's (mtime, size), None for a missing file. A tune that stores a winner changes it (one stat per call)."""
    if not enabled():
        return None
    file = path()
    try:
        st = file.stat()
    except OSError:
        return (str(file), None)
    return (str(file), st.st_mtime_ns, st.st_size)


def device_identity(device) -> dict:
    """What of a device the key holds. `device` is a driver.DeviceInfo or any object with .name and .sm_count
    (and .driver_version_str when it knows the driver; 'unknown' otherwise)."""
    driver = getattr(device, "driver_version_str", None) or getattr(device, "driver", None) or "unknown"
    return {"gpu": str(device.name), "sm_count": int(device.sm_count), "driver": str(driver)}


def key(problem, device, scaling: str | None = None) -> str:
    """The entry's key: the device, the problem and, for blockwise scaling ("block"), the scaling (whose kernels
    differ: the winner of the plain problem is not the blockwise one's)."""
    d = device_identity(device)
    return (f"gpu={d['gpu']};sms={d['sm_count']};driver={d['driver']};mnk={problem.m}x{problem.n}x{problem.k};"
            f"dtypes={problem.in_dtype}->{problem.out_dtype};majors=a:{problem.a_major},b:{problem.b_major}"
            + (f";scaling={scaling}" if scaling else ""))


def load(file: Path | None = None) -> dict:
    """{key: entry} of the cache file; {} when it is missing, unreadable or of another format (logged)."""
    file = Path(file) if file is not None else path()
    try:
        st = file.stat()
    except OSError:
        return {}
    stamp = (st.st_mtime_ns, st.st_size)
    memo = _memo.get(str(file))
    if memo is not None and memo[0] == stamp:
        return memo[1]
    try:
        data = json.loads(file.read_text())
        if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("entries"), dict):
            raise ValueError(f"not a format-{FORMAT} tune cache")
        entries = data["entries"]
    except (OSError, ValueError) as e:
        log.warning("ignoring the tune cache %s: %s", file, e)
        entries = {}
    _memo[str(file)] = (stamp, entries)
    return entries


def lookup(problem, device, scaling: str | None = None):
    """The stored winner for `problem` on `device` as a GemmConfig, or None (no entry, cache off, or an entry the
    current GemmConfig rules reject: a stale winner falls back to the heuristic instead of failing)."""

    if not enabled():
        return None
    entry = load().get(key(problem, device, scaling))
    if entry is None:
        return None
    try:
        return GemmConfig.from_tag(entry["config"], **problem.config_fields())
    except (ConfigError, KeyError, TypeError, AttributeError) as e:
        log.warning("ignoring the tune cache entry for %s: %s", problem.describe(), e)
        return None


def store(problem, device, winner_tag: str, timings: dict, rounds: int, file: Path | None = None,
          scaling: str | None = None, method: str = "burst") -> Path:
    """Add or replace the entry for (problem, device) and write the file atomically: a temporary file in the same
    directory, then os.replace, so a reader (or a crash) never sees half a file. Two tunes storing at the same moment
    can lose one of the two entries (last writer wins), never corrupt the file. OSError when it cannot be written."""
    file = Path(file) if file is not None else path()
    entries = dict(load(file))
    ident = device_identity(device)
    entries[key(problem, device, scaling)] = {
        **ident, "m": problem.m, "n": problem.n, "k": problem.k, "in_dtype": problem.in_dtype,
        "out_dtype": problem.out_dtype, "a_major": problem.a_major, "b_major": problem.b_major,
        **({"scaling": scaling} if scaling else {}), "config": winner_tag, "ms": timings.get(winner_tag), "timings_ms": timings, "rounds": rounds,
        "method": method, "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    text = json.dumps({"format": FORMAT, "entries": entries}, indent=1, sort_keys=True)
    file.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{FILE_NAME}.", suffix=".tmp", dir=file.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, file)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    st = file.stat()
    _memo[str(file)] = ((st.st_mtime_ns, st.st_size), entries)  # what we wrote, even within one mtime tick
    return file
