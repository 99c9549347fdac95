"""ptxgemm.torch on the GPU: every op against a float64 reference with ptxgemm.accuracy's elementwise bounds, the
gradients, torch.compile(fullgraph=True), CUDA graph capture and replay with new values and new group counts, the
drop-in layers and the transformers experts implementation. Each test skips, saying why, without torch, CUDA or
transformers.

Outputs are poisoned: the op allocates its result from torch's caching allocator, so each check first frees a
NaN-filled block of the result's size on the same stream, asserts the op's result landed there, and so sees any
element the kernel did not write."""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

from ptxgemm import ConfigError, accuracy
from torch_peer import host_values, require_torch_cuda

gpu = pytest.mark.gpu


def _torch():
    return require_torch_cuda("the ptxgemm.torch tests")


def _pt():
    _torch()
    import ptxgemm.torch as pt
    return pt


@contextlib.contextmanager
def poisoned(shape, dtype):
    """Free a NaN-filled block of the result's size just before the op, and check the op's result took it."""
    torch = _torch()
    block = torch.full(shape, float("nan"), dtype=dtype, device="cuda")
    ptr = block.data_ptr()
    del block
    got = {}
    yield got
    assert got["out"].data_ptr() == ptr, "the result did not reuse the poisoned block: the test checks nothing"


def _check(out, ref, bound, what=""):
    verdict = accuracy.check_bound(host_values(out).astype(np.float64), ref, bound)
    assert verdict.ok, f"{what}: {verdict}"


def _rand(shape, dtype, gen, scale=1.0):
    torch = _torch()
    return (torch.randn(shape, device="cuda", generator=gen) * scale).to(dtype)


M, N, K = 1000, 776, 520          # partial tiles in every dimension


# ------------------------------------------------------------------------------------------------------------------
# mm
# ------------------------------------------------------------------------------------------------------------------

@gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("epilogue", [{}, {"bias": True}, {"bias": True, "activation": "gelu"},
                                      {"alpha": 0.5, "activation": "silu"}, {"c": True, "beta": -1.0}])
def test_mm_matches_the_float64_reference(dtype, epilogue):
    torch, pt = _torch(), _pt()
    tdt = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(1)
    a, w = _rand((M, K), tdt, gen), _rand((N, K), tdt, gen)         # w: a Linear's (out, in) weight
    kw, args = {}, {}
    if epilogue.get("bias"):
        kw["bias"] = _rand((N,), tdt, gen)
        args["bias"] = host_values(kw["bias"])
    if epilogue.get("c"):
        kw["c"], kw["beta"] = _rand((M, N), tdt, gen), epilogue["beta"]
        args["c"], args["beta"] = host_values(kw["c"]), epilogue["beta"]
    for name in ("alpha", "activation"):
        if name in epilogue:
            kw[name] = args[name] = epilogue[name]
    with poisoned((M, N), tdt) as got:
        got["out"] = out = pt.mm(a, w.t(), **kw)
    torch.cuda.synchronize()
    ref, bound = accuracy.fused_reference(host_values(a), host_values(w).T, args, dtype)
    _check(out, ref, bound, f"mm {dtype} {epilogue}")


@gpu
def test_mm_batched_activations_over_one_weight_and_row_major_b():
    torch, pt = _torch(), _pt()
    gen = torch.Generator(device="cuda").manual_seed(2)
    x, b = _rand((3, 200, K), torch.bfloat16, gen), _rand((K, N), torch.bfloat16, gen)   # b row-major: MN-major
    with poisoned((3, 200, N), torch.bfloat16) as got:
        got["out"] = out = pt.mm(x, b)
    torch.cuda.synchronize()
    for i in range(3):
        ref, absprod = accuracy.reference(host_values(x[i]), host_values(b))
        _check(out[i], ref, accuracy.error_bound(ref, absprod, K, "bfloat16", "bfloat16"), f"batch {i}")


@gpu
@pytest.mark.parametrize("epilogue", [{}, {"bias": True}, {"bias": True, "activation": "silu"},
                                      {"activation": "relu", "alpha": 2.0}])
