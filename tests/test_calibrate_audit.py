"""The audit on the target (calibrate/audit.py): the exact test of the exit error at tau on a labelled sample, one
question per video, with the number of labels needed stated first."""

import json

import numpy as np
import pytest
from cader.calibrate.audit import (
    audit,
    audit_exit_error,
    audit_power,
    labels_needed,
    main,
    plan_order,
)
from cader.calibrate.binomial import clopper_pearson_upper
from cader.calibrate.ltt import certifiable_errors as critical_errors  # the audit's test is LTT's own
from cader.calibrate.options import OutputOptions, Rule
from cader.calibrate.pipeline import calibrate_predictions
from cader.dev.calibration_rows import synthetic_prediction_rows


def test_critical_errors_by_hand():
    # alpha = delta = 0.1: zero errors pass from n = 22 (0.9^22 = 0.098 <= 0.1 < 0.9^21 = 0.109);
    # one error from n = 38 (0.9^38 + 38 * 0.1 * 0.9^37 = 0.0951) but not at 37 (0.1034)
    assert [critical_errors(n, 0.1, 0.1) for n in (0, 21, 22, 37, 38)] == [-1, -1, 0, 0, 1]


@pytest.mark.parametrize("n", [45, 50, 137, 400])
def test_critical_errors_is_where_the_clopper_pearson_bound_crosses_alpha(n):
    k = critical_errors(n, 0.05, 0.1)
    assert clopper_pearson_upper(k, n, 0.1) <= 0.05 < clopper_pearson_upper(k + 1, n, 0.1)


def test_labels_needed_is_the_first_n_reaching_the_power():
    assert labels_needed(0.1, 0.1, power=0.5, true_error=0.0) == 22  # no error possible: the first testable n
    n = labels_needed(0.1, 0.1, power=0.8, true_error=0.03)
    assert audit_power(n, 0.1, 0.1, 0.03) >= 0.8 > max(audit_power(m, 0.1, 0.1, 0.03) for m in range(1, n))
    # power at n = 38 (one error allowed) when the true exit error is 0.03: P(Bin(38, 0.03) <= 1) = 0.6826
    assert audit_power(38, 0.1, 0.1, 0.03) == pytest.approx(0.97**38 + 38 * 0.03 * 0.97**37, rel=1e-9)
    assert labels_needed(0.05, 0.1, true_error=0.05) is None  # no test shows a rate at alpha itself below alpha
    with pytest.raises(ValueError, match="power"):
        labels_needed(0.05, 0.1, power=1.0)


def test_the_test_counts_errors_and_bounds_them_exactly():
    res = audit_exit_error([True] * 36 + [False] * 2, alpha=0.1, delta=0.1)
    assert (res.n, res.errors) == (38, 2) and res.verdict == "not shown"
    assert res.upper_bound == pytest.approx(float(clopper_pearson_upper(2, 38, 0.1)))
    assert audit_exit_error([True] * 37 + [False], 0.1, 0.1).verdict == "holds"
    assert audit_exit_error([], 0.1, 0.1).verdict == "too few labels"


def test_the_plan_takes_one_exit_per_video_in_random_video_order():
    videos = ["a", "a", "b", "b", "c", "d"]
    exits = np.array([True, True, True, False, False, True])
    plan = plan_order(videos, exits, seed=0)
    assert sorted(videos[i] for i in plan) == ["a", "b", "d"] and all(exits[plan])
    orders = {tuple(videos[i] for i in plan_order(videos, exits, seed=s)) for s in range(30)}
    assert len(orders) > 1  # videos come in a random order: any prefix is a random sample of them


def _rows(path, n_videos, per_video, seed):
    rows = synthetic_prediction_rows("synthetic", n_videos * per_video, 4, 1.5, seed=seed)
    for i, row in enumerate(rows):
        row["video"] = f"videos/{i // per_video}.mp4"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path), rows


def test_a_target_row_with_a_non_finite_margin_or_logit_is_counted_and_named(tmp_path, capsys):
    from cader.calibrate.audit import read_target

    path, rows = _rows(tmp_path / "target.jsonl", 4, 1, seed=1)
    rows[2]["stage1"]["margin"] = float("nan")  # finite logits: the margin would be recomputed, but the row is bad
    rows[3]["stage1"]["logits"][0] = float("inf")
    (tmp_path / "target.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    kept, skipped = read_target([path], 1.5)
    assert [r["sample_id"] for r in kept] == [rows[0]["sample_id"], rows[1]["sample_id"]]
    assert skipped == {"non_finite": 2}
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"{path}:3: ") and "stage1.margin: " in err[0] and rows[2]["sample_id"] in err[0]
    assert err[1].startswith(f"{path}:4: ") and "stage1.logits: " in err[1]


def test_audit_end_to_end_states_the_labels_then_tests(tmp_path, capsys):
    held, _ = _rows(tmp_path / "held.jsonl", 400, 1, seed=0)
    calibrate_predictions([held], str(tmp_path / "cal"), rule=Rule(alpha=0.1, min_exits=20),
                          output=OutputOptions(figures=False))
    target, rows = _rows(tmp_path / "target.jsonl", 150, 3, seed=5)
    for row in rows[::2]:
        row["answer"] = None  # unlabelled
    (tmp_path / "target.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    report = audit(str(tmp_path / "cal" / "calibration.json"), [target], out=str(tmp_path / "audit"), seed=3)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("audit: to show exit error <= 0.1")
    assert f"label {report['labels_needed']} videos" in lines[0]
    plan = [json.loads(x) for x in (tmp_path / "audit" / "audit_plan.jsonl").read_text().splitlines()]
    assert len({p["video"] for p in plan}) == len(plan) == report["videos_with_exits"]
    assert report["n"] == sum(p["labelled"] for p in plan)  # only the drawn question of each video counts
    assert report["verdict"] in ("holds", "not shown") and 0 < report["n"] <= len(plan)
    assert json.loads((tmp_path / "audit" / "audit.json").read_text())["verdict"] == report["verdict"]


def test_labels_from_a_file_and_the_exit_codes(tmp_path, capsys):
    held, _ = _rows(tmp_path / "held.jsonl", 400, 1, seed=0)
    calibrate_predictions([held], str(tmp_path / "cal"), rule=Rule(alpha=0.1, min_exits=20),
                          output=OutputOptions(figures=False))
    target, rows = _rows(tmp_path / "target.jsonl", 120, 2, seed=6)
    cal = str(tmp_path / "cal" / "calibration.json")
    labels = tmp_path / "labels.jsonl"
    # every label says the Stage-1 answer was wrong: the audit must not show the bound
    labels.write_text("".join(json.dumps({"benchmark": r["benchmark"], "sample_id": r["sample_id"],
                                          "answer": "Z"}) + "\n" for r in rows))
    assert main(["--calibration", cal, "--predictions", target, "--labels", str(labels)]) == 1
    assert "not shown" in capsys.readouterr().out
    assert main(["--calibration", cal, "--predictions", target, "--power", "1"]) == 2
    assert capsys.readouterr().err.strip() == "calibrate/audit.py: error: --power must be in (0, 1), got 1.0"
    assert main(["--calibration", str(tmp_path / "none.json"), "--predictions", target]) == 2
