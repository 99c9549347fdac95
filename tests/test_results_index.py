"""docs/results/ holds only what the docs cite, and everything they cite is there (docs/results/README.md: the index
and the rules). CPU only: reads the markdown pages and the tests, no GPU.

A citation is any file name of a run in README.md, docs/**/*.md or a test that reads committed results: a path under
`docs/results/` (brace forms `{r1,r2}`, `{1..5}`, `{1,...,5}` and globs `*` expanded), a link relative to the page,
or a bare run name (`bench_h100_issue9_fit.json`, `..._close_run{1,2,3}.json`), found by its name anywhere under
docs/results/. A cited run that is no longer kept must say so right after it ("not kept"), as docs/perf-notes.md does
for superseded runs; everything else must resolve. The other way round, every file there is cited by a page, a test,
or a comment of the package naming the data a constant was fitted to (the index alone does not count). And
the folder stays small: at most 150 files and 3 MB."""
from __future__ import annotations

import fnmatch
import itertools
import os
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "docs" / "results"
MAX_FILES = 150
MAX_BYTES = 3 * 1024 * 1024

#: tests that read committed result files (their paths are checked like the docs' citations)
READERS = ("test_bench_cli.py", "test_banks.py", "test_fitting.py")
#: what a superseded citation says right after the name, instead of resolving
NOT_KEPT = "not kept"
#: how far after a citation (characters, within its paragraph) its "not kept" may stand
NOT_KEPT_WINDOW = 240

_EXT = r"(?:json\.gz|json|log|txt|csv|png|md)"
_TOKEN = re.compile(r"[A-Za-z0-9_{},.*/<>-]*[A-Za-z0-9_}*]\." + _EXT + r"(?![A-Za-z0-9])")
_FOLDER = re.compile(r"(?<![A-Za-z0-9_./-])(?:docs/)?results/[A-Za-z0-9_{},.*\[\]/-]+")
#: names of runs (a bare name is a citation when it starts with one of these and names a GPU or an issue)
_RUN_PREFIX = re.compile(r"^(?:\.\.\.|bench|model|fuzz|mutants|host|gpu|ncu|trace|select|probe|bars|ab|l2promo|fp8|"
                         r"turns|tests|torch|epilogue|blockwise|bank|swizzle|shapes|gemms|overlap|tiny|"
                         r"sustained|energy|power|grouped)")


def _expand_braces(text: str) -> list[str]:
    """`a_{r1,r2}.json` -> two names; `{1..5}` and `{1,...,5}` count; `{,_lag}` has an empty choice."""
    m = re.search(r"\{([^{}]*)\}", text)
    if not m:
        return [text]
    body = m.group(1)
    rng = re.fullmatch(r"(\d+)\s*(?:\.\.|,\s*\.\.\.\s*,)\s*(\d+)", body)
    choices = [str(i) for i in range(int(rng.group(1)), int(rng.group(2)) + 1)] if rng else body.split(",")
    return [x for c in choices for x in _expand_braces(text[:m.start()] + c + text[m.end():])]


def result_files() -> list[Path]:
    return sorted(p for p in RESULTS.rglob("*") if p.is_file())


def _matches(pattern: str, files: list[str]) -> list[str]:
    """`pattern` (relative to docs/results/ when it holds a '/', else a file name) against `files` (paths relative to
    docs/results/). `...TAIL|PREVIOUS`: the name before it with its end replaced (`..._summary.json` after
    `bench_h200_training_issue47_r{1,2,3}.json`), cut at any '_'."""
    if pattern.startswith("..."):
        tail, _, previous = pattern[3:].partition("|")
        heads = [previous[:i] for i, c in enumerate(previous) if c == "_"]
        return [f for f in files for head in heads if fnmatch.fnmatch(f.rsplit("/", 1)[-1], head + tail)]
    if "/" in pattern:
        return [f for f in files if fnmatch.fnmatch(f, pattern) or fnmatch.fnmatch(f, "*/" + pattern)]
    return [f for f in files if fnmatch.fnmatch(f.rsplit("/", 1)[-1], pattern)]


def _resolve(pattern: str, files: list[str]) -> tuple[list[str], list[str]]:
    """(the files a citation names, its expansions that name none)."""
    if pattern.startswith("..."):
        tail, _, previous = pattern.partition("|")
        forms = [(x + "|" + previous) for x in _expand_braces(tail)]
    else:
        forms = _expand_braces(pattern)
    found = {x: _matches(x, files) for x in forms}
    return sorted({f for v in found.values() for f in v}), [x.split("|")[0] for x, v in found.items() if not v]


