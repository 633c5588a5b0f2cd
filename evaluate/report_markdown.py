"""report.md: report.json's sections as Markdown tables, in the paper's order (`cader.evaluate.report` builds the
dict; this module only reads it, so the Markdown can be regenerated from a report.json alone)."""

from __future__ import annotations

import json

from cader.contracts.paper import PAPER, SELF_VERIFIER
from cader.evaluate.calibration_binding import report_line
from cader.evaluate.report_stats import ci_text, md_breakdowns, md_provenance

HIGH_P_YES = 0.9  # Figure 4: first proposals the verifier was this sure of (the report's net-gain rows use it too)



def _cell(value) -> str:
    return "-" if value is None else str(value)


def _row(cells) -> str:
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _md_header(report: dict) -> list[str]:
    lines = ["# CADER evaluation report", "", *md_provenance(report.get("provenance"))]
    cfg = report.get("config") or {}
    if cfg:
        lines += [
            (
                f"Variant `{cfg.get('variant')}`, T = {_sig(cfg.get('temperature'))}, tau = {_sig(cfg.get('tau'))}, "
                f"delta = {cfg.get('delta')}, K = {cfg.get('k_reflections')}."
            ),
            "",
        ]
    # which verifier ran: as the Stage-2 records say (a merge has no flags of its own), else as the run was asked
    # (unless its variant calls no verifier)
    asked = cfg.get("verifier") and cfg.get("variant") not in ("no_stage2", "no_verifier")
    found = report.get("verifiers") or (
        [{"model": cfg["verifier"], "main_model": bool(cfg.get("verifier_is_main_model"))}] if asked else [])
    lines += [verifier_line(v, cfg.get("model")) for v in found] + ([""] if found else [])
    return lines


def verifier_line(verifier: dict, model: str | None) -> str:
    """Which model verified the crops, and whether that is the paper's setting (CADER, Implementation Details).

    verifier: a record's `stage2.verifier` block ({"model", "main_model"}).
    model: the run's main model, when known.
    """
    if verifier.get("main_model"):
        return (f"Verifier: the main model itself (`{verifier.get('model')}`, --verifier {SELF_VERIFIER}): not the "
                f"paper's Stage 2, whose verifier is {PAPER.verifier}.")
    paper = " (the paper's)" if verifier.get("model") == PAPER.verifier else ""
    main = f"; main model `{model}`" if model else ""
    return f"Verifier: `{verifier.get('model')}`{paper}{main}."


def _sig(value) -> str:
    """A float to 4 significant digits for reading (report.json keeps every digit); anything else as it is."""
    return str(float(f"{value:.4g}")) if isinstance(value, float) else str(value)


def _md_accuracy(report: dict) -> list[str]:
    lines = ["## Accuracy", "",
             ("Brackets: exact 95% (Clopper-Pearson) interval. SE: naive / clustered by video (lmms-eval's "
             "definition). Video bootstrap: 95% interval over resampled videos. accuracy: the plain mean over "
             "questions; M-Avg: the mean of per-task-type accuracies, shown only for a benchmark whose official "
             "scorer reports it (MLVU)."), "",
             _row(["benchmark", "n", "accuracy", "95% exact", "SE / clustered SE", "videos", "video bootstrap",
                   "M-Avg", "stage-1 acc [95% exact]", "failures"]),
             _row(["---"] * 10)]
    for name, s in list(report["benchmarks"].items()) + [("overall", report["overall"])]:
        ci, boot = s.get("accuracy_ci95_exact") or [None, None], s.get("accuracy_ci95_video_bootstrap") or [None, None]
        lines.append(_row([
            name, s["n"], s["accuracy"], "-" if ci[0] is None else f"[{ci[0]}, {ci[1]}]",
            f"{_cell(s.get('accuracy_se'))} / {_cell(s.get('accuracy_se_clustered'))}", s.get("n_videos"),
            "-" if boot[0] is None else f"[{boot[0]}, {boot[1]}]", s.get("m_avg"),
            ci_text(s["stage1_accuracy"], s.get("stage1_accuracy_ci95_exact")), s["failures"],
        ]))
    return lines


def _md_table3(report: dict) -> list[str]:
    lines = ["", "## Table 3: Stage-2 trigger rate", "", _row(["benchmark", "total", "S2 trig. %", "S1 exit %", "acc"]),
             _row(["---"] * 5)]
    for name, t in report["table3_trigger"].items():
        metric = t["accuracy_metric"]
        acc = ci_text(t["accuracy"], t.get("accuracy_ci95_exact")) if metric == "accuracy" else f"{t['accuracy']} ({metric})"
        lines.append(_row([name, t["total"], t["stage2_trigger_rate"], t["stage1_exit_rate"], acc]))
    return lines


