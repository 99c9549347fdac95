"""PTX → cubin with the pip wheel's ptxas: assembling, SASS, the -v report, the cubin cache, and life without ptxas."""
from __future__ import annotations

import importlib.util
import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ptxgemm.errors import ToolchainError
from ptxgemm.kernel import schedule
from ptxgemm.kernel.config import GemmConfig
from ptxgemm.select import cost_model as select
from ptxgemm.toolchain import compiler, locate
from ptxgemm.tools import probes

PTXAS = locate.find_tool("ptxas")
NVDISASM = locate.find_tool("nvdisasm")
needs_ptxas = pytest.mark.skipif(PTXAS is None, reason="ptxas not found (pip install nvidia-cuda-nvcc)")
needs_nvdisasm = pytest.mark.skipif(NVDISASM is None, reason="nvdisasm not found (pip install nvidia-cuda-nvdisasm)")

# A kernel that makes the real ptxas emit advisory C7508: setmaxnreg with no .maxntid, so ptxas cannot know the
# register count at entry. (The pingpong GEMM's register split depends on setmaxnreg being honoured.)
SETMAXNREG_PTX = """.version 8.0
.target sm_90a
.address_size 64
.visible .entry setmaxnreg_without_maxntid(.param .u64 out)
{
    .reg .u32 %r<2>;
    .reg .u64 %rd<2>;
    setmaxnreg.inc.sync.aligned.u32 240;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    st.global.u32 [%rd1], %r1;
    ret;
}
"""

CANNED_LOG = """\
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'gemm_pingpong' for 'sm_90a'
ptxas info    : Function properties for gemm_pingpong
    0 bytes stack frame, 24 bytes spill stores, 16 bytes spill loads
ptxas warning : (C7508) Potential Performance Loss: 'setmaxnreg' ignored; unable to determine register count at entry.
ptxas info    : Used 168 registers, used 3 barriers, 1040 bytes smem, 560 bytes cmem[0]
ptxas info    : Compile time = 12.345 ms
ptxas info    : (C7510) Potential Performance Loss: wgmma.mma_async instructions are serialized due to the presence of Extern calls in the function 'gemm_pingpong'.
ptxas /tmp/ptxgemm-abc/kernel.ptx, line 42; warning : Instruction 'vote' without '.sync' is deprecated
ptxas warning : Registers are spilled to local memory in function 'gemm_pingpong', 24 bytes spill stores, 16 bytes spill loads
ptxas info    : Compiling entry function 'helper_entry' for 'sm_90a'
ptxas info    : Function properties for helper_entry
    8 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers, used 0 barriers, 8 bytes cumulative stack size
ptxas info    : Compile time = 1.000 ms
"""


@pytest.fixture(scope="module")
def probe_ptx() -> str:
    return probes.swizzle_probe_ptx(8, 64)


@pytest.fixture(scope="module")
def probe_kernel(probe_ptx):
    if PTXAS is None:
        pytest.skip("ptxas not found")
    return compiler.compile_ptx(probe_ptx, use_cache=False)


# ---------------------------------------------------------------------------------------------------------------
# The -v report
# ---------------------------------------------------------------------------------------------------------------

def test_parse_canned_report():
    rep = compiler.parse_ptxas_report(CANNED_LOG)
    assert set(rep.functions) == {"gemm_pingpong", "helper_entry"}
    g = rep.functions["gemm_pingpong"]
    assert (g.registers, g.barriers, g.smem_bytes, g.cmem_bytes) == (168, 3, 1040, 560)
    assert (g.stack_bytes, g.spill_store_bytes, g.spill_load_bytes) == (0, 24, 16)
    h = rep.functions["helper_entry"]
    assert (h.registers, h.barriers, h.smem_bytes, h.stack_bytes) == (12, 0, 0, 8)
    assert rep.warning_codes == {"C7508", "C7510"}
    by_code = {w["code"]: w["message"] for w in rep.warnings}
    assert by_code["C7508"].startswith("Potential Performance Loss: 'setmaxnreg' ignored")
    assert "serialized" in by_code["C7510"]
    uncoded = [w["message"] for w in rep.warnings if w["code"] is None]
    assert uncoded == ["line 42: Instruction 'vote' without '.sync' is deprecated",
                       "Registers are spilled to local memory in function 'gemm_pingpong', "
                       "24 bytes spill stores, 16 bytes spill loads"]
    d = rep.to_dict()
    assert d["functions"]["gemm_pingpong"]["registers"] == 168
    assert len(d["warnings"]) == 4
    assert rep.raw == CANNED_LOG


