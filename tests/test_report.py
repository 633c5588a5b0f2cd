"""report.json's tables (paper Tables 3, 4, 5, 7 and Figure 4) from hand-built predictions records, edge by edge."""

import json

import pytest
from cader.evaluate.report import (
    MARGIN_BINS,
    build_report,
    compare_runs,
    render_markdown,
    write_report,
)


def no_ci(row):
    """A table row without its exact intervals (checked on their own below)."""
    return {k: v for k, v in row.items() if not k.endswith("_ci95_exact")}


def verify(p_yes, accepted=None):
    return {"phase": "verify", "p_yes": p_yes, "accepted": accepted}


def rec(
    sid,
    margin=0.5,
    s1="A",
    final="A",
    *,
    bench="lvbench",
    answer="A",
    route=None,
    cycles=1,
    steps=None,
    fallback=None,
    task=None,
    tau=0.97,
    error=None,
    cost=None,
):
    """One predictions.jsonl record as the runner writes it. route None: exit when margin >= tau."""
    route = route or ("exit" if margin >= tau else "stage2")
    stage2 = None
    if route == "stage2":
        stage2 = {"pred": final, "cycles": cycles, "fallback": fallback, "steps": steps or []}
    return {
        "benchmark": bench,
        "sample_id": str(sid),
        "answer": answer,
        "meta": {"task_type": task} if task else {},
        "stage1": {"pred": s1, "margin": margin, "tau": tau},
        "route": route,
        "stage2": stage2,
        "pred": final,
        "correct": final == answer,
        "error": error,
        "cost": cost or {},
    }


# ---- Table 3 ------------------------------------------------------------------------------------------------


def test_table3_counts_every_routed_sample_as_triggered_even_without_a_crop():
    records = [
        rec(1, 0.99),  # exit
        rec(2, 0.5, cycles=0, fallback="too_broad"),  # Stage 2, fell back before any crop
        rec(3, 0.5, cycles=0, fallback="unparseable_proposal"),
        rec(4, 0.5, cycles=2, fallback="not_accepted"),
    ]
    row = build_report(records)["table3_trigger"]["lvbench"]
    assert row["total"] == 4
    assert (row["stage2_trigger_rate"], row["stage1_exit_rate"]) == (75.0, 25.0)
    assert row["accuracy"] == 100.0 and row["accuracy_metric"] == "accuracy"


def test_table3_rates_leave_failed_samples_out_but_total_counts_them():
    records = [rec(1, 0.99), rec(2, 0.5), rec(3, 0.5, error="stage1_failed: boom", final=None)]
    row = build_report(records)["table3_trigger"]["lvbench"]
    assert row["total"] == 3
    assert (row["stage2_trigger_rate"], row["stage1_exit_rate"]) == (50.0, 50.0)
    assert row["accuracy"] == pytest.approx(66.67)  # a failed sample counts as wrong


def test_table3_accuracy_for_mlvu_is_m_avg():
    # task x: 1/1 correct, task y: 1/3 correct -> micro 50 %, M-Avg (100 + 33.33) / 2 = 66.67 %
    records = [
        rec(1, 0.99, bench="mlvu_dev", task="x"),
        rec(2, 0.99, bench="mlvu_dev", task="y"),
        rec(3, 0.5, final="B", bench="mlvu_dev", task="y"),
        rec(4, 0.5, final="C", bench="mlvu_dev", task="y"),
    ]
    report = build_report(records)
    row = report["table3_trigger"]["mlvu_dev"]
    assert row["accuracy"] == pytest.approx(66.67) and row["accuracy_metric"] == "M-Avg"
    assert report["benchmarks"]["mlvu_dev"]["accuracy"] == 50.0
    assert report["benchmarks"]["mlvu_dev"]["m_avg"] == pytest.approx(66.67)
    assert "| mlvu_dev | 4 | 50.0 | 50.0 | 66.67 (M-Avg) |" in render_markdown(report)


def test_task_types_outside_mlvu_give_per_type_rows_but_no_m_avg_no_official_scorer_prints():
    records = [rec(1, 0.99, task="x"), rec(2, 0.5, final="B", task="y"), rec(3, 0.5, task="y")]
    report = build_report(records)
    bench = report["benchmarks"]["lvbench"]
    assert bench["per_task_type"] == {"x": 100.0, "y": 50.0} and "m_avg" not in bench
    assert report["table3_trigger"]["lvbench"]["accuracy"] == pytest.approx(66.67)
    assert report["table3_trigger"]["lvbench"]["accuracy_definition"] == "plain mean over questions"
    assert "m_avg" not in build_report([rec(1, 0.99)])["benchmarks"]["lvbench"]


