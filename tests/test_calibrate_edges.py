"""Calibration at its edges: reasons a row is skipped, merging files, the split, the tau modes' exact results,
calibration.json's bounds, and the temperature reaching every margin helper."""

import json
import math

import numpy as np
import pytest
from cader.calibrate import margin as mg
from cader.calibrate.binomial import clopper_pearson_upper
from cader.calibrate.calibration_file import (
    CalibrationFileError,
    read_calibration,
    validate_calibration,
)
from cader.calibrate.records import (
    PredictionFileError,
    PredictionRowError,
    Stage1Record,
    read_prediction_file,
    read_predictions,
)
from cader.calibrate.tau import (
    NO_EXIT_TAU,
    PRECISION_GRID,
    TauSelection,
    _precision_grid,
    exit_curve,
    exit_stats,
    final_accuracy_curve,
    select_tau_accuracy,
    select_tau_budget,
    select_tau_precision,
)
from cader.calibrate.temperature import TemperatureFit
from cader.calibrate.videos import split_fit_select_videos
from cader.vlm.files import write_json_atomic


def row(sid, bench="b", answer="A", logits=(2.0, 0.0), letters=("A", "B"), **extra):
    out = {
        "benchmark": bench,
        "sample_id": sid,
        "letters": list(letters),
        "answer": answer,
        "stage1": {"logits": list(logits)},
    }
    out.update(extra)
    return out


def write_rows(path, rows):
    path.write_text(
        "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8"
    )
    return path


# ---- rows that cannot be used: each skipped under its own reason, naming file, line and sample --------------


@pytest.mark.parametrize(
    "bad, reason, message",
    [
        ([1, 2], "not_an_object", "expected a JSON object, got list"),
        (
            {"benchmark": "b", "sample_id": "s", "letters": ["A"]},
            "missing_field",
            "missing field 'answer' (sample b/s)",
        ),
        (
            row("s", stage1={}),
            "missing_logits",
            "no stage1.logits (raw option logits are required for calibration)",
        ),
        (row("s", letters=["A", "A"]), "bad_letters", "letters must be a list of distinct strings"),
        ({**row("s"), "letters": "AB"}, "bad_letters", "letters must be a list of distinct strings"),
        (row("s", letters=["A", 2]), "bad_letters", "letters must be a list of distinct strings"),
        (
            row("s", answer=None),
            "no_answer",
            "answer is null (no gold letter to calibrate against) (sample b/s)",
        ),
        (row("s", answer="C"), "answer_not_in_letters", "answer 'C' is not one of ['A', 'B']"),
        (row("s", logits=(1.0, 2.0, 3.0)), "length_mismatch", "3 logits for 2 letters"),
        ("", "empty_line", "empty line"),
    ],
)
def test_unusable_row_is_counted_under_its_reason(tmp_path, bad, reason, message):
    path = write_rows(tmp_path / "p.jsonl", [row("ok"), bad if bad != "" else " "])
    loaded = read_prediction_file(path)
    assert [r.sample_id for r in loaded.records] == ["ok"] and loaded.rows_read == 2
    assert dict(loaded.skipped) == {reason: 1}
    (problem,) = loaded.problems
    assert (problem.path, problem.line, problem.reason) == (str(path), 2, reason)
    assert message in problem.message and str(problem) == f"{path}:2: {problem.message}"
    with pytest.raises(PredictionRowError) as info:
        read_prediction_file(path, strict=True)
    assert (info.value.line, info.value.reason) == (2, reason) and str(info.value).startswith(f"{path}:2: ")


def test_stage2_outcome_only_for_a_routed_row_and_from_the_rows_pred_when_stage2_has_none(tmp_path):
    rows = [
        row("exit", route="exit", stage2={"pred": "A"}),  # not routed: no Stage-2 outcome
        row("routed", route="stage2", stage2={"pred": None}, pred="B"),  # Stage 2 kept A1 = B
        row("routed_ok", route="stage2", stage2={"pred": "A"}, pred="B"),
        row("partial", route="stage2", stage2=None, pred="A"),
    ]
    loaded = read_prediction_file(write_rows(tmp_path / "p.jsonl", rows))
    assert {r.sample_id: r.stage2_correct for r in loaded.records} == {
        "exit": None,
        "routed": False,
        "routed_ok": True,
        "partial": None,
    }


