"""The rows of one mix source as Arrow tables: HF `datasets`, memory-mapped, fingerprinted and cached on disk.

Three steps, each cached by `datasets` under the source's cache folder and reused while its input is unchanged:
1. raw rows: a parquet file through `Dataset.from_parquet` (read again when the file's path or mtime changes, as
   `datasets` tracks data files); a JSON list or JSONL file through `Dataset.from_generator`, one JSON text per row
   (`formats.row_texts`), fingerprinted by the file's path, size and mtime;
2. parsed rows: a `map` that parses every row with its format's reader (`formats.parse_row`), confines its media
   paths to the media root and names its tool traffic (`toolfree.tool_reason`). Per row: its position in the file,
   the Sample as JSON, its media paths, or the row error (reason and counter), and the tool reason;
3. tool-free rows: a `filter` keeping the rows with neither an error nor tool traffic (an index over step 2).
Fingerprints also hash the source text of the modules that define a step, so a changed parsing rule parses again.
No row ever becomes a Python object outside the batch a step is working on.
"""
from __future__ import annotations

import hashlib
import importlib
import json
import logging
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from cader.train.dataset_info import SharegptAttr
from cader.train.formats import (
    FormatError,
    MediaPathError,
    confine_sample,
    decode_row_text,
    parse_row,
    row_texts,
    sample_to_json,
)
from cader.train.toolfree import tool_reason
from datasets import Dataset, Features, List, Value

TEXT_FEATURES = Features({"json": Value("string")})
PARSED_FEATURES = Features({"row": Value("int64"), "sample": Value("string"), "media": List(Value("string")),
                            "error": Value("string"), "error_kind": Value("string"), "tool": Value("string")})
# below this many rows per process a step runs in this process: starting workers costs more than it saves
PARSE_ROWS_PER_WORKER = 20_000


def digest(obj) -> str:
    """A fingerprint `datasets` accepts (hex, 32 characters) of a JSON-able object."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:32]


def code_digest(*module_names: str) -> str:
    """Hash of the source text of modules: a step whose code changed must not reuse what the old code cached."""
    sha = hashlib.sha256()
    for name in module_names:
        sha.update(Path(importlib.import_module(name).__file__).read_bytes())
    return sha.hexdigest()[:32]


def workers_for(n_rows: int, workers: int, rows_per_worker: int) -> int | None:
    """`num_proc` for a step over n_rows: None (this process) unless at least two workers get enough rows."""
    n = min(workers, n_rows // max(1, rows_per_worker))
    return n if n >= 2 else None


@contextmanager
def quiet_datasets(quiet: bool = True):
    """No progress bars or info lines from `datasets` while it reads sources: `--plan_only` prints one line per
    source, and a bar per small file would bury them."""
    from datasets.utils import logging as ds_logging

    if not quiet:
        yield
        return
    bars, level = ds_logging.is_progress_bar_enabled(), ds_logging.get_verbosity()
    ds_logging.disable_progress_bar()
    ds_logging.set_verbosity(logging.ERROR)
    try:
        yield
    finally:
        ds_logging.set_verbosity(level)
        if bars:
            ds_logging.enable_progress_bar()


# ---- step 1: raw rows -------------------------------------------------------------------------------------------

def _text_rows(path: str):
    for text in row_texts(path):
        yield {"json": text}


def raw_rows(path: Path, cache_dir: Path) -> Dataset:
    """The file's rows as `datasets` reads them. Raises the reader's own error for a file that cannot be read."""
    from datasets.exceptions import DatasetGenerationError

    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        if pq.ParquetFile(path).metadata.num_rows == 0:      # a file that is not parquet fails here, too
            return Dataset.from_dict({"json": []}, features=TEXT_FEATURES)
        return Dataset.from_parquet(str(path), cache_dir=str(cache_dir))
    st = path.stat()
    fingerprint = digest(["text rows", str(path.resolve()), st.st_size, st.st_mtime_ns,
                          code_digest("cader.train.formats", __name__)])
    try:
        return Dataset.from_generator(_text_rows, gen_kwargs={"path": str(path)}, features=TEXT_FEATURES,
                                      cache_dir=str(cache_dir), fingerprint=fingerprint)
    except DatasetGenerationError as err:        # the reader's own error says what is wrong with the file
        raise (err.__cause__ or err) from None
    except ValueError:
        if next(row_texts(path), None) is None:   # `datasets` builds no table from an empty generator
            return Dataset.from_dict({"json": []}, features=TEXT_FEATURES)
        raise


# ---- step 2: parsed rows ----------------------------------------------------------------------------------------

class ParseRows:
    """The parse `map`'s function: one batch of raw rows (a pyarrow table) -> PARSED_FEATURES columns."""

    def __init__(self, fmt: str, name: str, path: str, texts: bool, attr: SharegptAttr | None = None):
        self.fmt, self.name, self.path, self.texts, self.attr = fmt, name, path, texts, attr

    def rows(self, batch: pa.Table) -> list:
        if self.texts:
            return [decode_row_text(text) for text in batch.column("json").to_pylist()]
        return batch.to_pylist()            # the rows pyarrow makes of a parquet file, whatever its features say

    def __call__(self, batch: pa.Table, indices: list[int]) -> dict:
        out = {key: [] for key in PARSED_FEATURES}
        for row, index in zip(self.rows(batch), indices):
            sample, error = parse_row(self.fmt, row, index, self.name, self.path, self.attr), None
            if isinstance(sample, FormatError):
                sample, error = None, sample
            else:
                try:
                    confine_sample(sample)
                except MediaPathError as err:
                    sample, error = None, FormatError(self.path, index, str(err), kind="media_outside_root")
            out["row"].append(index)
            out["sample"].append(None if sample is None else sample_to_json(sample))
            out["media"].append([] if sample is None else [m["path"] for m in sample.media])
            out["error"].append(None if error is None else error.reason)
            out["error_kind"].append(None if error is None else error.kind)
            out["tool"].append(None if sample is None else tool_reason(sample))
        return out