def test_mlvu_m_avg_says_which_definition_it_is():
    records = [rec(1, 0.99, bench="mlvu_dev", task="x"), rec(2, 0.5, final="B", bench="mlvu_dev", task="y")]
    bench = build_report(records)["benchmarks"]["mlvu_dev"]
    assert bench["m_avg"] == 50.0 and bench["m_avg_definition"].startswith("M-Avg: mean over the 2 task types")


# ---- Table 4 ------------------------------------------------------------------------------------------------


def test_table4_bin_edges_are_the_papers():
    # each edge lands in the bin above it (intervals closed below); just under it, in the bin below
    margins = [0.995, 0.99499, 0.99, 0.98999, 0.97, 0.96999, 0.90, 0.89999, 1.0, 0.0]
    records = [rec(i, m, s1="A" if i % 2 == 0 else "B") for i, m in enumerate(margins)]
    rows = build_report(records)["table4_margin_bins"]["lvbench"]
    assert [r["bin"] for r in rows] == [">=0.995", "[0.99,0.995)", "[0.97,0.99)", "[0.90,0.97)", "<0.90"]
    assert [r["n"] for r in rows] == [2, 2, 2, 2, 2]
    # Stage-1 accuracy per bin: indices (0, 8), (1, 2), (3, 4), (5, 6), (7, 9) -> A at even indices
    assert [r["stage1_accuracy"] for r in rows] == [100.0, 50.0, 50.0, 50.0, 0.0]
    assert [(lo, hi) for _, lo, hi in MARGIN_BINS] == [
        (0.995, float("inf")),
        (0.99, 0.995),
        (0.97, 0.99),
        (0.90, 0.97),
        (float("-inf"), 0.90),
    ]


def test_table4_empty_bin_has_no_accuracy():
    rows = build_report([rec(1, 0.999)])["table4_margin_bins"]["lvbench"]
    assert no_ci(rows[0]) == {"bin": ">=0.995", "n": 1, "stage1_accuracy": 100.0}
    assert no_ci(rows[1]) == {"bin": "[0.99,0.995)", "n": 0, "stage1_accuracy": None}
    # one right answer out of one: [2.5 %, 100 %]; nothing to estimate in an empty bin
    assert rows[0]["stage1_ci95_exact"] == [2.5, 100.0] and rows[1]["stage1_ci95_exact"] == [None, None]


# ---- Table 5 ------------------------------------------------------------------------------------------------


def test_table5_bands_are_090_to_tau_and_below_090():
    records = [
        rec(1, 0.90, s1="B", final="A"),  # [0.90, tau): corrected
        rec(2, 0.96999, s1="A", final="A"),  # [0.90, tau)
        rec(3, 0.89999, s1="A", final="B"),  # < 0.90: overturned
        rec(4, 0.2, s1="B", final="B"),  # < 0.90
        rec(5, 0.97, s1="B", final="B"),  # M = tau exits: in neither band
        rec(6, 0.5, error="stage2_failed: x"),  # failed: in neither band
    ]
    rows = {r["band"]: r for r in build_report(records)["table5_low_confidence"]["lvbench"]}
    assert no_ci(rows["[0.90,tau)"]) == {
        "band": "[0.90,tau)",
        "n": 2,
        "stage1_accuracy": 50.0,
        "final_accuracy": 100.0,
        "gain": 50.0,
    }
    assert no_ci(rows["<0.90"]) == {
        "band": "<0.90",
        "n": 2,
        "stage1_accuracy": 50.0,
        "final_accuracy": 0.0,
        "gain": -50.0,
    }


def test_table5_uses_each_records_tau_and_a_tau_below_090():
    # tau = 0.95: 0.96 exits; tau = 0.5: [0.90, tau) is empty and "< 0.90" stops at tau
    records = [rec(1, 0.96, tau=0.95), rec(2, 0.93, tau=0.95), rec(3, 0.6, tau=0.5), rec(4, 0.4, tau=0.5)]
    rows = {r["band"]: r for r in build_report(records)["table5_low_confidence"]["lvbench"]}
    assert rows["[0.90,tau)"]["n"] == 1 and rows["<0.90"]["n"] == 1
    empty = build_report([rec(1, 0.99)])["table5_low_confidence"]["lvbench"]
    assert no_ci(empty[0]) == {
        "band": "[0.90,tau)",
        "n": 0,
        "stage1_accuracy": None,
        "final_accuracy": None,
        "gain": None,
    }


