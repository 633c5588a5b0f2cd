"""The exact per-video mode (calibrate/per_video.py): one random question per video, the refusal under two videos,
the split actually used, and the simulation where the question-level bound breaks and the per-video mode holds.

Simulation: each video draws u ~ N(0, sigma^2) that shifts the log-odds of every one of its questions being right
at the margin Stage 1 gives it (logits from cader.dev.calibration_rows.synthetic_logits, calibrated at T = 1.5, the
temperature held at its true value so the test is about the bound). Each repetition draws 200 videos x 50
questions, selects tau by precision mode (alpha = delta = 0.1) on a fixed fine grid, once counting every question
as an independent trial and once on one random question per video, and measures the exit error at that tau on a
pool of fresh videos (each question's error probability with the video effect integrated out). Measured with this
seed (120 repetitions): question-level violations 0.30 (broken: delta is 0.1), per-video 0.042, exiting in 60 % of
the repetitions (the same simulation with other seeds and a 200,000-question pool: 0.33 / 0.058, 0.21 / 0.033).
"""

import json

import numpy as np
import pytest
from cader.calibrate.margin import margins
from cader.calibrate.options import FitOptions, OutputOptions, Rule
from cader.calibrate.per_video import PerVideoError, check_per_video, one_per_video
from cader.calibrate.pipeline import CalibrationInputError, calibrate_predictions
from cader.calibrate.tau import select_tau_precision
from cader.dev.calibration_rows import synthetic_logits, synthetic_prediction_rows
from scipy.special import expit, logit

TRUE_T, K, ALPHA, DELTA = 1.5, 4, 0.1, 0.1
GRID = np.linspace(0.0, 1.0, 1001)
NODES, WEIGHTS = np.polynomial.hermite_e.hermegauss(40)
WEIGHTS = WEIGHTS / WEIGHTS.sum()


def _p_top(z):
    p = np.exp((z - z.max(axis=1, keepdims=True)) / TRUE_T)
    return np.clip(p.max(axis=1) / p.sum(axis=1), 1e-12, 1 - 1e-12)


def test_one_per_video_draws_one_of_each_video_whatever_the_order():
    codes = np.array([3, 3, 1, 3, 1, 7])
    idx = one_per_video(codes, seed=0)
    assert sorted(codes[idx].tolist()) == [1, 3, 7]
    np.testing.assert_array_equal(idx, one_per_video(codes, seed=0))  # seeded: a rerun certifies the same tau
    drawn = {int(one_per_video(codes, seed=s)[codes[one_per_video(codes, seed=s)] == 3][0]) for s in range(40)}
    assert drawn == {0, 1, 3}  # every question of video 3 can be the one drawn
    assert one_per_video([], seed=0).size == 0


def test_fewer_than_two_videos_or_a_fallen_back_split_is_a_refusal():
    with pytest.raises(PerVideoError, match="refusal, not a certificate"):
        check_per_video(1, "video", temperature_fitted=True)
    with pytest.raises(PerVideoError, match="split was by question"):
        check_per_video(5, "question", temperature_fitted=True)
    check_per_video(5, "question", temperature_fitted=False)  # a fixed T spends no sample on a fit
    check_per_video(2, "video", temperature_fitted=True)


def _rows_on_videos(n_videos, per_video, benchmark="bench", seed=0):
    rows = synthetic_prediction_rows(benchmark, n_videos * per_video, 4, TRUE_T, seed=seed)
    for i, row in enumerate(rows):
        row["video"] = f"videos/{benchmark}_{i // per_video}.mp4"
    return rows


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


def test_one_video_is_refused_rather_than_certified(tmp_path):
    # 200 questions of one video: the old design-effect bound estimated d = 1 here and certified them as 200 trials
    path = _write(tmp_path / "p.jsonl", _rows_on_videos(1, 200))
    for per_video in (False, True):
        with pytest.raises(CalibrationInputError, match="refusal, not a certificate"):
            calibrate_predictions([path], str(tmp_path / f"out{per_video}"),
                                  rule=Rule(alpha=0.1, min_exits=5, per_video=per_video),
                                  fit=FitOptions(temperature=1.5), output=OutputOptions(figures=False))


def test_the_split_recorded_is_the_one_used(tmp_path):
    # two benchmarks of one video each: a split by video falls back to questions, and calibration.json says so
    rows = _rows_on_videos(1, 60, "bench_a") + _rows_on_videos(1, 60, "bench_b", seed=1)
    out = calibrate_predictions([_write(tmp_path / "p.jsonl", rows)], str(tmp_path / "c"),
                                rule=Rule(alpha=0.2, min_exits=5), output=OutputOptions(figures=False))
    assert (out["split_by"], out["split_by_requested"]) == ("question", "video")
    assert json.loads((tmp_path / "c" / "calibration.json").read_text())["split_by"] == "question"
    with pytest.raises(CalibrationInputError, match="split was by question"):
        calibrate_predictions([_write(tmp_path / "p.jsonl", rows)], str(tmp_path / "d"),
                              rule=Rule(per_video=True), output=OutputOptions(figures=False))


def test_per_video_mode_selects_on_one_question_per_selection_video(tmp_path):
    path = _write(tmp_path / "p.jsonl", _rows_on_videos(300, 4))
    out = calibrate_predictions([path], str(tmp_path / "c"), rule=Rule(alpha=0.1, min_exits=20, per_video=True),
                                output=OutputOptions(figures=False))
    assert out["per_video"]["videos"] == out["videos_select"] == out["select"]["n"] == 150
    assert out["per_video"]["questions_in_selection"] == 600 and out["per_video"]["questions_used"] == 150
    assert out["cluster_bound"] is False and "design_effect" not in out["select"]


@pytest.mark.slow
def test_per_video_mode_holds_where_the_question_level_bound_breaks():
    rng = np.random.default_rng(1)
    n_videos, per_video, sigma, reps = 200, 50, 2.0, 120
    pool_z, _ = synthetic_logits(100_000, K, TRUE_T, rng)
    pool_m = margins(pool_z, TRUE_T)
    pool_err = 1.0 - expit(logit(_p_top(pool_z))[:, None] + sigma * NODES[None, :]) @ WEIGHTS
    order = np.argsort(pool_m)
    pool_sorted, err_suffix = pool_m[order], np.cumsum(pool_err[order][::-1])[::-1]

    def fresh_exit_error(tau):
        start = np.searchsorted(pool_sorted, tau)
        return err_suffix[start] / (pool_sorted.size - start) if start < pool_sorted.size else 0.0

    violations, exits = {"question": 0, "per_video": 0}, {"question": 0, "per_video": 0}
    videos = np.repeat(np.arange(n_videos), per_video)
    for rep in range(reps):
        z, _ = synthetic_logits(n_videos * per_video, K, TRUE_T, rng)
        right = rng.random(videos.size) < expit(logit(_p_top(z)) + rng.normal(0.0, sigma, n_videos)[videos])
        m = margins(z, TRUE_T)
        for name, idx in (("question", np.arange(videos.size)), ("per_video", one_per_video(videos, rep))):
            sel = select_tau_precision(m[idx], right[idx], ALPHA, DELTA, min_exits=25, candidates=GRID)
            if not sel.no_exit:
                exits[name] += 1
                violations[name] += fresh_exit_error(sel.tau) > ALPHA
    rate = {k: v / reps for k, v in violations.items()}
    assert rate["question"] > 2 * DELTA, rate  # counting questions as trials breaks the guarantee
    assert rate["per_video"] <= DELTA, rate  # one question per video holds it
    assert exits["per_video"] / reps > 0.3, exits  # while still exiting, not by declining to
