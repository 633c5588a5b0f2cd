"""tau selection: exit curves, Clopper-Pearson bounds, precision / budget / accuracy modes (hand-sized cases)."""

import math

import numpy as np
import pytest
from cader.calibrate.binomial import clopper_pearson_interval, clopper_pearson_upper, wilson_interval
from cader.calibrate.tau import (
    NO_EXIT_TAU,
    exit_curve,
    exit_stats,
    final_accuracy_curve,
    min_testable_exits,
    select_tau_accuracy,
    select_tau_budget,
    select_tau_precision,
)
from scipy.stats import binom


def test_clopper_pearson_upper_matches_definitions():
    # zero errors: the bound solves (1 - p)^n = delta
    assert clopper_pearson_upper(0, 45, 0.1) == pytest.approx(1 - 0.1 ** (1 / 45), rel=1e-10)
    # k errors: P(Bin(n, upper) <= k) = delta
    u = float(clopper_pearson_upper(3, 100, 0.1))
    assert binom.cdf(3, 100, u) == pytest.approx(0.1, abs=1e-9)
    assert clopper_pearson_upper(5, 5, 0.1) == 1.0 and clopper_pearson_upper(0, 0, 0.1) == 1.0
    np.testing.assert_allclose(clopper_pearson_upper([0, 3], [45, 100], 0.1), [1 - 0.1 ** (1 / 45), u])


def test_two_sided_intervals_contain_the_estimate():
    lo, hi = clopper_pearson_interval([0, 5, 10], [10, 10, 10])
    assert lo[0] == 0.0 and hi[2] == 1.0 and lo[1] < 0.5 < hi[1]
    wl, wh = wilson_interval(5, 10)
    assert wl < 0.5 < wh and lo[1] < wl  # exact interval is wider than Wilson here
    assert np.isnan(clopper_pearson_interval(0, 0)[0])


def test_min_testable_exits():
    n = min_testable_exits(0.05, 0.1)
    assert n == 45
    assert clopper_pearson_upper(0, n, 0.1) <= 0.05 < clopper_pearson_upper(0, n - 1, 0.1)


def test_exit_curve_groups_ties():
    m = np.array([0.9, 0.5, 0.9, 0.2, 1.0])
    c = np.array([True, False, False, True, True])
    curve = exit_curve(m, c)
    np.testing.assert_array_equal(curve.thresholds, [1.0, 0.9, 0.5, 0.2])
    np.testing.assert_array_equal(curve.n_exits, [1, 3, 4, 5])
    np.testing.assert_array_equal(curve.n_errors, [0, 1, 2, 2])
    s = exit_stats(m, c, 0.9, 0.1)
    assert (s.n_exits, s.exit_rate, s.exit_accuracy) == (3, 0.6, pytest.approx(2 / 3))
    assert exit_stats(m, c, NO_EXIT_TAU, 0.1).n_exits == 0


def test_precision_picks_largest_passing_set_and_stops_at_first_failure():
    # 200 samples by decreasing margin: the first 100 correct, then an error every 4th sample
    n = 200
    m = np.linspace(1.0, 0.0, n)
    c = np.ones(n, bool)
    c[100::4] = False
    sel = select_tau_precision(m, c, alpha=0.05, delta=0.1, min_exits=10, candidates=m)
    curve = exit_curve(m, c)
    upper = clopper_pearson_upper(curve.n_errors, curve.n_exits, 0.1)
    first_fail = np.flatnonzero((upper > 0.05) & (curve.n_exits >= 45))[0]
    assert sel.tau == pytest.approx(curve.thresholds[first_fail - 1])
    assert not sel.no_exit
    stats = exit_stats(m, c, sel.tau, 0.1)
    assert stats.upper_bound_error <= 0.05 and stats.n_exits >= 45
    # the data after the stop would pass again (all correct), but fixed-sequence testing never looks there
    c2 = c.copy()
    c2[150:] = True
    sel2 = select_tau_precision(m, c2, alpha=0.05, delta=0.1, min_exits=10, candidates=m)
    assert sel2.tau == sel.tau


