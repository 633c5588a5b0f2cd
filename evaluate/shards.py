"""Shards by video: `--shard I/N` and `--devices N` give each rank whole videos, balanced by how much video its
questions look at.

A video's questions run together (`cader.evaluate.video_groups`: one decode of the Stage-1 frames for all of them),
so a shard must hold all of a video's questions or the decode is paid on several ranks. Videos are assigned by the
longest-processing-time rule (`balance`): heaviest first, each to the rank with the least load so far, ties to the
lower rank, which is deterministic and at most 4/3 of the best possible maximum load (Graham 1969).

A video's weight is the sum over its questions of the video's declared duration (`Sample.duration`): every question
runs Stage 1 over the whole video, so a rank's work grows with both. A question whose duration the benchmark does
not state counts the median of the stated ones; when none is stated every question counts 1, and the weights are
question counts.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path

PREDICTIONS = "predictions.jsonl"


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """ "I/N" -> (I, N) with 0 <= I < N."""
    if text in (None, ""):
        return None
    try:
        index, count = (int(part) for part in str(text).split("/"))
    except ValueError:
        raise ValueError(f"--shard must look like I/N (e.g. 0/4), got {text!r}") from None
    if count < 1 or not 0 <= index < count:
        raise ValueError(f"--shard {text}: need 0 <= I < N (shards are numbered from 0)")
    return index, count


def predictions_path(out_dir: str | Path, shard: tuple[int, int] | None) -> Path:
    if shard is None:
        return Path(out_dir) / PREDICTIONS
    return Path(out_dir) / f"predictions.shard-{shard[0]}-of-{shard[1]}.jsonl"


def balance(weights: Sequence[float], n: int) -> list[int]:
    """The rank (0..n-1) of each item: longest processing time first.

    Items in order of decreasing weight (equal weights: the earlier item first) each go to the rank with the least
    total weight so far (equal loads: the lower rank).

    Args:
        weights: One non-negative weight per item.
        n: Number of ranks (>= 1).
    """
    if n < 1:
        raise ValueError(f"need at least one rank, got {n}")
    ranks, loads = [0] * len(weights), [0.0] * n
    for item in sorted(range(len(weights)), key=lambda i: (-weights[i], i)):
        rank = min(range(n), key=lambda r: (loads[r], r))
        ranks[item] = rank
        loads[rank] += weights[item]
    return ranks


def _declared(duration) -> float | None:
    ok = isinstance(duration, (int, float)) and not isinstance(duration, bool) and math.isfinite(duration)
    return float(duration) if ok and duration > 0 else None


def video_weights(samples: Sequence) -> dict[str, float]:
    """{video: weight} in order of first appearance (see the module docstring for the weight).

    Args:
        samples: Benchmark samples (`video`, `duration`).
    """
    stated = [d for d in (_declared(s.duration) for s in samples) if d is not None]
    fallback = statistics.median(stated) if stated else 1.0
    weights: dict[str, float] = {}
    for sample in samples:
        duration = _declared(sample.duration)
        weights[sample.video] = weights.get(sample.video, 0.0) + (fallback if duration is None else duration)
    return weights


def shard_videos(samples: Sequence, count: int) -> dict[str, int]:
    """{video: rank} for `count` ranks, balanced by `video_weights`.

    Args:
        samples: Benchmark samples.
        count: Number of shards.
    """
    weights = video_weights(samples)
    return dict(zip(weights, balance(list(weights.values()), count)))


def select_samples(samples: Sequence, limit: int | None = None, shard: tuple[int, int] | None = None) -> list:
    """The first `limit` samples (in benchmark order), then this shard's share of them: every question of the
    videos `shard_videos` gives to rank I, in benchmark order.

    Args:
        samples: The benchmark's samples.
        limit: Keep only the first N (None: all).
        shard: (I, N): rank I of N (None: everything).
    """
    chosen = list(samples[:limit] if limit is not None else samples)
    if shard is not None:
        ranks = shard_videos(chosen, shard[1])
        chosen = [s for s in chosen if ranks[s.video] == shard[0]]
    return chosen
