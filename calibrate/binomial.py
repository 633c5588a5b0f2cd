"""Binomial confidence bounds (scipy), vectorised over arrays of counts."""

from __future__ import annotations

import numpy as np
from scipy.stats import beta, norm


def clopper_pearson_upper(errors, n, delta: float) -> np.ndarray:
    """One-sided upper (1 - delta) Clopper-Pearson bound on a binomial rate; 1.0 where n == 0 or errors >= n.

    The Beta quantile form takes fractional counts as well: the effective counts errors / d, n / d over clustered
    samples (calibrate/clusters.py) are bounded the same way."""
    errors = np.asarray(errors, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    if not 0.0 < delta < 1.0:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    with np.errstate(invalid="ignore", divide="ignore"):
        bound = beta.ppf(1.0 - delta, errors + 1.0, np.maximum(n - errors, 1e-300))
    return np.where((n <= 0) | (errors >= n), 1.0, bound)


def clopper_pearson_interval(successes, n, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided exact interval on a binomial rate; (nan, nan) where n == 0."""
    k = np.asarray(successes, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    a = (1.0 - confidence) / 2.0
    with np.errstate(invalid="ignore", divide="ignore"):
        lo = np.where(k > 0, beta.ppf(a, k, n - k + 1.0), 0.0)
        hi = np.where(k < n, beta.ppf(1.0 - a, k + 1.0, n - k), 1.0)
    empty = n <= 0
    return np.where(empty, np.nan, lo), np.where(empty, np.nan, hi)


def wilson_interval(successes, n, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided Wilson score interval; (nan, nan) where n == 0."""
    k = np.asarray(successes, dtype=np.float64)
    n = np.asarray(n, dtype=np.float64)
    z = norm.ppf(0.5 + confidence / 2.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        p = k / n
        centre = (p + z * z / (2 * n)) / (1 + z * z / n)
        half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    empty = n <= 0
    return np.where(empty, np.nan, centre - half), np.where(empty, np.nan, centre + half)
