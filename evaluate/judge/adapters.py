"""Adapters: another framework's prediction output -> predictions records the renderer knows (render.py).

Each adapter names the fields it maps, and maps nothing else: an unknown key of the foreign output (a gold letter,
the milestones, a correctness flag) is never carried over, so it can never reach the judge.

`agentvidbench_run`: a run folder of the official AgentVidBench harness (github.com/krafton-ai/agentvidbench; read
at commit 13059bb69fee92de5cc79aeda7836d8aa20ccaeb of its public mirror jhyeonseo/agentvidbench):
- `<run>/inference/outputs/question<N>.normalized.json`: the normalized trajectory (framework/_shared/
  trajectory_schema.py, `NormalizedTrajectory.to_dict`, schema_version "1.1"): `question_id` (legacy "qid"),
  `steps` = [{"step_id", "phase", "method_native_type", "data": {...}}]; the method runner writes it
  (framework/methods/ours/runner.py, `outputs_dir = output_dir / "outputs"`, with output_dir = <run>/inference).
- `<run>/evaluation/letters/question<N>.json`: the harness's letter extraction (evaluation/extract_letters.py,
  `majority_letter`: "A".."Z" or null), written by evaluate.py; when absent, the letter of the last `answer` step.
- `<run>/inference/trajectories/question<N>.txt`: the framework's own judge input, which the official judge reads
  verbatim (evaluation/judge.py, `read_prediction`; singleturn writes the raw response there, `_save_outputs`). It
  is kept as the record's `trajectory_text` (judged verbatim under `--protocol official`); a question with no
  normalized trajectory shows it as its `response` under `--protocol paper`. A question without that file is
  marked (`trajectory_text_missing`: its path): the official judge records `missing_pred` for it and so does
  `--protocol official`, rather than judging cader's rendering, whose FINAL ANSWER line would show the letter.
- `<run>/inference/summary.json`: `results`, one per question run; a result with an `error` key is an errored
  inference (framework/orchestration.py, `write_summary`), which evaluate.py leaves out (`inference_qids`). It
  becomes the record's `error`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from cader.evaluate.judge.protocol import MISSING_KEY, VERBATIM_KEY
from cader.evaluate.judge.questions import InputRowError, load_predictions
from cader.evaluate.judge.render import AGENT_STEP_FIELDS, UNKNOWN_PHASE_FIELDS, pick

_NORMALIZED = re.compile(r"^question(\d+)\.normalized\.json$")
_TRAJECTORY = re.compile(r"^question(\d+)\.txt$")


def _letter(value) -> str | None:
    if isinstance(value, str) and len(value.strip()) == 1 and value.strip().upper().isalpha():
        return value.strip().upper()
    return None


def normalized_trajectory_record(trajectory: dict, letters: dict | None = None) -> dict:
    """One official normalized trajectory (+ its letters file) -> a predictions record with `trajectory` steps."""
    qid = trajectory.get("question_id", trajectory.get("qid"))
    if qid is None:
        raise ValueError("no 'question_id' (or legacy 'qid')")
    steps, answer_letter = [], None
    for index, step in enumerate(trajectory.get("steps") or []):
        if not isinstance(step, dict) or not isinstance(step.get("phase"), str):
            raise TypeError(f"steps[{index}] needs a string 'phase'")
        data = step.get("data") if isinstance(step.get("data"), dict) else {}
        phase = step["phase"]
        steps.append({"phase": phase, **pick(data, AGENT_STEP_FIELDS.get(phase, UNKNOWN_PHASE_FIELDS))})
        if phase == "answer":
            answer_letter = _letter(data.get("letter")) or answer_letter
    pred = _letter((letters or {}).get("majority_letter")) if letters and "majority_letter" in letters \
        else answer_letter
    return {"question_id": qid, "trajectory": steps, "pred": pred}


def _numbered(folder: Path, pattern: re.Pattern) -> list[tuple[int, Path]]:
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), path) for path in folder.iterdir() if (m := pattern.match(path.name))]
    return sorted(found)


def _read_letters(run_dir: Path, qid: int) -> dict | None:
    path = run_dir / "evaluation" / "letters" / f"question{qid}.json"
    if not path.exists():
        return None
    letters = json.loads(path.read_text(encoding="utf-8"))
    return letters if isinstance(letters, dict) else None


def _add_verbatim_texts(run_dir: Path, records: dict[str, dict], errors: list[InputRowError]) -> None:
    for qid, path in _numbered(run_dir / "inference" / "trajectories", _TRAJECTORY):
        try:
            text = path.read_bytes().decode("utf-8")
            record = records.get(str(qid))
            if record is None:  # a run with no normalized trajectory (singleturn): the text is the response
                letters = _read_letters(run_dir, qid)
                record = {"question_id": qid, "pred": _letter((letters or {}).get("majority_letter")),
                          "response": text}
        except (OSError, ValueError) as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            errors.append(InputRowError(f"{path}: {error}"))
            continue
        record[VERBATIM_KEY] = text
        records[str(qid)] = record


def _add_inference_errors(run_dir: Path, records: dict[str, dict], errors: list[InputRowError]) -> None:
    path = run_dir / "inference" / "summary.json"
    if not path.exists():
        return
    try:
        summary = json.loads(path.read_bytes().decode("utf-8"))
        results = summary.get("results") if isinstance(summary, dict) else None
        if not isinstance(results, list):
            raise TypeError("expected an object with a 'results' list")
    except (OSError, ValueError, TypeError) as error:
        errors.append(InputRowError(f"{path}: {error}"))
        return
    for index, result in enumerate(results):
        if not isinstance(result, dict) or "question_id" not in result:
            errors.append(InputRowError(f"{path}: results[{index}] has no 'question_id'"))
            continue
        if "error" in result:
            why = result["error"]
            record = records.setdefault(str(result["question_id"]),
                                        {"question_id": result["question_id"], "pred": None})
            record["error"] = why if isinstance(why, str) and why else json.dumps(why) if why else "errored"


def load_agentvidbench_run(run_dir: str | Path) -> tuple[dict[str, dict], list[InputRowError]]:
    """Records keyed by question id from an official harness run folder; unreadable files become errors."""
    run_dir = Path(run_dir)
    outputs = run_dir / "inference" / "outputs"
    trajectories = run_dir / "inference" / "trajectories"
    records: dict[str, dict] = {}
    errors: list[InputRowError] = []
    if not outputs.is_dir() and not trajectories.is_dir():
        return records, [InputRowError(f"{outputs}: no such folder (expected <run>/inference/trajectories/"
                                       "question<N>.txt or <run>/inference/outputs/question<N>.normalized.json "
                                       "from the AgentVidBench harness)")]
    for qid, path in _numbered(outputs, _NORMALIZED):
        try:
            trajectory = json.loads(path.read_text(encoding="utf-8"))
            letters = _read_letters(run_dir, qid)
            if not isinstance(trajectory, dict):
                raise TypeError(f"expected a JSON object, got {type(trajectory).__name__}")
            record = normalized_trajectory_record(trajectory, letters)
        except (OSError, ValueError, TypeError) as error:  # json.JSONDecodeError is a ValueError
            errors.append(InputRowError(f"{path}: {error}"))
            continue
        records[str(record["question_id"])] = record
    _add_verbatim_texts(run_dir, records, errors)
    for qid, record in records.items():
        if VERBATIM_KEY not in record:  # the official judge fails this question: read_prediction finds no file
            record[MISSING_KEY] = str(trajectories / f"question{qid}.txt")
    _add_inference_errors(run_dir, records, errors)
    return records, errors


def run_framework(run_dir: str | Path) -> str | None:
    """The experiment a harness run folder's inference/summary.json names, or None when the file or the field is
    not there. The judge's FRAMEWORK line names the method a run used (judge.py: singleturn, ours), which is what
    the harness names its experiments; its evaluate.py, which passes it, is not in the mirror read here."""
    try:
        summary = json.loads((Path(run_dir) / "inference" / "summary.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    name = summary.get("experiment") if isinstance(summary, dict) else None
    return name if isinstance(name, str) and name.strip() else None


PREDICTION_FORMATS: dict[str, Callable[[str | Path], tuple[dict[str, dict], list[InputRowError]]]] = {
    "cader": load_predictions,             # predictions.jsonl (the prediction record of `cader.contracts`)
    "agentvidbench_run": load_agentvidbench_run,
}


def load_prediction_source(path: str | Path, fmt: str = "cader") -> tuple[dict[str, dict], list[InputRowError]]:
    try:
        loader = PREDICTION_FORMATS[fmt]
    except KeyError:
        raise ValueError(f"unknown prediction format {fmt!r}; choose one of {sorted(PREDICTION_FORMATS)}") from None
    return loader(path)
