"""Issue 48: every argument of ptxgemm.grouped_matmul and GroupedPlan (and of matmul's epilogue) is checked on the
host before anything is allocated or asked of the GPU. The driver is taken away on every machine (conftest's
`no_gpu`), and the arrays are headers at made-up addresses, so a bad call that slipped past its rule to the GPU
would raise NoGpuError here, not the ConfigError that names its argument. No GPU needed."""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import ptxgemm
from ptxgemm.errors import ConfigError, NoGpuError
from ptxgemm.plan import epilogue
from ptxgemm.plan import grouped as grouped_rules
from ptxgemm.runtime import arrays
from ptxgemm.tools import emulator, fuzz_grouped

BF16 = np.dtype(ml_dtypes.bfloat16)
I32 = np.dtype(np.int32)
F32 = np.dtype(np.float32)


_next_address = [1 << 32]


def fake(shape, dtype=BF16):
    """A device array's header at a made-up, 256-byte aligned address: nothing allocated, and nothing may read it."""
    dtype = np.dtype(dtype)
    ptr = _next_address[0]
    _next_address[0] += 256 * -(-max(math.prod(shape), 1) * dtype.itemsize // 256)
    return arrays.DeviceArray(ptr, shape, dtype, owner=False)


def _grouped_plan(*args, **kwargs):
    return ptxgemm.GroupedPlan(*args, **kwargs)


ENTRIES = {"grouped_matmul": (ptxgemm.grouped_matmul, fake), "GroupedPlan": (_grouped_plan, fake),
           "emulator": (emulator.grouped_matmul, emulator.HostArray.empty)}
LABELS = [(label, argument) for label, argument, _ in fuzz_grouped.bad_calls(fake)]


def test_the_bad_calls_cover_issue_48s_cases():
    """The fuzzer's walk (and so this file) holds each kind the issue names: non-finite numbers, wrong types, a bad
    activation, a tuple scale, a bias of the wrong length, negative sizes."""
    labels = {label for label, _ in LABELS}
    assert len(labels) == len(LABELS)
    for needed in ("alpha nan", "alpha inf", "scale_a nan", "alpha '1' (a string)", "activation 'nope'",
                   "scale_a a tuple", "bias one short of N", "a of negative total_M", "b of negative N"):
        assert needed in labels, needed


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("label, argument", LABELS, ids=[label for label, _ in LABELS])
def test_a_bad_grouped_call_is_refused_on_the_host_naming_its_argument(no_gpu, entry, label, argument):
    call, alloc = ENTRIES[entry]
    make = {lb: mk for lb, _, mk in fuzz_grouped.bad_calls(alloc)}[label]
    args, kwargs = make()
    with pytest.raises(ConfigError) as err:
        call(*args, **kwargs)
    message = str(err.value)
    assert message.startswith(f"{argument}:") or message.startswith(f"{argument} "), message


@pytest.mark.parametrize("kwargs, argument", [
    ({"alpha": float("nan")}, "alpha"),
    ({"scale_a": float("nan")}, "scale_a"),
    ({"activation": "nope"}, "activation"),
    ({"scale_a": (3, 3)}, "scale_a"),
    ({"bias": "bias of 63"}, "bias"),
    ({"offs": np.array([10, 5], np.int32)}, "offs"),
])
@pytest.mark.parametrize("entry", ["grouped_matmul", "GroupedPlan"])
def test_host_counts_are_not_uploaded_before_every_rule_passed(no_gpu, entry, kwargs, argument):
    """Host counts are uploaded by the plan (a device copy): only after every other argument has passed."""
    kwargs = {"offs": np.array([32, 64], np.int32), **kwargs}
    if kwargs.get("bias") == "bias of 63":
        kwargs["bias"] = fake((63,), F32)
    call = ENTRIES[entry][0]
    with pytest.raises(ConfigError, match=f"^{argument}:"):
        call(fake((64, 32)), fake((2, 32, 64)), **kwargs)


@pytest.mark.parametrize("out", [False, True])
@pytest.mark.parametrize("entry", ["grouped_matmul", "GroupedPlan"])
def test_a_good_call_passes_every_rule_and_then_asks_for_the_gpu(no_gpu, entry, out):
    """The control: a call that breaks no rule reaches the GPU, so the refusals above are the rules', not the
    harness's (allocating out, uploading host counts, or the SM count for the default config)."""
    call = ENTRIES[entry][0]
    kwargs = {"out": fake((64, 64))} if out else {}
    for counts in (fake((2,), I32), np.array([32, 64], np.int32)):
        with pytest.raises(NoGpuError):
            call(fake((64, 32)), fake((2, 32, 64)), offs=counts, alpha=0.5, scale_b=2.0,
                 bias=fake((2, 64), F32), activation="relu", **kwargs)


@pytest.mark.parametrize("kwargs, argument", [
    ({"alpha": float("nan")}, "alpha"),
    ({"alpha": np.ones(1)}, "alpha"),                       # not hashable: refused by its rule, not by the cache
    ({"beta": float("inf"), "c": "c"}, "beta"),
    ({"activation": "nope"}, "activation"),
    ({"activation": ["relu"]}, "activation"),
    ({"scale_a": float("-inf")}, "scale_a"),
    ({"scale_a": 1e30, "scale_b": 1e30}, "scale_a, scale_b"),
    ({"bias": "bias of 63"}, "bias"),
    ({"config": ["coop128x256"]}, "config"),
    ({"out_dtype": ["float32"]}, "out_dtype"),
])
def test_matmul_checks_its_epilogue_before_it_allocates_the_result(no_gpu, kwargs, argument):
    """The dense entry shares the rules (ptxgemm.plan.epilogue) and checks them before it allocates a result."""
    kwargs = dict(kwargs)
    if kwargs.get("c") == "c":
        kwargs["c"] = fake((64, 64), F32)
    if kwargs.get("bias") == "bias of 63":
        kwargs["bias"] = fake((63,), F32)
    with pytest.raises(ConfigError, match=f"^{argument}:"):
        ptxgemm.matmul(fake((64, 32)), fake((32, 64)), **kwargs)


@pytest.mark.parametrize("a, b, argument", [((-5, 32), (32, 16), "a"), ((5, 32), (32, -16), "b"),
                                            ((5, -32), (-32, 16), "a")])
def test_a_negative_extent_names_its_array(no_gpu, a, b, argument):
    with pytest.raises(ConfigError, match=f"^{argument}: every extent must be >= 0"):
        ptxgemm.matmul(fake(a), fake(b))
    with pytest.raises(ConfigError, match=f"^{argument}: every extent must be >= 0"):
        ptxgemm.matmul(fake(a), fake(b), out=fake((5, 16)))


def test_numbers_reach_the_kernel_finite_as_float32():
    """alpha and beta are packed as float32: NaN, infinities and anything that rounds to one are refused, the
    largest float32 and what rounds to it are taken; a held per-tensor scale must be finite too."""
    largest = float(np.finfo(np.float32).max)
    for ok in (largest, -largest, np.nextafter(2.0 ** 128 - 2.0 ** 103, 0.0), 1e-50, np.float32(0.5), np.int64(3)):
        assert math.isfinite(float(np.float32(epilogue.check_values(alpha=ok)[0]))), ok
    for bad in (float("nan"), np.float32("nan"), float("inf"), -float("inf"), 2.0 ** 128 - 2.0 ** 103, 1e39):
        with pytest.raises(ConfigError, match="^alpha: must be a finite real number"):
            epilogue.check_values(alpha=bad)
        with pytest.raises(ConfigError, match="^beta: must be a finite real number"):
            epilogue.check_values(beta=bad)
    for bad in (float("nan"), np.inf, np.array([np.nan], np.float32)):
        with pytest.raises(ConfigError, match="^scale_b: a per-tensor scale must be a finite real number"):
            epilogue.check_values(scale_b=bad)
    with pytest.raises(ConfigError, match="^scale_a: must be a number .* got tuple \\(3, 3\\)"):
        epilogue.check_values(scale_a=(3, 3))
    with pytest.raises(ConfigError, match="^activation: "):
        epilogue.check_values(activation=np.array("relu"))   # compares equal to "relu", but is no name


# --- grouped_run: numpy's door to the grouped GEMM (issue 48) ---------------------------------------------------

RUN_ENTRIES = {"grouped_run": ptxgemm.grouped_run, "emulator": emulator.grouped_run}
RUN_LABELS = [(label, argument) for label, argument, _ in fuzz_grouped.bad_run_calls()]


@pytest.mark.parametrize("entry", RUN_ENTRIES)
@pytest.mark.parametrize("label, argument", RUN_LABELS, ids=[label for label, _ in RUN_LABELS])
def test_a_bad_grouped_run_call_is_refused_before_anything_is_uploaded(no_gpu, entry, label, argument):
    args, kwargs = {lb: mk for lb, _, mk in fuzz_grouped.bad_run_calls()}[label]()
    with pytest.raises(ConfigError) as err:
        RUN_ENTRIES[entry](*args, **kwargs)
    message = str(err.value)
    assert message.startswith(f"{argument}:") or message.startswith(f"{argument} "), message


def test_grouped_runs_walk_covers_its_own_rules():
    """Device arrays where numpy ones belong (a, the counts, a vector), a dtype that would need a conversion, and
    the grouped rules it shares with grouped_matmul."""
    labels = {label for label, _ in RUN_LABELS}
    for needed in ("a device array a", "device offs", "a device scale_b", "a float32 a (never converted)",
                   "offs int64 (never converted)", "a float64 bias (never converted)", "offs past total_M"):
        assert needed in labels, needed


@pytest.mark.parametrize("form", ["contiguous", "masked", "k"])
def test_a_good_grouped_run_passes_every_rule_and_then_asks_for_the_gpu(no_gpu, form):
    """The control: any layout (here a transposed a, an fp8 b N-major, sizes off the 16-byte grid) passes every
    rule and reaches the GPU."""
    fp8 = np.dtype(ml_dtypes.float8_e4m3fn)
    if form == "contiguous":
        a, b, kw = np.ones((30, 60), fp8), np.ones((2, 30, 45), fp8), {"offs": np.array([10, 60], np.int32)}
        a = a.T
        kw.update(scale_a=np.ones(60, np.float32), scale_b=np.ones((2, 45), np.float32), bias=np.ones(45, np.float32))
    elif form == "masked":
        a, b, kw = np.ones((2, 7, 13), BF16), np.ones((2, 13, 9), BF16), {"masked_m": np.array([3, 7], np.int32)}
    else:
        a, b, kw = np.ones((21, 50), BF16), np.ones((50, 9), BF16), {"offs": np.array([20, 50], np.int32)}
    with pytest.raises(NoGpuError):
        ptxgemm.grouped_run(a, b, alpha=0.5, activation="relu", **kw)


@pytest.mark.parametrize("entry", ["grouped_matmul", "GroupedPlan"])
@pytest.mark.parametrize("name", ["a", "b", "out", "scale_b", "bias"])
def test_numpy_arrays_given_to_the_device_entries_are_pointed_at_grouped_run(no_gpu, entry, name):
    args = {"a": fake((64, 32)), "b": fake((2, 32, 64)), "offs": fake((2,), I32)}
    args[name] = np.zeros({"a": (64, 32), "b": (2, 32, 64), "out": (64, 64), "scale_b": (2, 64),
                           "bias": (64,)}[name], F32 if name in ("scale_b", "bias") else BF16)
    a, b = args.pop("a"), args.pop("b")
    with pytest.raises(ConfigError, match=f"^{name}: a numpy array lives in host memory; use ptxgemm.grouped_run"):
        ENTRIES[entry][0](a, b, **args)


def test_grouped_run_is_numpys_grouped_matmul_with_zeros_outside_the_groups():
    """Emulated end to end (the library's checks and plan, the uploads, the kernel's result): each group's rows
    within the bound of the float64 reference, every row outside the groups exactly zero; the result a new C-order
    numpy array of out_dtype."""
    rng = np.random.default_rng(9)
    g, k, n = 3, 70, 45   # rows of 140 and 90 bytes: a, b and out staged
    b = rng.standard_normal((g, k, n)).astype(BF16)
    for form, a, counts in (("contiguous", rng.standard_normal((50, k)).astype(BF16), np.array([5, 5, 41], np.int32)),
                            ("masked", rng.standard_normal((g, 16, k)).astype(BF16), np.array([16, 0, 3], np.int32))):
        name = "offs" if form == "contiguous" else "masked_m"
        got = emulator.grouped_run(a, b, **{name: counts}, out_dtype=np.float32)
        ref = grouped_rules.reference(grouped_rules.parse(a, b, **{name: counts}), a, b, counts)
        assert got.dtype == np.float32 and got.flags.c_contiguous and got.shape == ref.shape
        inside = ~np.isnan(ref)
        np.testing.assert_allclose(got[inside], ref[inside], rtol=1e-5, atol=1e-4)
        assert (got[~inside] == 0).all() and (~inside).any()
