"""ptxgemm: a Hopper (sm_90a) pingpong GEMM written as PTX from readable templates, run through the CUDA driver.

    import numpy as np, ml_dtypes, ptxgemm
    a = np.random.randn(4096, 4096).astype(ml_dtypes.bfloat16)
    b = np.random.randn(4096, 4096).astype(ml_dtypes.bfloat16)
    c = ptxgemm.run(a, b)                      # numpy's a @ b, on the GPU

Importing ptxgemm needs no GPU and never imports torch.
"""
from .config import GemmConfig
from .driver import DeviceArray, device_available
from .errors import ConfigError, CudaError, NoGpuError, PtxgemmError, ToolchainError
from .gemm import GemmPlan, compile_gemm, matmul, render_gemm, run
from .select import select_config
from .tuning import tune

__version__ = "0.1.0"


def to_device(array) -> DeviceArray:
    """Upload a C- or Fortran-contiguous numpy array (one copy, layout kept)."""
    return DeviceArray.from_numpy(array)


__all__ = ["run", "matmul", "GemmPlan", "GemmConfig", "DeviceArray", "to_device", "device_available",
           "select_config", "tune", "compile_gemm", "render_gemm", "PtxgemmError", "ConfigError", "CudaError", "NoGpuError", "ToolchainError"]
