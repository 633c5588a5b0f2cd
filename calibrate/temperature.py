"""Temperature scaling for the Stage-1 option logits: choose T minimising the gold-letter NLL.

The paper fixes T = 2.0 (Eq. 2); here T is fitted on held-out Stage-1 logits. The search runs over log T
inside fixed bounds (bounded Brent, scipy), so T can neither go negative nor run away when the fit data
are separable; hitting a bound is reported, not hidden.

ECE binning (stated, because ECE depends on it): confidence = P_top1, 15 equal-width bins [b/15, (b+1)/15) on [0, 1],
the last one closed so P_top1 = 1.0 joins it, ECE = sum_b (n_b / n) |acc_b - conf_b| (L1). This is torchmetrics'
``multiclass_calibration_error(..., n_bins=15, norm="l1")`` except that torchmetrics gives P_top1 == 1.0 a bin of
its own; saturated Stage-1 logits make that case common, so it is folded into the top bin here.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from cader.calibrate.margin import log_option_probs_batch, top1_indices
from scipy.optimize import minimize_scalar

T_BOUNDS = (0.05, 50.0)
ECE_BINS = 15


def gold_nll(padded_logits: np.ndarray, gold: np.ndarray, temperature: float) -> float:
    """Mean negative log-likelihood of the gold option under softmax(z / T).

    -log P_gold = logsumexp_j((z_j - z_gold) / T), evaluated as m + log1p(sum of the non-max terms) so a
    confidently right sample keeps its tiny positive NLL instead of rounding to 0 (which would leave the
    search flat and T arbitrary on nearly separable data).
    """
    d = (padded_logits - padded_logits[np.arange(len(gold)), gold][:, None]) / temperature
    top = np.argmax(d, axis=1)
    m = d[np.arange(len(gold)), top]
    e = np.exp(d - m[:, None])
    e[np.arange(len(gold)), top] = 0.0
    return float(np.mean(m + np.log1p(e.sum(axis=1))))


def calibration_bins(confidence: np.ndarray, n_bins: int = ECE_BINS) -> np.ndarray:
    """Bin index per confidence value: equal-width bins [b/n, (b+1)/n), the last one closed at 1."""
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    return np.clip(np.searchsorted(edges, confidence, side="right") - 1, 0, n_bins - 1)


def expected_calibration_error(confidence: np.ndarray, correct: np.ndarray, n_bins: int = ECE_BINS) -> float:
    confidence = np.asarray(confidence, dtype=np.float64)
    correct = np.asarray(correct, dtype=np.float64)
    if confidence.size == 0:
        return float("nan")
    bins = calibration_bins(confidence, n_bins)
    gap = np.bincount(bins, weights=correct - confidence, minlength=n_bins)  # n_b * (acc_b - conf_b)
    return float(np.sum(np.abs(gap)) / confidence.size)


@dataclass(frozen=True)
class TemperatureFit:
    temperature: float
    n: int
    nll_before: float  # at T = 1 (raw logits)
    nll_after: float  # at the fitted T
    ece_before: float
    ece_after: float
    nll_paper: float  # at the paper's T = 2.0, for comparison
    ece_paper: float
    at_bound: bool  # True when the optimum sits on a search bound (separable or degenerate data)
    bounds: tuple[float, float] = T_BOUNDS
    ece_bins: int = ECE_BINS

    def as_dict(self) -> dict:
        d = asdict(self)
        d["bounds"] = list(self.bounds)
        return d


def nll_and_ece(padded_logits: np.ndarray, gold: np.ndarray, temperature: float, n_bins: int = ECE_BINS):
    nll = gold_nll(padded_logits, gold, temperature)
    conf = np.exp(np.max(log_option_probs_batch(padded_logits, temperature), axis=1))
    correct = top1_indices(padded_logits) == gold
    return nll, expected_calibration_error(conf, correct, n_bins)


def fit_temperature(
    padded_logits: np.ndarray,
    gold: np.ndarray,
    bounds: tuple[float, float] = T_BOUNDS,
    paper_temperature: float = 2.0,
    n_bins: int = ECE_BINS,
) -> TemperatureFit:
    """Minimise gold NLL over log T in ``bounds``. ``padded_logits`` comes from margin.pad_logits."""
    gold = np.asarray(gold, dtype=np.int64)
    if len(gold) == 0:
        raise ValueError("cannot fit a temperature on zero samples")
    if len(gold) != len(padded_logits):
        raise ValueError(f"{len(padded_logits)} logit rows but {len(gold)} gold labels")
    lo, hi = math.log(bounds[0]), math.log(bounds[1])
    result = minimize_scalar(
        lambda log_t: gold_nll(padded_logits, gold, math.exp(log_t)),
        bounds=(lo, hi),
        method="bounded",
        options={"xatol": 1e-6},
    )
    temperature = float(math.exp(result.x))
    # NLL is convex in 1/T, so an optimum within ~1e-3 (relative) of an edge means the edge bound it.
    at_bound = bool(min(abs(result.x - lo), abs(result.x - hi)) < 1e-3)
    nll_before, ece_before = nll_and_ece(padded_logits, gold, 1.0, n_bins)
    nll_after, ece_after = nll_and_ece(padded_logits, gold, temperature, n_bins)
    nll_paper, ece_paper = nll_and_ece(padded_logits, gold, paper_temperature, n_bins)
    return TemperatureFit(
        temperature=temperature,
        n=len(gold),
        nll_before=nll_before,
        nll_after=nll_after,
        ece_before=ece_before,
        ece_after=ece_after,
        nll_paper=nll_paper,
        ece_paper=ece_paper,
        at_bound=at_bound,
        bounds=tuple(bounds),
        ece_bins=n_bins,
    )