def test_precision_no_exit_when_too_few_or_early_errors():
    m = np.linspace(1, 0, 30)
    sel = select_tau_precision(m, np.ones(30, bool), min_exits=10)
    assert sel.no_exit and sel.tau == NO_EXIT_TAU
    m = np.linspace(1, 0, 300)
    c = np.ones(300, bool)
    c[:5] = False  # the most confident answers are wrong
    sel = select_tau_precision(m, c, min_exits=50, candidates=m)
    assert sel.no_exit and sel.tau == NO_EXIT_TAU
    assert not (m >= sel.tau).any()


def test_precision_honours_min_exits():
    m = np.linspace(1, 0, 400)
    c = np.ones(400, bool)
    c[60:] = False  # exits are clean only among the top 60
    assert select_tau_precision(m, c, min_exits=50, candidates=m).tau == pytest.approx(m[59])
    assert select_tau_precision(m, c, min_exits=80, candidates=m).no_exit


def test_precision_default_grid_is_fixed_and_chosen_from():
    from cader.calibrate.tau import PRECISION_GRID

    assert np.all(np.diff(PRECISION_GRID) < 0) and {0.9, 0.97, 0.99, 0.995} <= set(PRECISION_GRID.tolist())
    # 1000 samples with margins spread over 1 - 1e-7 ... 0; one early error, the least confident 30% all wrong
    m = np.sort(1.0 - np.logspace(-7, 0, 1000))[::-1]
    c = np.ones(1000, bool)
    c[100] = False
    c[700:] = False
    sel = select_tau_precision(m, c, alpha=0.05, delta=0.1, min_exits=50)
    assert not sel.no_exit and sel.tau in set(PRECISION_GRID.tolist())
    stats = exit_stats(m, c, sel.tau, 0.1)
    assert stats.upper_bound_error <= 0.05 and 600 <= stats.n_exits <= 760
    # the next grid threshold down would have failed the test (that is where the sequence stopped)
    nxt = PRECISION_GRID[np.flatnonzero(PRECISION_GRID == sel.tau)[0] + 1]
    assert exit_stats(m, c, nxt, 0.1).upper_bound_error > 0.05
    assert sel.details["stopped_at"] == nxt


def test_budget_mode():
    m = np.arange(10) / 10.0  # 0.0 .. 0.9
    sel = select_tau_budget(m, 0.3)
    assert sel.tau == pytest.approx(0.3)
    assert np.mean(m < sel.tau) == pytest.approx(0.3)
    assert select_tau_budget(m, 0.0).tau == 0.0  # nobody goes to Stage 2
    assert select_tau_budget(m, 1.0).no_exit
    assert np.mean(m < select_tau_budget(m, 0.35).tau) <= 0.35
    with pytest.raises(ValueError):
        select_tau_budget(m, 1.5)


def test_accuracy_mode_hand_case():
    # margins high -> low; Stage 1 right on the top two, Stage 2 right on the two lowest
    m = np.array([0.99, 0.9, 0.5, 0.1])
    s1 = np.array([True, True, False, False])
    s2 = np.array([False, True, True, True])
    taus, acc, rate = final_accuracy_curve(m, s1, s2)
    np.testing.assert_allclose(acc, [0.75, 1.0, 1.0, 0.75, 0.5])
    np.testing.assert_allclose(rate, [0, 0.25, 0.5, 0.75, 1.0])
    assert taus[0] == NO_EXIT_TAU and list(taus[1:]) == [0.99, 0.9, 0.5, 0.1]
    sel = select_tau_accuracy(m, s1, s2)
    assert sel.tau == 0.9  # ties at 100% broken towards more exits (less Stage-2 cost)
    assert sel.details["expected_final_accuracy"] == 1.0
    assert sel.details["stage1_only_accuracy"] == 0.5 and sel.details["stage2_everywhere_accuracy"] == 0.75


def test_accuracy_mode_can_choose_no_exit():
    m = np.array([0.99, 0.5])
    sel = select_tau_accuracy(m, np.array([False, False]), np.array([True, True]))
    assert sel.no_exit and sel.tau == NO_EXIT_TAU


def test_bad_alpha_delta_rejected():
    with pytest.raises(ValueError):
        select_tau_precision(np.ones(3), np.ones(3, bool), alpha=0.0)
    with pytest.raises(ValueError):
        select_tau_precision(np.ones(3), np.ones(3, bool), delta=1.0)
    assert math.isfinite(NO_EXIT_TAU) and NO_EXIT_TAU > 1.0
