"""Cache of the token-budget plan of every sample of one source file, and parallel media probing on a miss.

Planning a sample opens its media headers (a decord open of every video, ~30 ms each), so a 228.8K-sample mix spends
hours before step 1. The plan only depends on things that are cheap to check, so it is computed once and stored:

- one cache file per (resolved source path, format and source name, media root, every BudgetConfig field, the
  processor: vision geometry, pixel settings, tokenizer and chat template; CACHE_VERSION). Any of them changing gives
  another file name, so such a file is never read for another budget or processor;
- the header records the source file's identity (size, mtime_ns) as planned; the file is rewritten whenever the
  source, a row or a media file changed, so the next run finds the current identity again;
- inside it one entry per planned row, keyed by the row position and a hash of the row's content (the parsed
  Sample), with the size and mtime_ns of each of its media files: an edited row or a touched/replaced video re-plans
  that row only (an edited source file keeps every unchanged row's entry). An entry holds the plan or the reason the
  sample was skipped, so a warm run reports the same counts.

File format (JSONL): a header line {"version", "key", "source_identity"}, one line per entry, a trailer {"end": n}. A file that does not
parse, has another version or lacks its trailer (a torn write) is reported with a warning naming it and rebuilt.
Writes are atomic: a uniquely named tmp file then os.replace (cader.vlm.files), so ranks writing the same cache
at once each leave a whole file.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from cader.train.budget import BudgetConfig, BudgetPlan
from cader.train.collate import PlannedSample, SampleEncoder, SkipSample
from cader.train.formats import Sample
from cader.vlm.files import write_atomic

log = logging.getLogger(__name__)

CACHE_VERSION = 1
# tokenized to fingerprint the tokenizer: special tokens, digits of timestamps, the answer tags, non-ASCII text
_TOKENIZER_PROBE = "<|im_start|>assistant\n<think>at <12.5 seconds> the 3 cats</think><answer>B</answer><|im_end|> é漢"


def default_plan_workers() -> int:
    return max(1, min(8, os.cpu_count() or 1))


@dataclass
class CacheStats:
    """What one source's planning did; goes into data_report.json."""

    file: str | None = None          # the cache file (None: caching off)
    hits: int = 0
    misses: int = 0
    rebuilt: str | None = None       # why an existing file was discarded (corrupt, unreadable)
    write_error: str | None = None

    def as_report(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None or k == "file"}


@dataclass
class PlanResult:
    """The outcome of planning one row, in a form that round-trips through the cache."""

    planned: PlannedSample | None = None
    skip: SkipSample | None = None
    entry: dict = field(default_factory=dict)


# ---- identities -------------------------------------------------------------------------------------------------

def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def processor_fingerprint(encoder: SampleEncoder) -> dict:
    """Everything of the processor a plan depends on: vision geometry, pixel settings, token counts, template."""
    proc, tok = encoder.processor, encoder.tokenizer
    template = getattr(proc, "chat_template", None) or getattr(tok, "chat_template", None)
    return {
        "geometry": asdict(encoder.geometry),
        "video_size": dict(getattr(proc.video_processor, "size", {}) or {}),
        "image_size": dict(getattr(getattr(proc, "image_processor", None), "size", {}) or {}),
        "vocab": len(tok),
        "probe_ids": _digest(tok(_TOKENIZER_PROBE, add_special_tokens=False)["input_ids"]),
        "chat_template": _digest(template),
    }


def cache_key(source_path: str | Path, fmt: str, name: str, media_root: str | Path, budget: BudgetConfig,
              processor: dict) -> dict:
    """What every entry of a cache file depends on (its name is a hash of this)."""
    return {"version": CACHE_VERSION, "source": str(Path(source_path).resolve()), "format": fmt, "name": name,
            "media_root": str(Path(media_root).resolve()), "budget": asdict(budget), "processor": processor}


