"""Reading an lmms-eval `--log_samples` file (`<date>_samples_<task>.jsonl`) of any model: per document, correct or
not, keyed so that it lines up with cader's records of the same benchmark.

lmms-eval 0.7.3 writes one line per document (lmms_eval/evaluator.py `_process_document_results`, then
lmms_eval/loggers/evaluation_tracker.py `save_results_samples`, which drops `doc` and `arguments`): `doc_id` (the
document's place in the task's split), `target`, `filtered_resps`, `token_counts`, `doc_hash`, `input`, optionally
`resps` and `input_media`, and one key per value the task's `process_results` returned. Which of those is the
answer's correctness, and which field is the benchmark's question id, is the task's business
(tests/fixtures/lmms_eval_samples/PROVENANCE.md):

| metric key | per document | correct when | question key |
|---|---|---|---|
| `videomme_perception_score` | dict | `pred_answer == answer` (videomme_aggregate_results) | `question_id` |
| `lvb_acc` | dict | `parsed_pred` equals `answer` or one of its items (eval_multi_choice) | `id` |
| `mlvu_percetion_score` | dict | `pred_answer == answer` (mlvu_aggregate_results_dev) | none (its `question_id` is the question text) |
| `lvbench_score` | bool | true | none |
| `cader_accuracy` | 0/1 (`cader export-lmms`) | 1 | `cader.sample_id` |

Another task's metric is read when it is the only one that reads as correct/incorrect: true/false, 0/1, or a dict
with a 0/1 `score` or with `pred_answer`/`parsed_pred` and `answer`. Without a question key a document is known by
`<task>/<doc_id>` only (the task from the file name), which lines up with another lmms-eval run of the task or with
cader records from `lmms-eval --model cader` (their `lmms.task`, `lmms.doc_id`), not with a plain cader run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cader.contracts.jsonl import LineProblem, iter_lines

# what save_results_samples writes besides the metrics (and `cader`, the block `cader export-lmms` adds)
LOGGED_KEYS = frozenset({"doc_id", "doc", "target", "arguments", "resps", "filtered_resps", "token_counts",
                         "doc_hash", "input", "input_media", "cader"})
FILE_NAME = re.compile(r"(?:^|_)samples_(?P<task>.+)\.jsonl$")


class SamplesFileError(OSError):
    """An lmms-eval samples file that cannot be compared as a whole; the one-line message names the path."""

    def __init__(self, path: str | Path, why: str):
        super().__init__(f"{path}: {why}")
        self.path = Path(path)


class UnreadableMetric(ValueError):
    """One document's metric value that is not correct/incorrect."""


def is_samples_row(row: Any) -> bool:
    """Whether a parsed line is an lmms-eval samples line (save_results_samples always writes both keys; a cader
    predictions record has neither)."""
    return isinstance(row, dict) and "doc_id" in row and "filtered_resps" in row and "sample_id" not in row


def _zero_one(value: Any) -> float:
    # bool first: True == 1 would pass the number test, but a bool is already an answer
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and value in (0, 1):
        return float(value)
    raise UnreadableMetric(f"{value!r} is neither 0/1 nor true/false")


def _same_letter(value: Any, pred_field: str) -> float:
    if not isinstance(value, dict) or pred_field not in value or "answer" not in value:
        raise UnreadableMetric(f"{_short(value)} has no '{pred_field}' and 'answer'")
    gold = value["answer"]
    # eval_multi_choice: a list of golds is right when any of them matches
    return float(value[pred_field] in gold if isinstance(gold, list) else value[pred_field] == gold)


def _any_shape(value: Any) -> float:
    if isinstance(value, dict):
        if "score" in value:
            return _zero_one(value["score"])
        for pred_field in ("pred_answer", "parsed_pred"):
            if pred_field in value:
                return _same_letter(value, pred_field)
        raise UnreadableMetric(f"{_short(value)} has no 'score', nor 'pred_answer'/'parsed_pred' and 'answer'")
    return _zero_one(value)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass(frozen=True)
