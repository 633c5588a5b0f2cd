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
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from cader.evaluate.judge.questions import InputRowError, load_predictions
from cader.evaluate.judge.render import AGENT_STEP_FIELDS, UNKNOWN_PHASE_FIELDS, pick

_NORMALIZED = re.compile(r"^question(\d+)\.normalized\.json$")


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


def load_agentvidbench_run(run_dir: str | Path) -> tuple[dict[str, dict], list[InputRowError]]:
    """Records keyed by question id from an official harness run folder; unreadable files become errors."""
    run_dir = Path(run_dir)
    outputs = run_dir / "inference" / "outputs"
    records: dict[str, dict] = {}
    errors: list[InputRowError] = []
    if not outputs.is_dir():
        return records, [InputRowError(f"{outputs}: no such folder (expected <run>/inference/outputs/"
                                       "question<N>.normalized.json from the AgentVidBench harness)")]
    for path in sorted(outputs.iterdir(), key=lambda p: (len(p.name), p.name)):
        match = _NORMALIZED.match(path.name)
        if not match:
            continue
        letters_path = run_dir / "evaluation" / "letters" / f"question{match.group(1)}.json"
        try:
            trajectory = json.loads(path.read_text(encoding="utf-8"))
            letters = json.loads(letters_path.read_text(encoding="utf-8")) if letters_path.exists() else None
            if not isinstance(trajectory, dict):
                raise TypeError(f"expected a JSON object, got {type(trajectory).__name__}")
            record = normalized_trajectory_record(trajectory, letters if isinstance(letters, dict) else None)
        except (OSError, ValueError, TypeError) as error:  # json.JSONDecodeError is a ValueError
            errors.append(InputRowError(f"{path}: {error}"))
            continue
        records[str(record["question_id"])] = record
    return records, errors


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
