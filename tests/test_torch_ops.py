"""ptxgemm.torch without a GPU: the ops' fake implementations and schemas, the traced forward and backward graphs
(fake tensors: what torch.compile sees), torch.compile(fullgraph=True) tracing with no graph break, the rules the ops
check, the gradient formulas' pieces, fp8 quantization and the module swap. Skipped where torch is not installed
(the CI machine); tests/test_torch_gpu.py runs the ops."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: ptxgemm.torch needs it (pip install "
                                            "'ptxgemm[torch]')")
pt = pytest.importorskip("ptxgemm.torch")
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from ptxgemm import ConfigError  # noqa: E402
from ptxgemm.torch import autograd as pt_autograd, moe as pt_moe  # noqa: E402

BF16 = torch.bfloat16


def _ops_in(gm) -> list[str]:
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function" and "ptxgemm" in str(n.target)]


def test_importing_ptxgemm_imports_no_torch_but_ptxgemm_torch_registers_the_ops():
    code = "import sys, ptxgemm; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"
    for name in ("mm", "scaled_mm", "grouped_mm"):
        assert hasattr(torch.ops.ptxgemm, name)


@pytest.mark.parametrize("a_shape,b_shape,want", [
    ((64, 32), (32, 48), (64, 48)),
    ((3, 64, 32), (32, 48), (3, 64, 48)),           # a batch over one shared B (a Linear's activations)
    ((3, 64, 32), (1, 32, 48), (3, 64, 48)),        # numpy's broadcasting of batch axes
])
def test_mm_fake_gives_numpys_shape_and_dtype(a_shape, b_shape, want):
    a = torch.empty(a_shape, dtype=BF16, device="meta")
    b = torch.empty(b_shape, dtype=BF16, device="meta")
    out = pt.mm(a, b)
    assert tuple(out.shape) == want and out.dtype == BF16
    assert pt.mm(a, b, out_dtype=torch.float32).dtype == torch.float32


def test_scaled_mm_fake_defaults_to_bfloat16():
    a = torch.empty(64, 256, dtype=torch.float8_e4m3fn, device="meta")
    b = torch.empty(256, 128, dtype=torch.float8_e4m3fn, device="meta")
    s = torch.empty(1, dtype=torch.float32, device="meta")
    out = pt.scaled_mm(a, b, s, s)
    assert tuple(out.shape) == (64, 128) and out.dtype == BF16


@pytest.mark.parametrize("form", ["contiguous", "masked", "k"])
def test_grouped_fake_shapes_per_form(form):
    meta = dict(device="meta")
    if form == "contiguous":
        a, b = torch.empty(100, 64, dtype=BF16, **meta), torch.empty(4, 64, 32, dtype=BF16, **meta)
        kw, want = dict(offs=torch.empty(4, dtype=torch.int32, **meta)), (100, 32)
    elif form == "masked":
        a, b = torch.empty(4, 16, 64, dtype=BF16, **meta), torch.empty(4, 64, 32, dtype=BF16, **meta)
        kw, want = dict(masked_m=torch.empty(4, dtype=torch.int32, **meta)), (4, 16, 32)
    else:
        a, b = torch.empty(48, 100, dtype=BF16, **meta), torch.empty(100, 32, dtype=BF16, **meta)
        kw, want = dict(offs=torch.empty(4, dtype=torch.int32, **meta)), (4, 48, 32)
    assert tuple(pt.grouped_mm(a, b, **kw).shape) == want


def test_forward_and_backward_trace_to_ptxgemm_ops_only():
    """What AOTAutograd sees: the forward is one ptxgemm::mm with the bias and activation fused; the backward
    recomputes the pre-activation (one mm) and takes dA and dW with two more, no aten matmul anywhere."""
    x = torch.randn(64, 32, dtype=BF16, requires_grad=True)
    w = torch.randn(48, 32, dtype=BF16, requires_grad=True)
    b = torch.randn(48, dtype=BF16, requires_grad=True)
    g = torch.randn(64, 48, dtype=BF16)

    def step(x, w, b, g):
        y = pt.mm(x, w.t(), bias=b, activation="silu")
        return torch.autograd.grad(y, (x, w, b), g)

    gm = make_fx(step, tracing_mode="fake")(x, w, b, g)
    assert _ops_in(gm) == ["ptxgemm.dense_launch.default"] * 4, gm.graph   # launch ops only: no autograd kernel
    assert not [n for n in gm.graph.nodes if "aten.mm" in str(n.target) or "aten.bmm" in str(n.target)]
    dx, dw, db = (n.meta["val"] for n in list(gm.graph.nodes)[-1].args[0])
    assert dx.shape == x.shape and dw.shape == w.shape and db.shape == b.shape


def test_the_weight_gradient_lands_in_the_weights_layout():
    """W^T (K-major) as B: dW is computed as (dC^T @ A) directly, so W's gradient is row-major (no copy)."""
    x = torch.randn(64, 32, dtype=BF16, requires_grad=True)
    w = torch.randn(48, 32, dtype=BF16, requires_grad=True)

    def wgrad(x, w):
        return torch.autograd.grad(pt.mm(x, w.t()), w, torch.ones(64, 48, dtype=BF16))[0]

    gm = make_fx(wgrad, tracing_mode="fake")(x, w)
    dw = list(gm.graph.nodes)[-1].args[0].meta["val"]
    assert dw.shape == (48, 32) and dw.stride() == (32, 1)


