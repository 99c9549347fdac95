"""The ranks of a distributed run (issue 50): the environment every process gets, the torchrun command that starts
them, and what a rank does first (its GPU, the process group, the device mesh).

NVLink multicast stays off in every process: NCCL's NVLS algorithms, torch's symmetric memory and NVSHMEM each
create multicast objects (cuMulticastCreate) when they see NVLink, and the machines this project runs on lend GPUs
whose fabric must not be asked for them. SAFE_ENV turns all three off, forced (not setdefault: an inherited "1"
must not win) in the launcher's environment for its children and again in each rank before its process group
starts; nothing here uses symmetric memory.

One GPU per rank, taken one of two ways (RANK_DEVICES, chosen by PTXGEMM_RANK_DEVICES or `init(devices=...)`):
- "visible" (the default), torch's own way: every GPU stays visible and the rank works on cuda:LOCAL_RANK
  (torch.cuda.set_device). ptxgemm runs on whichever device a call's tensors are on (ptxgemm.runtime.devices).
- "pinned": CUDA_VISIBLE_DEVICES narrowed to the rank's GPU before anything initialises CUDA (`pin_device`), which
  the rank then sees as device 0 (the only way before ptxgemm ran on any device but 0). NCCL connects GPUs hidden
  from each other this way (CUDA IPC; since CUDA 10.1 it needs no peer visibility).

Importing this module imports no torch (the CLI builds its command line without it); `init` imports it."""
from __future__ import annotations

import datetime
import os
import subprocess
import sys

from ..errors import ConfigError

#: NVLink multicast off: NCCL's NVLS, torch's symmetric memory, NVSHMEM (the module's docstring says why)
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
#: the variables torchrun sets in each rank
RANK_VARS = ("LOCAL_RANK", "RANK", "WORLD_SIZE")
#: how a rank takes its GPU (the module's docstring), the default first; RANK_DEVICES_ENV picks another for every
#: rank a launcher starts (the ranks inherit the launcher's environment)
RANK_DEVICES = ("visible", "pinned")
RANK_DEVICES_ENV = "PTXGEMM_RANK_DEVICES"
#: how long a collective may wait for the other ranks: a rank that failed alone ends the job in minutes, not in
#: NCCL's default ten (the longest wait between collectives here is one torch.compile, which every rank runs at once)
COLLECTIVE_TIMEOUT_S = 300


def force_safe_env(env=None) -> dict:
    """SAFE_ENV written into `env` (os.environ by default), over whatever it held; returns `env`."""
    env = os.environ if env is None else env
    for key, value in SAFE_ENV.items():
        env[key] = value
    return env


def in_rank() -> bool:
    """Whether this process is a rank that torchrun started (its variables are set)."""
    return all(v in os.environ for v in RANK_VARS)


def rank_env() -> tuple[int, int, int]:
    """(local rank, rank, world size) from torchrun's variables."""
    return tuple(int(os.environ[v]) for v in RANK_VARS)


def rank_devices(devices: str | None = None) -> str:
    """`devices`, or PTXGEMM_RANK_DEVICES, or the default (RANK_DEVICES[0]), checked to be one of RANK_DEVICES."""
    devices = devices if devices is not None else os.environ.get(RANK_DEVICES_ENV) or RANK_DEVICES[0]
    if devices not in RANK_DEVICES:
        raise ConfigError(f"{RANK_DEVICES_ENV}: one of {', '.join(RANK_DEVICES)}, got {devices!r}")
    return devices


def pin_device() -> str:
    """CUDA_VISIBLE_DEVICES narrowed to this rank's GPU (the LOCAL_RANK-th of those visible, or of all), and
    LOCAL_RANK set to 0; call it before CUDA is initialised. Returns the device's id as CUDA_VISIBLE_DEVICES now
    names it."""
    local = int(os.environ["LOCAL_RANK"])
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [v.strip() for v in visible.split(",") if v.strip()] if visible is not None else None
    if ids is None:
        mine = str(local)
    elif len(ids) == 1:
        mine = ids[0]                       # a launcher pinned this rank already
    elif local < len(ids):
        mine = ids[local]
    else:
        raise ConfigError(f"CUDA_VISIBLE_DEVICES: {visible!r} names {len(ids)} GPU(s), too few for local rank "
                          f"{local}")
    os.environ["CUDA_VISIBLE_DEVICES"] = mine
    # and LOCAL_RANK 0, the one GPU this rank now sees: DeviceMesh (and other launchers' readers) set the device by
    # LOCAL_RANK where CUDA is not yet initialised, which would name a GPU this process cannot see
    os.environ["LOCAL_RANK"] = "0"
    return mine


def torchrun_command(nproc: int, argv) -> list[str]:
    """`python -m torch.distributed.run --standalone --nproc-per-node N ARGV` (a free port on this host, one node)."""
    if nproc < 1:
        raise ConfigError(f"--nproc: must be >= 1, got {nproc}")
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *argv]


#: seconds torchrun has to stop its ranks after SIGTERM before it is killed
STOP_GRACE_S = 30


def run_job(cmd, *, env: dict, cwd=None, timeout: float | None = None,
            capture: bool = True) -> subprocess.CompletedProcess:
    """subprocess.run for a torchrun job (SAFE_ENV forced into `env`), except on a timeout: torchrun gets SIGTERM,
    which it passes to its ranks before it exits (the SIGKILL of subprocess.run's own timeout would leave the ranks
    running, holding their GPUs), and SIGKILL only STOP_GRACE_S later; then TimeoutExpired as subprocess.run raises
    it. The job stays in the caller's process group, so a `timeout` around the caller reaches the ranks too."""
    pipe = subprocess.PIPE if capture else None
    with subprocess.Popen(cmd, env=force_safe_env(env), cwd=cwd, stdout=pipe, stderr=pipe, text=True) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                out, err = proc.communicate(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
            raise subprocess.TimeoutExpired(cmd, timeout, out, err) from None
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def launch(nproc: int, argv, *, timeout: float | None = None) -> int:
    """Run ARGV on `nproc` ranks through torchrun, SAFE_ENV forced in their environment; the exit status (torchrun
    ends every rank when one fails)."""
    return run_job(torchrun_command(nproc, argv), env=dict(os.environ), timeout=timeout, capture=False).returncode


def init(device: str = "cuda", devices: str | None = None):
    """What a rank does first: SAFE_ENV forced, its GPU taken (cuda; `devices`: one of RANK_DEVICES, default
    PTXGEMM_RANK_DEVICES's or "visible") and made torch's current device, the process group (nccl on cuda, gloo on
    cpu) and a 1-D device mesh over every rank. Returns (torch, torch.distributed, mesh); the rank's device is
    `rank_device(torch)`."""
    force_safe_env()
    pinned = device == "cuda" and rank_devices(devices) == "pinned"
    if pinned:
        pin_device()
    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh

    local, rank, world = rank_env()
    timeout = datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S)
    if device == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError("device: cuda, but torch sees no CUDA device in this rank")
        index = 0 if pinned else local
        if index >= torch.cuda.device_count():
            raise ConfigError(f"LOCAL_RANK: {local}, but this rank sees {torch.cuda.device_count()} CUDA device(s)")
        torch.cuda.set_device(index)
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", index),
                                timeout=timeout)
    else:
        dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timeout)
    return torch, dist, init_device_mesh(device, (world,))


def rank_device(torch, device: str = "cuda"):
    """The torch device a rank that `init` set up works on: its GPU (torch's current device) on cuda."""
    return torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else torch.device(device)
