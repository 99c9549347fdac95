"""The check split-K's and the stream-K tail's GPU tests share: their fix-up's mutants, run by the mutation tester
(`python -m ptxgemm mutants`), each of the instructions that must matter killed."""
from __future__ import annotations

import json
import subprocess
import sys


def assert_fix_up_mutants_killed(presets: tuple[str, ...], template: str, json_path) -> None:
    """Run the tester on `presets`, keeping the mutants of `template`'s lines: it must exit 0 (every survivor has a
    reason), and in every config the publish (red.release) deleted, the poll (ld.acquire) passing at once, the
    flag's reset (st.relaxed) deleted and the sync after the poll deleted must each be killed. The fix-up has two
    bar.sync, the publish's and the poll's; the poll's comes later in the PTX."""
    args = [arg for preset in presets for arg in ("--preset", preset)]
    proc = subprocess.run([sys.executable, "-m", "ptxgemm", "mutants", *args, "--template", template,
                           "--json", str(json_path)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    for config in json.loads(json_path.read_text())["configs"]:
        records = config["mutants"]
        must = {(kind, mutation): [r for r in records if r["id"].split(":")[1] == kind and r["mutation"] == mutation]
                for kind, mutation in (("red.release", "deleted"), ("ld.acquire", "skipped"),
                                       ("st.relaxed", "deleted"), ("bar.sync", "deleted"))}
        assert all(len(v) == (2 if k[0] == "bar.sync" else 1) for k, v in must.items()), must
        bar_syncs = sorted(must.pop(("bar.sync", "deleted")), key=lambda r: r["ptx_line"])
        must["sync after the poll"] = bar_syncs[1:]
        for name, rows in must.items():
            assert all(r["status"] == "killed" for r in rows), (name, rows)
