"""calibrate_predictions at its edges: defaults, the exit rule in the final accuracy, the seeded split, too few
samples, the skipped-row listing, accuracy mode's Stage-2 outcomes, and the numbers SUMMARY.md shows."""

import dataclasses
import json

import numpy as np
import pytest
from cader.calibrate import pipeline
from cader.calibrate.options import FitOptions, OutputOptions, Rule, SplitOptions
from cader.calibrate.pipeline import CalibrationInputError, calibrate_predictions, render_summary
from cader.calibrate.tau import NO_EXIT_TAU
from cader.dev.calibration_rows import synthetic_prediction_rows


def write(path, rows):
    path.write_text(
        "".join(r if isinstance(r, str) else json.dumps(r) + "\n" for r in rows), encoding="utf-8"
    )
    return str(path)


def test_defaults_are_the_documented_ones():
    defaults = {f.name: f.default for group in (Rule, FitOptions, SplitOptions, OutputOptions)
                for f in dataclasses.fields(group)}
    assert defaults == {
        "mode": "precision",
        "alpha": 0.05,
        "delta": 0.1,
        "budget": None,
        "epsilon": None,
        "budget_guarantee": False,
        "per_benchmark": False,
        "verifier_alpha": None,
        "evidence_rule": "contains",
        "seed": 0,
        "min_exits": 50,
        "fit_fraction": 0.5,
        "temperature": None,
        "split_by": "video", "cluster_bound": True, "per_video": False,
        "strict": False,
        "figures": True,
        "validity_splits": 100,
    }


def test_final_accuracy_counts_a_margin_equal_to_tau_as_an_exit():
    margin = np.array([0.5, 0.2])
    assert pipeline._final_accuracy(margin, np.array([True, False]), np.array([False, True]), 0.5) == 1.0
    assert pipeline._final_accuracy(margin, np.array([True, False]), np.array([False, True]), 0.6) == 0.5


def test_the_split_is_seeded(tmp_path):
    path = write(tmp_path / "p.jsonl", synthetic_prediction_rows("s", 120, 4, 1.5, seed=2))
    runs = [calibrate_predictions([path], str(tmp_path / f"o{i}"), split=SplitOptions(seed=7),
                                  output=OutputOptions(figures=False)) for i in range(2)]
    assert runs[0]["fit"]["temperature"] == runs[1]["fit"]["temperature"] and runs[0]["seed"] == 7
    other = calibrate_predictions([path], str(tmp_path / "o2"), split=SplitOptions(seed=8),
                                  output=OutputOptions(figures=False))
    assert other["fit"]["temperature"] != runs[0]["fit"]["temperature"]


def test_minimum_samples_and_budget_argument(tmp_path):
    rows = synthetic_prediction_rows("s", 4, 4, 1.5, seed=0)
    out = calibrate_predictions([write(tmp_path / "four.jsonl", rows)], str(tmp_path / "o"),
                                fit=FitOptions(temperature=2.0), output=OutputOptions(figures=False))
    assert out["n_samples"] == 4
    three = write(tmp_path / "three.jsonl", rows[:3])
    with pytest.raises(
        CalibrationInputError, match=r"only 3 usable samples in \['.*three.jsonl'\]; need >= 4"
    ):
        calibrate_predictions([three], str(tmp_path / "o3"), fit=FitOptions(temperature=2.0),
                              output=OutputOptions(figures=False))
    with pytest.raises(CalibrationInputError, match="--mode budget needs --budget"):
        calibrate_predictions([write(tmp_path / "b.jsonl", rows)], str(tmp_path / "o4"),
                              rule=Rule(mode="budget"))


