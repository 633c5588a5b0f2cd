"""Hand-computed checks of the confidence definition (paper Eq. 2-3)."""

import math

import numpy as np
import pytest
from cader.calibrate.margin import (
    PAPER_TAU,
    PAPER_TEMPERATURE,
    InvalidLogits,
    exits_early,
    margin,
    margins,
    margins_and_complements,
    pad_logits,
    stage1_confidence,
    top1_indices,
    top1_probs,
)


def one_minus_margin(z, temperature=PAPER_TEMPERATURE):
    return stage1_confidence(z, temperature).one_minus_margin


def option_probs(z, temperature=PAPER_TEMPERATURE):
    return stage1_confidence(z, temperature).probs


def top1_index(z):
    return stage1_confidence(z).index


def test_paper_defaults():
    assert PAPER_TEMPERATURE == 2.0 and PAPER_TAU == 0.97


def test_two_options_is_tanh_of_half_gap():
    # z = [2, 0], T = 2: P = softmax([1, 0]); M = (e - 1) / (e + 1) = tanh(1/2)
    assert margin([2.0, 0.0], 2.0) == pytest.approx(math.tanh(0.5), rel=1e-14)
    assert one_minus_margin([2.0, 0.0], 2.0) == pytest.approx(2 / (math.e + 1), rel=1e-14)
    assert top1_index([2.0, 0.0]) == 0
    assert top1_index([0.0, 2.0]) == 1


def test_four_options_hand_computed():
    # z / T = log([1, 2, 3, 4]) -> P = [0.1, 0.2, 0.3, 0.4], M = 0.4 - 0.3
    z = 2.0 * np.log([1.0, 2.0, 3.0, 4.0])
    np.testing.assert_allclose(option_probs(z, 2.0), [0.1, 0.2, 0.3, 0.4], rtol=1e-13)
    assert margin(z, 2.0) == pytest.approx(0.1, abs=1e-14)
    assert one_minus_margin(z, 2.0) == pytest.approx(0.9, abs=1e-14)
    assert top1_index(z) == 3
    # at T = 1 the same logits give P proportional to [1, 4, 9, 16]
    assert margin(z, 1.0) == pytest.approx((16 - 9) / 30, abs=1e-14)


def test_twenty_six_options_hand_computed():
    # one option at exp(z/T) = 5, the other 25 at 1: P_top1 = 5/30, P_top2 = 1/30
    z = np.zeros(26)
    z[7] = 2.0 * math.log(5.0)
    assert margin(z, 2.0) == pytest.approx(4 / 30, abs=1e-14)
    assert one_minus_margin(z, 2.0) == pytest.approx(26 / 30, abs=1e-14)
    assert top1_index(z) == 7


def test_ties_give_zero_margin_and_first_letter():
    assert margin([3.0, 3.0, 1.0]) == 0.0
    assert one_minus_margin([3.0, 3.0, 1.0]) == 1.0
    assert top1_index([1.0, 3.0, 3.0]) == 1
    assert margin(np.zeros(26)) == 0.0
    assert top1_index(np.zeros(26)) == 0


def test_saturated_logits_keep_one_minus_margin_exact():
    # z = [1000, 0], T = 2: P_2 = q = e^-500 / (1 + e^-500), 1 - M = 2q, far below float64 epsilon
    expected = 2 * math.exp(-500) / (1 + math.exp(-500))
    assert one_minus_margin([1000.0, 0.0], 2.0) == pytest.approx(expected, rel=1e-12)
    assert margin([1000.0, 0.0], 2.0) == 1.0
    # three options: 1 - M = (P_2 + P_3) + P_2 with P_i ~ e^-(1000 - z_i)/T
    om = one_minus_margin([1000.0, 960.0, 940.0], 2.0)
    assert om == pytest.approx(2 * math.exp(-20) + math.exp(-30), rel=1e-8)
    # the naive complement of M has no digits left here, which is why one_minus_margin exists
    assert 1.0 - margin([1000.0, 0.0], 2.0) == 0.0 < one_minus_margin([1000.0, 0.0], 2.0)


