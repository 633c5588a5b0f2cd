"""judge_report.json / .md: accuracy from the predictions, trajectory metrics from the judgments.

Shapes follow the AgentVidBench paper: Table 1 (Acc., Traj.), Table 17 (MC-rate), Table 18 (failure tags per
100 questions), Table 19 (coverage by milestone type). Accuracy never comes from the judge: the judge does not
see the gold answer. Under the paper protocol a question with no prediction or an errored prediction counts as
wrong; under the official one it is left out of the denominators, as the official evaluate.py leaves it out
(protocol.py). Either way it is listed, and the report says which protocol produced its numbers.
A judgment whose prompt no longer matches the current prediction is stale and not counted. Judgments served by
the loopback test double are flagged in every place their numbers appear: they are not from a real judge.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from statistics import fmean

from cader.contracts.judgments import FAILURE_TAGS, TAG_ALIASES
from cader.evaluate.judge.pipeline import describe_rejudging
from cader.evaluate.judge.providers import LOOPBACK_MODEL
from cader.evaluate.judge.questions import Question
from cader.evaluate.judge.schema import STATUS_CREDIT
from cader.vlm.files import write_atomic

AXIS_NAMES = ("P1", "P2", "P3", "P4", "P5")


def is_correct(question: Question, record: dict | None) -> bool:
    if record is None or record.get("error") or question.answer is None:
        return False
    pred = record.get("pred")
    return isinstance(pred, str) and pred.strip().upper() == question.answer


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return fmean(values) if values else None


def summarize(keys: list[str], correct: dict[str, bool], judged: dict[str, dict]) -> dict:
    """Accuracy and mean judge metrics over `keys`; judge means use only successfully judged questions."""
    rows = [judged[k] for k in keys if k in judged]
    out = {"n": len(keys), "accuracy": _mean(float(correct[k]) for k in keys) if keys else None,
           "n_judged": len(rows), "traj": _mean(r["traj"] for r in rows), "mc_rate": _mean(r["mc_rate"] for r in rows)}
    for axis in AXIS_NAMES:
        out[axis] = _mean(r["scores"].get(axis) for r in rows)
    return out


def tag_rates_per_100(rows: list[dict]) -> dict[str, float]:
    """Occurrences of each failure tag per 100 judged questions (Table 18), all 21 tags listed."""
    counts = dict.fromkeys(FAILURE_TAGS, 0)
    for row in rows:
        for tag in row.get("failure_tags") or []:
            tag = TAG_ALIASES.get(tag, tag)  # rows judged before the official spelling was used
            counts[tag] = counts.get(tag, 0) + 1
    return {tag: (100.0 * c / len(rows) if rows else 0.0) for tag, c in counts.items()}


def coverage_by_type(questions: dict[str, Question], judged: dict[str, dict]) -> dict[str, dict]:
    """Soft coverage (covered 1, partial 0.5, else 0) pooled over every judged milestone of each type (Table 19)."""
    credits: dict[str, list[float]] = defaultdict(list)
    for key, row in judged.items():
        types = {m["id"]: m.get("type", "unspecified") for m in questions[key].milestones}
        for milestone in row.get("milestones") or []:
            credits[types.get(milestone["id"], "unspecified")].append(STATUS_CREDIT[milestone["status"]])
    return {t: {"n": len(v), "mc_rate": fmean(v)} for t, v in sorted(credits.items())}


def from_loopback(row: dict) -> bool:
    """A judgment the loopback test double produced (asked for or answered under its model name)."""
    return LOOPBACK_MODEL in (row.get("judge_model"), row.get("served_model"))


NOT_A_REAL_JUDGE = (f"NOT A REAL JUDGE: these trajectory scores come from the loopback test double "
                    f"(`{LOOPBACK_MODEL}`), which returns made-up judgments; they measure nothing")


def counted_questions(questions: dict[str, Question], predictions: dict[str, dict], protocol: str) -> list[str]:
    """The questions in the denominators: all of them (paper), or those with a prediction that did not error
    (official: evaluate.py judges and aggregates only the run's results without an "error")."""
    if protocol == "official":
        return [k for k in questions if k in predictions and not predictions[k].get("error")]
    return list(questions)


def build_report(questions: dict[str, Question], predictions: dict[str, dict], judgments: dict[str, dict],
                 *, input_errors: list[str] = (), prompt_hashes: dict[str, str] | None = None,
                 run_counts: dict | None = None, protocol: str = "paper", protocol_source: str | None = None,
                 provenance: dict | None = None) -> dict:
    """The report over `questions`. With `prompt_hashes` (pipeline.current_prompt_hashes), a judgment of another
    prompt than the current one is stale: listed, not scored. `run_counts` (pipeline.judge_predictions) says what
    this run judged and why. `protocol` ("paper" or "official") sets the denominators (counted_questions) and the
    slicing; `provenance` (contracts.provenance.collect_provenance) is carried as given."""
    keys = counted_questions(questions, predictions, protocol)
    left_out = [questions[k].question_id for k in questions if k not in set(keys)]
    correct = {k: is_correct(questions[k], predictions.get(k)) for k in keys}
    stale = [k for k in keys if k in judgments and prompt_hashes is not None and k in prompt_hashes
             and judgments[k].get("prompt_hash") != prompt_hashes[k]]
    judged = {k: judgments[k] for k in keys if k in judgments and not judgments[k].get("error")
              and judgments[k].get("scores") and k not in stale}
    slices: dict[str, dict] = {"difficulty": {}, "category": {}, "skill": {}}
    groups: dict[str, dict[str, list[str]]] = {name: defaultdict(list) for name in slices}
    # A question without the field is in an "unknown" slice (paper), or in none (official: `_slice` skips it).
    unknown = [] if protocol == "official" else ["unknown"]
    for k in keys:
        q = questions[k]
        for difficulty in [q.difficulty] if q.difficulty else unknown:
            groups["difficulty"][difficulty].append(k)
        for category in q.categories or unknown:  # the official aggregate counts a question in each category
            groups["category"][category].append(k)
        for skill in q.skills or unknown:
            groups["skill"][skill].append(k)
    for name, members in groups.items():
        slices[name] = {value: summarize(ks, correct, judged) for value, ks in sorted(members.items())}

    overall = summarize(keys, correct, judged)
    traj_all = [judged[k]["traj"] if k in judged and judged[k]["traj"] is not None else 0.0 for k in keys]
    rows = [judgments[k] for k in keys if k in judgments]
    loopback = any(from_loopback(r) for r in rows)
    return {
        "protocol": protocol,
        "protocol_source": protocol_source,
        "accuracy_denominator": ("questions with a prediction that did not error (official evaluate.py)"
                                 if protocol == "official" else "every question of questions.jsonl (paper)"),
        "left_out_of_accuracy": left_out,
        "system": next((r.get("system") for r in rows), None),
        "judge_model": next((r.get("judge_model") for r in rows), None),
        "judge_models": sorted({str(r.get("judge_model")) for r in judged.values()}),
        "served_models": sorted({str(r["served_model"]) for r in judged.values() if r.get("served_model")}),
        "real_judge": not loopback,
        "warning": NOT_A_REAL_JUDGE if loopback else None,
        "rerun": ({**run_counts, "summary": describe_rejudging(run_counts)} if run_counts is not None else None),
        "stale_judgments": [questions[k].question_id for k in stale],
        **overall,
        "n_correct": sum(correct.values()),
        "traj_unjudged_as_zero": fmean(traj_all) if traj_all else None,
        "missing_predictions": [questions[k].question_id for k in keys if k not in predictions],
        "failed_predictions": [{"question_id": questions[k].question_id, "error": predictions[k]["error"]}
                               for k in keys if k in predictions and predictions[k].get("error")],
        "failed_judgments": [{"question_id": questions[k].question_id, "error": judgments[k].get("error")}
                             for k in keys if k in judgments and k not in judged and k not in stale],
        "unjudged": [questions[k].question_id for k in keys if k not in judgments],
        "questions_without_answer": [questions[k].question_id for k in keys if questions[k].answer is None],
        "predictions_for_unknown_questions": sorted(k for k in predictions if k not in questions),
        "slices": slices,
        "failure_tags_per_100": tag_rates_per_100(list(judged.values())),
        "coverage_by_milestone_type": coverage_by_type(questions, judged),
        "input_errors": [str(e) for e in input_errors],
        "provenance": provenance,
    }


def _fmt(value) -> str:
    if value is None:
        return "–"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _table(title: str, rows: dict[str, dict]) -> list[str]:
    cols = ("n", "accuracy", "n_judged", "traj", "mc_rate", *AXIS_NAMES)
    lines = [f"### {title}", "", "| " + " | ".join((title.split()[-1], *cols)) + " |",
             "|" + "---|" * (len(cols) + 1)]
    lines += ["| " + " | ".join((name, *(_fmt(r[c]) for c in cols))) + " |" for name, r in rows.items()]
    return lines + [""]


def render_markdown(report: dict) -> str:
    judge = report["judge_model"] if report.get("real_judge", True) else f"{report['judge_model']}, NOT A REAL JUDGE"
    lines = [f"# AgentVidBench judge report: {report['system']} (judge: {judge})", ""]
    if report.get("warning"):
        lines += [f"> **{report['warning']}**", ""]
    protocol = report.get("protocol", "paper")
    lines += [(f"- protocol: {protocol} ({report.get('protocol_source') or 'AgentVidBench paper, App. D.5'}); "
              f"accuracy over {report.get('accuracy_denominator') or 'every question'}")]
    if report.get("rerun"):
        lines += [f"- this run: {report['rerun']['summary']}"]
    provenance = report.get("provenance") or {}
    if provenance:
        lines += [(f"- provenance: commit {provenance.get('git_commit')}"
                  f"{' (dirty)' if provenance.get('git_dirty') else ''}, {provenance.get('date')}")]
    lines += [""]
    lines += _table("Overall", {"all": report})
    counted_as = "left out of" if protocol == "official" else "counted wrong in"
    lines += [(f"- {len(report['missing_predictions'])} missing and {len(report['failed_predictions'])} failed "
               f"predictions are {counted_as} accuracy"),
              (f"- trajectory metrics over {report['n_judged']} judged questions; "
               f"{len(report['failed_judgments'])} judgments failed, {len(report['unjudged'])} never judged; "
               f"Traj with those as 0: {_fmt(report['traj_unjudged_as_zero'])}"), ""]
    for name in ("difficulty", "category", "skill"):
        lines += _table(f"By {name}", report["slices"][name])
    lines += ["### Failure tags per 100 judged questions", "", "| tag | per 100 |", "|---|---|"]
    ordered = sorted(report["failure_tags_per_100"].items(), key=lambda kv: -kv[1])
    lines += [f"| {tag} | {rate:.1f} |" for tag, rate in ordered] + [""]
    lines += ["### Milestone coverage by type", "", "| type | n | mc_rate |", "|---|---|---|"]
    lines += [f"| {t} | {v['n']} | {v['mc_rate']:.3f} |" for t, v in report["coverage_by_milestone_type"].items()]
    for title, key in (("Missing predictions", "missing_predictions"), ("Failed predictions", "failed_predictions"),
                       ("Failed judgments", "failed_judgments"),
                       ("Stale judgments (prompt changed since; not scored)", "stale_judgments"),
                       ("Input errors", "input_errors")):
        if report.get(key):
            lines += ["", f"### {title}", ""] + [f"- {item}" for item in report[key]]
    return "\n".join(lines) + "\n"


def write_report(out_dir: str | Path, report: dict) -> tuple[Path, Path]:
    out_dir = Path(out_dir)
    json_path, md_path = out_dir / "judge_report.json", out_dir / "judge_report.md"
    write_atomic(json_path, json.dumps(report, indent=2, ensure_ascii=False))
    write_atomic(md_path, render_markdown(report))
    return json_path, md_path
