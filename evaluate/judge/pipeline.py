"""Judging a predictions file: what needs (re)judging and why, bounded concurrency, append-as-finished, cache.

A question is judged again when its last judgment failed, when the text the judge would read changed (a corrected
prediction, an edited question, a new protocol text: the stored `prompt_hash`), or when the judge configuration
changed (model, provider, request parameters: `judge_config_hash`); `force` re-judges everything and skips the
cache. The counts say how many were re-judged and why.

Rows are built through `cader.contracts.records.JudgmentRecord` and read back through it: a line that breaks the
contract is logged with file, line and field and skipped (its question counts as not judged, so a rerun judges it).
"""

from __future__ import annotations

import logging
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from cader.contracts.jsonl import JsonlAppender, exclusive_writer, read_validated
from cader.contracts.records import JudgmentRecord, build_record, describe_validation_error
from cader.evaluate.judge.cache import JudgeCache
from cader.evaluate.judge.client import RetryPolicy, build_prompt, judge_one, trajectory_hash
from cader.evaluate.judge.params import config_hash
from cader.evaluate.judge.prompt import prompt_hash
from cader.evaluate.judge.protocol import PAPER, JudgeProtocol
from cader.evaluate.judge.providers import Provider
from cader.evaluate.judge.questions import Question
from pydantic import ValidationError

JUDGMENTS_FILE = "judgments.jsonl"
CACHE_DIR = "judge_cache"
# Why a question is judged in this run; every reason but "new" is a re-judgment.
REASONS = {"new": "never judged", "failed_before": "the last judgment failed",
           "prediction_changed": "the prediction's rendered trajectory changed",
           "prompt_changed": "the judge prompt changed (question, FRAMEWORK or protocol text)",
           "judge_config_changed": "the judge configuration changed (model, provider or request parameters)",
           "forced": "--force"}
log = logging.getLogger(__name__)


def read_judgments(path: str | Path) -> dict[str, dict]:
    """The latest row per question id; a line that is torn or breaks the contract is logged and skipped."""
    read = read_validated(path, JudgmentRecord)
    for problem in read.problems:
        log.warning("skipped a judgments line: %s", problem)
    return {str(row["question_id"]): row for row in read.records}


def current_prompt_hashes(questions: dict[str, Question], predictions: dict[str, dict],
                          framework: str, protocol: JudgeProtocol = PAPER) -> dict[str, str]:
    """question id -> hash of the prompt the judge would read now, for every prediction with a known question."""
    return {key: prompt_hash(*build_prompt(questions[key], predictions[key], framework, protocol))
            for key in predictions if key in questions}


def rejudge_reason(row: dict | None, prompt_key: str, trajectory_key: str, config_key: str,
                   force: bool = False) -> str | None:
    """Why this question must be judged now (a key of REASONS), or None when its last judgment still holds."""
    if force:
        return "forced"
    if row is None:
        return "new"
    if row.get("error") is not None or not row.get("scores"):
        return "failed_before"
    if row.get("prompt_hash") != prompt_key:
        return "prediction_changed" if row.get("trajectory_hash") != trajectory_key else "prompt_changed"
    if row.get("judge_config_hash") != config_key:
        return "judge_config_changed"
    return None


def plan_judging(provider: Provider, questions: dict[str, Question], predictions: dict[str, dict],
                 done: dict[str, dict], framework: str, force: bool = False,
                 protocol: JudgeProtocol = PAPER) -> dict[str, str]:
    """question id -> reason, for every prediction with a known question that needs judging."""
    config_key = config_hash(provider.config)
    todo = {}
    for key, record in predictions.items():
        if key not in questions:
            continue
        prompt_key = prompt_hash(*build_prompt(questions[key], record, framework, protocol))
        reason = rejudge_reason(done.get(key), prompt_key, trajectory_hash(record, protocol), config_key, force)
        if reason is not None:
            todo[key] = reason
    return todo


def _crash_row(question: Question, framework: str, model: str, why: str) -> dict:
    return {"question_id": question.question_id, "system": framework, "judge_model": model, "scores": None,
            "traj": None, "mc_rate": None, "milestones": [], "failure_tags": [], "summary": "", "attempts": 0,
            "error": why}


