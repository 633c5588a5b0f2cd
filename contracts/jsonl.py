"""JSON Lines for the whole toolkit: one line reader, one validating reader, one appender.

Results files (predictions.jsonl, judgments.jsonl) are append-only: every record is one line, written and flushed
as soon as it exists, so a killed run loses at most the line in flight. A rerun first repairs the end of the file
(`repair_torn_tail`: a torn line is cut, a complete record that only lacks its newline is kept), then reads what is
complete to skip work already done, then appends (`JsonlAppender`). One process at a time writes a results file:
`exclusive_writer` holds an advisory lock beside it and refuses a second writer, naming the holder's pid.

Readers come in three strengths, all over the same line loop (`iter_lines`):
- `iter_lines`: (line number, parsed value) with a `LineProblem` in place of a line that is not JSON or not UTF-8,
  for readers that name file and line in their own errors (benchmark releases, calibration inputs, judge inputs);
- `read_jsonl`: the complete JSON objects of a results file, torn or non-object lines left out (only a torn final
  line can be partial when every line is one flushed write);
- `read_validated`: the objects that satisfy a contract model (`cader.contracts.records`), and a `LineProblem`
  naming file, line and field for every other non-blank line.

Lines are decoded one at a time, so one byte that is not UTF-8 (a Latin-1 export, a cut multi-byte character)
costs that line alone, named by file and line, never the whole read.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cader.contracts.records import describe_validation_error
from pydantic import BaseModel, ValidationError
from typing_extensions import Self


@dataclass(frozen=True)
class LineProblem:
    """One unusable line: `reason` is a short code ("bad_json", "bad_encoding", "empty_line", "not_an_object",
    "invalid_record"), `detail` the parser's, decoder's or validator's own words."""

    path: str
    line: int
    reason: str
    detail: str

    @property
    def message(self) -> str:
        return {
            "bad_json": f"not valid JSON ({self.detail})",
            "bad_encoding": f"not valid UTF-8 ({self.detail})",
            "empty_line": "empty line",
            "not_an_object": f"expected a JSON object, got {self.detail}",
        }.get(self.reason, self.detail)

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


def decode_line(raw: bytes, first: bool = False) -> str:
    """One line's bytes as text; UnicodeDecodeError when they are not UTF-8. The first line may open with a byte
    order mark (editors on Windows write one), which is not part of the JSON."""
    return raw.decode("utf-8-sig" if first else "utf-8")


def encoding_problem(exc: UnicodeDecodeError) -> str:
    """'byte 0xff at column 13': the first offending byte and where it sits in its line (columns from 1)."""
    return f"byte 0x{exc.object[exc.start]:02x} at column {exc.start + 1}"


def iter_lines(path: str | Path, keep_blank: bool = False) -> Iterator[tuple[int, Any]]:
    """(line number from 1, parsed JSON value) per line; a line that is not UTF-8 or not JSON yields a LineProblem
    ("bad_encoding", "bad_json") instead of the value. Blank lines are skipped, or yielded as
    LineProblem("empty_line") with `keep_blank`. Lines end at "\\n" (a "\\r" before it is whitespace to JSON)."""
    with Path(path).open("rb") as handle:
        for number, raw in enumerate(handle, start=1):
            try:
                text = decode_line(raw, first=number == 1)
            except UnicodeDecodeError as exc:
                yield number, LineProblem(str(path), number, "bad_encoding", encoding_problem(exc))
                continue
            if not text.strip():
                if keep_blank:
                    yield number, LineProblem(str(path), number, "empty_line", "")
                continue
            try:
                yield number, json.loads(text)
            except json.JSONDecodeError as exc:
                yield number, LineProblem(str(path), number, "bad_json", exc.msg)


def read_jsonl(path: str | Path) -> list[dict]:
    """All complete JSON objects of a results file, in order; a missing file is empty; other lines are left out."""
    if not Path(path).exists():
        return []
    return [value for _, value in iter_lines(path) if isinstance(value, dict)]


