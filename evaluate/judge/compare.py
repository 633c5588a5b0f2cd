"""`judge.py compare`: paired statistics for several systems' predictions (or judgments) on the same questions."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
from cader.contracts.jsonl import read_jsonl
from cader.evaluate.judge.aggregate import is_correct
from cader.evaluate.judge.pipeline import read_judgments
from cader.evaluate.judge.questions import InputFileError, load_predictions, load_questions, prediction_key
from cader.evaluate.stats import mcnemar_exact, paired_bootstrap_diff, rank_stability


def _system_name(path: Path, taken: set[str]) -> str:
    name = path.parent.name or path.stem
    return name if name not in taken else str(path)


def per_question_scores(path: str | Path, metric: str, questions: dict | None) -> dict[str, float]:
    """question id -> score: 1/0 correctness ("accuracy", from predictions) or the Traj score ("traj", judgments)."""
    if metric == "traj":
        return {k: float(r["traj"]) for k, r in read_judgments(path).items()
                if not r.get("error") and r.get("traj") is not None}
    rows, _ = load_predictions(path) if questions is not None else (_rows_by_any_id(path), [])
    if questions is not None:
        return {k: float(is_correct(questions[k], rows[k])) for k in rows if k in questions}
    return {k: float(bool(r.get("correct")) and not r.get("error")) for k, r in rows.items()}


def _rows_by_any_id(path: str | Path) -> dict[str, dict]:
    rows = {}
    for row in read_jsonl(path):
        key = prediction_key(row) or (str(row["sample_id"]) if "sample_id" in row else None)
        if key is not None:
            rows[key] = row
    return rows


def compare_files(files: Sequence[str], *, questions_path: str | None = None, metric: str = "accuracy",
                  n_resamples: int = 10_000, seed: int = 0) -> dict:
    """Align systems on the same question ids (a missing answer scores 0) and compute App. G statistics,
    each system against the first."""
    if len(files) < 2:
        raise ValueError("compare needs at least two files")
    for path in [*files, *([questions_path] if questions_path else [])]:
        if not Path(path).is_file():
            raise InputFileError(path)
    questions = load_questions(questions_path)[0] if questions_path else None
    names, per_system = [], []
    for path in files:
        names.append(_system_name(Path(path), set(names)))
        per_system.append(per_question_scores(path, metric, questions))
    if questions is not None:
        ids = list(questions)
    else:
        ids = sorted(set().union(*per_system), key=lambda k: (len(k), k))
    matrix = np.array([[scores.get(k, 0.0) for k in ids] for scores in per_system])
    result = {"metric": metric, "n": len(ids), "systems": {}, "pairs": []}
    for name, scores, row in zip(names, per_system, matrix):
        result["systems"][name] = {"mean": float(row.mean()) if ids else None,
                                   "missing": [k for k in ids if k not in scores]}
    for i in range(1, len(names)):
        pair = {"a": names[i], "b": names[0],
                "bootstrap": paired_bootstrap_diff(matrix[i], matrix[0], n_resamples=n_resamples, seed=seed)}
        if metric == "accuracy":
            pair["mcnemar"] = mcnemar_exact(matrix[i] > 0.5, matrix[0] > 0.5)
        result["pairs"].append(pair)
    if len(names) >= 3:
        result["rank_stability"] = rank_stability(matrix, names, n_resamples=n_resamples, seed=seed)
    return result


def format_comparison(result: dict) -> str:
    lines = [f"metric: {result['metric']}   questions: {result['n']}", "", "system | mean | missing"]
    for name, info in result["systems"].items():
        lines.append(f"{name} | {info['mean']:.4f} | {len(info['missing'])}")
    lines.append("")
    for pair in result["pairs"]:
        b = pair["bootstrap"]
        line = (f"{pair['a']} - {pair['b']}: {b['diff']:+.4f}  {int(b['confidence'] * 100)}% CI "
                f"[{b['low']:+.4f}, {b['high']:+.4f}] ({b['n_resamples']} paired resamples)")
        if "mcnemar" in pair:
            m = pair["mcnemar"]
            line += f"; McNemar exact: {m['only_a']} vs {m['only_b']} discordant, p = {m['p_value']:.4g}"
        lines.append(line)
    if "rank_stability" in result:
        rs = result["rank_stability"]
        lines += ["", f"rank stability (Kendall tau-b vs full-sample ranking: {rs['kendall_tau_b']:.3f})",
                  "system | rank | 95% rank interval | P(rank 1) | P(top 3)"]
        for name, s in rs["systems"].items():
            lines.append(f"{name} | {s['rank']} | [{s['rank_interval'][0]}, {s['rank_interval'][1]}] | "
                         f"{s['p_rank1']:.3f} | {s['p_top3']:.3f}")
    return "\n".join(lines)
