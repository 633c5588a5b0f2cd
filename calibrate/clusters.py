"""Counting videos rather than questions: the design effect of a 0/1 rate over clustered samples.

Questions asked about one video share its difficulty, so k errors among n exits are not Binomial(n, p): the exact
bounds of calibrate/binomial.py, which count questions as independent trials, are too narrow. The design effect

    d = max(1, Var_clustered / Var_naive)

compares the clustered variance of the mean (lmms-eval's ``clustered_stderr``, Eq. 4 of Miller 2024, "Adding Error
Bars to Evals": SE^2 = s^2 / n + (1 / n^2) * sum over clusters of [(sum of deviations)^2 - sum of squared
deviations]) with the naive s^2 / n (s^2 with ddof 1). A bound on the effective counts n / d and k / d (Kish's
effective sample size) then counts roughly as many independent trials as the data hold. d never goes below 1: a
negative within-cluster covariance is noise at these sizes, and crediting it would make the bound narrower than
the question-counting one.

For a 0/1 indicator with E ones among n (p = E / n), sum of squared deviations = E (1 - p) and
s^2 = E (1 - p) / (n - 1), so per cluster c with n_c samples and e_c ones

    d = 1 + [sum_c (e_c - n_c p)^2 - E (1 - p)] * (n - 1) / (n * E * (1 - p)),

and d = 1 where the variance is zero (no error or only errors) or n < 2: there is no spread to inflate.

That direct estimate fails exactly where a bound matters most: a confident exit set with no error, or errors from
one video, has d = 1, and so do a few easy videos that happen to make up the selection split; the simulation in
tests/test_calibrate_video_split.py measured 0.19 violations at delta = 0.1 with it alone (10 videos x 100
questions, video effect sigma = 3, split by video). So the design effect at a threshold is also floored by the
one the exit set's cluster sizes imply (Kish): 1 + (m - 1) * rho, m = sum_c n_c^2 / n the size-weighted mean
number of exits per video and rho the intraclass correlation of the errors over the whole set, estimated from its
design effect the same way (rho = (d_all - 1) / (m_all - 1), clipped to [0, 1]). Over every sample the errors are
spread enough to show how much videos share; the raw errors (not residuals against the margin) also carry any
difference in margins between videos, which only makes rho, and the bound, more conservative. With that floor the
same simulation holds (0.025).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np


def cluster_codes(clusters: Sequence[Hashable]) -> tuple[np.ndarray, int]:
    """(code per sample in 0..C-1, C): equal labels (any hashable: a video id, calibrate/videos.py's video_key)
    share a code, numbered in order of first appearance."""
    index: dict = {}
    codes = np.fromiter((index.setdefault(c, len(index)) for c in clusters), dtype=np.int64)
    return codes, len(index)


def design_effect_from_counts(n_per_cluster, ones_per_cluster) -> float:
    """d = max(1, Var_clustered / Var_naive) of a 0/1 indicator's mean, from each cluster's sample count and count
    of ones (see the module docstring); clusters with no sample are ignored."""
    n_c = np.asarray(n_per_cluster, dtype=np.float64)
    e_c = np.asarray(ones_per_cluster, dtype=np.float64)
    if n_c.shape != e_c.shape:
        raise ValueError(f"{n_c.size} cluster sizes for {e_c.size} cluster counts")
    if np.any(e_c < 0) or np.any(e_c > n_c):
        raise ValueError("a cluster's count of ones must lie in [0, its size]")
    n, ones = float(n_c.sum()), float(e_c.sum())
    if n < 2 or ones <= 0 or ones >= n:
        return 1.0
    p = ones / n
    squared = ones * (1.0 - p)  # sum over samples of (x - p)^2
    # sum over pairs i != j within a cluster, cluster by cluster: (sum of deviations)^2 - sum of squared deviations,
    # exactly 0 for a cluster of one (so one question per video gives d = 1 to the last bit)
    per_cluster_squared = e_c * (1.0 - p) ** 2 + (n_c - e_c) * p**2
    cross = float(np.sum((e_c - n_c * p) ** 2 - per_cluster_squared))
    return max(1.0, 1.0 + cross * (n - 1.0) / (n * squared))


def design_effect(indicator, clusters: Sequence[Hashable]) -> float:
    """The design effect of mean(indicator) (0/1 values, one cluster label per sample)."""
    x = np.asarray(indicator, dtype=bool)
    codes, n_clusters = cluster_codes(clusters)
    if codes.size != x.size:
        raise ValueError(f"need one cluster label per sample: {codes.size} labels for {x.size} samples")
    return design_effect_from_counts(np.bincount(codes, minlength=n_clusters),
                                     np.bincount(codes, weights=x, minlength=n_clusters))


def weighted_cluster_size(n_per_cluster) -> float:
    """m = sum_c n_c^2 / sum_c n_c: the mean number of samples sharing a sample's cluster (1 for singletons)."""
    n_c = np.asarray(n_per_cluster, dtype=np.float64)
    total = float(n_c.sum())
    return float(np.sum(n_c**2) / total) if total > 0 else 1.0


def intraclass_correlation(n_per_cluster, ones_per_cluster) -> float:
    """rho from d = 1 + (m - 1) * rho (Kish), clipped to [0, 1]; 0 when every cluster has one sample."""
    m = weighted_cluster_size(n_per_cluster)
    if m <= 1.0 + 1e-12:
        return 0.0
    d = design_effect_from_counts(n_per_cluster, ones_per_cluster)
    return float(min(1.0, max(0.0, (d - 1.0) / (m - 1.0))))


def design_effects_at(margin, correct, clusters: Sequence[Hashable], taus) -> np.ndarray:
    """Per tau in ``taus``: the design effect of the error indicator (not correct) among the exits (M >= tau),
    floored by 1 + (m - 1) * rho with m the exits' weighted cluster size and rho the intraclass correlation of the
    errors over every sample (module docstring); 1 where fewer than two samples exit."""
    margin = np.asarray(margin, dtype=np.float64)
    wrong = ~np.asarray(correct, dtype=bool)
    codes, n_clusters = cluster_codes(clusters)
    if not (codes.size == margin.size == wrong.size):
        raise ValueError(f"need one cluster label per sample: {codes.size} labels, {margin.size} margins, "
                         f"{wrong.size} outcomes")
    rho = intraclass_correlation(np.bincount(codes, minlength=n_clusters),
                                 np.bincount(codes, weights=wrong, minlength=n_clusters))
    out = np.ones(np.size(taus))
    for t, tau in enumerate(np.asarray(taus, dtype=np.float64)):
        exits = margin >= tau
        if exits.sum() < 2:
            continue
        n_c = np.bincount(codes[exits], minlength=n_clusters)
        direct = design_effect_from_counts(n_c, np.bincount(codes[exits], weights=wrong[exits], minlength=n_clusters))
        out[t] = max(direct, 1.0 + (weighted_cluster_size(n_c) - 1.0) * rho)
    return out


def design_effects_of_rates(indicator_per_tau: np.ndarray, clusters: Sequence[Hashable],
                            pooled=None) -> np.ndarray:
    """Per row of ``indicator_per_tau`` (taus x samples, 0/1, every sample counted): the design effect of that
    row's mean, as for the accuracy loss over all samples; ``pooled`` (one 0/1 value per sample) gives the
    intraclass correlation whose Kish design effect floors every row (as design_effects_at does)."""
    x = np.asarray(indicator_per_tau, dtype=np.float64)
    codes, n_clusters = cluster_codes(clusters)
    if x.ndim != 2 or x.shape[1] != codes.size:
        raise ValueError(f"need a (taus, samples) array with {codes.size} samples, got shape {x.shape}")
    sizes = np.bincount(codes, minlength=n_clusters)
    floor = 1.0
    if pooled is not None:
        rho = intraclass_correlation(sizes, np.bincount(codes, weights=np.asarray(pooled, np.float64),
                                                        minlength=n_clusters))
        floor = 1.0 + (weighted_cluster_size(sizes) - 1.0) * rho
    return np.array([max(floor, design_effect_from_counts(sizes, np.bincount(codes, weights=row,
                                                                             minlength=n_clusters)))
                     for row in x])


def effective_counts(errors, n, design: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(errors / d, n / d): the counts a binomial bound may treat as independent trials."""
    d = np.maximum(np.asarray(design, dtype=np.float64), 1.0)
    return np.asarray(errors, dtype=np.float64) / d, np.asarray(n, dtype=np.float64) / d