def test_mm_gradients_against_float64(epilogue):
    """dA = dP @ W, dW = dP^T @ A (W's layout), dbias = column sums of dP, with dP = dC * act'(P). Without an
    activation dP is dC exactly, and dA, dW get the GEMM bound of their own K (N, resp. M). With one, dP carries
    the bf16 rounding of act'(P) * dC (2^-8 relative) and of the recomputed P; the bound is then 2^-6 of
    |dP| @ |W| (twice the 2^-8 + 2^-8 of the two roundings) plus the GEMM's."""
    torch, pt = _torch(), _pt()
    gen = torch.Generator(device="cuda").manual_seed(3)
    m, n, k = 384, 264, 520
    x = _rand((m, k), torch.bfloat16, gen).requires_grad_(True)
    w = _rand((n, k), torch.bfloat16, gen).requires_grad_(True)
    bias = _rand((n,), torch.bfloat16, gen).requires_grad_(True) if epilogue.get("bias") else None
    g = _rand((m, n), torch.bfloat16, gen)
    alpha, act = epilogue.get("alpha", 1.0), epilogue.get("activation")
    y = pt.mm(x, w.t(), bias=bias, activation=act, alpha=alpha)
    y.backward(g)
    torch.cuda.synchronize()
    x64, w64, g64 = (host_values(t).astype(np.float64) for t in (x, w, g))
    pre = alpha * x64 @ w64.T + (0 if bias is None else host_values(bias).astype(np.float64))
    d_act = pt.activation_derivative(act, torch.from_numpy(pre)).numpy() if act else 1.0
    dp = g64 * d_act
    slack = 2.0 ** -6 if act else 0.0
    for got, ref, absprod, kk in ((x.grad, alpha * dp @ w64, abs(alpha) * np.abs(dp) @ np.abs(w64), n),
                                  (w.grad, alpha * dp.T @ x64, abs(alpha) * np.abs(dp.T) @ np.abs(x64), m)):
        bound = accuracy.error_bound(ref, absprod, kk, "bfloat16", "bfloat16") + slack * absprod
        _check(got, ref, bound, f"gradient {tuple(got.shape)}")
    assert w.grad.stride() == w.stride()
    if bias is not None:
        ref = dp.sum(0)
        bound = 2.0 ** -8 * np.abs(ref) + (m * 2.0 ** -23 + slack) * np.abs(dp).sum(0)
        _check(bias.grad, ref, bound, "bias gradient")


@gpu
def test_compile_fullgraph_runs_forward_and_backward_as_eager_does():
    """torch.compile(fullgraph=True): no graph break (it would raise), and the compiled forward and gradients
    equal the eager ones: the same ptxgemm kernels run (the elementwise act' may be fused by inductor: ulp-level)."""
    torch, pt = _torch(), _pt()
    gen = torch.Generator(device="cuda").manual_seed(4)
    x = _rand((512, 256), torch.bfloat16, gen).requires_grad_(True)
    w1, w2 = (_rand(s, torch.bfloat16, gen, 0.1).requires_grad_(True) for s in ((384, 256), (256, 384)))
    b1 = _rand((384,), torch.bfloat16, gen).requires_grad_(True)

    def mlp(x, w1, b1, w2):
        return pt.mm(pt.mm(x, w1.t(), bias=b1, activation="silu"), w2.t())

    def run(f):
        for t in (x, w1, b1, w2):
            t.grad = None
        y = f(x, w1, b1, w2)
        y.float().square().sum().backward()
        return [y.detach().clone()] + [t.grad.clone() for t in (x, w1, b1, w2)]

    eager = run(mlp)
    compiled = run(torch.compile(mlp, fullgraph=True))
    for e, c in zip(eager, compiled):
        torch.testing.assert_close(c, e, rtol=2 ** -6, atol=2 ** -6 * float(e.abs().max()))
    assert torch.equal(eager[0], compiled[0])      # the forward is the same two kernels, bit for bit


@gpu
def test_the_layers_eager_path_computes_what_the_op_does():
    """Under no_grad a Linear calls the implementation without the dispatcher (ops.eager_ok); the same kernel, the
    same bits as the op."""
    torch, pt = _torch(), _pt()
    gen = torch.Generator(device="cuda").manual_seed(14)
    lin = pt.Linear.from_linear(torch.nn.Linear(520, 776).cuda().to(torch.bfloat16))
    x = _rand((300, 520), torch.bfloat16, gen)
    with torch.no_grad():
        from ptxgemm.torch import ops
        assert ops.eager_ok(x, lin.weight, lin.bias)
        direct = lin(x)
        op = pt.mm(x, lin.weight.t(), bias=lin.bias)
    torch.cuda.synchronize()
    assert torch.equal(direct, op)


