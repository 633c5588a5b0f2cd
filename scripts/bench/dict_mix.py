"""The SFT mix as SFTDataModule built it before the mix moved into Arrow tables: the baseline of B11
(scripts/bench/mix_memory.py) and of the equality test (tests/test_train_mix_arrow.py).

Every row of every source becomes Python objects on every rank (a `Sample` of turns and part dicts, then a
`PlannedSample` with its `BudgetPlan`), and plans are cached in one JSONL file per source: a header naming the
source, budget and processor, one entry per planned row keyed by row position, a hash of the parsed row and the
size and mtime of each of its media files, and a trailer. A warm run reads every source again, hashes every row,
stats every media file and rebuilds every plan from its entry; a miss is planned on a thread pool.

The parsing, the tool filter, the planning (`SampleEncoder.plan`), the ratio draw and the batching are the
product's own functions, so the two mixes differ only in where rows live and how plans are cached.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from cader.train.budget import BudgetPlan
from cader.train.collate import PlannedSample, SampleEncoder, SkipSample
from cader.train.formats import FormatError, MediaPathError, Sample, confine_sample, read_source
from cader.train.toolfree import filter_tool_free
from cader.vlm.files import write_atomic

CACHE_VERSION = 1


@dataclass
class DictSource:
    name: str
    format: str
    path: Path
    media_root: str
    ratio: float | None = None


@dataclass
class ReadRows:
    rows: list                        # (row position, Sample): parsed, media inside the root, tool-free
    errors: list                      # FormatError per bad row
    tool_dropped: int
    n_rows: int


def read_rows(src: DictSource) -> ReadRows:
    """One source as SFTDataModule.read_source read it: every row parsed into a Sample, then filtered."""
    samples, errors, position = [], [], {}
    for i, row in enumerate(read_source(src.format, src.path, src.name)):
        if isinstance(row, FormatError):
            errors.append(row)
            continue
        try:
            confine_sample(row)
        except MediaPathError as err:
            errors.append(FormatError(src.path, i, str(err), kind="media_outside_root"))
            continue
        position[id(row)] = i
        samples.append(row)
    kept, dropped = filter_tool_free(samples)
    return ReadRows([(position[id(s)], s) for s in kept], errors, dropped[src.name], len(samples) + len(errors))


# ---- the per-source JSONL plan cache ----------------------------------------------------------------------------

def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def cache_file(cache_dir: Path, src: DictSource, budget, processor: dict) -> tuple[Path, dict]:
    key = {"version": CACHE_VERSION, "source": str(src.path.resolve()), "format": src.format, "name": src.name,
           "media_root": str(Path(src.media_root).resolve()), "budget": asdict(budget), "processor": processor}
    return Path(cache_dir) / f"{src.path.name}.{_digest(key)[:16]}.plan.jsonl", key


def row_hash(sample: Sample) -> str:
    return _digest([sample.source, sample.sample_id, [[t.role, t.parts] for t in sample.turns], sample.meta])[:32]


def media_stats(sample: Sample, media_root: str) -> list:
    out = []
    for m in sample.media:
        try:
            st = os.stat(Path(media_root) / m["path"])
            out.append([st.st_size, st.st_mtime_ns])
        except OSError:
            out.append(None)
    return out


def read_cache(path: Path, key: dict) -> dict[int, dict]:
    """Entries by row position; {} when the file is absent, of another key or torn."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
        header, trailer = json.loads(lines[0]), json.loads(lines[-1])
    except (OSError, ValueError, IndexError):
        return {}
    if header.get("key") != json.loads(json.dumps(key)) or trailer.get("end") != len(lines) - 2:
        return {}
    return {entry["row"]: entry for entry in map(json.loads, lines[1:-1])}


def write_cache(path: Path, key: dict, entries: list[dict]) -> None:
    header = json.dumps({"version": CACHE_VERSION, "key": key, "source_identity": None}) + "\n"
    body = (json.dumps(entry) + "\n" for entry in entries)
    write_atomic(path, itertools.chain([header], body, [json.dumps({"end": len(entries)}) + "\n"]))