PARSE_CODE = ("cader.train.formats", "cader.train.dataset_info", "cader.train.toolfree", __name__)


def parse_rows(raw: Dataset, fmt: str, name: str, path: Path, workers: int,
               attr: SharegptAttr | None = None) -> Dataset:
    """Every raw row parsed (step 2); `attr`: a sharegpt file's dataset_info columns and tags."""
    if len(raw) == 0:
        return Dataset.from_dict({key: [] for key in PARSED_FEATURES}, features=PARSED_FEATURES)
    mapping = None if attr is None else attr.as_dict()
    fingerprint = digest(["parsed", raw._fingerprint, fmt, name, mapping, code_digest(*PARSE_CODE)])
    return raw.with_format("arrow").map(
        ParseRows(fmt, name, str(path), texts=path.suffix != ".parquet", attr=attr), with_indices=True, batched=True, batch_size=1_000,
        remove_columns=raw.column_names, features=PARSED_FEATURES, new_fingerprint=fingerprint,
        num_proc=workers_for(len(raw), workers, PARSE_ROWS_PER_WORKER)).with_format(None)


# ---- step 3: tool-free rows, and what the others were -----------------------------------------------------------

def _trainable(errors: list, tools: list) -> list[bool]:
    return [error is None and tool is None for error, tool in zip(errors, tools)]


def tool_free_rows(parsed: Dataset, workers: int) -> Dataset:
    """The parsed rows without a row error or tool traffic, in file order."""
    if len(parsed) == 0:
        return parsed
    return parsed.filter(_trainable, input_columns=["error", "tool"], batched=True, batch_size=4096,
                         new_fingerprint=digest(["tool-free", parsed._fingerprint]),
                         num_proc=workers_for(len(parsed), workers, PARSE_ROWS_PER_WORKER))


def row_errors(parsed: Dataset, path: Path) -> list[FormatError]:
    """A FormatError naming file and row for every row that could not be parsed or left the media root."""
    table = parsed.data.table.select(["row", "error", "error_kind"])    # never touch the samples' pages
    bad = table.filter(pc.is_valid(table.column("error")))
    return [FormatError(path, r["row"], r["error"], kind=r["error_kind"]) for r in bad.to_pylist()]


def tool_count(parsed: Dataset) -> int:
    """Rows the tool-free filter drops (parsed, media inside the root, with tool traffic)."""
    column = parsed.data.table.column("tool")
    return len(column) - column.null_count
