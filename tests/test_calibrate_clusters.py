"""The design effect of a 0/1 rate over videos (calibrate/clusters.py) and the bounds on effective counts that
precision mode, Learn-then-Test and calibration.json use with it."""

import json

import numpy as np
import pytest
from cader.calibrate.binomial import clopper_pearson_upper
from cader.calibrate.clusters import (
    design_effect,
    design_effect_from_counts,
    design_effects_at,
    design_effects_of_rates,
    effective_counts,
    intraclass_correlation,
)
from cader.calibrate.ltt import binomial_tail_pvalue, select_tau_ltt
from cader.calibrate.options import OutputOptions, Rule, SplitOptions
from cader.calibrate.pipeline import calibrate_predictions
from cader.calibrate.tau import exit_stats, select_tau_precision
from cader.contracts.records import CalibrationFile
from cader.dev.calibration_rows import synthetic_prediction_rows
from cader.evaluate.stats import clustered_stderr, naive_stderr

# two videos of three questions; errors 1, 1, 0 on the first and none on the second
TWO_BY_THREE = ([1, 1, 0, 0, 0, 0], ["a", "a", "a", "b", "b", "b"])


def test_design_effect_by_hand():
    # mean 1/3; deviations 2/3, 2/3, -1/3 | -1/3 x 3: cluster sums 1 and -1, squared deviations 4/3,
    # within-cluster cross terms 2 - 4/3 = 2/3, s^2 = (4/3) / 5; d = 1 + (2/3) / (6 * 4/15) = 17/12
    assert design_effect(*TWO_BY_THREE) == pytest.approx(17 / 12)
    assert design_effect_from_counts([3, 3], [2, 0]) == pytest.approx(17 / 12)
    # one question per video: no cross term, d = 1
    assert design_effect([1, 0, 1, 0, 0], list("abcde")) == 1.0
    # errors spread one per video (negative within-video covariance) are not credited: d stays 1
    assert design_effect_from_counts([2, 2, 2], [1, 1, 1]) == 1.0
    # no spread at all: nothing to inflate
    assert design_effect_from_counts([3, 3], [0, 0]) == 1.0 and design_effect_from_counts([3, 3], [3, 3]) == 1.0
    with pytest.raises(ValueError, match="count of ones"):
        design_effect_from_counts([2], [3])


def test_design_effect_is_the_clustered_over_the_naive_variance_of_evaluate_stats():
    rng = np.random.default_rng(0)
    videos = np.repeat(np.arange(12), 8)
    x = (rng.random(videos.size) < np.repeat(rng.uniform(0.05, 0.6, 12), 8)).astype(float)
    expected = (clustered_stderr(x, videos) / naive_stderr(x)) ** 2
    assert expected > 1.0
    assert design_effect(x, videos) == pytest.approx(expected, rel=1e-12)


def test_the_exit_sets_design_effect_is_floored_by_the_intraclass_correlation():
    # over all six: d_all = 17/12, m_all = (9 + 9) / 6 = 3, rho = (5/12) / 2 = 5/24
    errors, videos = TWO_BY_THREE
    assert intraclass_correlation([3, 3], [2, 0]) == pytest.approx(5 / 24)
    assert intraclass_correlation([1, 1, 1], [1, 0, 0]) == 0.0
    correct = ~np.asarray(errors, bool)
    margin = np.array([0.1, 0.1, 0.95, 0.95, 0.95, 0.2])
    # tau 0.9: the right answer of video a and two of video b exit, no error (direct d = 1); m = (1 + 4) / 3,
    # floor 1 + (2/3) * 5/24 = 41/36. tau 0: everyone, direct 17/12 = floor. tau 0.99: nobody exits.
    got = design_effects_at(margin, correct, videos, [0.0, 0.9, 0.99])
    np.testing.assert_allclose(got, [17 / 12, 41 / 36, 1.0])
    # the accuracy-loss form: every sample counted in each row, floored by the pooled indicator's correlation
    rows = np.array([[0, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0]], bool)
    np.testing.assert_allclose(design_effects_of_rates(rows, videos), [1.0, 17 / 12])
    np.testing.assert_allclose(design_effects_of_rates(rows, videos, pooled=errors), [17 / 12, 17 / 12])


def test_bounds_on_fractional_effective_counts():
    k_eff, n_eff = effective_counts(4, 100, 2.0)
    assert (k_eff, n_eff) == (2.0, 50.0)
    assert clopper_pearson_upper(k_eff, n_eff, 0.1) == pytest.approx(float(clopper_pearson_upper(2, 50, 0.1)))
    between = float(clopper_pearson_upper(1.5, 40.0, 0.1))
    assert clopper_pearson_upper(1, 40, 0.1) < between < clopper_pearson_upper(2, 40, 0.1)
    # LTT's p-value in Beta form: at level = the Clopper-Pearson bound the tail is exactly delta
    ub = float(clopper_pearson_upper(1.5, 40.3, 0.1))
    assert binomial_tail_pvalue([1.5], [40.3], ub)[0] == pytest.approx(0.1)
    assert binomial_tail_pvalue([40.3], [40.3], 0.2)[0] == 1.0
    np.testing.assert_allclose(binomial_tail_pvalue([2.0], [50.0], 0.1), binomial_tail_pvalue([2], [50], 0.1))