def test_table5_reads_tau_097_when_a_record_has_none():
    record = rec(1, 0.95)
    del record["stage1"]["tau"]
    rows = build_report([record])["table5_low_confidence"]["lvbench"]
    assert rows[0]["n"] == 1


# ---- Table 7 ------------------------------------------------------------------------------------------------


def test_table7_by_depth_leaves_out_samples_that_never_cropped():
    records = [
        rec(1, 0.5, s1="B", final="A", cycles=1),
        rec(2, 0.5, s1="A", final="A", cycles=1),
        rec(3, 0.5, s1="B", final="A", cycles=2),
        rec(4, 0.5, s1="A", final="B", cycles=3, fallback=None),
        rec(5, 0.5, s1="B", final="B", cycles=0, fallback="too_broad"),  # depth 0: not in Table 7
        rec(6, 0.5, s1="A", final="A", cycles=0, fallback="unparseable_proposal"),
        rec(7, 0.99),  # exit
        rec(8, 0.5, cycles=2, error="stage2_failed: x"),  # failed
    ]
    rows = build_report(records)["table7_depth"]["lvbench"]
    assert rows[0]["stage1_ci95_exact"] == [1.26, 98.74] and rows[0]["final_ci95_exact"] == [15.81, 100.0]
    assert [no_ci(r) for r in rows] == [
        {
            "depth": 1,
            "reflections": 0,
            "n": 2,
            "stage1_accuracy": 50.0,
            "final_accuracy": 100.0,
            "gain": 50.0,
        },
        {
            "depth": 2,
            "reflections": 1,
            "n": 1,
            "stage1_accuracy": 0.0,
            "final_accuracy": 100.0,
            "gain": 100.0,
        },
        {
            "depth": 3,
            "reflections": 2,
            "n": 1,
            "stage1_accuracy": 100.0,
            "final_accuracy": 0.0,
            "gain": -100.0,
        },
    ]


def test_table7_record_without_cycles_is_depth_zero():
    record = rec(1, 0.5)
    del record["stage2"]["cycles"]
    assert build_report([record])["table7_depth"]["lvbench"] == []


# ---- Figure 4 ------------------------------------------------------------------------------------------------


def test_figure4_uses_the_first_proposals_p_yes():
    records = [
        # first proposal at exactly 0.9: counted (P_yes >= 0.9); Stage 1 wrong, final right -> corrected
        rec(1, 0.5, s1="B", final="A", steps=[verify(0.9, True)]),
        # first proposal rejected at 0.5, the second accepted at 0.95: not counted (first proposal only)
        rec(2, 0.5, s1="B", final="A", steps=[verify(0.5, False), verify(0.95, True)], cycles=2),
        # first at 0.95, overturned
        rec(3, 0.5, s1="A", final="B", steps=[verify(0.95, True)]),
        # first at 0.99, Stage 1 right and final right: counted, neither corrected nor overturned
        rec(4, 0.5, s1="A", final="A", steps=[verify(0.99, True)]),
        # first just under 0.9 with a later high one: not counted
        rec(5, 0.5, s1="B", final="A", steps=[verify(0.8999, False), verify(0.99, True)], cycles=2),
        # no verifier (w/o Verifier variant): no P_yes, not counted
        rec(6, 0.5, s1="B", final="A", steps=[{"phase": "verify", "p_yes": None, "skipped": True}]),
        rec(7, 0.5, s1="B", final="A", steps=[], cycles=0, fallback="too_broad"),
    ]
    gain = build_report(records)["figure4_net_gain"]["lvbench"]
    assert gain == {"n": 3, "corrected": 1, "overturned": 1, "net_gain": 0}


def test_figure4_reads_steps_in_order_past_other_phases():
    steps = [
        {"phase": "propose"},
        verify(0.3, False),
        {"phase": "resample"},
        {"phase": "propose"},
        verify(0.97),
    ]
    assert build_report([rec(1, 0.5, s1="B", steps=steps, cycles=2)])["figure4_net_gain"]["lvbench"]["n"] == 0
    steps = [{"phase": "propose"}, verify(0.92, True), {"phase": "answer"}]
    assert build_report([rec(1, 0.5, s1="B", steps=steps)])["figure4_net_gain"]["lvbench"] == {
        "n": 1,
        "corrected": 1,
        "overturned": 0,
        "net_gain": 1,
    }


# ---- the rest of report.json ----------------------------------------------------------------------------------


