"""What the viewer shows, read from a run folder: the runs in it, each sample as a card, the report, the
calibration and the judge's verdicts.

A run is a folder holding predictions.jsonl (evaluate/run.py's output, with report.json beside it); the folder given
may be one run or a tree of them (the quickstart's runs/tiny/eval/** holds one run per benchmark and variant).
A card is a record digested into what the page draws: the Stage-1 margin against tau, the route, each proposal
paired with its verification by iteration, the RGR frame-rate maps, the final answer and gold. Digesting reads
every field with `.get`: a record that breaks the contract is still shown, flagged with the problem, and counted.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from cader.contracts.jsonl import LineProblem, check_line, iter_lines
from cader.contracts.records import JudgmentRecord, PredictionRecord

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


def read_records(path: Path, problems: Problems) -> list[tuple[dict, str | None]]:
    """Every JSON object of a predictions file with the contract problem it has (None when valid); lines that are
    not JSON objects go to `problems`."""
    out = []
    for number, value in iter_lines(path):
        problem = check_line(path, number, value, PredictionRecord)
        if isinstance(value, dict):
            out.append((value, None if problem is None else problem.message))
            if problem is not None:
                problems.add(f"{path}:{number}: shown flagged: {problem.message}")
        else:
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


def iterations(steps: list) -> list[dict]:
    """Proposal rounds of Algorithm 1: each propose step joined with the verify step of the same iteration."""
    rounds: dict[int, dict] = {}
    for step in steps:
        if not isinstance(step, dict) or step.get("phase") not in ("propose", "verify"):
            continue
        entry = rounds.setdefault(step.get("iteration", len(rounds)), {"i": step.get("iteration", len(rounds))})
        if step["phase"] == "propose":
            parsed = step.get("parsed") or {}
            entry.update(win=step.get("window"), ctx=step.get("context"), n_ctx=step.get("n_frames"),
                         broad=step.get("too_broad"), tried=step.get("tried") or [], raw=cut(step.get("raw_output")),
                         how=parsed.get("how"), why=parsed.get("reason"))
        else:
            entry.update(win=entry.get("win") or step.get("window"), crop=step.get("crop"), p=step.get("p_yes"),
                         ok=step.get("accepted"), skip=step.get("skipped"), r2=step.get("r2"),
                         n_crop=step.get("n_frames"), f=step.get("f"))
    return [rounds[k] for k in sorted(rounds)]


def resamples(steps: list) -> list[dict]:
    """The RGR contexts built between proposals: mode, fps map rows [start, end, fps], unexplored intervals."""
    return [{"i": s.get("iteration"), "mode": s.get("mode"), "map": s.get("fps_map") or [],
             "unexplored": s.get("unexplored") or [], "n": s.get("n_frames"), "planned": s.get("n_frames_planned")}
            for s in steps if isinstance(s, dict) and s.get("phase") == "resample"]


def final_answer(steps: list) -> dict | None:
    for step in steps:
        if isinstance(step, dict) and step.get("phase") == "answer":
            parsed = step.get("parsed") or {}
            return {"win": step.get("window"), "n": step.get("n_frames"), "raw": cut(step.get("raw_output")),
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
        fallback = stage2.get("fallback") or "none"
    correct = record.get("correct")
    return {
        "run": run,
        "benchmark": str(record.get("benchmark", "?")),
        "route": str(record.get("route") or "(none)"),
        "correct": "failed" if record.get("error") else {True: "correct", False: "wrong"}.get(correct, "no gold"),
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
    meta = record.get("meta") if isinstance(record.get("meta"), dict) else {}
    listed = meta.get("milestones") if isinstance(meta.get("milestones"), list) else []
    return [{"id": m.get("id"), "type": m.get("type"), "d": cut(m.get("description"), 600)}
            for m in listed if isinstance(m, dict)]


def card_of(record: dict, run: str, problem: str | None = None) -> dict:
    """What the page draws for one record (short keys: 2,000 cards are inlined in one file)."""
    stage1 = record.get("stage1") if isinstance(record.get("stage1"), dict) else {}
    stage2 = record.get("stage2") if isinstance(record.get("stage2"), dict) else {}
    steps = stage2.get("steps") if isinstance(stage2.get("steps"), list) else []
    logits = stage1.get("logits") if isinstance(stage1.get("logits"), list) else []
    temperature = stage1.get("temperature")
    try:
        probs = [round(p, 4) for p in softmax([float(z) for z in logits], float(temperature or 0))]
    except (TypeError, ValueError, OverflowError):
        probs = []
    rounds = iterations(steps)
    windows = [w for r in rounds for w in (r.get("win"), r.get("crop")) if w]
    return {
        "f": filter_values(record, run),
        "id": str(record.get("sample_id")), "qid": record.get("question_id"), "video": record.get("video"),
        # Video-MME states no duration: the timeline then spans the windows seen (or Stage 1's frames at r1)
        "dur": record.get("duration") or max([float(w[1]) for w in windows] + [stage1_span(stage1), 1.0]),
        "dur_known": bool(record.get("duration")),
        "q": record.get("question"), "opts": record.get("options") or [], "letters": record.get("letters") or [],
        "gold": record.get("answer"), "pred": record.get("pred"), "err": record.get("error"), "bad": problem,
        "s1": {"pred": stage1.get("pred"), "m": stage1.get("margin"), "tau": stage1.get("tau"), "T": temperature,
               "n": stage1.get("n_frames"), "fps": stage1.get("fps"), "probs": probs,
               "reused": stage1.get("reused")} if stage1 else None,
        "s2": {"pred": stage2.get("pred"), "acc": stage2.get("accepted"), "cycles": stage2.get("cycles"),
               "fb": stage2.get("fallback"), "rounds": rounds, "rgr": resamples(steps),
               "ans": final_answer(steps)} if stage2 else None,
        "cost": record.get("cost") or {},
        "ms": ground_truth_milestones(record),
    }


def filter_counts(cards: list[dict]) -> dict[str, dict[str, int]]:
    """Cards per value of each filter dimension."""
    return {dim: dict(sorted(Counter(c["f"][dim] for c in cards).items())) for dim in FILTERS}


# ---- judgments --------------------------------------------------------------------------------------------------------


def judgment_of(row: dict, source: str) -> dict:
    """What a card shows of one judgments.jsonl row: the P1-P5 axes with the judge's reason for each, Traj,
    milestone coverage with the judge's evidence, failure tags."""
    milestones = [m for m in row.get("milestones") or [] if isinstance(m, dict)]
    rationales = row.get("axis_rationales") if isinstance(row.get("axis_rationales"), dict) else {}
    return {"src": source, "scores": row.get("scores") or {}, "traj": row.get("traj"), "mc": row.get("mc_rate"),
            "ms": [{"id": m.get("id"), "status": m.get("status"), "ev": cut(m.get("evidence"), 300)}
                   for m in milestones],
            "why": {str(k): cut(v, 600) for k, v in rationales.items() if isinstance(v, str)},
            "tags": [str(t) for t in row.get("failure_tags") or []], "summary": cut(row.get("summary"), 600),
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
    meta = record.get("meta") if isinstance(record.get("meta"), dict) else {}
    for value in (record.get("question_id"), meta.get("question_id")):
        if value is not None:
            return str(value)
    return None