def test_parse_empty_report():
    rep = compiler.parse_ptxas_report("")
    assert rep.functions == {} and rep.warnings == [] and rep.warning_codes == set()


@needs_ptxas
def test_real_report_of_the_probe(probe_kernel):
    rep = probe_kernel.report
    assert set(rep.functions) == {"swizzle_probe_store", "swizzle_probe_load"}, rep.raw
    for f in rep.functions.values():
        assert 0 < f.registers <= 255, rep.raw
        assert f.barriers >= 1, rep.raw  # bar.sync 0
        assert f.spill_store_bytes == 0 and f.spill_load_bytes == 0, rep.raw
        assert f.smem_bytes == 0, rep.raw  # only dynamic shared memory
    assert rep.warnings == [], rep.raw
    assert "Compiling entry function 'swizzle_probe_load' for 'sm_90a'" in rep.raw


@needs_ptxas
def test_real_advisory_is_reported():
    # ptxas 13.x prints this as "ptxas info    : (C7508) ..."; it must still land in the warnings
    kernel = compiler.compile_ptx(SETMAXNREG_PTX, use_cache=False)
    assert "C7508" in kernel.report.warning_codes, kernel.report.raw
    assert kernel.report.functions["setmaxnreg_without_maxntid"].registers > 0


# ---------------------------------------------------------------------------------------------------------------
# Assembling and SASS
# ---------------------------------------------------------------------------------------------------------------

@needs_ptxas
def test_probe_assembles_for_sm90a(probe_kernel, probe_ptx):
    k = probe_kernel
    assert k.cubin is not None and k.cubin[:4] == b"\x7fELF"
    assert k.image() == k.cubin
    assert k.ptx == probe_ptx
    assert k.ptxas == str(PTXAS)
    assert re.fullmatch(r"\d+\.\d+\.\d+", k.ptxas_version), k.ptxas_version
    assert k.cache_hit is False


@needs_ptxas
@needs_nvdisasm
def test_sass_has_tma_and_mbarrier_instructions(probe_kernel):
    sass = probe_kernel.sass()
    opcodes = set(re.findall(r"\b(UTMA[A-Z]+|SYNCS\.[A-Z0-9.]+)", sass))
    assert "UTMASTG" in opcodes, sorted(opcodes)  # the TMA store
    assert "UTMALDG" in opcodes, sorted(opcodes)  # the TMA load
    assert any(op.startswith("SYNCS.") for op in opcodes), sorted(opcodes)  # mbarrier init / arrive / try_wait
    assert any("TRYWAIT" in op for op in opcodes), sorted(opcodes)
    assert "swizzle_probe_store" in sass and "swizzle_probe_load" in sass


@needs_ptxas
def test_ptxas_error_raises_toolchain_error():
    bad = SETMAXNREG_PTX.replace("st.global.u32 [%rd1], %r1;", "st.global.u32 [%rd1], %r9;")
    with pytest.raises(ToolchainError, match=r"ptxas failed \(exit \d+\)[\s\S]*%r9"):
        compiler.compile_ptx(bad, use_cache=False)


# ---------------------------------------------------------------------------------------------------------------
# The cubin cache
# ---------------------------------------------------------------------------------------------------------------

def _cache_entries(root):
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


@needs_ptxas
def test_cache_miss_then_hit(cache_dir, probe_ptx, caplog):
    assert compiler.cache_dir() == cache_dir
    with caplog.at_level(logging.DEBUG, logger="ptxgemm.cache"):
        first = compiler.compile_ptx(probe_ptx)
        second = compiler.compile_ptx(probe_ptx)
    assert first.cache_hit is False
    assert second.cache_hit is True
    assert second.cubin == first.cubin
    assert second.report.to_dict() == first.report.to_dict()
    assert second.ptxas_version == first.ptxas_version
    messages = [r.getMessage() for r in caplog.records if r.name == "ptxgemm.cache"]
    assert len(messages) == 2, messages
    assert messages[0].startswith("cache miss") and str(cache_dir) in messages[0]
    assert messages[1].startswith("cache hit") and str(cache_dir) in messages[1]
    assert all(r.levelno == logging.DEBUG for r in caplog.records if r.name == "ptxgemm.cache")