def test_summary_fallbacks_cycles_costs_and_failures():
    records = [
        rec(1, 0.99, cost={"forwards": 1, "frames_decoded": 10}),
        rec(2, 0.5, final="B", cycles=0, fallback="too_broad", cost={"forwards": 2, "frames_decoded": 10}),
        rec(
            3,
            0.5,
            cycles=1,
            steps=[verify(0.7, True), {"phase": "answer", "fallback_to_stage1": True}],
            cost={"forwards": 4, "frames_decoded": 75},
        ),
        rec(4, 0.5, error="video_unreadable: x.mp4: no such file", final=None),
        rec(5, 0.5, bench="mlvu_dev", error="stage1_failed: RuntimeError: OOM", final=None, answer=None),
    ]
    report = build_report(
        records, load_errors=["lvbench: row 9: no options"], config={"variant": "full", "tau": 0.9}
    )
    overall = report["overall"]
    assert report["n"] == 5 and overall["n"] == 5 and overall["n_scored"] == 4 and overall["failures"] == 2
    assert overall["accuracy"] == 50.0  # 2 of the 4 scored: a failure counts as wrong
    assert overall["stage1_accuracy"] == 100.0  # over the samples that did not fail
    assert (overall["stage2_trigger_rate"], overall["stage1_exit_rate"]) == (
        pytest.approx(66.67),
        pytest.approx(33.33),
    )
    assert report["fallbacks"] == {"too_broad": 1, "none": 1}
    assert report["answer_parse_fallbacks"] == 1
    assert report["cycles_histogram"] == {"0": 1, "1": 1}
    assert report["cost"]["total"] == {"forwards": 7, "frames_decoded": 95}
    assert report["cost"]["per_sample"] == {"forwards": 1.4, "frames_decoded": 19.0}
    assert report["failures"]["count"] == 2
    assert report["failures"]["by_reason"] == {"video_unreadable": 1, "stage1_failed": 1}
    assert report["failures"]["samples"][0] == {
        "benchmark": "lvbench",
        "sample_id": "4",
        "error": "video_unreadable: x.mp4: no such file",
    }
    assert report["load_errors"] == {"count": 1, "errors": ["lvbench: row 9: no options"]}
    assert report["config"] == {"variant": "full", "tau": 0.9}
    assert sorted(report["benchmarks"]) == ["lvbench", "mlvu_dev"]
    md = render_markdown(report)
    assert "Variant `full`, T = None, tau = 0.9" in md
    assert "- lvbench/4: video_unreadable: x.mp4: no such file" in md
    assert "1 benchmark rows could not be loaded." in md and "- lvbench: row 9: no options" in md
    assert '- fallbacks: {"too_broad": 1, "none": 1}' in md
    assert "(Stage-1 answer kept): 1" in md


def test_report_without_records_or_config():
    report = build_report([])
    assert report["n"] == 0 and report["overall"]["accuracy"] is None and report["cost"]["per_sample"] == {}
    assert "config" not in report and report["benchmarks"] == {} and report["breakdowns"] == {}
    assert set(report["provenance"]) >= {"git_commit", "git_dirty", "packages", "date", "command"}
    assert render_markdown(report).startswith("# CADER evaluation report\n\nCode `")
    assert render_markdown(dict(report, provenance={})).startswith("# CADER evaluation report\n\n## Accuracy")


def test_markdown_tables_show_each_row():
    records = [
        rec(1, 0.999),
        rec(2, 0.93, s1="B", final="A", steps=[verify(0.95, True)]),
        rec(3, 0.2, s1="B", final="B", cycles=3, fallback="not_accepted"),
    ]
    md = render_markdown(build_report(records))
    # 2/3 right: exact interval [9.43, 99.16]; sd of (1, 1, 0) over sqrt(3) = 33.33; three videos of one question
    row = next(line for line in md.splitlines() if line.startswith("| lvbench | 3 | 66.67 | "))
    assert row.startswith("| lvbench | 3 | 66.67 | [9.43, 99.16] | 33.33 / 33.33 | 3 | [")
    assert row.endswith("| - | 33.33 [0.84, 90.57] | 0 |")
    assert "| >=0.995 | 1 / 100.0 [2.5, 100.0] |" in md and "| [0.99,0.995) | 0 / - |" in md
    assert "| <0.90 | 1 / 0.0 [0.0, 97.5] |" in md
    assert "| lvbench | [0.90,tau) | 1 | 0.0 [0.0, 97.5] | 100.0 [2.5, 100.0] | 100.0 |" in md
    assert "| lvbench | 3 | 1 | 0.0 [0.0, 97.5] | 0.0 [0.0, 97.5] | 0.0 |" in md  # Table 7 depth 3
    assert "| lvbench | 1 | 1 | 0 | 1 |" in md  # Figure 4
    assert "| lvbench | 3 | 66.67 | 33.33 | 66.67 [9.43, 99.16] |" in md  # Table 3