class Family:
    """How one task family's metric reads: `correct(value)` -> 1.0/0.0; `key(row)` -> the question id or None."""

    correct: Any
    key: Any = None
    no_key_why: str = ""


FAMILIES: dict[str, Family] = {
    "videomme_perception_score": Family(lambda v: _same_letter(v, "pred_answer"),
                                        key=lambda row, v: v.get("question_id")),
    "lvb_acc": Family(lambda v: _same_letter(v, "parsed_pred"), key=lambda row, v: v.get("id")),
    "mlvu_percetion_score": Family(lambda v: _same_letter(v, "pred_answer"),
                                   no_key_why="lmms-eval's mlvu_process_results logs the question text as "
                                              "question_id, cader keys MLVU by <task file>-<row>"),
    "lvbench_score": Family(_zero_one, no_key_why="lmms-eval's lvbench_process_results logs a bare bool, no uid"),
    "cader_accuracy": Family(_zero_one, key=lambda row, v: (row.get("cader") or {}).get("sample_id")),
}


@dataclass
class SamplesScores:
    """One samples file read for comparison.

    `by_question`: question key -> 1.0/0.0, or None when the task logs no question id (`no_key_why` says so);
    `by_doc`: `<task>/<doc_id>` -> 1.0/0.0, or None when the file name does not say the task or the doc ids are
    line numbers (`no_doc_why` says which); `problems`: one
    "file:line: why" per line left out (a document left out scores 0 as a missing answer)."""

    path: Path
    task: str | None
    metric: str
    by_question: dict[str, float] | None
    by_doc: dict[str, float] | None
    no_key_why: str = ""
    no_doc_why: str = ""
    problems: list[str] = field(default_factory=list)


NO_TASK_WHY = "its file name does not say the task (lmms-eval writes <date>_samples_<task>.jsonl)"
LINE_NUMBER_WHY = ("its doc_ids are line numbers (`cader export-lmms` of a run not made through lmms-eval), not "
                   "lmms-eval's document indices")


def _doc_id_is_a_line_number(row: dict) -> bool:
    return (row.get("cader") or {}).get("doc_id_from") == "line" if isinstance(row.get("cader"), dict) else False


def task_of(path: str | Path) -> str | None:
    """The task in lmms-eval's file name `<date>_samples_<task>.jsonl` (or cader's `samples_<task>.jsonl`)."""
    match = FILE_NAME.search(Path(path).name)
    return match.group("task") if match else None


def _pick_metric(path: Path, rows: list[tuple[int, dict]]) -> str:
    """The metric key that says correct/incorrect: a known family's, else the one other key that reads so."""
    seen: dict[str, tuple[int, Any]] = {}
    for number, row in rows:
        for name, value in row.items():
            if name not in LOGGED_KEYS:
                seen.setdefault(name, (number, value))
    known = [name for name in seen if name in FAMILIES]
    if known:
        return known[0]
    readable = []
    for name, (_, value) in seen.items():
        try:
            _any_shape(value)
            readable.append(name)
        except UnreadableMetric:
            pass
    if len(readable) == 1:
        return readable[0]
    if not seen:
        raise SamplesFileError(path, "lmms-eval samples without any metric key")
    if readable:
        raise SamplesFileError(path, f"lmms-eval samples with several 0/1 metrics {sorted(readable)}; "
                                     "compare cannot tell which one is the answer's correctness")
    shown = "; ".join(f"line {number}: {name} = {_short(value)}" for name, (number, value) in seen.items())
    raise SamplesFileError(path, "lmms-eval samples whose metric cannot be read as correct/incorrect "
                                 f"({shown}); compare needs true/false or 0/1 per document, or a dict with a 0/1 "
                                 "'score' or with 'pred_answer'/'parsed_pred' and 'answer'")


