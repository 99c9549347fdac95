"""DeepGEMM as an optional fp8 blockwise peer (`bench --set deepgemm|grouped --in-dtype float8_e4m3fn --scaling block
--deepgemm DIR`): built from a checkout, never shipped, timed in the bench's own process beside ptxgemm.

DeepGEMM (github.com/deepseek-ai/DeepGEMM) is a torch extension whose kernels it compiles at run time with nvcc. Its
code is not part of ptxgemm: the caller points `--deepgemm` at a checkout (with its CUTLASS and fmt submodules), and
`load` builds the extension in place once (`python setup.py build_ext --inplace`, after linking CUTLASS's headers into
deep_gemm/include as its develop.sh does: its run-time compiler looks for them there), then imports it from there.
`--deepgemm installed` imports the deep_gemm the interpreter already has.

Why the bench re-executes itself (`ensure_libstdcxx_first`). Built on the device's toolchain against torch 2.11,
DeepGEMM 2.6.1's extension crashed on its first call inside std::regex, in a libstdc++ locale facet (issue 49). The
same extension runs when the process starts with the system's libstdc++ preloaded (H200, device run 27) -- the very
library the process maps anyway. What the preload changes is the order of symbol lookup. torch's libraries were
linked by a devtoolset compiler, which puts the parts of libstdc++ newer than the system's baseline into each
library statically, and exports them: libtorch_cpu.so defines std::filesystem (path conversion through std::locale
included) and std::regex instantiations of its own. Without the preload, 16 of the extension's references to
std::filesystem bind to torch's copies (LD_DEBUG=bindings, device run 28), objects made by one copy are used by the
other, and the first call fails; with libstdc++ preloaded it comes first in the global scope and none do (0). Hidden
visibility on the extension's own build (-fvisibility=hidden -fno-gnu-unique) did not stop the crash (run 27): the
references that go wrong are to library functions, which an extension cannot hide. So the bench starts again, once,
with LD_PRELOAD naming the libstdc++ that this interpreter resolves, and says so.

Layouts. The dense peer reads the very values ptxgemm's bench runs, in DeepGEMM's layouts (its own copies on the
device): A (M, K) fp8 row-major as ptxgemm's; B as (N, K) K-major (ptxgemm's column-major (K, N) is those bytes);
scale_a (M, ceil(K/128)) turned MN-major and TMA-aligned once by DeepGEMM's own get_mn_major_tma_aligned_tensor (so a
call launches only the GEMM); scale_b (ceil(N/128), ceil(K/128)) = the transpose of ptxgemm's (ceil(K/128),
ceil(N/128)). The grouped peer reads the bench's torch tensors the same way: a contiguous case gives DeepGEMM the
group of every row (its m-indices form), a masked case its masked_m and, as the expected rows, the case's own count
(DeepGEMM picks its config from that hint; the true count is the most favourable hint it can get).
"""
from __future__ import annotations

import ctypes
import importlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from ..errors import ConfigError, ToolchainError
from .fp8_peers import PeerRefused, torch_fp8
from .suite import torch_rows

NAME = "DeepGEMM"
INSTALLED = "installed"          # --deepgemm installed: the deep_gemm this interpreter imports
LIBSTDCXX = "libstdc++.so.6"
# set in the re-executed process: the preload is in place, do not start again
REEXEC_MARK = "PTXGEMM_DEEPGEMM_PRELOADED"
# what a checkout must hold (its extension's source, its package, CUTLASS's headers from the submodule)
CHECKOUT_FILES = ("setup.py", "deep_gemm/__init__.py", "third-party/cutlass/include/cutlass/cutlass.h",
                  "third-party/cutlass/include/cute/tensor.hpp")
# the headers its run-time compiler includes from deep_gemm/include (develop.sh links them there)
LINKED_HEADERS = ("cutlass", "cute")
BUILD_LOG = "build_ptxgemm.log"
BUILD_TIMEOUT_S = 900
GROUPED_FORMS = ("contiguous", "masked")   # its m-grouped forms; its k-grouped GEMM takes per-channel scales


class DeepGemmRefused(PeerRefused):
    """DeepGEMM does not run this problem (its dtype or layout rules): a peer's refusal, which the row records and
    goes on without it (modes._prepare)."""


