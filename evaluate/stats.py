"""Statistics for accuracies and for comparing systems on the same questions (AgentVidBench App. G).

Questions asked about one video are not independent (a hard video sinks all of its questions), so every resampling
function takes optional ``clusters`` (one label per question, the video): with them the bootstrap draws whole
videos with replacement and a resample's mean is its questions' total over its question count; without them it
draws questions, as App. G.1 states.

Pure functions on arrays of per-question scores (1/0 correctness, or any per-question metric):
- paired_bootstrap_diff: resample questions (or videos) with replacement (10,000 seeded resamples), score both
  systems on the same draw, take the middle 95% of the mean differences (App. G.1, Table 20);
- mcnemar_exact: exact binomial test on the discordant pairs (App. G.1, Table 21);
- rank_stability: re-rank all systems on every bootstrap draw; 95% rank interval, P(rank 1), P(top 3), and the
  mean Kendall tau-b between each draw's ranking and the full-sample ranking (App. G.2, Table 22);
- clustered_stderr: the standard error of a mean over clustered questions, lmms-eval's definition
  (lmms_eval/api/metrics.py ``clustered_stderr``, Eq. 4 of Miller 2024, "Adding Error Bars to Evals");
- accuracy_summary: an accuracy with its exact (Clopper-Pearson) interval, naive and clustered standard errors, the
  video count and the video-bootstrap interval.
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


def cluster_codes(clusters: Sequence, n: int) -> tuple[np.ndarray, int]:
    """(code per question in 0..C-1, C): equal labels share a code; codes follow the sorted labels (integers as
    numbers, anything else as its text, so None and "None" are one label)."""
    labels = np.asarray(clusters)
    if labels.dtype.kind not in "iub":
        labels = np.asarray([str(c) for c in clusters])
    if labels.shape != (n,):
        raise ValueError(f"need one cluster label per question: {labels.size} labels for {n} questions")
    uniques, codes = np.unique(labels, return_inverse=True)
    return codes.reshape(-1), int(uniques.size)


def bootstrap_means(values: np.ndarray, n_resamples: int = N_RESAMPLES, seed: int = 0,
                    clusters: Sequence | None = None) -> np.ndarray:
    """Means of `values` (shape (n,) or (systems, n)) over resamples: shape (n_resamples,) or (R, systems).

    Without `clusters` questions are drawn; with them whole clusters are drawn (as many as there are) and each
    resample's mean is the sum over its drawn questions divided by their number (the mean of the pooled questions,
    so a video with more questions weighs more, as it does in the accuracy itself).
    """
    values = np.asarray(values, dtype=float)
    n = values.shape[-1]
    if n == 0:
        raise ValueError("need at least one question")
    rng = np.random.default_rng(seed)
    if clusters is None:
        out = [values[..., idx].mean(axis=-1).T for idx in _bootstrap_indices(n, n_resamples, rng)]
        return np.concatenate(out, axis=0)
    codes, n_clusters = cluster_codes(clusters, n)
    rows = values.reshape(-1, n)
    sums = np.stack([np.bincount(codes, weights=row, minlength=n_clusters) for row in rows])  # (systems, C)
    counts = np.bincount(codes, minlength=n_clusters).astype(float)
    out = []
    for idx in _bootstrap_indices(n_clusters, n_resamples, rng):
        means = sums[:, idx].sum(axis=-1) / counts[idx].sum(axis=-1)  # (systems, rows)
        out.append(means[0] if values.ndim == 1 else means.T)
    return np.concatenate(out, axis=0)


def clustered_stderr(scores: Sequence[float], clusters: Sequence) -> float:
    """Standard error of mean(scores) when questions share clusters (lmms-eval's ``clustered_stderr``):

        SE^2 = s^2 / n + (1 / n^2) * sum_c sum_{i != j in c} (x_i - mean)(x_j - mean),

    s^2 the sample variance (ddof 1). The second term is the within-cluster covariance the naive s^2 / n leaves
    out; with every question in its own cluster it is zero. NaN for fewer than two questions.
    """
    x = np.asarray(scores, dtype=float)
    n = x.size
    codes, n_clusters = cluster_codes(clusters, n)
    if n < 2:
        return float("nan")
    dev = x - x.mean()
    per_cluster = np.bincount(codes, weights=dev, minlength=n_clusters)
    # sum over i != j within a cluster = (sum of the cluster's deviations)^2 - sum of its squared deviations
    cross = (np.sum(per_cluster**2) - np.sum(dev**2)) / (n * n)
    return float(np.sqrt(max(np.var(x, ddof=1) / n + cross, 0.0)))


def naive_stderr(scores: Sequence[float]) -> float:
    """s / sqrt(n) with the sample standard deviation (ddof 1); NaN for fewer than two questions."""
    x = np.asarray(scores, dtype=float)
    return float(np.std(x, ddof=1) / np.sqrt(x.size)) if x.size > 1 else float("nan")


def accuracy_summary(correct: Sequence[bool], clusters: Sequence, *, confidence: float = 0.95,
                     n_resamples: int = N_RESAMPLES, seed: int = 0) -> dict:
    """An accuracy (fraction) with what says how far to trust it.

    Returns {"k", "n", "accuracy", "ci_exact" (two-sided Clopper-Pearson), "stderr" (naive), "stderr_clustered",
    "n_clusters", "ci_cluster_bootstrap" (percentile interval over cluster resamples)}; None values when n == 0.
    """
    from cader.calibrate.binomial import clopper_pearson_interval

    x = np.asarray(correct, dtype=bool)
    k, n = int(x.sum()), int(x.size)
    codes, n_clusters = cluster_codes(clusters, n)
    if n == 0:
        return {"k": 0, "n": 0, "accuracy": None, "ci_exact": [None, None], "stderr": None,
                "stderr_clustered": None, "n_clusters": 0, "ci_cluster_bootstrap": [None, None]}
    lo, hi = clopper_pearson_interval(k, n, confidence)
    tail = (1.0 - confidence) / 2.0
    means = bootstrap_means(x.astype(float), n_resamples, seed, clusters=codes)
    b_lo, b_hi = np.quantile(means, [tail, 1.0 - tail])

    def finite(v: float) -> float | None:
        return float(v) if np.isfinite(v) else None

    return {"k": k, "n": n, "accuracy": k / n, "ci_exact": [float(lo), float(hi)], "stderr": finite(naive_stderr(x)),
            "stderr_clustered": finite(clustered_stderr(x, codes)), "n_clusters": n_clusters,
            "ci_cluster_bootstrap": [float(b_lo), float(b_hi)]}


def paired_bootstrap_diff(a: Sequence[float], b: Sequence[float], *, n_resamples: int = N_RESAMPLES,
                          seed: int = 0, confidence: float = 0.95, clusters: Sequence | None = None) -> dict:
    """CI of mean(a) - mean(b) over paired resamples of questions, or of videos when `clusters` labels each
    question's video (both systems always see the same draw).

    Returns {"diff", "low", "high", "n", "n_resamples", "confidence", "p_le_zero", "p_ge_zero", "resampled",
    "n_clusters"}, where p_le_zero is the fraction of resampled differences <= 0 (how often the sign flips when a
    is ahead) and "resampled" is "questions" or "clusters".
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"paired arrays must be 1-D and equally long, got {a.shape} and {b.shape}")
    diffs = bootstrap_means(a - b, n_resamples, seed, clusters=clusters)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(diffs, [tail, 1.0 - tail])
    n_clusters = int(a.size) if clusters is None else cluster_codes(clusters, a.size)[1]
    return {"diff": float(a.mean() - b.mean()), "low": float(low), "high": float(high), "n": int(a.size),
            "n_resamples": int(n_resamples), "confidence": confidence,
            "p_le_zero": float(np.mean(diffs <= 0)), "p_ge_zero": float(np.mean(diffs >= 0)),
            "resampled": "questions" if clusters is None else "clusters", "n_clusters": n_clusters}


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
                   top_k: int = 3, confidence: float = 0.95, clusters: Sequence | None = None) -> dict:
    """Bootstrap stability of the ranking of systems (rows of `scores`, shape (systems, questions)); with
    `clusters` (each question's video) whole videos are resampled."""
    scores = np.asarray(scores, dtype=float)
    if scores.ndim != 2 or scores.shape[0] != len(names):
        raise ValueError("scores must have shape (len(names), n_questions)")
    full_rank = ranks_descending(scores.mean(axis=1))
    means = bootstrap_means(scores, n_resamples, seed, clusters)  # (R, systems)
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
            "n_resamples": int(n_resamples), "top_k": top_k,
            "resampled": "questions" if clusters is None else "clusters"}