def _one_threshold(concentrated: bool):
    """300 questions on 10 videos, all at margin 0.9, 6 wrong: on one video, or one on each of 6."""
    videos = np.repeat(np.arange(10), 30)
    correct = np.ones(300, bool)
    correct[np.arange(6) if concentrated else np.arange(6) * 30] = False
    return np.full(300, 0.9), correct, videos


def test_precision_mode_counts_videos_when_errors_share_one():
    kw = {"alpha": 0.05, "delta": 0.1, "min_exits": 50, "candidates": [0.5]}
    margin, correct, videos = _one_threshold(concentrated=True)
    # n = 300, E = 6 on one video: sum (e_c - n_c p)^2 = 5.4^2 + 9 * 0.6^2 = 32.4, cross 32.4 - 5.88 = 26.52,
    # d = 1 + 26.52 * 299 / (300 * 5.88) = 5.4952...
    d = 1 + 26.52 * 299 / (300 * 5.88)
    assert float(clopper_pearson_upper(6, 300, 0.1)) < 0.05 < float(clopper_pearson_upper(6 / d, 300 / d, 0.1))
    assert not select_tau_precision(margin, correct, **kw).no_exit  # counting questions: certified
    clustered = select_tau_precision(margin, correct, clusters=videos, **kw)
    assert clustered.no_exit and "design effect 5.5" in clustered.details["reason"]
    stats = exit_stats(margin, correct, 0.5, 0.1, clusters=videos)
    assert stats.design_effect == pytest.approx(d) and stats.n_exits_effective == pytest.approx(300 / d)
    assert stats.upper_bound_error == pytest.approx(float(clopper_pearson_upper(6 / d, 300 / d, 0.1)))
    assert stats.upper_bound_error_naive == pytest.approx(float(clopper_pearson_upper(6, 300, 0.1)))
    assert "design_effect" not in exit_stats(margin, correct, 0.5, 0.1).as_dict()
    # the same six errors on six videos: d = 1, certified either way, and the selection says so
    margin, correct, videos = _one_threshold(concentrated=False)
    spread = select_tau_precision(margin, correct, clusters=videos, **kw)
    assert not spread.no_exit and spread.details["design_effect"] == 1.0 and spread.details["cluster_bound"]


def test_learn_then_test_counts_videos_too():
    margin, correct, videos = _one_threshold(concentrated=True)
    kw = {"delta": 0.1, "alpha": 0.05, "min_exits": 50, "candidates": [0.5]}
    assert not select_tau_ltt(margin, correct, **kw).no_exit
    joint = select_tau_ltt(margin, correct, clusters=videos, **kw)
    assert joint.no_exit and "design effect 5.5" in joint.details["reason"]
    # cascade: the accuracy loss over every sample, with its own design effect recorded at the chosen tau
    margin, correct, videos = _one_threshold(concentrated=False)
    s2 = np.ones(300, bool)
    cascade = select_tau_ltt(margin, correct, 0.1, epsilon=0.05, s2_correct=s2, candidates=[0.5], clusters=videos,
                             mode="cascade")
    (constraint,) = cascade.details["constraints"]
    assert not cascade.no_exit and constraint["design_effect"] == 1.0


def _rows_on_videos(n_videos, per_video, seed=0):
    rows = synthetic_prediction_rows("bench", n_videos * per_video, seed=seed)
    for i, row in enumerate(rows):
        row["video"] = f"videos/{i // per_video}.mp4"
    rows[0].pop("video")  # a row without a video: its own
    return rows


def test_calibration_json_records_the_split_and_the_cluster_bound(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows_on_videos(60, 10)), encoding="utf-8")
    out = calibrate_predictions([str(path)], str(tmp_path / "video"), rule=Rule(alpha=0.2),
                                output=OutputOptions(figures=False))
    assert (out["split_by"], out["cluster_bound"], out["rows_without_video"]) == ("video", True, 1)
    # 61 videos (the lone row is one): floor(61 / 2) fit T, the rest select tau, none on both sides
    assert (out["videos_fit"], out["videos_select"], out["videos_in_both"]) == (30, 31, 0)
    sel = out["select"]
    assert not sel["no_exit"] and sel["cluster_bound"] and sel["design_effect"] >= 1.0
    assert sel["n_exits_effective"] == pytest.approx(sel["n_exits"] / sel["design_effect"])
    assert sel["upper_bound_error"] >= sel["upper_bound_error_naive"]
    saved = json.loads((tmp_path / "video" / "calibration.json").read_text())
    CalibrationFile.model_validate(saved)
    assert saved["select"]["design_effect"] == sel["design_effect"]
    assert "Fit/select split by video: 30 videos" in (tmp_path / "video" / "summary.md").read_text()
    naive = calibrate_predictions([str(path)], str(tmp_path / "question"), rule=Rule(alpha=0.2, cluster_bound=False),
                                  split=SplitOptions(split_by="question"), output=OutputOptions(figures=False))
    assert naive["split_by"] == "question" and naive["videos_in_both"] > 0
    assert "design_effect" not in naive["select"] and "cluster_bound" not in naive["select"]