def source_dir(given: str) -> Path | None:
    """The checkout at `given` (None for `installed`); ConfigError naming --deepgemm when it is not one."""
    if given == INSTALLED:
        return None
    root = Path(given)
    missing = [f for f in CHECKOUT_FILES if not (root / f).is_file()]
    if missing:
        raise ConfigError(f"--deepgemm: {root} is not a DeepGEMM checkout with its submodules (missing "
                          f"{', '.join(missing)}); clone github.com/deepseek-ai/DeepGEMM with --recursive, or give "
                          f"--deepgemm {INSTALLED}")
    return root


# --------------------------------------------------------------------------------------------------------------
# The libstdc++ preload (see the module's docstring)
# --------------------------------------------------------------------------------------------------------------

def mapped_path(name: str, maps: str) -> str | None:
    """The file of the first mapping in /proc/<pid>/maps text `maps` whose file name starts with `name`."""
    for line in maps.splitlines():
        fields = line.split()
        if len(fields) >= 6 and Path(fields[5]).name.startswith(name):   # the sixth field: the mapped file
            return fields[5]
    return None


def libstdcxx_path() -> str:
    """The libstdc++ this interpreter resolves (loaded here by name, read back from the process's mappings)."""
    ctypes.CDLL(LIBSTDCXX)
    path = mapped_path(LIBSTDCXX.split(".so")[0] + ".so", Path("/proc/self/maps").read_text())
    if path is None:
        raise ToolchainError(f"--deepgemm: {LIBSTDCXX} loaded but not found in /proc/self/maps")
    return path


def preloaded_env(environ: dict, lib: str) -> dict | None:
    """`environ` with `lib` first in LD_PRELOAD, or None when it is first already."""
    current = [p for p in environ.get("LD_PRELOAD", "").replace(":", " ").split() if p]
    if current and current[0] == lib:
        return None
    env = dict(environ)
    env["LD_PRELOAD"] = " ".join([lib] + [p for p in current if p != lib])
    env[REEXEC_MARK] = "1"
    return env


def ensure_libstdcxx_first() -> None:
    """Start this command again with libstdc++ preloaded, unless it is already (or this is that second start):
    called by the CLI before anything imports torch."""
    if os.environ.get(REEXEC_MARK):
        return
    lib = libstdcxx_path()
    env = preloaded_env(dict(os.environ), lib)
    if env is None:
        return
    print(f"# --deepgemm: starting again with LD_PRELOAD={lib} (DeepGEMM's extension must bind libstdc++'s "
          f"symbols before torch's copies; ptxgemm/bench/deepgemm_peer.py says why)", flush=True)
    os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)


# --------------------------------------------------------------------------------------------------------------
# Building and importing
# --------------------------------------------------------------------------------------------------------------

def _built(root: Path) -> bool:
    return any((root / "deep_gemm").glob("_C*.so"))


def build(root: Path) -> None:
    """DeepGEMM's extension built in place in `root` (once: kept there), its headers linked where its run-time
    compiler looks; ToolchainError with the build's last lines when it fails."""
    include = root / "deep_gemm" / "include"
    for name in LINKED_HEADERS:
        link = include / name
        if not link.exists():
            link.symlink_to((root / "third-party" / "cutlass" / "include" / name).resolve())
    if _built(root):
        return
    log = root / BUILD_LOG
    with open(log, "w") as out:
        done = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=root, stdout=out,
                              stderr=subprocess.STDOUT, timeout=BUILD_TIMEOUT_S, check=False)
    if done.returncode != 0 or not _built(root):
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
        raise ToolchainError(f"--deepgemm: building DeepGEMM's extension in {root} failed (rc {done.returncode}; "
                             f"log {log}):\n{tail}")


def load(given: str):
    """The deep_gemm module: built and imported from the checkout `given`, or the installed one."""
    root = source_dir(given)
    if root is not None:
        build(root)
        sys.path.insert(0, str(root.resolve()))
    module = importlib.import_module("deep_gemm")
    if root is not None and not Path(module.__file__).resolve().is_relative_to(root.resolve()):
        raise ConfigError(f"--deepgemm: deep_gemm was imported from {module.__file__}, not from {root} (an "
                          f"installed copy shadows the checkout)")
    return module


def mn_major_scales(dg, sf):
    """`sf` turned MN-major and TMA-aligned by DeepGEMM's own function (its _C module registers it; the package
    re-exports it in some versions only)."""
    fn = getattr(dg, "get_mn_major_tma_aligned_tensor", None) or dg._C.get_mn_major_tma_aligned_tensor
    return fn(sf)


