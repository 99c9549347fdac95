"""The checks the GPU tests of the walk's variants share (tests/test_splitk_gpu.py, tests/test_streamk_gpu.py,
tests/test_serpentine_gpu.py): a case named by a config tag (TagCase), its seeded operands and its plan into a
NaN-poisoned output (checked to run the case's config and schedule), one launch checked against the float64 bound,
ten launches bitwise alike, and the fix-up's mutants, run by the mutation tester (`python -m ptxgemm mutants`), each
of the instructions that must matter killed. A case has m, n, k, in_dtype, out_dtype, a_major, b_major, ctas,
config and schedule(sm_count)."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import zlib

import numpy as np
from gemm_reference import DTYPES, check_result, random_matrix

from ptxgemm.kernel.config import GemmConfig
from ptxgemm.kernel.schedule import plan_for


@dataclasses.dataclass(frozen=True)
class TagCase:
    """A problem run by the config a tag names, in the caller's layouts and dtypes, on at most `ctas` CTAs."""

    m: int
    n: int
    k: int
    tag: str
    in_dtype: str = "bfloat16"
    out_dtype: str = "bfloat16"
    a_major: str = "k"            # of the caller's A (C order: "k") and B (C order: "mn"), as numpy gives them
    b_major: str = "mn"
    ctas: int | None = None

    @property
    def config(self) -> GemmConfig:
        return GemmConfig.from_tag(self.tag, in_dtype=self.in_dtype, out_dtype=self.out_dtype, a_major=self.a_major,
                                   b_major=self.b_major)

    def schedule(self, sm_count: int):
        return plan_for(self.config, self.m, self.n, self.k, sm_count, self.ctas)

    def __str__(self):
        return (f"{self.m}x{self.n}x{self.k}-{self.in_dtype}-{self.out_dtype}-A{self.a_major}-B{self.b_major}-"
                f"{self.tag}" + (f"-ctas{self.ctas}" if self.ctas else ""))


def operands(case):
    """A (m, k) and B (k, n), random, seeded by the case's name, in its majors (C order: A "k", B "mn")."""
    rng = np.random.default_rng(zlib.crc32(str(case).encode()))
    a = random_matrix(rng, case.m, case.k, case.in_dtype, order="C" if case.a_major == "k" else "F")
    b = random_matrix(rng, case.k, case.n, case.in_dtype, order="C" if case.b_major == "mn" else "F")
    return a, b


def poisoned_plan(case, a, b, ctas=None, selected: bool = False):
    """The case's plan (its config, or with `selected` the library's own pick; at most `ctas` CTAs) into a
    NaN-poisoned output: (plan, out)."""
    import ptxgemm
    from ptxgemm import DeviceArray

    out = DeviceArray.empty((case.m, case.n), DTYPES[case.out_dtype])
    out.poison()
    config = None if selected else case.config
    return ptxgemm.GemmPlan(ptxgemm.to_device(a), ptxgemm.to_device(b), out, config, ctas=ctas), out


def planned(case):
    """The case's operands and its plan into a poisoned output, (a, b, plan, out), the plan checked to run the
    case's config and the schedule the case predicts for this GPU."""
    from ptxgemm.runtime import driver

    a, b = operands(case)
    plan, out = poisoned_plan(case, a, b, case.ctas)
    assert plan.config == case.config, (plan.config.describe(), case.config.describe())
    assert plan.schedule == case.schedule(driver.device_info().sm_count)
    return a, b, plan, out


def assert_launch_correct(plan, out, a, b, what: str) -> None:
    """One launch: every element within the bound, and the fix-up's flags (`what`'s) back at zero, where it has
    them."""
    plan.launch()
    verdict = check_result(out.to_numpy(), a, b)
    assert verdict.ok, str(verdict)
    if plan.flags is not None:
        assert not plan.flags.to_numpy().any(), f"{what} flags must be back at zero after a launch"


def assert_bitwise_deterministic(plan, out, a, b, poison_workspace: bool = False) -> None:
    """Ten launches of one plan, the output (and, with `poison_workspace`, the fix-up's workspace) poisoned before
    each: bitwise one output, correct, and the flags back at zero."""
    first = None
    for _ in range(10):
        out.poison()
        if poison_workspace:
            plan.workspace.poison()
        plan.launch()
        got = out.to_numpy()
        if first is None:
            first = got
            assert check_result(got, a, b).ok
        else:
            assert np.array_equal(got.view(np.uint8), first.view(np.uint8))
    assert not plan.flags.to_numpy().any()


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