@dataclass
class ValidatedLines:
    """The records of a file that satisfy a contract model (as read, unchanged), their line numbers, and one
    LineProblem per other non-blank line."""

    records: list[dict] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    problems: list[LineProblem] = field(default_factory=list)


def check_line(path: str | Path, number: int, value: Any, model: type[BaseModel]) -> LineProblem | None:
    """Why the parsed line `value` is not a record of `model` (None when it is)."""
    if isinstance(value, LineProblem):
        return value
    if not isinstance(value, dict):
        return LineProblem(str(path), number, "not_an_object", type(value).__name__)
    try:
        model.model_validate(value)
    except ValidationError as error:
        return LineProblem(str(path), number, "invalid_record", describe_validation_error(error))
    return None


def read_validated(path: str | Path, model: type[BaseModel]) -> ValidatedLines:
    """The lines of `path` validated through `model`; a missing file is empty."""
    out = ValidatedLines()
    if not Path(path).exists():
        return out
    for number, value in iter_lines(path):
        problem = check_line(path, number, value, model)
        if problem is None:
            out.records.append(value)
            out.lines.append(number)
        else:
            out.problems.append(problem)
    return out


def _is_record(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line.decode("utf-8")), dict)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False


def repair_torn_tail(path: str | Path) -> None:
    """Make the file end on a line break before the next append.

    A last line without its newline is kept (the newline added) when it is a complete record — readers count it as
    done, so cutting it would lose a finished sample — and cut when it does not parse (a kill mid-write).
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


def jsonl_line(record: dict) -> str:
    """One record as the line every writer of the toolkit writes (UTF-8 kept as is, newline-terminated)."""
    return json.dumps(record, ensure_ascii=False) + "\n"


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
        line = jsonl_line(record)
        with self._lock:
            self._handle.write(line)
            self._handle.flush()
            if self._fsync:
                os.fsync(self._handle.fileno())

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class FileInUse(RuntimeError):
    """Another process holds the writer lock of a results file; the message names the file and the holder's pid."""


# Locks this process holds: (path, count). flock conflicts between two descriptors of one process too, so a
# caller that already holds a file's lock (run.py before it loads a model) lets the runner take it again.
_held: dict[str, list] = {}
_held_guard = threading.Lock()


def lock_path(path: str | Path) -> Path:
    return Path(f"{path}.lock")


@contextmanager
def exclusive_writer(path: str | Path) -> Iterator[Path]:
    """Hold the advisory writer lock of results file `path` (`<path>.lock`, `fcntl.flock`) for the block.

    Two runs appending to one file at once would write every record twice; the second is refused with FileInUse
    naming the holder's pid. The kernel releases the lock when its holder exits, killed or not, so a stale lock file
    never blocks a rerun. The lock file is removed when its holder lets go (one a killed holder left behind is taken
    over by the next writer and removed at its end), so no `.lock` outlives its run. Re-entrant within a process.
    """
    key, where = os.path.abspath(path), lock_path(path)
    with _held_guard:
        if key in _held:
            _held[key][1] += 1
        else:
            _held[key] = [_acquire(path, where), 1]
    try:
        yield where
    finally:
        with _held_guard:
            _held[key][1] -= 1
            if _held[key][1] == 0:
                fd = _held.pop(key)[0]
                where.unlink(missing_ok=True)  # still held: a writer waiting on this file retries on a fresh one
                os.close(fd)  # closing the descriptor releases the flock


def _is_current(fd: int, where: Path) -> bool:
    """Whether the open file `fd` is still the one at `where` (not removed or replaced since it was opened)."""
    try:
        return os.fstat(fd).st_ino == os.stat(where).st_ino
    except FileNotFoundError:
        return False


def _acquire(path: str | Path, where: Path) -> int:
    """The descriptor of `where`, flocked, with this process's pid written in it; FileInUse when it is taken."""
    while True:
        where.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(where, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise FileInUse(
                f"{path} is being written by another run (pid {holder}, lock {where}); wait for it to end, "
                f"or write to another --out"
            ) from None
        if _is_current(fd, where):
            break
        os.close(fd)  # its holder removed the file between our open and our flock: lock the path's file anew
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd
