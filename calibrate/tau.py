"""Choosing the early-exit threshold tau on Stage-1 margins (a split disjoint from the temperature fit).

A sample exits after Stage 1 iff M >= tau (Algorithm 1, line 10). Budget and accuracy modes choose among the
distinct margins of the selection split; precision mode tests a fixed grid (see below).

Modes
- precision (default): the largest exit set whose one-sided upper (1 - delta) Clopper-Pearson bound on the error
  among exits is <= alpha, by fixed-sequence testing from the most to the least confident threshold of a fixed
  grid (PRECISION_GRID, chosen before seeing data), stopping at the first failure. Thresholds with fewer than ``min_exits`` exits, or too few for even zero errors to pass
  (n < log(delta) / log(1 - alpha)), cannot be tested and are skipped before the sequence starts. Each test is
  valid given its exit count (errors among exits ~ Binomial(n, error rate of exits)) and the sequence stops at the
  first non-rejection, so P(chosen set's error rate > alpha) <= delta; tests/test_calibrate_guarantee.py checks
  this by simulation, including the temperature fit. With ``clusters`` (one video per sample), questions on one
  video are not counted as independent trials: each threshold is tested on the effective counts errors / d and
  n / d, d the design effect of the error indicator among its exits (calibrate/clusters.py), with the Beta-quantile
  form of the Clopper-Pearson bound (it takes fractional counts); tests/test_calibrate_video_split.py checks by
  simulation that this, with a split by video, holds the guarantee where questions share a video's difficulty.
- budget: the largest tau whose Stage-2 fraction is at most ``budget`` (send as many as allowed to Stage 2).
- accuracy: with Stage-2 outcomes for the same samples (a uniform_stage2 run), maximise
  mean([M >= tau] * stage1_correct + [M < tau] * stage2_correct); ties go to the most exits (least cost).

When no threshold qualifies, tau = NO_EXIT_TAU (just above 1.0), so every sample goes to Stage 2.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
from cader.calibrate.binomial import clopper_pearson_upper
from cader.calibrate.clusters import design_effects_at, effective_counts
from cader.contracts.calibration import CALIBRATION_MODES, NO_EXIT_TAU

MODES = CALIBRATION_MODES  # one select_tau_* per mode; calibration.json records which one chose tau


@dataclass(frozen=True)
class ExitCurve:
    """Exit statistics at each candidate threshold, most confident first."""

    thresholds: np.ndarray  # distinct margins, descending
    n_exits: np.ndarray  # number of samples with M >= threshold
    n_errors: np.ndarray  # wrong Stage-1 answers among them
    n_total: int

    @property
    def exit_rate(self) -> np.ndarray:
        return self.n_exits / max(self.n_total, 1)

    @property
    def exit_accuracy(self) -> np.ndarray:
        return 1.0 - self.n_errors / np.maximum(self.n_exits, 1)


def exit_curve(margin: np.ndarray, correct: np.ndarray) -> ExitCurve:
    margin = np.asarray(margin, dtype=np.float64)
    correct = np.asarray(correct, dtype=bool)
    if margin.shape != correct.shape:
        raise ValueError(f"margin {margin.shape} and correct {correct.shape} differ in shape")
    order = np.argsort(-margin, kind="stable")
    m_sorted = margin[order]
    errors_cum = np.cumsum(~correct[order])
    # the last position of each run of equal margins closes that threshold's exit set
    is_last = np.r_[m_sorted[1:] != m_sorted[:-1], True] if m_sorted.size else np.zeros(0, bool)
    last = np.flatnonzero(is_last)
    return ExitCurve(
        thresholds=m_sorted[last],
        n_exits=last + 1,
        n_errors=errors_cum[last] if last.size else np.zeros(0, np.int64),
        n_total=int(margin.size),
    )


@dataclass(frozen=True)
class ExitStats:
    tau: float
    n: int
    n_exits: int
    exit_rate: float
    exit_accuracy: float | None  # None when nobody exits
    upper_bound_error: float  # one-sided (1 - delta) Clopper-Pearson bound on error among exits (1.0 if none)
    # with clusters: the design effect among the exits (None when nobody exits), the effective exit count n_exits / d,
    # and the bound on the effective counts (then upper_bound_error) next to the question-counting one
    design_effect: float | None = None
    n_exits_effective: float | None = None
    upper_bound_error_naive: float | None = None

    def as_dict(self) -> dict:
        out = asdict(self)
        if self.n_exits_effective is None:  # no clusters: the question-counting bound only
            for key in ("design_effect", "n_exits_effective", "upper_bound_error_naive"):
                out.pop(key)
        return out


def exit_stats(margin: np.ndarray, correct: np.ndarray, tau: float, delta: float, clusters=None) -> ExitStats:
    """Exit statistics at ``tau``; with ``clusters`` (one video per sample) the bound is on the effective counts,
    as precision mode tests it."""
    margin = np.asarray(margin, dtype=np.float64)
    correct = np.asarray(correct, dtype=bool)
    exits = margin >= tau
    n_exits = int(exits.sum())
    n_errors = int((~correct[exits]).sum())
    naive = float(clopper_pearson_upper(n_errors, n_exits, delta))
    cluster_fields = {}
    if clusters is not None:
        d = float(design_effects_at(margin, correct, clusters, [tau])[0])
        k_eff, n_eff = effective_counts(n_errors, n_exits, d)
        cluster_fields = {"design_effect": d if n_exits else None, "n_exits_effective": float(n_eff),
                          "upper_bound_error_naive": naive}
        naive = float(clopper_pearson_upper(k_eff, n_eff, delta))
    return ExitStats(
        tau=float(tau),
        n=int(margin.size),
        n_exits=n_exits,
        exit_rate=n_exits / margin.size if margin.size else 0.0,
        exit_accuracy=(1.0 - n_errors / n_exits) if n_exits else None,
        upper_bound_error=naive,
        **cluster_fields,
    )


@dataclass(frozen=True)
class TauSelection:
    tau: float
    mode: str
    no_exit: bool  # True when no threshold qualified and everyone goes to Stage 2
    details: dict = field(default_factory=dict)  # mode-specific numbers (tested count, first failure, ...)


def min_testable_exits(alpha: float, delta: float) -> int:
    """Smallest n for which zero errors among n exits gives a Clopper-Pearson upper bound <= alpha."""
    return math.ceil(math.log(delta) / math.log1p(-alpha) - 1e-12)


def _precision_grid() -> np.ndarray:
    """Data-independent candidate thresholds, most confident first: 1 - 10^(-k/8) for k = 4..64
    (0.68 ... 1 - 1e-8), 0.05-steps below, and the paper's Table 4 bin edges (0.9, 0.97, 0.99, 0.995)."""
    near_one = 1.0 - 10.0 ** (-np.arange(4, 65) / 8.0)
    return np.unique(np.r_[np.arange(0, 14) * 0.05, near_one, 0.9, 0.97, 0.99, 0.995])[::-1]


