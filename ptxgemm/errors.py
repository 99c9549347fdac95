"""Exception types. Every error ptxgemm raises says what was being done and which rule was broken."""


class PtxgemmError(Exception):
    """Base class of every ptxgemm error."""


class ConfigError(PtxgemmError, ValueError):
    """A kernel configuration, argument or shape breaks a rule; raised before anything reaches the GPU."""


class ToolchainError(PtxgemmError, RuntimeError):
    """ptxas or nvdisasm is missing or failed."""


class CudaError(PtxgemmError, RuntimeError):
    """A CUDA driver call failed. `name` is the CUresult name, `operation` what ptxgemm was doing."""

    def __init__(self, name: str, operation: str, detail: str = ""):
        self.name = name
        self.operation = operation
        msg = f"{name} while {operation}"
        if detail:
            msg += f": {detail}"
        super().__init__(msg)


class NoGpuError(CudaError):
    """No usable CUDA device (no driver, no device, or not sm_90)."""
