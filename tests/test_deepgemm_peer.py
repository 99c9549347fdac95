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


def test_summarize_spreads_the_deepgemm_ratios_of_dense_and_grouped_runs():
    """bench --summarize: vs_deepgemm* of the dense runs as each run's geomean's spread; a grouped run's kernel
    ratios once per case (every peer's row of a case carries them)."""
    from ptxgemm.bench import summary

    def dense(v):
        return {"gpu": "NVIDIA H200", "in_dtype": "float8_e4m3fn", "scaling": "block", "epilogue": "none",
                "rows": [{"M": 4096, "N": 7168, "K": 2048, "ratio": 1.2, "vs_deepgemm_kernel_flushed": v},
                         {"M": 64, "N": 7168, "K": 2048, "ratio": 1.1, "vs_deepgemm_kernel_flushed": v / 2}]}

    out = summary.summarize({"a.json": dense(1.0), "b.json": dense(0.8), "c.json": dense(0.9)})
    (group,) = out.values()
    s = group["other_geomeans"]["vs_deepgemm_kernel_flushed"]
    assert (s["n"], s["min"], s["median"], s["max"]) == (3, pytest.approx(0.8 / 2 ** 0.5),
                                                         pytest.approx(0.9 / 2 ** 0.5), pytest.approx(1 / 2 ** 0.5))

    def grouped(v):
        rows = [{"case": c, "peer": p, "speedup": 1.1, "vs_deepgemm_kernel_flushed": v * f}
                for c, f in (("c1", 1.0), ("c2", 4.0)) for p in ("DeepGEMM", "ptxgemm matmul per group")]
        return {"gpu": "NVIDIA H200", "set": "grouped", "rows": rows}

    g = summary.summarize_grouped([("r1", grouped(0.5)), ("r2", grouped(1.0))])
    k = g["kernel_geomeans"]["vs_deepgemm_kernel_flushed"]
    assert (k["n"], k["min"], k["max"]) == (2, pytest.approx(1.0), pytest.approx(2.0))
    assert "geomean vs_deepgemm_kernel_flushed" in summary.format_summary({"NVIDIA H200 [grouped]": g})


def test_a_grouped_row_has_both_kernel_methods_fields_measured_or_not():
    """grouped_bench.kernel_fields: per method (plain, L2 flushed) ptxgemm's ms, its TFLOP/s over the published
    figure, DeepGEMM's ms and DeepGEMM's ms over ptxgemm's; every field present (None) where nothing was measured."""
    from ptxgemm.bench import grouped_bench

    flops = 2e12
    measured = {"": {"ptxgemm": 2.0, deepgemm_peer.NAME: 1.9}, "_flushed": {"ptxgemm": 2.5}}
    f = grouped_bench.kernel_fields(measured, flops, published_tflops=500.0)
    assert f["ptxgemm_kernel_ms"] == 2.0 and f["vs_published_kernel"] == pytest.approx(2.0)   # 1000 TFLOP/s / 500
    assert f["deepgemm_kernel_ms"] == 1.9 and f["vs_deepgemm_kernel"] == pytest.approx(0.95)
    assert f["ptxgemm_kernel_flushed_ms"] == 2.5 and f["vs_published_kernel_flushed"] == pytest.approx(1.6)
    assert f["deepgemm_kernel_flushed_ms"] is None and f["vs_deepgemm_kernel_flushed"] is None
    empty = grouped_bench.kernel_fields({s: {} for s in grouped_bench.KERNEL_METHODS}, flops, None)
    assert set(empty) == set(f) and all(v is None for v in empty.values())
