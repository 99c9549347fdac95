"""The driver layer on a real GPU: the pip wheel's cubin loads, tensor maps, DeviceArray, errors, events, and the
debug-mode stall path. Everything marked `gpu` is skipped (with the reason) where there is no sm_90 device; the
two tests at the top check the stall kernel's source on any machine.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from ptxgemm.kernel import codegen
from ptxgemm.kernel.swizzle import format_grid, tile_grid
from ptxgemm.runtime import arrays
from ptxgemm.toolchain import compiler, locate
from ptxgemm.tools import probes

REPO_ROOT = Path(__file__).resolve().parent.parent

# A kernel whose one mbarrier expects one arrival. With arrive=False nobody arrives, so the phase never completes
# and, in debug mode, every thread's wait gives up after debug_timeout_ns and reports barrier code 2 ("empty").
STALL_TEMPLATE = """\
{% import "mbarrier.ptx.j2" as mbar with context %}
{% include "module.ptx.j2" %}

.shared .align 8 .b64 stall_bar;

.visible .entry stall_test(
    .param .u64 debug_records_param
)
.maxntid 32, 1, 1
{
    .reg .pred  %p_leader;
    .reg .u32   %bar, %thread;
    .reg .u64   %debug_records;

    mov.u32     %bar, stall_bar;
    mov.u32     %thread, %tid.x;
    ld.param.u64 %debug_records, [debug_records_param];
    setp.eq.u32 %p_leader, %thread, 0;
    @%p_leader {{ mbar.init("%bar", 1) }}
    @%p_leader {{ mbar.fence_init() }}
    bar.sync    0;
{% if arrive %}
    @%p_leader {{ mbar.arrive("%bar") }}
{% endif %}
{{ mbar.wait("%bar", "0", "WAIT_NEVER", 2, "7") }}
    ret;
}
"""
STALL_TIMEOUT_NS = 50_000_000  # 50 ms
STALL_THREADS = 32


def stall_ptx(arrive: bool, debug: bool = True) -> str:
    return codegen.environment().from_string(STALL_TEMPLATE).render(
        template_name="tests/test_driver_gpu.py (STALL_TEMPLATE)", summary="debug-mode stall test",
        ptx_version=probes.PTX_VERSION, debug=debug, debug_timeout_ns=STALL_TIMEOUT_NS, arrive=arrive)


# ---------------------------------------------------------------------------------------------------------------
# The stall kernel's source (any machine)
# ---------------------------------------------------------------------------------------------------------------

def test_stall_kernel_renders_a_bounded_wait():
    ptx = stall_ptx(arrive=False)
    assert "mbarrier.arrive" not in ptx
    assert f"setp.lt.u64 %ready, %wait_dt, {STALL_TIMEOUT_NS};" in ptx
    assert "trap;" in ptx
    assert "mbarrier.arrive.shared::cta.b64 _, [%bar];" in stall_ptx(arrive=True)


@pytest.mark.skipif(locate.find_tool("ptxas") is None or locate.find_tool("nvdisasm") is None,
                    reason="ptxas/nvdisasm not found")
def test_stall_kernel_assembles_with_a_trap():
    k = compiler.compile_ptx(stall_ptx(arrive=False), use_cache=False)
    assert k.report.warnings == [], k.report.raw
    sass = k.sass()
    assert "BPT.TRAP" in sass
    assert "GLOBALTIMER" in sass
    assert "SYNCS.PHASECHK" in sass
    release = compiler.compile_ptx(stall_ptx(arrive=False, debug=False), use_cache=False).sass()
    assert "BPT.TRAP" not in release


# ---------------------------------------------------------------------------------------------------------------
# GPU
# ---------------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def probe_module():
    from ptxgemm.runtime import driver

    kernel = compiler.compile_ptx(probes.swizzle_probe_ptx(8, 64))
    return kernel, driver.load_module(kernel, "swizzle probe module (test)")


def run_store_probe(module, tmap, rows, cols):
    """The module's kernel fills 8 x 64 = 512 elements of shared memory with 0..511 and TMA-stores the box of
    `tmap`, so any rows x cols box of 512 16-bit elements works with it."""
    from ptxgemm.runtime import driver

    assert rows * cols == 8 * 64

    fn = module.function("swizzle_probe_store")
    smem = rows * cols * 2 + 16
    fn.set_max_dynamic_smem(smem)
    driver.launch(fn, (1,), (probes.PROBE_THREADS,), [tmap], smem_bytes=smem)
    driver.synchronize("running the store probe (test)")


@pytest.mark.gpu
def test_device_is_hopper(device_report):
    from ptxgemm.runtime import driver

    assert driver.no_device_reason() is None
    info = driver.require_sm90("the GPU tests")
    assert info.compute_capability == (9, 0)
    assert info.sm_count > 0 and info.l2_bytes > 0 and info.max_smem_per_block_optin >= 227 * 1024
    device_report(f"device: {info.name}, sm_90, {info.sm_count} SMs, driver CUDA {info.driver_version_str}")


@pytest.mark.gpu
def test_pip_ptxas_cubin_loads_and_runs(probe_module, device_report):
    from ptxgemm.runtime import driver, tensormap

    kernel, module = probe_module
    assert kernel.cubin is not None, "ptxas was not found, so this would test the driver's JIT instead"
    assert module.handle is not None
    info = driver.device_info()
    line = (f"ptxas {kernel.ptxas_version} ({kernel.ptxas}): cubin loaded and ran under driver CUDA "
            f"{info.driver_version_str}")
    print(line)
    device_report(line)
    arr = arrays.DeviceArray.from_numpy(np.arange(8 * 64, dtype=np.uint16).reshape(8, 64))
    arr.fill_bytes(0xFFFF, 2)
    tmap = tensormap.encode_tiled(arr, dims=(64, 8), strides=(128,), box=(64, 8), swizzle="128B", l2_promotion="none")
    run_store_probe(module, tmap, 8, 64)
    grid = arr.to_numpy().astype(np.int64)
    assert np.array_equal(grid, tile_grid(8, 64, "128B")), format_grid(grid)


@pytest.mark.gpu
def test_cuda_bindings_tensormap_storage_is_accepted(probe_module, device_report):
    from cuda.bindings import driver as cu

    from ptxgemm.runtime import tensormap

    _, module = probe_module
    rows, cols = 16, 32
    arr = arrays.DeviceArray.empty((rows, cols), np.uint16)
    arr.fill_bytes(0xFFFF, 2)
    tmap = tensormap.encode_tiled(arr, dims=(cols, rows), strides=(cols * 2,), box=(cols, rows), swizzle="64B",
                                  l2_promotion="128B")
    assert isinstance(tmap.cu_map, cu.CUtensorMap)
    storage = tmap.cu_map.getPtr()
    line = f"CUtensorMap storage from cuda.bindings at 0x{storage:x} (address mod 64 = {storage % 64}): accepted"
    print(line)
    device_report(line)
    run_store_probe(module, tmap, rows, cols)
    grid = arr.to_numpy().astype(np.int64)
    assert np.array_equal(grid, tile_grid(rows, cols, "64B")), format_grid(grid)


DTYPES = [np.uint16, np.float16, ml_dtypes.bfloat16, np.float32]


@pytest.mark.gpu
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_device_array_round_trip(dtype, order):

    rng = np.random.default_rng(7)
    host = np.asarray(rng.standard_normal((37, 19)) * 100, order=order)
    host = np.asarray(np.abs(host) if dtype == np.uint16 else host, dtype=dtype, order=order)
    dev = arrays.DeviceArray.from_numpy(host)
    assert dev.shape == (37, 19) and dev.dtype == np.dtype(dtype)
    assert dev.strides == host.strides
    back = dev.to_numpy()
    assert back.dtype == host.dtype
    assert back.flags.f_contiguous if order == "F" else back.flags.c_contiguous
    assert back.tobytes(order="A") == host.tobytes(order="A")  # bit-exact, in memory order
    bits = np.dtype(f"u{host.dtype.itemsize}")  # compare bit patterns: NaN-safe and exact for bf16
    np.testing.assert_array_equal(back.view(bits), host.view(bits))


@pytest.mark.gpu
def test_device_array_takes_strided_views():

    host = np.arange(64, dtype=np.float32).reshape(8, 8)[:, ::2]
    dev = arrays.DeviceArray.from_numpy(host)   # the span of its elements, uploaded as is; numpy's strides kept
    assert dev.strides == host.strides and dev.base is not None and dev.base.nbytes == 7 * 32 + 3 * 8 + 4
    np.testing.assert_array_equal(dev.to_numpy(), host)   # more layouts: tests/test_memory_gpu.py


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32], ids=lambda d: np.dtype(d).name)
def test_poison_makes_floats_nan(dtype):

    dev = arrays.DeviceArray.from_numpy(np.ones((33, 7), dtype=dtype))
    dev.poison()
    out = dev.to_numpy().astype(np.float32)
    assert out.shape == (33, 7)
    assert np.isnan(out).all()


@pytest.mark.gpu
def test_poison_fills_integers_with_ones():

    dev = arrays.DeviceArray.from_numpy(np.zeros((5, 8), dtype=np.uint16))
    dev.poison()
    assert (dev.to_numpy() == 0xFFFF).all()


@pytest.mark.gpu
def test_cuda_error_names_result_and_operation():
    from ptxgemm.runtime import driver
    from ptxgemm.errors import CudaError

    # NUL-terminated: an image that is not a cubin is read as PTX text up to its NUL
    with pytest.raises(CudaError) as info:
        driver.Module(b"garbage\0", "garbage module")
    err = info.value
    assert err.name.startswith("CUDA_ERROR_"), err.name
    assert err.operation == "loading the garbage module"
    assert str(err).startswith(f"{err.name} while loading the garbage module")


@pytest.mark.gpu
def test_cuda_error_for_a_missing_kernel(probe_module):
    from ptxgemm.errors import CudaError

    _, module = probe_module
    with pytest.raises(CudaError) as info:
        module.function("no_such_kernel")
    assert info.value.name == "CUDA_ERROR_NOT_FOUND"
    assert "finding kernel 'no_such_kernel'" in info.value.operation


@pytest.mark.gpu
def test_event_timing_is_positive(probe_module):
    from ptxgemm.runtime import driver, tensormap

    _, module = probe_module
    arr = arrays.DeviceArray.empty((8, 64), np.uint16)
    tmap = tensormap.encode_tiled(arr, dims=(64, 8), strides=(128,), box=(64, 8), swizzle="128B")
    fn = module.function("swizzle_probe_store")
    smem = 8 * 64 * 2 + 16
    fn.set_max_dynamic_smem(smem)
    start, end = driver.Event(), driver.Event()
    start.record()
    for _ in range(50):
        driver.launch(fn, (1,), (probes.PROBE_THREADS,), [tmap], smem_bytes=smem)
    end.record()
    ms = start.elapsed_ms(end)
    assert isinstance(ms, float)
    assert 0.0 < ms < 10_000.0


# The stalling kernel traps, and a trap makes the process's CUDA context unusable: both debug-wait tests run their
# kernel in a child process (with a timeout), so neither a trap nor a hang can take the rest of the session down.
STALL_SCRIPT = textwrap.dedent("""
    import ctypes, json, sys, time
    sys.path.insert(0, {root!r})
    sys.path.insert(0, {tests!r})
    from ptxgemm.toolchain import compiler
    from ptxgemm.runtime import driver
    from ptxgemm.runtime.debug import BarrierStall, StallRecords
    from ptxgemm.errors import CudaError
    from test_driver_gpu import STALL_THREADS, stall_ptx

    module = driver.load_module(compiler.compile_ptx(stall_ptx(arrive={arrive!r})), "stall test module")
    records = StallRecords(1, STALL_THREADS)
    t0 = time.monotonic()
    result = {{}}
    try:
        driver.launch(module.function("stall_test"), (1,), (STALL_THREADS,),
                      [ctypes.c_uint64(records.device_pointer)])
        driver.synchronize("running the stall test kernel")
        result = {{"outcome": "finished", "stalls": records.stalls()}}
    except CudaError as e:
        try:
            records.raise_if_stalled("running the stall test kernel", e)
            result = {{"outcome": "error without a stall record", "error": str(e)}}
        except BarrierStall as stall:
            result = {{"outcome": "stall", "name": stall.name, "operation": stall.operation, "message": str(stall),
                       "cause": getattr(stall.__cause__, "name", None), "stalls": records.stalls()}}
    result["seconds"] = time.monotonic() - t0
    print(json.dumps(result))