def describe(dg) -> str:
    """Which DeepGEMM ran: its version and where it was imported from."""
    return f"DeepGEMM {getattr(dg, '__version__', '?')} from {Path(dg.__file__).parent}"


# --------------------------------------------------------------------------------------------------------------
# Layouts (numpy, so the CPU tests hold them)
# --------------------------------------------------------------------------------------------------------------

def dense_operands(a: np.ndarray, b: np.ndarray, scale_a: np.ndarray, scale_b: np.ndarray):
    """ptxgemm's blockwise operands (A (M, K) row-major, B (K, N) column-major, scale_a (M, kb), scale_b (kb, nb))
    in DeepGEMM's: A, B^T as (N, K) row-major (the same bytes), scale_a, scale_b^T (nb, kb), all C-contiguous."""
    if not (a.flags.c_contiguous and b.T.flags.c_contiguous):
        raise ValueError("dense_operands: A row-major and B column-major, as the bench's Problem holds them")
    return a, b.T, np.ascontiguousarray(scale_a), np.ascontiguousarray(scale_b.T)


def row_groups(counts) -> np.ndarray:
    """The group of every row of a contiguous grouped A (DeepGEMM's m-indices form), int32."""
    counts = np.asarray(counts, dtype=np.int64)
    return np.repeat(np.arange(len(counts), dtype=np.int32), counts)


# --------------------------------------------------------------------------------------------------------------
# The peers
# --------------------------------------------------------------------------------------------------------------

class DeepGemmDenseImpl:
    """The modes bench's peer interface (prepare(problem) -> launcher, result(rows), reference) around
    deep_gemm.fp8_gemm_nt, bf16 output. Timed beside the cuBLAS peer, never in its place."""

    name = NAME
    extra = True      # not the row's main peer: its figures go to the deepgemm_* fields

    def __init__(self, dg, torch):
        self.dg, self.torch = dg, torch
        self.out = None

    def prepare(self, p):
        if p.mode.scaling != "block" or p.mode.in_dtype != "float8_e4m3fn" or p.mode.fused:
            raise DeepGemmRefused("DeepGEMM's fp8 GEMM is e4m3 with blockwise scales and a plain bf16 output")
        torch, dg = self.torch, self.dg
        a, bt, sa, sbt = dense_operands(p.a, p.b, p.scale_a, p.scale_b)
        ta, tb = torch_fp8(torch, a, "float8_e4m3fn"), torch_fp8(torch, bt, "float8_e4m3fn")
        tsa = mn_major_scales(dg, torch.from_numpy(sa).cuda())
        tsb = torch.from_numpy(sbt).cuda()
        self.out = torch.full((p.m, p.n), float("nan"), device="cuda", dtype=torch.bfloat16)
        out = self.out

        def launch():
            dg.fp8_gemm_nt((ta, tsa), (tb, tsb), out, disable_ue8m0_cast=True)
        launch()
        torch.cuda.synchronize()
        return launch

    def result(self, rows):
        return torch_rows(self.torch, self.out, rows)

    def reference(self, p, rows):
        return p.reference(rows, scaled=True)


def grouped_launcher(dg, torch, case, a, b, scales):
    """(launcher, its output) of DeepGEMM's grouped fp8 GEMM on the grouped bench's tensors: a (total_M, K) or
    (G, M_max, K) fp8, b (G, K, N) the K-major view, blockwise scales sa (rows, kb), sb (G, kb, nb). For a case of
    GROUPED_FORMS (the caller picks them: DeepGEMM's k-grouped GEMM takes per-channel scales)."""
    sa, sb = scales
    bk = b.transpose(1, 2).contiguous()      # (G, N, K): the bytes b views (contiguous already: no copy)
    tsa = mn_major_scales(dg, sa.contiguous())
    tsb = sb.transpose(1, 2).contiguous()                      # (G, nb, kb)
    out = torch.full((*a.shape[:-1], case.n), float("nan"), device="cuda", dtype=torch.bfloat16)
    if case.layout == "contiguous":
        layout = torch.from_numpy(row_groups(case.counts)).cuda()

        def launch():
            dg.m_grouped_fp8_gemm_nt_contiguous((a, tsa), (bk, tsb), out, layout, disable_ue8m0_cast=True)
    else:
        masked = torch.tensor(case.counts, device="cuda", dtype=torch.int32)
        expected = max(case.counts)

        def launch():
            dg.m_grouped_fp8_gemm_nt_masked((a, tsa), (bk, tsb), out, masked, expected, disable_ue8m0_cast=True)
    return launch, out