def test_grouped_backward_is_two_grouped_launches():
    """Contiguous form: dA through the transposed weights, dB through the k-grouped form, each one launch."""
    a = torch.randn(100, 64, dtype=BF16, requires_grad=True)
    w = torch.randn(4, 32, 64, dtype=BF16, requires_grad=True)         # (G, N, K), read K-major
    offs = torch.tensor([10, 10, 60, 90], dtype=torch.int32)

    def step(a, w, offs):
        y = pt.grouped_mm(a, w.transpose(-1, -2), offs=offs)
        return torch.autograd.grad(y, (a, w), torch.ones_like(y))

    gm = make_fx(step, tracing_mode="fake")(a, w, offs)
    assert _ops_in(gm) == ["ptxgemm.grouped_launch.default"] * 3
    da, dw = (n.meta["val"] for n in list(gm.graph.nodes)[-1].args[0])
    assert da.shape == a.shape and dw.shape == w.shape and dw.stride() == w.stride()


class NotRun(Exception):
    """What a compiled function built by `compile_graphs` raises when called: there is no GPU to run it on."""


def compile_graphs(fn):
    """(torch.compile(fn, fullgraph=True) on a backend that records each graph and never runs it, the graphs)."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)

        def never(*args):
            raise NotRun
        return never
    return torch.compile(fn, fullgraph=True, backend=backend), graphs


def test_compile_fullgraph_traces_the_ops_without_a_graph_break():
    """torch.compile(fullgraph=True) raises on any graph break; the backend records the graph and does not run it
    (no GPU here)."""

    def layer(x, w, b, we, offs):
        h = pt.mm(x, w.t(), bias=b, activation="gelu")
        return pt.grouped_mm(h, we.transpose(-1, -2), offs=offs)

    compiled, graphs = compile_graphs(layer)
    args = (torch.randn(64, 32, dtype=BF16), torch.randn(48, 32, dtype=BF16), torch.randn(48, dtype=BF16),
            torch.randn(4, 16, 48, dtype=BF16), torch.tensor([8, 16, 40, 64], dtype=torch.int32))
    with pytest.raises(NotRun):
        compiled(*args)
    assert len(graphs) == 1
    assert sorted(_ops_in(graphs[0])) == ["ptxgemm.grouped_mm.default", "ptxgemm.mm.default"]


def test_a_compiled_training_step_holds_launch_ops_only():
    """What a compiled step runs (AOTAutograd's forward and backward graphs): the launch ops, which have no
    autograd kernel in Python, so each call crosses the dispatcher once; the public ops' autograd kernels ran at
    trace time only."""
    from functorch.compile import make_boxed_func
    from torch._functorch.aot_autograd import aot_function

    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return make_boxed_func(gm)

    def layer(x, w, b, we, offs):
        h = pt.mm(x, w.t(), bias=b, activation="silu")
        return pt.grouped_mm(h, we.transpose(-1, -2), offs=offs)

    meta = dict(dtype=BF16, device="meta", requires_grad=True)   # run on the fakes: no GPU here
    args = (torch.empty(64, 32, **meta), torch.empty(48, 32, **meta), torch.empty(48, **meta),
            torch.empty(4, 16, 48, **meta), torch.empty(4, dtype=torch.int32, device="meta"))
    aot_function(layer, fw_compiler=record, bw_compiler=record)(*args).sum().backward()
    assert len(graphs) == 2
    assert _ops_in(graphs[0]) == ["ptxgemm.dense_launch.default", "ptxgemm.grouped_launch.default"], graphs[0].code
    # the backward: the pre-activation recomputed, dX and dW (dense), dA and dB (grouped)
    assert sorted(_ops_in(graphs[1])) == ["ptxgemm.dense_launch.default"] * 3 + \
        ["ptxgemm.grouped_launch.default"] * 2, graphs[1].code


def test_ops_refuse_host_tensors_by_name():
    a, b = torch.randn(8, 8, dtype=BF16), torch.randn(8, 8, dtype=BF16)
    with pytest.raises(ConfigError, match=r"^a: a cpu tensor"):
        pt.mm(a, b)


def test_the_ops_take_any_cuda_device_and_one_per_call():
    """A call's tensors may be on any CUDA device (fake tensors stand for them: no GPU here), all on one: a tensor on
    another device is named with both devices, before anything is allocated."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from ptxgemm.torch import tensors

    with FakeTensorMode():
        a1, b1 = torch.empty(64, 32, dtype=BF16, device="cuda:1"), torch.empty(32, 48, dtype=BF16, device="cuda:1")
        b0 = torch.empty(32, 48, dtype=BF16, device="cuda:0")
    tensors.check_cuda(a1, "a")
    assert tensors.call_device((("a", a1), ("b", b1), ("out", None), ("bias", None))) == 1
    with pytest.raises(ConfigError, match=r"^b: on CUDA device 0, but a is on CUDA device 1; the arrays of one call"):
        tensors.call_device((("a", a1), ("b", b0)))
    with pytest.raises(ConfigError, match=r"^bias: a cpu tensor"):
        tensors.call_device((("a", a1), ("b", b1), ("bias", torch.ones(48))))


@pytest.mark.parametrize("a_shape,b_shape,rule", [
    ((8,), (8, 8), "2 or more dimensions"),
    ((8, 16), (8, 8), "must equal b's second-to-last"),
    ((2, 8, 8), (3, 8, 8), "do not broadcast"),
])
def test_mm_shape_rules_name_the_arguments(a_shape, b_shape, rule):
    a, b = torch.empty(a_shape, dtype=BF16, device="meta"), torch.empty(b_shape, dtype=BF16, device="meta")
    with pytest.raises(ConfigError, match=rule):
        pt.mm(a, b)


def test_grouped_needs_exactly_one_kind_of_counts():
    a, b = torch.empty(8, 8, dtype=BF16, device="meta"), torch.empty(2, 8, 8, dtype=BF16, device="meta")
    counts = torch.empty(2, dtype=torch.int32, device="meta")
    for kw in ({}, dict(offs=counts, masked_m=counts)):
        with pytest.raises(ConfigError, match="give exactly one"):
            pt.grouped_mm(a, b, **kw)


def test_scaled_mm_refuses_16_bit_inputs():
    a = torch.empty(8, 128, dtype=BF16, device="meta")
    s = torch.empty(1, dtype=torch.float32, device="meta")
    with pytest.raises(ConfigError, match="scaled_mm multiplies fp8"):
        pt.scaled_mm(a, a.t(), s, s)


@pytest.mark.parametrize("activation", ["relu", "silu", "gelu"])
def test_activation_derivatives_match_autograd_of_the_kernels_forms(activation):
    from ptxgemm import accuracy

    p = torch.linspace(-6, 6, 2001, dtype=torch.float64)
    p = p[p.abs() > 1e-3]                 # relu's kink
    pr = p.clone().requires_grad_(True)
    forward = {"relu": torch.relu, "silu": torch.nn.functional.silu,
               "gelu": lambda v: torch.nn.functional.gelu(v, approximate="tanh")}[activation]
    want, = torch.autograd.grad(forward(pr).sum(), pr)
    got = pt_autograd.activation_derivative(activation, p)
    assert torch.allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(accuracy.activation64(activation, p.numpy()), forward(p).numpy(), rtol=1e-12,
                               atol=1e-12)


def test_reduce_to_sums_what_broadcasting_added():
    x = torch.ones(2, 3, 4, 5)
    assert tuple(pt_autograd.reduce_to(x, (4, 5)).shape) == (4, 5)
    assert float(pt_autograd.reduce_to(x, (1, 4, 5))[0, 0, 0]) == 6.0
    assert float(pt_autograd.reduce_to(x, (3, 1, 5))[0, 0, 0]) == 8.0


def test_group_ends_and_rows_groups_agree():
    ids = torch.tensor([0, 0, 2, 2, 2, 3, 5, 5])           # sorted; expert 1 and 4 empty; 5 is a sentinel for G=5
    offs = pt_moe.group_ends(ids, 5)
    assert offs.tolist() == [2, 2, 5, 6, 6] and offs.dtype == torch.int32
    assert pt_autograd.group_of_rows(offs, 8).tolist() == [0, 0, 2, 2, 2, 3, 5, 5]


@pytest.mark.parametrize("shape", [(256, 384), (200, 300)])
def test_blockwise_quantization_round_trips_within_e4m3s_half_ulp(shape):
    torch.manual_seed(0)
    w = torch.randn(shape) * torch.logspace(-3, 2, shape[1])           # columns of very different magnitudes
    q, s = pt.quantize_weight(w)
    blocks = (-(-shape[0] // 128), -(-shape[1] // 128))
    assert q.dtype == torch.float8_e4m3fn and tuple(s.shape) == blocks
    # e4m3 keeps 3 fraction bits: round to nearest is within 2^-4 relative, and subnormals within 2^-10 of the scale
    back = pt.dequantize_weight(q, s)
    full = s.repeat_interleave(128, 0)[:shape[0]].repeat_interleave(128, 1)[:, :shape[1]]
    assert bool(((back - w).abs() <= 2 ** -4 * w.abs() + 2 ** -10 * full).all())
    x = torch.randn(shape)
    xq, sx = pt.quantize_activations(x)
    assert tuple(sx.shape) == (shape[0], blocks[1])
    fullx = sx.repeat_interleave(128, 1)[:, :shape[1]]
    assert bool(((pt.dequantize_activations(xq, sx) - x).abs() <= 2 ** -4 * x.abs() + 2 ** -10 * fullx).all())


def test_replace_linear_shares_parameters_and_counts():
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                torch.nn.Sequential(torch.nn.Linear(64, 16, bias=False)))
    weights = [model[0].weight, model[2][0].weight]
    assert pt.replace_linear(model) == 2
    assert isinstance(model[0], pt.Linear) and isinstance(model[2][0], pt.Linear)
    assert model[0].weight is weights[0] and model[2][0].weight is weights[1]
    assert pt.replace_linear(model) == 0                                    # already swapped


def test_replace_linear_fp8_quantizes_once_and_filters():
    model = torch.nn.Sequential(torch.nn.Linear(256, 128), torch.nn.Linear(128, 256))
    assert pt.replace_linear(model, fp8=True, include=lambda name, m: name == "0") == 1
    assert isinstance(model[0], pt.Fp8Linear) and type(model[1]) is torch.nn.Linear
    assert model[0].weight_q.dtype == torch.float8_e4m3fn
    assert tuple(model[0].weight_scale.shape) == (2, 1) and model[0].weight_scale.is_contiguous()


def test_the_layers_skip_the_dispatcher_only_in_plain_eager_inference(monkeypatch):
    """Linear calls the implementation directly (no dispatch, ~15-20 us less per call) only with plain CUDA
    tensors, no dispatch mode, no torch.compile and no gradient to record; tracing and training take the op. (No
    GPU here: the host tensors stand for CUDA ones, except where the device is what is checked.)"""
    from ptxgemm.torch import ops

    w = torch.nn.Parameter(torch.randn(48, 32, dtype=BF16))
    x = torch.randn(64, 32, dtype=BF16)
    with torch.no_grad():
        assert not ops.eager_ok(x, w, None)                   # a host tensor: the op, which names the rule
    monkeypatch.setattr(ops, "on_cuda", lambda t: True)
    with torch.no_grad():
        assert ops.eager_ok(x, w, None)
    assert not ops.eager_ok(x, w, None)                       # w requires grad and grad mode is on
    assert ops.eager_ok(x, w.detach(), None)
    with torch.no_grad():   # a dispatch mode is active while tracing: the op is recorded
        gm = make_fx(lambda x, w: ops.linear_mm(x, w, None), tracing_mode="fake")(x, w.detach())
    assert _ops_in(gm) == ["ptxgemm.dense_launch.default"]
    lin = pt.Linear.from_linear(torch.nn.Linear(32, 48, dtype=BF16))
    compiled, graphs = compile_graphs(lin)
    with torch.no_grad(), pytest.raises(NotRun):
        compiled(x)
    assert _ops_in(graphs[0]) == ["ptxgemm.mm.default"]     # compiled inference keeps the op too


def test_use_config_pins_and_restores_and_names_a_bad_op():
    from ptxgemm import GemmConfig
    from ptxgemm.torch import ops

    cfg = GemmConfig.from_tag("coop128x256")
    with pt.use_config("mm", cfg):
        assert ops._pinned["mm"] is cfg and ops._pinned["grouped_mm"] is None
    assert ops._pinned["mm"] is None
    with pytest.raises(ConfigError, match="^op: one of"):
        pt.use_config("bmm", cfg)
    pt.clear_plan_cache()
    assert ops.plan_stats() == {"made": 0, "found": 0, "captured": 0}