PRECISION_GRID = _precision_grid()


def exit_counts_at(
    margin: np.ndarray, correct: np.ndarray, taus: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(number of exits, number of Stage-1 errors among them) at each tau in ``taus``."""
    margin = np.asarray(margin, dtype=np.float64)
    order = np.argsort(margin, kind="stable")
    m_sorted, wrong = margin[order], ~np.asarray(correct, dtype=bool)[order]
    wrong_suffix = np.r_[np.cumsum(wrong[::-1])[::-1], 0]  # errors at or after each sorted position
    start = np.searchsorted(m_sorted, np.asarray(taus, dtype=np.float64), side="left")  # first M >= tau
    return margin.size - start, wrong_suffix[start]


def select_tau_precision(
    margin: np.ndarray,
    correct: np.ndarray,
    alpha: float = 0.05,
    delta: float = 0.1,
    min_exits: int = 50,
    candidates: np.ndarray | None = None,
    clusters=None,
) -> TauSelection:
    """Fixed-sequence testing over ``candidates`` (default PRECISION_GRID, fixed before seeing data).

    A fixed grid keeps the hypotheses data-independent (as fixed-sequence testing assumes) and makes the first
    tested set larger than one built from the top few samples, so a single early error does not end the search.
    ``clusters`` (one label per sample, the video) tests each threshold on its effective counts (module docstring);
    which thresholds are testable still depends on the exit count alone (``min_exits``), so the skip rule does
    not look at the errors.
    """
    if not (0.0 < alpha < 1.0 and 0.0 < delta < 1.0):
        raise ValueError(f"alpha and delta must be in (0, 1), got alpha={alpha}, delta={delta}")
    taus = PRECISION_GRID if candidates is None else np.unique(np.asarray(candidates, np.float64))[::-1]
    n_exits, n_errors = exit_counts_at(margin, correct, taus)
    need = max(int(min_exits), min_testable_exits(alpha, delta))
    design = np.ones(taus.size) if clusters is None else design_effects_at(margin, correct, clusters, taus)
    k_eff, n_eff = effective_counts(n_errors, n_exits, design)
    upper = clopper_pearson_upper(k_eff, n_eff, delta)
    testable = np.flatnonzero(n_exits >= need)
    details = {"min_exits": need, "candidates": int(taus.size), "tested": 0, "stopped_at": None}
    if clusters is not None:
        details["cluster_bound"] = True
    if testable.size == 0:
        details["reason"] = f"no candidate threshold has {need} or more exits in the selection split"
        return TauSelection(NO_EXIT_TAU, "precision", True, details)
    start = int(testable[0])
    fails = np.flatnonzero(upper[start:] > alpha)
    if fails.size and fails[0] == 0:
        details.update(tested=1, stopped_at=float(taus[start]))
        effective = ("" if clusters is None else
                     f"; design effect {design[start]:.3g}, effective {n_eff[start]:.3g} exits")
        details["reason"] = (
            f"the first testable exit set (tau={taus[start]:.6g}: {int(n_exits[start])} exits, "
            f"{int(n_errors[start])} errors{effective}) already has upper bound {upper[start]:.3f} > alpha={alpha}"
        )
        return TauSelection(NO_EXIT_TAU, "precision", True, details)
    chosen = start + (int(fails[0]) - 1 if fails.size else taus.size - 1 - start)
    details.update(
        tested=int(fails[0]) + 1 if fails.size else int(taus.size - start),
        stopped_at=float(taus[start + int(fails[0])]) if fails.size else None,
    )
    if clusters is not None:
        details["design_effect"] = float(design[chosen])
    return TauSelection(float(taus[chosen]), "precision", False, details)


def select_tau_budget(margin: np.ndarray, budget: float) -> TauSelection:
    """Largest tau with fraction(M < tau) <= budget."""
    if not 0.0 <= budget <= 1.0:
        raise ValueError(f"budget (max Stage-2 fraction) must be in [0, 1], got {budget}")
    m = np.sort(np.asarray(margin, dtype=np.float64))
    allowed = math.floor(budget * m.size + 1e-9)
    if allowed >= m.size:
        return TauSelection(NO_EXIT_TAU, "budget", True, {"budget": budget, "allowed_stage2": allowed})
    # tau = the (allowed+1)-th smallest margin: at most `allowed` samples lie strictly below it (fewer on ties)
    return TauSelection(float(m[allowed]), "budget", False, {"budget": budget, "allowed_stage2": allowed})


def final_accuracy_curve(margin: np.ndarray, stage1_correct: np.ndarray, stage2_correct: np.ndarray):
    """(taus, final accuracy, exit rate) for every candidate tau, NO_EXIT_TAU first, then descending margins."""
    s1 = np.asarray(stage1_correct, dtype=bool)
    s2 = np.asarray(stage2_correct, dtype=bool)
    curve = exit_curve(margin, s1)
    order = np.argsort(-np.asarray(margin, dtype=np.float64), kind="stable")
    # exiting sample i changes its outcome from stage2_correct to stage1_correct
    gain_cum = np.cumsum(s1[order].astype(np.int64) - s2[order].astype(np.int64))
    n = max(s1.size, 1)
    base = s2.sum()
    taus = np.r_[NO_EXIT_TAU, curve.thresholds]
    acc = np.r_[base, base + gain_cum[curve.n_exits - 1]] / n
    rate = np.r_[0, curve.n_exits] / n
    return taus, acc, rate


def select_tau_accuracy(
    margin: np.ndarray, stage1_correct: np.ndarray, stage2_correct: np.ndarray
) -> TauSelection:
    taus, acc, _ = final_accuracy_curve(margin, stage1_correct, stage2_correct)
    if taus.size == 1:
        raise ValueError("accuracy mode needs at least one sample with a Stage-2 outcome")
    best = np.flatnonzero(acc >= acc.max() - 1e-12)[-1]  # last = smallest tau = most exits among the best
    details = {
        "expected_final_accuracy": float(acc[best]),
        "stage1_only_accuracy": float(acc[-1]),
        "stage2_everywhere_accuracy": float(acc[0]),
    }
    return TauSelection(float(taus[best]), "accuracy", bool(best == 0), details)
