import numpy as np
import pytest
from cader.evaluate.stats import (
    accuracy_summary,
    bootstrap_means,
    clustered_stderr,
    kendall_tau_b_rows,
    mcnemar_exact,
    naive_stderr,
    paired_bootstrap_diff,
    pooled_mcnemar,
    rank_stability,
)
from scipy.stats import beta, binomtest, kendalltau


def test_identical_systems_difference_zero_and_ci_contains_zero():
    a = np.array([1, 0, 1, 1, 0, 0, 1, 0] * 10)
    result = paired_bootstrap_diff(a, a.copy(), seed=3)
    assert result["diff"] == 0.0 and result["low"] == 0.0 and result["high"] == 0.0
    assert result["n_resamples"] == 10_000 and result["n"] == 80


def test_clearly_better_system_ci_excludes_zero():
    rng = np.random.default_rng(0)
    b = (rng.random(100) < 0.3).astype(float)
    a = np.maximum(b, (rng.random(100) < 0.5).astype(float))  # a is right wherever b is, and more
    result = paired_bootstrap_diff(a, b, seed=0)
    assert result["low"] > 0 and result["high"] > result["diff"] > result["low"]
    assert result["diff"] == pytest.approx(a.mean() - b.mean())


def test_bootstrap_quantiles_match_the_exact_distribution_of_a_tiny_case():
    # Two questions, differences (1, 0): a resample's mean is 0, 0.5, 1 with probability 1/4, 1/2, 1/4,
    # so the middle 95% spans [0, 1] and P(diff <= 0) = 1/4.
    result = paired_bootstrap_diff([1, 0], [0, 0], n_resamples=20_000, seed=1)
    assert (result["low"], result["high"]) == (0.0, 1.0)
    assert result["p_le_zero"] == pytest.approx(0.25, abs=0.015)


def test_bootstrap_is_seeded_and_checks_shapes():
    a, b = np.arange(30) % 3 == 0, np.arange(30) % 2 == 0
    assert paired_bootstrap_diff(a, b, seed=5) == paired_bootstrap_diff(a, b, seed=5)
    assert paired_bootstrap_diff(a, b, seed=5)["p_le_zero"] != paired_bootstrap_diff(a, b, seed=6)["p_le_zero"]
    with pytest.raises(ValueError):
        paired_bootstrap_diff([1, 0], [1, 0, 1])


def test_mcnemar_exact_hand_computed():
    # 8 questions only A gets right, 2 only B, 5 both, 5 neither.
    a = [1] * 8 + [0] * 2 + [1] * 5 + [0] * 5
    b = [0] * 8 + [1] * 2 + [1] * 5 + [0] * 5
    result = mcnemar_exact(a, b)
    # two-sided exact p = 2 * P(X <= 2 | n=10, p=1/2) = 2 * (1 + 10 + 45) / 1024
    assert (result["only_a"], result["only_b"], result["discordant"]) == (8, 2, 10)
    assert result["p_value"] == pytest.approx(112 / 1024)
    assert result["p_value"] == pytest.approx(binomtest(8, 10, 0.5).pvalue)


def test_mcnemar_without_discordant_pairs_is_one_and_pooling_sums_counts():
    assert mcnemar_exact([1, 0, 1], [1, 0, 1])["p_value"] == 1.0
    pooled = pooled_mcnemar([([1, 1, 0], [0, 1, 0]), ([1, 0], [0, 1])])
    assert (pooled["only_a"], pooled["only_b"]) == (2, 1)
    assert pooled["p_value"] == pytest.approx(binomtest(2, 3, 0.5).pvalue)


def test_rank_stability_dominant_system_and_tau_against_scipy():
    rng = np.random.default_rng(0)
    base = (rng.random((3, 60)) < [[0.2], [0.45], [0.5]]).astype(float)
    best = np.ones(60)
    scores = np.vstack([base, best])
    result = rank_stability(scores, ["a", "b", "c", "best"], n_resamples=2000, seed=0)
    best_info = result["systems"]["best"]
    assert best_info["rank"] == 1 and best_info["rank_interval"] == [1, 1] and best_info["p_rank1"] == 1.0
    assert best_info["p_top3"] == 1.0 and 0 < result["kendall_tau_b"] <= 1
    probs = [result["systems"][n]["p_rank1"] for n in ("a", "b", "c")]
    assert probs == [0.0, 0.0, 0.0]
    x = np.array([1, 2, 2, 4])
    ys = rng.integers(1, 4, size=(25, 4))
    expected = [kendalltau(x, y).statistic for y in ys]
    assert np.allclose(kendall_tau_b_rows(x, ys), expected, equal_nan=True)


# ---- clustered by video --------------------------------------------------------------------------------------


