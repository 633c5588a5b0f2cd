"""lmms-eval task documents as cader samples: the question, the options and the gold letter, read per task from the
task's raw document (the rows of its Hugging Face dataset, as lmms-eval's own task utils read them).

- Video-MME (`videomme*`): `question`, `options` (["A. ...", "B. ...", ...]), `answer` (a letter), `question_id`,
  `videoID`, `duration` ("short" / "medium" / "long": a bucket, not seconds), `task_type`
  (lmms_eval/tasks/videomme/utils.py: videomme_doc_to_text, videomme_process_results).
- LongVideoBench (`longvideobench*`): `question`, `option0`..`option4` ("N/A" past the last one; the release's
  lvb_val.json has `candidates` instead, also read), `correct_choice` (0-based index), `id`, `duration` (seconds),
  `question_category` (lmms_eval/tasks/longvideobench/utils.py: longvideobench_doc_to_text,
  longvideobench_process_results).
- Video-MME-v2 (`videomme_v2*`): `question`, `options` ONE string of newline-joined lettered lines
  ("A. ...\\nB. ...\\n...H. ...", 8 options in the release; a list of such lines is read too), `answer` (a letter
  A-H), `question_id` ("<video_id>-<n>"), `video_id`, `group_type`, `group_structure`, `level`, `second_head`,
  `third_head` (lmms_eval/tasks/videomme_v2/utils.py: videomme_v2_doc_to_text, videomme_v2_process_results).
- LVBench (`lvbench*`): the options are embedded in `question` as "stem\\n(A) x\\n(B) y", or, when the row has a
  non-empty `options` list, `question` is the stem and the list the options (lvbench_doc_to_text appends them as
  "(A) x" lines); gold `answer` is a letter (lmms_eval/tasks/lvbench/utils.py).
- MLVU (`mlvu*`): the options are embedded in `question` as "stem\\n(A) x\\n(B) y" (a blank stem or option is
  kept, as MLVU's official scorer and cader's mlvu_dev loader ask it); gold `answer` is a letter, or "@", the
  official scorer's letter for an answer that is none of the candidates, which no prediction equals; `task_type`
  is the group its M-Avg runs over (lmms_eval/tasks/mlvu/utils.py: the question text is the prompt as is).

A task outside these families is refused with an error naming it and the supported ones: cader answers multiple
choice only, and reading options from an unknown document would guess. A document of a known family whose options
have a shape cader cannot read (a v2 line without its letter, LVBench `options` that are not a list of text) is a
`BadDocument` naming the task, the doc id and the shape: that one document fails, the run goes on.
"""

from __future__ import annotations

import hashlib
import json
import re

from cader.evaluate.benchmarks.base import (
    LETTERS,
    RowError,
    Sample,
    answer_letter,
    letters_for,
    strip_letter_prefixes,
)
from cader.evaluate.benchmarks.lvbench import split_options
from cader.evaluate.benchmarks.mlvu import NO_MATCH

# Longest prefix first: videomme_v2* documents are not Video-MME's (one options string, letters A-H).
SUPPORTED = ("videomme_v2", "videomme", "longvideobench", "lvbench", "mlvu")
_OPTION_LINE = re.compile(r"\n[ \t]*\(([A-Z])\)[ \t]*")
_LETTERED = re.compile(r"\s*([A-Z])[.:)]\s?(.*)", re.DOTALL)


class UnsupportedTask(ValueError):
    """A task whose documents cader cannot read as multiple choice."""


class BadDocument(ValueError):
    """A document of a supported task that lacks a field or holds an unusable value; names task and doc id."""


def family_of(task: str) -> str:
    """The task family by name prefix (lmms-eval's task names: videomme, videomme_long, longvideobench_val_v,
    lvbench, mlvu_dev, ...)."""
    for family in SUPPORTED:
        if task.startswith(family):
            return family
    raise UnsupportedTask(f"lmms-eval task {task!r} is not supported by cader: it reads multiple-choice options from "
                          f"the documents of {', '.join(t + '*' for t in SUPPORTED)} only")