def source_identity(key: dict) -> list:
    """[size, mtime_ns] of the source file now."""
    st = os.stat(key["source"])
    return [st.st_size, st.st_mtime_ns]


def cache_path(cache_dir: str | Path, key: dict) -> Path:
    """<cache_dir>/<source file name>.<hash of the key>.plan.jsonl"""
    return Path(cache_dir) / f"{Path(key['source']).name}.{_digest(key)[:16]}.plan.jsonl"


def row_hash(sample: Sample) -> str:
    """Hash of everything of the parsed row a plan reads (dataclasses.asdict would deep-copy: 4x slower)."""
    return _digest([sample.source, sample.sample_id, [[t.role, t.parts] for t in sample.turns], sample.meta])[:32]


def media_stats(sample: Sample, media_root: str | Path) -> list:
    """[size, mtime_ns] of each media file of the sample, in order; None for a file that is not there."""
    out = []
    for m in sample.media:
        try:
            st = os.stat(Path(media_root) / m["path"])
            out.append([st.st_size, st.st_mtime_ns])
        except OSError:
            out.append(None)
    return out


# ---- entries ----------------------------------------------------------------------------------------------------

def _plan_to_json(plan: BudgetPlan) -> dict:
    return asdict(plan)


def _plan_from_json(data: dict) -> BudgetPlan:
    data = dict(data)
    data["video_sizes"] = [tuple(s) for s in data["video_sizes"]]
    data["image_sizes"] = [tuple(s) for s in data["image_sizes"]]
    return BudgetPlan(**data)


def _result_from_entry(entry: dict, sample: Sample, media_root: str) -> PlanResult:
    if "skip" in entry:
        reason, detail = entry["skip"]
        return PlanResult(skip=SkipSample(reason, detail), entry=entry)
    plan = _plan_from_json(entry["plan"])
    return PlanResult(planned=PlannedSample(sample, media_root, plan, entry["num_tokens"]), entry=entry)


def _plan_row(encoder: SampleEncoder, row: int, digest: str, sample: Sample, media_root: str, stats: list
              ) -> PlanResult:
    base = {"row": row, "hash": digest, "media": stats}
    try:
        planned = encoder.plan(sample, media_root)
    except SkipSample as err:
        return PlanResult(skip=err, entry={**base, "skip": [err.reason, err.detail]})
    entry = {**base, "plan": _plan_to_json(planned.plan), "num_tokens": planned.num_tokens}
    return PlanResult(planned=planned, entry=entry)


class ThreadSafeEncoder(SampleEncoder):
    """The same planning, with tokenizer and chat-template calls under one lock.

    HF fast tokenizers can raise "Already borrowed" when one instance is used from several threads; those calls take
    well under a millisecond, while the media probing they are interleaved with (decord open, PIL header) releases
    the GIL and is what runs in parallel.
    """

    def __init__(self, base: SampleEncoder):
        self.__dict__.update(base.__dict__)
        self._lock = threading.RLock()

    def _count(self, text: str) -> int:
        with self._lock:
            return super()._count(text)

    def texts(self, sample: Sample) -> tuple[str, str]:
        with self._lock:
            return super().texts(sample)


# ---- the cache file ---------------------------------------------------------------------------------------------

