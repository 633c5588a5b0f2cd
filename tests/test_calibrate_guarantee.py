"""The precision-mode guarantee, checked by simulation over many random fit/select splits.

Data come from calibrate.synthetic: the gold letter is drawn from softmax(z / T_true), so the probability that the
Stage-1 answer (argmax z) is right is known exactly for every sample. For each split we fit T on one half, choose
tau on the other, then measure the error among exits on a large fresh pool (the mean of the known per-sample error
probabilities, i.e. the realised error without Bernoulli noise). Precision mode must exceed alpha in at most about
delta of the splits; a naive rule (point estimate <= alpha, no bound) must fail far more often, which shows the
check has teeth.
"""

import numpy as np
import pytest
from cader.calibrate.margin import margins
from cader.calibrate.tau import NO_EXIT_TAU, exit_curve, select_tau_precision
from cader.calibrate.temperature import fit_temperature
from cader.dev.calibration_rows import synthetic_logits

TRUE_T, K = 1.5, 4
ALPHA, DELTA = 0.1, 0.1
N_SPLITS, N_FIT, N_SELECT, N_POOL = 200, 300, 600, 20_000


def _true_error(z: np.ndarray) -> np.ndarray:
    p = np.exp((z - z.max(axis=1, keepdims=True)) / TRUE_T)
    return 1.0 - p.max(axis=1) / p.sum(axis=1)


def _pool_error_among_exits(pool_margin, pool_err, tau):
    exits = pool_margin >= tau
    return pool_err[exits].mean() if exits.any() else 0.0


def _naive_tau(m, correct, alpha):
    curve = exit_curve(m, correct)
    ok = np.flatnonzero((curve.n_errors / curve.n_exits <= alpha) & (curve.n_exits >= 50))
    return curve.thresholds[ok[-1]] if ok.size else NO_EXIT_TAU


@pytest.mark.slow
def test_exit_error_exceeds_alpha_in_at_most_about_delta_of_splits():
    rng = np.random.default_rng(2024)
    pool_z, _ = synthetic_logits(N_POOL, K, TRUE_T, rng)
    pool_err = _true_error(pool_z)
    violations = naive_violations = exits_found = 0
    for _ in range(N_SPLITS):
        z, gold = synthetic_logits(N_FIT + N_SELECT, K, TRUE_T, rng)
        t_hat = fit_temperature(z[:N_FIT], gold[:N_FIT]).temperature
        m = margins(z[N_FIT:], t_hat)
        correct = z[N_FIT:].argmax(axis=1) == gold[N_FIT:]
        sel = select_tau_precision(m, correct, alpha=ALPHA, delta=DELTA, min_exits=30)
        pool_margin = margins(pool_z, t_hat)  # fresh samples seen through the fitted temperature
        if not sel.no_exit:
            exits_found += 1
            violations += _pool_error_among_exits(pool_margin, pool_err, sel.tau) > ALPHA
        naive = _naive_tau(m, correct, ALPHA)
        naive_violations += _pool_error_among_exits(pool_margin, pool_err, naive) > ALPHA
    # the procedure must actually exit most of the time, or the guarantee would be vacuous
    assert exits_found >= 0.8 * N_SPLITS
    # P(violation) <= delta; allow ~3 binomial standard deviations of Monte-Carlo noise over N_SPLITS splits
    slack = 3 * np.sqrt(DELTA * (1 - DELTA) / N_SPLITS)
    assert violations / N_SPLITS <= DELTA + slack, (violations, N_SPLITS)
    assert naive_violations / N_SPLITS > 0.3, naive_violations