def test_merging_files_sums_counts_and_keeps_the_first_known_stage2_outcome(tmp_path):
    a = write_rows(
        tmp_path / "a.jsonl",
        [row("1"), row("2", route="stage2", stage2={"pred": "A"}), "not json", row("x", error="e")],
    )
    b = write_rows(
        tmp_path / "b.jsonl",
        [row("1", route="stage2", stage2={"pred": "B"}), row("2", route="stage2", stage2={"pred": "B"}), "{"],
    )
    merged = read_predictions([a, b])
    assert merged.rows_read == 7 and len(merged.records) == 2
    assert dict(merged.skipped) == {"bad_json": 2, "row_error": 1, "duplicate": 2}
    assert [(p.path, p.line) for p in merged.problems] == [(str(a), 3), (str(b), 3)]
    outcomes = {r.sample_id: r.stage2_correct for r in merged.records}
    assert outcomes == {"1": False, "2": True}  # "1" unknown in a, known in b; "2" known in a: a's stays
    with pytest.raises(PredictionRowError):
        read_predictions([a], strict=True)
    with pytest.raises(PredictionFileError, match="no predictions files given"):
        read_predictions([])


def test_file_level_errors_name_the_file(tmp_path):
    with pytest.raises(PredictionFileError, match="no such predictions file"):
        read_prediction_file(tmp_path / "missing.jsonl")
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(PredictionFileError, match="empty predictions file"):
        read_prediction_file(tmp_path / "empty.jsonl")
    path = write_rows(tmp_path / "bad.jsonl", [row("s", answer=None)])
    with pytest.raises(
        PredictionFileError, match=r"no usable row .* among 1 rows .*first problem: .*bad.jsonl:1"
    ):
        read_prediction_file(path)


