"""What the viewer shows, read from a run folder: the runs in it, each sample as a card, the report, the
calibration and the judge's verdicts.

A run is a folder holding predictions.jsonl (evaluate/run.py's output, with report.json beside it); the folder given
may be one run or a tree of them (the quickstart's runs/tiny/eval/** holds one run per benchmark and variant).
A card is a record digested into what the page draws: the Stage-1 margin against tau, the route, each proposal
paired with its verification by iteration, the RGR frame-rate maps, the final answer and gold. Digesting reads
every field with `.get` and takes a value only in the shape it draws: a record that breaks the contract is still
shown, flagged with the problem (naming the sample and the field), and counted. What the summaries sum (the report's
own functions, for a folder without report.json) is each record without the fields that break the contract.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from cader.contracts.jsonl import LineProblem, check_line, iter_lines
from cader.contracts.records import JudgmentRecord, PredictionRecord, describe_errors
from pydantic import ValidationError

RAW_CHARS = 1500  # a model reply longer than this is cut in the page (the file keeps it whole)
FILTERS = ("run", "benchmark", "route", "correct", "fallback")  # the filter dimensions, in page order
NO_STAGE2 = "(no stage 2)"


@dataclass
class Problems:
    """Lines and files the viewer could not use or found broken, each a one-line message naming file and line."""

    messages: list[str] = field(default_factory=list)

    def add(self, message: str) -> None:
        self.messages.append(message)


def find_runs(root: Path) -> list[Path]:
    """The predictions files to show: `root` itself when it is a file (a predictions.jsonl, or the side file of
    `lmms-eval --model cader`), else the predictions.jsonl of every run folder under `root` (itself included),
    sorted by path. Shard files (predictions.shard-I-of-N.jsonl) are not runs: a merged run has its
    predictions.jsonl."""
    root = Path(root)
    if root.is_file():
        return [root]
    found = [root / "predictions.jsonl"] if (root / "predictions.jsonl").is_file() else []
    found += sorted(root.rglob("*/predictions.jsonl"))
    return sorted(set(found))


def run_name(predictions: Path, root: Path) -> str:
    """A run's label: its folder relative to the root given (the folder's own name for the root itself), or the
    file's name when a file was given."""
    if root.is_file():
        return predictions.name
    relative = predictions.parent.relative_to(root)
    return str(relative) if str(relative) != "." else predictions.parent.name


def runs_of(roots: list[Path]) -> list[tuple[Path, str]]:
    """(predictions file, run name) for every run under the roots given. One root names its runs as `run_name`
    does; several name each run by its path below the roots' common folder, so two roots holding `full/synthetic`
    stay two runs. A run reached from two roots is shown once."""
    if len(roots) == 1:
        return [(p, run_name(p, roots[0])) for p in find_runs(roots[0])]
    common = Path(os.path.commonpath([os.path.abspath(r) for r in roots]))
    out, seen = [], set()
    for root in roots:
        for predictions in find_runs(root):
            key = Path(os.path.abspath(predictions))
            if key in seen:
                continue
            seen.add(key)
            target = key if predictions.name != "predictions.jsonl" else key.parent
            name = str(target.relative_to(common)) if target != common else target.name
            out.append((predictions, name))
    return out


@dataclass
class ReadRecord:
    """A JSON object of a predictions file: as read (`record`), why it breaks the contract (`problem`, None when it
    keeps it) and the record without the fields at fault (`usable`: what the summaries may sum)."""

    record: dict
    problem: str | None
    usable: dict


def contract_check(record: dict) -> ReadRecord:
    """`record` checked against the predictions contract; a field whose value breaks it is left out of `usable`
    (a cost that is a string must not reach a sum, a NaN margin must not reach a count)."""
    try:
        PredictionRecord.model_validate(record)
    except ValidationError as error:
        errors = error.errors()
        broken = {str(item["loc"][0]) for item in errors if item["loc"]}
        return ReadRecord(record, describe_errors(errors), {k: v for k, v in record.items() if k not in broken})
    return ReadRecord(record, None, record)


def read_records(path: Path, problems: Problems) -> list[ReadRecord]:
    """Every JSON object of a predictions file, checked (`contract_check`); each that breaks the contract is a
    problem naming file, line, sample and field, and lines that are not JSON objects go to `problems`."""
    out = []
    for number, value in iter_lines(path):
        if isinstance(value, dict):
            out.append(contract_check(value))
            if out[-1].problem is not None:
                sample = f"{value.get('benchmark')}/{value.get('sample_id')}"
                problems.add(f"{path}:{number}: shown flagged (sample {sample}): {out[-1].problem}")
        else:
            problem = check_line(path, number, value, PredictionRecord)
            problems.add(str(problem if isinstance(problem, LineProblem) else f"{path}:{number}: unusable"))
    return out


