"""The training items of the mix: positions into the sources' plan tables, and a sequence that makes each item
(a `PlannedSample`) only when it is indexed.

A rank holds the plan tables memory-mapped and, per training item, two integers (which source, which row of its
plan table) and the planned length the batch sampler groups by; the rows themselves stay in the Arrow files.
"""
from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from cader.train.collate import PlannedSample
from cader.train.formats import sample_from_json
from cader.train.plan_cache import plan_from_json
from datasets import Dataset


def trainable_rows(plan: Dataset) -> np.ndarray:
    """Positions (in the plan table) of the rows that were planned, not skipped, in order."""
    return np.flatnonzero(pc.is_null(plan.data.table.column("skip")).to_numpy(zero_copy_only=False))


def plan_skips(plan: Dataset) -> list[tuple[str, str]]:
    """(reason, detail) of every skipped row, in order."""
    table = plan.data.table.select(["skip", "skip_detail"])      # never touch the samples' pages
    skipped = table.filter(pc.is_valid(table.column("skip")))
    return [(r["skip"], r["skip_detail"]) for r in skipped.to_pylist()]


def ratio_rows(rows: np.ndarray, ratio: float | None, rng: random.Random) -> np.ndarray:
    """`round(ratio * n)` of the rows: a seeded draw kept in order below 1, whole repeats plus a draw above.

    `rng` makes exactly the calls a draw over the items themselves would (random.sample looks only at the
    population's length), so the same seed picks the same samples as a list of items did.
    """
    n = len(rows)
    if ratio is None or ratio == 1.0 or n == 0:
        return rows
    target = max(1, round(ratio * n))
    if target <= n:
        return rows[np.sort(rng.sample(range(n), target))]
    extra = np.asarray(rng.sample(range(n), target % n), dtype=np.int64)
    return np.concatenate([np.tile(rows, target // n), rows[extra]])


def reduction_counts(plan: Dataset, rows: np.ndarray) -> dict[str, int]:
    """How many of the chosen rows lost frames / pixels / target tokens to the budget, by step."""
    steps = pc.list_flatten(plan.data.table.column("reductions").take(pa.array(rows, type=pa.int64())))
    return dict(Counter(steps.to_pylist()))


class PlannedRows(Sequence):
    """The training items in order: item i is row `rows[i]` of source `sources[i]` (its Sample from the source's
    tool-free rows, its plan from the plan table at the same position), made when indexed."""

    def __init__(self, samples: list[Dataset], plans: list[Dataset], media_roots: list[str], sources: np.ndarray,
                 rows: np.ndarray):
        self.samples = [table.select_columns(["sample"]) for table in samples]
        self.plans = [plan.select_columns(["plan", "num_tokens"]) for plan in plans]
        self.media_roots, self.sources, self.rows = media_roots, sources, rows
        self.lengths = np.zeros(len(rows), dtype=np.int64)       # planned tokens: what batches are grouped by
        for source, plan in enumerate(plans):
            mine = sources == source
            self.lengths[mine] = plan.data.table.column("num_tokens").to_numpy()[rows[mine]]

    @classmethod
    def concat(cls, samples: list[Dataset], plans: list[Dataset], media_roots: list[str], chosen: list[np.ndarray]
               ) -> PlannedRows:
        sources = np.concatenate([np.full(len(c), s, dtype=np.int32) for s, c in enumerate(chosen)] or [[]])
        rows = np.concatenate(chosen or [[]]).astype(np.int64)
        return cls(samples, plans, media_roots, sources.astype(np.int32), rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        source, row = int(self.sources[index]), int(self.rows[index])
        record = self.plans[source][row]
        return PlannedSample(sample_from_json(self.samples[source][row]["sample"]), self.media_roots[source],
                             plan_from_json(record["plan"]), record["num_tokens"])

    def __eq__(self, other) -> bool:
        if not isinstance(other, Sequence):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None
