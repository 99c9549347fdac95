"""`python -m ptxgemm bench --set training`: the GEMMs of a training step's linear layers, forward, dX and dW, laid
out exactly as autograd lays them out (transposed views, never copies), ptxgemm against cuBLAS (torch.matmul) on the
same torch tensors, by the suite's burst method (issue 47).

For a linear layer with weight W (N, K) row-major, activations x (T, K) and output gradient dY (T, N), both
row-major, at T tokens:

    forward  x @ W.t()    M, N, K = T, N, K       A = x     "k"-major   B = W.t()  "k"-major  (strides (1, K))
    dX       dY @ W       M, N, K = T, K, N       A = dY    "k"-major   B = W      "mn"-major
    dW       dY.t() @ x   M, N, K = N, K, T       A = dY.t() "mn"-major (strides (1, N))   B = x   "mn"-major

Rows with the same (M, N, K, a_major, b_major) are one GEMM and are timed once; each row lists every (model, linear)
it stands for (k and v; gate and up; q and o, whose weights are square here; Llama-3-8B and Mistral-7B share all
but lm_head). torch is needed (the operands are torch tensors, the peer is torch.matmul); it is imported only
when the set runs."""
from __future__ import annotations

import json
import time
from pathlib import Path

from ..errors import ConfigError
from .suite import (METHOD, SAMPLE_ROWS, SAMPLE_SEED, geomean, gpu_slug, read_clocks, rel_err, require_device,
                    sample_rows)
from .row_log import RowLog
from .transformer_models import DIMS


def _widths(d: dict) -> tuple[int, int, int, int, int]:
    return d["hidden_size"], d["intermediate_size"], d["num_attention_heads"], d["num_key_value_heads"], d["vocab_size"]


#: name -> (hidden, intermediate, heads, kv heads, vocab); head_dim = hidden / heads in all four
MODELS = {"qwen2-0.5b": _widths(DIMS["qwen2-0.5b"]), "qwen2-1.5b": _widths(DIMS["qwen2-1.5b"]),
          "llama-3-8b": _widths(DIMS["llama"]),
          "mistral-7b": (4096, 14336, 32, 8, 32000)}   # Mistral-7B-v0.1's config; model.py does not run it
TOKENS = (4096, 16384)
QUICK = (("qwen2-1.5b",), (4096,))    # --quick: (models, tokens)
GEMMS = ("forward", "dX", "dW")
#: gemm -> (layout, A's major, B's major): A (M, K) is "k"-major when K is contiguous; B (K, N) when K is too
LAYOUTS = {"forward": ("x·Wᵀ", "k", "k"), "dX": ("dY·W", "k", "mn"), "dW": ("dYᵀ·X", "mn", "mn")}
#: issue 47's bars, evaluated on a run's rows (and by --summarize on the per-row medians of several runs)
GEOMEAN_BAR, ROW_FLOOR = 1.03, 0.92
CHECKS = (f"geomean >= {GEOMEAN_BAR}", f"no row below {ROW_FLOOR}")
SEED = 47


def linears(model: str) -> dict[str, tuple[int, int]]:
    """linear -> its weight's (out N, in K), as nn.Linear stores it."""
    hidden, inter, heads, kv, vocab = MODELS[model]
    hd = hidden // heads
    return {"q": (heads * hd, hidden), "k": (kv * hd, hidden), "v": (kv * hd, hidden), "o": (hidden, heads * hd),
            "gate": (inter, hidden), "up": (inter, hidden), "down": (hidden, inter), "lm_head": (vocab, hidden)}


def gemm_mnk(gemm: str, tokens: int, n_out: int, k_in: int) -> tuple[int, int, int]:
    return {"forward": (tokens, n_out, k_in), "dX": (tokens, k_in, n_out), "dW": (n_out, k_in, tokens)}[gemm]


