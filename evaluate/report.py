"""report.json + report.md from predictions.jsonl: accuracy and the paper's tables, regenerated from the records.

- Accuracy per benchmark and overall (failed samples count as wrong; a benchmark whose registration names a macro
  metric, as mlvu_dev's M-Avg, also gets the macro mean over task types). Stage-1 accuracy (A1) alongside.
- Table 3: Stage-2 trigger rate / Stage-1 exit rate per benchmark, with the Table 1 accuracy (M-Avg for MLVU).
- Table 4: counts per margin bin (>= .995, [.99, .995), [.97, .99), [.90, .97), < .90) with Stage-1 accuracy per bin.
- Table 5: Stage-1 vs final accuracy on M < tau, split at 0.90.
- Table 7: Stage-1 vs final accuracy by reflection depth (crop-and-verify cycles 1, 2, 3, ...).
- Figure 4: net gain (Stage-1 errors corrected minus Stage-1 successes overturned) for samples whose first
  proposal scored P_yes >= 0.9.
- Fallbacks, cycles histogram, cost totals, failures by reason with the list of failed samples.
- Wall-clock time apart from the cost: from timings.jsonl beside predictions.jsonl (`cader.evaluate.runner`), so
  that the records stay machine-independent; records written before it carry their own `cost.seconds`.
- Optional paired comparison against another run (`cader.evaluate.stats`, imported lazily), resampling videos.
- Next to every accuracy its exact 95 % (Clopper-Pearson) interval; per benchmark the naive and video-clustered
  standard errors, the number of videos and a video-bootstrap interval, and the official scorers' breakdowns
  (evaluate/report_stats.py); the provenance block (code commit, dirty flag, package versions, date, command).
"""

from __future__ import annotations

import json
import logging
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

from cader.contracts.provenance import collect_provenance
from cader.evaluate.benchmarks import macro_metric
from cader.evaluate.report_markdown import HIGH_P_YES, render_markdown
from cader.evaluate.report_stats import (
    benchmark_breakdowns,
    cluster_of,
    exact_ci,
    headline_stats,
    verifiers_of,
)
from cader.vlm.files import write_atomic

log = logging.getLogger(__name__)

MARGIN_BINS = [
    (">=0.995", 0.995, float("inf")),
    ("[0.99,0.995)", 0.99, 0.995),
    ("[0.97,0.99)", 0.97, 0.99),
    ("[0.90,0.97)", 0.90, 0.97),
    ("<0.90", float("-inf"), 0.90),
]


def _pct(num: int, den: int) -> float | None:
    return round(100.0 * num / den, 2) if den else None


def _stage1_correct(r: dict) -> bool | None:
    s1 = r.get("stage1")
    if not s1 or r.get("answer") is None:
        return None
    return s1.get("pred") == r["answer"]


def benchmark_summary(records: Sequence[dict]) -> dict:
    n = len(records)
    scored = [r for r in records if r.get("answer") is not None]
    failed = [r for r in records if r.get("error")]
    ok = [r for r in records if not r.get("error")]
    correct = sum(bool(r.get("correct")) for r in scored)
    s1 = [_stage1_correct(r) for r in ok]
    s1 = [x for x in s1 if x is not None]
    stage2 = [r for r in ok if r.get("route") == "stage2"]
    summary = {
        "n": n,
        "n_scored": len(scored),
        "accuracy": _pct(correct, len(scored)),
        "stage1_accuracy": _pct(sum(s1), len(s1)),
        "accuracy_ci95_exact": exact_ci(correct, len(scored)),
        "stage1_accuracy_ci95_exact": exact_ci(sum(s1), len(s1)),
        "failures": len(failed),
        "stage2_trigger_rate": _pct(len(stage2), len(ok)),
        "stage1_exit_rate": _pct(len(ok) - len(stage2), len(ok)),
        **headline_stats(scored),
    }
    by_task = defaultdict(list)
    for r in scored:
        by_task[str((r.get("meta") or {}).get("task_type", "all"))].append(bool(r.get("correct")))
    one_benchmark = len({r.get("benchmark") for r in records}) == 1  # task types of two benchmarks do not mix
    macro = macro_metric(records[0].get("benchmark")) if one_benchmark and records else None
    if one_benchmark and (len(by_task) > 1 or macro):
        summary["per_task_type"] = {t: _pct(sum(v), len(v)) for t, v in sorted(by_task.items())}
    if macro:
        # only where the benchmark's official scorer prints a macro mean (MLVU's M-Avg): elsewhere a mean of task
        # means would be a headline no one else reports. The mean of the unrounded per-task accuracies (rounding
        # them first can move M-Avg by 0.01).
        means = [sum(v) / len(v) for v in by_task.values()]
        summary["m_avg"] = round(100.0 * sum(means) / len(means), 2) if means else None
        summary["m_avg_definition"] = (f"{macro}: mean over the {len(means)} task types present of each type's "
                                       "accuracy (the official scorer's macro mean); 'accuracy' is the plain mean "
                                       "over questions (MLVU's official 'Avg')")
    return summary