def _md_table4(report: dict) -> list[str]:
    table = report["table4_margin_bins"]
    benches = list(table)
    lines = ["", "## Table 4: margin bins (count / Stage-1 accuracy)", "", _row(["margin"] + benches),
             _row(["---"] * (len(benches) + 1))]
    for i, first in enumerate(table[benches[0]] if benches else []):  # every benchmark has the same bins, in order
        rows = (table[b][i] for b in benches)
        lines.append(_row([first["bin"]] + [f"{row['n']} / {ci_text(row['stage1_accuracy'], row.get('stage1_ci95_exact'))}"
                                            for row in rows]))
    return lines


def _md_gain_rows(report: dict, key: str, title: str, band: str) -> list[str]:
    """Tables 5 and 7: Stage-1 vs final accuracy per band (margin band, reflection depth)."""
    lines = ["", title, "", _row(["benchmark", band, "n", "stage-1", "final", "gain"]), _row(["---"] * 6)]
    for b, rows in report[key].items():
        for r in rows:
            lines.append(_row([b, r[band], r["n"], ci_text(r["stage1_accuracy"], r.get("stage1_ci95_exact")),
                               ci_text(r["final_accuracy"], r.get("final_ci95_exact")), r["gain"]]))
    return lines


def _md_figure4(report: dict) -> list[str]:
    lines = ["", f"## Figure 4: net gain on first proposals with P_yes >= {HIGH_P_YES}", "",
             _row(["benchmark", "n", "corrected", "overturned", "net"]), _row(["---"] * 5)]
    for b, g in report["figure4_net_gain"].items():
        lines.append(_row([b, g["n"], g["corrected"], g["overturned"], g["net_gain"]]))
    return lines


def _md_stage2_cost_failures(report: dict) -> list[str]:
    lines = [
        "", "## Stage 2", "",
        f"- fallbacks: {json.dumps(report['fallbacks'])}",
        f"- final answers with no parseable letter (Stage-1 answer kept): {report['answer_parse_fallbacks']}",
        f"- crop-and-verify cycles: {json.dumps(report['cycles_histogram'])}",
        "", "## Cost", "",
        f"- total: {json.dumps(report['cost']['total'])}",
        f"- per sample: {json.dumps(report['cost']['per_sample'])}",
        f"- {_timing_line(report.get('timing') or {})}",
        "", "## Failures", "",
        f"{report['failures']['count']} failed samples: {json.dumps(report['failures']['by_reason'])}",
    ]
    lines += [f"- {f['benchmark']}/{f['sample_id']}: {f['error']}" for f in report["failures"]["samples"]]
    flags = report.get("flags") or {}
    if flags.get("count") or flags.get("benchmark_rows"):
        lines += ["", (f"{flags['count']} samples ran with a flag: {json.dumps(flags['by_flag'])}; odd benchmark "
                      f"rows scored as the official scorer scores them: {json.dumps(flags['benchmark_rows'])}")]
        lines += [f"- {f['benchmark']}/{f['sample_id']}: {'; '.join(f['flags'])}" for f in flags["samples"]]
    transfer = report.get("calibration_transfer")
    if transfer:
        lines += ["", f"Calibration transfer ({transfer['calibration']}): {transfer['message']}"]
    from cader.calibrate.frontier import frontier_markdown

    binding = report_line((report.get("config") or {}).get("calibration_binding"))
    if binding:
        lines += ["", binding]
    if report.get("frontier"):
        f = report["frontier"]
        lines += ["", frontier_markdown(f["points"], f["n"], f["estimated_rows"], figure=None)]
    lines += ["", f"{report['load_errors']['count']} benchmark rows could not be loaded."]
    lines += [f"- {e}" for e in report["load_errors"]["errors"]]
    if report.get("comparison"):
        lines += ["", "## Paired comparison", "", f"```json\n{json.dumps(report['comparison'], indent=1)}\n```"]
    return lines


def _timing_line(timing: dict) -> str:
    seconds = timing.get("seconds")
    if not seconds:
        return "wall-clock time: not recorded"
    return (f"wall-clock time (timings.jsonl, apart from the records, which are the same on every machine): "
            f"{seconds['total']:.4g} s over {timing['n_timed']} samples, {seconds['per_sample']:.3g} s per sample")


def render_markdown(report: dict) -> str:
    """report.md: the sections of report.json as tables, in the paper's order."""
    lines = [
        *_md_header(report),
        *_md_accuracy(report),
        *md_breakdowns(report.get("breakdowns") or {}),
        *_md_table3(report),
        *_md_table4(report),
        *_md_gain_rows(report, "table5_low_confidence", "## Table 5: low-confidence samples (M < tau)", "band"),
        *_md_gain_rows(report, "table7_depth", "## Table 7: by reflection depth", "depth"),
        *_md_figure4(report),
        *_md_stage2_cost_failures(report),
    ]
    return "\n".join(lines) + "\n"
