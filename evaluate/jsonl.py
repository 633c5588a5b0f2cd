"""Append-only JSONL results: the one mechanism behind predictions.jsonl and judgments.jsonl.

Every record is one line, written and flushed as soon as it exists, so a killed run loses at most the line in flight.
A rerun first repairs the end of the file (`repair_torn_tail`: a torn line is cut, a complete record that only lacks
its newline is kept), then reads what is complete (`read_jsonl`) to skip work
already done, then appends (`JsonlAppender`).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path


def read_jsonl(path: str | Path) -> list[dict]:
    """All complete records of a results file, in order; a missing file is empty.

    Lines that do not parse are skipped: with one flushed write per line, only a torn final line can be partial.
    """
    path = Path(path)
    if not path.exists():
        return []
    records = []
    with path.open(encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict):
                records.append(record)
    return records


def _is_record(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line.decode("utf-8")), dict)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False


def repair_torn_tail(path: str | Path) -> None:
    """Make the file end on a line break before the next append.

    A last line without its newline is kept (the newline added) when it is a complete record — `read_jsonl` counts it
    as done, so cutting it would lose a finished sample — and cut when it does not parse (a kill mid-write).
    """
    path = Path(path)
    if not path.exists() or path.stat().st_size == 0:
        return
    with path.open("rb+") as handle:
        handle.seek(-1, os.SEEK_END)
        if handle.read(1) == b"\n":
            return
        handle.seek(0)
        data = handle.read()
        start = data.rfind(b"\n") + 1
        if _is_record(data[start:]):
            handle.seek(0, os.SEEK_END)
            handle.write(b"\n")
        else:
            handle.truncate(start)


class JsonlAppender:
    """Thread-safe appends of one JSON line per record, flushed (and optionally fsynced) before `write` returns."""

    def __init__(self, path: str | Path, fsync: bool = False):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        repair_torn_tail(self.path)
        self._fsync = fsync
        self._handle = self.path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, record: dict) -> None:
        line = json.dumps(record, ensure_ascii=False) + "\n"
        with self._lock:
            self._handle.write(line)
            self._handle.flush()
            if self._fsync:
                os.fsync(self._handle.fileno())

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> JsonlAppender:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