def test_rows_are_read_as_utf8(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_bytes((json.dumps(row("é-ü"), ensure_ascii=False) + "\n").encode("utf-8"))
    assert read_prediction_file(path).records[0].sample_id == "é-ü"


# ---- the split --------------------------------------------------------------------------------------------------


def split_fit_select(records, seed=0, fit_fraction=0.5):
    """(fit, select) of the product's split (`split_fit_select_videos`)."""
    return split_fit_select_videos(records, seed, fit_fraction)[:2]


def records(keys):
    return [Stage1Record("f", i, b, s, ["A", "B"], np.zeros(2), 0) for i, (b, s) in enumerate(keys)]


def test_split_is_stratified_keyed_and_seeded():
    keys = [("a", str(i)) for i in range(6)] + [("b", str(i)) for i in range(4)] + [("c", "0")]
    recs = records(keys)
    fit, select = split_fit_select(recs)
    assert fit.dtype == np.int64 and select.dtype == np.int64
    assert sorted(fit.tolist() + select.tolist()) == list(range(11))
    per_bench = {b: sum(recs[i].benchmark == b for i in fit) for b in "abc"}
    assert per_bench == {"a": 3, "b": 2, "c": 0}  # floor(n / 2) of each benchmark; a lone sample is selected
    assert [x.tolist() for x in split_fit_select(recs, seed=0)] == [fit.tolist(), select.tolist()]
    # the split follows the keys, not the order of the input
    shuffled = [recs[i] for i in np.random.default_rng(3).permutation(len(recs))]
    fit2, _ = split_fit_select(shuffled)
    assert sorted(shuffled[i].key for i in fit2) == sorted(recs[i].key for i in fit)
    # another seed, another split (of the same sizes)
    other, _ = split_fit_select(recs, seed=1)
    assert len(other) == len(fit) and sorted(recs[i].key for i in other) != sorted(recs[i].key for i in fit)
    assert len(split_fit_select(recs, fit_fraction=0.99)[0]) == 5 + 3


@pytest.mark.parametrize("fraction", [0.0, 1.0, 1.5, -0.1])
def test_split_fraction_must_be_inside_zero_one(fraction):
    with pytest.raises(ValueError, match="fit_fraction must be in"):
        split_fit_select(records([("a", "1")]), fit_fraction=fraction)


# ---- tau ----------------------------------------------------------------------------------------------------


def test_exit_curve_counts_errors_from_integer_flags_and_on_empty_input():
    curve = exit_curve([0.9, 0.5, 0.9, 0.1], [1, 0, 0, 1])  # 0/1 ints, as a JSON reader may hand them
    assert curve.thresholds.tolist() == [0.9, 0.5, 0.1] and curve.n_exits.tolist() == [2, 3, 4]
    assert curve.n_errors.tolist() == [1, 2, 2] and curve.n_total == 4
    assert curve.exit_rate.tolist() == [0.5, 0.75, 1.0]
    empty = exit_curve([], [])
    assert empty.thresholds.size == 0 and empty.n_errors.size == 0 and empty.n_total == 0
    assert empty.exit_rate.size == 0
    stats = exit_stats([], [], 0.5, 0.1)
    assert (stats.n, stats.n_exits, stats.exit_rate, stats.exit_accuracy) == (0, 0, 0.0, None)
    stats = exit_stats([0.9, 0.2], [1, 0], 0.5, 0.1)
    assert (stats.n_exits, stats.exit_rate, stats.exit_accuracy) == (1, 0.5, 1.0)


def test_precision_grid_is_fixed_before_data():
    near_one = [1.0 - 10.0 ** (-k / 8.0) for k in range(4, 65)]
    expected = sorted({*(i * 0.05 for i in range(14)), *near_one, 0.9, 0.97, 0.99, 0.995}, reverse=True)
    assert PRECISION_GRID.size == len(expected)
    np.testing.assert_allclose(PRECISION_GRID, expected, rtol=1e-15, atol=0)
    assert PRECISION_GRID[0] == pytest.approx(1 - 1e-8, abs=1e-15) and PRECISION_GRID[-1] == 0.0
    assert {0.9, 0.97, 0.99, 0.995} <= set(PRECISION_GRID.tolist())
    np.testing.assert_array_equal(_precision_grid(), PRECISION_GRID)  # built the same way every time


def test_budget_mode_exactly():
    margins = [0.1, 0.5, 0.9, 0.95]
    assert select_tau_budget(margins, 0.25) == TauSelection(
        0.5, "budget", False, {"budget": 0.25, "allowed_stage2": 1}
    )
    assert select_tau_budget(margins, 1.0) == TauSelection(
        NO_EXIT_TAU, "budget", True, {"budget": 1.0, "allowed_stage2": 4}
    )
    assert select_tau_budget(margins, 0.0).tau == 0.1
    with pytest.raises(ValueError, match=r"must be in \[0, 1\]"):
        select_tau_budget(margins, 1.5)


def test_accuracy_mode_exactly():
    # exit the two confident samples (right at Stage 1); the two others are right only at Stage 2
    margin, s1, s2 = [0.9, 0.8, 0.3, 0.2], [1, 1, 0, 0], [0, 0, 1, 1]
    taus, acc, rate = final_accuracy_curve(margin, s1, s2)
    assert taus.tolist() == [NO_EXIT_TAU, 0.9, 0.8, 0.3, 0.2]
    assert acc.tolist() == [0.5, 0.75, 1.0, 0.75, 0.5] and rate.tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
    chosen = select_tau_accuracy(margin, s1, s2)
    assert chosen == TauSelection(
        0.8,
        "accuracy",
        False,
        {"expected_final_accuracy": 1.0, "stage1_only_accuracy": 0.5, "stage2_everywhere_accuracy": 0.5},
    )
    # Stage 2 right everywhere, Stage 1 never: nobody exits
    assert select_tau_accuracy([0.9], [0], [1]) == TauSelection(
        NO_EXIT_TAU,
        "accuracy",
        True,
        {"expected_final_accuracy": 1.0, "stage1_only_accuracy": 0.0, "stage2_everywhere_accuracy": 1.0},
    )
    with pytest.raises(ValueError, match="accuracy mode needs at least one sample with a Stage-2 outcome"):
        select_tau_accuracy([], [], [])


# ---- calibration.json -----------------------------------------------------------------------------------------


def payload(**changes):
    base = {
        "temperature": 2.0,
        "tau": 0.97,
        "mode": "precision",
        "alpha": 0.05,
        "delta": 0.1,
        "fit": {},
        "select": {},
        "sources": [],
        "seed": 0,
    }
    return {**base, **changes}


@pytest.mark.parametrize("ok", [{"temperature": 0.5}, {"temperature": 1}, {"tau": 0.0}, {"tau": NO_EXIT_TAU}])
def test_calibration_accepts_its_bounds(ok):
    assert validate_calibration(payload(**ok)) == payload(**ok)


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"temperature": 0.0}, "temperature must be a finite number > 0, got 0.0"),
        ({"temperature": float("nan")}, "temperature must be a finite number > 0"),
        ({"temperature": True}, "temperature must be a finite number > 0"),
        ({"tau": -0.01}, "tau must be a number in [0, 1]"),
        ({"tau": 1.01}, "tau must be a number in [0, 1]"),
        ({"tau": "0.9"}, "tau must be a number in [0, 1]"),
        ({"mode": "fast"}, "mode must be one of"),
        ({"fit": []}, "'fit' must be an object"),
        ({"sources": "a.jsonl"}, "'sources' must be a list of paths"),
    ],
)
def test_calibration_rejects_with_the_file_named(bad, message):
    with pytest.raises(CalibrationFileError) as info:
        validate_calibration(payload(**bad), "runs/x/calibration.json")
    assert str(info.value).startswith("runs/x/calibration.json: ") and message in str(info.value)


