"""lmms-eval task documents as cader samples: the question, the options and the gold letter, read per task from the
task's raw document (the rows of its Hugging Face dataset, as lmms-eval's own task utils read them).

- Video-MME (`videomme*`): `question`, `options` (["A. ...", "B. ...", ...]), `answer` (a letter), `question_id`,
  `videoID`, `duration` ("short" / "medium" / "long": a bucket, not seconds), `task_type`
  (lmms_eval/tasks/videomme/utils.py: videomme_doc_to_text, videomme_process_results).
- LongVideoBench (`longvideobench*`): `question`, `option0`..`option4` ("N/A" past the last one; the release's
  lvb_val.json has `candidates` instead, also read), `correct_choice` (0-based index), `id`, `duration` (seconds),
  `question_category` (lmms_eval/tasks/longvideobench/utils.py: longvideobench_doc_to_text,
  longvideobench_process_results).
- LVBench (`lvbench*`) and MLVU (`mlvu*`): the options are embedded in `question` as "stem\\n(A) x\\n(B) y"; gold
  `answer` is a letter; MLVU's `task_type` is the group its M-Avg runs over (lmms_eval/tasks/lvbench/utils.py,
  lmms_eval/tasks/mlvu/utils.py: the question text is the prompt as is).

A task outside these families is refused with an error naming it and the supported ones: cader answers multiple
choice only, and reading options from an unknown document would guess.
"""

from __future__ import annotations

import hashlib
import json

from cader.evaluate.benchmarks.base import RowError, Sample, answer_letter, letters_for, strip_letter_prefixes
from cader.evaluate.benchmarks.lvbench import split_options

SUPPORTED = ("videomme", "longvideobench", "lvbench", "mlvu")


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
        elif family == "longvideobench":
            question = _text(_field(doc, "question", task, doc_id), "question", task, doc_id)
            options = longvideobench_options(doc, task, doc_id)
            letters = letters_for(options)
            choice = _field(doc, "correct_choice", task, doc_id)
            if not isinstance(choice, int) or not 0 <= choice < len(options):
                raise RowError(f"correct_choice {choice!r} is not an index into {len(options)} candidates")
            answer, sample_id, duration = letters[choice], doc.get("id", doc_id), _seconds(doc.get("duration"))
            meta = {"task_type": doc.get("question_category")}
        else:  # lvbench, mlvu: "stem\n(A) x\n(B) y"
            question, options = split_options(_text(_field(doc, "question", task, doc_id), "question", task, doc_id))
            letters = letters_for(options)
            answer = answer_letter(_field(doc, "answer", task, doc_id), options, letters)
            sample_id = doc.get("uid", doc.get("key", doc_id)) if family == "lvbench" else doc_id
            duration = _seconds(doc.get("duration"))
            meta = {"task_type": doc.get("task_type") or doc.get("question_type")}
    except RowError as exc:
        raise BadDocument(f"{task} doc {doc_id}: {exc}") from None
    meta = {k: v for k, v in meta.items() if v is not None}
    return Sample(task, str(sample_id), video, question, options, letters, answer, duration, meta)