def shapes(models=tuple(MODELS), tokens=TOKENS) -> list[dict]:
    """The set's rows (no measurements yet), in step order: tokens, model, linear, forward/dX/dW; a GEMM that
    another (model, linear) already has is that row, which gains the name."""
    rows: dict = {}
    for t in tokens:
        for model in models:
            for linear, (n_out, k_in) in linears(model).items():
                for gemm in GEMMS:
                    m, n, k = gemm_mnk(gemm, t, n_out, k_in)
                    layout, a_major, b_major = LAYOUTS[gemm]
                    row = rows.setdefault((m, n, k, a_major, b_major), {
                        "set": "training", "models": [], "model": model, "linears": [], "role": "", "gemm": gemm,
                        "tokens": t, "weight": [n_out, k_in], "M": m, "N": n, "K": k, "a_major": a_major,
                        "b_major": b_major, "layout": layout, "stands_for": []})
                    row["stands_for"].append(f"{model} {linear}")
                    for key, name in (("models", model), ("linears", linear)):
                        if name not in row[key]:
                            row[key].append(name)
                    row["role"] = "/".join(row["linears"])
    return list(rows.values())


def row_key(row: dict) -> tuple:
    """What makes a row one GEMM (the same in every run of the set)."""
    return row["M"], row["N"], row["K"], row["a_major"], row["b_major"]


def majors(a_strides, b_strides) -> tuple[str | None, str | None]:
    """The majors of A (M, K) and B (K, N) from their element strides ("k": K contiguous, "mn": M or N)."""
    return ("k" if a_strides[1] == 1 else "mn" if a_strides[0] == 1 else None,
            "k" if b_strides[0] == 1 else "mn" if b_strides[1] == 1 else None)


def _names(text: str | None, allowed, option: str, convert=str) -> tuple:
    if text is None:
        return tuple(allowed)
    picked = []
    for s in filter(None, (p.strip() for p in text.split(","))):
        try:
            value = convert(s)
        except ValueError:
            value = None
        if value not in allowed:
            raise ConfigError(f"{option}: {s!r} is not one of {', '.join(map(str, allowed))}")
        if value not in picked:
            picked.append(value)
    if not picked:
        raise ConfigError(f"{option}: names none of {', '.join(map(str, allowed))}")
    return tuple(v for v in allowed if v in picked)   # the set's order, whatever the option's


def parse_models(text: str | None) -> tuple[str, ...]:
    return _names(text, MODELS, "--models")


def parse_tokens(text: str | None) -> tuple[int, ...]:
    return _names(text, TOKENS, "--tokens", int)


def figures(rows) -> dict:
    """Geomean of the ratios overall, per gemm and per tokens, the lowest row and the checks (a row without a
    ratio, one whose ptxgemm plan failed, counts as below the floor)."""
    ratios = [r.get("ratio") for r in rows]
    low = min(rows, key=lambda r: r.get("ratio") or 0.0, default=None)
    low_ratio = (low.get("ratio") or 0.0) if low else None
    g = geomean(ratios)
    return {"geomean": g,
            "geomean_by_gemm": {x: geomean([r.get("ratio") for r in rows if r["gemm"] == x]) for x in GEMMS},
            "geomean_by_tokens": {str(t): geomean([r.get("ratio") for r in rows if r["tokens"] == t])
                                  for t in sorted({r["tokens"] for r in rows})},
            "min_ratio": low_ratio, "min_row": describe(low) if low else None,
            "checks": {CHECKS[0]: g is not None and g >= GEOMEAN_BAR,
                       CHECKS[1]: low_ratio is not None and low_ratio >= ROW_FLOOR}}


def describe(row: dict) -> str:
    more = f"+{len(row['models']) - 1}" if len(row["models"]) > 1 else ""
    return (f"T={row['tokens']} {row['gemm']} {row['role']} {row['model']}{more} "
            f"{row['M']}x{row['N']}x{row['K']} {row['layout']}")


def _operands(torch, row, gen):
    """A and B of the row's GEMM as autograd passes them: views of row-major tensors (random normal bf16)."""
    (n_out, k_in), t = row["weight"], row["tokens"]

    def randn(*shape):
        return torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=gen)
    if row["gemm"] == "forward":
        return randn(t, k_in), randn(n_out, k_in).t()   # x, W.t()
    if row["gemm"] == "dX":
        return randn(t, n_out), randn(n_out, k_in)      # dY, W
    return randn(t, n_out).t(), randn(t, k_in)          # dY.t(), x


