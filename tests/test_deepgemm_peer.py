"""DeepGEMM as a bench peer (ptxgemm/bench/deepgemm_peer.py): the checks, the libstdc++ preload and the layouts it
hands DeepGEMM, on the CPU. The peer itself runs only on the device (bench --deepgemm)."""
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from ptxgemm.bench import deepgemm_peer
from ptxgemm.errors import ConfigError


def _checkout(root):
    for f in deepgemm_peer.CHECKOUT_FILES:
        (root / f).parent.mkdir(parents=True, exist_ok=True)
        (root / f).write_text("")
    return root


def test_source_dir_names_the_missing_files(tmp_path):
    with pytest.raises(ConfigError, match=r"--deepgemm: .* is not a DeepGEMM checkout .*third-party/cutlass"):
        deepgemm_peer.source_dir(str(tmp_path))
    assert deepgemm_peer.source_dir(str(_checkout(tmp_path))) == tmp_path
    assert deepgemm_peer.source_dir(deepgemm_peer.INSTALLED) is None


def test_build_links_cutlass_where_the_run_time_compiler_looks_and_keeps_a_built_extension(tmp_path):
    root = _checkout(tmp_path)
    (root / "deep_gemm" / "include").mkdir()
    (root / "deep_gemm" / "_C.cpython-312-x86_64-linux-gnu.so").write_text("")   # built already: no setup.py run
    deepgemm_peer.build(root)
    for name in deepgemm_peer.LINKED_HEADERS:
        link = root / "deep_gemm" / "include" / name
        assert link.is_symlink() and link.resolve() == (root / "third-party/cutlass/include" / name).resolve()
    deepgemm_peer.build(root)   # again: the links are kept


def test_a_failed_build_says_so_with_its_log(tmp_path):
    from ptxgemm.errors import ToolchainError

    root = _checkout(tmp_path)
    (root / "deep_gemm" / "include").mkdir()
    (root / "setup.py").write_text("import sys; print('no compiler here'); sys.exit(3)\n")
    with pytest.raises(ToolchainError, match=r"(?s)building DeepGEMM's extension .* failed \(rc 3.*no compiler here"):
        deepgemm_peer.build(root)


def test_mapped_path_reads_the_process_maps():
    maps = ("7f00-7f01 r--p 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
            "7f02-7f03 r--p 00000000 00:00 0 \n"
            "7f04-7f05 r--p 00000000 08:01 2 /usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.33\n")
    assert deepgemm_peer.mapped_path("libstdc++.so", maps) == "/usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.33"
    assert deepgemm_peer.mapped_path("libfoo.so", maps) is None


def test_the_preload_puts_libstdcxx_first_once():
    lib = "/usr/lib/libstdc++.so.6.0.33"
    env = deepgemm_peer.preloaded_env({"LD_PRELOAD": "/x/liba.so " + lib, "PATH": "/bin"}, lib)
    assert env["LD_PRELOAD"] == f"{lib} /x/liba.so" and env["PATH"] == "/bin"
    assert env[deepgemm_peer.REEXEC_MARK] == "1"
    assert deepgemm_peer.preloaded_env({"LD_PRELOAD": lib}, lib) is None
    assert deepgemm_peer.preloaded_env({}, lib)["LD_PRELOAD"] == lib


def test_libstdcxx_path_is_the_one_this_process_maps():
    path = deepgemm_peer.libstdcxx_path()
    assert os.path.basename(path).startswith("libstdc++.so") and os.path.isfile(path)


def test_the_command_starts_again_with_the_preload_and_only_once(tmp_path):
    """ensure_libstdcxx_first re-executes the interpreter's own command line with LD_PRELOAD set; the second start
    sees its mark and goes on."""
    script = tmp_path / "s.py"
    script.write_text("import os, sys\n"
                      "from ptxgemm.bench import deepgemm_peer\n"
                      "print('start', os.environ.get('LD_PRELOAD', '-'), sys.argv[1:], flush=True)\n"
                      "deepgemm_peer.ensure_libstdcxx_first()\n"
                      "print('past', flush=True)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", deepgemm_peer.REEXEC_MARK)}
    proc = subprocess.run([sys.executable, str(script), "--x", "1"], capture_output=True, text=True, env=env,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "start - ['--x', '1']" and "starting again with LD_PRELOAD=" in lines[1]
    assert lines[2].startswith("start /") and "libstdc++.so" in lines[2] and lines[2].endswith("['--x', '1']")
    assert lines[3:] == ["past"]


def test_dense_operands_are_the_bench_bytes_in_deepgemm_layouts():
    rng = np.random.default_rng(0)
    m, n, k = 64, 256, 384
    a = rng.standard_normal((m, k), dtype=np.float32).astype(ml_dtypes.float8_e4m3fn)
    b = np.asfortranarray(rng.standard_normal((k, n), dtype=np.float32).astype(ml_dtypes.float8_e4m3fn))
    sa, sb = rng.uniform(0.5, 2, (m, k // 128)).astype(np.float32), rng.uniform(0.5, 2, (k // 128, n // 128)).astype(np.float32)
    da, dbt, dsa, dsbt = deepgemm_peer.dense_operands(a, b, sa, sb)
    assert dbt.shape == (n, k) and dbt.flags.c_contiguous and np.shares_memory(dbt, b)   # the same bytes
    assert np.array_equal(dbt.view(np.uint8), b.T.view(np.uint8))
    assert dsbt.shape == (n // 128, k // 128) and dsbt.flags.c_contiguous and np.array_equal(dsbt, sb.T)
    # what DeepGEMM computes from them, D = (A * sfa) @ (B^T * sfb)^T with its 1x128 and 128x128 blocks, is the
    # bench's own reference (scale_a . A) @ (B . scale_b)
    expand_a = np.repeat(dsa, 128, axis=1)
    expand_b = np.repeat(np.repeat(dsbt, 128, axis=0), 128, axis=1)
    theirs = (da.astype(np.float64) * expand_a) @ (dbt.astype(np.float64) * expand_b).T
    ours = (a.astype(np.float64) * np.repeat(sa, 128, axis=1)) @ (
        b.astype(np.float64) * np.repeat(np.repeat(sb, 128, axis=0), 128, axis=1))
    np.testing.assert_allclose(theirs, ours, rtol=1e-12)
    with pytest.raises(ValueError, match="B column-major"):
        deepgemm_peer.dense_operands(a, np.ascontiguousarray(b), sa, sb)


def test_row_groups_name_every_rows_group():
    assert deepgemm_peer.row_groups((2, 0, 3)).tolist() == [0, 0, 2, 2, 2]
    assert deepgemm_peer.row_groups((2, 0, 3)).dtype == np.int32
