"""Plans by shape, bound per call (ptxgemm.plan.binding, issue 46), without a GPU: a call planned on symbolic
addresses and rebased to real ones gives exactly the tensor maps, staging copies and kernel pointer arguments of the
same call planned on the real addresses, for random layouts (transposed, column-major, batched, stepped, offset,
staged) and epilogues; and the plan caches' keys hold no address."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from ptxgemm import gemm, grouped
from ptxgemm.errors import ConfigError
from ptxgemm.plan import binding, operands
from ptxgemm.plan.binding import StandIn
from ptxgemm.plan.cache import COUNTERS, PlanCache, plan_stats, reset_plan_stats
from ptxgemm.plan.call import parse_epilogue, plan_call
from ptxgemm.select.cost_model import DEFAULT_DEVICE

BF16 = np.dtype("bfloat16")


def _no_spills(cfg) -> bool:
    return False


def test_symbolic_addresses_decode_to_their_role_and_offset():
    for role in range(binding.MAX_ROLES):
        for real in (0x7F00_0000_0000, 0x7F00_0000_0008, 0x1000_0002):
            sym = binding.symbolic(role, real)
            assert sym % binding.ADDRESS_CLASS == real % binding.ADDRESS_CLASS
            for delta in (0, 48, -(1 << 39), (1 << 40) + 6):   # views before and after element 0
                r, d = binding.decode(sym + delta)
                assert r == role and binding.base(real) + d == real + delta
    assert binding.symbolic(3, 0) == 0 and binding.decode(0) is None
    assert binding.decode(0x7FFF_FFFF_F000) is None          # a real address (a plan's own buffer) stays real
    with pytest.raises(ConfigError, match="^out: device address"):
        binding.check_real(("a", "out"), (1 << 40, 1 << 60))


def test_a_signature_holds_the_address_class_never_the_address():
    x = StandIn((64, 128), (256, 2), BF16, 0x7000_0000_0000)
    moved = StandIn((64, 128), (256, 2), BF16, 0x7000_0010_0000)
    off = StandIn((64, 128), (256, 2), BF16, 0x7000_0000_0002)
    assert binding.signature(x) == binding.signature(moved) != binding.signature(off)
    assert binding.signature(StandIn((0, 128), (256, 2), BF16, 0))[-1] == -1
    assert binding.signature(2.0) == ("number", 2.0) and binding.signature(None) is None


def _rebased(value: int, bases: dict) -> int:
    return binding.rebase(value, bases)


def _random_case(rng):
    """A random dense call's arrays as descriptors at random real addresses: a @ b with a, b each row- or
    column-major, maybe stepped or offset (staged), maybe batched; out row- or column-major; maybe a bias and a c."""
    batch = () if rng.random() < 0.6 else (int(rng.integers(2, 4)),)
    m, n, k = (int(rng.integers(1, 300)) for _ in range(3))
    item = 2

    def array(rows, cols, role, share_batch=False):
        col_major = rng.random() < 0.35
        step = int(rng.choice([1, 1, 1, 1, 2]))
        pad = int(rng.choice([0, 0, 0, 8, 3]))
        if col_major:
            inner, outer = (item * step, (rows * step + pad) * item)
            strides = (inner, outer)
            span = outer * cols
        else:
            inner, outer = (item * step, (cols * step + pad) * item)
            strides = (outer, inner)
            span = outer * rows
        shape = (rows, cols)
        if batch and not share_batch:
            shape, strides = batch + shape, (span,) + strides
        ptr = (int(rng.integers(1 << 32, 1 << 44)) << 8) + int(rng.choice([0, 0, 0, 2, 8]))
        return StandIn(shape, strides, BF16, ptr)

    args = {"a": array(m, k, 0), "b": array(k, n, 1, share_batch=rng.random() < 0.5),
            "out": array(m, n, 2)}
    extra = {}
    if rng.random() < 0.3:
        args["bias"] = StandIn((n,), (4,), np.float32, (int(rng.integers(1 << 32, 1 << 44)) << 8) + 4 * int(rng.integers(0, 4)))
    if rng.random() < 0.3:
        args["c"] = array(m, n, 3)
        extra["beta"] = 0.5
    return args, extra


@pytest.mark.parametrize("seed", range(60))
def test_a_plan_made_on_symbolic_addresses_rebases_to_the_plan_made_on_real_ones(seed):
    rng = np.random.default_rng(seed)
    args, extra = _random_case(rng)
    beta = extra.get("beta", 0.0)
    try:
        real_epi = parse_epilogue(args["a"], args["b"], lambda x, name: x, c=args.get("c"), beta=beta,
                                  bias=args.get("bias"))
        real = plan_call(args["a"], args["b"], args["out"], None, real_epi, device=DEFAULT_DEVICE,
                         spill_check=_no_spills)
    except ConfigError as e:   # a case the rules refuse is refused the same way on stand-ins
        with pytest.raises(ConfigError, match=str(e).split(":")[0]):
            gemm.plan_symbolic(args, None, beta=beta, device=DEFAULT_DEVICE, spill_check=_no_spills)
        return
    sym = gemm.plan_symbolic(args, None, beta=beta, device=DEFAULT_DEVICE, spill_check=_no_spills)
    bases = {i: int(args[name].ptr) if name in args else 0 for i, name in enumerate(gemm.ROLES)}
    assert sym.config == real.config
    assert [op.staged for op in sym.layout.operands] == [op.staged for op in real.layout.operands]
    assert sym.layout.swapped == real.layout.swapped and sym.layout.folded == real.layout.folded
    if real.config is None:
        fills = [(_rebased(c.dst_ptr, bases), c.dst_strides, c.shape) for c in sym.layout.fill]
        assert fills == [(c.dst_ptr, c.dst_strides, c.shape) for c in real.layout.fill]
        return
    buffers = {op.name: 0x7E00_0000_0000 + i * (1 << 32) for i, op in enumerate(real.layout.operands) if op.staged}
    sb, s_in, s_out = operands.bind(sym.layout, buffers)
    rb, r_in, r_out = operands.bind(real.layout, buffers)
    for (name, s_spec), (_, r_spec) in zip(gemm.tensor_map_specs(sb, sym.config).items(),
                                           gemm.tensor_map_specs(rb, real.config).items()):
        assert _rebased(s_spec.address, bases) == r_spec.address, name
        assert (s_spec.dims, s_spec.strides, s_spec.box) == (r_spec.dims, r_spec.strides, r_spec.box), name
    for s_copy, r_copy in zip(s_in + s_out, r_in + r_out, strict=True):
        assert (_rebased(s_copy.dst_ptr, bases), _rebased(s_copy.src_ptr, bases)) == (r_copy.dst_ptr, r_copy.src_ptr)
        assert (s_copy.dst_strides, s_copy.src_strides, s_copy.shape) == \
            (r_copy.dst_strides, r_copy.src_strides, r_copy.shape)
    s_args = sym.epilogue.kernel_args(sym.layout.swapped, sym.layout.k)
    r_args = real.epilogue.kernel_args(real.layout.swapped, real.layout.k)
    assert [_rebased(v.value, bases) if isinstance(v, ctypes.c_uint64) else v.value for v in s_args] == \
        [v.value for v in r_args]


def test_run_plans_its_uploads_at_the_address_class_they_will_have():
    """run plans before it uploads: a stepped view uploads as the span of its elements, element 0 where the span's
    lowest byte is not, and the plan must know that class."""
    x = np.zeros((64, 96), dtype=BF16)[::-1, 1:]   # rows reversed: element 0 (row 63) 63 rows past the span's start
    offset = gemm.arrays.upload_offset(x)
    assert offset == 63 * 192
    assert gemm._stand_in(x, "a").ptr % 16 == offset % 16
    assert gemm.arrays.upload_offset(np.zeros((0, 4), BF16)) is None


def test_the_caches_count_plans_made_and_found_and_host_time():
    reset_plan_stats()
    cache = PlanCache(2)
    made = []
    for key in ("x", "y", "x", "z", "x"):
        cache.get(key, lambda: made.append(1) or object())
    assert cache.stats == {"made": 4, "found": 1} and len(cache.plans) == 2   # "x" fell out when "z" came
    stats = plan_stats()
    assert (stats["plans_made"], stats["plan_hits"]) == (4, 1)
    COUNTERS.call(0)   # one call that began at time 0
    assert plan_stats()["calls"] == 1
    reset_plan_stats()
    assert plan_stats()["plans_made"] == 0 and plan_stats()["host_us_per_call"] is None


def test_the_grouped_key_is_the_same_for_new_arrays_of_one_signature():
    def arrays(shift):
        return {"a": StandIn((512, 256), (512, 2), BF16, 0x7000_0000_0000 + shift),
                "b": StandIn((4, 256, 128), (65536, 256, 2), BF16, 0x7100_0000_0000 + shift),
                "counts": StandIn((4,), (4,), np.int32, 0x7200_0000_0000 + shift)}
    assert grouped.signatures(arrays(0)) == grouped.signatures(arrays(1 << 20))
    assert grouped.addresses(arrays(0)) != grouped.addresses(arrays(1 << 20))


def test_an_encoded_map_goes_to_the_kernel_by_value_not_as_an_address():
    """driver.kernel_params passes anything with an integer `ptr` as a device address: a TensorMap must not have
    one (its host address is `host_ptr`), or the kernel would get 8 bytes of host address instead of the map."""
    from cuda.bindings import driver as cu

    from ptxgemm.runtime import driver
    from ptxgemm.runtime.tensormap import TensorMap, TensorMapSpec

    spec = TensorMapSpec(1 << 20, BF16, (64, 64, 1), (128, 8192), (64, 64, 1))
    tmap = TensorMap(spec, cu.CUtensorMap())
    assert not hasattr(tmap, "ptr")
    values, params = driver.kernel_params([tmap])
    assert params[0] == tmap.host_ptr == int(tmap.cu_map.getPtr())


def test_the_runtime_rebases_with_the_planners_address_class():
    from ptxgemm.runtime import patch

    assert patch.ADDRESS_CLASS == binding.ADDRESS_CLASS


def test_run_plans_numpy_scalars_and_extent_one_strides_as_uploaded():
    """run's plan is checked against the uploads' signatures: a numpy float32 scale is a number (folded into
    alpha), and a contiguous array whose extent-1 axis has an odd numpy stride uploads with its order's strides."""
    wide = np.ones((1, 80), np.float32)
    bias = wide[:, :75]                               # C-contiguous for numpy, stride of axis 0 = 320, not 300
    assert bias.flags.c_contiguous and gemm.arrays.upload_strides(bias) == (300, 4)
    a, b = np.ones((16, 32), BF16), np.ones((32, 75), BF16)
    args, od, shape, planned = gemm.plan_run(a, b, bias=bias, scale_a=np.float32(2.0), device=DEFAULT_DEVICE,
                                             spill_check=_no_spills)
    assert planned.signature[4][1] == (300, 4) and planned.signature[5] == ("number", 2.0)
    assert gemm._epilogue_arg(np.float32(2.0), "scale_a", None) == 2.0