def _error(e: Exception) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"


def measure(torch, row: dict, rounds: int, config, variant_configs, gen) -> dict:
    """One row: ptxgemm's plan (`config`; None: the library's selection), each fixed variant and cuBLAS on the same
    operands, interleaved; rel_err of each on the sampled rows against float64."""
    from .. import gemm
    from ..runtime import timing

    a, b = _operands(torch, row, gen)
    if majors(a.stride(), b.stride()) != (row["a_major"], row["b_major"]):   # the table above, kept honest
        raise AssertionError(f"{describe(row)}: strides {a.stride()}, {b.stride()} are not its majors")
    m, n, k = row["M"], row["N"], row["K"]

    def poisoned():   # NaN: an element nobody wrote cannot pass the check
        return torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
    plans, outs, failed = {}, {}, {}
    for label, cfg in [("ptxgemm", config)] + [(f"ptxgemm {c.tag}", c) for c in variant_configs]:
        outs[label] = poisoned()
        try:   # torch tensors read in place through DLPack (ptxgemm.runtime.interop): the views, not copies
            plans[label] = gemm.GemmPlan(a, b, outs[label], cfg)
        except Exception as e:  # noqa: BLE001 - a config that cannot run this GEMM: the row says why
            failed[label] = _error(e)
            del outs[label]
    outs["cublas"] = peer_out = poisoned()
    launchers = {label: p.launch for label, p in plans.items()}
    launchers["cublas"] = lambda: torch.matmul(a, b, out=peer_out)
    times = timing.time_interleaved(launchers, rounds, warmup=3)
    torch.cuda.synchronize()
    idx = torch.from_numpy(sample_rows(m)).cuda()   # dW: rows of dY.t(), i.e. columns of dY
    ref = (a[idx].double() @ b.double()).cpu().numpy()
    errs = {label: rel_err(o[idx].float().cpu().numpy(), ref) for label, o in outs.items()}

    flops = 2.0 * m * n * k
    ours, theirs = times.get("ptxgemm"), times["cublas"]
    main = plans.get("ptxgemm")
    out = {**row, "config": main.config.tag if main and main.config else None,
           "plan": main.layout.describe() if main else None,
           "staged": [op.name for op in main.layout.operands if op.staged] if main else None,
           "ptxgemm_ms": ours, "cublas_ms": theirs, "ratio": theirs / ours if ours else None,
           "ptxgemm_tflops": flops / ours / 1e9 if ours else None, "cublas_tflops": flops / theirs / 1e9,
           "rel_err": errs.get("ptxgemm"), "cublas_rel_err": errs["cublas"], "rel_err_rows": len(idx)}
    if "ptxgemm" in failed:
        out["error"] = failed.pop("ptxgemm")
    tags = {f"ptxgemm {c.tag}": c.tag for c in variant_configs}
    out["variants"] = {tags[x]: times[x] for x in plans if x in tags}
    out["variant_ratios"] = {t: theirs / ms for t, ms in out["variants"].items()}
    out["variant_rel_err"] = {tags[x]: errs[x] for x in plans if x in tags}
    if failed:
        out["variant_errors"] = {tags[x]: e for x, e in failed.items()}
    timed = ([(out["config"], ours)] if ours else []) + list(out["variants"].items())
    if timed:
        tag, ms = min(timed, key=lambda p: p[1])
        out["best_variant"] = {"config": tag, "ms": ms, "ratio": theirs / ms}
    return out


def _line(r: dict) -> str:
    def f(x, spec):
        return format(x, spec) if x is not None else "-"
    return (f"{describe(r):<58} {r['a_major']:>2}/{r['b_major']:<2} | {r['config'] or '-':<14} | "
            f"{f(r['ptxgemm_ms'], '10.4f')} {f(r['ptxgemm_tflops'], '7.1f')} | {r['cublas_ms']:>10.4f} "
            f"{r['cublas_tflops']:>7.1f} | {f(r['ratio'], '6.3f')} | {f(r['rel_err'], '9.2e')} "
            f"{r['cublas_rel_err']:>9.2e}" + (f" | ERROR {r['error']}" if r.get("error") else "")
            + "".join(f" | {t}: {ms:.4f} ms ({r['variant_ratios'][t]:.3f})" for t, ms in r["variants"].items())
            + "".join(f" | {t}: {e}" for t, e in r.get("variant_errors", {}).items()))


