"""Samples that fail to decode while training (a video the planner could read but the decoder cannot), counted.

`PlannedDataset` runs inside DataLoader workers, whose counters die with them, and used to hand out the next
sample instead, so the neighbour was trained twice and the failure appeared only in a worker's log. Now a failed
item becomes a `DecodeFailure`; the collator drops it from its batch (the batch is one sample shorter, never
refilled with a duplicate) and carries it in the batch under `DECODE_FAILURES`; the data module takes it off in the
main process (`on_before_batch_transfer`), counts it per source and reason, and rewrites data_report.json. Every
rank keeps its own file `decode_failures/rank<r>.json` beside the report, which rank 0 merges into it.

Each failure carries where in training it was seen (epoch, batch of the epoch). A fit resumed from a checkpoint
fetches the batches after the checkpoint again, so the failures seen there before the interruption are forgotten
(`DecodeFailureLog.seen_before`) and counted again only when they happen again: the report counts the failures of
the run as it was trained, not of every attempt.
"""
from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

from cader.vlm.files import write_atomic

DECODE_FAILURES = "decode_failures"   # the batch key that carries the failed items to the main process


@dataclass(frozen=True)
class DecodeFailure:
    source: str
    sample_id: str
    reason: str
    detail: str
    epoch: int | None = None   # where it was seen in training (None: outside a fit, or a file of an older run)
    batch: int | None = None


def seen_before(failure: DecodeFailure, epoch: int, consumed: int) -> bool:
    """Whether `failure` was seen in a batch a checkpoint at (`epoch`, `consumed` batches of it) had trained; an
    untagged failure is kept (nothing says it will be fetched again)."""
    if failure.epoch is None or failure.batch is None:
        return True
    return (failure.epoch, failure.batch) < (epoch, consumed)


class DecodeFailureLog:
    """The decode failures one rank saw: per source, per reason, how many fetches failed and which samples."""

    def __init__(self):
        self.failures: list[DecodeFailure] = []

    def add(self, failures: list[dict | DecodeFailure], epoch: int | None = None, batch: int | None = None) -> None:
        """Log `failures`; `epoch` and `batch` (the fetch's place in training) tag those that carry none."""
        for f in failures:
            f = f if isinstance(f, DecodeFailure) else DecodeFailure(**f)
            if f.epoch is None and epoch is not None:
                f = DecodeFailure(f.source, f.sample_id, f.reason, f.detail, epoch, batch)
            self.failures.append(f)

    def keep_seen_before(self, epoch: int, consumed: int) -> int:
        """Forget the failures of batches a resume from (`epoch`, `consumed`) fetches again; returns how many."""
        kept = [f for f in self.failures if seen_before(f, epoch, consumed)]
        forgotten, self.failures = len(self.failures) - len(kept), kept
        return forgotten

    def __len__(self) -> int:
        return len(self.failures)

    def as_json(self) -> list[dict]:
        return [asdict(f) for f in self.failures]

    def write_rank_file(self, report_dir: str | Path, rank: int) -> Path:
        path = Path(report_dir) / "decode_failures" / f"rank{rank}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps(self.as_json(), indent=1))
        return path


def read_rank_files(report_dir: str | Path) -> list[DecodeFailure]:
    """Every rank's failures found beside the report (a rank that has not failed yet has no file)."""
    out = []
    for path in sorted((Path(report_dir) / "decode_failures").glob("rank*.json")):
        try:
            out += [DecodeFailure(**f) for f in json.loads(path.read_text())]
        except (OSError, ValueError, TypeError):   # mid-write on a shared disk: that rank is merged next time
            continue
    return out


def failure_report(failures: list[DecodeFailure]) -> dict[str, dict]:
    """Per source: {"decode_failed": {reason: failed fetches}, "decode_failed_ids": {reason: [sample: detail]}}
    (a sample failing in every epoch counts each time, and is listed once)."""
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    ids: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for f in failures:
        counts[f.source][f.reason] += 1
        line = f.detail if f.detail.startswith(f.sample_id) else f"{f.sample_id}: {f.detail}"
        if line not in ids[f.source][f.reason]:
            ids[f.source][f.reason].append(line)
    return {s: {"decode_failed": dict(counts[s]), "decode_failed_ids": {k: list(v) for k, v in ids[s].items()}}
            for s in counts}
