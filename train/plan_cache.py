"""The token-budget plan of every tool-free row of one source: a `datasets` map, fingerprinted and cached on disk.

Planning a sample opens its media headers (a decord open per video, ~30 ms), so a 228.8K-sample mix would spend
hours before step 1 on every rank. The plan is computed once, by `num_proc` processes, and stored as an Arrow table
beside the rows; every later run and every rank memory-maps it. Its fingerprint covers everything a plan reads:
- the tool-free rows (their own fingerprint: the source file, its format and name, the parsing code);
- `plan_key`: the budget (every BudgetConfig field), the processor (vision geometry, pixel settings, tokenizer,
  chat template), the media root, the planning code (this module, cader.train.budget, cader.train.collate) and
  PLAN_VERSION;
- `media_state`: the size and mtime of every media file the rows name, taken on every run, because `datasets`
  tracks the source file but not the media a row names.
When the fingerprint misses (a row, a media file or the source changed), the last plan of the same source, budget
and processor seeds the map: a row whose Sample and media stats are unchanged keeps its plan, so only what changed
is probed again. Per row the plan table holds the row's position, a hash of its Sample, the plan (or why the
sample is skipped) and the media stats it saw; the Sample itself stays in the rows' table.

Files in the cache folder: `<source file name>.<fingerprint>.plan*.arrow` (one per process of the map), and
`<source file name>.<key digest>.last.json`, which names the last plan of a key. A superseded plan stays (it is
small, and a process on another node may still map it). A plan file that cannot be read is reported with a warning
naming it and planned again.
"""
from __future__ import annotations

import glob
import hashlib
import json
import logging
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from cader.train.budget import BudgetConfig, BudgetPlan
from cader.train.collate import SampleEncoder, SkipSample
from cader.train.formats import sample_from_json
from cader.train.mix_rows import PARSED_FEATURES, code_digest, digest, quiet_datasets, workers_for
from cader.vlm.files import write_json_atomic
from datasets import Dataset, Features, List, Value, concatenate_datasets

log = logging.getLogger(__name__)

PLAN_VERSION = 2
# tokenized to fingerprint the tokenizer: special tokens, digits of timestamps, the answer tags, non-ASCII text
_TOKENIZER_PROBE = "<|im_start|>assistant\n<think>at <12.5 seconds> the 3 cats</think><answer>B</answer><|im_end|> é漢"
# a worker process is worth starting for this many rows (a video header probe is ~30 ms, a text-only plan ~1 ms)
PLAN_ROWS_PER_WORKER = 64
PLAN_BAR_ROWS = 1_000             # a progress bar for a source this large; a bar per small source is noise
PLAN_BATCH = 1_000               # rows per map batch = per record batch: mapping a table touches a page per batch
# plans only: the samples stay in the rows' table, whose positions the plan table shares
PLAN_FEATURES = Features({"row": PARSED_FEATURES["row"], "sample_hash": Value("string"), "plan": Value("string"),
                          "num_tokens": Value("int64"), "skip": Value("string"), "skip_detail": Value("string"),
                          "reductions": List(Value("string")), "media_stats": Value("string"),
                          "planned": Value("bool")})
PLAN_CODE = (__name__, "cader.train.budget", "cader.train.collate")


def default_plan_workers() -> int:
    return max(1, min(8, os.cpu_count() or 1))


@dataclass
class CacheStats:
    """What one source's planning did; goes into data_report.json."""

    file: str | None = None          # the plan table's (first) file
    hits: int = 0                    # rows whose plan was reused (from this fingerprint's table or the last plan)
    misses: int = 0                  # rows planned now
    rebuilt: str | None = None       # why an existing plan file was discarded (unreadable)
    write_error: str | None = None   # why the configured cache folder could not be used

    def as_report(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None or k == "file"}


def cache_line(report: dict) -> str:
    """One source's planning in this run, as every line that reports it says it: prepare_data's pass when it ran in
    this process (it planned; setup then only read back what it wrote, all hits), else setup's own pass."""
    planned = report.get("prepare_data", report)
    return (f"plan cache: {planned.get('misses', 0)} rows planned by this run, {planned.get('hits', 0)} reused "
            "from an earlier run")


# ---- identities -------------------------------------------------------------------------------------------------