def format_figures(fig: dict) -> list[str]:
    def g(x):
        return f"{x:.3f}" if x is not None else "-"
    return [f"geomean cuBLAS ms / ptxgemm ms: {g(fig['geomean'])}; by gemm: "
            + ", ".join(f"{x} {g(v)}" for x, v in fig["geomean_by_gemm"].items()) + "; by tokens: "
            + ", ".join(f"{t} {g(v)}" for t, v in fig["geomean_by_tokens"].items()),
            f"min {g(fig['min_ratio'])}: {fig['min_row']}",
            "checks: " + ", ".join(f"{c} {'PASS' if ok else 'FAIL'}" for c, ok in fig["checks"].items())]


def run(rounds: int, out_dir="bench_out", name: str | None = None, models=tuple(MODELS), tokens=TOKENS,
        config=None, variant_configs=(), tune_cache: str = "off") -> int:
    """Time the set for `models` at `tokens` (any positive counts: the tests run 256), print the table and the
    checks, write bench_<gpu>_training[_<name>].json to `out_dir`. `tune_cache` only labels the run (the caller
    has set PTXGEMM_TUNE_CACHE)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:   # the operands and the peer are torch's
        raise ConfigError("--set training: makes its operands with torch and times torch.matmul beside ptxgemm, so "
                          "it needs torch (pip install 'ptxgemm[torch]')")
    info = require_device()
    import torch

    gen = torch.Generator(device="cuda").manual_seed(SEED)
    config_desc = config.describe() if config else f"library selection (select_config; tune cache {tune_cache})"
    todo = shapes(models, tokens)
    print(f"# {info.name}, {info.sm_count} SMs, driver {info.driver_version_str}; torch {torch.__version__} "
          f"(cuBLAS through torch.matmul); ptxgemm config: {config_desc}; {len(todo)} GEMMs, {rounds} rounds, "
          f"median; ratio = cuBLAS ms / ptxgemm ms (above 1, ptxgemm is faster)", flush=True)
    rows = []
    stem = f"bench_{gpu_slug(info.name)}_training" + (f"_{name}" if name else "")
    log = RowLog(out_dir, stem, {"gpu": info.name, "set": "training", "config": config_desc, "rounds": rounds,
                                 "variants": [c.tag for c in variant_configs], "models": list(models),
                                 "tokens": list(tokens), "method": METHOD})
    for row in todo:
        rows.append(measure(torch, row, rounds, config, variant_configs, gen))
        log.add(rows[-1])
        print(_line(rows[-1]), flush=True)
        torch.cuda.empty_cache()   # the next row's operands differ in size; give the last one's back
    fig = figures(rows)
    for text in format_figures(fig):
        print(text)
    result = {"gpu": info.name, "set": "training", "driver": info.driver_version_str, "sm_count": info.sm_count,
              "torch": torch.__version__, "peer": "cublas (torch.matmul)",
              "torch_bf16_reduced_precision_reduction":
                  torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction,
              "clocks": read_clocks(), "tune_cache": tune_cache, "config": config_desc,
              "variants": [c.tag for c in variant_configs], "rounds": rounds, "method": METHOD,
              "rel_err_method": f"{SAMPLE_ROWS} fixed rows (seed {SAMPLE_SEED}) of each output against float64 "
                                f"(on the GPU), the same for every implementation",
              "models": list(models), "tokens": list(tokens), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
              "geomean": fig["geomean"], "min_ratio": fig["min_ratio"], "checks": fig["checks"],
              "summary": fig, "rows": rows}
    path = Path(out_dir) / f"{stem}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    log.close()
    print(f"wrote {path}")
    return 0