def test_write_report_and_paired_comparison(tmp_path):
    mine = [rec(i, 0.5, final="A" if i < 6 else "B") for i in range(10)]
    theirs = [rec(i, 0.5, final="A" if i < 3 else "B") for i in range(10)] + [rec(99, 0.5)]
    report = write_report(tmp_path, mine, config={"variant": "full"}, compare_to=theirs)
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved == json.loads(json.dumps(report))
    assert (tmp_path / "report.md").read_text() == render_markdown(report)
    comparison = compare_runs(mine, theirs)
    assert comparison["n"] == 10 and saved["comparison"]["n"] == 10
    assert saved["config"] == {"variant": "full"}
    assert f"```json\n{json.dumps(saved['comparison'], indent=1)}\n```" in (tmp_path / "report.md").read_text()
    assert compare_runs(mine, [rec(50, 0.5)]) == {"n": 0}
    assert "comparison" not in write_report(tmp_path, mine)


# ---- exact outputs -------------------------------------------------------------------------------------------

GOLDEN_RECORDS = [
    rec(1, 0.999, bench="mlvu_dev", task="x", cost={"forwards": 1}),
    rec(
        2,
        0.95,
        s1="B",
        final="A",
        bench="mlvu_dev",
        task="y",
        steps=[verify(0.93, True)],
        cost={"forwards": 4},
    ),
    rec(
        3,
        0.3,
        s1="A",
        final="B",
        cycles=2,
        steps=[verify(0.2, False), verify(0.7, True), {"phase": "answer", "fallback_to_stage1": True}],
        cost={"forwards": 6},
    ),
    rec(4, 0.5, error="video_unreadable: a.mp4", final=None),
]
GOLDEN_CONFIG = {"variant": "full", "temperature": 2.0, "tau": 0.97, "delta": 0.6, "k_reflections": 2}
# Read and checked by hand against the records above (two benchmarks, one failure, one parse fallback); the exact
# intervals are Beta quantiles: 0/2 -> [0, 1 - 0.025^(1/2)] = [0, 84.19], 1/2 -> [1.26, 98.74], 2/4 -> [6.76, 93.24].
GOLDEN_PROVENANCE = {
    "git_commit": "0123456789abcdef0123",
    "git_dirty": False,
    "packages": {"cader-toolkit": "0.1.0", "torch": "2.14.1", "transformers": "5.24.0", "numpy": "2.4.6",
                 "scipy": "1.17.1"},
    "python": "3.11.7",
    "date": "2026-12-01T20:00:00+00:00",
    "command": "evaluate/run.py --benchmark lvbench",
}
GOLDEN_MARKDOWN = """\
# CADER evaluation report

Code `0123456789ab` (uncommitted changes: no), written 2026-12-01T20:00:00+00:00; cader-toolkit 0.1.0, torch 2.14.1, transformers 5.24.0, vllm -, numpy 2.4.6, scipy 1.17.1; python 3.11.7.
Command: `evaluate/run.py --benchmark lvbench`.

Variant `full`, T = 2.0, tau = 0.97, delta = 0.6, K = 2.

## Accuracy

Brackets: exact 95% (Clopper-Pearson) interval. SE: naive / clustered by video (lmms-eval's definition). Video bootstrap: 95% interval over resampled videos. accuracy: the plain mean over questions; M-Avg: the mean of per-task-type accuracies, shown only for a benchmark whose official scorer reports it (MLVU).

| benchmark | n | accuracy | 95% exact | SE / clustered SE | videos | video bootstrap | M-Avg | stage-1 acc [95% exact] | failures |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
| lvbench | 2 | 0.0 | [0.0, 84.19] | 0.0 / 0.0 | 2 | [0.0, 0.0] | - | 100.0 [2.5, 100.0] | 1 |
| mlvu_dev | 2 | 100.0 | [15.81, 100.0] | 0.0 / 0.0 | 2 | [100.0, 100.0] | 100.0 | 50.0 [1.26, 98.74] | 0 |
| overall | 4 | 50.0 | [6.76, 93.24] | 28.87 / 28.87 | 4 | [0.0, 100.0] | - | 66.67 [9.43, 99.16] | 1 |

## Breakdowns (as the official scorers group questions)

Accuracy with its exact 95% interval and the standard error clustered by video. LVBench counts a question under every question type it lists, so its rows add up to more than its questions.

| benchmark | by | group | n | videos | accuracy [95% exact] | clustered SE |
| --- | --- | --- | --- | --- | --- | --- |
| lvbench | question_type | (missing) | 2 | 2 | 0.0 [0.0, 84.19] | 0.0 |
| mlvu_dev | task_type | x | 1 | 1 | 100.0 [2.5, 100.0] | - |
| mlvu_dev | task_type | y | 1 | 1 | 100.0 [2.5, 100.0] | - |

## Table 3: Stage-2 trigger rate

| benchmark | total | S2 trig. % | S1 exit % | acc |
| --- | --- | --- | --- | --- |
| lvbench | 2 | 100.0 | 0.0 | 0.0 [0.0, 84.19] |
| mlvu_dev | 2 | 50.0 | 50.0 | 100.0 (M-Avg) |

## Table 4: margin bins (count / Stage-1 accuracy)

| margin | lvbench | mlvu_dev |
| --- | --- | --- |
| >=0.995 | 0 / - | 1 / 100.0 [2.5, 100.0] |
| [0.99,0.995) | 0 / - | 0 / - |
| [0.97,0.99) | 0 / - | 0 / - |
| [0.90,0.97) | 0 / - | 1 / 0.0 [0.0, 97.5] |
| <0.90 | 2 / 100.0 [15.81, 100.0] | 0 / - |

## Table 5: low-confidence samples (M < tau)

| benchmark | band | n | stage-1 | final | gain |
| --- | --- | --- | --- | --- | --- |
| lvbench | [0.90,tau) | 0 | - | - | - |
| lvbench | <0.90 | 1 | 100.0 [2.5, 100.0] | 0.0 [0.0, 97.5] | -100.0 |
| mlvu_dev | [0.90,tau) | 1 | 0.0 [0.0, 97.5] | 100.0 [2.5, 100.0] | 100.0 |
| mlvu_dev | <0.90 | 0 | - | - | - |

## Table 7: by reflection depth

| benchmark | depth | n | stage-1 | final | gain |
| --- | --- | --- | --- | --- | --- |
| lvbench | 2 | 1 | 100.0 [2.5, 100.0] | 0.0 [0.0, 97.5] | -100.0 |
| mlvu_dev | 1 | 1 | 0.0 [0.0, 97.5] | 100.0 [2.5, 100.0] | 100.0 |

## Figure 4: net gain on first proposals with P_yes >= 0.9

| benchmark | n | corrected | overturned | net |
| --- | --- | --- | --- | --- |
| lvbench | 0 | 0 | 0 | 0 |
| mlvu_dev | 1 | 1 | 0 | 1 |

## Stage 2

- fallbacks: {"none": 2}
- final answers with no parseable letter (Stage-1 answer kept): 1
- crop-and-verify cycles: {"1": 1, "2": 1}

## Cost

- total: {"forwards": 11}
- per sample: {"forwards": 2.75}
- wall-clock time: not recorded

## Failures

1 failed samples: {"video_unreadable": 1}
- lvbench/4: video_unreadable: a.mp4

1 benchmark rows could not be loaded.
- lvbench: row 2: bad
"""


