"""The verifier threshold delta_v with a guarantee, from the verify steps of held-out predictions.jsonl files.

CADER accepts a crop iff the verifier's P_yes >= delta_v (Local Evidence Verification; paper 0.60). Where a row
states its evidence window (``meta["evidence_window"]``: our synthetic sets, LVBench's time references, ...), each
verified crop either holds the evidence or misses it. `calibrate.ltt.select_verifier_threshold` then picks the
lowest delta_v whose accepted crops miss the evidence with rate <= alpha_v, with probability >= 1 - delta.

Which crops: the first verify step of each sample. Samples are exchangeable, the steps within one sample are not,
and a later step exists only because the run's own threshold rejected an earlier crop; the first crop's P_yes does
not depend on the threshold the held-out run used, so it is the one observation per sample the test may use.
Rows that cannot contribute are counted by reason, never dropped silently.

Questions about one video share its difficulty, so their crops' misses are not independent trials either: with
``cluster_bound`` (calibrate/fit.py's default, as for tau) each threshold is tested on effective counts, accepted
crops and misses divided by the design effect of the misses over the videos (calibrate/clusters.py), a video being
its file whichever benchmarks ask about it (calibrate/videos.py).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from cader.calibrate.ltt import select_verifier_threshold
from cader.calibrate.videos import video_key
from cader.contracts.jsonl import LineProblem, iter_lines

PAPER_VERIFIER_THRESHOLD = 0.60  # CADER, Local Evidence Verification: accept iff P_yes >= 0.60
EVIDENCE_RULES = ("contains", "overlaps")


def misses_evidence(crop: Sequence[float], evidence: Sequence[float], rule: str = "contains") -> bool:
    """Whether a crop misses the evidence: it does not contain the whole window ("contains"), or does not even
    overlap it ("overlaps")."""
    if rule == "contains":
        return not (crop[0] <= evidence[0] and evidence[1] <= crop[1])
    if rule == "overlaps":
        return not (min(crop[1], evidence[1]) - max(crop[0], evidence[0]) > 0)
    raise ValueError(f"evidence rule must be one of {EVIDENCE_RULES}, got {rule!r}")


def _window(value) -> list[float] | None:
    ok = isinstance(value, list) and len(value) == 2 and all(
        isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in value)
    return [float(value[0]), float(value[1])] if ok and value[0] <= value[1] else None


def verify_observations(paths: Sequence[str | Path], rule: str = "contains",
                        ) -> tuple[np.ndarray, np.ndarray, list[tuple], Counter]:
    """(P_yes, misses the evidence, video) of the first verified crop of each sample, and the rows left out by
    reason. The video is its file, whichever benchmark asks (calibrate/videos.py); a row without one is a video of
    its own."""
    p_yes, miss, videos, left_out = [], [], [], Counter()
    seen = set()
    for path in paths:
        for line, row in iter_lines(Path(path)):
            if isinstance(row, LineProblem) or not isinstance(row, dict):
                left_out["malformed_row"] += 1
                continue
            key = (row.get("benchmark"), row.get("sample_id"))
            if key in seen:
                left_out["duplicate"] += 1
                continue
            seen.add(key)
            if row.get("error"):
                left_out["row_error"] += 1
                continue
            evidence = _window((row.get("meta") or {}).get("evidence_window"))
            if evidence is None:
                left_out["no_evidence_window"] += 1
                continue
            steps = (row.get("stage2") or {}).get("steps") or []
            first = next((s for s in steps if isinstance(s, dict) and s.get("phase") == "verify"), None)
            if first is None:
                left_out["no_verify_step"] += 1
                continue
            crop, p = _window(first.get("crop")), first.get("p_yes")
            if crop is None or not isinstance(p, (int, float)) or isinstance(p, bool) or not 0.0 <= p <= 1.0:
                left_out["unverified_or_malformed_step"] += 1  # the variant skips the verifier, or a bad step
                continue
            p_yes.append(float(p))
            miss.append(misses_evidence(crop, evidence, rule))
            videos.append(video_key(key[0], key[1], row.get("video")))
    return np.asarray(p_yes, np.float64), np.asarray(miss, bool), videos, left_out


def calibrate_verifier(paths: Sequence[str | Path], alpha_v: float, delta: float, rule: str = "contains",
                       min_accepted: int = 50, cluster_bound: bool = True) -> dict:
    """The calibration.json ``verifier`` block: the certified threshold (or why none), and the paper's 0.60 on the
    same crops. ``cluster_bound``: count videos, not questions (effective counts)."""
    p_yes, miss, videos, left_out = verify_observations(paths, rule)
    out = select_verifier_threshold(p_yes, miss, alpha_v, delta, min_accepted=min_accepted,
                                    clusters=videos if cluster_bound else None)
    paper_acc = p_yes >= PAPER_VERIFIER_THRESHOLD
    out.update(evidence_rule=rule, steps="first verify step per sample", left_out=dict(left_out),
               paper_threshold=PAPER_VERIFIER_THRESHOLD, paper_n_accepted=int(paper_acc.sum()),
               paper_miss_rate=float(miss[paper_acc].mean()) if paper_acc.any() else None)
    return out
