"""Finding NVIDIA's command-line tools (ptxas, nvdisasm) without assuming anything about PATH.

Order: an environment variable (PTXGEMM_PTXAS / PTXGEMM_NVDISASM), then NVIDIA's pip wheels
(`nvidia-cuda-nvcc`, `nvidia-cuda-nvdisasm`), then a CUDA toolkit (CUDA_HOME, CUDA_PATH, /usr/local/cuda),
then PATH. The wheels come first so that a pip install is enough and is what gets used.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from pathlib import Path

from ..errors import ToolchainError

ENV_VARS = {"ptxas": "PTXGEMM_PTXAS", "nvdisasm": "PTXGEMM_NVDISASM"}
# Layouts of NVIDIA's wheels: CUDA 13 ships everything under nvidia/cu13/bin, CUDA 12 per-package dirs.
_WHEEL_SUBDIRS = ("cu13/bin", "cuda_nvcc/bin", "cuda_nvdisasm/bin", "cu12/bin")


def _wheel_candidates(tool: str):
    try:
        import nvidia  # namespace package provided by the NVIDIA wheels
    except ImportError:
        return
    for root in getattr(nvidia, "__path__", []):
        for sub in _WHEEL_SUBDIRS:
            yield Path(root) / sub / tool


def _toolkit_candidates(tool: str):
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            yield Path(os.environ[var]) / "bin" / tool
    yield Path("/usr/local/cuda/bin") / tool


def find_tool(tool: str) -> Path | None:
    """Path of `tool` ('ptxas' or 'nvdisasm'), or None when it is nowhere to be found.

    Raises ToolchainError when the environment override names something that is not an executable file.
    """
    override = os.environ.get(ENV_VARS[tool])
    if override:
        path = Path(override)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ToolchainError(f"{ENV_VARS[tool]}={override} is not an executable file; point it at {tool} "
                                 f"or unset it to use the one from NVIDIA's pip wheel")
        return path
    for cand in (*_wheel_candidates(tool), *_toolkit_candidates(tool)):
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand
    found = shutil.which(tool)
    return Path(found) if found else None


NVCC_ENV = "PTXGEMM_NVCC"


def find_nvcc() -> Path | None:
    """Path of a CUDA toolkit's nvcc (PTXGEMM_NVCC, then CUDA_HOME, CUDA_PATH, /usr/local/cuda, then PATH), or None.
    Only the benchmark's optional peers compile CUDA C++, and that needs the toolkit's headers beside nvcc, so the
    pip wheels (which may ship nvcc alone) are not searched."""
    override = os.environ.get(NVCC_ENV)
    if override:
        path = Path(override)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ToolchainError(f"{NVCC_ENV}={override} is not an executable file; point it at a CUDA toolkit's nvcc")
        return path
    for cand in _toolkit_candidates("nvcc"):
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand
    found = shutil.which("nvcc")
    return Path(found) if found else None


@functools.lru_cache(maxsize=None)
def tool_version(path: str) -> str:
    """'13.5.37'-style version of an NVIDIA tool (the 'V…' in `--version`), or the raw last line."""
    out = subprocess.run([path, "--version"], capture_output=True, text=True, check=False).stdout
    m = re.search(r"V(\d+\.\d+\.\d+)", out)
    return m.group(1) if m else out.strip().splitlines()[-1] if out.strip() else "unknown"
