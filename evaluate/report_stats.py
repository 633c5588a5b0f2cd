"""The statistics report.json carries next to each accuracy, and the per-benchmark breakdowns the official scorers
print (used by evaluate/report.py).

- Every accuracy gets its exact two-sided 95 % Clopper-Pearson interval. A benchmark's headline accuracy also gets
  the naive and the clustered standard error (lmms-eval's ``clustered_stderr``, questions clustered by video),
  the number of videos its questions come from, and a 95 % interval from resampling whole videos.
- Breakdowns, as the official scorers group questions:
  LongVideoBench by ``duration_group`` and ``question_category`` (EvolvingLMMs-Lab/lmms-eval
  ``lmms_eval/tasks/longvideobench/utils.py::longvideobench_aggregate_results`` at 75571cfe; the LongVideoBench
  release itself ships no scorer); LVBench by every ``question_type`` a question lists, so a question with two
  types counts in both (THUDM/LVBench ``lvbench/metrics/compute_accuracy.py`` at dd7d99db); Video-MME by duration,
  video domain, sub-category and task type (BradyFU/Video-MME ``evaluation/eval_your_results.py`` at 4e7566d3).
  Other benchmarks are broken down by task type when they have more than one. A question without the field is
  counted under "(missing)", never dropped. Failed samples count as wrong, as in the headline accuracy (the
  Video-MME script leaves out replies with no letter; our runner always records a letter or a failure).
- The clustered standard error is lmms-eval's ``clustered_stderr`` (``lmms_eval/api/metrics.py`` at 75571cfe;
  its Video-MME task sets ``cluster_key: videoID``); here the cluster is the record's ``video``.

Percentages are rounded to two decimals, as elsewhere in the report.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence

MISSING = "(missing)"

# benchmark -> (dimension name in report.json, record meta key, a question may list several values)
OFFICIAL_BREAKDOWNS: dict[str, tuple[tuple[str, str, bool], ...]] = {
    "longvideobench_val": (("duration_group", "duration_group", False), ("question_category", "task_type", False)),
    "lvbench": (("question_type", "question_type", True),),
    "videomme_long": (
        ("duration", "duration_category", False),
        ("domain", "domain", False),
        ("sub_category", "sub_category", False),
        ("task_type", "task_type", False),
    ),
}
KEY_VERSIONS = ("cader-toolkit", "torch", "transformers", "vllm", "numpy", "scipy")  # shown in report.md


def pct(x: float | None) -> float | None:
    return None if x is None else round(100.0 * x, 2)


def cluster_of(record: dict) -> str:
    """The record's video within its benchmark; a record without a video is a cluster of its own."""
    bench = str(record.get("benchmark"))
    video = record.get("video")
    if isinstance(video, str) and video:
        return f"{bench}\0{video}"
    return f"{bench}\0\0sample:{record.get('sample_id')}"


def exact_ci(k: int, n: int) -> list[float | None]:
    """Two-sided 95 % Clopper-Pearson interval of k / n, in percent; [None, None] when n == 0."""
    from cader.calibrate.binomial import clopper_pearson_interval

    if n == 0:
        return [None, None]
    lo, hi = clopper_pearson_interval(k, n)
    return [pct(float(lo)), pct(float(hi))]


def headline_stats(scored: Sequence[dict]) -> dict:
    """What qualifies a benchmark's accuracy: exact interval, standard errors, videos, video-bootstrap interval."""
    from cader.evaluate.stats import accuracy_summary

    correct = [bool(r.get("correct")) for r in scored]
    s = accuracy_summary(correct, [cluster_of(r) for r in scored])
    without_video = sum(not (isinstance(r.get("video"), str) and r.get("video")) for r in scored)
    return {
        "accuracy_ci95_exact": [pct(x) for x in s["ci_exact"]],
        "accuracy_se": pct(s["stderr"]),
        "accuracy_se_clustered": pct(s["stderr_clustered"]),
        "n_videos": s["n_clusters"],
        "questions_without_video": without_video,
        "accuracy_ci95_video_bootstrap": [pct(x) for x in s["ci_cluster_bootstrap"]],
    }


