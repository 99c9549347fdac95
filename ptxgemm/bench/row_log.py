"""A bench run's rows as they are measured: `<stem>.rows.jsonl` beside the run's JSON, one line per row, written the
moment the row is done. A run cut short (a device's time limit, a crash on a later shape) then still leaves what it
measured, as the bench wrote it, where before it left nothing (two device runs of issues 47 and 49 lost theirs). The
finished run writes its JSON and removes the lines: a `.rows.jsonl` left in a folder is always an unfinished run.

The first line is `{"run": {...}}`: what the run was (its GPU, set or mode, rounds, the command's own description);
each later line is one row, the same object the finished JSON's `rows` would hold.
"""
from __future__ import annotations

import json
from pathlib import Path

SUFFIX = ".rows.jsonl"


class RowLog:
    """Append-only rows of one run (see the module docstring)."""

    def __init__(self, out_dir, stem: str, run: dict):
        self.path = Path(out_dir) / f"{stem}{SUFFIX}"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps({"run": run}) + "\n")
        self.count = 0   # rows written

    def add(self, row: dict) -> None:
        with self.path.open("a") as f:   # opened per row: a process killed between rows loses nothing written
            f.write(json.dumps(row) + "\n")
        self.count += 1

    def sync(self, rows: list[dict]) -> None:
        """Write the rows of `rows` past those written so far (for a loop that appends a step's rows in places)."""
        for row in rows[self.count:]:
            self.add(row)

    def close(self) -> None:
        """The run wrote its JSON: the lines are no longer the only record."""
        self.path.unlink(missing_ok=True)


def read(path) -> tuple[dict, list[dict]]:
    """(the run's description, its rows) from a `.rows.jsonl`."""
    lines = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    if not lines or "run" not in lines[0]:
        raise ValueError(f"{path}: not a bench run's rows (its first line must be {{\"run\": ...}})")
    return lines[0]["run"], lines[1:]