def test_invariances_and_consistency():
    rng = np.random.default_rng(0)
    for k in (2, 3, 4, 5, 10, 26):
        z = rng.normal(size=k) * 4
        m = margin(z, 1.7)
        assert 0.0 <= m <= 1.0
        assert m + one_minus_margin(z, 1.7) == pytest.approx(1.0, abs=1e-15)
        assert margin(z + 123.0, 1.7) == pytest.approx(m, abs=1e-12)  # shift invariance of softmax
        perm = rng.permutation(k)
        assert margin(z[perm], 1.7) == pytest.approx(m, abs=1e-15)
        assert option_probs(z, 1.7).sum() == pytest.approx(1.0, abs=1e-14)
        naive = np.exp(z / 1.7) / np.exp(z / 1.7).sum()
        np.testing.assert_allclose(option_probs(z, 1.7), naive, rtol=1e-12)
    # a higher temperature flattens P, so the margin shrinks
    assert margin([3.0, 1.0, 0.0], 4.0) < margin([3.0, 1.0, 0.0], 1.0)


def test_vectorised_matches_scalar_on_ragged_rows():
    rng = np.random.default_rng(1)
    rows = [rng.normal(size=k) * 5 for k in (2, 4, 26, 5, 3)] + [[1000.0, 0.0], [2.0, 2.0, 0.0]]
    padded = pad_logits(rows)
    assert padded.shape == (7, 26)
    m, om = margins_and_complements(rows, 2.0)
    for i, row in enumerate(rows):
        assert m[i] == margin(row, 2.0)
        assert om[i] == pytest.approx(one_minus_margin(row, 2.0), rel=1e-14)
        assert top1_indices(padded)[i] == top1_index(row)
    np.testing.assert_array_equal(margins(padded, 2.0), m)
    np.testing.assert_array_equal(margins_and_complements(padded, 2.0)[1], om)
    assert top1_probs(rows, 2.0)[0] == pytest.approx(option_probs(rows[0], 2.0).max(), rel=1e-14)


def test_stage1_confidence_bundle():
    c = stage1_confidence(2.0 * np.log([1.0, 2.0, 3.0, 4.0]), 2.0)
    assert c.index == 3 and c.margin == pytest.approx(0.1) and c.one_minus_margin == pytest.approx(0.9)
    np.testing.assert_allclose(c.probs, [0.1, 0.2, 0.3, 0.4], rtol=1e-13)
    assert c.temperature == 2.0


@pytest.mark.parametrize(
    "logits, reason",
    [
        ([1.0, float("nan"), 0.0], "non_finite"),
        ([1.0, float("inf")], "non_finite"),
        ([1.0, float("-inf")], "non_finite"),
        ([1.0], "too_few_options"),
        ([], "too_few_options"),
        (list(range(27)), "too_many_options"),
        ([[1.0, 2.0]], "not_a_vector"),
        (["a", "b"], "not_numeric"),
    ],
)
def test_invalid_logits_are_rejected_with_a_reason(logits, reason):
    with pytest.raises(InvalidLogits) as err:
        margin(logits)
    assert err.value.reason == reason


def test_batch_error_names_the_row():
    with pytest.raises(InvalidLogits, match="row 1") as err:
        margins([[1.0, 2.0], [1.0, float("nan")]])
    assert err.value.reason == "non_finite"


def test_bad_temperature_rejected():
    for t in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            margin([1.0, 0.0], t)


def test_exit_rule_is_margin_at_least_tau():
    assert exits_early(0.97, 0.97)
    assert not exits_early(math.nextafter(0.97, 0.0), 0.97)
    assert exits_early(margin([1000.0, 0.0]), 0.999999)
