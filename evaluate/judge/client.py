"""Judging one question: build the prompt, call the provider, validate, repair, retry, and build the row.

Two bounded loops share one budget of calls: replies that fail validation are sent back with the validation error
(up to `max_replies` replies), and transient API failures (429/5xx/timeouts) are retried with exponential backoff
and jitter (up to `max_api_retries` retries). When both are spent the row is returned with `error` set and no
scores: never a made-up score.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from cader.evaluate.judge.cache import JudgeCache
from cader.evaluate.judge.prompt import (
    SYSTEM_PROMPT_WITH_SCHEMA,
    build_repair_prompt,
    build_user_prompt,
    prompt_hash,
    sweep_required,
)
from cader.evaluate.judge.providers import Provider, ProviderError
from cader.evaluate.judge.questions import Question
from cader.evaluate.judge.render import render_prediction
from cader.evaluate.judge.schema import JudgeOutput, JudgeOutputError, p_scores, parse_judgment
from cader.evaluate.judge.scoring import mc_rate, traj_score


@dataclass
class RetryPolicy:
    max_replies: int = 3          # judge replies allowed per question (first + repairs after validation errors)
    max_api_retries: int = 5      # retries after transient API errors
    backoff_base: float = 1.0     # seconds; delay k is in [d/2, d] with d = min(backoff_max, base * 2**k)
    backoff_max: float = 30.0


def backoff_delay(retry_index: int, base: float, cap: float, rng: random.Random) -> float:
    """Exponential backoff with "equal jitter": never zero, never above the cap, decorrelated across threads."""
    ceiling = min(cap, base * (2 ** retry_index))
    return ceiling / 2 + rng.uniform(0, ceiling / 2)


def build_prompt(question: Question, record: dict, framework: str) -> tuple[str, str]:
    user = build_user_prompt(qid=question.question_id, framework=framework, ecom_required=question.ecom_required,
                             question=question.question, options=question.options, milestones=question.milestones,
                             trajectory=render_prediction(record), letters=record.get("letters") or None)
    return SYSTEM_PROMPT_WITH_SCHEMA, user


def _row(question: Question, framework: str, model: str, key: str, sweep: str) -> dict:
    return {"question_id": question.question_id, "system": framework, "judge_model": model, "scores": None,
            "traj": None, "mc_rate": None, "milestones": [], "failure_tags": [], "summary": "",
            "axis_rationales": {}, "sweep_required": sweep, "attempts": 0, "cached": False, "prompt_hash": key,
            "error": None}


def _fill(row: dict, out: JudgeOutput) -> dict:
    scores = p_scores(out)
    row.update(scores=scores, traj=traj_score(scores), mc_rate=mc_rate(m.status for m in out.milestone_coverage),
               milestones=[{"id": m.milestone_id, "status": m.status, "evidence": m.evidence_in_prediction}
                           for m in out.milestone_coverage],
               failure_tags=list(out.failure_tags), summary=out.summary, axis_rationales=out.axis_rationales)
    return row


def judge_one(provider: Provider, question: Question, record: dict, framework: str, *,
              policy: RetryPolicy | None = None, cache: JudgeCache | None = None,
              sleep: Callable[[float], None] = time.sleep, rng: random.Random | None = None) -> dict:
    """Judge one prediction; always returns a judgments.jsonl row (with `error` set if no valid judgment came)."""
    policy = policy or RetryPolicy()
    rng = rng or random.Random()
    system, user = build_prompt(question, record, framework)
    milestone_ids = [m["id"] for m in question.milestones]
    sweep = sweep_required(question.ecom_required)
    key = prompt_hash(system, user, provider.model)
    row = _row(question, framework, provider.model, key, sweep)

    if cache is not None and (hit := cache.get(key)) is not None:
        try:
            row["cached"] = True
            return _fill(row, parse_judgment(hit["reply"], milestone_ids, sweep))
        except (JudgeOutputError, KeyError, TypeError):
            row["cached"] = False  # stale entry (e.g. an older schema): judge afresh

    messages = [{"role": "user", "content": user}]
    replies = api_retries = 0
    last_error = "no call made"
    while replies < policy.max_replies:
        row["attempts"] += 1
        try:
            text = provider.complete(system, messages)
        except ProviderError as error:
            last_error = str(error)
            if not error.transient or api_retries >= policy.max_api_retries:
                break
            sleep(backoff_delay(api_retries, policy.backoff_base, policy.backoff_max, rng))
            api_retries += 1
            continue
        replies += 1
        try:
            out = parse_judgment(text, milestone_ids, sweep)
        except JudgeOutputError as error:
            last_error = f"invalid judge output: {error}"
            messages += [{"role": "assistant", "content": text},
                         {"role": "user", "content": build_repair_prompt(str(error), milestone_ids)}]
            continue
        if cache is not None:
            cache.put(key, {"reply": text, "model": provider.model})
        return _fill(row, out)
    row["error"] = f"no valid judgment after {row['attempts']} calls ({replies} replies): {last_error}"
    return row
