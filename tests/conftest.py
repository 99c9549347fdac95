"""Shared test setup.

- Tests marked `gpu` are skipped, with the reason, where no sm_90 CUDA device can be opened
  (`ptxgemm.runtime.driver.no_device_reason()`), and each runs under a watchdog that ends the process with a traceback
  instead of letting a hung kernel hang the test run.
- `cache_dir`: a fresh PTXGEMM_CACHE_DIR for one test, under a session-wide temporary root (`ptxgemm_cache_root`).
  Only tests that test the cache use it; the cache is not redirected for anything else.
- `device_report`: lines (e.g. the ptxas version whose cubin the driver loaded) printed in the terminal summary.
- `no_gpu`: the CUDA driver taken away on any machine, so that a call which slips past its rule to the GPU raises
  NoGpuError rather than the ConfigError the test expects.
- Tests marked `slow` are skipped, with the reason, unless PTXGEMM_FULL_TESTS=1 (as CI sets it), and the light
  counts the heaviest sampling tests take without it are listed in the terminal summary (tests/full_run.py).
"""
from __future__ import annotations

import faulthandler
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:  # so the tests run from a plain checkout too, not only after pip install -e
    sys.path.insert(0, str(REPO_ROOT))

import full_run  # noqa: E402 - tests/ is on sys.path (pytest's rootdir-relative import of this conftest)

#: seconds a single GPU test may take before the watchdog dumps every thread's stack and exits the process
GPU_TEST_TIMEOUT_S = float(os.environ.get("PTXGEMM_TEST_TIMEOUT_S") or 300)

_device_skip: list[str | None] = []  # memoised skip reason; [] = not computed yet
_report_lines: list[str] = []


def gpu_skip_reason() -> str | None:
    """Why `gpu` tests cannot run here, or None. Computed once per session."""
    if not _device_skip:
        from ptxgemm.runtime import driver

        reason = driver.no_device_reason()
        if reason is not None:
            _device_skip.append(f"no CUDA device: {reason}")
        else:
            info = driver.device_info()
            if info.compute_capability != (9, 0):
                cc = "%d%d" % info.compute_capability
                _device_skip.append(f"no sm_90 device: {info.name} is sm_{cc}; ptxgemm's kernels are sm_90a only")
            else:
                _device_skip.append(None)
    return _device_skip[0]


#: `slow` tests marked here rather than in their files (which were being edited elsewhere when the marker came in;
#: a mark or a full_run.pick count in the file itself replaces its line here): node id -> why it is slow (measured
#: on a 2-core machine without a GPU)
SLOW_ELSEWHERE: dict[str, str] = {}   # none now: tests/test_fuzz.py takes a light count itself (full_run.pick)


def mark_slow_elsewhere(items) -> None:
    """Marks SLOW_ELSEWHERE's tests `slow`; a listed test that its file no longer holds fails the collection, so that
    a renamed test cannot leave the table quietly."""
    modules = {item.nodeid.split("::")[0]: item.module for item in items if isinstance(item, pytest.Function)}
    for nodeid in SLOW_ELSEWHERE:
        path, name = nodeid.split("::")
        if path in modules and not hasattr(modules[path], name):
            raise pytest.UsageError(f"tests/conftest.py SLOW_ELSEWHERE names {nodeid}, which {path} does not define")
    for item in items:
        why = SLOW_ELSEWHERE.get(item.nodeid.split("[")[0])
        if why is not None:
            item.add_marker(pytest.mark.slow(why))


def pytest_collection_modifyitems(config, items):
    mark_slow_elsewhere(items)
    if not full_run.FULL:
        for item in items:
            mark = item.get_closest_marker("slow")
            if mark is not None:
                why = f" ({mark.args[0]})" if mark.args else ""
                item.add_marker(pytest.mark.skip(reason=full_run.SKIP_REASON + why))
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    reason = gpu_skip_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in gpu_items:
        item.add_marker(skip)


@pytest.fixture(autouse=True)
def _gpu_watchdog(request):
    """A kernel that never finishes blocks inside the driver, where no Python signal handler runs; faulthandler's
    C-level timer still fires, prints every thread's stack and exits, so the run fails loudly instead of hanging."""
    if request.node.get_closest_marker("gpu") is None:
        yield
        return
    faulthandler.dump_traceback_later(GPU_TEST_TIMEOUT_S, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="session")
def ptxgemm_cache_root(tmp_path_factory) -> Path:
    """A temporary directory for the cubin caches of the tests that test the cache."""
    return tmp_path_factory.mktemp("ptxgemm-cache")