@pytest.mark.parametrize("form", ["contiguous", "masked", "k"])
def test_a_grouped_plan_made_on_symbolic_addresses_rebases_to_the_real_one(form):
    """grouped.plan_launch on stand-ins at symbolic addresses, rebased, gives the tensor maps and scalar arguments
    (counts and C pointers among them) of the same call planned at the real addresses."""
    g, k, n, m = 4, 256, 192, 96
    rng = np.random.default_rng(7)

    def at(shape, strides, dtype, role):
        return StandIn(shape, strides, dtype, (int(rng.integers(1 << 32, 1 << 40)) << 8) + 16 * role)

    if form == "contiguous":
        real = {"a": at((400, k), (2 * k, 2), BF16, 0), "b": at((g, k, n), (2 * k * n, 2 * n, 2), BF16, 1),
                "out": at((400, n), (2 * n, 2), BF16, 2)}
    elif form == "masked":
        real = {"a": at((g, m, k), (2 * m * k, 2 * k, 2), BF16, 0), "b": at((g, k, n), (2 * k * n, 2 * n, 2), BF16, 1),
                "out": at((g, m, n), (2 * m * n, 2 * n, 2), BF16, 2)}
    else:   # k-grouped: a (M, total_K) with M contiguous, b (total_K, N)
        real = {"a": at((m, 512), (2, 2 * m), BF16, 0), "b": at((512, n), (2 * n, 2), BF16, 1),
                "out": at((g, m, n), (2 * m * n, 2 * n, 2), BF16, 2)}
    real["counts"] = at((g,), (4,), np.int32, 3)
    real.update(scale_a=None, scale_b=None, bias=None)
    sym = binding.stand_ins(real, grouped.ROLES, lambda name, x: x is not None)

    def plan(args):
        form_arg = "masked_m" if form == "masked" else "offs"
        return grouped.plan_launch(args["a"], args["b"], **{form_arg: args["counts"]}, out=args["out"],
                                   convert=lambda x, name: x, upload=None, allocate=None, sm_count=lambda: 132,
                                   spill_check=_no_spills)

    s_plan, r_plan = plan(sym), plan(real)
    bases = {i: int(real[name].ptr) for i, name in enumerate(grouped.ROLES) if real.get(name) is not None}
    assert s_plan.config == r_plan.config
    for name, s_spec in s_plan.specs.items():
        r_spec = r_plan.specs[name]
        assert _rebased(s_spec.address, bases) == r_spec.address, name
        assert (s_spec.dims, s_spec.strides, s_spec.box) == (r_spec.dims, r_spec.strides, r_spec.box), name
    s_args, r_args = s_plan.scalars(), r_plan.scalars()
    assert [_rebased(v.value, bases) if isinstance(v, ctypes.c_uint64) else v.value for v in s_args] == \
        [v.value for v in r_args]


def test_programmatic_launches_sets_the_attribute_for_plans_made_inside_and_restores_it():
    """driver.programmatic_launches: what a plan reads when it is made (the kernel-duration bench makes its plans
    without PDL through it); the setting before comes back, also when the block raises."""
    from ptxgemm.runtime import driver

    before = driver.PROGRAMMATIC_LAUNCH
    with driver.programmatic_launches(not before):
        assert driver.PROGRAMMATIC_LAUNCH is (not before)
    assert driver.PROGRAMMATIC_LAUNCH is before
    with pytest.raises(RuntimeError):
        with driver.programmatic_launches(False):
            raise RuntimeError("inside")
    assert driver.PROGRAMMATIC_LAUNCH is before