def test_skipped_rows_are_listed_twenty_then_counted(tmp_path, capsys):
    rows = synthetic_prediction_rows("s", 10, 4, 1.5, seed=0) + ["not json\n"] * 21
    out_dir = tmp_path / "o"
    calibrate_predictions([write(tmp_path / "p.jsonl", rows)], str(out_dir), fit=FitOptions(temperature=2.0),
                          output=OutputOptions(figures=False))
    err = capsys.readouterr().err.splitlines()
    listed = [line for line in err if line.startswith("skipped ")]
    assert len(listed) == 20 and listed[0].endswith("p.jsonl:11: not valid JSON (Expecting value)")
    assert "... and 1 more skipped rows (see problems.txt)" in err
    assert len((out_dir / "problems.txt").read_text().splitlines()) == 21


def test_accuracy_mode_reads_stage2_outcomes(tmp_path):
    rows = synthetic_prediction_rows("s", 60, 4, 1.5, seed=4, stage2_accuracy=1.0)  # Stage 2 always right
    out = calibrate_predictions([write(tmp_path / "p.jsonl", rows)], str(tmp_path / "o"),
                                rule=Rule(mode="accuracy"), fit=FitOptions(temperature=2.0),
                                output=OutputOptions(figures=False))
    # with a perfect Stage 2 the best final accuracy is 1; ties go to the most exits, all right at Stage 1
    assert out["select"]["final_accuracy"] == pytest.approx(1.0) and out["tau"] < NO_EXIT_TAU
    assert out["select"]["exit_accuracy"] == 1.0 and out["select"]["n_exits"] > 0
    assert out["select"]["n_with_stage2"] == 60


def test_summary_shows_the_chosen_numbers(tmp_path):
    rows = synthetic_prediction_rows("s", 40, 4, 1.5, seed=0)
    payload = calibrate_predictions([write(tmp_path / "p.jsonl", rows)], str(tmp_path / "o"),
                                    rule=Rule(mode="budget", budget=0.5), fit=FitOptions(temperature=1.25),
                                    output=OutputOptions(figures=False))
    text = (tmp_path / "o" / "summary.md").read_text(encoding="utf-8")
    assert text == render_summary(payload)
    assert f"T = {payload['temperature']:.4g}, tau = {payload['tau']:.6g}" in text
    sel = payload["select"]
    assert f"| {sel['n']} | {sel['exit_rate']:.4g} | {sel['exit_accuracy']:.4g} |" in text
    assert "no exit" in render_summary({**payload, "tau": NO_EXIT_TAU})
    assert pipeline._fmt(None) == pipeline._fmt(float("nan")) == "–"
    assert pipeline._fmt(0.123456) == "0.1235" and pipeline._fmt(3) == "3" and pipeline._fmt(1.0, 2) == "1"


def test_options_reach_the_split_and_the_search_and_the_paper_point_is_recorded(tmp_path):
    rows = synthetic_prediction_rows("s", 80, 4, 1.5, seed=5, stage2_accuracy=0.5)
    path = write(tmp_path / "p.jsonl", rows)
    out = calibrate_predictions([path], str(tmp_path / "a"), rule=Rule(min_exits=7),
                                split=SplitOptions(fit_fraction=0.25), output=OutputOptions(figures=False))
    assert out["fit"]["n"] == 20 and out["select"]["n"] == 60
    # alpha 0.05, delta 0.1 need 45 exits at least: min_exits only counts above that
    assert out["select"]["min_exits"] == 45
    more = calibrate_predictions([path], str(tmp_path / "b"), rule=Rule(min_exits=60),
                                 output=OutputOptions(figures=False))
    assert more["select"]["min_exits"] == 60
    paper = out["paper_point"]
    assert paper["meets_alpha"] is (paper["upper_bound_error"] <= out["alpha"])
    assert 0.0 <= paper["final_accuracy"] <= 1.0 and out["select"]["n_with_stage2"] == 60
    fixed = calibrate_predictions([path], str(tmp_path / "c"), fit=FitOptions(temperature=2.0),
                                  output=OutputOptions(figures=False))["fit"]
    assert set(fixed) == {"temperature", "n", "fixed", "nll_before", "ece_before", "nll_after", "ece_after"}
    assert fixed["nll_before"] != fixed["nll_after"]  # T = 1 before, the fixed T = 2 after
