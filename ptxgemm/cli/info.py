"""`python -m ptxgemm info`: the toolchain (ptxas, nvdisasm), the cubin cache, the templates and the GPU."""
from __future__ import annotations

import json
import os

from ..errors import PtxgemmError
from ..kernel import codegen
from ..runtime import driver
from ..toolchain import compiler, locate


def collect_info() -> dict:
    info: dict = {"tools": {}}
    for tool in ("ptxas", "nvdisasm"):
        try:
            path = locate.find_tool(tool)
        except PtxgemmError as e:
            info["tools"][tool] = {"path": None, "version": None, "error": str(e)}
            continue
        info["tools"][tool] = {"path": str(path) if path else None,
                               "version": locate.tool_version(str(path)) if path else None,
                               "override": locate.ENV_VARS[tool] if os.environ.get(locate.ENV_VARS[tool]) else None}
    info["cache_dir"] = str(compiler.cache_dir())
    info["cache_dir_from"] = "PTXGEMM_CACHE_DIR" if os.environ.get("PTXGEMM_CACHE_DIR") else "default"
    info["templates"] = str(codegen.template_dir())
    try:
        from cuda.bindings import __version__ as bindings_version
    except ImportError:
        bindings_version = None
    info["cuda_bindings"] = bindings_version

    reason = driver.no_device_reason()
    if reason is None:
        d = driver.device_info()
        info["device"] = {"name": d.name, "compute_capability": "%d.%d" % d.compute_capability,
                          "sm_count": d.sm_count, "l2_bytes": d.l2_bytes,
                          "max_smem_per_block_optin": d.max_smem_per_block_optin, "clock_khz": d.clock_khz,
                          "driver": d.driver_version_str}
    else:
        info["device"] = None
        info["no_device_reason"] = reason
    return info


def format_info(info: dict) -> str:
    lines = []
    for tool, t in info["tools"].items():
        if t.get("error"):
            lines.append(f"{tool:<10} error: {t['error']}")
        elif t["path"] is None:
            lines.append(f"{tool:<10} not found")
        else:
            via = f", from {t['override']}" if t.get("override") else ""
            lines.append(f"{tool:<10} {t['path']} (version {t['version']}{via})")
    lines.append(f"{'cache':<10} {info['cache_dir']} ({info['cache_dir_from']})")
    lines.append(f"{'templates':<10} {info['templates']}")
    lines.append(f"{'bindings':<10} cuda-bindings {info['cuda_bindings']}")
    d = info["device"]
    if d is None:
        lines.append(f"{'device':<10} none: {info['no_device_reason']}")
    else:
        lines.append(f"{'device':<10} {d['name']}, compute capability {d['compute_capability']}, {d['sm_count']} SMs, "
                     f"{d['max_smem_per_block_optin']} B shared memory per block (opt-in), driver CUDA {d['driver']}")
    return "\n".join(lines)


def run(args) -> int:
    info = collect_info()
    print(json.dumps(info, indent=2) if args.json else format_info(info))
    return 0


#: the command's --help text (its one-line summary is in ptxgemm/cli/main.py's table)
DESCRIPTION = "Print ptxas/nvdisasm paths and versions, the cubin cache directory and the GPU."


def add_arguments(p) -> None:
    p.add_argument("--json", action="store_true", help="print JSON (default off: lines of text)")
