"""`python -m ptxgemm` as a whole: its commands, --version, and every option's help (no GPU needed)."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys

import pytest

import ptxgemm
from ptxgemm.cli.main import build_parser, main

COMMANDS = ("demo", "info", "dump", "select", "tune", "fit", "bench", "trace", "mutants", "fuzz", "swizzle-probe",
            "bank-conflicts", "bank-probe", "model", "distributed")


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def options(parser: argparse.ArgumentParser):
    """Every option of `parser` but -h/--help and --version, with its help text as --help prints it."""
    formatter = parser._get_formatter()
    for action in parser._actions:
        if not action.option_strings or isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
            continue
        yield action, (formatter._expand_help(action) if action.help else "")


def every_option():
    parser = build_parser()
    yield "python -m ptxgemm", parser, list(options(parser))
    for name, sub in subparsers(parser).items():
        yield name, sub, list(options(sub))


def test_the_commands():
    assert tuple(subparsers(build_parser())) == COMMANDS


def test_every_option_says_its_default_and_allowed_values():
    """The rule: each option's help contains "default" (a value, "off" for a switch, "none", or "no default" for a
    required one), and an option with a fixed set of values names every one of them."""
    bad = []
    for command, _, opts in every_option():
        for action, text in opts:
            flag = "/".join(action.option_strings)
            if "default" not in text:
                bad.append(f"{command} {flag}: no default in {text!r}")
            if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)) and \
                    not any(word in text for word in ("default off", "default on", "default: ")):
                bad.append(f"{command} {flag}: a switch's help must say whether it is on or off by default: {text!r}")
            for choice in action.choices or ():
                if str(choice) not in text:
                    bad.append(f"{command} {flag}: allowed value {choice!r} not in {text!r}")
    assert not bad, "\n".join(bad)


def test_the_walk_sees_every_command_and_its_options():
    seen = {command: {f for a, _ in opts for f in a.option_strings} for command, _, opts in every_option()}
    assert set(seen) == {"python -m ptxgemm", *COMMANDS}
    assert {"--m", "--config", "--block-n", "--debug", "--out"} <= seen["dump"]
    assert {"--quick", "--rounds", "--shapes", "--set", "--small-m", "--b-major", "--out", "--name", "--config", "--variants",
            "--use-tune-cache",
            "--summarize", "--summarize-out", "--host", "--shape", "--run-shape", "--calls", "--repeats",
            "--json", "--in-dtype", "--scaling", "--scale-a-major", "--epilogue", "--sustained", "--sustained-gap",
            "--fastcu",
            "--deepgemm", "--tokens", "--models", "--pdl"} == seen["bench"]
    assert {"--mode", "--direction", "--rows", "--cols", "--simulate", "--json"} == seen["swizzle-probe"]
    assert {"--op", "--pattern", "--kernel", "--addresses", "--json", "--layout", "--row-bytes", "--pad"} \
        <= seen["bank-conflicts"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_prints_its_help(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: python -m ptxgemm {command}") and "default" in out


def test_version_from_another_directory(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "ptxgemm", "--version"], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout == f"ptxgemm {ptxgemm.__version__}\n"


@pytest.mark.parametrize("argv, line", [
    ([], "python -m ptxgemm: error: the following arguments are required: COMMAND"),
    (["nonsense"], "python -m ptxgemm: error: argument COMMAND: invalid choice: 'nonsense'"),
    (["select", "--m", "1", "--n", "8"], "python -m ptxgemm select: error: the following arguments are required: --k"),
    (["dump", "--out", "x", "--m", "many"], "python -m ptxgemm dump: error: argument --m: invalid int value: 'many'"),
])
def test_argparse_errors_are_one_line_and_exit_2(argv, line, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out, err = capsys.readouterr()
    assert exc.value.code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(line), err


def test_the_console_script_is_the_same_main():
    """pyproject's [project.scripts] ptxgemm = ptxgemm.cli.main:main; checked without installing."""
    import tomllib
    from pathlib import Path

    pyproject = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())
    assert pyproject["project"]["scripts"] == {"ptxgemm": "ptxgemm.cli.main:main"}
    assert pyproject["project"]["version"] == ptxgemm.__version__