def read_json(path: Path, problems: Problems) -> dict | None:
    """A JSON object file (report.json, calibration.json); None, with a problem, when missing or unreadable."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        problems.add(f"{path}: unreadable: {exc}")
        return None
    if not isinstance(value, dict):
        problems.add(f"{path}: expected a JSON object, got {type(value).__name__}")
        return None
    return value


# ---- a record as a card ---------------------------------------------------------------------------------------------


def softmax(logits: list[float], temperature: float) -> list[float]:
    """softmax(z / T), the Stage-1 option probabilities whose top-2 gap is the margin (CADER Eq. 2-3)."""
    if not logits or not temperature:
        return []
    scaled = [z / temperature for z in logits]
    top = max(scaled)
    weights = [math.exp(z - top) for z in scaled]
    total = sum(weights)
    return [w / total for w in weights]


def cut(text, limit: int = RAW_CHARS):
    """`text` with at most `limit` characters, saying how many were left out."""
    if not isinstance(text, str) or len(text) <= limit:
        return text
    return text[:limit] + f"… [{len(text) - limit} more characters in the file]"


def listed(value) -> list:
    """`value` when it is a list, else [] (the page iterates it)."""
    return value if isinstance(value, list) else []


def mapping(value) -> dict:
    """`value` when it is an object, else {} (the page reads keys of it)."""
    return value if isinstance(value, dict) else {}


def number(value) -> float | None:
    """`value` as a finite float when it is a JSON number, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def window(value) -> list[float] | None:
    """[start, end] when `value` is two finite numbers, else None (the timeline and the thumbnails place it)."""
    if not isinstance(value, list) or len(value) != 2 or None in (ends := [number(v) for v in value]):
        return None
    return ends


def windows(value) -> list[list[float]]:
    """The well-formed [start, end] (or [start, end, fps]) rows of a list, others left out."""
    rows = [[number(v) for v in row] for row in listed(value) if isinstance(row, list) and len(row) in (2, 3)]
    return [row for row in rows if None not in row]


def iteration_of(step: dict, default: int) -> int:
    """The step's iteration when it is an integer, else `default` (a key the rounds can be sorted by)."""
    value = step.get("iteration")
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def iterations(steps: list) -> list[dict]:
    """Proposal rounds of Algorithm 1: each propose step joined with the verify step of the same iteration."""
    rounds: dict[int, dict] = {}
    for step in steps:
        if not isinstance(step, dict) or step.get("phase") not in ("propose", "verify"):
            continue
        key = iteration_of(step, len(rounds))
        entry = rounds.setdefault(key, {"i": key})
        if step["phase"] == "propose":
            parsed = mapping(step.get("parsed"))
            entry.update(win=window(step.get("window")), ctx=step.get("context"), n_ctx=step.get("n_frames"),
                         broad=step.get("too_broad"), tried=windows(step.get("tried")),
                         raw=cut(step.get("raw_output")), how=parsed.get("how"), why=parsed.get("reason"))
        else:
            entry.update(win=entry.get("win") or window(step.get("window")), crop=window(step.get("crop")),
                         p=step.get("p_yes"), ok=step.get("accepted"), skip=step.get("skipped"), r2=step.get("r2"),
                         n_crop=step.get("n_frames"), f=step.get("f"))
    return [rounds[k] for k in sorted(rounds)]


def resamples(steps: list) -> list[dict]:
    """The RGR contexts built between proposals: mode, fps map rows [start, end, fps], unexplored intervals."""
    return [{"i": iteration_of(s, 0), "mode": s.get("mode"), "map": windows(s.get("fps_map")),
             "unexplored": windows(s.get("unexplored")), "n": s.get("n_frames"), "planned": s.get("n_frames_planned")}
            for s in steps if isinstance(s, dict) and s.get("phase") == "resample"]


def final_answer(steps: list) -> dict | None:
    for step in steps:
        if isinstance(step, dict) and step.get("phase") == "answer":
            parsed = mapping(step.get("parsed"))
            return {"win": window(step.get("window")), "n": step.get("n_frames"), "raw": cut(step.get("raw_output")),
                    "pred": step.get("pred"), "how": parsed.get("how"), "why": parsed.get("reason"),
                    "kept_a1": step.get("fallback_to_stage1")}
    return None


def filter_values(record: dict, run: str) -> dict:
    """The value of each filter dimension for a record, labelled as the report counts them: `fallback` is the
    Stage-2 ending of a sample that finished Stage 2 ("none" when a segment was accepted)."""
    stage2 = record.get("stage2") if isinstance(record.get("stage2"), dict) else None
    if record.get("error") or stage2 is None:
        fallback = NO_STAGE2 if not record.get("error") else "(failed)"
    else:
        fallback = str(stage2.get("fallback") or "none")
    correct = record.get("correct")  # anything but true or false (a list, say) is counted as no gold
    return {
        "run": run,
        "benchmark": str(record.get("benchmark", "?")),
        "route": str(record.get("route") or "(none)"),
        "correct": "failed" if record.get("error") else "correct" if correct is True else "wrong" if correct is False
        else "no gold",
        "fallback": fallback,
    }


