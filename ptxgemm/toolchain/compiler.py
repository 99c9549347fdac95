"""PTX → cubin with whole-program `ptxas`, an on-disk cubin cache, the `-v` resource report, and SASS.

Why whole-program ptxas and not nvJitLink / cuda.core's Program: those silently drop `setmaxnreg`
(warning C7504), which the pingpong kernel's register split depends on.

Cache: key = sha256(PTX text, ptxas version, flags); location PTXGEMM_CACHE_DIR or ~/.cache/ptxgemm.
Hits and misses are logged at DEBUG level on the 'ptxgemm.cache' logger.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import re
import subprocess
import tempfile
from pathlib import Path

from ..errors import ToolchainError
from .locate import find_tool, tool_version

log = logging.getLogger("ptxgemm.cache")

DEFAULT_ARCH = "sm_90a"


def cache_dir() -> Path:
    return Path(os.environ.get("PTXGEMM_CACHE_DIR") or Path.home() / ".cache" / "ptxgemm")


@dataclasses.dataclass
class FunctionResources:
    """What ptxas reported for one entry function."""

    name: str
    registers: int = 0
    barriers: int = 0
    smem_bytes: int = 0  # static shared memory only; dynamic smem is chosen at launch
    stack_bytes: int = 0
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    cmem_bytes: int = 0


@dataclasses.dataclass
class ResourceReport:
    """The parsed `ptxas -v` output: per-function resources and every warning with its code."""

    functions: dict[str, FunctionResources]
    warnings: list[dict]  # {"code": "C7508" or None, "message": str}
    raw: str

    @property
    def warning_codes(self) -> set[str]:
        return {w["code"] for w in self.warnings if w["code"]}

    def to_dict(self) -> dict:
        return {
            "functions": {k: dataclasses.asdict(v) for k, v in self.functions.items()},
            "warnings": self.warnings,
        }


_RE_ENTRY = re.compile(r"(?:Compiling entry function|Function properties for) '?([\w$.]+)'?")
_RE_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_RE_USED = re.compile(r"Used (\d+) registers")
_RE_BAR = re.compile(r"used (\d+) barriers")
_RE_SMEM = re.compile(r"(\d+) bytes smem")
_RE_CMEM = re.compile(r"(\d+) bytes cmem\[0\]")
# "ptxas warning : (C7508) msg", "ptxas /path/kernel.ptx, line 42; warning : msg", and coded advisories that
# ptxas 13.x prints at info level: "ptxas info    : (C7508) Potential Performance Loss: 'setmaxnreg' ignored; ..."
_RE_WARN = re.compile(r"ptxas(?:\s+[^;]*?,\s*line\s+(?P<line>\d+);)?\s+(?:warning|error)\s*:\s*"
                      r"(?:\((?P<code>C\d+)\)\s*)?(?P<msg>.*)")
_RE_ADVISORY = re.compile(r"ptxas info\s*:\s*\((?P<code>C\d+)\)\s*(?P<msg>.*)")


def parse_ptxas_report(text: str) -> ResourceReport:
    """Parse `ptxas -v` stderr. Lines for one function follow its 'Compiling entry function' line."""
    funcs: dict[str, FunctionResources] = {}
    warnings: list[dict] = []
    cur: FunctionResources | None = None
    for line in text.splitlines():
        if m := (_RE_WARN.search(line) or _RE_ADVISORY.search(line)):
            msg = m.group("msg").strip()
            if m.groupdict().get("line"):
                msg = f"line {m.group('line')}: {msg}"
            warnings.append({"code": m.group("code"), "message": msg})
            continue
        if m := _RE_ENTRY.search(line):
            cur = funcs.setdefault(m.group(1), FunctionResources(m.group(1)))
            continue
        if cur is None:
            continue
        if m := _RE_FRAME.search(line):
            cur.stack_bytes, cur.spill_store_bytes, cur.spill_load_bytes = map(int, m.groups())
        if m := _RE_USED.search(line):
            cur.registers = int(m.group(1))
            if b := _RE_BAR.search(line):
                cur.barriers = int(b.group(1))
            if s := _RE_SMEM.search(line):
                cur.smem_bytes = int(s.group(1))
            if c := _RE_CMEM.search(line):
                cur.cmem_bytes = int(c.group(1))
    return ResourceReport(funcs, warnings, text)


@dataclasses.dataclass
class CompiledKernel:
    """A PTX module and, when ptxas was available, its cubin and resource report.

    cubin None means the driver will JIT the PTX at load time (no ptxas found); SASS is then unavailable.
    """

    ptx: str
    cubin: bytes | None
    report: ResourceReport | None
    ptxas: str | None  # path of the ptxas used
    ptxas_version: str | None
    cache_hit: bool = False
    cache_entry: Path | None = None   # its directory in the cubin cache, where sass() keeps the disassembly

    def image(self) -> bytes:
        """What cuModuleLoadData takes: the cubin, or NUL-terminated PTX for the driver's JIT."""
        return self.cubin if self.cubin is not None else self.ptx.encode() + b"\0"

    def sass(self) -> str:
        if self.cubin is None:
            raise ToolchainError("SASS is unavailable: no ptxas was found, so the PTX is left to the driver's JIT "
                                 "(install nvidia-cuda-nvcc or set PTXGEMM_PTXAS)")
        return disassemble(self.cubin, self.cache_entry)