def _trigger_row(records: Sequence[dict]) -> dict:
    """Table 3: total, S2 trigger and S1 exit rates, and the benchmark's headline accuracy. The paper's Table 3
    accuracies are its Table 1 numbers (CADER (Qwen3-VL): 60.1, 75.9, 65.7, 50.1, 54.0), so MLVU's is M-Avg."""
    summary = benchmark_summary(records)
    # the benchmark's registration names its macro metric (MLVU: "M-Avg", the macro mean over task types)
    macro = macro_metric(records[0].get("benchmark")) if records else None
    return {
        "total": len(records),
        "stage2_trigger_rate": summary["stage2_trigger_rate"],
        "stage1_exit_rate": summary["stage1_exit_rate"],
        "accuracy": summary["m_avg"] if macro else summary["accuracy"],
        "accuracy_metric": macro or "accuracy",
        "accuracy_definition": summary.get("m_avg_definition") or "plain mean over questions",
        "accuracy_ci95_exact": [None, None] if macro else summary["accuracy_ci95_exact"],  # a macro mean has none
    }


def _margin_table(records: Sequence[dict]) -> list[dict]:
    rows = []
    for name, lo, hi in MARGIN_BINS:
        inside = [r for r in records if r.get("stage1") and lo <= r["stage1"]["margin"] < hi]
        s1 = [x for x in map(_stage1_correct, inside) if x is not None]
        rows.append({"bin": name, "n": len(inside), "stage1_accuracy": _pct(sum(s1), len(s1)),
                     "stage1_ci95_exact": exact_ci(sum(s1), len(s1))})
    return rows


def _gain_row(group: Sequence[dict]) -> dict:
    """Stage-1 and final accuracy of `group` (scored samples), the gain between them and their exact intervals."""
    s1 = sum(bool(_stage1_correct(r)) for r in group)
    final = sum(bool(r.get("correct")) for r in group)
    return {"n": len(group), "stage1_accuracy": _pct(s1, len(group)), "final_accuracy": _pct(final, len(group)),
            "gain": round(_pct(final, len(group)) - _pct(s1, len(group)), 2) if group else None,
            "stage1_ci95_exact": exact_ci(s1, len(group)), "final_ci95_exact": exact_ci(final, len(group))}


def _low_confidence_table(records: Sequence[dict]) -> list[dict]:
    rows = []
    for name, test in (("[0.90,tau)", lambda m, t: 0.90 <= m < t), ("<0.90", lambda m, t: m < min(0.90, t))):
        band = [r for r in records if r.get("stage1") and not r.get("error") and r.get("answer") is not None
                and test(r["stage1"]["margin"], r["stage1"].get("tau", 0.97))]
        rows.append({"band": name, **_gain_row(band)})
    return rows


def _stage2_records(records):
    return [r for r in records if r.get("stage2") and not r.get("error") and r.get("answer") is not None]


