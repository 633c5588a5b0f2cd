"""The one definition of CADER's Stage-1 confidence (paper Eq. 2-3).

    P_i = exp(z_i / T) / sum_j exp(z_j / T)        (Eq. 2, paper default T = 2.0)
    M   = P_top1 - P_top2                           (Eq. 3)
    exit early iff M >= tau                         (Algorithm 1, line 10, paper default tau = 0.97)

Everything is float64 and goes through a log-softmax, so no exp() overflows. The early-exit region is
M close to 1, where ``1 - M`` computed as ``1.0 - margin`` would lose all its digits; ``one_minus_margin`` (of
``stage1_confidence``, ``margins_and_complements``) instead sums the probabilities that make up 1 - M = (1 - P_top1) + P_top2 = sum_{i != top1} P_i + P_top2,
every term non-negative, so there is no cancellation (z = [1000, 0] at T = 2 gives 2 e^-500, not 0).

Ties: the top-1 option is the lowest index among equal maxima (the first letter), and M = 0.
Evaluate imports ``stage1_confidence`` and ``exits_early`` from here so
routing and calibration can never disagree about what confidence means.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

PAPER_TEMPERATURE = 2.0  # Eq. 2: "T = 2.0 is an empirically chosen value"
PAPER_TAU = 0.97  # Algorithm 1 line 10 and "Adaptive Routing via Confidence": tau = 0.97
MIN_OPTIONS = 2
MAX_OPTIONS = 26  # letters A..Z (AgentVidBench has 26 options)


def logsumexp(x: np.ndarray, axis: int = -1, keepdims: bool = False) -> np.ndarray:
    """log(sum(exp(x))) along ``axis``, max-shifted; rows may hold -inf padding (not only -inf).

    A plain numpy version: ~3x faster than scipy's on the (n, K <= 26) arrays used here.
    """
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


class InvalidLogits(ValueError):
    """Logits that cannot define a confidence. ``reason`` is a short stable key used for counting."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason


