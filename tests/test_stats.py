import numpy as np
import pytest
from cader.evaluate.stats import (
    kendall_tau_b_rows,
    mcnemar_exact,
    paired_bootstrap_diff,
    pooled_mcnemar,
    rank_stability,
)
from scipy.stats import binomtest, kendalltau


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