def citations(path: Path, text: str | None = None) -> list[tuple[int, str, str]]:
    """(line, the cited name as written, the pattern it is looked up by, relative to docs/results/) in one page."""
    text = path.read_text() if text is None else text
    found = []
    inside = path.resolve().is_relative_to(RESULTS.resolve())
    previous = ""
    for m in _TOKEN.finditer(text):
        token = m.group(0).rstrip(".")
        if "<" in token or ">" in token:
            continue  # a placeholder (docs/results/<gpu>/fuzz/...), not a run
        line = text.count("\n", 0, m.start()) + 1
        if path.suffix == ".py" and "/" not in token and "results" not in text.split("\n")[line - 1]:
            continue  # a test's own output (tmp_path / "bench_h100_x.json"), not a committed run
        if re.match(r"(?:\.\./)*(?:docs/(?!results/)|design/|scripts/|tools/|tests/|ptxgemm/)", token):
            continue  # another page or a script, not a run
        if "docs/results/" in token:
            pattern = token.split("docs/results/", 1)[1]
        elif inside and "/" in token and not token.startswith("..."):
            target = Path(os.path.normpath(path.parent / token))
            if not target.is_relative_to(RESULTS):
                continue  # a link out of docs/results/ (../perf-notes.md)
            pattern = str(target.relative_to(RESULTS))
        elif token.startswith("results/") and path.parent == REPO / "docs":
            pattern = token[len("results/"):]
        else:
            name = token.rsplit("/", 1)[-1]
            if not _RUN_PREFIX.match(name) or not re.search(r"h100|h200|issue|\{|\*|\.\.\.", token):
                continue
            pattern = token
        if token.startswith("..."):
            pattern = token + "|" + previous
        else:
            previous = _expand_braces(pattern.rsplit("/", 1)[-1])[0]
        found.append((line, token, pattern))
    # a folder or a glob without an extension: docs/results/h100/model/, docs/results/h200/model/*issue4[67]*
    for m in _FOLDER.finditer(text):
        token = m.group(0).rstrip(".,;:")
        if token.endswith("]") and "[" not in token:
            token = token[:-1]  # the end of a markdown link's text: [docs/results/](results/README.md)
        if re.search(r"\." + _EXT + "$", token) or "<" in token or token.endswith(("results/", "README.md")):
            continue
        rest = token.split("results/", 1)[1]
        folder = not re.search(r"[*\[]", rest.rstrip("/").rsplit("/", 1)[-1])
        found.append((text.count("\n", 0, m.start()) + 1, token, rest.rstrip("/") + "/*" if folder else rest))
    return found


def _offsets(text: str, cited: list[tuple[int, str, str]]) -> list[int]:
    """Where each citation starts in `text`, in the order found."""
    starts = [0]
    for line in text.split("\n"):
        starts.append(starts[-1] + len(line) + 1)
    seen: dict[tuple[int, str], int] = {}
    out = []
    for line, token, _ in cited:
        at = text.find(token, seen.get((line, token), starts[line - 1]))
        seen[(line, token)] = at + 1
        out.append(at)
    return out


def _not_kept_after(text: str, end: int, stop: int) -> bool:
    """'not kept' after a citation, before the next citation that resolves, within its paragraph and
    NOT_KEPT_WINDOW characters."""
    return NOT_KEPT in text[end:min(stop, end + NOT_KEPT_WINDOW)].split("\n\n")[0]


def pages() -> list[Path]:
    docs = sorted((REPO / "docs").rglob("*.md"))
    return [REPO / "README.md", *docs, *(REPO / "tests" / t for t in READERS)]


def unresolved() -> list[str]:
    files = [str(p.relative_to(RESULTS)) for p in result_files()]
    bad = []
    for page in pages():
        text = page.read_text()
        cited = citations(page, text)
        at = _offsets(text, cited)
        missing = [_resolve(pattern, files)[1] for _, _, pattern in cited]
        for i, (line, token, pattern) in enumerate(cited):
            if not missing[i]:
                continue
            stop = min([at[j] for j in range(len(cited)) if at[j] > at[i] and not missing[j]], default=len(text))
            if not _not_kept_after(text, at[i] + len(token), stop):
                bad.append(f"{page.relative_to(REPO)}:{line}: {token} ({', '.join(missing[i])})")
    return bad


def test_every_cited_result_resolves():
    bad = unresolved()
    assert not bad, f"{len(bad)} citations of runs not in docs/results/ (and not marked '{NOT_KEPT}'):\n" + \
        "\n".join(bad)


def test_results_folder_is_small():
    files = result_files()
    size = sum(p.stat().st_size for p in files)
    assert len(files) <= MAX_FILES, f"docs/results/ holds {len(files)} files (at most {MAX_FILES})"
    assert size <= MAX_BYTES, f"docs/results/ holds {size / 2**20:.2f} MB (at most {MAX_BYTES / 2**20:.0f} MB)"


def test_every_committed_result_is_cited():
    """A file the docs do not cite has no place in docs/results/. The index does not count as a citation; a comment
    in the package that names the data a constant was fitted to does, and a test that reads it as data."""
    files = [str(p.relative_to(RESULTS)) for p in result_files()]
    code = sorted(p for d in ("ptxgemm",) for p in (REPO / d).rglob("*.py"))
    cited = {"README.md"}
    for page in [*pages(), *code]:
        if page == RESULTS / "README.md":
            continue
        for _, _, pattern in citations(page):
            cited.update(_resolve(pattern, files)[0])
    uncited = sorted(set(files) - cited)
    assert not uncited, f"{len(uncited)} files in docs/results/ that no page cites:\n" + "\n".join(uncited)


def test_brace_and_range_forms_expand():
    assert _expand_braces("a_{r1,r2}.json") == ["a_r1.json", "a_r2.json"]
    assert _expand_braces("m_{1..3}.json") == ["m_1.json", "m_2.json", "m_3.json"]
    assert _expand_braces("m_{1,...,3}.json") == ["m_1.json", "m_2.json", "m_3.json"]
    assert _expand_braces("b{,_lag}_r1.json") == ["b_r1.json", "b_lag_r1.json"]
    assert list(itertools.chain(_expand_braces("{h100,h200}/x_{a,b}.json"))) == \
        ["h100/x_a.json", "h100/x_b.json", "h200/x_a.json", "h200/x_b.json"]
