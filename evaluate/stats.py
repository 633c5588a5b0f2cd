"""Paired statistics for comparing systems on the same questions (AgentVidBench App. G).

Pure functions on arrays of per-question scores (1/0 correctness, or any per-question metric):
- paired_bootstrap_diff: resample questions with replacement (10,000 seeded resamples), score both systems on the
  same draw, take the middle 95% of the mean differences (App. G.1, Table 20);
- mcnemar_exact: exact binomial test on the discordant pairs (App. G.1, Table 21);
- rank_stability: re-rank all systems on every bootstrap draw; 95% rank interval, P(rank 1), P(top 3), and the
  mean Kendall tau-b between each draw's ranking and the full-sample ranking (App. G.2, Table 22).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.stats import binomtest, rankdata

N_RESAMPLES = 10_000  # App. G.1
CHUNK_CELLS = 2_000_000  # resample indices drawn in chunks of at most this many cells (memory bound)


def _bootstrap_indices(n: int, n_resamples: int, rng: np.random.Generator):
    rows = max(1, CHUNK_CELLS // max(n, 1))
    for start in range(0, n_resamples, rows):
        yield rng.integers(0, n, size=(min(rows, n_resamples - start), n))


def bootstrap_means(values: np.ndarray, n_resamples: int = N_RESAMPLES, seed: int = 0) -> np.ndarray:
    """Means of `values` (shape (n,) or (systems, n)) over question resamples: shape (n_resamples,) or (R, systems)."""
    values = np.asarray(values, dtype=float)
    n = values.shape[-1]
    if n == 0:
        raise ValueError("need at least one question")
    rng = np.random.default_rng(seed)
    out = [values[..., idx].mean(axis=-1).T for idx in _bootstrap_indices(n, n_resamples, rng)]
    return np.concatenate(out, axis=0)


def paired_bootstrap_diff(a: Sequence[float], b: Sequence[float], *, n_resamples: int = N_RESAMPLES,
                          seed: int = 0, confidence: float = 0.95) -> dict:
    """CI of mean(a) - mean(b) over paired question resamples.

    Returns {"diff", "low", "high", "n", "n_resamples", "confidence", "p_le_zero", "p_ge_zero"}, where p_le_zero is
    the fraction of resampled differences <= 0 (how often the sign flips when a is ahead).
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired arrays must be 1-D and equally long, got {a.shape} and {b.shape}")
    diffs = bootstrap_means(a - b, n_resamples, seed)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(diffs, [tail, 1.0 - tail])
    return {"diff": float(a.mean() - b.mean()), "low": float(low), "high": float(high), "n": int(a.size),
            "n_resamples": int(n_resamples), "confidence": confidence,
            "p_le_zero": float(np.mean(diffs <= 0)), "p_ge_zero": float(np.mean(diffs >= 0))}


def mcnemar_exact(a_correct: Sequence[bool], b_correct: Sequence[bool]) -> dict:
    """McNemar's exact test: two-sided binomial test of n_a_only successes in n_a_only + n_b_only at p = 0.5."""
    a, b = np.asarray(a_correct, dtype=bool), np.asarray(b_correct, dtype=bool)
    if a.shape != b.shape:
        raise ValueError(f"paired arrays differ in shape: {a.shape} vs {b.shape}")
    only_a, only_b = int(np.sum(a & ~b)), int(np.sum(~a & b))
    discordant = only_a + only_b
    p_value = binomtest(only_a, discordant, 0.5).pvalue if discordant else 1.0
    return {"only_a": only_a, "only_b": only_b, "discordant": discordant, "p_value": float(p_value)}


def pooled_mcnemar(pairs: Sequence[tuple[Sequence[bool], Sequence[bool]]]) -> dict:
    """McNemar pooled over several settings (App. G.1 pools 16 backbones): discordant counts are summed."""
    only_a = sum(mcnemar_exact(a, b)["only_a"] for a, b in pairs)
    only_b = sum(mcnemar_exact(a, b)["only_b"] for a, b in pairs)
    discordant = only_a + only_b
    p_value = binomtest(only_a, discordant, 0.5).pvalue if discordant else 1.0
    return {"only_a": only_a, "only_b": only_b, "discordant": discordant, "p_value": float(p_value)}


def ranks_descending(scores: np.ndarray) -> np.ndarray:
    """Rank 1 = best; ties share the best rank ("min" method), along the last axis."""
    return rankdata(-np.asarray(scores, dtype=float), method="min", axis=-1).astype(int)


def kendall_tau_b_rows(x: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Kendall's tau-b between `x` (k,) and every row of `ys` (R, k), vectorised over rows (scipy's kendalltau
    per row is the reference; it is too slow for 10,000 rows). NaN where either side is constant."""
    x, ys = np.asarray(x, dtype=float), np.atleast_2d(np.asarray(ys, dtype=float))
    i, j = np.triu_indices(x.size, k=1)
    sx = np.sign(x[i] - x[j])
    sy = np.sign(ys[:, i] - ys[:, j])
    denominator = np.sqrt(np.count_nonzero(sx) * np.count_nonzero(sy, axis=1).astype(float))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denominator > 0, (sy * sx).sum(axis=1) / denominator, np.nan)


def rank_stability(scores: np.ndarray, names: Sequence[str], *, n_resamples: int = N_RESAMPLES, seed: int = 0,
                   top_k: int = 3, confidence: float = 0.95) -> dict:
    """Bootstrap stability of the ranking of systems (rows of `scores`, shape (systems, questions))."""
    scores = np.asarray(scores, dtype=float)
    if scores.ndim != 2 or scores.shape[0] != len(names):
        raise ValueError("scores must have shape (len(names), n_questions)")
    full_rank = ranks_descending(scores.mean(axis=1))
    means = bootstrap_means(scores, n_resamples, seed)          # (R, systems)
    ranks = ranks_descending(means)                              # (R, systems)
    tail = (1.0 - confidence) / 2.0
    systems = {}
    for i, name in enumerate(names):
        low, high = np.quantile(ranks[:, i], [tail, 1.0 - tail], method="nearest")
        systems[name] = {"mean": float(scores[i].mean()), "rank": int(full_rank[i]),
                         "rank_interval": [int(low), int(high)], "p_rank1": float(np.mean(ranks[:, i] == 1)),
                         f"p_top{top_k}": float(np.mean(ranks[:, i] <= top_k))}
    taus = kendall_tau_b_rows(full_rank, ranks)
    taus = taus[np.isfinite(taus)]
    return {"systems": systems, "kendall_tau_b": float(taus.mean()) if taus.size else None,
            "n_resamples": int(n_resamples), "top_k": top_k}