def _plan_from_json(data: dict) -> BudgetPlan:
    data = dict(data, video_sizes=[tuple(s) for s in data["video_sizes"]],
                image_sizes=[tuple(s) for s in data["image_sizes"]])
    return BudgetPlan(**data)


# ---- planning ---------------------------------------------------------------------------------------------------

class LockedEncoder(SampleEncoder):
    """The same planning with the tokenizer and chat-template calls under one lock (a fast tokenizer refuses
    concurrent use); the media probes between them run in parallel."""

    def __init__(self, base: SampleEncoder):
        self.__dict__.update(base.__dict__)
        self._lock = threading.RLock()

    def _count(self, text: str) -> int:
        with self._lock:
            return super()._count(text)

    def texts(self, sample: Sample) -> tuple[str, str]:
        with self._lock:
            return super().texts(sample)


def _plan_one(encoder, row: int, sample: Sample, media_root: str, cached: dict) -> tuple[object, dict, bool]:
    """(PlannedSample or SkipSample, the cache entry, whether it was a hit)."""
    digest, media = row_hash(sample), media_stats(sample, media_root)
    entry = cached.get(row)
    if entry is not None and entry["hash"] == digest and entry["media"] == media:
        if "skip" in entry:
            return SkipSample(*entry["skip"]), entry, True
        return PlannedSample(sample, media_root, _plan_from_json(entry["plan"]), entry["num_tokens"]), entry, True
    base = {"row": row, "hash": digest, "media": media}
    try:
        planned = encoder.plan(sample, media_root)
    except SkipSample as err:
        return err, {**base, "skip": [err.reason, err.detail]}, False
    return planned, {**base, "plan": asdict(planned.plan), "num_tokens": planned.num_tokens}, False


def plan_rows(encoder, rows: list, media_root: str, cache: tuple[Path, dict] | None, workers: int = 1
              ) -> tuple[list, int]:
    """(PlannedSample or SkipSample per row in order, cache hits); misses planned on `workers` threads."""
    cached = read_cache(*cache) if cache is not None else {}
    planner = LockedEncoder(encoder) if workers > 1 and isinstance(encoder, SampleEncoder) else encoder

    def chunk(items):
        return [_plan_one(planner, row, sample, media_root, cached) for row, sample in items]

    size = max(1, min(256, len(rows) // (8 * workers)))
    chunks = [rows[i:i + size] for i in range(0, len(rows), size)]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        outcomes = [o for part in pool.map(chunk, chunks) for o in part]
    hits = sum(hit for _, _, hit in outcomes)
    if cache is not None and (hits < len(outcomes) or len(cached) != hits):
        write_cache(cache[0], cache[1], [entry for _, entry, _ in outcomes])
    return [result for result, _, _ in outcomes], hits


def apply_ratio(items: list, ratio: float | None, rng: random.Random) -> list:
    if ratio is None or ratio == 1.0 or not items:
        return items
    target = max(1, round(ratio * len(items)))
    if target <= len(items):
        return sorted(rng.sample(items, target), key=items.index)
    return items * (target // len(items)) + rng.sample(items, target % len(items))


def build_items(sources: list[DictSource], encoder, budget, seed: int = 0, cache_dir: str | Path | None = None,
                processor: dict | None = None, workers: int = 1) -> tuple[list[PlannedSample], dict]:
    """The training items in SFTDataModule.setup's order, and per source the counts (rows, tool_dropped,
    trainable, train_samples, hits)."""
    rng = random.Random(seed)
    items, report = [], {}
    for src in sources:
        read = read_rows(src)
        cache = cache_file(Path(cache_dir), src, budget, processor or {}) if cache_dir else None
        results, hits = plan_rows(encoder, read.rows, src.media_root, cache, workers)
        planned = [r for r in results if isinstance(r, PlannedSample)]
        chosen = apply_ratio(planned, src.ratio, rng)
        report[src.name] = {"rows": read.n_rows, "tool_calls_dropped": read.tool_dropped,
                            "trainable": len(planned), "train_samples": len(chosen), "hits": hits}
        items += chosen
    return items, report
