"""JSON Lines I/O shared by every reader and writer of rows: strict reads that name the file and
line of a bad row, and appends that are flushed to disk before returning (a crash loses at most the
line being written, which readers of resumable files skip)."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from data.faults import fault_point


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
                except RecursionError:
                    raise DataError(f"{path}:{n}: nested too deeply to read (a value inside thousands of "
                                    "brackets)") from None
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


def atomic_write_text(path: Path, text: str, fault: str | None = None) -> None:
    """Write ``text`` to ``path`` so that readers see the old file or the new one, never a mix.
    ``fault``: the fault-injection point between the write and the rename (``data/faults.py``),
    by default ``write:<file name>``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; results are for everyone who can read the run
        fault_point(fault or f"write:{path.name}")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, obj: Any, fault: str | None = None) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, ensure_ascii=False) + "\n", fault)


def write_jsonl_atomic(path: Path, rows: list[dict]) -> None:
    """A whole JSON Lines file, atomically (see :func:`atomic_write_text`)."""
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
