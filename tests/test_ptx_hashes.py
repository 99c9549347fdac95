"""Behaviour unchanged through the restructuring of issue 23: the GEMM PTX of every config the selection can pick and
of every config the test suite renders, hashed after stripping comments and blank lines, recorded before the move.

tests/data/ptx_hashes.json.gz holds, per config, its GemmConfig fields that differ from the defaults (the field
names of 2026-11-24) and the first 20 hex digits of the SHA-256 of its normalized PTX. A refactor that renames or
splits GemmConfig's fields translates those dicts in `config_from` below; one that changes the PTX on purpose
re-records (and shows, on the device, the SASS identical or no regression), saying why in docs/perf-notes.md.

Re-record: `python tests/test_ptx_hashes.py record` (the selection's candidates and epilogue variants, and every
config the CPU suite renders, found by running it with template_params watched). A change aimed at one kind of
kernel re-digests only the recorded configs that set a field, adding the selectable ones with it set:
`python tests/test_ptx_hashes.py update FIELD` (issue 24's blockwise mainloop: `update block_scale`), so every
other config still proves itself unchanged. A change that only adds candidates records the new ones:
`python tests/test_ptx_hashes.py add-missing`.
"""
from __future__ import annotations

import gzip
import hashlib
import itertools
import json
import sys
from pathlib import Path

import pytest

import full_run
from ptxgemm.errors import ConfigError
from ptxgemm.kernel.config import GemmConfig, INPUT_DTYPES, OUTPUT_DTYPES
from ptxgemm.select import cost_model as select, predict, tiles
from ptxgemm.toolchain import kernels
from ptxgemm.toolchain.kernels import render_gemm

DATA = Path(__file__).parent / "data" / "ptx_hashes.json.gz"
DEFAULTS = GemmConfig().fields()

#: epilogues the selection attaches (GemmConfig's epilogue fields), tried on the candidates of the common layouts
EPILOGUES = (
    {"alpha": True},
    {"row_scale": True, "col_scale": True, "alpha": True},
    {"source_dtype": "bfloat16", "bias": "col", "activation": "gelu", "col_pairs": True},
    {"source_dtype": "float16", "bias": "row", "activation": "silu"},
    {"source_dtype": "float32", "col_scale": True, "alpha": True, "activation": "relu", "col_pairs": True},
    {"bias": "col", "bias_dtype": "bfloat16", "activation": "relu"},
    {"device_scales": True},
    {"block_scale": True},
)


def normalized(ptx: str) -> str:
    """The PTX without comments, trailing blanks and blank lines: what a reorganized template may change freely."""
    lines = (line.split("//", 1)[0].rstrip() for line in ptx.splitlines())
    return "\n".join(line for line in lines if line.strip())


def digest(config) -> str:
    return hashlib.sha256(normalized(render_gemm(config)).encode()).hexdigest()[:20]


def fields_of(config: GemmConfig) -> dict:
    return {k: v for k, v in config.fields().items() if v != DEFAULTS[k]}


def config_from(fields: dict):
    """The config recorded as `fields`. Recorded before block_k became a derived number (one legal value per
    dtype): the recorded value must be that value, and is then dropped."""
    fields = dict(fields)
    block_k = fields.pop("block_k", None)
    config = GemmConfig(**fields)
    if block_k is not None and block_k != config.block_k:
        raise AssertionError(f"recorded block_k {block_k} is not the derived {config.block_k} for {fields}")
    return config


def selection_configs() -> list[GemmConfig]:
    """Every candidate of the selection for every dtype pair and layout (with the deep ring where the selection gives
    one), and the epilogue variants the selection can attach on the common layouts (A K-major; B either way)."""
    found = {}
    for in_dtype, out_dtype, (a_major, b_major) in itertools.product(
            INPUT_DTYPES, (None,) + OUTPUT_DTYPES, itertools.product(("k", "mn"), repeat=2)):
        try:
            base = tiles.candidates(4096, 4096, 4096, in_dtype, out_dtype, a_major, b_major)
        except ConfigError:
            continue
        for config in base:
            found[config] = None
            found[predict.with_deep_ring(config)] = None   # the deep ring the selection gives DEEP_RING_TILES
            if a_major != "k":
                continue
            for epilogue in EPILOGUES:
                with_epi = select.with_epilogue(config, tuple(sorted(epilogue.items())))
                if with_epi is not None:
                    found[with_epi] = None
    return list(found)


def suite_configs() -> list[GemmConfig]:
    """Every config the CPU suite renders (this file excepted), by running it with template_params watched."""
    seen = {}
    original = kernels.template_params

    def watched(cfg, *args, **kwargs):
        seen[cfg] = None
        return original(cfg, *args, **kwargs)

    kernels.template_params = watched
    try:
        status = pytest.main(["-q", "-x", "-p", "no:cacheprovider", str(Path(__file__).parent),
                              f"--ignore={Path(__file__)}"])
        if status != 0:
            raise SystemExit(f"the CPU suite failed (pytest status {status}): record from a passing tree")
    finally:
        kernels.template_params = original
    return list(seen)