""")


def run_stall_kernel(arrive: bool) -> dict:
    script = STALL_SCRIPT.format(root=str(REPO_ROOT), tests=str(Path(__file__).parent), arrive=arrive)
    t0 = time.monotonic()
    try:
        proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                              cwd=REPO_ROOT)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"the stall test kernel (arrive={arrive}) hung for {time.monotonic() - t0:.0f} s "
                    f"(stdout: {e.stdout!r}, stderr: {e.stderr!r})")
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.gpu
def test_barrier_stall_is_reported_not_hung():
    result = run_stall_kernel(arrive=False)
    assert result["outcome"] == "stall", result
    assert result["name"] == "BARRIER_STALL"
    assert result["operation"] == "running the stall test kernel"
    assert "barrier 'empty (stage released by a consumer; waited on by the producer)'" in result["message"]
    assert "waiting for parity 0" in result["message"] and "detail 7" in result["message"]
    assert (result["cause"] or "").startswith("CUDA_ERROR_"), result
    stalls = result["stalls"]
    assert 1 <= len(stalls) <= STALL_THREADS
    assert all(s["code"] == 2 and s["parity"] == 0 and s["cta"] == 0 and s["detail"] == 7 for s in stalls), stalls
    assert result["seconds"] < 30, result["seconds"]


@pytest.mark.gpu
def test_debug_wait_that_completes_does_not_trap():
    result = run_stall_kernel(arrive=True)
    assert result["outcome"] == "finished", result
    assert result["stalls"] == []