@needs_ptxas
def test_cache_dir_env_is_honoured(cache_dir, probe_ptx):
    assert _cache_entries(cache_dir) == []
    compiler.compile_ptx(probe_ptx)
    entries = _cache_entries(cache_dir)
    assert len(entries) == 1
    files = sorted(p.name for p in (cache_dir / entries[0]).iterdir())
    assert files == ["kernel.cubin", "meta.json", "ptxas.log"]


@needs_ptxas
def test_other_cache_dir_is_a_miss(cache_dir, probe_ptx, monkeypatch):
    assert compiler.compile_ptx(probe_ptx).cache_hit is False
    assert compiler.compile_ptx(probe_ptx).cache_hit is True
    monkeypatch.setenv("PTXGEMM_CACHE_DIR", str(cache_dir / "elsewhere"))
    assert compiler.compile_ptx(probe_ptx).cache_hit is False
    assert (cache_dir / "elsewhere").is_dir()


@needs_ptxas
def test_different_flags_are_a_miss(cache_dir, probe_ptx):
    assert compiler.compile_ptx(probe_ptx).cache_hit is False
    assert compiler.compile_ptx(probe_ptx, extra_flags=("--warn-on-spills",)).cache_hit is False
    assert compiler.compile_ptx(probe_ptx, extra_flags=("--warn-on-spills",)).cache_hit is True
    assert compiler.compile_ptx(probe_ptx).cache_hit is True
    assert len(_cache_entries(cache_dir)) == 2


@needs_ptxas
def test_different_ptx_is_a_miss(cache_dir, probe_ptx):
    assert compiler.compile_ptx(probe_ptx).cache_hit is False
    assert compiler.compile_ptx(probe_ptx + "// a comment changes the key\n").cache_hit is False
    other = probes.swizzle_probe_ptx(16, 64)
    assert compiler.compile_ptx(other).cache_hit is False
    assert compiler.compile_ptx(other).cache_hit is True
    assert len(_cache_entries(cache_dir)) == 3


@needs_ptxas
def test_use_cache_false_neither_reads_nor_writes(cache_dir, probe_ptx):
    assert compiler.compile_ptx(probe_ptx, use_cache=False).cache_hit is False
    assert _cache_entries(cache_dir) == []
    compiler.compile_ptx(probe_ptx)
    assert compiler.compile_ptx(probe_ptx, use_cache=False).cache_hit is False


# ---------------------------------------------------------------------------------------------------------------
# Finding the tools
# ---------------------------------------------------------------------------------------------------------------

def test_missing_ptxas_falls_back_to_driver_jit(monkeypatch, probe_ptx, caplog):
    monkeypatch.setattr(compiler, "find_tool", lambda tool: None)
    with caplog.at_level(logging.WARNING, logger="ptxgemm.cache"):
        k = compiler.compile_ptx(probe_ptx)
    assert k.cubin is None and k.report is None and k.ptxas is None and k.ptxas_version is None
    image = k.image()
    assert image.endswith(b"\0") and image.count(b"\0") == 1
    assert image[:-1].decode() == probe_ptx
    with pytest.raises(ToolchainError, match="SASS is unavailable"):
        k.sass()
    assert any("ptxas not found" in r.getMessage() for r in caplog.records)


@needs_ptxas
def test_ptxas_override_env(monkeypatch):
    monkeypatch.setenv("PTXGEMM_PTXAS", str(PTXAS))
    assert locate.find_tool("ptxas") == PTXAS


def test_ptxas_override_to_nothing_is_a_clear_error(monkeypatch, tmp_path, probe_ptx):
    missing = tmp_path / "no-such-ptxas"
    monkeypatch.setenv("PTXGEMM_PTXAS", str(missing))
    with pytest.raises(ToolchainError, match="PTXGEMM_PTXAS=.*no-such-ptxas is not an executable file"):
        compiler.compile_ptx(probe_ptx, use_cache=False)