def test_importing_ptxgemm_and_building_the_parser_imports_no_optional_peer():
    code = ("import sys, ptxgemm; from ptxgemm.cli.main import build_parser; build_parser(); "
            "print(sorted(m for m in ('torch', 'cupy', 'matplotlib') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


#: the optional peers and frameworks `import ptxgemm` and its torch-free modules must never load (the brief: import
#: ptxgemm never imports a framework; the benchmarks and tools import theirs when they run)
OPTIONAL = ("torch", "transformers", "cupy", "jax", "matplotlib")


@pytest.mark.parametrize("modules", [
    ("ptxgemm", "ptxgemm.gemm", "ptxgemm.runtime.driver"),
    ("ptxgemm.runtime.graph", "ptxgemm.bench.host_cost"),
    ("ptxgemm.tools.trace",),
    ("ptxgemm.bench.distributed", "ptxgemm.bench.ranks", "ptxgemm.cli.distributed"),
    ("ptxgemm.bench.transformer_models", "ptxgemm.cli.model"),
], ids=lambda m: m[-1])
def test_importing_a_torch_free_module_loads_no_framework(modules):
    """Each group imported in a fresh interpreter: none of OPTIONAL is loaded (one place for the rule the modules'
    own test files each checked before)."""
    code = (f"import sys, {', '.join(modules)}; "
            f"print(sorted(m for m in {OPTIONAL!r} if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def _cli_modules_loaded_by(argv) -> list[str]:
    """The ptxgemm.cli modules imported by one main(argv) in a fresh interpreter."""
    code = ("import sys\nfrom ptxgemm.cli.main import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('ptxgemm.cli.')))")
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 0, proc.stderr
    return eval(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("argv, loaded", [
    (["--version"], ["ptxgemm.cli.main"]),
    (["--help"], ["ptxgemm.cli.main"]),
    (["select", "--help"], ["ptxgemm.cli.main", "ptxgemm.cli.options", "ptxgemm.cli.select"]),
    (["bank-probe", "--list", "--only", "stride 4"], ["ptxgemm.cli.bank_probe", "ptxgemm.cli.main"]),
])
def test_only_the_command_that_runs_is_imported(argv, loaded):
    assert _cli_modules_loaded_by(argv) == loaded


def test_every_command_module_has_the_same_shape():
    from ptxgemm.cli import main as cli_main

    for name in cli_main.COMMANDS:
        module = cli_main.command_module(name)
        assert isinstance(module.DESCRIPTION, str) and module.DESCRIPTION, name
        assert callable(module.add_arguments) and callable(module.run), name


def test_the_library_never_imports_the_command_line():
    """ptxgemm/tools (and every other layer) is a library the CLI drives; an import the other way would make the
    CLI's parsing part of the library."""
    import ast
    from pathlib import Path

    pkg = Path(ptxgemm.__file__).parent
    bad = []
    for path in pkg.rglob("*.py"):
        if path.parent.name == "cli" or path.name == "__main__.py":
            continue
        depth = len(path.relative_to(pkg).parts) - 1   # how many dots lead from this module to ptxgemm
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):   # resolve the relative import, then each imported name
                base = ".".join(["ptxgemm", *path.relative_to(pkg).parts[:-1]][:depth + 2 - node.level]
                                + ([node.module] if node.module else []))
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            if any(n == "ptxgemm.cli" or n.startswith("ptxgemm.cli.") for n in names):
                bad.append(f"{path.relative_to(pkg)}: {names[0]}")
    assert not bad, bad


# ---- issue 48: a closed pipe and an unusable --out are never a traceback

def _run_into_closed_pipe(*argv) -> subprocess.CompletedProcess:
    """`python -m ptxgemm ARGV | head -0`, deterministically: stdout is a pipe whose reader closed before the command
    wrote anything (`| head -1` closes it after a line, which races with how much the command wrote by then)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([sys.executable, "-m", "ptxgemm", *argv], stdout=write, stderr=subprocess.PIPE,
                              text=True, timeout=120, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    finally:
        os.close(write)


@pytest.mark.parametrize("argv", [
    ["select", "--m", "4096", "--n", "4096", "--k", "4096"],
    ["bank-probe", "--list"],
    ["mutants", "--list"],
    ["--help"],
])
def test_a_closed_pipe_ends_the_command_quietly(argv):
    from ptxgemm.cli.main import PIPE_CLOSED_STATUS

    proc = _run_into_closed_pipe(*argv)
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
    assert proc.stderr == "" and proc.returncode in (0, PIPE_CLOSED_STATUS)   # argparse's --help ignores the pipe
    if argv[0] != "--help":
        assert proc.returncode == PIPE_CLOSED_STATUS


def test_a_pipe_closed_after_one_line_leaves_no_traceback():
    """The issue's `... | head -1`, with a reader that takes one line and closes (whether the command still had
    lines to write by then depends on timing; either way, no traceback)."""
    proc = subprocess.Popen([sys.executable, "-m", "ptxgemm", "bank-probe", "--list"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    from ptxgemm.cli.main import PIPE_CLOSED_STATUS

    assert proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) in (0, PIPE_CLOSED_STATUS) and "Traceback" not in err, err


@pytest.mark.parametrize("kind", ["file", "under a file"])
def test_dump_out_that_cannot_be_a_directory_is_one_line_exit_2(kind, tmp_path):
    existing = tmp_path / "existing.txt"
    existing.write_text("not a directory\n")
    out = existing if kind == "file" else existing / "sub"
    proc = subprocess.run([sys.executable, "-m", "ptxgemm", "dump", "--out", str(out), "--m", "64", "--n", "64",
                           "--k", "64"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("python -m ptxgemm dump: error: --out: "), \
        proc.stderr
    assert "names a directory, created if missing" in proc.stderr
    assert existing.read_text() == "not a directory\n"
