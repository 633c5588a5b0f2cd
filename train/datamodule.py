"""LightningDataModule over the CoT mix: read sources, drop tool-call samples, budget every sample, batch by length.

Every sample that does not make it into training is counted per source and reason, and its id is written to
`<default_root_dir>/data_report.json` (bad input is never dropped silently).

The mix lives in Arrow tables (HF `datasets`, memory-mapped): reading, the tool filter (`cader.train.mix_rows`) and
the token-budget plan (`cader.train.plan_cache`) are fingerprinted `map`/`filter` steps cached beside each source,
so a rank holds the tables mapped from disk plus two integers per training item (`cader.train.mix_index`), never
the rows as Python objects. Under a Trainer, `prepare_data` (local rank 0 of each node, before the other ranks start
`setup`) fills the caches once, so the ranks' `setup` only maps them.
"""
from __future__ import annotations

import atexit
import json
import logging
import math
import os
import random
import shutil
import tempfile
from dataclasses import asdict, dataclass, fields
from functools import partial
from pathlib import Path

import lightning as L
import numpy as np
import torch
from cader.train.budget import BudgetConfig, TokenBudget
from cader.train.collate import LengthGroupedBatchSampler, PlannedSample, SampleEncoder
from cader.train.dataset_info import DatasetInfoError, SharegptAttr, load_entry
from cader.train.decode_failures import (
    DECODE_FAILURES,
    DecodeFailureLog,
    failure_report,
    read_rank_files,
)
from cader.train.formats import FORMATS
from cader.train.loading import BatchCollator, PlannedDataset, ResumableLoader
from cader.train.mix_index import PlannedRows, plan_skips, ratio_rows, reduction_counts, trainable_rows
from cader.train.mix_rows import parse_rows, quiet_datasets, raw_rows, row_errors, tool_count, tool_free_rows
from cader.train.plan_cache import (
    cache_line,
    default_plan_workers,
    plan_key,
    plan_source,
    processor_fingerprint,
)
from cader.train.source_report import errors_by_kind, failed_sources, loss_warnings, read_report
from cader.vlm.files import write_atomic
from datasets import Dataset as ArrowDataset

log = logging.getLogger(__name__)


@dataclass
class Source:
    name: str
    format: str                      # longvt | video_r1 | longvideo_reason | sharegpt
    path: str = ""                   # relative paths are taken under the data module's release_root when it is set
    media_root: str = ""             # media paths in the rows are relative to this (default: the data module's
                                     # media_root, else the file's folder)
    ratio: float | None = None       # keep round(ratio * n) samples (< 1 subsamples, > 1 repeats), seeded
    group: str = ""                  # sources reported together (e.g. the three image-CoT files of LongVT)
    dataset_info: str = ""           # sharegpt: a LLaMA-Factory dataset_info.json (or its data/ folder) whose
    dataset: str = ""                # entry `dataset` names the file (path may stay empty), columns and tags
    frame_cache: bool = True         # its videos go through data.frame_cache_dir when that is set (false: a source
                                     # of short clips, cheap to decode, whose frames are not worth the disk)


class SourceError(ValueError):
    """A source of the mix with no trainable row (wrong schema, wrong media root, ...): the run stops."""


@dataclass
class ReadSource:
    """One source file after reading, the tool filter and the media-path check (no processor needed)."""

    rows: ArrowDataset               # the tool-free rows with media inside the root, in file order
    errors: list                     # FormatError per bad row (schema, audio, media outside the root)
    tool_dropped: int
    n_rows: int


@dataclass(frozen=True)
class Batching:
    """How samples are batched and loaded.

    Args:
        batch_size: per-device micro-batch.
        num_workers: DataLoader worker processes that decode and tokenise samples (0: in the training process).
        seed: seed of the length-grouped sampler's shuffle (the epoch is added each epoch).
        mega_batch: length grouping: each shuffled run of batch_size * mega_batch samples is sorted by length
            before it is cut into micro-batches, so a batch holds samples of similar length (less padding).
    """

    batch_size: int = 1
    num_workers: int = 0
    seed: int = 0
    mega_batch: int = 32