def read_cache(path: Path, key: dict) -> tuple[dict[int, dict], list | None, str | None]:
    """(entries by row, source identity recorded in the header, why the file was discarded: None if it was absent
    or whole). Never raises."""
    if not path.is_file():
        return {}, None, None
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
        header = json.loads(lines[0])
        if header.get("version") != CACHE_VERSION or header.get("key") != json.loads(json.dumps(key)):
            raise ValueError("header does not match this source/budget/processor")
        trailer = json.loads(lines[-1])
        if not isinstance(trailer, dict) or trailer.get("end") != len(lines) - 2:
            raise ValueError("truncated (no end marker)")
        entries = {}
        for line in lines[1:-1]:
            entry = json.loads(line)
            if not isinstance(entry, dict) or not {"row", "hash", "media"} <= entry.keys() or not (
                    "skip" in entry or {"plan", "num_tokens"} <= entry.keys()):
                raise ValueError(f"malformed entry {line[:80]!r}")
            if "skip" in entry:   # the shapes _result_from_entry reads, checked here so a hit cannot fail later
                reason, detail = entry["skip"]
                if not isinstance(reason, str) or not isinstance(detail, str):
                    raise ValueError(f"malformed skip entry {line[:80]!r}")
            else:
                _plan_from_json(entry["plan"])
                int(entry["num_tokens"])
            entries[int(entry["row"])] = entry
        return entries, header.get("source_identity"), None
    except (OSError, UnicodeDecodeError, ValueError, IndexError, TypeError, KeyError, AttributeError) as err:
        reason = f"{type(err).__name__}: {err}"
        log.warning("plan cache %s is unreadable (%s); rebuilding it", path, reason)
        return {}, None, reason


def write_cache(path: Path, key: dict, entries: list[dict], identity: list | None = None) -> None:
    """Atomic (cader.vlm.files.write_atomic: a tmp name unique to the call, then os.replace). Raises OSError."""
    header = json.dumps({"version": CACHE_VERSION, "key": key, "source_identity": identity}) + "\n"
    lines = (json.dumps(entry) + "\n" for entry in entries)
    write_atomic(path, itertools.chain([header], lines, [json.dumps({"end": len(entries)}) + "\n"]))


# ---- planning one source ----------------------------------------------------------------------------------------

def plan_rows(encoder: SampleEncoder, rows: list[tuple[int, Sample]], media_root: str | Path,
              cache_file: Path | None = None, key: dict | None = None, workers: int = 1
              ) -> tuple[list[PlanResult], CacheStats]:
    """Plan (row position, sample) pairs in order, from the cache where the row and its media are unchanged.

    Misses are planned on `workers` threads; results come back in input order and equal the serial plan.
    The cache file is rewritten (atomically) when anything was planned or the file was unusable.
    """
    media_root = str(media_root)
    stats = CacheStats(file=str(cache_file) if cache_file is not None else None)
    cached: dict[int, dict] = {}
    recorded = identity = None
    if cache_file is not None:
        identity = source_identity(key)
        cached, recorded, stats.rebuilt = read_cache(cache_file, key)
    planner = ThreadSafeEncoder(encoder) if workers > 1 else encoder

    def one(item: tuple[int, Sample]) -> tuple[PlanResult, bool]:
        row, sample = item
        digest, media = row_hash(sample), media_stats(sample, media_root)
        entry = cached.get(row)
        if entry is not None and entry["hash"] == digest and entry["media"] == media:
            return _result_from_entry(entry, sample, media_root), True
        return _plan_row(planner, row, digest, sample, media_root, media), False

    if workers > 1 and len(rows) > 1:
        # chunks: a future per row would cost more than a cache hit; small enough that misses spread over threads
        size = max(1, min(256, len(rows) // (8 * workers)))
        chunks = [rows[i:i + size] for i in range(0, len(rows), size)]
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="plan") as pool:
            outcomes = [o for chunk in pool.map(lambda c: [one(item) for item in c], chunks) for o in chunk]
    else:
        outcomes = [one(item) for item in rows]
    results = [r for r, _ in outcomes]
    stats.hits = sum(hit for _, hit in outcomes)
    stats.misses = len(outcomes) - stats.hits
    stale = len(cached) != stats.hits or recorded != identity    # rows gone, or an edit that kept every row
    if cache_file is not None and (stats.misses or stats.rebuilt or stale or not cache_file.is_file()):
        try:
            write_cache(cache_file, key, [r.entry for r in results], identity)
        except OSError as err:
            stats.write_error = f"{type(err).__name__}: {err}"
            log.warning("cannot write plan cache %s (%s); planning is not cached", cache_file, err)
    return results, stats
