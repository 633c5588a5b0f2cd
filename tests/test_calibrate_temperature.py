"""Temperature fit: recovers a known temperature; NLL/ECE reporting; bounded search."""

import numpy as np
import pytest
from cader.calibrate.margin import pad_logits
from cader.calibrate.temperature import (
    calibration_bins,
    expected_calibration_error,
    fit_temperature,
    gold_nll,
)
from cader.dev.calibration_rows import synthetic_logits


@pytest.mark.parametrize("true_t, k", [(1.5, 4), (0.7, 5), (3.0, 26)])
def test_recovers_known_temperature(true_t, k):
    rng = np.random.default_rng(7)
    z, gold = synthetic_logits(20_000, k, true_t, rng)
    fit = fit_temperature(z, gold)
    assert fit.temperature == pytest.approx(true_t, rel=0.04)
    assert not fit.at_bound
    assert fit.nll_after <= fit.nll_before + 1e-12
    assert fit.nll_after <= fit.nll_paper + 1e-12
    # the fitted T is the NLL minimum: nudging it either way does not help
    for factor in (0.9, 1.1):
        assert gold_nll(z, gold, fit.temperature * factor) > fit.nll_after
    if abs(true_t - 1.0) > 0.4:  # raw logits miscalibrated -> the fit must improve ECE clearly
        assert fit.ece_after < fit.ece_before


def test_fit_accepts_ragged_option_counts():
    rng = np.random.default_rng(3)
    z4, g4 = synthetic_logits(6000, 4, 1.5, rng)
    z2, g2 = synthetic_logits(6000, 2, 1.5, rng)
    padded = pad_logits(list(z4) + list(z2))
    fit = fit_temperature(padded, np.r_[g4, g2])
    assert fit.temperature == pytest.approx(1.5, rel=0.05)


def test_separable_data_stops_at_the_lower_bound():
    z = np.array([[10.0, 0.0, 0.0]] * 50 + [[0.0, 10.0, 0.0]] * 50)
    gold = np.r_[np.zeros(50, int), np.ones(50, int)]
    fit = fit_temperature(z, gold, bounds=(0.05, 50.0))
    assert fit.at_bound and fit.temperature == pytest.approx(0.05, rel=1e-2)
    assert np.isfinite(fit.nll_after)


def test_fit_rejects_empty_or_mismatched_input():
    with pytest.raises(ValueError):
        fit_temperature(np.zeros((0, 2)), np.zeros(0, int))
    with pytest.raises(ValueError):
        fit_temperature(np.zeros((3, 2)), np.zeros(2, int))


def test_ece_hand_computed():
    # bins of width 1/15: 0.95 -> last bin (acc 0.5, conf 0.95), 0.25 -> bin 3 (acc 0, conf 0.25)
    conf = np.array([0.95, 0.95, 0.25, 0.25])
    correct = np.array([1, 0, 0, 0])
    assert expected_calibration_error(conf, correct) == pytest.approx((2 * 0.45 + 2 * 0.25) / 4)
    assert expected_calibration_error(np.array([0.7] * 10), np.array([1] * 7 + [0] * 3)) == pytest.approx(0.0)
    np.testing.assert_array_equal(calibration_bins(np.array([0.0, 1 / 15, 0.5, 1.0])), [0, 1, 7, 14])


@pytest.mark.slow  # importing torch costs ~8 s on a cold process
def test_ece_agrees_with_torchmetrics():
    torch = pytest.importorskip("torch")
    tm = pytest.importorskip("torchmetrics.functional.classification")
    rng = np.random.default_rng(0)
    z, gold = synthetic_logits(3000, 4, 1.5, rng)
    probs = np.exp(z / 2.0 - np.logaddexp.reduce(z / 2.0, axis=1, keepdims=True))
    probs = np.clip(probs, 1e-9, 1 - 1e-9)  # torchmetrics gives P == 1.0 its own bin; stay off that edge
    ours = expected_calibration_error(probs.max(axis=1), probs.argmax(axis=1) == gold, n_bins=15)
    theirs = tm.multiclass_calibration_error(
        torch.tensor(probs), torch.tensor(gold), num_classes=4, n_bins=15, norm="l1"
    ).item()
    assert ours == pytest.approx(theirs, abs=1e-5)