def processor_fingerprint(encoder: SampleEncoder) -> dict:
    """Everything of the processor a plan depends on: vision geometry, pixel settings, token counts, template."""
    proc, tok = encoder.processor, encoder.tokenizer
    template = getattr(proc, "chat_template", None) or getattr(tok, "chat_template", None)
    return {
        "geometry": asdict(encoder.geometry),
        "video_size": dict(getattr(proc.video_processor, "size", {}) or {}),
        "image_size": dict(getattr(getattr(proc, "image_processor", None), "size", {}) or {}),
        "vocab": len(tok),
        "probe_ids": digest(tok(_TOKENIZER_PROBE, add_special_tokens=False)["input_ids"]),
        "chat_template": digest(template),
    }


def plan_key(source_path: str | Path, fmt: str, name: str, media_root: str | Path, budget: BudgetConfig,
             processor: dict) -> dict:
    """What a plan depends on besides the rows and the media files themselves."""
    return {"version": PLAN_VERSION, "source": str(Path(source_path).resolve()), "format": fmt, "name": name,
            "media_root": str(Path(media_root).resolve()), "budget": asdict(budget), "processor": processor,
            "code": code_digest(*PLAN_CODE)}


def media_stats(paths: list[str], media_root: str) -> list:
    """[size, mtime_ns] of each media file, in order; None for a file that is not there."""
    out = []
    for path in paths:
        try:
            st = os.stat(os.path.join(media_root, path))
            out.append([st.st_size, st.st_mtime_ns])
        except OSError:
            out.append(None)
    return out


def media_state(rows: Dataset, media_root: str) -> str:
    """Digest of the stats of every distinct media file the source's rows name (one stat per file, however many
    rows). Read from the table under the tool-free index, so rows the filter dropped count too: gathering the
    kept rows' paths first would cost a copy of the column, and a change to a dropped row's media only makes
    the map reuse every plan."""
    paths = sorted(pc.unique(pc.list_flatten(rows.data.table.column("media"))).to_pylist())
    return digest([paths, media_stats(paths, media_root)])


# ---- the mapped function ----------------------------------------------------------------------------------------

def plan_from_json(text: str) -> BudgetPlan:
    data = json.loads(text)
    data["video_sizes"] = [tuple(s) for s in data["video_sizes"]]
    data["image_sizes"] = [tuple(s) for s in data["image_sizes"]]
    return BudgetPlan(**data)


class PlanRows:
    """The plan `map`'s function: a batch of tool-free rows -> their PLAN_FEATURES, reused from the seed (the last
    plan of the same key) where the row's Sample and media stats are unchanged, else planned by the encoder."""

    REUSED = ("plan", "num_tokens", "skip", "skip_detail", "reductions")

    def __init__(self, encoder, media_root: str, seed: Dataset | None):
        self.encoder, self.media_root, self.seed = encoder, media_root, seed
        self._seed_rows = None

    def seeded(self, rows: list[int]) -> dict[int, dict]:
        """The seed's record of each of these row positions that it has."""
        if self.seed is None:
            return {}
        if self._seed_rows is None:      # positions ascend: the rows keep file order through every step
            self._seed_rows = self.seed.data.table.column("row").to_numpy()
        wanted = np.asarray(rows, dtype=np.int64)
        at = np.minimum(np.searchsorted(self._seed_rows, wanted), len(self._seed_rows) - 1)
        found = self._seed_rows[at] == wanted
        records = self.seed.data.table.take(pa.array(at[found])).to_pylist()
        return {record["row"]: record for record in records}

    def plan(self, sample_json: str) -> dict:
        try:
            planned = self.encoder.plan(sample_from_json(sample_json), self.media_root)
        except SkipSample as err:
            return {"plan": None, "num_tokens": 0, "skip": err.reason, "skip_detail": err.detail, "reductions": []}
        steps = [step.split()[0] for step in planned.plan.steps]
        # vars, not asdict: the plan holds only numbers, strings and lists of them (asdict deep-copies, ~4x slower)
        return {"plan": json.dumps(vars(planned.plan)), "num_tokens": planned.num_tokens, "skip": None,
                "skip_detail": None, "reductions": steps}

    def __call__(self, batch: dict) -> dict:
        out = {key: [] for key in PLAN_FEATURES}
        seeds = self.seeded(batch["row"])
        for row, sample_json, paths in zip(batch["row"], batch["sample"], batch["media"]):
            sample_hash = hashlib.sha256(sample_json.encode()).hexdigest()[:32]
            stats = json.dumps(media_stats(paths, self.media_root))
            seed = seeds.get(row)
            reuse = seed is not None and seed["sample_hash"] == sample_hash and seed["media_stats"] == stats
            result = {k: seed[k] for k in self.REUSED} if reuse else self.plan(sample_json)
            record = {**result, "row": row, "sample_hash": sample_hash, "media_stats": stats, "planned": not reuse}
            for key, value in record.items():
                out[key].append(value)
        return out


