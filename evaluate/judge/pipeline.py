"""Judging a predictions file: bounded concurrency, append-as-finished, resume, cache."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from cader.evaluate.jsonl import JsonlAppender, read_jsonl
from cader.evaluate.judge.cache import JudgeCache
from cader.evaluate.judge.client import RetryPolicy, judge_one
from cader.evaluate.judge.providers import Provider
from cader.evaluate.judge.questions import Question

JUDGMENTS_FILE = "judgments.jsonl"
CACHE_DIR = "judge_cache"


def read_judgments(path: str | Path) -> dict[str, dict]:
    """The latest row per question id (torn or foreign lines skipped)."""
    return {str(row["question_id"]): row for row in read_jsonl(path) if "question_id" in row}


def pending_ids(questions: dict[str, Question], predictions: dict[str, dict], done: dict[str, dict],
                model: str, framework: str) -> list[str]:
    """Predictions with a known question and no successful judgment by this model for this system yet."""
    def finished(key: str) -> bool:
        row = done.get(key)
        return bool(row) and row.get("error") is None and row.get("judge_model") == model \
            and row.get("system") == framework
    return [key for key in predictions if key in questions and not finished(key)]


def _crash_row(question: Question, framework: str, model: str, error: Exception) -> dict:
    return {"question_id": question.question_id, "system": framework, "judge_model": model, "scores": None,
            "traj": None, "mc_rate": None, "milestones": [], "failure_tags": [], "summary": "", "attempts": 0,
            "error": f"judging crashed: {type(error).__name__}: {error}"}


def judge_predictions(provider: Provider, questions: dict[str, Question], predictions: dict[str, dict],
                      out_dir: str | Path, *, framework: str, concurrency: int = 16,
                      policy: RetryPolicy | None = None, use_cache: bool = True, progress: bool = False) -> dict:
    """Judge every pending prediction, appending to <out_dir>/judgments.jsonl as each finishes.

    Returns counts: {"pending", "judged", "failed", "cached", "skipped_done"}.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / JUDGMENTS_FILE
    done = read_judgments(path)
    todo = pending_ids(questions, predictions, done, provider.model, framework)
    cache = JudgeCache(out_dir / CACHE_DIR) if use_cache else None
    counts = {"pending": len(todo), "judged": 0, "failed": 0, "cached": 0,
              "skipped_done": sum(1 for k in predictions if k in questions) - len(todo)}
    if not todo:
        return counts
    appender = JsonlAppender(path)
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=len(todo), desc=f"judging ({provider.model})", unit="q")
    try:
        with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
            futures = {pool.submit(judge_one, provider, questions[key], predictions[key], framework,
                                   policy=policy, cache=cache): key for key in todo}
            for future in as_completed(futures):
                try:
                    row = future.result()
                except Exception as error:  # noqa: BLE001 (one odd record must not sink the rest)
                    row = _crash_row(questions[futures[future]], framework, provider.model, error)
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
