"""Several CUDA devices in one process, without a GPU (ptxgemm.runtime.devices): the thread's current device
(ptxgemm.device), the device a DeviceArray records and exports, the arrays of one call on two devices refused by
name before anything reaches the GPU, plan keys that differ by device, and the context a plan makes current around
its launches once the process has more than one (a fake thread context stands for libcuda's). Arrays are headers at
made-up addresses; tests/test_multi_device_gpu.py runs the calls on two GPUs."""
from __future__ import annotations

import ctypes
import threading
import types

import ml_dtypes
import numpy as np
import pytest

import ptxgemm
from ptxgemm import gemm, grouped
from ptxgemm.errors import ConfigError, CudaError, NoGpuError
from ptxgemm.plan import binding
from ptxgemm.plan.cache import plan_stats, reset_plan_stats
from ptxgemm.runtime import arrays, devices, driver, interop, patch, relayout
from ptxgemm.runtime.arrays import DeviceArray

BF16 = np.dtype(ml_dtypes.bfloat16)
I32 = np.dtype(np.int32)
ADDRESS = 0x7F00_0000_0000   # a device address nobody dereferences here
GIB = 1 << 30


def on(device: int, shape, dtype=BF16, offset: int = 0) -> DeviceArray:
    """A device array's header on `device`, at a made-up address of its own (each device its own GiB range)."""
    return DeviceArray(ADDRESS + device * GIB + offset, shape, dtype, owner=False, device=device)


