"""What every benchmark loader returns, and the helpers they share.

A loader turns one benchmark's released files into ``Sample`` objects. Rows it cannot use become
``BenchmarkError`` objects that name the file and the row; they are *returned* (never raised, never dropped) so
the runner can record and count them.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

from cader.contracts.jsonl import LineProblem, iter_lines

LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
MAX_OPTIONS = len(LETTERS)


@dataclass
class Sample:
    """One multiple-choice question about one video.

    ``video`` is relative to the ``data_root`` given to ``load_benchmark``; ``answer`` is a letter from
    ``letters`` (or ``None`` when the release has no ground truth); ``duration`` is in seconds when the release
    states it. Common ``meta`` keys: ``task_type`` (the group a macro average runs over), ``evidence_window``
    (``[t_s, t_e]`` seconds where the answer is visible, when known), ``source_file`` and ``row``.
    """

    benchmark: str
    sample_id: str
    video: str
    question: str
    options: list[str]
    letters: list[str]
    answer: str | None
    duration: float | None = None
    meta: dict = field(default_factory=dict)


SYNTHETIC_SIZES = ("eval", "test", "heldout")  # write_eval_sets's n_eval, n_test, n_heldout
Loader = Callable[[str | Path], tuple[list[Sample], list["BenchmarkError"]]]


@dataclass(frozen=True)
class Benchmark:
    """One ``--benchmark`` name: what the registry (``cader.evaluate.benchmarks``) finds in a loader module's
    ``BENCHMARK`` (or ``BENCHMARKS``, for a module serving several names) and everything else reads from it.

    ``name``: the ``--benchmark`` name and ``Sample.benchmark``.
    ``folder``: the folder under ``--data_root`` the release is unpacked into (also the synthetic writer's and
    the conformance fixture's, ``tests/fixtures/<folder>/``).
    ``load``: ``load(data_root) -> (samples, errors)``.
    ``macro_metric``: the name of the headline number when the paper reports the macro mean over
    ``meta["task_type"]`` (MLVU's "M-Avg"); ``None`` when the headline is plain accuracy.
    ``synthetic_writer``: ``"module:function"`` of the writer that lays out a synthetic copy of the release
    (``write(root, rng, n, new_spec) -> manifest entry``, see ``cader.dev.synthetic.eval_sets``); a string, so
    loading a benchmark never imports the synthetic-data code.
    ``synthetic_size``: which of ``write_eval_sets``'s counts the writer gets: ``"eval"`` (``n_eval``),
    ``"test"`` (``n_test``) or ``"heldout"`` (``n_heldout``).
    ``released``: the benchmark has an official release (and a conformance fixture); False for the synthetic
    task's own names.
    ``write_order``: where the writer runs in ``write_eval_sets``. The writers draw from one random stream, so
    the order is part of what a seed writes: the first benchmarks hold 0-7, the order the miniature's data has
    always been written in; a new benchmark keeps the default and runs after them (ties in name order).
    """

    name: str
    folder: str
    load: Loader
    synthetic_writer: str
    macro_metric: str | None = None
    synthetic_size: str = "eval"
    released: bool = True
    write_order: int = 100

    def __post_init__(self) -> None:
        # a misspelt registration fails when its module is imported, naming the benchmark
        if self.synthetic_size not in SYNTHETIC_SIZES:
            raise ValueError(f"benchmark {self.name!r}: synthetic_size {self.synthetic_size!r} is not one of "
                             f"{', '.join(SYNTHETIC_SIZES)}")
        if ":" not in self.synthetic_writer:
            raise ValueError(f"benchmark {self.name!r}: synthetic_writer {self.synthetic_writer!r} is not "
                             "'module:function'")


class BenchmarkError(ValueError):
    """A row that cannot become a Sample; the message names the file and the row."""

    def __init__(self, benchmark: str, file: str | Path, row: int | str | None, reason: str):
        self.benchmark = benchmark
        self.file = str(file)
        self.row = row
        self.reason = reason
        where = f"{self.file}" if row is None else f"{self.file}, row {row}"
        super().__init__(f"{benchmark}: {where}: {reason}")


class RowError(Exception):
    """Raised inside a loader's per-row code; the loader turns it into a BenchmarkError with file and row."""


def letters_for(options: list[str]) -> list[str]:
    if not options:
        raise RowError("no options")
    if len(options) > MAX_OPTIONS:
        raise RowError(f"{len(options)} options, at most {MAX_OPTIONS} are supported (letters A-Z)")
    return list(LETTERS[: len(options)])


_PREFIX = re.compile(r"^\s*(?:\(([A-Z])\)|([A-Z])[.:)])\s*")


def strip_letter_prefixes(options: list[str]) -> list[str]:
    """Drop "A. " / "(A) " / "A) " prefixes, but only when every option carries its own letter in order."""
    stripped = []
    for i, option in enumerate(options):
        match = _PREFIX.match(option)
        if not match or (match.group(1) or match.group(2)) != LETTERS[i]:
            return [o.strip() for o in options]
        stripped.append(option[match.end() :].strip())
    return stripped


def answer_letter(answer: Any, options: list[str], letters: list[str]) -> str:
    """The gold letter from a letter ("B", "(B)", "B."), an index is NOT accepted here, or an option's text.

    Deterministic: a single valid letter wins; otherwise an exact (case/space-insensitive) match to exactly one
    option; anything else is a row error.
    """
    if not isinstance(answer, str) or not answer.strip():
        raise RowError(f"answer missing or not a string: {answer!r}")
    text = answer.strip()
    match = re.fullmatch(r"\(?([A-Z])\)?[.:]?", text)
    if match:
        if match.group(1) not in letters:
            raise RowError(f"answer {text!r} is not one of the letters {''.join(letters)}")
        return match.group(1)
    norm = _norm(text)
    hits = [letters[i] for i, option in enumerate(options) if _norm(option) == norm]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        raise RowError(f"answer {text!r} matches none of the options {options}")
    raise RowError(f"answer {text!r} matches several options {hits}")


def _norm(text: str) -> str:
    return " ".join(text.lower().split()).rstrip(".")


def require(row: Any, *keys: str) -> None:
    if not isinstance(row, dict):
        raise RowError(f"expected an object, got {type(row).__name__}")
    missing = [k for k in keys if k not in row or row[k] is None]
    if missing:
        raise RowError(f"missing field(s) {missing}")


def as_text(value: Any, what: str) -> str:
    """A non-empty string; None, NaN (pandas-written parquet), other types and blank text are row errors."""
    if not isinstance(value, str):
        raise RowError(f"{what} must be text, got {value!r}")
    if not value.strip():
        raise RowError(f"{what} is empty")
    return value


def as_options(value: Any) -> list[str]:
    """A list of non-empty option texts (a blank or NaN option would leave a letter nothing to stand for)."""
    if hasattr(value, "tolist"):  # numpy arrays from parquet
        value = value.tolist()
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise RowError(f"options must be a list of strings, got {value!r}")
    for index, option in enumerate(value):
        if not option.strip():
            raise RowError(f"option {LETTERS[index] if index < MAX_OPTIONS else index} is empty")
    return list(value)


def relative_path(value: Any, what: str) -> str:
    """A path written in an annotation row: text, not absolute (POSIX or Windows form), not reaching above its
    base with ``..``. Such a row would make the loader read a file the release does not contain."""
    text = as_text(value, what)
    if (
        PurePosixPath(text).is_absolute()
        or PureWindowsPath(text).is_absolute()
        or PureWindowsPath(text).drive
    ):
        raise RowError(f"{what} {text!r} is absolute; the release writes paths relative to its root")
    normal = os.path.normpath(text.replace("\\", "/"))
    if normal == ".." or normal.startswith("../"):
        raise RowError(f"{what} {text!r} leaves the data root")
    return text


def as_float(value: Any, what: str) -> float | None:
    if value is None:
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise RowError(f"{what} is not a number: {value!r}") from None
    if math.isnan(number) or number < 0:
        raise RowError(f"{what} is not a non-negative number: {value!r}")
    return number


def evidence_window(row: dict) -> list[float] | None:
    """The synthetic data's ``evidence_window`` extra field, when present and well formed."""
    value = row.get("evidence_window")
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, (list, tuple)) and len(value) == 2:
        try:
            return [float(value[0]), float(value[1])]
        except (TypeError, ValueError):
            return None
    return None


# Bytes that are not UTF-8 decode (errors="surrogateescape") to the lone surrogates U+DC80..U+DCFF, one per byte.
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")


def read_json_rows(path: Path) -> list[Any]:
    """A JSON file holding a list of rows (ValueError on bad JSON, TypeError on a non-list; both name the file).

    A row holding bytes that are not UTF-8 comes back as a RowError naming the byte and its line, in place of the
    row: one bad byte costs its row alone, as a JSONL line costs its line, not the whole task file.
    """
    text = path.read_bytes().decode("utf-8-sig", errors="surrogateescape")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(data, list):
        raise TypeError(f"{path}: expected a JSON list of rows, got {type(data).__name__}")
    # The parser keeps strings (and object keys) in file order, so the k-th escaped byte met walking the rows in
    # order is the k-th in the text: that gives each bad row the line of its first bad byte.
    lines = iter(text.count("\n", 0, match.start()) + 1 for match in _ESCAPED_BYTE.finditer(text))
    return [_undecodable_row(row, lines) for row in data]


def _escaped_strings(value: Any) -> Iterator[str]:
    """Every string inside a parsed JSON value (keys before their values), in file order."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield key
            yield from _escaped_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _escaped_strings(item)


def _undecodable_row(row: Any, lines: Iterator[int]) -> Any:
    """`row` itself, or a RowError when one of its strings holds escaped (non-UTF-8) bytes; consumes from `lines`
    the line of every escaped byte the row holds."""
    first = None
    for text in _escaped_strings(row):
        for match in _ESCAPED_BYTE.finditer(text):
            line = next(lines, None)  # None: a "\\udcff" escape written in the JSON text, not a raw byte
            first = first or (line, ord(match.group()) - 0xDC00)
    if first is None:
        return row
    where = "" if first[0] is None else f" at line {first[0]}"
    return RowError(f"not valid UTF-8 (byte 0x{first[1]:02x}{where})")


def iter_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number starting at 1, parsed row or the RowError for a bad line); blank lines are skipped.
    The toolkit's one line reader, with a bad line as this module's RowError."""
    for number, value in iter_lines(path):
        yield number, RowError(value.message) if isinstance(value, LineProblem) else value


def read_parquet_rows(path: Path) -> list[dict]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def find_root(data_root: str | Path, folder: str, *markers: str) -> Path:
    """``data_root/folder`` when it holds one of ``markers`` (globs), else ``data_root`` itself when it does."""
    root = Path(data_root)
    for candidate in (root / folder, root):
        if candidate.is_dir() and any(any(candidate.glob(m)) for m in markers):
            return candidate
    raise FileNotFoundError(
        f"none of {list(markers)} under {root / folder} (nor under {root}); "
        f"see the loader's docstring for the expected layout"
    )


class Collector:
    """Accumulates samples and errors for one loader; enforces unique sample ids."""

    def __init__(self, benchmark: str, data_root: str | Path):
        self.benchmark = benchmark
        self.data_root = Path(data_root)
        self.samples: list[Sample] = []
        self.errors: list[BenchmarkError] = []
        self._ids: set[str] = set()

    def rel(self, path: Path) -> str:
        try:
            return path.relative_to(self.data_root).as_posix()
        except ValueError:
            return path.as_posix()

    def inside(self, base: Path, value: Any, what: str = "video path") -> Path:
        """``base / value`` after checking that it stays under ``data_root`` (compared lexically, so a symlinked
        video folder inside the data root is fine); a row error otherwise."""
        rel = relative_path(value, what)
        path = Path(os.path.normpath(base / rel))
        top = Path(os.path.normpath(self.data_root))
        if path != top and top not in path.parents:
            raise RowError(f"{what} {rel!r} resolves outside the data root {self.data_root}")
        return path

    def add(self, sample: Sample, file: Path, row: int | str) -> None:
        if sample.sample_id in self._ids:
            self.error(file, row, f"duplicate sample id {sample.sample_id!r}")
            return
        self._ids.add(sample.sample_id)
        sample.meta.setdefault("source_file", self.rel(file))
        sample.meta.setdefault("row", row)
        self.samples.append(sample)

    def error(self, file: Path, row: int | str | None, reason: str) -> None:
        self.errors.append(BenchmarkError(self.benchmark, file, row, reason))

    def result(self) -> tuple[list[Sample], list[BenchmarkError]]:
        return self.samples, self.errors


@dataclass(frozen=True)
class RowPlace:
    """Where a row sits, and what its loader knows beyond the row itself."""

    out: Collector
    root: Path  # the benchmark's folder, that the release's relative paths start from
    file: Path
    row: int | str  # the label a BenchmarkError for this row carries
    # what the loader read before the row: a parent line, a side table, a per-file id prefix
    context: Any = None


def _no_duration(row: Any, place: RowPlace) -> float | None:
    return None


def _keep_every_row(row: Any) -> bool:
    return False


@dataclass(frozen=True)
class RowMapping:
    """How one release's annotation row becomes a ``Sample``: the fields it must have, and one reader per
    ``Sample`` field. A reader raises RowError for a row it cannot use.

    ``order`` is the order video, meta and answer are read in after question and options: a row with several
    faults reports the first one met, and each release keeps the order its loader has always checked in.
    """

    required: tuple[str, ...]
    sample_id: Callable[[Any, RowPlace], str]
    question: Callable[[Any, RowPlace], str]
    options: Callable[[Any, RowPlace], list[str]]
    answer: Callable[[Any, list[str], list[str]], str | None]  # (row, options, letters)
    video: Callable[[Any, RowPlace], Path]
    meta: Callable[[Any, RowPlace, list[str]], dict]  # (row, place, options)
    duration: Callable[[Any, RowPlace], float | None] = _no_duration
    skip: Callable[[Any], bool] = _keep_every_row  # rows left out by design, not errors
    order: tuple[str, str, str] = ("video", "meta", "answer")


def row_to_sample(benchmark: str, mapping: RowMapping, row: Any, place: RowPlace) -> Sample | None:
    """The Sample ``mapping`` reads from ``row``, or None for a row skipped by design; RowError otherwise."""
    if isinstance(row, RowError):  # a line the reader could not parse
        raise row
    if mapping.required:
        require(row, *mapping.required)
    if mapping.skip(row):
        return None
    question = mapping.question(row, place)
    options = mapping.options(row, place)
    letters = letters_for(options)
    read = {
        "video": lambda: place.out.rel(mapping.video(row, place)),
        "meta": lambda: mapping.meta(row, place, options),
        "answer": lambda: mapping.answer(row, options, letters),
    }
    values = {name: read[name]() for name in mapping.order}
    return Sample(
        benchmark=benchmark,
        sample_id=mapping.sample_id(row, place),
        video=values["video"],
        question=question,
        options=options,
        letters=letters,
        answer=values["answer"],
        duration=mapping.duration(row, place),
        meta=values["meta"],
    )


def add_rows(
    out: Collector,
    mapping: RowMapping,
    file: Path,
    rows: Iterable[tuple[int | str, Any]],
    root: Path,
    context: Any = None,
) -> None:
    """Every ``(label, row)`` of ``file`` as a Sample in ``out``, or as a BenchmarkError naming file and label."""
    for label, row in rows:
        try:
            sample = row_to_sample(out.benchmark, mapping, row, RowPlace(out, root, file, label, context))
            if sample is not None:
                out.add(sample, file, label)
        except RowError as exc:
            out.error(file, label, str(exc))


def with_evidence_window(meta: dict, row: dict) -> dict:
    """``meta`` plus the row's ``evidence_window`` when it has a well-formed one."""
    window = evidence_window(row)
    if window:
        meta["evidence_window"] = window
    return meta
