"""Judging one question: build the prompt, call the provider, validate, repair, retry, and build the row.

Two bounded loops share one budget of calls: replies that fail validation (including a reply holding more than
one JSON object) are sent back with the validation error (up to `max_replies` replies), and transient API failures
(429/5xx/timeouts, a 200 whose body is not the API's JSON) are retried (up to `max_api_retries` retries). The wait
before a retry is exponential backoff with jitter, or the server's Retry-After when it asks for longer (capped at
`retry_after_max`); every wait counts against `time_budget`, the seconds one question may take in all, and so does
every call: each runs under a deadline at the end of the budget (providers.CALL_DEADLINE), which holds against a
reply whose body arrives a byte at a time. When a budget is spent the row is returned with `error` set and no
scores: never a made-up score. A rejected reply goes back in the repair turn as a bounded excerpt.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from cader.evaluate.judge.cache import JudgeCache
from cader.evaluate.judge.params import config_hash
from cader.evaluate.judge.prompt import build_repair_prompt, excerpt, prompt_hash, sweep_required
from cader.evaluate.judge.protocol import PAPER, JudgeProtocol
from cader.evaluate.judge.providers import CALL_DEADLINE, Completion, Provider, ProviderError
from cader.evaluate.judge.questions import Question
from cader.evaluate.judge.schema import JudgeOutput, JudgeOutputError, applied_sweep, p_scores, parse_judgment
from cader.evaluate.judge.scoring import mc_rate, traj_score


@dataclass
class RetryPolicy:
    """How each question is retried.

    Args:
        max_replies: judge replies per question, counting the repairs of replies that fail validation
        max_api_retries: retries after 429, 5xx, timeouts and unreadable 200 replies
        backoff_base: exponential backoff: retry k waits between d/2 and d seconds, d = min(backoff_max,
            backoff_base * 2**k)
        backoff_max: longest wait between retries, in seconds
        retry_after_max: longest server Retry-After honoured, in seconds; a longer one waits this long
        time_budget: seconds one question may take in all, calls and retry waits together
    """

    max_replies: int = 3
    max_api_retries: int = 5
    backoff_base: float = 1.0
    backoff_max: float = 30.0
    retry_after_max: float = 120.0
    time_budget: float = 900.0


def backoff_delay(retry_index: int, base: float, cap: float, rng: random.Random) -> float:
    """Exponential backoff with "equal jitter": never zero, never above the cap, decorrelated across threads."""
    ceiling = min(cap, base * (2 ** retry_index))
    return ceiling / 2 + rng.uniform(0, ceiling / 2)


def retry_delay(retry_index: int, retry_after: float | None, policy: RetryPolicy, rng: random.Random) -> float:
    """The wait before retry `retry_index`: our backoff, or the server's Retry-After (capped) when longer."""
    delay = backoff_delay(retry_index, policy.backoff_base, policy.backoff_max, rng)
    if retry_after is not None:
        delay = max(delay, min(retry_after, policy.retry_after_max))
    return delay


def cache_key(prompt_key: str, config: dict) -> str:
    """A cached reply is reused only for the same prompt read by the same judge configuration."""
    return hashlib.sha256(f"{prompt_key}:{config_hash(config)}".encode()).hexdigest()


def build_prompt(question: Question, record: dict, framework: str,
                 protocol: JudgeProtocol = PAPER) -> tuple[str, str]:
    """(system, user) the judge is sent for this prediction under `protocol`."""
    return protocol.prompt(question, record, framework)


def trajectory_hash(record: dict, protocol: JudgeProtocol = PAPER) -> str:
    """The prediction text the judge reads, alone, so a rerun can tell a changed prediction from a changed
    question."""
    return hashlib.sha256(protocol.prediction_text(record).encode("utf-8", "surrogatepass")).hexdigest()


def _row(question: Question, framework: str, provider: Provider, key: str, sweep: str) -> dict:
    config = provider.config
    return {"question_id": question.question_id, "system": framework, "judge_model": provider.model,
            "served_model": None, "scores": None, "traj": None, "mc_rate": None, "milestones": [],
            "failure_tags": [], "summary": "", "axis_rationales": {}, "sweep_required": sweep,
            "sweep_applied": None, "attempts": 0, "waited_s": 0.0, "cached": False, "prompt_hash": key,
            "judge_config": config, "judge_config_hash": config_hash(config), "error": None}