@dataclass(frozen=True)
class Caches:
    """What is kept for later runs and ranks: the mix's plans and the decoded frames.

    Args:
        plan_cache_dir: where the mix's Arrow tables (rows read by `datasets`, the tool filter, the token-budget
            plans) are cached, so later runs and the other ranks memory-map them instead of reading, parsing
            and probing media again. "auto": a `.cader_plan_cache/` folder next to each source file (shared by
            every run and node that sees the data), or `<report_dir or default_root_dir>/plan_cache/` when that
            folder is not writable; a path: that folder for all sources; null or "": nothing is kept (the
            tables go to a temporary folder removed at exit). A plan is reused only while its row (position
            and content), the row's media files (size, mtime), the budget fields and the processor are
            unchanged; an edited source file or a changed media file re-plans only the rows it touches.
        plan_workers: processes (`datasets` num_proc) that parse rows and plan samples on a cache miss
            (default: min(8, CPU cores)); 1 works in this process. The tables are identical either way.
        frame_cache_dir: a folder that keeps each video sample's decoded frames, at its pixel budget, for every
            later epoch, run and rank (`cader.vlm.frame_cache`; fill it ahead with scripts/fill_frame_cache.py);
            the same frames and timestamps, without the decode. null or "": decode every time.
    """

    plan_cache_dir: str | None = "auto"
    plan_workers: int | None = None
    frame_cache_dir: str | None = None


@dataclass(frozen=True)
class DataSettings(Caches, TokenBudget, Batching):
    """SFTDataModule's grouped settings, one base class per group; their fields are keys of `data:` as they stand
    (`--data.batch_size`, `--data.max_length`), so configs and command lines name them without the group."""


