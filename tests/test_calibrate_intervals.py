"""Binomial intervals against scipy's reference implementation; the temperature fit's paper point and bound flag;
the reasons and messages of invalid logits."""

import math

import numpy as np
import pytest
from cader.calibrate.binomial import clopper_pearson_interval, clopper_pearson_upper, wilson_interval
from cader.calibrate.margin import InvalidLogits, pad_logits, validate_logits
from cader.calibrate.temperature import fit_temperature, gold_nll
from scipy.stats import binomtest

CASES = [(0, 1), (1, 1), (0, 10), (3, 10), (10, 10), (7, 25), (50, 60)]


@pytest.mark.parametrize("confidence", [0.95, 0.8])
def test_intervals_match_scipy(confidence):
    k = np.array([c[0] for c in CASES])
    n = np.array([c[1] for c in CASES])
    for method, ours in (("exact", clopper_pearson_interval), ("wilson", wilson_interval)):
        lo, hi = ours(k, n, confidence)
        for i, (ki, ni) in enumerate(CASES):
            ref = binomtest(int(ki), int(ni)).proportion_ci(confidence_level=confidence, method=method)
            assert lo[i] == pytest.approx(ref.low, abs=1e-9), (method, ki, ni)
            assert hi[i] == pytest.approx(ref.high, abs=1e-9), (method, ki, ni)


def test_intervals_are_nan_without_samples_and_accept_lists():
    for ours in (clopper_pearson_interval, wilson_interval):
        lo, hi = ours([0, 1], [0, 2])
        assert math.isnan(lo[0]) and math.isnan(hi[0]) and 0.0 < lo[1] < 0.5 < hi[1] < 1.0


def test_one_sided_upper_bound():
    # zero errors in n: 1 - delta ** (1 / n)
    assert clopper_pearson_upper(0, 20, 0.1) == pytest.approx(1 - 0.1 ** (1 / 20))
    assert clopper_pearson_upper([0, 5], [0, 5], 0.1).tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="delta must be in"):
        clopper_pearson_upper(0, 10, 1.0)


def test_temperature_fit_reports_the_paper_point_and_the_bound_flag():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(200, 4)) * 3
    gold = np.array([rng.choice(4, p=np.exp(r / 1.5) / np.exp(r / 1.5).sum()) for r in z])
    fit = fit_temperature(z, gold)
    assert fit.temperature == pytest.approx(1.5, rel=0.3) and fit.at_bound is False
    assert fit.nll_paper == pytest.approx(gold_nll(z, gold, 2.0)) and fit.n == 200
    # labels that the logits always get right: the NLL keeps falling as T -> lower bound
    separable = fit_temperature(z, z.argmax(axis=1))
    assert separable.at_bound is True and separable.temperature == pytest.approx(0.05, rel=1e-3)
    # labels always on the least likely option: the NLL falls as T grows, to the upper bound
    worst = fit_temperature(z, z.argmin(axis=1))
    assert worst.at_bound is True and worst.temperature == pytest.approx(50.0, rel=1e-3)
    with pytest.raises(ValueError, match="cannot fit a temperature on zero samples"):
        fit_temperature(np.zeros((0, 4)), [])
    with pytest.raises(ValueError, match="2 logit rows but 1 gold labels"):
        fit_temperature(np.zeros((2, 4)), [0])


@pytest.mark.parametrize(
    "logits, reason, message",
    [
        (["a", "b"], "not_numeric", "logits are not numbers"),
        ([[1.0, 2.0]], "not_a_vector", "logits must be a flat list, got shape (1, 2)"),
        ([1.0], "too_few_options", "need at least 2 option logits, got 1"),
        ([0.0] * 27, "too_many_options", "at most 26 option logits (A..Z), got 27"),
        ([1.0, float("nan"), 2.0, float("inf")], "non_finite", "logits contain NaN/inf at positions [1, 3]"),
    ],
)
def test_invalid_logits_reason_and_message(logits, reason, message):
    with pytest.raises(InvalidLogits) as info:
        validate_logits(logits)
    assert info.value.reason == reason and message in str(info.value)


def test_pad_logits_of_nothing_is_an_empty_table():
    out = pad_logits([])
    assert out.shape == (0, 2)
    with pytest.raises(InvalidLogits, match=r"^row 1: need at least 2"):
        pad_logits([[1.0, 2.0], [1.0]])


def test_one_sided_bound_edges():
    # one exit, no error: 1 - delta; every exit wrong, or no exit: 1
    assert clopper_pearson_upper(0, 1, 0.1) == pytest.approx(0.9)
    assert clopper_pearson_upper([3, 0], [3, 0], 0.1).tolist() == [1.0, 1.0]
    assert clopper_pearson_upper(1, 4, 0.1) < 1.0
    with pytest.raises(ValueError):
        clopper_pearson_upper(0, 10, 0.0)


def test_ece_and_fit_record_every_number_at_its_temperature():
    from cader.calibrate.temperature import ECE_BINS, expected_calibration_error, nll_and_ece

    assert math.isnan(expected_calibration_error(np.zeros(0), np.zeros(0, bool)))
    # one sample at confidence 0.9, right: |1 - 0.9| = 0.1 whatever the bins
    assert expected_calibration_error(np.array([0.9]), np.array([True])) == pytest.approx(0.1)
    # two bins split 0.3 and 0.8: per-bin gaps |0 - .3| and |1 - .8| -> mean .25; one bin would give |.5 - .55|
    conf, right = np.array([0.3, 0.8]), np.array([False, True])
    assert expected_calibration_error(conf, right, 2) == pytest.approx(0.25)
    rng = np.random.default_rng(1)
    z = rng.normal(size=(60, 3)) * 2
    gold = z.argmax(axis=1)
    gold[::4] = 0
    fit = fit_temperature(z, gold, n_bins=5)
    assert (fit.nll_before, fit.ece_before) == pytest.approx(nll_and_ece(z, gold, 1.0, 5))
    assert (fit.nll_after, fit.ece_after) == pytest.approx(nll_and_ece(z, gold, fit.temperature, 5))
    assert (fit.nll_paper, fit.ece_paper) == pytest.approx(nll_and_ece(z, gold, 2.0, 5))
    assert fit.ece_bins == 5 and fit.bounds == (0.05, 50.0) and ECE_BINS == 15
