"""ptxgemm: a Hopper (sm_90a) GEMM written as PTX from readable templates, run through the CUDA driver.

    import numpy as np, ml_dtypes, ptxgemm
    a = np.random.randn(4096, 4096).astype(ml_dtypes.bfloat16)
    b = np.random.randn(4096, 4096).astype(ml_dtypes.bfloat16)
    c = ptxgemm.run(a, b)                      # numpy's a @ b, on the GPU (any shapes, batches, strides)
    y = ptxgemm.grouped_run(x, w, offs=offs)   # one GEMM per group of rows of x (w: one (K, N) per group)
    with ptxgemm.device(1):                    # numpy calls and new arrays on GPU 1 (device arrays: their own)
        c = ptxgemm.run(a, b)

Importing ptxgemm needs no GPU and never imports torch.
"""
from .errors import ConfigError, CudaError, NoGpuError, PtxgemmError, ToolchainError
from .gemm import GemmPlan, clear_plan_cache, matmul, run
from .grouped import GroupedPlan, grouped_matmul, grouped_run
from .kernel.config import GemmConfig
from .plan.cache import plan_stats, reset_plan_stats
from .runtime.arrays import DeviceArray
from .runtime.devices import device
from .runtime.driver import device_available
from .runtime.graph import Graph
from .select.cost_model import select_config
from .toolchain.kernels import compile_gemm, render_gemm
from .tuning import tune

__version__ = "0.1.0"


def to_device(array, device: int | None = None) -> DeviceArray:
    """Upload a numpy array to CUDA device `device` (None: the thread's current device, ptxgemm.device): one copy of
    the span its elements occupy, shape and strides kept."""
    return DeviceArray.from_numpy(array, device=device)


__all__ = ["run", "matmul", "GemmPlan", "grouped_run", "grouped_matmul", "GroupedPlan", "Graph", "clear_plan_cache", "plan_stats",
           "reset_plan_stats", "GemmConfig",
           "DeviceArray", "to_device", "device", "device_available",
           "select_config", "tune", "compile_gemm", "render_gemm", "PtxgemmError", "ConfigError", "CudaError", "NoGpuError", "ToolchainError"]