class SFTDataModule(L.LightningDataModule):
    def __init__(self, sources: list[Source], processor_path: str = "", release_root: str = "", media_root: str = "",
                 max_source_loss: float = 0.05, report_dir: str | None = None, **settings):
        """
        Args:
            sources: the mix (name, format, path, media_root, optional ratio, group). A LLaMA-Factory sharegpt
                data set can be named by its dataset_info.json entry instead of a path: `{name, format: sharegpt,
                dataset_info: <data folder or its dataset_info.json>, dataset: <entry name>}`; the entry's
                file_name, columns and tags are then honoured (cader.train.dataset_info).
            processor_path: HF folder or hub id of the processor (linked to model.model_path by sft.py).
            release_root: folder of a downloaded release (e.g. LongVT-Parquet): relative source paths are file
                names inside it, so a whole release is pointed at with this one setting.
            media_root: folder the rows' media paths are relative to (e.g. the LongVT-Source download), for every
                source without its own media_root. A media path that is absolute or climbs out of it is a counted
                row error.
            max_source_loss: a source losing more than this fraction of its tool-free rows (row errors, missing
                media, budget drops) is reported with a loud warning; a source with no trainable row stops the run.
            report_dir: where data_report.json goes (default: the trainer's default_root_dir).
            settings: the fields of Batching, TokenBudget and Caches (DataSettings), by name.
        """
        super().__init__()
        s = DataSettings(**settings)
        self.sources = [src if isinstance(src, Source) else Source(**src) for src in sources]
        self.processor_path, self.batch_size, self.num_workers = processor_path, s.batch_size, s.num_workers
        self.seed, self.mega_batch, self.report_dir = s.seed, s.mega_batch, report_dir
        self.plan_cache_dir, self.frame_cache_dir = s.plan_cache_dir, s.frame_cache_dir
        self.release_root, self.media_root, self.max_source_loss = release_root, media_root, max_source_loss
        self.plan_workers = default_plan_workers() if s.plan_workers is None else max(1, int(s.plan_workers))
        self.budget = BudgetConfig(**{f.name: getattr(s, f.name) for f in fields(TokenBudget)})
        self.items: PlannedRows | None = None
        self.report: dict = {}
        self.processor = None
        self._loader: ResumableLoader | None = None
        self._prepared: dict[str, dict] = {}          # cache stats of prepare_data, reported by setup
        self._processor_fingerprint: dict | None = None
        self._reads: dict[str, ReadSource] | None = None
        self._cache_dirs: dict[str, Path] = {}        # per source, decided once (a fallback warns once)
        self._cache_errors: dict[str, str] = {}       # per source, why its configured cache folder is not used
        self._scratch: Path | None = None
        self.decode_failures = DecodeFailureLog()    # this rank's failed decodes while training

    def _load_processor(self):
        from cader.vlm.loading import load_processor

        if self.processor is None:
            # the template the export will carry: the base model's own plus the Qwen3 thinking switch
            self.processor = load_processor(self.processor_path, video_max_pixels=self.budget.video_max_pixels,
                                            image_max_pixels=self.budget.image_max_pixels, thinking_switch=True)
        return self.processor

    def _out_dir(self) -> str | None:
        if self.report_dir:
            return self.report_dir
        return self.trainer.default_root_dir if self.trainer is not None else None

    def _configured_cache_dir(self, src: Source) -> Path | None:
        if not self.plan_cache_dir:
            return None
        if self.plan_cache_dir != "auto":
            return Path(self.plan_cache_dir)
        beside = self.source_path(src).resolve().parent / ".cader_plan_cache"
        if os.access(beside if beside.is_dir() else beside.parent, os.W_OK):
            return beside
        fallback = Path(self._out_dir()) / "plan_cache" if self._out_dir() else None
        log.warning("source %s: %s is not writable; plan cache in %s", src.name, beside.parent, fallback or "(none)")
        return fallback

    def _cache_dir(self, src: Source) -> Path:
        """The folder of this source's tables: the configured cache, or a temporary folder when there is none or
        it cannot be written (warned once, and reported as the source's `write_error`)."""
        if src.name not in self._cache_dirs:
            folder = self._configured_cache_dir(src)
            problem = None if folder is None else _unwritable(folder)
            if problem:
                log.warning("cannot write plan cache %s (%s); planning is not cached", folder, problem)
                self._cache_errors[src.name] = problem
            self._cache_dirs[src.name] = folder if folder is not None and not problem else self._scratch_dir()
        return self._cache_dirs[src.name]

    def _scratch_dir(self) -> Path:
        if self._scratch is None:
            self._scratch = Path(tempfile.mkdtemp(prefix="cader_mix_"))
            atexit.register(shutil.rmtree, self._scratch, True)
        return self._scratch

    def _dataset_entry(self, src: Source) -> tuple[Path, SharegptAttr] | None:
        """The file and columns/tags of a source's dataset_info entry (None without one); SourceError if bad."""
        if not src.dataset_info:
            return None
        if src.format != "sharegpt" or not src.dataset:
            raise SourceError(f"source {src.name!r}: dataset_info needs format sharegpt and the data set's name "
                              f"(dataset), got format {src.format!r}, dataset {src.dataset!r}")
        info = Path(src.dataset_info)
        if self.release_root and not info.is_absolute():
            info = Path(self.release_root) / info
        try:
            return load_entry(info, src.dataset)
        except DatasetInfoError as err:
            raise SourceError(f"source {src.name!r}: {err}") from None

    def source_format_key(self, src: Source) -> str:
        """The format as plans are keyed: a dataset_info entry's columns and tags are part of what a row means."""
        entry = self._dataset_entry(src)
        return src.format if entry is None else f"{src.format}:{json.dumps(entry[1].as_dict(), sort_keys=True)}"

    def source_path(self, src: Source) -> Path:
        if src.dataset_info and not src.path:   # the entry's file_name, beside dataset_info.json
            return self._dataset_entry(src)[0]
        path = Path(src.path)
        return Path(self.release_root) / path if self.release_root and not path.is_absolute() else path

    def source_media_root(self, src: Source) -> str:
        return src.media_root or self.media_root or str(self.source_path(src).parent)

    def read_source(self, src: Source) -> ReadSource:
        """Read one source without any processor: rows, schema errors, the tool filter, media paths confined to
        the media root. Raises FileNotFoundError for a missing file, SourceError for one that does not parse."""
        path = self.source_path(src)
        if not path.is_file():
            where = f" (release_root {self.release_root!r})" if self.release_root else ""
            raise FileNotFoundError(f"source {src.name!r}: {path} not found{where}")
        try:
            if src.format not in FORMATS:
                raise ValueError(f"unknown format {src.format!r}; expected one of {FORMATS}")
            with quiet_datasets():
                entry = self._dataset_entry(src)
                parsed = parse_rows(raw_rows(path, self._cache_dir(src) / "datasets"), src.format, src.name, path,
                                    self.plan_workers, attr=entry[1] if entry else None)
                kept = tool_free_rows(parsed, self.plan_workers)
        except (ValueError, TypeError, OSError) as err:   # the file as a whole: not JSON, not parquet, not a list
            raise SourceError(f"source {src.name!r}: cannot read {path} as {src.format}: "
                              f"{type(err).__name__}: {err}") from None
        return ReadSource(kept, row_errors(parsed, path), tool_count(parsed), len(parsed))

    def read_all(self) -> dict[str, ReadSource]:
        """Every source read (no processor), or SourceError naming each source with nothing left to plan.
        Read once per data module (prepare_data, setup and --plan_only's early check share it)."""
        if self._reads is not None:
            return self._reads
        if not self.sources:   # nothing to train: the export would be the base model under a fine-tuned name
            raise SourceError("the mix has no sources (data.sources is empty): nothing to train")
        reads, unreadable = {}, []
        for src in self.sources:
            try:
                reads[src.name] = self.read_source(src)
            except (FileNotFoundError, SourceError) as err:   # every source is checked before the run stops
                unreadable.append(str(err))
        report = {name: read_report(r.n_rows, r.tool_dropped, errors_by_kind(r.errors)) for name, r in reads.items()}
        dead = unreadable + failed_sources({k: v for k, v in report.items() if not reads[k].rows})
        if dead:
            self.report = report
            self._write_report()
            raise SourceError("\n".join(dead))
        self._reads = reads
        return reads

    def _plan_source(self, src: Source, encoder: SampleEncoder, read: ReadSource):
        media_root = self.source_media_root(src)
        key = plan_key(self.source_path(src), self.source_format_key(src), src.name, media_root, self.budget,
                       self._fingerprint(encoder))
        plan, stats = plan_source(read.rows, encoder, media_root, key, self._cache_dir(src), self.plan_workers)
        stats.write_error = self._cache_errors.get(src.name)
        return plan, stats

    def _fingerprint(self, encoder: SampleEncoder) -> dict:
        if self._processor_fingerprint is None:
            self._processor_fingerprint = processor_fingerprint(encoder)
        return self._processor_fingerprint

    def _encoder(self) -> SampleEncoder:
        # uint8 pixels between the workers and the main process: a quarter of fp32's shared memory
        # (cader.train.pixels; SFTModule normalises them on the device)
        return SampleEncoder(self._load_processor(), self.budget, frame_cache_dir=self.frame_cache_dir,
                             uint8_pixels=True)

    def prepare_data(self) -> None:
        """Fill the caches once per node (Lightning runs this on local rank 0 while the other ranks wait)."""
        if not self.plan_cache_dir or self.items is not None:
            return
        reads = self.read_all()          # a dead source stops here, before any processor is loaded
        encoder = self._encoder()
        for src in self.sources:
            self._prepared[src.name] = self._plan_source(src, encoder, reads[src.name])[1].as_report()

    def setup(self, stage: str | None = None) -> None:
        if self.items is not None:
            return
        reads = self.read_all()
        self.encoder = self._encoder()
        rng = random.Random(self.seed)
        samples, plans, chosen, report = [], [], [], {}
        for src in self.sources:
            read = reads[src.name]
            plan, stats = self._plan_source(src, self.encoder, read)
            skipped = errors_by_kind(read.errors)
            for reason, detail in plan_skips(plan):
                skipped[reason].append(detail)
            trainable = trainable_rows(plan)
            rows = ratio_rows(trainable, src.ratio, rng)
            budget_steps = reduction_counts(plan, rows)
            cache = stats.as_report()
            if src.name in self._prepared:
                cache["prepare_data"] = self._prepared[src.name]
            report[src.name] = {**read_report(read.n_rows, read.tool_dropped, skipped), "group": src.group,
                                "budget_reductions": budget_steps, "trainable": len(trainable),
                                "train_samples": len(rows), "plan_cache": cache}
            log.info("source %s: %d rows, %d tool-call samples dropped, skipped %s, %d to train (budget: %s; %s)",
                     src.name, read.n_rows, read.tool_dropped, report[src.name]["skipped"], len(rows), budget_steps,
                     cache_line(cache))
            samples.append(read.rows)
            plans.append(plan)
            chosen.append(rows)
        self.report = report
        for message in loss_warnings(report, self.max_source_loss):
            log.warning("%s", message)
        dead = failed_sources({k: v for k, v in report.items() if v["trainable"] == 0})
        if dead:
            self._write_report()
            raise SourceError("\n".join(dead))
        media_roots = [self.source_media_root(src) for src in self.sources]
        self.items, self._reads = PlannedRows.concat(samples, plans, media_roots, chosen), None
        self._write_report()

    def _write_report(self) -> None:
        out_dir = self._out_dir()
        if out_dir is None or (self.trainer is not None and self.trainer.global_rank != 0):
            return
        from cader.contracts.provenance import collect_provenance

        warnings = loss_warnings(self.report, self.max_source_loss)
        sources = {name: dict(entry) for name, entry in self.report.items()}
        failed = read_rank_files(out_dir) if self.trainer is not None else list(self.decode_failures.failures)
        for name, entry in failure_report(failed).items():   # an unknown source ("?") still gets its entry
            sources.setdefault(name, {}).update(entry)
        write_atomic(Path(out_dir) / "data_report.json",
                     json.dumps({"sources": sources, "budget": asdict(self.budget), "warnings": warnings,
                                 "max_source_loss": self.max_source_loss, "decode_failed": len(failed),
                                 "provenance": collect_provenance()}, indent=1))

    def on_before_batch_transfer(self, batch, dataloader_idx: int):
        """Take the failed decodes off the batch (main process), count them, and rewrite the reports."""
        failed = batch.pop(DECODE_FAILURES, None) if isinstance(batch, dict) else None
        if failed:
            # this batch's place in training: `consumed` still counts the batches before it (the module sets it
            # at the batch's start, after this hook)
            loader = getattr(self, "_loader", None)
            place = ((loader.batch_sampler.epoch, loader.consumed) if isinstance(loader, ResumableLoader)
                     else (None, None))
            self.decode_failures.add(failed, *place)
            out_dir = self._out_dir()
            if out_dir is not None:
                rank = self.trainer.global_rank if self.trainer is not None else 0
                self.decode_failures.write_rank_file(out_dir, rank)
                self._write_report()
        return batch

    def frame_cache_items(self) -> list[PlannedSample]:
        """The training items whose videos training reads through the frame cache (their source's `frame_cache`
        is on): what scripts/fill_frame_cache.py fills."""
        keep = [i for i, src in enumerate(self.sources) if src.frame_cache]
        sources = getattr(self.items, "sources", None)
        if sources is None:
            return list(self.items)
        return [self.items[int(i)] for i in np.flatnonzero(np.isin(sources, keep))]

    @property
    def lengths(self):
        """Planned tokens per training item (a numpy array), what the batch sampler groups by."""
        return self.items.lengths

    def batches_per_rank(self, world_size: int) -> int:
        return math.ceil(math.ceil(len(self.items) / self.batch_size) / world_size)

    def train_dataloader(self) -> ResumableLoader:
        rank, world = (self.trainer.global_rank, self.trainer.world_size) if self.trainer is not None else (0, 1)
        sampler = LengthGroupedBatchSampler(self.lengths, self.batch_size, seed=self.seed, mega=self.mega_batch,
                                            rank=rank, world_size=world)
        self._resume_decode_failures(rank)
        names = [src.name for src in self.sources]
        uncached = frozenset(i for i, src in enumerate(self.sources) if not src.frame_cache)
        self._loader = ResumableLoader(PlannedDataset(self.items, self.encoder, names, uncached), batch_sampler=sampler,
                                       collate_fn=BatchCollator(self.encoder.pad_id), num_workers=self.num_workers,
                                       persistent_workers=False,
                                       # the workers' seeds come from this generator: seeded, a rerun's workers
                                       # draw the same random numbers (torch's default takes a fresh seed)
                                       generator=torch.Generator().manual_seed(self.seed + rank))
        self._loader.on_resume = partial(self._forget_refetched_failures, rank)
        return self._loader

    def finish_report(self) -> None:
        """At the end of training (SFTModule.on_train_end, all ranks): rank 0 merges every rank's decode
        failures into data_report.json (a failure on another rank reaches the report only through its rank file,
        and it may have come after rank 0's last write)."""
        if self.trainer is None or self._out_dir() is None or not self.report:
            return
        if self.trainer.world_size > 1:
            self.trainer.strategy.barrier("decode_failures")   # every rank's file is written
        self._write_report()

    def _forget_refetched_failures(self, rank: int, epoch: int, consumed: int) -> None:
        """On resume: forget the failures seen after the checkpoint (their batches are fetched again) and rewrite
        this rank's file, so the report counts them once."""
        if self.decode_failures.keep_seen_before(epoch, consumed):
            out_dir = self._out_dir()
            if out_dir is not None:
                self.decode_failures.write_rank_file(out_dir, rank)

    def _resume_decode_failures(self, rank: int) -> None:
        """A fresh fit starts this rank's failure file anew; a resumed one (ckpt_path) continues it."""
        out_dir = self._out_dir()
        if out_dir is None:
            return
        path = Path(out_dir) / "decode_failures" / f"rank{rank}.json"
        resuming = self.trainer is not None and self.trainer.ckpt_path is not None
        if resuming and path.is_file() and not len(self.decode_failures):
            self.decode_failures.add(json.loads(path.read_text()))
        elif not resuming:
            path.unlink(missing_ok=True)
            if rank == 0:   # files of ranks a previous, wider run had
                world = self.trainer.world_size if self.trainer is not None else 1
                for stale in path.parent.glob("rank*.json"):
                    if stale.stem[4:].isdigit() and int(stale.stem[4:]) >= world:
                        stale.unlink(missing_ok=True)


def _unwritable(folder: Path) -> str | None:
    """Why files cannot be created in `folder` (None when they can)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".probe.")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        return f"{type(err).__name__}: {err}"
    return None