def test_calibration_names_the_default_file_and_non_objects():
    with pytest.raises(CalibrationFileError, match=r"^calibration.json: expected a JSON object, got list$"):
        validate_calibration([])
    with pytest.raises(CalibrationFileError, match=r"^calibration.json: missing keys \['seed'\]$"):
        validate_calibration({k: v for k, v in payload().items() if k != "seed"})


def test_write_json_atomic_into_new_folders_with_nan_as_null(tmp_path):
    target = tmp_path / "a" / "b" / "calibration.json"
    write_json_atomic(target, payload(fit={"nll": float("nan"), "name": "é"}))
    text = target.read_text(encoding="utf-8")
    assert text.startswith('{\n  "temperature": 2.0,') and text.endswith("}\n") and '"nll": null' in text
    assert read_calibration(target)["fit"] == {"nll": None, "name": "é"}
    assert [p.name for p in target.parent.iterdir()] == ["calibration.json"]  # no temporary file left behind


def test_temperature_fit_record_lists_its_bounds():
    fit = TemperatureFit(1.5, 10, 1.0, 0.9, 0.2, 0.1, 0.95, 0.15, False, bounds=(0.05, 50.0))
    d = fit.as_dict()
    assert d["bounds"] == [0.05, 50.0] and d["temperature"] == 1.5 and d["at_bound"] is False


# ---- the temperature reaches every margin helper -----------------------------------------------------------------


def test_every_margin_helper_uses_the_given_temperature():
    z = [2.0, 0.0, 0.0]
    p1 = np.exp(z) / np.exp(z).sum()  # T = 1
    m1 = p1[0] - p1[1]
    assert mg.stage1_confidence(z, 1.0).margin == pytest.approx(m1)
    assert mg.stage1_confidence(z, 1.0).one_minus_margin == pytest.approx(1 - m1)
    assert mg.margin(z, 1.0) == pytest.approx(m1)
    assert mg.margins([z], 1.0)[0] == pytest.approx(m1)
    assert mg.margins_and_complements([z], 1.0)[1][0] == pytest.approx(1 - m1)
    assert mg.top1_probs([z], 1.0)[0] == pytest.approx(p1[0]) and mg.stage1_confidence(z, 1.0).probs == pytest.approx(p1)
    assert math.isclose(mg.margin(z), mg.margin(z, 2.0))  # the paper's T by default


