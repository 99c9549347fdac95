"""ptxgemm under torch.distributed without a GPU (issue 50): the launcher's environment and options (no torch
needed), and where torch is installed the DTensor sharding rules (ptxgemm.torch.sharding) on shapes, their
placements through DTensor on a fake process group (one process, meta tensors), their lazy registration, and two
torchrun jobs of two CPU ranks on gloo with reference kernels in place of ptxgemm's: the distributed checks
(tests/distributed_checks.py: tensor parallel pt.Linear, activation, experts and inference; FSDP2 steps; eager and
compiled, against the unsharded run) and the distributed model benchmark's harness (tests/distributed_bench_cpu.py:
transformers' Llama and Mixtral at toy widths through ptxgemm.bench.distributed). tests/test_distributed_gpu.py runs
the checks on two GPUs."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ptxgemm.bench import distributed as bench_dist, ranks
from ptxgemm.cli.main import build_parser
from ptxgemm.errors import ConfigError

REPO_ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
ISSUE_FIELDS = {"gpu", "gpus", "parallel", "model", "ptxgemm_tokens_per_s", "stock_tokens_per_s", "loss_rel_err",
                "grad_rel_err", "compiled"}


def child_env() -> dict:
    """The environment of a child job: the repository importable, NVLink multicast off (ranks.SAFE_ENV)."""
    env = ranks.force_safe_env(dict(os.environ))
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


# --- no torch needed ------------------------------------------------------------------------------------------------

def test_safe_env_is_forced_over_inherited_values():
    env = ranks.force_safe_env({"NCCL_NVLS_ENABLE": "1", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "0", "OTHER": "x"})
    assert env == {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
                   "OTHER": "x"}


@pytest.mark.parametrize("visible,local,want", [(None, 1, "1"), ("0,1", 1, "1"), ("4,6", 0, "4"), ("3", 1, "3")])
def test_each_rank_sees_its_own_gpu_as_device_0(monkeypatch, visible, local, want):
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.setenv("LOCAL_RANK", str(local))
    assert ranks.pin_device() == want and os.environ["CUDA_VISIBLE_DEVICES"] == want
    assert os.environ["LOCAL_RANK"] == "0"                       # DeviceMesh sets the device by it
    assert ranks.pin_device() == want                            # twice: the same GPU


def test_a_rank_sees_every_gpu_by_default_or_its_own_when_pinned(monkeypatch):
    monkeypatch.delenv(ranks.RANK_DEVICES_ENV, raising=False)
    assert ranks.rank_devices() == "visible" and ranks.rank_devices("pinned") == "pinned"
    monkeypatch.setenv(ranks.RANK_DEVICES_ENV, "pinned")
    assert ranks.rank_devices() == "pinned" and ranks.rank_devices("visible") == "visible"
    monkeypatch.setenv(ranks.RANK_DEVICES_ENV, "one")
    with pytest.raises(ConfigError, match="^PTXGEMM_RANK_DEVICES: one of visible, pinned, got 'one'"):
        ranks.rank_devices()


@pytest.mark.parametrize("devices, visible, want_visible, want_device", [
    ("visible", "0,1", "0,1", 1),     # torch's way: every GPU visible, cuda:LOCAL_RANK
    ("pinned", "0,1", "1", 0),        # the rank's own GPU only, as device 0
])
def test_init_takes_the_ranks_gpu(monkeypatch, devices, visible, want_visible, want_device):
    torch = pytest.importorskip("torch", reason="torch is not installed: a rank's init imports it")
    import torch.distributed.device_mesh as device_mesh

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    for name, value in (("LOCAL_RANK", "1"), ("RANK", "1"), ("WORLD_SIZE", "2"), *ranks.SAFE_ENV.items()):
        monkeypatch.setenv(name, value)   # all put back after: init rewrites some of them
    taken = {}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(os.environ["CUDA_VISIBLE_DEVICES"].split(",")))
    monkeypatch.setattr(torch.cuda, "set_device", lambda index: taken.setdefault("set_device", index))
    monkeypatch.setattr(torch.distributed, "init_process_group",
                        lambda backend, **kw: taken.setdefault("group", (backend, kw["device_id"])))
    monkeypatch.setattr(device_mesh, "init_device_mesh", lambda device, shape: ("mesh", device, shape))
    _, _, mesh = ranks.init("cuda", devices=devices)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == want_visible and mesh == ("mesh", "cuda", (2,))
    assert taken == {"set_device": want_device, "group": ("nccl", torch.device("cuda", want_device))}


def test_too_few_visible_gpus_are_named(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("LOCAL_RANK", "2")
    with pytest.raises(Exception, match="CUDA_VISIBLE_DEVICES: '0,1' names 2 GPU"):
        ranks.pin_device()


def test_the_launcher_runs_torchrun_standalone():
    cmd = ranks.torchrun_command(2, ["-m", "ptxgemm", "distributed"])
    assert cmd[1:] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", "-m", "ptxgemm",
                       "distributed"]


def test_a_job_past_its_time_is_stopped_with_sigterm_first(tmp_path):
    """torchrun passes SIGTERM to its ranks; the job here writes a file when it gets one."""
    import time

    flag = tmp_path / "stopped"
    code = ("import signal, sys, time, pathlib\n"
            f"signal.signal(signal.SIGTERM, lambda *a: (pathlib.Path({str(flag)!r}).write_text('1'), sys.exit(3)))\n"
            "time.sleep(60)\n")
    start = time.perf_counter()
    with pytest.raises(subprocess.TimeoutExpired):
        ranks.run_job([sys.executable, "-c", code], env=dict(os.environ), timeout=2)
    assert flag.read_text() == "1" and time.perf_counter() - start < 20


def test_the_ranks_get_every_option_spelled_out():
    from ptxgemm.cli import distributed as cli_dist

    args = build_parser(["distributed"]).parse_args(["distributed", "--config", "mixtral-fsdp,llama-tp", "--quick",
                                                     "--repeats", "5", "--name", "r1"])
    sizes = cli_dist.sizes_from(args)
    assert sizes == bench_dist.Sizes(**{**bench_dist.QUICK.__dict__, "repeats": 5})
    argv = cli_dist.rank_argv(args, bench_dist.parse_configs(args.config), ("eager",), sizes)
    assert argv[:5] == ["-m", "ptxgemm", "distributed", "--config", "llama-tp,mixtral-fsdp"]
    again = build_parser(["distributed"]).parse_args(argv[2:])
    assert cli_dist.sizes_from(again) == sizes and again.name == "r1" and again.modes == "eager"


@pytest.mark.parametrize("argv,message", [
    (["--config", "llama-ep"], "--config: 'llama-ep' is not one of"),
    (["--accuracy-batch", "3"], "--accuracy-batch: FSDP splits it over the 2 ranks"),
    (["--layers", "0"], "--layers: must be 1 to"),
    (["--modes", "fast"], "--modes: 'fast' is not one of"),
    (["--name", "a b"], "--name: letters, digits"),
])
def test_bad_options_are_refused_before_any_rank_starts(cli_in_process, tmp_path, argv, message):
    proc = cli_in_process("distributed", *argv, cwd=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_report_names_and_the_rules_of_a_row():
    path = bench_dist.report_path("out", "h200", "tp", "llama3-8b-4l", True, "r1")
    assert path == Path("out/distributed_h200_tp_llama3-8b-4l_compiled_r1.json")
    assert bench_dist.parse_configs("all") == tuple(bench_dist.CONFIGS)
    ours, single, stock = {"logits_rel_err": 0.011, "grad_rel_err": 0.015}, \
        {"logits_rel_err": 0.010, "grad_rel_err": 0.011}, {"logits_rel_err": 0.002, "grad_rel_err": 0.004}
    assert bench_dist.distributed_bound(ours, single, stock)            # past 2**-7, inside one GPU's + TP's own
    assert not bench_dist.distributed_bound({**ours, "logits_rel_err": 0.02}, single, stock)
    assert not bench_dist.distributed_bound({**ours, "grad_rel_err": 0.03}, single, stock)


# --- the rules on shapes --------------------------------------------------------------------------------------------

try:
    import torch
except ImportError:
    torch = None
if torch is not None and torch.distributed.is_available():
    from torch.distributed.tensor import Partial, Replicate, Shard

    from ptxgemm.torch import sharding

    R, P, BF16 = Replicate(), Partial(), torch.bfloat16
    WHY_NOT = None
else:
    WHY_NOT = ("torch is not installed: ptxgemm.torch needs it (pip install 'ptxgemm[torch]')" if torch is None else
               "this torch build has no torch.distributed")
#: the tests from here on need torch with torch.distributed (each is skipped with the reason otherwise)
needs_torch = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")


def _table(rules):
    """{output placement: {argument: placement}} (one rule per output placement in these cases)."""
    return {out: inputs for out, inputs in rules}


@needs_torch
def test_mm_rules_mirror_aten_mm():
    rules = _table(sharding.dense_rules({"a": (64, 32), "b": (32, 48)}, {}, 2))
    assert rules == {R: {"a": R, "b": R}, Shard(0): {"a": Shard(0), "b": R}, Shard(1): {"a": R, "b": Shard(1)},
                     P: {"a": Shard(1), "b": Shard(0)}}


@needs_torch
def test_an_activation_is_never_applied_to_partial_sums():
    rules = _table(sharding.dense_rules({"a": (64, 32), "b": (32, 48)}, {"activation": "gelu"}, 2))
    assert P not in rules and len(rules) == 3


def pl(name: str):
    """"R", "P" or "S<dim>" as a placement (parametrize's arguments are built without torch)."""
    return {"R": R, "P": P}.get(name) or Shard(int(name[1:]))


@needs_torch
@pytest.mark.parametrize("bias,under_cols,under_rows", [((48,), "S0", "R"), ((1, 48), "S1", "R"),
                                                        ((64, 1), "R", "S0")])
def test_bias_and_c_follow_the_output_where_they_span_it(bias, under_cols, under_rows):
    rules = _table(sharding.dense_rules({"a": (64, 32), "b": (32, 48), "bias": bias, "c": (64, 48)}, {}, 2))
    assert rules[Shard(1)]["bias"] == pl(under_cols) and rules[Shard(0)]["bias"] == pl(under_rows)
    assert rules[P]["bias"] == P and rules[P]["c"] == P                   # added once in the sum
    assert rules[Shard(1)]["c"] == Shard(1) and rules[R]["bias"] == R


@needs_torch
@pytest.mark.parametrize("a,b,want", [
    ((4, 64, 32), (32, 48), ("S0", "R")),               # a Linear's activations over a shared weight
    ((4, 64, 32), (4, 32, 48), ("S0", "S0")),
    ((1, 64, 32), (4, 32, 48), ("R", "S0")),            # a broadcasts along the batch
])
def test_batch_axes_shard_alike(a, b, want):
    rules = sharding.dense_rules({"a": a, "b": b}, {}, 2)
    batch = [inputs for out, inputs in rules if out == Shard(0) and inputs["a"] != Shard(1)]
    assert {"a": pl(want[0]), "b": pl(want[1])} in batch


@needs_torch
def test_scales_follow_their_axes():
    a, b = (64, 512), (512, 256)
    per_tensor = _table(sharding.dense_rules({"a": a, "b": b, "scale_a": (1,), "scale_b": (1,)}, {}, 2))
    assert all(v["scale_a"] == R and v["scale_b"] == R for v in per_tensor.values()) and P in per_tensor
    rowwise = _table(sharding.dense_rules({"a": a, "b": b, "scale_a": (64, 1), "scale_b": (1, 256)}, {}, 2))
    assert rowwise[Shard(0)]["scale_a"] == Shard(0) and rowwise[Shard(1)]["scale_b"] == Shard(1)
    assert rowwise[P]["scale_a"] == R and rowwise[P]["scale_b"] == R
    block = _table(sharding.dense_rules({"a": a, "b": b, "scale_a": (64, 4), "scale_b": (4, 2)}, {}, 2))
    assert block[P]["scale_a"] == Shard(1) and block[P]["scale_b"] == Shard(0)
    assert block[Shard(1)]["scale_b"] == Shard(1) and block[Shard(0)]["scale_a"] == Shard(0)
    # K = 384 and N = 384 over 2 ranks would split a 128-block: neither axis is offered
    odd = _table(sharding.dense_rules({"a": (64, 384), "b": (384, 384), "scale_a": (64, 3), "scale_b": (3, 3)}, {},
                                      2))
    assert set(odd) == {R, Shard(0)}


@needs_torch
def test_grouped_rules_per_form():
    contiguous = _table(sharding.grouped_rules({"a": (100, 64), "b": (4, 64, 32), "offs": (4,), "bias": (4, 32)},
                                               {}, 2))
    assert contiguous == {R: {}, Shard(1): {"b": Shard(2), "bias": Shard(1)},
                          P: {"a": Shard(1), "b": Shard(1), "bias": P}}
    masked = _table(sharding.grouped_rules({"a": (4, 16, 64), "b": (4, 64, 32), "masked_m": (4,)}, {}, 2))
    assert masked[Shard(0)] == {"a": Shard(0), "b": Shard(0), "masked_m": Shard(0)} and P in masked
    k_form = _table(sharding.grouped_rules({"a": (48, 100), "b": (100, 32), "offs": (4,)}, {}, 2))
    assert k_form == {R: {}, Shard(2): {"b": Shard(1)}, Shard(1): {"a": Shard(0)}}
    scaled = sharding.grouped_rules({"a": (100, 64), "b": (4, 64, 32), "offs": (4,), "scale_a": (100, 1)}, {}, 2)
    assert scaled == [(R, {})]


# --- the rules through DTensor: a fake process group, meta tensors ------------------------------------------------

@pytest.fixture(scope="module")
def mesh():
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    import ptxgemm.torch  # noqa: F401 - the ops

    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    sharding.register()
    try:
        yield init_device_mesh("cpu", (2,))
    finally:
        dist.destroy_process_group()


def dt(mesh, shape, placement, dtype=None):
    """A DTensor of global `shape` (bfloat16 unless `dtype`) over meta memory (what this rank of two would hold)."""
    from torch.distributed.tensor import DTensor

    dtype = dtype or BF16
    local = list(shape)
    if isinstance(placement, Shard):
        local[placement.dim] //= 2
    return DTensor.from_local(torch.empty(local, dtype=dtype, device="meta"), mesh, [placement], run_check=False)


@needs_torch
def test_dtensor_takes_the_rules(mesh):
    import ptxgemm.torch as pt

    def mm(a, pa, b, pb, **kw):
        return tuple(pt.mm(dt(mesh, a, pa), dt(mesh, b, pb), **kw).placements)

    assert mm((64, 32), Shard(0), (32, 48), R) == (Shard(0),)
    assert mm((64, 32), R, (32, 48), Shard(1)) == (Shard(1),)
    assert mm((64, 32), Shard(1), (32, 48), Shard(0)) == (P,)
    assert mm((64, 32), Shard(1), (32, 48), Shard(0), activation="relu") == (R,)
    assert mm((4, 64, 32), Shard(0), (32, 48), R) == (Shard(0),)
    w = dt(mesh, (48, 32), Shard(0))                                  # ColwiseParallel's weight, read as W^T
    y = pt.mm(dt(mesh, (64, 32), R), w.mT, bias=dt(mesh, (48,), Shard(0)))
    assert tuple(y.placements) == (Shard(1),) and tuple(y.shape) == (64, 48)
    w = dt(mesh, (48, 32), Shard(1))                                  # RowwiseParallel's, a replicated bias
    y = pt.mm(dt(mesh, (64, 32), Shard(1)), w.mT, bias=dt(mesh, (48,), R))
    assert tuple(y.placements) == (P,)
    with torch.inference_mode():                                      # the public op itself meets DTensor
        assert tuple(pt.mm(dt(mesh, (64, 32), Shard(1)), dt(mesh, (32, 48), Shard(0))).placements) == (P,)
    y = pt.mm(dt(mesh, (64, 32), Shard(1)), dt(mesh, (32, 48), Shard(0)), out_dtype=torch.float32)
    assert y.dtype == torch.float32 and tuple(y.placements) == (P,)   # out_dtype is in the sharding cache's key


@needs_torch
def test_dtensor_takes_the_scaled_and_grouped_rules(mesh):
    import ptxgemm.torch as pt

    f8, f32 = torch.float8_e4m3fn, torch.float32
    y = pt.scaled_mm(dt(mesh, (64, 256), Shard(0), f8), dt(mesh, (256, 128), R, f8), dt(mesh, (64, 1), Shard(0), f32),
                     dt(mesh, (1, 128), R, f32))
    assert tuple(y.placements) == (Shard(0),) and y.dtype == BF16
    offs = dt(mesh, (4,), R, torch.int32)
    y = pt.grouped_mm(dt(mesh, (100, 64), R), dt(mesh, (4, 64, 32), Shard(2)), offs=offs)
    assert tuple(y.placements) == (Shard(1),)
    y = pt.grouped_mm(dt(mesh, (100, 64), Shard(1)), dt(mesh, (4, 64, 32), Shard(1)), offs=offs)
    assert tuple(y.placements) == (P,)
    y = pt.grouped_mm(dt(mesh, (4, 16, 64), Shard(0)), dt(mesh, (4, 64, 32), Shard(0)),
                      masked_m=dt(mesh, (4,), Shard(0), torch.int32))
    assert tuple(y.placements) == (Shard(0),) and tuple(y.shape) == (4, 16, 32)


@needs_torch
def test_the_rules_wait_for_torch_distributed_tensor_then_register_on_first_sight():
    """Importing ptxgemm.torch does not import torch.distributed.tensor (0.75 s); a process that imports it later
    gets the rules registered the first time an op meets a DTensor."""
    code = ("import sys, torch, ptxgemm.torch as pt; from ptxgemm.torch import sharding; "
            "print('torch.distributed.tensor' in sys.modules, sharding.PENDING[0]); "
            "import torch.distributed as dist; from torch.testing._internal.distributed.fake_pg import FakeStore; "
            "from torch.distributed.tensor import DTensor, Shard, Replicate, init_device_mesh; "
            "dist.init_process_group('fake', store=FakeStore(), rank=0, world_size=2); "
            "mesh = init_device_mesh('cpu', (2,)); "
            "a = DTensor.from_local(torch.empty(8, 16, dtype=torch.bfloat16, device='meta'), mesh, [Shard(0)]); "
            "b = DTensor.from_local(torch.empty(16, 4, dtype=torch.bfloat16, device='meta'), mesh, [Replicate()]); "
            "print(sharding.PENDING[0], pt.mm(a, b).placements)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120,
                         env=child_env())
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["False True", "True (Shard(dim=0),)"]


# --- two CPU ranks on gloo through torchrun ------------------------------------------------------------------------

def torchrun(script: str, *argv, timeout: float = 400) -> subprocess.CompletedProcess:
    cmd = ranks.torchrun_command(2, [str(TESTS / script), *argv])
    return ranks.run_job(cmd, env=child_env(), cwd=REPO_ROOT, timeout=timeout)


@pytest.fixture(scope="module")
def checks(tmp_path_factory):
    out = tmp_path_factory.mktemp("checks") / "checks.json"
    proc = torchrun("distributed_checks.py", "--device", "cpu", "--out", str(out))
    assert proc.returncode == 0 and out.exists(), proc.stdout[-4000:] + proc.stderr[-4000:]
    return json.loads(out.read_text())


sys.path.insert(0, str(TESTS))
import distributed_checks  # noqa: E402 - beside this file: its check names


@needs_torch
@pytest.mark.parametrize("name", list(distributed_checks.CHECKS))
def test_distributed_check_on_two_cpu_ranks(checks, name):
    r = checks[name]
    assert r["ok"], r["detail"]
    assert r["calls"] >= r["want_calls"]


@pytest.fixture(scope="module")
def bench_rows(tmp_path_factory):
    pytest.importorskip("transformers", reason="transformers is not installed: the model benchmark runs its models")
    out = tmp_path_factory.mktemp("bench")
    proc = torchrun("distributed_bench_cpu.py", "--config", ",".join(bench_dist.CONFIGS), "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert json.loads((out / "errors.json").read_text()) == []
    return {p.name: json.loads(p.read_text()) for p in out.glob("distributed_*.json")}


@needs_torch
@pytest.mark.parametrize("config", list(bench_dist.CONFIGS))
@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_the_benchmark_harness_on_two_cpu_ranks(bench_rows, config, mode):
    arch, parallel = bench_dist.CONFIGS[config]
    model = {"llama": "llama3-8b-2l", "mixtral": "mixtral-8x-2l"}[arch]
    row = bench_rows[f"distributed_cpu_{parallel}_{model}_{mode}_cpu.json"]
    assert ISSUE_FIELDS <= set(row)
    assert row["gpus"] == 2 and row["parallel"] == parallel and row["compiled"] == (mode == "compiled")
    assert row["inside_bound"] and row["loss_rel_err"] < 1e-3 and row["grad_rel_err"] < 0.02
    stock = row["peer"]
    for peer in (stock, "ptxgemm"):
        p = row["peers"][peer]
        assert p["tokens_per_s_min"] <= p["tokens_per_s_median"] <= p["tokens_per_s_max"]
        assert len(p["tokens_per_s_runs"]) == 2
    assert row["stock_tokens_per_s"] == row["peers"][stock]["tokens_per_s_median"]
    assert row["plan_stats"]["calls"] > 0                   # the ptxgemm peer's GEMMs went through the ops
    assert set(row["accuracy"]["peers"]) == {stock, "ptxgemm"} and "single_gpu_ptxgemm" in row
    assert row["tokens_per_iter"] == 2 * 32 * (2 if parallel == "fsdp" else 1)
