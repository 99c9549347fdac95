"""The fast.cu peer of the bf16 benchmark without a GPU: which shapes it refuses, and how it is built (a stand-in
nvcc records the command; the real build and its timings need the device and a fast.cu checkout)."""
from __future__ import annotations

import os
import stat

import pytest

from ptxgemm.bench import fastcu
from ptxgemm.errors import ConfigError, ToolchainError
from ptxgemm.toolchain import locate


def test_kernel_12_runs_only_its_tile_multiples():
    assert fastcu.supported(4096, 4096, 4096) is None
    assert fastcu.supported(4096, 14336, 4096) is None
    assert fastcu.supported(3000, 7000, 1000) == ("M = 3000 is not a multiple of 256; N = 7000 is not a multiple of "
                                                  "256; K = 1000 is not a multiple of 64")
    assert fastcu.supported(128, 8192, 8192) == "M = 128 is not a multiple of 256"


def test_a_checkout_without_kernel_12_is_refused_by_name(tmp_path):
    with pytest.raises(ConfigError, match="--fastcu: .* has no examples/matmul/matmul_12.cuh"):
        fastcu.source_dir(str(tmp_path))


def _checkout(tmp_path):
    root = tmp_path / "fast.cu"
    (root / fastcu.HEADER).parent.mkdir(parents=True)
    (root / fastcu.HEADER).write_text("// kernel 12 stand-in\n")
    return root


def _fake_nvcc(tmp_path, body: str):
    path = tmp_path / "nvcc"
    path.write_text("#!/bin/sh\n"
                    'if [ "$1" = "--version" ]; then\n'
                    '  echo "Cuda compilation tools, release 13.0, V13.0.88"; exit 0\n'
                    'fi\n'
                    + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_the_wrapper_is_built_once_with_the_checkout_on_the_include_path(tmp_path, monkeypatch):
    log = tmp_path / "calls"
    # writes the -o target and records its arguments, one line per build
    nvcc = _fake_nvcc(tmp_path, f'echo "$@" >> {log}\n'
                                'while [ $# -gt 0 ]; do if [ "$1" = "-o" ]; then touch "$2"; fi; shift; done\n')
    monkeypatch.setenv(locate.ENV_VARS["nvcc"], str(nvcc))
    monkeypatch.setenv("PTXGEMM_CACHE_DIR", str(tmp_path / "cache"))
    root = fastcu.source_dir(str(_checkout(tmp_path)))
    lib = fastcu.build(root)
    assert lib.is_file() and lib.parent == tmp_path / "cache" / "fastcu"
    assert fastcu.build(root) == lib
    calls = log.read_text().splitlines()
    assert len(calls) == 1
    assert "arch=compute_90a,code=sm_90a" in calls[0] and f"-I{root}" in calls[0]
    source = lib.with_suffix(".cu").read_text()
    assert '#include "examples/matmul/matmul_12.cuh"' in source
    assert "ptxgemm_fastcu_k12(" in source and "ptxgemm_fastcu_reset(" in source


def test_a_failed_build_says_what_nvcc_said(tmp_path, monkeypatch):
    nvcc = _fake_nvcc(tmp_path, 'echo "matmul_12.cuh(3): error: something" >&2\nexit 1\n')
    monkeypatch.setenv(locate.ENV_VARS["nvcc"], str(nvcc))
    monkeypatch.setenv("PTXGEMM_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(ToolchainError, match="building kernel 12 failed(.|\n)*error: something"):
        fastcu.build(_checkout(tmp_path))


def test_an_nvcc_override_that_is_not_a_program_is_named(tmp_path, monkeypatch):
    plain = tmp_path / "not-nvcc"
    plain.write_text("")
    os.chmod(plain, 0o644)
    monkeypatch.setenv(locate.ENV_VARS["nvcc"], str(plain))
    with pytest.raises(ToolchainError, match="PTXGEMM_NVCC=.* is not an executable file"):
        locate.find_tool("nvcc")