def _depth_table(records: Sequence[dict]) -> list[dict]:
    by_depth = defaultdict(list)
    for r in _stage2_records(records):
        if r["stage2"].get("cycles", 0) >= 1:
            by_depth[r["stage2"]["cycles"]].append(r)
    return [{"depth": depth, "reflections": depth - 1, **_gain_row(by_depth[depth])} for depth in sorted(by_depth)]


def _net_gain(records: Sequence[dict]) -> dict:
    corrected = overturned = n = 0
    for r in _stage2_records(records):
        verifies = [s for s in r["stage2"].get("steps", []) if s.get("phase") == "verify"]
        if not verifies or verifies[0].get("p_yes") is None or verifies[0]["p_yes"] < HIGH_P_YES:
            continue
        n += 1
        before, after = bool(_stage1_correct(r)), bool(r.get("correct"))
        corrected += (not before) and after
        overturned += before and not after
    return {"n": n, "corrected": corrected, "overturned": overturned, "net_gain": corrected - overturned}


def _failure_reason(error: str) -> str:
    return error.split(":", 1)[0].strip() or "unknown"


def _per_benchmark(records: Sequence[dict]) -> dict[str, list[dict]]:
    by_bench = defaultdict(list)
    for r in records:
        by_bench[r.get("benchmark", "?")].append(r)
    return dict(sorted(by_bench.items()))


def _paper_tables(by_bench: dict[str, list[dict]]) -> dict:
    """The paper's per-benchmark tables (Tables 3, 4, 5, 7 and Figure 4), each keyed by benchmark."""
    return {
        "table3_trigger": {b: _trigger_row(rs) for b, rs in by_bench.items()},
        "table4_margin_bins": {b: _margin_table(rs) for b, rs in by_bench.items()},
        "table5_low_confidence": {b: _low_confidence_table(rs) for b, rs in by_bench.items()},
        "table7_depth": {b: _depth_table(rs) for b, rs in by_bench.items()},
        "figure4_net_gain": {b: _net_gain(rs) for b, rs in by_bench.items()},
    }


def _stage2_summary(records: Sequence[dict]) -> dict:
    """How the routed samples ended: fallback reasons, answers kept for want of a letter, crop-verify cycles; and
    which verifier scored their crops."""
    stage2 = [r for r in records if not r.get("error") and r.get("stage2")]
    answer_fallbacks = sum(any(s.get("fallback_to_stage1") for s in r["stage2"].get("steps", [])) for r in stage2)
    return {
        "fallbacks": dict(Counter(r["stage2"].get("fallback") or "none" for r in stage2)),
        "answer_parse_fallbacks": answer_fallbacks,
        "cycles_histogram": {
            str(k): v for k, v in sorted(Counter(r["stage2"].get("cycles", 0) for r in stage2).items())
        },
        "verifiers": verifiers_of(stage2),   # which model scored the crops, as the records say
    }


def _round_cost(key: str, value: float) -> float:
    # FLOPs run to 1e15: four significant digits there; counts stay exact
    return float(f"{value:.4g}") if key.startswith("flops") else round(value, 3)


def cost_summary(records: Sequence[dict]) -> dict:
    """What the samples cost in work (calls, frames, tokens, FLOPs): the same on every machine. Wall-clock time is
    `_timing_summary`'s."""
    costs = Counter()
    for r in records:
        for key, value in (r.get("cost") or {}).items():
            if key == "seconds":
                continue
            if isinstance(value, dict):  # flops by role: summed role by role, as flops_<role>
                for role, amount in value.items():
                    costs[f"{key}_{role}"] += amount or 0
            elif value is not None:
                costs[key] += value
    # frames_decoded and forwards say what each sample costs alone; what the run itself decoded and called leaves
    # out what one sample took from another's work (cost.frames_shared, cost.forwards_shared)
    for key in ("frames", "forwards"):
        alone = "frames_decoded" if key == "frames" else "forwards"
        if f"{key}_shared" in costs:
            costs[f"{key}_run"] = costs[alone] - costs[f"{key}_shared"]
    return {
        "total": {k: _round_cost(k, v) for k, v in costs.items()},
        "per_sample": {k: _round_cost(k, v / len(records)) for k, v in costs.items()} if records else {},
    }