def _serializable(value):
    """What lmms-eval's handle_non_serializable makes of a value json cannot write (numpy ints, sets, the rest)."""
    if hasattr(value, "dtype") and getattr(value.dtype, "kind", "") in "iu" and getattr(value, "ndim", 1) == 0:
        return int(value)
    if isinstance(value, set):
        return list(value)
    return str(value)


def doc_hash(doc: dict) -> str:
    """The document's digest exactly as lmms-eval writes it into its samples file (`doc_hash`: sha256 of
    json.dumps(doc, indent=2, ensure_ascii=False) in the document's field order; lmms_eval/evaluator.py), so the
    side file and lmms-eval's own samples join on it, and a rerun on another dataset revision is not a resume."""
    text = json.dumps(doc, indent=2, default=_serializable, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _field(doc: dict, key: str, task: str, doc_id):
    if key not in doc or doc[key] is None:
        raise BadDocument(f"{task} doc {doc_id}: no {key!r} field (fields: {', '.join(sorted(doc))})")
    return doc[key]


def _text(value, key: str, task: str, doc_id) -> str:
    if not isinstance(value, str):
        raise BadDocument(f"{task} doc {doc_id}: {key!r} is {type(value).__name__}, not text")
    return value


def first_of(value):
    """LVBench's `question_type` is a list in its release (the loader's task type is the first one)."""
    if isinstance(value, (list, tuple)):
        return value[0] if value else None
    return value


def _seconds(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def longvideobench_options(doc: dict, task: str, doc_id) -> list[str]:
    """LongVideoBench's options: `option0`..`option4` up to the first "N/A" (the Hugging Face rows lmms-eval
    reads; its longvideobench_process_results stops there, so later letters are never choices), or `candidates`
    (the release's lvb_val.json)."""
    if "candidates" in doc and doc["candidates"] is not None:
        return [str(c) for c in doc["candidates"]]
    options = []
    for i in range(5):
        value = doc.get(f"option{i}")
        if value is None or value == "N/A":
            break
        options.append(str(value))
    if not options:
        raise BadDocument(f"{task} doc {doc_id}: no 'option0' (or 'candidates') field (fields: {', '.join(sorted(doc))})")
    return options


def lettered_lines(lines: list, what: str) -> list[str]:
    """The option texts of "A. x", "B. y", ... lines, strictly: every line must carry the next letter in order (a
    line without one would be a continuation cader cannot place, or a different shape); RowError otherwise."""
    options = []
    for i, line in enumerate(lines):
        match = _LETTERED.fullmatch(line) if isinstance(line, str) else None
        if i >= len(LETTERS) or not match or match.group(1) != LETTERS[i]:
            raise RowError(f"{what} line {i + 1} is {line!r:.60}, not '{LETTERS[min(i, 25)]}. ...' "
                           "(the options must be lettered A, B, C, ... in order, one a line)")
        options.append(match.group(2).strip())
    return options


def videomme_v2_options(value) -> list[str]:
    """Video-MME-v2's options: one string of newline-joined lettered lines (lmms-eval 0.7.3 passes it to the prompt
    as is and splits it on newlines to match option texts), or a list of such lines."""
    if isinstance(value, str):
        lines = value.strip().split("\n")
    elif isinstance(value, (list, tuple)):
        lines = list(value)
    else:
        raise RowError(f"'options' is {type(value).__name__}, not the newline-joined 'A. ...' string")
    if not any(isinstance(line, str) and line.strip() for line in lines):
        raise RowError("'options' is empty")
    return lettered_lines(lines, "'options'")


def lvbench_question_and_options(doc: dict, question: str) -> tuple[str, list[str]]:
    """LVBench's stem and options: a non-empty `options` list (the stem is then `question`), else the options
    embedded in `question`; lmms-eval's lvbench_doc_to_text makes the same choice."""
    listed = doc.get("options")
    if listed is None or (isinstance(listed, (list, tuple)) and len(listed) == 0):
        return split_options(question)
    if not isinstance(listed, (list, tuple)) or not all(isinstance(o, str) for o in listed):
        raise RowError(f"'options' is {type(listed).__name__} {listed!r:.60}, not a list of option texts")
    if not question.strip():
        raise RowError("question is empty")
    return question.strip(), [str(o).strip() for o in listed]


def mlvu_question_and_options(text: str) -> tuple[str, list[str]]:
    """MLVU's stem and options from "stem\\n(A) x\\n(B) y", blank ones kept: MLVU's official scorer asks a blank
    question or option as it is (cader's mlvu_dev loader too), so only missing or out-of-order letters are
    errors."""
    parts = _OPTION_LINE.split(text)
    letters, options = parts[1::2], [option.strip() for option in parts[2::2]]
    if not options:
        raise RowError("no '(A) ...' options found in the question text")
    if letters != list(LETTERS[: len(letters)]):
        raise RowError(f"option letters {letters} are not A, B, C, ... in order")
    return parts[0].strip(), options


def gold_letter(family: str, answer, options: list[str], letters: list[str]) -> str:
    """The gold letter; MLVU's rows may carry the official scorer's no-match letter (its gold index -1, for a
    release answer that is none of the candidates), which no prediction equals, as in its M-Avg."""
    if family == "mlvu" and answer == NO_MATCH:
        return NO_MATCH
    return answer_letter(answer, options, letters)


def sample_from_doc(task: str, doc: dict, doc_id: int, video: str) -> Sample:
    """The cader sample for one lmms-eval document; `video` is the path the task's doc_to_visual returned."""
    family = family_of(task)
    try:
        if family == "videomme":
            question = _text(_field(doc, "question", task, doc_id), "question", task, doc_id)
            options = strip_letter_prefixes([str(o) for o in _field(doc, "options", task, doc_id)])
            letters = letters_for(options)
            answer = answer_letter(_field(doc, "answer", task, doc_id), options, letters)
            sample_id, duration = doc.get("question_id", doc_id), None  # duration is a bucket name
            meta = {"task_type": doc.get("task_type"), "duration_bucket": doc.get("duration")}
        elif family == "videomme_v2":
            question = _text(_field(doc, "question", task, doc_id), "question", task, doc_id)
            options = videomme_v2_options(_field(doc, "options", task, doc_id))
            letters = letters_for(options)
            answer = answer_letter(_field(doc, "answer", task, doc_id), options, letters)
            sample_id, duration = doc.get("question_id", doc_id), None
            meta = {k: doc.get(k) for k in ("group_type", "level", "second_head", "third_head")}
        elif family == "longvideobench":
            question = _text(_field(doc, "question", task, doc_id), "question", task, doc_id)
            options = longvideobench_options(doc, task, doc_id)
            letters = letters_for(options)
            choice = _field(doc, "correct_choice", task, doc_id)
            if not isinstance(choice, int) or not 0 <= choice < len(options):
                raise RowError(f"correct_choice {choice!r} is not an index into {len(options)} candidates")
            answer, sample_id, duration = letters[choice], doc.get("id", doc_id), _seconds(doc.get("duration"))
            meta = {"task_type": doc.get("question_category")}
        else:  # lvbench, mlvu: "stem\n(A) x\n(B) y" (LVBench: or an `options` list)
            text = _text(_field(doc, "question", task, doc_id), "question", task, doc_id)
            if family == "lvbench":
                question, options = lvbench_question_and_options(doc, text)
            else:
                question, options = mlvu_question_and_options(text)
            letters = letters_for(options)
            answer = gold_letter(family, _field(doc, "answer", task, doc_id), options, letters)
            sample_id = doc.get("uid", doc.get("key", doc_id)) if family == "lvbench" else doc_id
            duration = _seconds(doc.get("duration"))
            meta = {"task_type": doc.get("task_type") or first_of(doc.get("question_type"))}
    except RowError as exc:
        raise BadDocument(f"{task} doc {doc_id}: {exc}") from None
    meta = {k: v for k, v in meta.items() if v is not None}
    return Sample(task, str(sample_id), video, question, options, letters, answer, duration, meta)