@gpu
def test_cuda_graph_replays_with_new_inputs():
    """A Linear stack and a grouped projection captured in a torch.cuda graph (after the warm-up torch asks for),
    replayed on new values and new group counts written in place: each replay equals the eager ops on them."""
    torch, pt = _torch(), _pt()
    gen = torch.Generator(device="cuda").manual_seed(5)
    lin = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(approximate="tanh"),
                              torch.nn.Linear(512, 256)).cuda().to(torch.bfloat16)
    pt.replace_linear(lin)
    we = _rand((8, 128, 256), torch.bfloat16, gen, 0.1)                 # (G, N, K) experts
    static_x = _rand((64, 256), torch.bfloat16, gen)
    static_offs = torch.tensor([8, 8, 20, 33, 40, 41, 60, 64], dtype=torch.int32, device="cuda")

    def step(x, offs):
        return lin(x), pt.grouped_mm(x, we.transpose(-1, -2), offs=offs)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        for _ in range(2):
            step(static_x, static_offs)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        static_out = step(static_x, static_offs)
    for seed, ends in ((6, [0, 10, 10, 30, 31, 50, 64, 64]), (7, [64] * 8)):
        static_x.copy_(_rand((64, 256), torch.bfloat16, torch.Generator(device="cuda").manual_seed(seed)))
        static_offs.copy_(torch.tensor(ends, dtype=torch.int32, device="cuda"))
        graph.replay()
        with torch.no_grad():
            want = step(static_x, static_offs)
        torch.cuda.synchronize()
        assert torch.equal(static_out[0], want[0])
        assert torch.equal(static_out[1], want[1])


# ------------------------------------------------------------------------------------------------------------------
# grouped_mm
# ------------------------------------------------------------------------------------------------------------------

SIZES = [0, 1, 127, 300, 0, 64, 200]           # empty, single-row and unaligned groups
GK, GN = 264, 136


def _groups(sizes, tail=0):
    starts = np.concatenate([[0], np.cumsum(sizes)])
    return starts, int(starts[-1]) + tail


@gpu
@pytest.mark.parametrize("weights", ["(G,N,K) transposed", "(G,K,N) row-major"])
def test_grouped_contiguous_forward_and_gradients(weights):
    torch, pt = _torch(), _pt()
    gen = torch.Generator(device="cuda").manual_seed(8)
    starts, total = _groups(SIZES, tail=40)     # 40 rows past offs[-1]: never written, never read
    g = len(SIZES)
    a = _rand((total, GK), torch.bfloat16, gen).requires_grad_(True)
    if weights.startswith("(G,N,K)"):
        wp = _rand((g, GN, GK), torch.bfloat16, gen, 0.1).requires_grad_(True)
        b = wp.transpose(-1, -2)
    else:
        wp = _rand((g, GK, GN), torch.bfloat16, gen, 0.1).requires_grad_(True)
        b = wp
    offs = torch.tensor(starts[1:], dtype=torch.int32, device="cuda")
    with poisoned((total, GN), torch.bfloat16) as got:
        got["out"] = out = pt.grouped_mm(a, b, offs=offs)
    torch.cuda.synchronize()
    out_np = host_values(out).astype(np.float64)
    assert np.isnan(out_np[starts[-1]:]).all(), "rows past offs[-1] were written"
    a64, b64 = host_values(a).astype(np.float64), host_values(b.detach()).astype(np.float64)
    dc = _rand((total, GN), torch.bfloat16, gen)
    dc[starts[-1]:] = 0
    out.backward(dc)
    torch.cuda.synchronize()
    dc64 = host_values(dc).astype(np.float64)
    da, db = host_values(a.grad).astype(np.float64), host_values(wp.grad).astype(np.float64)
    if not weights.startswith("(G,N,K)"):
        db = db.transpose(0, 2, 1)            # compare as (G, N, K)
    for i in range(g):
        r = slice(starts[i], starts[i + 1])
        ref, absprod = a64[r] @ b64[i], np.abs(a64[r]) @ np.abs(b64[i])
        _check(out[r], ref, accuracy.error_bound(ref, absprod, GK, "bfloat16", "bfloat16"), f"group {i} forward")
        ref, absprod = dc64[r] @ b64[i].T, np.abs(dc64[r]) @ np.abs(b64[i].T)
        assert accuracy.check_bound(da[r], ref, accuracy.error_bound(ref, absprod, GN, "bfloat16", "bfloat16")).ok, f"dA {i}"
        ref, absprod = dc64[r].T @ a64[r], np.abs(dc64[r].T) @ np.abs(a64[r])   # (N, K); zeros when empty
        kk = max(int(starts[i + 1] - starts[i]), 1)
        verdict = accuracy.check_bound(db[i], ref, accuracy.error_bound(ref, absprod, kk, "bfloat16", "bfloat16"))
        assert verdict.ok, f"dB group {i}: {verdict}"
    assert wp.grad.stride() == wp.stride()


