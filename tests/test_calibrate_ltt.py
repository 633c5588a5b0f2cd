"""Learn-then-Test (calibrate/ltt.py): p-values and fixed-sequence testing by hand, the cascade guarantee and the
joint (several risks) guarantee by simulation over many random splits, and the reasons a run gives when a
constraint cannot be met.

The simulations draw Stage-1 logits whose gold letter comes from softmax(z / T_true) (cader.dev.calibration_rows),
so each sample's probability of a wrong Stage-1 answer is known exactly; Stage 2 is right with probability Q2,
independently. The realised risk of a chosen tau is then the mean of the known per-sample probabilities over a
large fresh pool (no Bernoulli noise), and it must exceed the level in at most about delta of the splits, while the
rule that trusts the empirical rate must exceed it far more often (so the test can fail).
"""

import math

import numpy as np
import pytest
from cader.calibrate.ltt import (
    binomial_tail_pvalue,
    cascade_loss_counts,
    certifiable_errors,
    certification_power,
    fixed_sequence_rejections,
    select_tau_ltt,
    select_verifier_threshold,
)
from cader.calibrate.margin import margins
from cader.calibrate.tau import NO_EXIT_TAU, PRECISION_GRID, exit_counts_at, select_tau_precision
from cader.dev.calibration_rows import synthetic_logits

TRUE_T, K, Q2 = 1.5, 4, 0.7
N_SPLITS, N_SELECT, N_POOL = 200, 600, 20_000