def _cache_key(ptx: str, version: str, flags: list[str]) -> str:
    h = hashlib.sha256()
    for part in (ptx, version, "\0".join(flags)):
        h.update(part.encode())
        h.update(b"\x00\x01")
    return h.hexdigest()[:32]


def _run_ptxas(ptxas: str, ptx: str, flags: list[str]) -> tuple[bytes, str]:
    with tempfile.TemporaryDirectory(prefix="ptxgemm-") as tmp:
        src, dst = Path(tmp) / "kernel.ptx", Path(tmp) / "kernel.cubin"
        src.write_text(ptx)
        proc = subprocess.run([ptxas, *flags, str(src), "-o", str(dst)], capture_output=True, text=True)
        log_text = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise ToolchainError(f"ptxas failed (exit {proc.returncode}):\n{log_text.strip()}")
        return dst.read_bytes(), log_text


def compile_ptx(ptx: str, *, arch: str = DEFAULT_ARCH, extra_flags: tuple[str, ...] = (),
                use_cache: bool = True) -> CompiledKernel:
    """Assemble `ptx` for `arch` with whole-program ptxas -v; cached on disk by (PTX, ptxas version, flags)."""
    ptxas = find_tool("ptxas")
    if ptxas is None:
        log.warning("ptxas not found: the PTX will be JIT-compiled by the driver and SASS is unavailable")
        return CompiledKernel(ptx, None, None, None, None)
    version = tool_version(str(ptxas))
    flags = [f"-arch={arch}", "-v", *extra_flags]
    key = _cache_key(ptx, version, flags)
    entry = cache_dir() / key
    if use_cache and (entry / "kernel.cubin").is_file() and (entry / "ptxas.log").is_file():
        log.debug("cache hit %s", entry)
        text = (entry / "ptxas.log").read_text()
        return CompiledKernel(ptx, (entry / "kernel.cubin").read_bytes(), parse_ptxas_report(text), str(ptxas),
                              version, cache_hit=True, cache_entry=entry)
    log.debug("cache miss %s", entry)
    cubin, text = _run_ptxas(str(ptxas), ptx, flags)
    if use_cache and _store(entry, cubin, text, flags, version):
        return CompiledKernel(ptx, cubin, parse_ptxas_report(text), str(ptxas), version, cache_entry=entry)
    return CompiledKernel(ptx, cubin, parse_ptxas_report(text), str(ptxas), version)


def _store(entry: Path, cubin: bytes, text: str, flags: list[str], version: str) -> bool:
    """Write atomically (rename) so two processes compiling the same kernel never see half a file; False where the
    cache cannot be written."""
    try:
        entry.mkdir(parents=True, exist_ok=True)
        for name, data in (("kernel.cubin", cubin), ("ptxas.log", text.encode()),
                           ("meta.json", json.dumps({"flags": flags, "ptxas": version}).encode())):
            _write_atomically(entry / name, data)
        return True
    except OSError as e:  # a read-only home must not break compilation
        log.warning("could not write the cubin cache at %s: %s", entry, e)
        return False


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.parent / f".{path.name}.{os.getpid()}"
    tmp.write_bytes(data)
    os.replace(tmp, path)


def disassemble(cubin: bytes, entry: Path | None = None) -> str:
    """nvdisasm's SASS of `cubin`. With `entry` (the cubin's directory in the cache) the SASS is kept there, one file
    per nvdisasm version: nvdisasm takes about half a second, and a dump, the tests and the tools ask for the same
    kernel's SASS again and again."""
    nvdisasm = find_tool("nvdisasm")
    if nvdisasm is None:
        raise ToolchainError("nvdisasm not found: install nvidia-cuda-nvdisasm or set PTXGEMM_NVDISASM")
    kept = None if entry is None else entry / f"kernel.{tool_version(str(nvdisasm))}.sass"
    if kept is not None and kept.is_file():
        return kept.read_text()
    with tempfile.TemporaryDirectory(prefix="ptxgemm-") as tmp:
        path = Path(tmp) / "kernel.cubin"
        path.write_bytes(cubin)
        proc = subprocess.run([str(nvdisasm), "-c", str(path)], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ToolchainError(f"nvdisasm failed (exit {proc.returncode}): {proc.stderr.strip()}")
    if kept is not None:
        try:
            _write_atomically(kept, proc.stdout.encode())
        except OSError as e:   # as for the cubin: an unwritable cache only costs the next call the disassembly
            log.warning("could not keep the SASS in the cubin cache at %s: %s", entry, e)
    return proc.stdout