def test_markdown_exactly():
    report = build_report(GOLDEN_RECORDS, ["lvbench: row 2: bad"], GOLDEN_CONFIG, GOLDEN_PROVENANCE)
    assert render_markdown(report) == GOLDEN_MARKDOWN


def test_overall_has_no_m_avg_across_benchmarks_and_per_task_rows():
    report = build_report(GOLDEN_RECORDS)
    assert "m_avg" not in report["overall"] and "per_task_type" not in report["overall"]
    assert report["benchmarks"]["mlvu_dev"]["per_task_type"] == {"x": 100.0, "y": 100.0}
    untyped = build_report([rec(1, 0.99, bench="mlvu_dev"), rec(2, 0.5, final="B", bench="mlvu_dev")])
    assert untyped["benchmarks"]["mlvu_dev"]["per_task_type"] == {"all": 50.0}
    assert untyped["table3_trigger"]["mlvu_dev"]["accuracy"] == 50.0


def test_unscored_samples_and_missing_fields():
    no_answer = rec(1, 0.5, answer=None, s1=None, final=None)  # a sample without a gold answer
    report = build_report([no_answer, rec(2, 0.99, s1="B")])
    assert report["overall"]["n_scored"] == 1 and report["overall"]["stage1_accuracy"] == 0.0
    bare = rec(3, 0.5, s1="B", final="A")
    del bare["benchmark"], bare["stage2"]["steps"], bare["stage2"]["cycles"]
    report = build_report([bare])
    assert list(report["benchmarks"]) == ["?"]
    assert report["cycles_histogram"] == {"0": 1} and report["answer_parse_fallbacks"] == 0
    assert report["figure4_net_gain"]["?"]["n"] == 0
    assert build_report([rec(4, 0.5, error=": no reason given")])["failures"]["by_reason"] == {"unknown": 1}


