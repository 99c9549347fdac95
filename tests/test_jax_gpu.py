"""JAX's device arrays through ptxgemm and back by DLPack, no copy either way (skips, saying why, without JAX or
without a JAX GPU backend). What a JAX user does today: docs/torch.md ("From JAX")."""
from __future__ import annotations

import os

import numpy as np
import pytest
from gemm_reference import check_result

# JAX takes 75% of the GPU's memory on its first array unless told otherwise: the rest of the GPU suite needs it
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

gpu = pytest.mark.gpu
M, N, K = 1000, 776, 520


def _jax():
    jax = pytest.importorskip("jax", reason="JAX is not installed: the JAX interop test needs it")
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip(f"JAX has no GPU backend here (devices: {jax.devices()})")
    return jax


@gpu
@pytest.mark.parametrize("b_layout", ["row", "transposed"])
def test_jax_arrays_go_in_and_the_result_comes_back_through_dlpack(b_layout):
    jax = _jax()
    import ptxgemm
    from ptxgemm.runtime import driver

    jnp = jax.numpy
    ka, kb = jax.random.split(jax.random.PRNGKey(0))
    a = jax.random.normal(ka, (M, K), dtype=jnp.bfloat16)
    b = (jax.random.normal(kb, (K, N), dtype=jnp.bfloat16) if b_layout == "row"
         else jax.random.normal(kb, (N, K), dtype=jnp.bfloat16).T)     # JAX materializes .T: row-major (K, N)
    for x in (a, b):
        x.block_until_ready()            # JAX's streams are its own: its values are ready before ptxgemm reads
    out = ptxgemm.matmul(a, b)
    driver.synchronize("the JAX interop test's GEMM")
    c = jax.dlpack.from_dlpack(out)      # a JAX array over ptxgemm's memory
    assert c.shape == (M, N) and c.dtype == jnp.bfloat16
    assert c.unsafe_buffer_pointer() == out.ptr, "JAX copied the result instead of viewing it"
    verdict = check_result(np.asarray(c), np.asarray(a), np.asarray(b))
    assert verdict.ok, str(verdict)
    d = jax.jit(lambda x: x * 2)(c)      # JAX computes on it as on its own arrays
    assert np.array_equal(np.asarray(d).astype(np.float32), 2 * np.asarray(c).astype(np.float32))