def _fill(row: dict, out: JudgeOutput) -> dict:
    scores = p_scores(out)
    row.update(scores=scores, traj=traj_score(scores), mc_rate=mc_rate(m.status for m in out.milestone_coverage),
               milestones=[{"id": m.milestone_id, "status": m.status, "evidence": m.evidence_in_prediction}
                           for m in out.milestone_coverage],
               failure_tags=list(out.failure_tags), summary=out.summary, axis_rationales=out.axis_rationales,
               sweep_applied=applied_sweep(out, row["sweep_required"]))
    return row


def judge_one(provider: Provider, question: Question, record: dict, framework: str, *,
              policy: RetryPolicy | None = None, cache: JudgeCache | None = None, read_cache: bool = True,
              sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic,
              rng: random.Random | None = None, protocol: JudgeProtocol = PAPER) -> dict:
    """Judge one prediction; always returns a judgments.jsonl row (with `error` set if no valid judgment came).

    `read_cache=False` asks the judge again even when a valid reply is cached (a forced re-judge); the new reply
    still replaces the cached one. `sleep` and `clock` are injectable so tests need not wait."""
    policy = policy or RetryPolicy()
    rng = rng or random.Random()
    started = clock()
    system, user = build_prompt(question, record, framework, protocol)
    milestone_ids = [m["id"] for m in question.milestones]
    sweep = sweep_required(question.ecom_required)
    key = prompt_hash(system, user)
    stored = cache_key(key, provider.config)
    row = _row(question, framework, provider, key, sweep)
    row["trajectory_hash"] = trajectory_hash(record, protocol)
    row["protocol"] = protocol.name  # an extra key of the record (the contract keeps unknown keys)
    if (missing := protocol.missing_input(record)) is not None:
        row["error"] = missing  # nothing to judge: no call is made, the question fails as in the official judge
        return row

    if cache is not None and read_cache and (hit := cache.get(stored)) is not None:
        try:
            row.update(cached=True, served_model=hit.get("served_model"))
            return _fill(row, parse_judgment(hit["reply"], milestone_ids, sweep))
        except (JudgeOutputError, KeyError, TypeError):
            row.update(cached=False, served_model=None)  # stale entry (e.g. an older schema): judge afresh

    messages = [{"role": "user", "content": user}]
    replies = api_retries = 0
    last_error = "no call made"
    while replies < policy.max_replies:
        remaining = policy.time_budget - (clock() - started)
        if remaining <= 0:
            last_error += f"; the {policy.time_budget:g} s time budget is spent"
            break
        row["attempts"] += 1
        # the budget, on the real clock the HTTP transport reads (`clock` may be a test's)
        deadline = CALL_DEADLINE.set(time.monotonic() + remaining)
        try:
            reply = provider.complete(system, messages)
        except ProviderError as error:
            last_error = str(error)
            if not error.transient or api_retries >= policy.max_api_retries:
                break
            delay = retry_delay(api_retries, error.retry_after, policy, rng)
            if clock() - started + delay > policy.time_budget:
                last_error += (f"; the next retry (after {delay:.1f} s) would pass the {policy.time_budget:g} s "
                               "time budget")
                break
            sleep(delay)
            row["waited_s"] = round(row["waited_s"] + delay, 3)
            api_retries += 1
            continue
        finally:
            CALL_DEADLINE.reset(deadline)
        replies += 1
        text = reply.text if isinstance(reply, Completion) else str(reply)
        row["served_model"] = reply.served_model if isinstance(reply, Completion) else None
        try:
            out = parse_judgment(text, milestone_ids, sweep)
        except JudgeOutputError as error:
            last_error = f"invalid judge output: {error}"
            shown = excerpt(text)  # the APIs reject a blank assistant turn
            messages += [{"role": "assistant", "content": shown if shown.strip() else "(a blank reply)"},
                         {"role": "user", "content": build_repair_prompt(str(error), milestone_ids)}]
            continue
        if cache is not None:
            cache.put(stored, {"reply": text, "model": provider.model, "served_model": row["served_model"]})
        return _fill(row, out)
    row["error"] = f"no valid judgment after {row['attempts']} calls ({replies} replies): {last_error}"
    return row