def test_singleton_clusters_draw_exactly_the_question_bootstrap():
    a, b = (np.arange(30) % 3 == 0).astype(float), (np.arange(30) % 2 == 0).astype(float)
    by_question = paired_bootstrap_diff(a, b, seed=5)
    by_cluster = paired_bootstrap_diff(a, b, seed=5, clusters=np.arange(30))
    assert by_cluster["resampled"] == "clusters" and by_question["resampled"] == "questions"
    assert {k: v for k, v in by_cluster.items() if k != "resampled"} == {
        k: v for k, v in by_question.items() if k != "resampled"
    }


def test_copies_of_a_question_on_one_video_do_not_narrow_the_video_bootstrap():
    # Every question asked four times about its own video: resampling videos sees 30 independent units, the same
    # as the original 30 questions, while resampling questions believes it has 120 and narrows the interval.
    rng = np.random.default_rng(1)
    a, b = (rng.random(30) < 0.6).astype(float), (rng.random(30) < 0.4).astype(float)
    once = paired_bootstrap_diff(a, b, seed=2)
    videos = np.repeat(np.arange(30), 4)
    clustered = paired_bootstrap_diff(np.repeat(a, 4), np.repeat(b, 4), seed=2, clusters=videos)
    naive = paired_bootstrap_diff(np.repeat(a, 4), np.repeat(b, 4), seed=2)
    assert (clustered["low"], clustered["high"]) == pytest.approx((once["low"], once["high"]))
    assert clustered["n"] == 120 and clustered["n_clusters"] == 30
    assert naive["high"] - naive["low"] < 0.6 * (clustered["high"] - clustered["low"])


def test_cluster_resample_mean_weights_videos_by_their_question_count():
    # Two videos: one with three right answers, one with one wrong. Drawing video 1 twice gives 1.0, video 2 twice
    # 0.0, one of each (probability 1/2) gives 3/4 (pooled questions), not 1/2 (mean of video means).
    means = bootstrap_means(np.array([1, 1, 1, 0.0]), n_resamples=4000, seed=0, clusters=["v1", "v1", "v1", "v2"])
    assert set(np.round(means, 6)) == {0.0, 0.75, 1.0}
    assert np.mean(means == 0.75) == pytest.approx(0.5, abs=0.03)


def test_clustered_stderr_hand_computed_and_lmms_eval_edge_cases():
    # mean 0.5, s^2 = 1/3, so s^2/n = 1/12; each video's deviations (+.5, +.5) and (-.5, -.5) add
    # (sum)^2 - sum of squares = 1 - 0.5 = 0.5, twice, over n^2 = 16: SE^2 = 1/12 + 1/16 = 7/48.
    assert clustered_stderr([1, 1, 0, 0], ["a", "a", "b", "b"]) == pytest.approx(np.sqrt(7 / 48))
    # answers that disagree within a video pull the other way: SE^2 = 1/12 - 1/16
    assert clustered_stderr([1, 0, 1, 0], ["a", "a", "b", "b"]) == pytest.approx(np.sqrt(1 / 12 - 1 / 16))
    x = [1, 0, 1, 1, 0]
    assert clustered_stderr(x, range(5)) == pytest.approx(naive_stderr(x)) == pytest.approx(
        np.std(x, ddof=1) / np.sqrt(5)
    )
    assert np.isnan(clustered_stderr([1], ["a"]))
    with pytest.raises(ValueError, match="one cluster label per question"):
        clustered_stderr([1, 0], ["a"])


def test_accuracy_summary_exact_interval_and_counts():
    summary = accuracy_summary([1, 1, 0, 0, 1], ["a", "a", "b", "b", "c"], n_resamples=2000)
    assert (summary["k"], summary["n"], summary["n_clusters"]) == (3, 5, 3)
    lo, hi = summary["ci_exact"]
    # Clopper-Pearson: the 2.5% / 97.5% quantiles of Beta(3, 3) and Beta(4, 2)
    assert (lo, hi) == pytest.approx((beta.ppf(0.025, 3, 3), beta.ppf(0.975, 4, 2)))
    assert summary["stderr_clustered"] > summary["stderr"]
    assert summary["ci_cluster_bootstrap"][0] <= 0.6 <= summary["ci_cluster_bootstrap"][1]
    empty = accuracy_summary([], [])
    assert empty["accuracy"] is None and empty["n_clusters"] == 0


def test_rank_stability_over_videos_sees_copies_of_a_question_as_one():
    rng = np.random.default_rng(4)
    scores = (rng.random((3, 25)) < [[0.5], [0.6], [0.45]]).astype(float)
    once = rank_stability(scores, ["a", "b", "c"], n_resamples=2000, seed=1)
    videos = np.repeat(np.arange(25), 4)
    copies = np.repeat(scores, 4, axis=1)
    by_video = rank_stability(copies, ["a", "b", "c"], n_resamples=2000, seed=1, clusters=videos)
    by_question = rank_stability(copies, ["a", "b", "c"], n_resamples=2000, seed=1)
    assert by_video["resampled"] == "clusters" and by_video["systems"] == once["systems"]
    assert by_question["systems"]["b"]["p_rank1"] > by_video["systems"]["b"]["p_rank1"]