def judgment_row(future, question: Question, framework: str, model: str, reason: str) -> dict:
    """The judgments.jsonl row of one finished judging task, built through JudgmentRecord. A task that raised,
    or returned a row breaking the contract, becomes a failed row saying so: one odd record must not sink the rest."""
    try:
        row = future.result()
    except Exception as error:  # noqa: BLE001
        row = _crash_row(question, framework, model, f"judging crashed: {type(error).__name__}: {error}")
    row["judged_because"] = reason
    try:
        return build_record(JudgmentRecord, row)
    except ValidationError as error:
        row = _crash_row(question, framework, model,
                         f"judging crashed: the row breaks the judgments contract: {describe_validation_error(error)}")
        row["judged_because"] = reason
        return build_record(JudgmentRecord, row)


@dataclass(frozen=True)
class JudgeRun:
    """How the questions are judged.

    Args:
        concurrency: questions judged at once
        cache: reuse replies keyed by (prompt, judge configuration)
        force: re-judge every question, even unchanged ones, without reading the cache
        progress: a progress bar
    """

    concurrency: int = 16
    cache: bool = True
    force: bool = False
    progress: bool = True


def judge_predictions(provider: Provider, questions: dict[str, Question], predictions: dict[str, dict],
                      out_dir: str | Path, *, framework: str, run: JudgeRun | None = None,
                      policy: RetryPolicy | None = None, protocol: JudgeProtocol = PAPER, **judge_kwargs) -> dict:
    """Judge every prediction that needs it, appending to <out_dir>/judgments.jsonl as each finishes.

    `run` None: JudgeRun's defaults without the progress bar. Returns counts: {"pending", "judged", "failed",
    "cached", "up_to_date", "reasons": {reason: n}}; `reasons` counts why each pending question was judged
    (REASONS). `judge_kwargs` go to client.judge_one (sleep, clock).
    """
    run = run or JudgeRun(progress=False)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / JUDGMENTS_FILE
    # one judge run per judgments file: two would judge (and pay for) every question twice
    with exclusive_writer(path):
        todo = plan_judging(provider, questions, predictions, read_judgments(path), framework, run.force, protocol)
        cache = JudgeCache(out_dir / CACHE_DIR) if run.cache else None
        counts = {"pending": len(todo), "judged": 0, "failed": 0, "cached": 0,
                  "up_to_date": sum(1 for k in predictions if k in questions) - len(todo),
                  "reasons": dict(Counter(todo.values()))}
        if not todo:
            return counts
        appender = JsonlAppender(path)
        bar = None
        if run.progress:
            from tqdm import tqdm
            bar = tqdm(total=len(todo), desc=f"judging ({provider.model})", unit="q")
        try:
            with ThreadPoolExecutor(max_workers=max(1, run.concurrency)) as pool:
                futures = {pool.submit(judge_one, provider, questions[key], predictions[key], framework,
                                       policy=policy, cache=cache, read_cache=not run.force, protocol=protocol,
                                       **judge_kwargs): key
                           for key in todo}
                for future in as_completed(futures):
                    key = futures[future]
                    row = judgment_row(future, questions[key], framework, provider.model, todo[key])
                    appender.write(row)
                    counts["failed" if row["error"] else "judged"] += 1
                    counts["cached"] += bool(row.get("cached"))
                    if bar is not None:
                        bar.update(1)
        finally:
            appender.close()
            if bar is not None:
                bar.close()
        return counts


def describe_rejudging(counts: dict) -> str:
    """One line: how many were judged for the first time, how many again and why, how many still held."""
    reasons = dict(counts.get("reasons") or {})
    new = reasons.pop("new", 0)
    again = sum(reasons.values())
    why = ", ".join(f"{n} because {REASONS.get(r, r)}" for r, n in sorted(reasons.items(), key=lambda kv: -kv[1]))
    return (f"{new} judged for the first time, {again} re-judged" + (f" ({why})" if why else "")
            + f", {counts.get('up_to_date', 0)} up to date")