def _timing_summary(records: Sequence[dict], timings: dict | None) -> dict:
    """Wall-clock seconds of the records, total and per timed sample: from `timings` ((benchmark, sample_id) ->
    seconds, the run's timings.jsonl), else a record's own `cost.seconds` (written before timings.jsonl held it).
    Under `seconds`, the key of every wall-clock value, so a comparison of two runs can leave it out."""
    timings = timings or {}
    found = []
    for r in records:
        key = (str(r.get("benchmark")), str(r.get("sample_id")))
        value = timings.get(key, (r.get("cost") or {}).get("seconds"))
        if value is not None:
            found.append(float(value))
    if not found:
        return {"n_timed": 0}
    total = sum(found)
    return {"n_timed": len(found), "seconds": {"total": round(total, 3), "per_sample": round(total / len(found), 3)}}


def _failure_summary(records: Sequence[dict]) -> dict:
    failed = [r for r in records if r.get("error")]
    return {
        "count": len(failed),
        "by_reason": dict(Counter(_failure_reason(r["error"]) for r in failed)),
        "samples": [
            {"benchmark": r.get("benchmark"), "sample_id": r.get("sample_id"), "error": r["error"]} for r in failed
        ],
    }


# Benchmark rows that are scored although odd (the official scorer scores them): their loader flags them in meta.
META_FLAGS = ("empty_question", "empty_options", "duplicate_options", "answer_not_in_options")


def _flag_summary(records: Sequence[dict]) -> dict:
    """Samples that ran but are odd: the runner's `flags` ("<code>: <detail>", e.g. a one-frame container) and the
    loaders' meta flags, counted so that none is scored without the report saying so."""
    flagged = [r for r in records if r.get("flags")]
    meta = Counter(f for r in records for f in META_FLAGS if (r.get("meta") or {}).get(f))
    return {
        "count": len(flagged),
        "by_flag": dict(Counter(f.split(":", 1)[0] for r in flagged for f in r["flags"])),
        "samples": [{"benchmark": r.get("benchmark"), "sample_id": r.get("sample_id"), "flags": r["flags"]}
                    for r in flagged],
        "benchmark_rows": dict(meta),
    }


def build_report(
    records: Sequence[dict],
    load_errors: Sequence[str] = (),
    config: dict | None = None,
    provenance: dict | None = None,
    timings: dict | None = None,
) -> dict:
    """report.json: accuracy overall and per benchmark, the paper's tables, Stage 2's endings, cost, failures.

    Args:
        records: predictions.jsonl records
        load_errors: benchmark rows that could not be loaded, one line each
        config: the run's configuration, recorded as given
        provenance: the provenance block; collected now (cader.contracts.provenance) when not given
        timings: (benchmark, sample_id) -> wall-clock seconds (`cader.evaluate.runner.read_timings`)
    """
    by_bench = _per_benchmark(records)
    report = {
        "n": len(records),
        "overall": benchmark_summary(records),
        "benchmarks": {b: benchmark_summary(rs) for b, rs in by_bench.items()},
        **_paper_tables(by_bench),
        **_stage2_summary(records),
        "cost": cost_summary(records),
        "timing": _timing_summary(records, timings),
        "failures": _failure_summary(records),
        "flags": _flag_summary(records),
        "load_errors": {"count": len(load_errors), "errors": list(load_errors)},
        "breakdowns": {
            b: benchmark_breakdowns(b, [r for r in rs if r.get("answer") is not None]) for b, rs in by_bench.items()
        },
        "provenance": collect_provenance() if provenance is None else provenance,
    }
    if config is not None:
        report["config"] = config
    return report