# ---- precision mode, step by step --------------------------------------------------------------------------------

# 10 samples; exits at each candidate: 0.9 -> 3 (0 wrong), 0.7 -> 5 (0), 0.5 -> 7 (1), 0.25 -> 8 (2), 0.05 -> 10 (3)
P_MARGIN = np.array([0.95, 0.92, 0.91, 0.85, 0.8, 0.6, 0.55, 0.3, 0.2, 0.1])
P_CORRECT = np.array([1, 1, 1, 1, 1, 0, 1, 0, 0, 1], bool)
P_CANDIDATES = [0.9, 0.7, 0.5, 0.25, 0.05]


def precision(**kw):
    args = {"alpha": 0.3, "delta": 0.5, "min_exits": 3, "candidates": P_CANDIDATES, **kw}
    return select_tau_precision(P_MARGIN, P_CORRECT, **args)


def test_precision_mode_stops_at_the_first_failure_and_keeps_the_one_before():
    assert precision() == TauSelection(
        0.5, "precision", False, {"min_exits": 3, "candidates": 5, "tested": 4, "stopped_at": 0.25}
    )
    # a threshold with exactly min_exits exits is tested (0.9 has 3): start there, not at 0.7
    assert precision(min_exits=4).details == {
        "min_exits": 4,
        "candidates": 5,
        "tested": 3,
        "stopped_at": 0.25,
    }
    # every tested threshold passes: the last candidate, nothing stopped the sequence
    assert precision(alpha=0.4) == TauSelection(
        0.05, "precision", False, {"min_exits": 3, "candidates": 5, "tested": 5, "stopped_at": None}
    )


def test_precision_mode_passes_a_bound_equal_to_alpha():
    alpha = float(clopper_pearson_upper(0, 3, 0.5))  # the bound at 0.9 (3 exits, no error), exactly
    assert precision(alpha=alpha, candidates=[0.9, 0.5]) == TauSelection(
        0.9, "precision", False, {"min_exits": 3, "candidates": 2, "tested": 2, "stopped_at": 0.5}
    )


def test_precision_mode_without_an_exit():
    first_fails = select_tau_precision(
        P_MARGIN, ~P_CORRECT, alpha=0.2, delta=0.5, min_exits=3, candidates=P_CANDIDATES
    )
    assert first_fails == TauSelection(
        NO_EXIT_TAU,
        "precision",
        True,
        {
            "min_exits": 4,
            "candidates": 5,
            "tested": 1,
            "stopped_at": 0.7,
            "reason": "the first testable exit set (tau=0.7: 5 exits, 5 errors) already has upper bound 1.000 "
            "> alpha=0.2",
        },
    )
    assert precision(min_exits=30) == TauSelection(
        NO_EXIT_TAU,
        "precision",
        True,
        {
            "min_exits": 30,
            "candidates": 5,
            "tested": 0,
            "stopped_at": None,
            "reason": "no candidate threshold has 30 or more exits in the selection split",
        },
    )


@pytest.mark.parametrize(
    "alpha, delta", [(1.0, 0.1), (1.5, 0.1), (0.0, 0.1), (0.05, 0.0), (0.05, 1.0), (0.05, 2.0)]
)
def test_precision_mode_needs_alpha_and_delta_inside_zero_one(alpha, delta):
    with pytest.raises(ValueError, match="alpha and delta must be in"):
        select_tau_precision(P_MARGIN, P_CORRECT, alpha=alpha, delta=delta)


def test_precision_mode_defaults():
    import inspect

    params = inspect.signature(select_tau_precision).parameters
    assert (params["alpha"].default, params["delta"].default, params["min_exits"].default) == (0.05, 0.1, 50)