@gpu
def test_grouped_masked_and_k_forms():
    torch, pt = _torch(), _pt()
    gen = torch.Generator(device="cuda").manual_seed(9)
    g, m_max = 4, 96
    masked = torch.tensor([0, 96, 33, 1], dtype=torch.int32, device="cuda")
    a, b = _rand((g, m_max, GK), torch.bfloat16, gen), _rand((g, GK, GN), torch.bfloat16, gen)
    with poisoned((g, m_max, GN), torch.bfloat16) as got:
        got["out"] = out = pt.grouped_mm(a, b, masked_m=masked)
    torch.cuda.synchronize()
    for i, rows in enumerate(masked.tolist()):
        assert np.isnan(host_values(out[i, rows:]).astype(np.float64)).all(), f"group {i}: rows past masked_m written"
        if rows:
            ref, absprod = accuracy.reference(host_values(a[i, :rows]), host_values(b[i]))
            _check(out[i, :rows], ref, accuracy.error_bound(ref, absprod, GK, "bfloat16", "bfloat16"), f"masked {i}")
    # the k form: x^T (M, total_K) @ dy (total_K, N) per group of rows, as an MoE weight gradient reads them
    starts, total = _groups(SIZES)
    x, dy = _rand((total, GK), torch.bfloat16, gen), _rand((total, GN), torch.bfloat16, gen)
    offs = torch.tensor(starts[1:], dtype=torch.int32, device="cuda")
    with poisoned((len(SIZES), GK, GN), torch.bfloat16) as got:
        got["out"] = out = pt.grouped_mm(x.t(), dy, offs=offs)
    torch.cuda.synchronize()
    for i in range(len(SIZES)):
        r = slice(starts[i], starts[i + 1])
        ref, absprod = accuracy.reference(host_values(x[r]).T, host_values(dy[r]))
        _check(out[i], ref, accuracy.error_bound(ref, absprod, max(r.stop - r.start, 1), "bfloat16", "bfloat16"),
               f"k {i}")


@gpu
def test_grouped_compiles_fullgraph_and_differentiates_as_eager():
    torch, pt = _torch(), _pt()
    gen = torch.Generator(device="cuda").manual_seed(10)
    starts, total = _groups(SIZES)
    a = _rand((total, GK), torch.bfloat16, gen).requires_grad_(True)
    w = _rand((len(SIZES), GN, GK), torch.bfloat16, gen, 0.1).requires_grad_(True)
    offs = torch.tensor(starts[1:], dtype=torch.int32, device="cuda")

    def f(a, w, offs):
        return pt.grouped_mm(a, w.transpose(-1, -2), offs=offs)

    results = []
    for fn in (f, torch.compile(f, fullgraph=True)):
        a.grad = w.grad = None
        y = fn(a, w, offs)
        y.float().sum().backward()
        results.append((y.detach().clone(), a.grad.clone(), w.grad.clone()))
    for e, c in zip(*results):
        assert torch.equal(e, c)


# ------------------------------------------------------------------------------------------------------------------
# fp8
# ------------------------------------------------------------------------------------------------------------------