def record() -> None:
    configs = dict.fromkeys(selection_configs())
    configs.update(dict.fromkeys(suite_configs()))
    entries = sorted(([fields_of(c), digest(c)] for c in configs), key=lambda e: json.dumps(e[0], sort_keys=True))
    DATA.parent.mkdir(exist_ok=True)
    with gzip.open(DATA, "wt") as f:
        json.dump({"normalization": "comments after //, trailing blanks and blank lines removed; sha256[:20]",
                   "configs": entries}, f, separators=(",", ":"))
    print(f"recorded {len(entries)} configs in {DATA}")


def load() -> list:
    with gzip.open(DATA, "rt") as f:
        return json.load(f)["configs"]


#: the light run (tests/full_run.py) renders every LIGHT_STRIDE-th recorded config, and besides them the first config
#: that holds each (field, value) the record has: about 380 of 11400, in 5 s instead of 140 s on one core (16 gave 740,
#: which the README's 3 minutes on 2 cores no longer had room for)
LIGHT_STRIDE = 32


def light_sample(entries: list) -> list:
    """Every LIGHT_STRIDE-th entry, and the first entry of each (field, value) pair no earlier pick holds, so that
    every field and every value a recorded config sets is rendered in the light run too."""
    seen, picked = set(), []
    for i, (fields, want) in enumerate(entries):
        pairs = {(k, json.dumps(v)) for k, v in fields.items()}
        if i % LIGHT_STRIDE == 0 or not pairs <= seen:
            picked.append((fields, want))
            seen |= pairs
    return picked


def test_every_recorded_config_renders_the_same_ptx():
    entries = load()
    sample = light_sample(entries)
    if full_run.pick(len(sample), len(entries), "recorded configs whose PTX digest is checked") < len(entries):
        entries = sample
    changed = []
    for fields, want in entries:
        got = digest(config_from(fields))
        if got != want:
            changed.append(fields)
    assert not changed, f"{len(changed)} configs render different PTX, e.g. {changed[:3]}"


def test_the_record_holds_every_selectable_config():
    recorded = {json.dumps(fields_of(config_from(fields)), sort_keys=True) for fields, _ in load()}
    missing = [fields_of(c) for c in selection_configs() if json.dumps(fields_of(c), sort_keys=True) not in recorded]
    assert not missing, f"{len(missing)} selectable configs were never recorded, e.g. {missing[:3]}"


def update(field: str) -> None:
    """Re-digest the recorded configs whose `field` is set (truthy), and add the selectable configs with it set that
    the record lacks (a change that widens what carries the field); the others keep their recorded digest. `field`
    may also be a property the config derives (`epi_whole_tile`: a change to the kernels that have it)."""
    if field not in DEFAULTS and not isinstance(getattr(GemmConfig, field, None), property):
        raise SystemExit(f"update: {field!r} is neither a GemmConfig field nor a property of one")
    entries, changed = load(), 0
    for entry in entries:
        if getattr(config_from(entry[0]), field):
            new = digest(config_from(entry[0]))
            changed += new != entry[1]
            entry[1] = new
    recorded = {json.dumps(fields_of(config_from(e[0])), sort_keys=True) for e in entries}
    added = [c for c in selection_configs() if getattr(c, field) and json.dumps(fields_of(c), sort_keys=True)
             not in recorded]
    entries += [[fields_of(c), digest(c)] for c in added]
    entries.sort(key=lambda e: json.dumps(e[0], sort_keys=True))
    with gzip.open(DATA, "wt") as f:
        json.dump({"normalization": "comments after //, trailing blanks and blank lines removed; sha256[:20]",
                   "configs": entries}, f, separators=(",", ":"))
    print(f"re-digested the configs with {field} set: {changed} changed; {len(added)} selectable ones added")


def add_missing() -> None:
    """Record the selectable configs the record lacks (a change that adds candidates, e.g. a tile for `tune`); every
    recorded digest stays as it is."""
    entries = load()
    recorded = {json.dumps(fields_of(config_from(e[0])), sort_keys=True) for e in entries}
    added = [c for c in selection_configs() if json.dumps(fields_of(c), sort_keys=True) not in recorded]
    entries += [[fields_of(c), digest(c)] for c in added]
    entries.sort(key=lambda e: json.dumps(e[0], sort_keys=True))
    with gzip.open(DATA, "wt") as f:
        json.dump({"normalization": "comments after //, trailing blanks and blank lines removed; sha256[:20]",
                   "configs": entries}, f, separators=(",", ":"))
    print(f"added {len(added)} selectable configs")


if __name__ == "__main__":
    if sys.argv[1:] == ["record"]:
        record()
    elif len(sys.argv) == 3 and sys.argv[1] == "update":
        update(sys.argv[2])
    elif sys.argv[1:] == ["add-missing"]:
        add_missing()
    else:
        sys.exit("usage: python tests/test_ptx_hashes.py record | update FIELD | add-missing")