def test_overturned_counts_only_right_to_wrong():
    records = [
        rec(1, 0.5, s1="A", final="A", steps=[verify(0.95, True)]),
        rec(2, 0.5, s1="A", final="A", steps=[verify(0.91, True)]),
        rec(3, 0.5, s1="A", final="B", steps=[verify(0.92, True)]),
    ]
    assert build_report(records)["figure4_net_gain"]["lvbench"] == {
        "n": 3,
        "corrected": 0,
        "overturned": 1,
        "net_gain": -1,
    }


def test_table5_default_tau_excludes_an_exited_sample():
    exited = rec(1, 0.975)
    del exited["stage1"]["tau"]
    rows = build_report([exited])["table5_low_confidence"]["lvbench"]
    assert rows[0]["n"] == 0 and rows[1]["n"] == 0


def test_wall_clock_seconds_are_kept_apart_from_the_cost_with_three_decimals():
    # records written before timings.jsonl carry cost.seconds; the side file's value wins where both exist
    records = [rec(1, 0.99, cost={"seconds": 0.12344, "forwards": 1}), rec(2, 0.99, cost={"seconds": 9.0}),
               rec(3, 0.99, cost={})]
    report = build_report(records, timings={("lvbench", "2"): 0.00001})
    assert report["cost"]["total"] == {"forwards": 1} and report["cost"]["per_sample"] == {"forwards": 0.333}
    assert report["timing"] == {"n_timed": 2, "seconds": {"total": 0.123, "per_sample": 0.062}}
    assert "0.123 s over 2 samples, 0.062 s per sample" in render_markdown(report)
    assert build_report([rec(1, 0.99, cost={})])["timing"] == {"n_timed": 0}


def test_comparison_pairs_correctness_per_sample():
    mine = [rec(i, 0.5, final="A" if i < 6 else "B") for i in range(10)]  # 6 right
    theirs = [rec(i, 0.5, final="A" if i < 3 else "B") for i in range(10)]  # 3 right, a subset of mine
    comparison = compare_runs(mine, theirs)
    assert comparison["n"] == 10
    assert comparison["bootstrap"]["diff"] == pytest.approx(0.3)
    assert (comparison["mcnemar"]["only_a"], comparison["mcnemar"]["only_b"]) == (3, 0)


def test_report_json_is_utf8_with_two_space_indent(tmp_path):
    records = [rec(1, 0.99, error=None), rec("é", 0.5, error="bad_sample: ü", final=None)]
    write_report(tmp_path, records)
    text = (tmp_path / "report.json").read_text(encoding="utf-8")
    assert '"sample_id": "é"' in text and '\n  "n": 2,' in text and text.endswith("}\n")


def test_flagged_samples_and_odd_benchmark_rows_are_counted_in_the_report():
    from cader.evaluate.report import build_report, render_markdown

    base = {"benchmark": "mlvu_dev", "video": "v.mp4", "duration": 60.0, "question": "q", "options": ["a", "b"],
            "letters": ["A", "B"], "answer": "A", "stage1": None, "route": "exit", "stage2": None, "pred": "A",
            "correct": True, "cost": {}, "error": None}
    records = [
        {**base, "sample_id": "1", "flags": ["single_frame: 1 frame of 0.040 s (jpeg_pipe container)"]},
        {**base, "sample_id": "2", "meta": {"empty_question": True}},
        {**base, "sample_id": "3", "meta": {"empty_options": ["B"]}},
        {**base, "sample_id": "4"},
    ]
    report = build_report(records, provenance={})
    assert report["flags"]["count"] == 1 and report["flags"]["by_flag"] == {"single_frame": 1}
    assert report["flags"]["samples"][0]["sample_id"] == "1"
    assert report["flags"]["benchmark_rows"] == {"empty_question": 1, "empty_options": 1}
    text = render_markdown(report)
    assert '1 samples ran with a flag: {"single_frame": 1}' in text and "mlvu_dev/1: single_frame" in text