def check_doc_ids(path: Path, rows: list[tuple[int, dict]]) -> None:
    """SamplesFileError unless every samples line has its own integer doc_id: lmms-eval writes one line per
    document, its index in the task's split, so a null or repeated id is a file that was edited or concatenated,
    and keeping either copy would score an answer that may not be the system's."""
    first_line: dict[int, int] = {}
    for number, row in rows:
        doc_id = row["doc_id"]
        if isinstance(doc_id, bool) or not isinstance(doc_id, int):
            raise SamplesFileError(path, f"line {number}: doc_id {doc_id!r} is not a document index (lmms-eval "
                                         "writes the document's integer index in the task's split)")
        if doc_id in first_line:
            raise SamplesFileError(path, f"doc_id {doc_id} is on lines {first_line[doc_id]} and {number}: one "
                                         "document logged twice (a concatenated or edited file); compare cannot "
                                         "tell which answer is the system's")
        first_line[doc_id] = number


def read_samples(path: str | Path) -> SamplesScores:
    """Per-document correctness of an lmms-eval samples file (see the module docstring for the rules).

    Args:
        path: a `<date>_samples_<task>.jsonl` file written by `lmms-eval --log_samples` (or `cader export-lmms`)

    Returns:
        The scores by question key and by `<task>/<doc_id>`, and the lines left out.

    Raises:
        SamplesFileError: when no line is a samples line, no metric reads as correct/incorrect, a doc_id is not an
            integer or is on two lines, or a question id is on two lines.
    """
    path = Path(path)
    problems, rows = [], []
    for number, value in iter_lines(path):
        if isinstance(value, LineProblem):
            problems.append((number, f"{value.reason} ({value.detail})"))
        elif not is_samples_row(value):
            problems.append((number, "not an lmms-eval samples line (needs doc_id and filtered_resps)"))
        else:
            rows.append((number, value))
    if not rows:
        raise SamplesFileError(path, "no lmms-eval samples lines in it")
    metric = _pick_metric(path, rows)
    family = FAMILIES.get(metric, Family(_any_shape, no_key_why=f"the task's metric {metric!r} names no question"))
    task = task_of(path)
    by_question: dict[str, float] | None = {} if family.key is not None else None
    by_doc: dict[str, float] | None = {} if task is not None else None
    no_doc_why = "" if task is not None else NO_TASK_WHY
    if any(_doc_id_is_a_line_number(row) for _, row in rows):
        # `cader export-lmms` of a run not made through lmms-eval numbers documents by line: pairing those numbers
        # with lmms-eval's document indices would line up different questions
        by_doc, no_doc_why = None, LINE_NUMBER_WHY
    check_doc_ids(path, rows)
    first_line_of_question: dict[str, int] = {}
    for number, row in rows:
        value = row.get(metric)
        try:
            if metric not in row:
                raise UnreadableMetric("missing")
            score = family.correct(value)
        except UnreadableMetric as error:
            problems.append((number, f"doc {row['doc_id']}: {metric} {error}"))
            continue
        if by_question is not None:
            key = family.key(row, value)
            if key is None:
                problems.append((number, f"doc {row['doc_id']}: no question id in {metric}"))
                continue
            if str(key) in first_line_of_question:
                raise SamplesFileError(path, f"question {key} is logged twice, on lines "
                                             f"{first_line_of_question[str(key)]} and {number}: compare cannot tell "
                                             "which answer is the system's")
            first_line_of_question[str(key)] = number
            by_question[str(key)] = score
        if by_doc is not None:
            by_doc[f"{task}/{row['doc_id']}"] = score
    return SamplesScores(path=path, task=task, metric=metric, by_question=by_question, by_doc=by_doc,
                         no_key_why=family.no_key_why, no_doc_why=no_doc_why,
                         problems=[f"{path}:{number}: {why}" for number, why in sorted(problems)])