def accuracy_row(correct: Sequence[bool], clusters: Sequence[str]) -> dict:
    """One breakdown cell: n, correct, accuracy with its exact interval, clustered SE and the video count."""
    from cader.evaluate.stats import clustered_stderr

    n, k = len(correct), int(sum(correct))
    se = clustered_stderr([float(c) for c in correct], clusters) if n > 1 else None  # undefined for one question
    return {
        "n": n,
        "correct": k,
        "accuracy": pct(k / n) if n else None,
        "ci95_exact": exact_ci(k, n),
        "se_clustered": pct(se),
        "n_videos": len(set(clusters)),
    }


def _values(record: dict, key: str, several: bool) -> list[str]:
    value = (record.get("meta") or {}).get(key)
    if several and isinstance(value, list):
        return [str(v) for v in value] or [MISSING]
    return [MISSING] if value is None or value == "" else [str(value)]


def _order(value: str):
    """Numeric groups (LongVideoBench's duration_group 15, 60, 600, 3600) in numeric order, then text."""
    try:
        return (0, float(value), "")
    except ValueError:
        return (1, 0.0, value)


def breakdown(scored: Sequence[dict], key: str, several: bool = False) -> dict[str, dict]:
    groups: dict[str, list[dict]] = defaultdict(list)
    for r in scored:
        for value in _values(r, key, several):
            groups[value].append(r)
    return {
        value: accuracy_row([bool(r.get("correct")) for r in groups[value]], [cluster_of(r) for r in groups[value]])
        for value in sorted(groups, key=_order)
    }


def benchmark_breakdowns(benchmark: str, scored: Sequence[dict]) -> dict[str, dict]:
    """The official scorer's groupings for `benchmark`; task types for any other benchmark that has several."""
    if benchmark in OFFICIAL_BREAKDOWNS:
        return {name: breakdown(scored, key, several) for name, key, several in OFFICIAL_BREAKDOWNS[benchmark]}
    task_types = {v for r in scored for v in _values(r, "task_type", False)}
    return {"task_type": breakdown(scored, "task_type")} if len(task_types) > 1 else {}


# ---- markdown ---------------------------------------------------------------------------------------------------


def verifiers_of(records: Sequence[dict]) -> list[dict]:
    """The distinct `stage2.verifier` blocks of `records` (the model that scored the crops, and whether it was the
    main model), in a fixed order; records that name none add nothing."""
    blocks = {json.dumps(r["stage2"]["verifier"], sort_keys=True) for r in records
              if isinstance((r.get("stage2") or {}).get("verifier"), dict)}
    return [json.loads(block) for block in sorted(blocks)]


def ci_text(acc, ci) -> str:
    """'66.67 [9.43, 99.16]'; '-' without an accuracy."""
    if acc is None:
        return "-"
    return f"{acc} [{ci[0]}, {ci[1]}]" if ci and ci[0] is not None else str(acc)


def md_provenance(provenance: dict | None) -> list[str]:
    if not provenance:
        return []
    commit = provenance.get("git_commit")
    dirty = provenance.get("git_dirty")
    dirty_text = "unknown" if dirty is None else ("yes" if dirty else "no")
    packages = provenance.get("packages") or {}
    versions = ", ".join(f"{name} {packages.get(name) or '-'}" for name in KEY_VERSIONS)
    lines = [
        (f"Code `{commit[:12] if commit else 'unknown'}` (uncommitted changes: {dirty_text}), written "
        f"{provenance.get('date') or 'unknown'}; {versions}; python {provenance.get('python') or '-'}."),
    ]
    if provenance.get("command"):
        lines.append(f"Command: `{provenance['command']}`.")
    return lines + [""]


def md_breakdowns(breakdowns: dict[str, dict]) -> list[str]:
    rows = [(b, dim, value, row) for b, dims in breakdowns.items() for dim, table in dims.items()
            for value, row in table.items()]
    if not rows:
        return []
    lines = [
        "", "## Breakdowns (as the official scorers group questions)", "",
        ("Accuracy with its exact 95% interval and the standard error clustered by video. LVBench counts a question "
        "under every question type it lists, so its rows add up to more than its questions."), "",
        "| benchmark | by | group | n | videos | accuracy [95% exact] | clustered SE |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for b, dim, value, row in rows:
        lines.append(f"| {b} | {dim} | {value} | {row['n']} | {row['n_videos']} | "
                     f"{ci_text(row['accuracy'], row['ci95_exact'])} | {_dash(row['se_clustered'])} |")
    return lines


def _dash(value) -> str:
    return "-" if value is None else str(value)