def paired_correctness(records: Sequence[dict], other: Sequence[dict]) -> tuple[list[bool], list[bool], list[str]]:
    """(correct in `records`, correct in `other`, the video) for each sample both runs scored, in one order."""
    mine = {(r["benchmark"], str(r["sample_id"])): r for r in records if r.get("answer")}
    theirs = {(r["benchmark"], str(r["sample_id"])): bool(r.get("correct")) for r in other if r.get("answer")}
    keys = sorted(mine.keys() & theirs.keys())
    # both runs asked the same questions about the same videos
    return ([bool(mine[k].get("correct")) for k in keys], [theirs[k] for k in keys],
            [cluster_of(mine[k]) for k in keys])


def compare_runs(records: Sequence[dict], other: Sequence[dict]) -> dict:
    """Paired comparison on the samples both runs scored."""
    from cader.evaluate.stats import mcnemar_exact, paired_bootstrap_diff

    a, b, videos = paired_correctness(records, other)
    if not a:
        return {"n": 0}
    a, b = [float(x) for x in a], [float(x) for x in b]
    return {"n": len(a), "n_videos": len(set(videos)), "bootstrap": paired_bootstrap_diff(a, b, clusters=videos),
            "mcnemar": mcnemar_exact(a, b)}


def calibration_transfer(records: Sequence[dict], calibration: str | None) -> dict | None:
    """Whether this run's Stage-1 margins look like those τ was certified on (calibrate/transfer.py: two-sample KS):
    a τ fitted on one benchmark or model keeps its guarantee on another only if they are exchangeable. The run's
    margins are at the calibration's temperature (--calibration sets it). Warns in the log; None without a file."""
    if not calibration or not Path(calibration).is_file():
        return None
    from cader.calibrate.transfer import check_transfer

    margins = [r["stage1"]["margin"] for r in records if not r.get("error") and r.get("stage1")
               and r["stage1"].get("margin") is not None]
    result = check_transfer(calibration, margins)
    if result.warn:
        log.warning("%s (calibration %s)", result.message, calibration)
    return {**result.as_dict(), "calibration": str(calibration)}


def compute_frontier(records: Sequence[dict], config: dict) -> dict | None:
    """Accuracy against compute over tau (calibrate/frontier.py) for a uniform_stage2 run, whose records hold the
    Stage-2 outcome of every sample; None for any other run or when no record is usable."""
    if config.get("variant") != "uniform_stage2" or config.get("temperature") is None or config.get("tau") is None:
        return None
    from cader.calibrate.frontier import frontier_from_rows, model_shape

    found = frontier_from_rows(records, float(config["temperature"]), float(config["tau"]),
                               model_shape(config.get("model")), model_shape(config.get("verifier") or config.get("model")),
                               "certified" if config.get("calibration") else "run")
    return {k: found[k] for k in ("n", "skipped", "estimated_rows", "points")} if found["n"] else None


def write_report(
    out_dir: str | Path,
    records: Sequence[dict],
    load_errors: Sequence[str] = (),
    config: dict | None = None,
    compare_to: Sequence[dict] | None = None,
    timings: dict | None = None,
) -> dict:
    """report.json and report.md in `out_dir`; `timings` default to those beside `out_dir`/predictions.jsonl."""
    from cader.evaluate.runner import PREDICTIONS, read_timings

    out_dir = Path(out_dir)
    if timings is None:
        timings = read_timings(out_dir / PREDICTIONS)
    report = build_report(records, load_errors, config, collect_provenance(), timings)
    transfer = calibration_transfer(records, (config or {}).get("calibration"))
    if transfer is not None:
        report["calibration_transfer"] = transfer
    frontier = compute_frontier(records, config or {})
    if frontier is not None:
        report["frontier"] = frontier
    if compare_to is not None:
        report["comparison"] = compare_runs(records, compare_to)
    write_atomic(out_dir / "report.json", json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    write_atomic(out_dir / "report.md", render_markdown(report))
    return report