def validate_logits(logits: Sequence[float] | np.ndarray) -> np.ndarray:
    """Return ``logits`` as a 1-D float64 array of 2..26 finite values, or raise InvalidLogits."""
    try:
        z = np.asarray(logits, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InvalidLogits("not_numeric", f"logits are not numbers: {exc}") from None
    if z.ndim != 1:
        raise InvalidLogits("not_a_vector", f"logits must be a flat list, got shape {z.shape}")
    if z.size < MIN_OPTIONS:
        raise InvalidLogits("too_few_options", f"need at least {MIN_OPTIONS} option logits, got {z.size}")
    if z.size > MAX_OPTIONS:
        raise InvalidLogits("too_many_options", f"at most {MAX_OPTIONS} option logits (A..Z), got {z.size}")
    if not np.all(np.isfinite(z)):
        bad = [i for i, v in enumerate(z) if not math.isfinite(v)]
        raise InvalidLogits("non_finite", f"logits contain NaN/inf at positions {bad}")
    return z


def validate_temperature(temperature: float) -> float:
    t = float(temperature)
    if not math.isfinite(t) or t <= 0.0:
        raise ValueError(f"temperature must be a finite positive number, got {temperature!r}")
    return t


def log_option_probs(
    logits: Sequence[float] | np.ndarray, temperature: float = PAPER_TEMPERATURE
) -> np.ndarray:
    """float64 log-softmax of z / T (log of Eq. 2)."""
    z = validate_logits(logits) / validate_temperature(temperature)
    return z - logsumexp(z)


def _margin_pair_from_logp(logp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of log-probabilities (may hold -inf padding) -> (M, 1 - M), each computed where it is accurate.

    Small M: P_top1 - P_top2 directly (exactly 0 on ties). Large M: 1 - M as the cancellation-free sum
    (1 - P_top1) + P_top2, with 1 - P_top1 = sum of the other probabilities (a logsumexp), and M = 1 - that.
    """
    ordered = -np.sort(-logp, axis=-1)  # descending; -inf padding sorts last
    p1, p2 = np.exp(ordered[..., 0]), np.exp(ordered[..., 1])
    direct = np.maximum(p1 - p2, 0.0)
    om_sum = np.exp(logsumexp(ordered[..., 1:], axis=-1)) + p2
    small = direct < 0.5
    m = np.where(small, direct, np.clip(1.0 - om_sum, 0.0, 1.0))
    om = np.where(small, 1.0 - direct, om_sum)
    return m, om


def margin(logits: Sequence[float] | np.ndarray, temperature: float = PAPER_TEMPERATURE) -> float:
    """Eq. 3: M = P_top1 - P_top2 of softmax(z / T), in [0, 1]; exactly 0 on a tie."""
    return float(_margin_pair_from_logp(log_option_probs(logits, temperature))[0])


def exits_early(margin_value: float, tau: float) -> bool:
    """Algorithm 1, line 10: the Stage-1 answer is returned iff M >= tau."""
    return bool(margin_value >= tau)


@dataclass(frozen=True)
class Stage1Confidence:
    index: int  # predicted option (0-based, same order as the letters)
    margin: float  # M = P_top1 - P_top2
    one_minus_margin: float  # 1 - M without cancellation
    probs: np.ndarray  # P_i at temperature T (float64)
    temperature: float


def stage1_confidence(
    logits: Sequence[float] | np.ndarray, temperature: float = PAPER_TEMPERATURE
) -> Stage1Confidence:
    """Everything Stage 1 needs from one vector of option logits, computed once."""
    logp = log_option_probs(logits, temperature)
    m, om = _margin_pair_from_logp(logp)
    return Stage1Confidence(
        index=int(np.argmax(logp)),
        margin=float(m),
        one_minus_margin=float(om),
        probs=np.exp(logp),
        temperature=float(temperature),
    )


# ---- vectorised versions over many samples (ragged option counts allowed) -------------------------------


def pad_logits(rows: Sequence[Sequence[float] | np.ndarray]) -> np.ndarray:
    """Stack ragged logit rows into an (n, K_max) float64 array padded with -inf (probability 0).

    Each row is validated; an invalid row raises InvalidLogits whose message names the row index.
    """
    validated = []
    for i, row in enumerate(rows):
        try:
            validated.append(validate_logits(row))
        except InvalidLogits as exc:
            raise InvalidLogits(exc.reason, f"row {i}: {exc}") from None
    width = max((len(r) for r in validated), default=MIN_OPTIONS)
    out = np.full((len(validated), width), -np.inf)
    for i, r in enumerate(validated):
        out[i, : len(r)] = r
    return out


def _as_padded(logits) -> np.ndarray:
    if isinstance(logits, np.ndarray) and logits.ndim == 2 and logits.dtype == np.float64:
        finite_or_pad = np.isfinite(logits) | (logits == -np.inf)
        if not finite_or_pad.all():
            raise InvalidLogits("non_finite", "padded logits contain NaN or +inf")
        if logits.shape[1] > MAX_OPTIONS or (np.isfinite(logits).sum(axis=1) < MIN_OPTIONS).any():
            raise InvalidLogits(
                "too_few_options", f"each padded row needs {MIN_OPTIONS}..{MAX_OPTIONS} logits"
            )
        return logits
    return pad_logits(logits)


def log_option_probs_batch(logits, temperature: float = PAPER_TEMPERATURE) -> np.ndarray:
    """(n, K) log-softmax of z / T; -inf padding stays -inf."""
    z = _as_padded(logits) / validate_temperature(temperature)
    return z - logsumexp(z, axis=1, keepdims=True)


def margins_and_complements(logits, temperature: float = PAPER_TEMPERATURE) -> tuple[np.ndarray, np.ndarray]:
    """(M, 1 - M) per sample, as ``stage1_confidence`` gives them for one."""
    return _margin_pair_from_logp(log_option_probs_batch(logits, temperature))


def margins(logits, temperature: float = PAPER_TEMPERATURE) -> np.ndarray:
    return margins_and_complements(logits, temperature)[0]


def top1_indices(logits) -> np.ndarray:
    return np.argmax(_as_padded(logits), axis=1)


def top1_probs(logits, temperature: float = PAPER_TEMPERATURE) -> np.ndarray:
    """P_top1 per sample (the confidence used by the reliability diagram and ECE)."""
    return np.exp(np.max(log_option_probs_batch(logits, temperature), axis=1))