def test_a_run_whose_margins_differ_from_the_calibrations_is_warned_in_the_report(tmp_path, caplog):
    from cader.calibrate.options import OutputOptions, Rule
    from cader.calibrate.pipeline import calibrate_predictions
    from cader.calibrate.margin import margin
    from cader.dev.calibration_rows import synthetic_prediction_rows
    from cader.evaluate.report import write_report

    rows = synthetic_prediction_rows("synthetic", 400, seed=1)
    (tmp_path / "heldout.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    calibrate_predictions([str(tmp_path / "heldout.jsonl")], str(tmp_path / "cal"), rule=Rule(mode="budget", budget=0.5),
                          output=OutputOptions(figures=False, validity_splits=0))
    calibration = tmp_path / "cal" / "calibration.json"
    payload = json.loads(calibration.read_text())
    reference = payload["select_margins"]["sorted"]

    def run(margins):
        records = [{"benchmark": "b", "sample_id": str(i), "stage1": {"margin": m}, "error": None, "answer": "A",
                    "pred": "A", "correct": True, "route": "exit", "stage2": None, "cost": {}}
                   for i, m in enumerate(margins)]
        return write_report(tmp_path / "out", records, [], {"calibration": str(calibration)})["calibration_transfer"]

    same = run(reference[::2])                                   # drawn from the calibration's own margins
    assert same["warn"] is False and same["p_value"] > 0.05 and same["n_target"] == len(reference[::2])
    shifted = run([min(1.0, m * 0.2) for m in reference])        # a benchmark where the model is far less sure
    assert shifted["warn"] is True and shifted["p_value"] < 1e-6
    assert "recalibrate" in caplog.text and "Calibration transfer" in (tmp_path / "out" / "report.md").read_text()
    assert write_report(tmp_path / "none", [], [], {"calibration": None}).get("calibration_transfer") is None


def test_the_cost_summary_says_what_the_run_decoded_apart_from_what_each_sample_costs_alone():
    from cader.evaluate.report import cost_summary

    alone = {"forwards": 2, "frames_decoded": 10, "prompt_tokens": 5, "completion_tokens": 1, "seconds": 1.0}
    # the second question of the video took its 8 Stage-1 frames from the first's decode
    records = [{"cost": dict(alone)}, {"cost": {**alone, "frames_shared": 8}}]
    summary = cost_summary(records)
    assert summary["total"]["frames_decoded"] == 20 and summary["total"]["frames_run"] == 12
    assert summary["per_sample"]["frames_run"] == 6
    assert "forwards_run" not in summary["total"]   # nothing shared: no second figure
    assert "frames_run" not in cost_summary([{"cost": dict(alone)}])["total"]


def test_a_uniform_stage2_report_shows_the_accuracy_compute_frontier(tmp_path):
    from cader.calibrate.margin import margin
    from cader.dev.calibration_rows import synthetic_prediction_rows
    from cader.evaluate.report import write_report

    rows = synthetic_prediction_rows("synthetic", 30, 4, 1.5, seed=1, stage2_accuracy=0.9)
    for row in rows:
        row["cost"]["flops"] = {"stage1": 1e12, "main": 3e12, "verifier": 1e12, "total": 4e12}
        row["stage1"]["margin"] = margin(row["stage1"]["logits"], 1.5)  # as a run writes it
    config = {"variant": "uniform_stage2", "temperature": 1.5, "tau": 0.9, "model": None, "calibration": None}
    report = write_report(tmp_path, rows, config=config)
    points = report["frontier"]["points"]
    assert report["frontier"]["n"] == 30 and points["always_stage2"]["mean_tflops"] == 4.0
    assert points["stage1_only"]["mean_tflops"] == 1.0
    assert "## Accuracy against compute (uniform_stage2 outcomes)" in (tmp_path / "report.md").read_text()
    assert report["cost"]["per_sample"]["flops_total"] == 4e12
    assert "frontier" not in write_report(tmp_path, rows, config=config | {"variant": "full"})


def test_people_read_a_fitted_t_and_tau_to_four_digits_and_report_json_keeps_every_digit():
    config = {"variant": "full", "temperature": 1.9796517007364418, "tau": 0.15000000000000002}
    report = build_report([rec(1, 0.99)], config=config)
    assert "Variant `full`, T = 1.98, tau = 0.15, " in render_markdown(report)
    assert report["config"]["temperature"] == 1.9796517007364418