def test_nvdisasm_missing_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(compiler, "find_tool", lambda tool: None)
    with pytest.raises(ToolchainError, match="nvdisasm not found"):
        compiler.disassemble(b"\x7fELF")


@needs_ptxas
def test_tool_version_format():
    assert re.fullmatch(r"\d+\.\d+\.\d+", locate.tool_version(str(PTXAS)))
    assert os.access(PTXAS, os.X_OK)


# ---------------------------------------------------------------------------------------------------------------
# python -m ptxgemm dump / info
# ---------------------------------------------------------------------------------------------------------------

REPO_ROOT = Path(__file__).resolve().parent.parent
# a dump that selects its config must see the same device and no tune cache on every machine
NO_GPU_NO_TUNE_CACHE = {"CUDA_VISIBLE_DEVICES": "", "PTXGEMM_TUNE_CACHE": "off"}


def run_cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "ptxgemm", *args], capture_output=True, text=True, timeout=120,
                          cwd=REPO_ROOT, env={**os.environ, **(env or {})})


@needs_ptxas
@needs_nvdisasm
def test_dump_swizzle_probe(tmp_path):
    out = tmp_path / "dump"
    proc = run_cli("dump", "--kernel", "swizzle_probe", "--mode", "64B", "--rows", "16", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["ptxas.log", "report.json", "swizzle_probe.cubin",
                                                     "swizzle_probe.ptx", "swizzle_probe.sass"]
    assert (out / "swizzle_probe.ptx").read_text() == probes.swizzle_probe_ptx(16, 32)  # 64B: 32 columns
    assert (out / "swizzle_probe.cubin").read_bytes()[:4] == b"\x7fELF"
    sass = (out / "swizzle_probe.sass").read_text()
    assert "UTMASTG" in sass and "UTMALDG" in sass
    report = json.loads((out / "report.json").read_text())
    assert set(report) == {"kernel", "arch", "measured", "params"}
    assert report["kernel"] == "swizzle_probe" and report["arch"] == "sm_90a"
    measured = report["measured"]
    assert measured["ptxas_version"] == locate.tool_version(str(PTXAS))
    assert set(measured["functions"]) == {"swizzle_probe_store", "swizzle_probe_load"}
    assert measured["registers"] == max(f["registers"] for f in measured["functions"].values()) > 0
    assert measured["spills"] == {"store_bytes": 0, "load_bytes": 0}
    assert measured["shared_memory"] == {"static_bytes": 0}
    assert measured["ptxas_warnings"] == [] and measured["warning_codes"] == []
    params = report["params"]
    assert params["mode"] == "64B" and (params["rows"], params["cols"]) == (16, 32)
    assert params["dynamic_shared_bytes"] == 16 * 32 * 2 + 16
    assert "swizzle_probe_load: " in proc.stdout and "ptxas warnings: none" in proc.stdout


@needs_ptxas
def test_dump_report_carries_warnings(tmp_path):
    from ptxgemm.tools import dump

    kernel = compiler.compile_ptx(SETMAXNREG_PTX, use_cache=False)
    report = dump.write_dump("advisory", kernel, tmp_path, {"params": {"dynamic_shared_bytes": 0}})
    assert report["measured"]["warning_codes"] == ["C7508"]
    on_disk = json.loads((tmp_path / "report.json").read_text())
    assert on_disk["measured"]["ptxas_warnings"][0]["code"] == "C7508"
    assert on_disk["measured"]["shared_memory"] == {"static_bytes": 0}
    assert on_disk["params"] == {"dynamic_shared_bytes": 0}


@pytest.mark.parametrize("args, message", [
    (["--kernel", "swizzle_probe", "--mode", "32B", "--cols", "64"], "--cols: with 32B swizzle"),
    (["--kernel", "swizzle_probe", "--rows", "0"], "--rows: a TMA box has 1..256 rows, got 0"),
    (["--kernel", "swizzle_probe", "--mode", "16B"], "--mode: must be one of"),
    (["--kernel", "swizzle_probe", "--m", "128"], "--m: GEMM options, not options of --kernel swizzle_probe"),
    (["--kernel", "gemm", "--rows", "8"], "--rows: options of --kernel swizzle_probe, not of --kernel gemm"),
    (["--kernel", "swizzle_probe", "--block-n", "64", "--config", "pp128x128"],
     "--config, --block-n: GEMM options, not options of --kernel swizzle_probe"),
    (["--m", "-5", "--n", "256", "--k", "128"], "--m: must be >= 1, got -5"),
    (["--m", "256", "--n", "256", "--k", "0"], "--k: must be >= 1, got 0"),
    (["--m", "256", "--k", "128"], "--n: --kernel gemm needs --m, --n and --k"),
    (["--m", "256", "--n", "256", "--k", "128", "--config", "pp128x128", "--block-n", "64", "--stages", "3"],
     "--config: the tag names the tile options itself; give --config or --block-n, --stages, not both"),
    (["--m", "256", "--n", "256", "--k", "128", "--config", "big"], "config tag: 'big' is not"),
    (["--m", "256", "--n", "256", "--k", "128", "--block-n", "100"], "block_n: must be a multiple of 16"),
])
def test_dump_bad_input(tmp_path, capsys, args, message):
    from ptxgemm.cli.main import main

    assert main(["dump", *args, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("python -m ptxgemm dump: error: "), err
    assert message in err[0]
    assert not (tmp_path / "out").exists()


@needs_ptxas
@needs_nvdisasm
def test_dump_gemm(tmp_path):
    if importlib.util.find_spec("ptxgemm.kernel.config") is None or importlib.util.find_spec("ptxgemm.gemm") is None:
        pytest.skip("the GEMM modules are not in this checkout yet")
    out = tmp_path / "gemm"
    proc = run_cli("dump", "--m", "256", "--n", "256", "--k", "128", "--out", str(out), env=NO_GPU_NO_TUNE_CACHE)
    assert proc.returncode == 0, proc.stderr
    for name in ("gemm.ptx", "gemm.cubin", "gemm.sass", "ptxas.log", "report.json"):
        assert (out / name).is_file(), name
    report = json.loads((out / "report.json").read_text())
    assert set(report) == {"kernel", "arch", "measured", "config", "predicted", "problem", "schedule"}
    assert report["kernel"] == "gemm"
    assert report["problem"] == {"m": 256, "n": 256, "k": 128}
    # what ptxas and nvdisasm measured, apart from what the config predicts
    measured, predicted = report["measured"], report["predicted"]
    assert measured["functions"] and measured["ptxas_version"] and measured["registers"] > 0
    assert measured["consumer_k_loop_sass"]["hgmma"] > 0
    assert {"stages", "smem_map", "registers", "smem_bytes"} <= set(predicted)
    assert not {"functions", "ptxas_warnings", "consumer_k_loop_sass"} & set(predicted)
    # no config given: the one ptxgemm selects for the shape, on select's 132-SM default device
    chosen, source = select.choose(256, 256, 128, device=select.DEFAULT_DEVICE)
    assert source == "cost model"
    assert report["config"]["tag"] == chosen.tag and report["config"]["source"] == "selected: cost model"
    assert report["config"]["fields"] == chosen.fields()
    plan = schedule.plan_for(chosen, 256, 256, 128, 132)
    assert report["schedule"] == {**plan.describe(), "sm_count": 132, "device": "no GPU here: 132 SMs assumed"}
    first, second = proc.stdout.splitlines()[:2]
    assert first == f"config {chosen.tag} (selected: cost model): {chosen.describe()}"
    assert second.startswith(f"problem 256x256x128 on 132 SMs (no GPU here: 132 SMs assumed): "
                             f"{plan.tiles_m}x{plan.tiles_n} tiles of 2 k-tiles, grid {plan.grid} CTAs")


@needs_ptxas
@needs_nvdisasm
@pytest.mark.parametrize("options, tag, source", [
    (["--config", "coop256x128c2"], "coop256x128c2", "--config"),
    (["--block-n", "192", "--stages", "4"], "pp128x192s4", "tile options --block-n --stages"),
])
def test_dump_gemm_with_a_given_config(tmp_path, options, tag, source):
    proc = run_cli("dump", "--m", "8192", "--n", "8192", "--k", "8192", *options, "--out", str(tmp_path),
                   env=NO_GPU_NO_TUNE_CACHE)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    assert (report["config"]["tag"], report["config"]["source"]) == (tag, source)
    config = GemmConfig.from_tag(tag)
    assert report["predicted"]["stages"] == config.num_stages
    assert report["schedule"]["waves"] == round(schedule.plan_for(config, 8192, 8192, 8192, 132).waves, 3)


@needs_ptxas
@needs_nvdisasm
@pytest.mark.parametrize("in_dtype, wgmma, majors", [
    ("float8_e4m3fn", "e4m3", []),                                      # the majors default to k for fp8
    ("float8_e5m2", "e5m2", ["--a-major", "k", "--b-major", "k"]),
])
def test_dump_gemm_fp8(tmp_path, in_dtype, wgmma, majors):
    proc = run_cli("dump", "--in-dtype", in_dtype, *majors, "--m", "256", "--n", "256", "--k", "512",
                   "--out", str(tmp_path), env=NO_GPU_NO_TUNE_CACHE)
    assert proc.returncode == 0, proc.stderr
    assert f"k32.f32.{wgmma}.{wgmma}" in (tmp_path / "gemm.ptx").read_text()
    sass = (tmp_path / "gemm.sass").read_text()
    assert "QGMMA.64x" in sass and f".F32.{wgmma.upper()}.{wgmma.upper()}" in sass and "HGMMA" not in sass
    report = json.loads((tmp_path / "report.json").read_text())
    fields = report["config"]["fields"]
    assert (fields["in_dtype"], fields["out_dtype"], fields["a_major"], fields["b_major"]) == \
        (in_dtype, "bfloat16", "k", "k")
    assert report["measured"]["consumer_k_loop_sass"]["hgmma"] > 0   # QGMMA counted


@pytest.mark.parametrize("option", ["--a-major", "--b-major"])
def test_dump_gemm_fp8_refuses_mn_major(tmp_path, capsys, option):
    from ptxgemm.cli.main import main

    assert main(["dump", "--in-dtype", "float8_e4m3fn", option, "mn", "--m", "256", "--n", "256", "--k", "512",
                 "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"python -m ptxgemm dump: error: {option}: mn with --in-dtype "
                                               f"float8_e4m3fn: fp8 operands are K-major only"), err
    assert not (tmp_path / "out").exists()


def test_info(tmp_path):
    proc = run_cli("info", env={"PTXGEMM_CACHE_DIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split(None, 1) for line in proc.stdout.splitlines())
    assert set(lines) == {"ptxas", "nvdisasm", "cache", "templates", "bindings", "device"}
    if PTXAS is not None:
        assert lines["ptxas"].startswith(f"{PTXAS} (version ")
    assert lines["cache"] == f"{tmp_path} (PTXGEMM_CACHE_DIR)"
    proc = run_cli("info", "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert set(info["tools"]) == {"ptxas", "nvdisasm"}
    assert (info["device"] is None) == ("no_device_reason" in info)


def test_info_with_a_broken_override(monkeypatch, capsys):
    from ptxgemm.cli.main import main

    monkeypatch.setenv("PTXGEMM_NVDISASM", "/nonexistent/nvdisasm")
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "nvdisasm   error: PTXGEMM_NVDISASM=/nonexistent/nvdisasm is not an executable file" in out


def test_ci_runs_the_readme_test_command():
    readme = (REPO_ROOT / "README.md").read_text()
    ci = (REPO_ROOT / ".ci" / "run").read_text()
    marker = "# 2. install and run the tests"
    assert marker in readme
    command = readme.split(marker, 1)[1].splitlines()[1].strip()
    assert command == "python -m pip install -e '.[test]' && python -m pytest -q"
    ci_commands = [line.strip() for line in ci.splitlines() if line.strip() and not line.strip().startswith("#")]
    assert "set -euo pipefail" in ci_commands
    assert any(line.startswith(command) for line in ci_commands), ci_commands
    assert os.access(REPO_ROOT / ".ci" / "run", os.X_OK)
