"""Per-judgment scores (AgentVidBench App. D.2/D.3): pure functions on numbers."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from cader.evaluate.judge.schema import STATUS_CREDIT


def traj_score(scores: Mapping[str, int | None]) -> float | None:
    """Traj = (1/2) * mean of the applicable (non-null) axis scores (App. D.2); None when no axis applies."""
    applicable = [s for s in scores.values() if s is not None]
    if not applicable:
        return None
    return sum(applicable) / len(applicable) / 2.0


def mc_rate(statuses: Iterable[str]) -> float | None:
    """MC-rate = (n_covered + 0.5 * n_partial) / N_milestones (App. D.3/F); None without milestones."""
    statuses = list(statuses)
    if not statuses:
        return None
    return sum(STATUS_CREDIT[s] for s in statuses) / len(statuses)
