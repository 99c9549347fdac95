"""Interop on the GPU with torch and CuPy as optional peers (each test skips, saying so, without its framework):
their device arrays in, read in place; ptxgemm's result out to them without a copy; their streams honoured."""
from __future__ import annotations

import numpy as np
import pytest
from gemm_reference import check_result
from torch_peer import host_values, require_torch_cuda

gpu = pytest.mark.gpu
M, N, K = 1000, 776, 520          # partial tiles in every dimension, several tiles per consumer


def _torch():
    return require_torch_cuda("the torch interop tests")


def _cupy():
    return pytest.importorskip("cupy", reason="CuPy is not installed: the CuPy interop tests need it")


@gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("b_layout", ["row", "transposed"])
def test_torch_tensors_in_and_out_in_place(dtype, b_layout):
    torch = _torch()
    import ptxgemm

    tdtype = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(7)
    a = torch.randn(M, K, device="cuda", dtype=tdtype, generator=gen)
    b = (torch.randn(K, N, device="cuda", dtype=tdtype, generator=gen) if b_layout == "row"
         else torch.randn(N, K, device="cuda", dtype=tdtype, generator=gen).t())   # K-major, no copy
    out = torch.full((M, N), float("nan"), device="cuda", dtype=tdtype)
    before = out.data_ptr()
    result = ptxgemm.matmul(a, b, out, stream=torch.cuda.current_stream())
    torch.cuda.synchronize()
    assert out.data_ptr() == before and result.ptr == before          # written in place
    verdict = check_result(host_values(out), host_values(a), host_values(b))
    assert verdict.ok, str(verdict)


@gpu
def test_a_ptxgemm_result_goes_to_torch_without_a_copy():
    torch = _torch()
    import ptxgemm

    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    c = ptxgemm.matmul(a, b)                       # a new DeviceArray
    t = torch.from_dlpack(c)                       # bfloat16 through DLPack's bfloat type
    assert t.data_ptr() == c.ptr and t.dtype == torch.bfloat16 and tuple(t.shape) == (M, N)
    torch.cuda.synchronize()
    assert check_result(host_values(t), host_values(a), host_values(b)).ok
    del c                                          # torch's view keeps the memory alive
    assert torch.isfinite(t.float()).all()


@gpu
def test_cupy_arrays_through_both_protocols():
    cp = _cupy()
    import ptxgemm

    rng = np.random.default_rng(3)
    a_host = rng.standard_normal((M, K)).astype(np.float16)
    b_host = rng.standard_normal((K, N)).astype(np.float16)
    a, b = cp.asarray(a_host), cp.asarray(b_host)
    out = cp.full((M, N), cp.nan, dtype=cp.float16)

    class CAIOnly:        # __cuda_array_interface__ alone, as Numba and older libraries give it
        def __init__(self, x):
            self.__cuda_array_interface__ = x.__cuda_array_interface__

    ptxgemm.matmul(CAIOnly(a), CAIOnly(b), CAIOnly(out))
    cp.cuda.Device().synchronize()
    assert check_result(cp.asnumpy(out), a_host, b_host).ok
    c = ptxgemm.matmul(a, b, stream=cp.cuda.get_current_stream())   # DLPack in
    for view in (cp.from_dlpack(c), cp.asarray(c)):                  # DLPack and the interface out
        assert view.data.ptr == c.ptr
        assert check_result(cp.asnumpy(view), a_host, b_host).ok