class Exported:
    """Another framework's tensor: hands out the capsule a DeviceArray exports (DLPack names its device)."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


class CAI:
    """An object with __cuda_array_interface__ alone, which names no device."""

    def __init__(self, shape, typestr="<f2"):
        self.__cuda_array_interface__ = {"version": 3, "data": (ADDRESS, False), "strides": None, "shape": shape,
                                         "typestr": typestr}


# --- the thread's current device ----------------------------------------------------------------------------------

def test_the_current_device_is_0_until_a_block_says_otherwise_per_thread():
    assert devices.current() == devices.DEFAULT_ORDINAL == 0
    seen = []
    with ptxgemm.device(2) as block:
        assert devices.current() == 2 and block.ordinal == 2 and repr(block) == "ptxgemm.device(2)"
        with ptxgemm.device(1):
            assert devices.current() == 1
            worker = threading.Thread(target=lambda: seen.append(devices.current()))
            worker.start()
            worker.join()
        assert devices.current() == 2
    assert devices.current() == 0 and seen == [0]          # another thread has its own current device
    with pytest.raises(KeyError):
        with ptxgemm.device(3):
            raise KeyError("the block's own error")
    assert devices.current() == 0                           # put back on the way out of an error too
    again = ptxgemm.device(1)
    with again:
        with again:                                         # one object entered twice: each entry's own state
            assert devices.current() == 1
        assert devices.current() == 1
    assert devices.current() == 0


@pytest.mark.parametrize("bad", [-1, 1.0, True, "1", None])
def test_a_device_is_an_ordinal_refused_by_name_before_the_gpu(no_gpu, bad):
    with pytest.raises(ConfigError, match="^device: a CUDA device ordinal"):
        ptxgemm.device(bad)
    with pytest.raises(ConfigError, match="^device: a CUDA device ordinal"):
        DeviceArray.empty((4,), np.float32, device=bad if bad is not None else -2)
    with pytest.raises(ConfigError, match="^device: a CUDA device ordinal"):
        DeviceArray(ADDRESS, (4,), np.float32, owner=False, device=bad if bad is not None else -2)


def test_a_device_that_is_not_there_is_the_drivers_answer(no_gpu):
    """ptxgemm.device(7) needs no GPU; the first thing that works there asks the driver, which refuses."""
    with ptxgemm.device(7):
        with pytest.raises(NoGpuError):
            ptxgemm.run(np.ones((8, 8), BF16), np.ones((8, 8), BF16))


# --- a DeviceArray's device -------------------------------------------------------------------------------------

def test_a_device_array_records_its_device_and_exports_it():
    a = on(1, (3, 5))
    assert a.device == 1 and a.view((5,), offset=10).device == 1 and a.view((2,)).view((1,)).device == 1
    assert a.__dlpack_device__() == (interop.KDL_CUDA, 1)
    assert "device=1" in repr(a)
    with ptxgemm.device(2):
        assert DeviceArray(ADDRESS, (2,), BF16, owner=False).device == 2   # no device given: the thread's
    assert DeviceArray(ADDRESS, (2,), BF16, owner=False).device == 0
    capsule = a.__dlpack__()                                 # the capsule's own DLDevice says it too
    managed = ctypes.cast(interop._api.PyCapsule_GetPointer(capsule, b"dltensor"),
                          ctypes.POINTER(interop.DLManagedTensor))
    device = managed.contents.dl_tensor.device
    assert (device.device_type, device.device_id) == (interop.KDL_CUDA, 1)
    del capsule
    view = arrays.as_device_array(Exported(a), "a")          # and a consumer reads it back, whatever is current
    assert (view.device, view.ptr, view.shape) == (1, a.ptr, a.shape) and not view._assumed_device


def test_an_empty_result_is_on_its_device_without_the_gpu(no_gpu):
    assert DeviceArray.empty((0, 4), BF16, device=3).device == 3


def test_a_cuda_array_interface_is_taken_on_the_current_device_and_checked_when_planned(monkeypatch):
    with ptxgemm.device(1):
        view = arrays.as_device_array(CAI((4, 4)), "b")
    assert view.device == 1 and view._assumed_device     # the key's device: no driver call per call
    args = {"a": on(1, (4, 4), np.float16), "b": view}
    asked = []

    def where(answer):
        return lambda ptr: asked.append(ptr) or answer

    for answer in (1, None):   # the driver places it there, or does not know the pointer: taken as it is
        monkeypatch.setattr(driver, "pointer_device", where(answer))
        assert arrays.call_device(args, lambda name, x: x is not None) == 1
    assert asked == [ADDRESS, ADDRESS]                       # only the interface's array is asked about
    monkeypatch.setattr(driver, "pointer_device", where(0))
    with pytest.raises(ConfigError, match=r"^b: its memory is on CUDA device 0, but __cuda_array_interface__ names "
                                          r"no device.* current device, 1: call inside `with ptxgemm.device\(0\):`"):
        arrays.call_device(args, lambda name, x: x is not None)


# --- one call, one device ---------------------------------------------------------------------------------------

def _dense_calls():
    """(label, call, the message's start): calls with one array on another device than the first array."""
    a1, b1 = on(1, (64, 32)), on(1, (32, 48), offset=4096)
    return [
        ("matmul b", lambda: ptxgemm.matmul(on(0, (64, 32)), b1), "b: on CUDA device 1, but a is on CUDA device 0"),
        ("matmul out", lambda: ptxgemm.matmul(a1, b1, out=on(0, (64, 48))), "out: on CUDA device 0, but a is on "),
        ("matmul c", lambda: ptxgemm.matmul(a1, b1, c=on(2, (64, 48), np.float32), beta=1.0), "c: on CUDA device 2"),
        ("matmul bias", lambda: ptxgemm.matmul(a1, b1, bias=on(0, (48,), np.float32)), "bias: on CUDA device 0"),
        ("matmul DLPack", lambda: ptxgemm.matmul(Exported(on(0, (64, 32))), Exported(b1)), "b: on CUDA device 1"),
        ("GemmPlan b", lambda: ptxgemm.GemmPlan(on(0, (64, 32)), b1, on(0, (64, 48))), "b: on CUDA device 1"),
        ("GemmPlan out", lambda: ptxgemm.GemmPlan(a1, b1, on(0, (64, 48))), "out: on CUDA device 0"),
        ("grouped_matmul offs", lambda: ptxgemm.grouped_matmul(on(1, (64, 32)), on(1, (2, 32, 48), offset=GIB // 2),
                                                               offs=on(0, (2,), I32)), "offs: on CUDA device 0"),
        ("grouped_matmul out", lambda: ptxgemm.grouped_matmul(on(1, (64, 32)), on(1, (2, 32, 48), offset=GIB // 2),
                                                              offs=on(1, (2,), I32, 8192), out=on(0, (64, 48))),
         "out: on CUDA device 0"),
        ("GroupedPlan masked_m", lambda: ptxgemm.GroupedPlan(on(0, (2, 16, 32)), on(0, (2, 32, 48), offset=GIB // 2),
                                                             masked_m=on(1, (2,), I32)), "masked_m: on CUDA device 1"),
        ("relayout src", lambda: relayout.copy_array(on(0, (4, 4)), on(1, (4, 4))), "src: on CUDA device 1"),
    ]


@pytest.mark.parametrize("label", [label for label, _, _ in _dense_calls()])
def test_arrays_of_one_call_on_two_devices_are_refused_by_name_before_the_gpu(no_gpu, label):
    """The driver is gone (no_gpu): a call that got past the rule would raise NoGpuError, not this ConfigError, which
    names the argument and both devices."""
    _, call, message = {lb: (lb, c, m) for lb, c, m in _dense_calls()}[label]
    with pytest.raises(ConfigError) as err:
        call()
    assert str(err.value).startswith(message), str(err.value)


def test_the_same_call_on_one_device_reaches_that_device(no_gpu, monkeypatch):
    """The control: nothing refused when every array is on device 1, and the GPU the selection asks about is device
    1's."""
    asked = []

    def refuse(what, ordinal=None):
        asked.append(ordinal)
        raise NoGpuError("CUDA_ERROR_NO_DEVICE", what)

    monkeypatch.setattr(driver, "require_sm90", refuse)
    a, b, out = on(1, (64, 32)), on(1, (32, 48), offset=4096), on(1, (64, 48), offset=8192)
    with pytest.raises(NoGpuError):
        ptxgemm.matmul(a, b, out=out)
    with pytest.raises(NoGpuError):
        ptxgemm.grouped_matmul(a, on(1, (2, 32, 48), offset=GIB // 2), offs=on(1, (2,), I32, 8192), out=out)
    with pytest.raises(NoGpuError):
        ptxgemm.matmul(a, b)    # a new result: allocated on device 1 first (the driver's stream refuses)
    assert asked == [1, 1]


def test_a_stream_of_another_device_is_refused(no_gpu):
    stream = driver.Stream.__new__(driver.Stream)   # a stream's header: made without a GPU
    stream.device, stream.handle = 1, 0x1234
    with pytest.raises(ConfigError, match=r"^stream: a stream of CUDA device 1, but the arrays are on device 0"):
        ptxgemm.GemmPlan(on(0, (64, 32)), on(0, (32, 48), offset=4096), on(0, (64, 48), offset=8192), stream=stream)
    gemm.check_stream(stream, 1)    # its own device's: taken
    gemm.check_stream(0x1234, 0)    # a raw handle names no device: the caller's word


# --- plans by device ---------------------------------------------------------------------------------------------

def test_an_array_signature_holds_its_device():
    a0, a1 = on(0, (64, 32)), on(1, (64, 32))
    assert binding.signature(a0) != binding.signature(a1)
    assert binding.signature(a0) == binding.signature(on(0, (64, 32), offset=GIB // 4))   # the address: never
    assert gemm._array_signature(a1) == binding.signature(a1)                               # one rule, two paths
    assert binding.signature(binding.StandIn((4,), (2,), BF16, 0x1000))[3] is None           # a stand-in has none
    args = {"a": a0, "b": on(0, (2, 32, 48), offset=4096), "counts": on(0, (2,), I32, 8192)}
    assert grouped.signatures(args) != grouped.signatures({**args, "a": a1})


class _FakeEntry:
    """A cached matmul plan that records its launches (no GPU)."""

    def __init__(self, device, shape, launches):
        self.device, self.shape, self.launches = device, shape, launches
        self.plan = types.SimpleNamespace(launch_at=lambda ptrs, stream: launches.append((device, ptrs[:3])))

    def allocate(self):
        return on(self.device, self.shape, offset=GIB // 2)


@pytest.fixture
def fresh_cache():
    gemm.clear_plan_cache()
    reset_plan_stats()
    yield
    gemm.clear_plan_cache()
    reset_plan_stats()


@pytest.mark.parametrize("wrap", ["DeviceArray", "DLPack"])
def test_the_same_call_on_two_devices_is_two_plans_each_found_again(monkeypatch, fresh_cache, wrap):
    """matmul's key holds every array's device (its fast path on DeviceArrays, its general path on other
    frameworks' arrays): the call on device 1, then 0, then 1 again makes two plans and finds the first again."""
    launches, made = [], []

    def plan(args, out_dtype, alpha, beta, activation, config, stream):
        device = args["a"].device
        made.append(device)
        return _FakeEntry(device, (64, 48), launches)

    monkeypatch.setattr(gemm, "_matmul_plan", plan)
    wrapped = (lambda x: x) if wrap == "DeviceArray" else Exported
    for device in (1, 0, 1, 0):
        ptxgemm.matmul(wrapped(on(device, (64, 32))), wrapped(on(device, (32, 48), offset=4096)))
    assert made == [1, 0]
    assert [device for device, _ in launches] == [1, 0, 1, 0]
    stats = plan_stats()
    assert (stats["plans_made"], stats["plan_hits"]) == (2, 2)


# --- the context a plan launches in -------------------------------------------------------------------------------

class FakeThread:
    """libcuda's current context of the calling thread (devices.thread_context / make_current), counted."""

    def __init__(self, current: int = 0):
        self.current, self.gets, self.sets = current, 0, []

    def get(self) -> int:
        self.gets += 1
        return self.current

    def set(self, handle: int) -> None:
        self.sets.append(handle)
        self.current = handle


TORCH_0, OURS_1 = 0xC0, 0xC1   # device 0's context (made current by torch, say) and device 1's, ptxgemm's


@pytest.fixture
def thread(monkeypatch):
    fake = FakeThread()
    monkeypatch.setattr(devices, "thread_context", fake.get)
    monkeypatch.setattr(devices, "make_current", fake.set)
    monkeypatch.setattr(devices, "_ours", set())
    monkeypatch.setattr(devices, "several_contexts", False)
    return fake


def _plan(cls, seen: list, thread: FakeThread):
    """A plan of `cls` on device 1 as a made one holds it, without a GPU: one launch step that records the thread's
    context and current device when it runs."""
    plan = cls.__new__(cls)
    plan.device, plan.records, plan._lock, plan._slots = 1, None, threading.Lock(), patch.AddressSlots()
    plan.context = types.SimpleNamespace(handle=OURS_1, ordinal=1)
    plan._steps = [lambda stream: seen.append((thread.current, devices.current(), stream))]
    return plan


@pytest.mark.parametrize("cls", [ptxgemm.GemmPlan, ptxgemm.GroupedPlan])
def test_one_context_in_the_process_costs_a_launch_no_driver_call(thread, cls):
    devices.opened(OURS_1)
    seen = []
    plan = _plan(cls, seen, thread)
    plan.launch_at((1, 2, 3, 0, 0, 0, 0), 7)
    plan.launch(7)
    assert seen == [(0, 0, 7), (0, 0, 7)] and thread.gets == 0 and thread.sets == []


@pytest.mark.parametrize("cls", [ptxgemm.GemmPlan, ptxgemm.GroupedPlan])
def test_with_several_contexts_a_plan_launches_in_its_own_and_puts_the_threads_back(thread, cls):
    devices.opened(TORCH_0)
    devices.opened(OURS_1)
    assert devices.several_contexts
    seen = []
    plan = _plan(cls, seen, thread)
    thread.current = TORCH_0                          # torch's current device is 0, the plan's is 1
    plan.launch_at((1, 2, 3, 0, 0, 0, 0), 7)
    plan.launch(None)
    assert seen == [(OURS_1, 1, 7), (OURS_1, 1, None)]  # in the plan's context, its device the thread's meanwhile
    assert thread.current == TORCH_0 and devices.current() == 0
    assert thread.sets == [OURS_1, TORCH_0, OURS_1, TORCH_0]
    thread.current, thread.sets = OURS_1, []           # the plan's context current already: nothing set
    plan.launch(None)
    assert thread.sets == [] and thread.current == OURS_1
    thread.current = 0                                  # none current: the plan's made current and left there
    plan.launch(None)
    assert thread.sets == [OURS_1] and thread.current == OURS_1


def test_a_launch_that_fails_still_puts_the_threads_context_back(thread):
    devices.opened(TORCH_0)
    devices.opened(OURS_1)
    thread.current = TORCH_0

    def fail(stream):
        raise RuntimeError("the launch's own error")

    plan = _plan(ptxgemm.GemmPlan, [], thread)
    plan._steps = [fail]
    with pytest.raises(RuntimeError, match="own error"):
        plan.launch(None)
    assert thread.current == TORCH_0 and devices.current() == 0


def test_another_context_found_current_turns_switching_on(thread):
    """One context of ptxgemm's and torch's of another device current on the thread: noticed, then every plan
    switches; the block that worked on device 1 puts torch's back when it ends."""
    devices.noticed(TORCH_0)
    assert not devices.several_contexts                 # before ptxgemm has a context, nothing can clash with it
    thread.current = TORCH_0
    with ptxgemm.device(1):
        devices.opened(OURS_1)
        thread.set(OURS_1)                               # what driver.context(1) does inside the block
    assert thread.current == TORCH_0 and devices.several_contexts
    devices.opened(TORCH_0)                               # ...the same as ptxgemm opening a second context


def test_a_block_on_a_thread_without_a_context_leaves_ptxgemms_current(thread):
    """A fresh thread had none: ptxgemm's stays current after the block, as one device always worked."""
    with ptxgemm.device(1):
        devices.opened(OURS_1)
        thread.set(OURS_1)
    assert thread.current == OURS_1 and thread.sets == [OURS_1] and not devices.several_contexts


def test_an_entrys_result_is_allocated_in_its_plans_context(thread, monkeypatch):
    """matmul's cached call allocates its result on the legacy stream of the current context: the plan's, with
    several."""
    devices.opened(TORCH_0)
    devices.opened(OURS_1)
    thread.current = TORCH_0
    allocated = []
    monkeypatch.setattr(DeviceArray, "allocate", classmethod(
        lambda cls, *args: allocated.append((thread.current, args[6])) or on(1, (4, 4))))
    entry = gemm._MatmulEntry.__new__(gemm._MatmulEntry)
    entry.plan = types.SimpleNamespace(context=types.SimpleNamespace(handle=OURS_1, ordinal=1))
    entry.nbytes, entry.device = 32, 1
    entry.allocation = ((4, 4), BF16, (8, 2), 32, None, 0, 1, 0x9)
    assert entry.allocate().device == 1
    assert allocated == [(OURS_1, 1)] and thread.current == TORCH_0


def _refused_elsewhere(thread: FakeThread, seen: list, name: str = "CUDA_ERROR_INVALID_HANDLE"):
    """A launch step as the driver runs it: refused (`name`) unless the plan's context (device 1's) is current."""
    def step(stream):
        if thread.current != OURS_1:
            raise CudaError(name, "launching a kernel (test)")
        seen.append((thread.current, stream))
    return step


@pytest.mark.parametrize("cls", [ptxgemm.GemmPlan, ptxgemm.GroupedPlan])
@pytest.mark.parametrize("before", [TORCH_0, 0])
def test_a_launch_refused_in_a_context_made_current_behind_ptxgemms_back_runs_again_in_its_own(thread, cls, before):
    """One context of ptxgemm's, and torch made device 0's current since ptxgemm last looked (or a thread that never
    had one runs a cached plan): the driver refuses the launch, the plan launches again in its context and puts the
    thread's back; another device's context turns switching on for good, no context at all does not."""
    devices.opened(OURS_1)
    thread.current = before
    seen = []
    plan = _plan(cls, seen, thread)
    plan._steps = [_refused_elsewhere(thread, seen)]
    plan.launch_at((1, 2, 3, 0, 0, 0, 0), 5)
    assert seen == [(OURS_1, 5)]
    assert thread.current == (before or OURS_1) and devices.several_contexts == bool(before)


def test_a_refusal_of_anothers_making_is_raised_as_it_is(thread):
    """Only the driver's wrong-context answers, and only where another context is current, are launched again."""
    devices.opened(OURS_1)
    thread.current = TORCH_0
    plan = _plan(ptxgemm.GemmPlan, [], thread)
    plan._steps = [_refused_elsewhere(thread, [], "CUDA_ERROR_ILLEGAL_ADDRESS")]
    with pytest.raises(CudaError, match="^CUDA_ERROR_ILLEGAL_ADDRESS"):
        plan.launch(None)
    thread.current = OURS_1                              # the right context current: the refusal is the kernel's own

    def refuse(stream):
        raise CudaError("CUDA_ERROR_INVALID_HANDLE", "launching a kernel (test)")

    plan._steps = [refuse]
    with pytest.raises(CudaError, match="^CUDA_ERROR_INVALID_HANDLE"):
        plan.launch(None)
    assert thread.sets == [] and not devices.several_contexts


def test_the_first_array_on_a_device_leaves_the_threads_context_as_it_was(thread, monkeypatch):
    """torch's device 0 current, and ptxgemm's first work is an array on device 1: opening device 1's context there
    must not leave it current (torch's current device would follow it)."""
    thread.current = TORCH_0
    opened = []

    def open_context(ordinal):   # driver.context as the first use of device 1 does it, without a GPU
        if ordinal not in driver._contexts:
            driver._contexts[ordinal] = types.SimpleNamespace(handle=OURS_1, ordinal=ordinal)
            devices.opened(OURS_1)
            devices.noticed(thread.current)
        thread.set(OURS_1)
        opened.append(ordinal)
        return driver._contexts[ordinal]

    monkeypatch.setattr(driver, "_contexts", {})
    monkeypatch.setattr(driver, "context", open_context)
    done = driver.call_on(1, lambda: (driver.context(1), thread.current)[1])
    assert done == OURS_1 and opened == [1] and thread.current == TORCH_0 and devices.several_contexts
