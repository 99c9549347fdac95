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

ENV_VARS = {"ptxas": "PTXGEMM_PTXAS", "nvdisasm": "PTXGEMM_NVDISASM", "nvcc": "PTXGEMM_NVCC"}
# Tools wanted with a whole toolkit beside them: nvcc compiles CUDA C++ (only the benchmark's optional peers do) and
# needs the toolkit's headers, which NVIDIA's wheels may not ship beside it, so the wheels are not searched for it.
TOOLKIT_ONLY = ("nvcc",)
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
    """Path of `tool` ('ptxas', 'nvdisasm' or 'nvcc'), or None when it is nowhere to be found.

    Raises ToolchainError when the environment override names something that is not an executable file.
    """
    override = os.environ.get(ENV_VARS[tool])
    if override:
        path = Path(override)
        if not (path.is_file() and os.access(path, os.X_OK)):
            fallback = "a CUDA toolkit's" if tool in TOOLKIT_ONLY else "the one from NVIDIA's pip wheel"
            raise ToolchainError(f"{ENV_VARS[tool]}={override} is not an executable file; point it at {tool} "
                                 f"or unset it to use {fallback}")
        return path
    wheels = () if tool in TOOLKIT_ONLY else _wheel_candidates(tool)
    for cand in (*wheels, *_toolkit_candidates(tool)):
        if cand.is_file() and os.access(cand, os.X_OK):
            return cand
    found = shutil.which(tool)
    return Path(found) if found else None


@functools.lru_cache(maxsize=None)
def tool_version(path: str) -> str:
    """'13.5.37'-style version of an NVIDIA tool (the 'V…' in `--version`), or the raw last line."""
    out = subprocess.run([path, "--version"], capture_output=True, text=True, check=False).stdout
    m = re.search(r"V(\d+\.\d+\.\d+)", out)
    return m.group(1) if m else out.strip().splitlines()[-1] if out.strip() else "unknown"
