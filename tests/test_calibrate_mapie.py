"""An outside check of precision mode: on unclustered data, cader's certified tau set contains the one MAPIE's
Learn-then-Test controller certifies at the same alpha and delta on the same grid.

MAPIE (a test-only dependency, `pip install mapie`; 1.6 has `mapie.risk_control.BinaryClassificationController`)
tests each threshold with the Hoeffding-Bentkus p-value; cader with the exact binomial (Clopper-Pearson), which is
never larger, so with the same family-wise procedure (fixed sequence from the most confident threshold) cader
certifies at least every threshold MAPIE does, and with Bonferroni-Holm MAPIE certifies fewer still.
"""

import warnings

import numpy as np
import pytest
from cader.calibrate.margin import margins
from cader.calibrate.tau import exit_counts_at, min_testable_exits, select_tau_precision
from cader.dev.calibration_rows import synthetic_logits

mapie_risk_control = pytest.importorskip("mapie.risk_control")

ALPHA, DELTA, TRUE_T = 0.1, 0.1, 1.5
GRID = np.round(np.linspace(0.0, 0.99, 100), 4)  # fixed before seeing data, as both procedures need


def cader_certified(margin, correct) -> set[float]:
    """Every grid threshold precision mode certifies: the fixed sequence from its first testable threshold down to
    the chosen tau (min_exits = 1: only thresholds where zero errors could not pass are skipped)."""
    sel = select_tau_precision(margin, correct, ALPHA, DELTA, min_exits=1, candidates=GRID)
    if sel.no_exit:
        return set()
    n_exits, _ = exit_counts_at(margin, correct, GRID)
    testable = GRID[n_exits >= min_testable_exits(ALPHA, DELTA)]
    return {float(t) for t in testable if t >= sel.tau}


def mapie_certified(margin, correct, fwer_method: str) -> set[float]:
    controller = mapie_risk_control.BinaryClassificationController(
        predict_function=lambda x: np.c_[1.0 - x[:, 0], x[:, 0]],  # exit (positive) iff M >= lambda, as cader
        risk="precision", target_level=1.0 - ALPHA, confidence_level=1.0 - DELTA,
        list_predict_params=GRID.copy(), fwer_method=fwer_method)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # thresholds where nothing exits, "risk cannot be controlled" notes
        controller.calibrate(margin[:, None], correct.astype(int))
    return {float(t) for t in np.atleast_1d(controller.valid_predict_params)}


@pytest.mark.parametrize("seed", range(4))
def test_cader_certifies_every_threshold_mapie_learn_then_test_does(seed):
    rng = np.random.default_rng(seed)
    z, gold = synthetic_logits(600, 4, TRUE_T, rng)  # one question per video: unclustered
    margin, correct = margins(z, TRUE_T), z.argmax(axis=1) == gold
    ours = cader_certified(margin, correct)
    fixed_sequence = mapie_certified(margin, correct, "fixed_sequence")
    holm = mapie_certified(margin, correct, "bonferroni_holm")
    assert fixed_sequence, "MAPIE certified nothing: the comparison would be empty"
    assert fixed_sequence <= ours, sorted(fixed_sequence - ours)
    assert holm <= ours, sorted(holm - ours)
