"""JSON Lines I/O shared by every reader and writer of rows: strict reads that name the file and
line of a bad row, and appends that are flushed to disk before returning (a crash loses at most the
line being written, which readers of resumable files skip)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path


class DataError(ValueError):
    """Data cannot be used; the message names the source (file, line, field)."""


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict]]:
    """(line number, row) for each non-blank line; invalid UTF-8 or JSON, or a non-object, raises."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: no such file")
    with open(path, encoding="utf-8", errors="strict") as f:
        try:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise DataError(f"{path}:{n}: not valid JSON ({e.msg})") from None
                if not isinstance(row, dict):
                    raise DataError(f"{path}:{n}: expected a JSON object, got {type(row).__name__}")
                yield n, row
        except UnicodeDecodeError as e:
            raise DataError(f"{path}: not valid UTF-8 ({e.reason} at byte {e.start})") from None


def read_jsonl(path: Path) -> list[dict]:
    return [row for _, row in iter_jsonl(path)]


def read_jsonl_tolerant(path: Path) -> list[dict]:
    """Rows of a file written by :func:`append_jsonl`; lines that do not parse (a torn last line
    left by a crash mid-write) are skipped, and a missing file has no rows."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def append_jsonl(path: Path, rows: list[dict]) -> None:
    """Append rows and fsync; creates the file and its folder."""
    if not rows:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
        f.flush()
        os.fsync(f.fileno())