def exits_needed(true_rate: float, level: float, delta: float, power: float = 0.8, n_max: int = 200_000) -> int | None:
    """Smallest n (exits, or samples for the accuracy loss) certified with probability >= ``power``; None when
    ``true_rate >= level`` (no n is enough) or beyond ``n_max``."""
    if true_rate >= level:
        return None
    lo = max(1, math.ceil(math.log(delta) / math.log1p(-level) - 1e-12))
    n = lo
    while n <= n_max:  # doubling, then a linear scan of the last octave (the power saw-tooths in n)
        if certification_power(n, true_rate, level, delta) >= power:
            for m in range(max(lo, n // 2), n + 1):
                if certification_power(m, true_rate, level, delta) >= power:
                    return m
        n *= 2
    return None


def test_pvalues_and_fixed_sequence_by_hand():
    # 0 errors among 45 at level 0.05: 0.95^45 = 0.0994 <= 0.1 passes; among 44: 0.1047 does not
    assert binomial_tail_pvalue(0, 45, 0.05) == pytest.approx(0.95**45)
    assert binomial_tail_pvalue(0, 44, 0.05) > 0.1 >= binomial_tail_pvalue(0, 45, 0.05)
    # 1 error among 10 at level 0.2: 0.8^10 + 10 * 0.2 * 0.8^9
    assert binomial_tail_pvalue(1, 10, 0.2) == pytest.approx(0.8**10 + 2 * 0.8**9)
    assert binomial_tail_pvalue(3, 0, 0.1) == 1.0
    assert fixed_sequence_rejections([0.01, 0.05, 0.2, 0.01], 0.1) == 2  # stops at the first failure
    assert fixed_sequence_rejections([0.01, 0.02], 0.1) == 2 and fixed_sequence_rejections([0.5], 0.1) == 0
    # the exit-error p-value passes exactly when precision mode's Clopper-Pearson bound does
    assert certifiable_errors(45, 0.05, 0.1) == 0 and certifiable_errors(44, 0.05, 0.1) == -1
    k = certifiable_errors(400, 0.05, 0.1)
    assert binomial_tail_pvalue(k, 400, 0.05) <= 0.1 < binomial_tail_pvalue(k + 1, 400, 0.05)


def test_cascade_losses_count_only_exits_stage1_loses():
    margin = np.array([0.9, 0.8, 0.5, 0.2])
    s1 = np.array([False, False, True, False])
    s2 = np.array([True, False, True, True])
    # tau 0.85: exits {0.9}: lost (S1 wrong, S2 right); tau 0.5: + 0.8 (both wrong: no loss) + 0.5 (S1 right)
    assert cascade_loss_counts(margin, s1, s2, np.array([0.95, 0.85, 0.5, 0.0])).tolist() == [0, 1, 1, 2]


def _true_error(z):
    p = np.exp((z - z.max(axis=1, keepdims=True)) / TRUE_T)
    return 1.0 - p.max(axis=1) / p.sum(axis=1)


def _draw(rng, n):
    z, gold = synthetic_logits(n, K, TRUE_T, rng)
    return z, z.argmax(axis=1) == gold, rng.random(n) < Q2


def _pool():
    rng = np.random.default_rng(7)
    z, _ = synthetic_logits(N_POOL, K, TRUE_T, rng)
    return margins(z, TRUE_T), _true_error(z)


def _pool_loss(pool_m, pool_err, tau):
    return float(np.mean((pool_m >= tau) * pool_err * Q2))  # P(exit, Stage 1 wrong, Stage 2 right)


def _pool_exit_error(pool_m, pool_err, tau):
    exits = pool_m >= tau
    return float(pool_err[exits].mean()) if exits.any() else 0.0


def _empirical_cascade_tau(m, s1, s2, epsilon):
    """The rule without a bound: the laxest grid tau whose selection-split loss rate is <= epsilon."""
    lost = cascade_loss_counts(m, s1, s2, PRECISION_GRID) / m.size
    ok = np.flatnonzero(lost <= epsilon)
    return float(PRECISION_GRID[ok[-1]]) if ok.size else NO_EXIT_TAU


def test_cascade_loss_exceeds_epsilon_in_at_most_about_delta_of_splits():
    epsilon, delta = 0.05, 0.1
    pool_m, pool_err = _pool()
    rng = np.random.default_rng(11)
    violations = naive_violations = exits = 0
    for _ in range(N_SPLITS):
        z, s1, s2 = _draw(rng, N_SELECT)
        m = margins(z, TRUE_T)
        sel = select_tau_ltt(m, s1, delta, epsilon=epsilon, s2_correct=s2, mode="cascade")
        exits += not sel.no_exit
        violations += _pool_loss(pool_m, pool_err, sel.tau) > epsilon
        naive_violations += _pool_loss(pool_m, pool_err, _empirical_cascade_tau(m, s1, s2, epsilon)) > epsilon
    assert exits >= 0.9 * N_SPLITS  # the guarantee is not bought by never exiting
    slack = 3 * math.sqrt(delta * (1 - delta) / N_SPLITS)
    assert violations / N_SPLITS <= delta + slack, violations
    # the empirical rule lands on the loss level itself and breaks it about half the time
    assert naive_violations / N_SPLITS > 0.3, naive_violations


def _empirical_joint_tau(m, s1, s2, alpha, epsilon, min_exits):
    """The rule without a bound: the laxest grid tau whose selection-split exit error is <= alpha and loss <= epsilon."""
    wrong = ~np.asarray(s1, bool)
    lost = cascade_loss_counts(m, s1, s2, PRECISION_GRID) / m.size
    for i in range(len(PRECISION_GRID) - 1, -1, -1):
        exits = m >= PRECISION_GRID[i]
        if exits.sum() >= min_exits and wrong[exits].mean() <= alpha and lost[i] <= epsilon:
            return float(PRECISION_GRID[i])
    return NO_EXIT_TAU


def test_joint_exit_error_and_loss_hold_together_in_at_least_1_minus_delta_of_splits():
    alpha, epsilon, delta = 0.1, 0.05, 0.1
    pool_m, pool_err = _pool()
    rng = np.random.default_rng(12)
    violations = exits = naive_violations = 0
    for _ in range(N_SPLITS):
        z, s1, s2 = _draw(rng, N_SELECT)
        m = margins(z, TRUE_T)
        sel = select_tau_ltt(m, s1, delta, alpha=alpha, epsilon=epsilon, s2_correct=s2, min_exits=30)
        exits += not sel.no_exit
        bad = _pool_exit_error(pool_m, pool_err, sel.tau) > alpha or _pool_loss(pool_m, pool_err, sel.tau) > epsilon
        violations += bad
        naive = _empirical_joint_tau(m, s1, s2, alpha, epsilon, 30)
        naive_violations += (_pool_exit_error(pool_m, pool_err, naive) > alpha
                             or _pool_loss(pool_m, pool_err, naive) > epsilon)
        if not sel.no_exit:  # the chosen tau is at least as strict as each risk's own LTT choice
            alone = select_tau_ltt(m, s1, delta, alpha=alpha, min_exits=30)
            assert sel.tau >= alone.tau
    assert exits >= 0.8 * N_SPLITS
    assert violations / N_SPLITS <= delta + 3 * math.sqrt(delta * (1 - delta) / N_SPLITS), violations
    # the same test fails for the rule that trusts the selection split's rates
    assert naive_violations / N_SPLITS > delta + 3 * math.sqrt(delta * (1 - delta) / N_SPLITS), naive_violations


def test_exit_error_alone_is_precision_mode():
    rng = np.random.default_rng(3)
    z, s1, _ = _draw(rng, 800)
    m = margins(z, TRUE_T)
    for alpha in (0.02, 0.05, 0.1, 0.2):
        ltt = select_tau_ltt(m, s1, 0.1, alpha=alpha, min_exits=50, mode="precision")
        assert ltt.tau == select_tau_precision(m, s1, alpha=alpha, delta=0.1, min_exits=50).tau


def _easy_data(n=1000, seed=0):
    rng = np.random.default_rng(seed)
    m = rng.uniform(0, 1, n)
    s1 = rng.uniform(0, 1, n) < 0.5 + 0.5 * m  # accuracy rises with the margin
    return m, s1, np.ones(n, bool)


def test_budget_that_the_risk_cannot_afford_says_so_and_falls_back_to_no_exit():
    m, s1, _ = _easy_data()
    sel = select_tau_ltt(m, s1, 0.1, alpha=0.05, budget=0.2)
    assert sel.no_exit and sel.tau == NO_EXIT_TAU
    assert sel.details["unmet"] == ["stage2_fraction"]
    assert "budget 0.2" in sel.details["reason"] and "Stage 2" in sel.details["reason"]
    by_name = {c["name"]: c for c in sel.details["constraints"]}
    assert by_name["exit_error"]["met"] and not by_name["stage2_fraction"]["met"]
    # a budget the risk can afford: the laxest certified tau, inside the budget
    loose = select_tau_ltt(m, s1, 0.1, alpha=0.05, budget=0.95)
    alone = select_tau_ltt(m, s1, 0.1, alpha=0.05)
    assert not loose.no_exit and loose.tau == alone.tau
    assert {c["name"]: c["met"] for c in loose.details["constraints"]} == {"exit_error": True, "stage2_fraction": True}
    frac2 = np.mean(m < loose.tau)
    assert frac2 <= 0.95 and loose.details["constraints"][1]["value"] == pytest.approx(frac2)


def test_budget_with_its_own_bound_is_stricter_than_the_empirical_one():
    m, s1, _ = _easy_data()
    alone = select_tau_ltt(m, s1, 0.05, alpha=0.1)  # delta/2 of the split run, without a budget
    budget = float(np.mean(m < alone.tau)) + 0.01  # the empirical fraction there meets it, its bound does not
    det = select_tau_ltt(m, s1, 0.1, alpha=0.1, budget=budget)
    bounded = select_tau_ltt(m, s1, 0.1, alpha=0.1, budget=budget, budget_guarantee=True)
    assert not det.no_exit and bounded.no_exit and bounded.details["unmet"] == ["stage2_fraction"]
    assert bounded.details["delta_risks"] == 0.05


def test_risk_that_cannot_be_met_is_named():
    m = np.linspace(0, 1, 300)
    s1 = np.zeros(300, bool)  # Stage 1 always wrong
    sel = select_tau_ltt(m, s1, 0.1, alpha=0.05, epsilon=0.02, s2_correct=np.ones(300, bool), min_exits=10)
    assert sel.no_exit and "exit_error" in sel.details["unmet"]
    assert "upper bound" in sel.details["reason"]
    few = select_tau_ltt(m[:20], s1[:20], 0.1, alpha=0.05)
    assert few.no_exit and "exits in the selection split" in few.details["reason"]
    with pytest.raises(ValueError, match="Stage-2 outcomes"):
        select_tau_ltt(m, s1, 0.1, epsilon=0.02)


def test_verifier_threshold_is_the_laxest_certified():
    rng = np.random.default_rng(5)
    p_yes = rng.uniform(0, 1, 2000)
    miss = rng.uniform(0, 1, 2000) < 0.6 * (1 - p_yes)  # crops the verifier likes hold the evidence
    out = select_verifier_threshold(p_yes, miss, alpha_v=0.1, delta=0.1)
    t = out["threshold"]
    assert t is not None and 0 < t < 1
    accepted = p_yes >= t
    assert out["n_accepted"] == accepted.sum() and out["miss_rate"] == pytest.approx(miss[accepted].mean())
    assert out["upper_bound_miss"] <= 0.1
    # every stricter grid threshold passes its own test too (fixed sequence), the next laxer one fails
    n_acc, n_miss = exit_counts_at(p_yes, ~miss, np.array([t - 0.01]))
    assert binomial_tail_pvalue(n_miss, n_acc, 0.1)[0] > 0.1
    hopeless = select_verifier_threshold(p_yes, np.ones(2000, bool), alpha_v=0.1, delta=0.1)
    assert hopeless["threshold"] is None and "upper bound" in hopeless["reason"]


def test_samples_needed():
    assert exits_needed(0.2, 0.05, 0.1) is None  # 80 % accurate exits can never certify 5 % error
    n = exits_needed(0.02, 0.05, 0.1, power=0.8)
    assert certification_power(n, 0.02, 0.05, 0.1) >= 0.8 > certification_power(n - 1, 0.02, 0.05, 0.1)
    assert exits_needed(0.0, 0.05, 0.1, power=0.99) == 45  # zero errors: log(0.1) / log(0.95) -> 45