def stage1_span(stage1: dict) -> float:
    """Seconds Stage 1's frames cover at its rate (a lower bound on the duration: the frame cap may have cut N1)."""
    try:
        return float(stage1.get("n_frames") or 0) / float(stage1.get("fps") or 1.0)
    except (TypeError, ValueError, ZeroDivisionError):
        return 0.0


def ground_truth_milestones(record: dict) -> list[dict]:
    """The question's milestones as the benchmark states them (AgentVidBench keeps them in meta): id, type and
    what must be seen, for the judge's statuses to be read against."""
    milestones = listed(mapping(record.get("meta")).get("milestones"))
    return [{"id": m.get("id"), "type": m.get("type"), "d": cut(m.get("description"), 600)}
            for m in milestones if isinstance(m, dict)]


def card_of(record: dict, run: str, problem: str | None = None) -> dict:
    """What the page draws for one record (short keys: 2,000 cards are inlined in one file)."""
    stage1, stage2 = mapping(record.get("stage1")), mapping(record.get("stage2"))
    steps = listed(stage2.get("steps"))
    logits = listed(stage1.get("logits"))
    temperature = stage1.get("temperature")
    try:
        probs = [round(p, 4) for p in softmax([float(z) for z in logits], float(temperature or 0))]
    except (TypeError, ValueError, OverflowError):
        probs = []
    rounds = iterations(steps)
    seen = [w for r in rounds for w in (r.get("win"), r.get("crop")) if w]
    duration = number(record.get("duration"))
    return {
        "f": filter_values(record, run),
        "id": str(record.get("sample_id")), "qid": record.get("question_id"), "video": record.get("video"),
        # Video-MME states no duration: the timeline then spans the windows seen (or Stage 1's frames at r1)
        "dur": duration or max([w[1] for w in seen] + [stage1_span(stage1), 1.0]),
        "dur_known": bool(duration),
        "q": record.get("question"), "opts": listed(record.get("options")), "letters": listed(record.get("letters")),
        "gold": record.get("answer"), "pred": record.get("pred"), "err": record.get("error"), "bad": problem,
        "s1": {"pred": stage1.get("pred"), "m": stage1.get("margin"), "tau": stage1.get("tau"), "T": temperature,
               "n": stage1.get("n_frames"), "fps": stage1.get("fps"), "probs": probs,
               "reused": stage1.get("reused")} if stage1 else None,
        "s2": {"pred": stage2.get("pred"), "acc": window(stage2.get("accepted")), "cycles": stage2.get("cycles"),
               "fb": stage2.get("fallback"), "rounds": rounds, "rgr": resamples(steps),
               "ans": final_answer(steps)} if stage2 else None,
        "cost": mapping(record.get("cost")),
        "ms": ground_truth_milestones(record),
    }


# ---- judgments --------------------------------------------------------------------------------------------------------


def judgment_of(row: dict, source: str) -> dict:
    """What a card shows of one judgments.jsonl row: the P1-P5 axes with the judge's reason for each, Traj,
    milestone coverage with the judge's evidence, failure tags."""
    milestones = [m for m in listed(row.get("milestones")) if isinstance(m, dict)]
    rationales = mapping(row.get("axis_rationales"))
    return {"src": source, "scores": mapping(row.get("scores")), "traj": row.get("traj"), "mc": row.get("mc_rate"),
            "ms": [{"id": m.get("id"), "status": m.get("status"), "ev": cut(m.get("evidence"), 300)}
                   for m in milestones],
            "why": {str(k): cut(v, 600) for k, v in rationales.items() if isinstance(v, str)},
            "tags": [str(t) for t in listed(row.get("failure_tags"))], "summary": cut(row.get("summary"), 600),
            "model": row.get("judge_model"), "err": row.get("error")}


def read_judgments(path: Path, problems: Problems) -> dict[str, list[dict]]:
    """Judgments by question id (as text); unusable lines go to `problems`."""
    out: dict[str, list[dict]] = {}
    for number, value in iter_lines(path):
        problem = check_line(path, number, value, JudgmentRecord)
        if not isinstance(value, dict) or value.get("question_id") is None:
            problems.add(str(problem) if problem else f"{path}:{number}: judgment without question_id")
            continue
        if problem is not None:
            problems.add(f"{path}:{number}: shown flagged: {problem.message}")
        out.setdefault(str(value["question_id"]), []).append(judgment_of(value, str(path)))
    return out


def question_key(record: dict) -> str | None:
    """The AgentVidBench question a record answers (question_id, else meta.question_id), as the judge keys it."""
    for value in (record.get("question_id"), mapping(record.get("meta")).get("question_id")):
        if value is not None:
            return str(value)
    return None