@pytest.fixture
def cache_dir(ptxgemm_cache_root, request, monkeypatch) -> Path:
    """PTXGEMM_CACHE_DIR pointed at an empty directory of this test's own (under the session root)."""
    name = re.sub(r"[^\w.-]+", "_", request.node.nodeid)[-120:]   # the file too: test names repeat across files
    path = ptxgemm_cache_root / name
    assert not path.exists(), f"cache directory {path} reused between tests"
    monkeypatch.setenv("PTXGEMM_CACHE_DIR", str(path))
    return path


@pytest.fixture
def cli_in_process(capsys, monkeypatch):
    """`cli_in_process(*argv, cwd=DIR)`: `python -m ptxgemm ARGV` run by the CLI's main() in this process, from DIR,
    with no GPU to be found (as CUDA_VISIBLE_DEVICES="" hides it from a child), as a CompletedProcess (returncode,
    stdout, stderr). For the many tests of argument checks, which stop before the GPU: each then costs no
    interpreter start and imports (about 0.3 s each on 2 cores). Tests that the installed command starts at all,
    from any directory, stay subprocesses."""
    from ptxgemm.cli.main import main
    from ptxgemm.runtime import driver

    monkeypatch.setattr(driver, "no_device_reason", lambda: "hidden from the test (cli_in_process)")

    def run(*argv, cwd):
        monkeypatch.chdir(cwd)
        capsys.readouterr()
        try:
            code = main(list(argv))
        except SystemExit as e:   # argparse's errors, --help
            code = e.code
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(["python", "-m", "ptxgemm", *argv], code, out, err)

    return run


@pytest.fixture
def bench_refuses(cli_in_process):
    """`bench_refuses(args, pattern, cwd)`: `python -m ptxgemm bench ARGS` (cli_in_process) is refused the way every
    bad option is: exit 2, one line on stderr in argparse's form holding `pattern`, nothing written to `cwd`."""
    def check(args, pattern, cwd):
        proc = cli_in_process("bench", *args, cwd=cwd)
        assert proc.returncode == 2 and pattern in proc.stderr, proc.stderr
        assert proc.stderr.startswith("python -m ptxgemm bench: error: ") and proc.stderr.count("\n") == 1
        assert list(cwd.iterdir()) == []
    return check


class _NoDriver:
    """cuda.bindings' driver module as a machine without a GPU has it: every call fails."""

    def __getattr__(self, name):
        from ptxgemm.errors import NoGpuError

        if name.startswith("__"):   # module introspection (pytest, inspect) must still see an ordinary object
            raise AttributeError(name)
        raise NoGpuError("CUDA_ERROR_NO_DEVICE", f"calling {name}", "the test took the driver away")


@pytest.fixture
def no_gpu(monkeypatch):
    """Every use of the CUDA driver raises NoGpuError, on any machine: each module's `cu` and cuda.bindings' own
    (imported lazily by the tensor maps) replaced, libcuda's direct calls gone, and the cached contexts, pools and
    stream dropped so none is used without it (and no context counted: one device, as on a fresh process)."""
    from ptxgemm.runtime import devices, driver, libcuda

    real = driver.cu
    if real is not None:
        gone = _NoDriver()
        for module in list(sys.modules.values()):
            if getattr(module, "__name__", "").startswith("ptxgemm") and getattr(module, "cu", None) is real:
                monkeypatch.setattr(module, "cu", gone)
        monkeypatch.setattr(sys.modules["cuda.bindings"], "driver", gone)
    monkeypatch.setattr(driver, "_contexts", {})
    monkeypatch.setattr(driver, "_pools", {})
    monkeypatch.setattr(driver, "_LEGACY_STREAM", None)
    monkeypatch.setattr(libcuda, "function", lambda name: None)   # the thread's context unreadable, as without libcuda
    monkeypatch.setattr(devices, "_ours", set())
    monkeypatch.setattr(devices, "several_contexts", False)


@pytest.fixture
def device_report():
    """`device_report("ptxas 13.5.37 cubin loaded")` adds a line to the terminal summary."""
    return _report_lines.append


def pytest_terminal_summary(terminalreporter):
    if full_run.LIGHT:
        terminalreporter.write_sep("-", f"light counts ({full_run.ENV}=1 runs the full ones, as CI does)")
        for line in full_run.LIGHT:
            terminalreporter.write_line(line)
    if _report_lines:
        terminalreporter.write_sep("-", "ptxgemm device report")
        for line in _report_lines:
            terminalreporter.write_line(line)