@gpu
@pytest.mark.parametrize("scaling", ["tensor", "row", "block"])
def test_scaled_mm_matches_the_dequantized_reference(scaling):
    torch, pt = _torch(), _pt()
    gen = torch.Generator(device="cuda").manual_seed(11)
    m, n, k = 520, 384, 768
    x, w = _rand((m, k), torch.float32, gen), _rand((n, k), torch.float32, gen)
    if scaling == "block":
        xq, sa = pt.quantize_activations(x)
        wq, sw = pt.quantize_weight(w)
        sb = sw.t().contiguous()
    else:
        xq, wq = x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
        shapes = {"tensor": ((1,), (1,)), "row": ((m, 1), (1, n))}[scaling]
        sa, sb = (torch.rand(s, device="cuda", generator=gen) + 0.5 for s in shapes)
    with poisoned((m, n), torch.bfloat16) as got:
        got["out"] = out = pt.scaled_mm(xq, wq.t(), sa, sb)
    torch.cuda.synchronize()
    ref, bound = accuracy.fused_reference(host_values(xq), host_values(wq).T, {"scale_a": host_values(sa), "scale_b": host_values(sb)}, "bfloat16",
                                          block=scaling == "block")
    _check(out, ref, bound, f"scaled_mm {scaling}")


@gpu
def test_fp8_linear_is_the_blockwise_product_of_its_quantized_inputs():
    """Fp8Linear = quantize x per token per 128, then scaled_mm with the weight's 128x128 table and the bias: the
    same numbers as the op on the same quantized inputs, and close to the bf16 layer (e4m3's 3 fraction bits:
    2^-4 per operand, averaged over K to a few percent of the output's norm)."""
    torch, pt = _torch(), _pt()
    gen = torch.Generator(device="cuda").manual_seed(12)
    lin = torch.nn.Linear(768, 384).cuda().to(torch.bfloat16)
    x = _rand((200, 768), torch.bfloat16, gen)
    with torch.no_grad():
        want16 = torch.nn.functional.linear(x, lin.weight, lin.bias).float()
        fp8 = pt.Fp8Linear.from_linear(lin)
        y = fp8(x)
        xq, sx = pt.quantize_activations(x)
        same = pt.scaled_mm(xq, fp8.weight_q.t(), sx, fp8.weight_scale, bias=fp8.bias)
    assert torch.equal(y, same)
    rel = float((y.float() - want16).norm() / want16.norm())
    assert rel < 0.08, rel


@gpu
def test_gradients_through_fp8_and_mixed_dtypes_are_refused_by_name():
    torch, pt = _torch(), _pt()
    a = torch.randn(64, 128, device="cuda").to(torch.float8_e4m3fn).requires_grad_(True)
    w = torch.randn(64, 128, device="cuda").to(torch.float8_e4m3fn)
    y = pt.mm(a, w.t())                                     # fp8 without scales: the forward runs
    with pytest.raises(ConfigError, match="inference only"):
        y.float().sum().backward()
    with pytest.raises(ConfigError, match="b: dtype bfloat16 differs"):
        pt.mm(a.detach(), w.t().to(torch.bfloat16))         # mixed fp8 x bf16: ptxgemm's own rule


# ------------------------------------------------------------------------------------------------------------------
# transformers
# ------------------------------------------------------------------------------------------------------------------

@gpu
def test_transformers_experts_on_ptxgemm_match_the_stock_loop():
    """A tiny Mixtral's MoE block: experts implementation "ptxgemm" against transformers' "eager" loop (cuBLAS per
    expert), same weights and tokens: outputs and every weight's gradient agree to bf16's rounding of the few
    GEMMs in between (2^-6 of the norm)."""
    torch, pt = _torch(), _pt()
    transformers = pytest.importorskip("transformers", reason="transformers is not installed")
    import copy

    cfg = transformers.MixtralConfig(hidden_size=256, intermediate_size=512, num_local_experts=8,
                                     num_experts_per_tok=2, num_hidden_layers=1, num_attention_heads=4,
                                     num_key_value_heads=2, vocab_size=512)
    torch.manual_seed(13)
    stock = transformers.MixtralForCausalLM(cfg).cuda().to(torch.bfloat16)
    stock.set_experts_implementation("eager")
    ours = copy.deepcopy(stock)
    pt.use_in_transformers()
    ours.set_experts_implementation("ptxgemm")
    ids = torch.randint(0, 512, (2, 96), device="cuda")
    losses = []
    for model in (stock, ours):
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        losses.append((out.logits.float(), out.loss.float()))
    rel = float((losses[1][0] - losses[0][0]).norm() / losses[0][0].norm())
    assert rel < 2 ** -6, rel
    for (name, p_s), (_, p_o) in zip(stock.named_parameters(), ours.named_parameters()):
        if p_s.grad is None:
            continue
        err = float((p_o.grad.float() - p_s.grad.float()).norm() / max(float(p_s.grad.float().norm()), 1e-30))
        assert err < 2 ** -5, (name, err)