# ---- the cached map ---------------------------------------------------------------------------------------------

def _pointer(cache_dir: Path, key: dict) -> Path:
    return cache_dir / f"{Path(key['source']).name}.{digest(key)[:16]}.last.json"


def _load_seed(pointer: Path) -> Dataset | None:
    """The last plan of this key; None when there is none or it cannot be read."""
    try:
        files = json.loads(pointer.read_text())["files"]
        seed = concatenate_datasets([Dataset.from_file(f) for f in files])
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException):
        return None
    return seed if seed.features == PLAN_FEATURES else None


def empty_plan() -> Dataset:
    return Dataset.from_dict({key: [] for key in PLAN_FEATURES}, features=PLAN_FEATURES)


def _map_plan(rows: Dataset, planner: PlanRows, fingerprint: str, target: Path, workers: int, name: str) -> Dataset:
    """The plan `map`: `datasets` memory-maps this fingerprint's files when they exist, else writes them."""
    with quiet_datasets(len(rows) < PLAN_BAR_ROWS):
        planned = rows.map(planner, batched=True, batch_size=PLAN_BATCH, features=PLAN_FEATURES,
                           remove_columns=rows.column_names,
                           new_fingerprint=fingerprint, cache_file_name=str(target), desc=f"plan {name}",
                           num_proc=workers_for(len(rows), workers, PLAN_ROWS_PER_WORKER))
    if planned.features != PLAN_FEATURES:
        raise ValueError(f"columns {list(planned.features)} are not a plan's")
    return planned


def _cached_plan(load, files: list[Path]) -> tuple[Dataset | None, str | None]:
    """(the plan these files hold, None) or, when they cannot be read, (None, why) after deleting them."""
    try:
        return load(), None
    except (OSError, ValueError, pa.ArrowException) as err:
        reason = f"{type(err).__name__}: {err}"
        log.warning("plan cache %s is unreadable (%s); planning again", ", ".join(map(str, files)), reason)
        for file in files:
            file.unlink(missing_ok=True)
        return None, reason


def plan_source(rows: Dataset, encoder, media_root: str, key: dict, cache_dir: Path, workers: int = 1
                ) -> tuple[Dataset, CacheStats]:
    """The plan table of a source's tool-free rows (same order), memory-mapped from `cache_dir`, and what it cost.

    Misses are planned by `workers` processes (`num_proc`); the table equals the one a single process makes.
    """
    if len(rows) == 0:
        return empty_plan(), CacheStats()
    fingerprint = digest(["plan", rows._fingerprint, digest(key), media_state(rows, media_root)])
    target = cache_dir / f"{Path(key['source']).name}.{fingerprint}.plan.arrow"
    stats = CacheStats(file=str(target))

    def run(seed: Dataset | None) -> Dataset:
        return _map_plan(rows, PlanRows(encoder, media_root, seed), fingerprint, target, workers, key["name"])

    existing = sorted(map(Path, glob.glob(glob.escape(str(cache_dir / target.stem)) + "*.arrow")))
    if existing:
        planned, stats.rebuilt = _cached_plan(lambda: run(None), existing)
        if planned is not None:
            stats.hits = len(planned)
            return planned, stats
    planned = run(_load_seed(_pointer(cache_dir, key)))
    stats.misses = int(pc.sum(planned.data.table.column("planned")).as_py() or 0)
    stats.hits = len(planned) - stats.misses
    files = [f["filename"] for f in planned.cache_files]
    write_json_atomic(_pointer(cache_dir, key), {"fingerprint": fingerprint, "files": files}, durable=False)
    return planned, stats
