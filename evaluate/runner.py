"""Run CADER over a benchmark: one predictions.jsonl record per sample, appended and flushed as each finishes.

- Resume: ids already in the output file are skipped; a torn last line (killed mid-write) is cut off first.
- Wall-clock time: each sample's `seconds` goes to `timings.jsonl` beside predictions.jsonl (`timings_path`), keyed
  by benchmark and sample id, not into its record: the records of two machines (or two runs) are then equal byte
  for byte, and only the timings file differs. Reports read it back (`read_timings`).
- Shards: `--shard I/N` (0 <= I < N) takes whole videos, balanced by duration (`cader.evaluate.shards`), and writes
  `predictions.shard-I-of-N.jsonl`; `merge_shards` joins them (deduplicated) into predictions.jsonl.
- Failures: a sample that cannot be run is still written, with `error` set, `pred` null and `correct` false, and
  whatever stage records were produced before the failure.
- `group_by_video` (the CLI's default): a video's questions run one after the other (in flight together with
  `concurrency`), in order of each video's first question, through one VideoReader and one memo of its decodes
  (`cader.evaluate.video_groups`: F1 decoded once per video and frame setting; crops and RGR contexts shared when
  asked twice). Records equal per-question processing but for timings and `cost.frames_shared` /
  `cost.forwards_shared` (what of the question's own cost came from work done for an earlier question or variant).
  Without it, each sample opens its video (one VideoReader, reused by Stage 1, the crops and RGR).
- Whole-video frames: F1 and every RGR context are taken from one decode of the video, F1 and the r1 lattice
  (`cader.evaluate.method.whole_video`), so a video is decoded whole once (shared by its questions when grouped);
  crops decode their own window.
- Decode-ahead at every `concurrency` when grouped, 1 included: the next sample's whole-video decode is made on a
  worker thread
  while the current samples wait on the model (`cader.evaluate.in_flight`).
- Records are built through `cader.contracts.records.PredictionRecord` and read back through it: a line that
  breaks the contract is logged with file, line and field and skipped like a torn line (its sample counts as
  not done, so a resumed run runs it again). A sample never counts twice: a second record of one
  (benchmark, sample_id) is logged and left out, and one run at a time writes a predictions file
  (`cader.contracts.jsonl.exclusive_writer`; a second run on the same file is refused, naming the first's pid).
- The video is checked against the benchmark before it is asked about: a decoded duration that differs from the
  stated one by more than `duration_tolerance` fails the sample ("duration_mismatch": the file is not the video the
  question is about, e.g. a truncated download or another video under its name); a container with one frame (an
  image renamed .mp4, say) is run but flagged (`flags`: ["single_frame: ..."]).
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterable, Sequence
from contextlib import ExitStack
from pathlib import Path

from cader.calibrate.margin import InvalidLogits
from cader.contracts.jsonl import exclusive_writer, jsonl_line
from cader.contracts.records import PredictionRecord, build_record
from cader.evaluate.backends.base import Backend
from cader.evaluate.in_flight import records_in_flight, stage1_ahead
from cader.evaluate.method.config import CaderConfig
from cader.evaluate.method.stage1 import Cost, run_stage1
from cader.evaluate.method.stage1_reuse import Stage1ReuseError, mismatch, reuse_stage1, stage1_fingerprint
from cader.evaluate.method.stage2 import Stage2Failure, run_stage2
from cader.evaluate.method.whole_video import WholeVideo
from cader.evaluate.predictions_files import (  # re-exported: the runner's callers read and merge through it
    RecordWriter,
    merge_shards,
    read_records,
    read_timings,
    record_key,
    timings_path,
)
from cader.evaluate.shards import PREDICTIONS, parse_shard, predictions_path, select_samples
from cader.evaluate.video_groups import GroupsInFlight, VideoGroup, group_by_video
from cader.vlm.files import write_atomic
from cader.vlm.video import VideoReader, VideoReadError
from tqdm import tqdm

__all__ = ["PREDICTIONS", "merge_shards", "parse_shard", "predictions_path", "process_sample", "read_records",
           "read_timings", "run_samples", "run_variants", "select_samples", "timings_path"]
log = logging.getLogger(__name__)


class SampleError(ValueError):
    """A sample that cannot be asked (bad options/letters, bad duration)."""


class DurationMismatch(ValueError):
    """The decoded video is not as long as the benchmark says it is."""


# Released durations are rounded (whole seconds, minutes in LVBench, "~17:00" estimates in AgentVidBench's table) and
# re-encoded downloads gain or lose a few frames or a trailer; a wrong file (a truncated download, a clip saved
# under the long video's name) is off by far more. 5 s absorbs rounding on short clips, 10 % the rest.
DURATION_TOLERANCE_S = 5.0
DURATION_TOLERANCE_FRACTION = 0.10


def duration_tolerance(declared: float) -> float:
    """How far (seconds) a decoded duration may be from the benchmark's `declared` one: max(5 s, 10 %)."""
    return max(DURATION_TOLERANCE_S, DURATION_TOLERANCE_FRACTION * declared)


def check_duration(declared: float | None, decoded: float) -> None:
    """DurationMismatch when the benchmark states a duration and the decoded one is beyond the tolerance of it."""
    if declared is None:
        return
    tolerance = duration_tolerance(declared)
    if abs(decoded - declared) > tolerance:
        raise DurationMismatch(
            f"the video decodes to {decoded:.2f} s, the benchmark says {declared:g} s (tolerance {tolerance:g} s)"
        )


def video_flags(reader) -> list[str]:
    """Odd but runnable videos, as "<code>: <detail>": a single frame (an image container, or a still)."""
    flags = []
    if getattr(reader, "num_frames", None) == 1:  # readers standing in for a VideoReader may not count frames
        fmt = getattr(reader, "container_format", None)
        flags.append(f"single_frame: 1 frame of {reader.duration:.3f} s" + (f" ({fmt} container)" if fmt else ""))
    return flags


def base_record(sample) -> dict:
    record = {
        "benchmark": sample.benchmark,
        "sample_id": str(sample.sample_id),
        "video": sample.video,
        "duration": sample.duration,
        "question": sample.question,
        "options": list(sample.options),
        "letters": list(sample.letters),
        "answer": sample.answer,
    }
    if "question_id" in sample.meta:
        record["question_id"] = sample.meta["question_id"]
    record["meta"] = dict(sample.meta)
    return record


def check_sample(sample) -> None:
    letters = list(sample.letters)
    if len(letters) != len(sample.options):
        raise SampleError(f"{len(sample.options)} options but {len(letters)} letters")
    if not 2 <= len(letters) <= 26:
        raise SampleError(f"need 2..26 options (A..Z), got {len(letters)}")
    if len(set(letters)) != len(letters) or not all(len(x) == 1 and "A" <= x <= "Z" for x in letters):
        raise SampleError(f"letters must be distinct capitals A..Z, got {letters}")


def fingerprint_of(sample, main: Backend, cfg: CaderConfig) -> dict:
    return stage1_fingerprint(main.fingerprint(), cfg, sample.video, sample.question, sample.options, sample.letters)


def check_stage1_priors(samples: Iterable, priors: dict, main: Backend, cfg: CaderConfig) -> int:
    """Refuse (Stage1ReuseError) when a stored Stage-1 record of a sample to run was made by another model, other
    frame settings or for another sample; returns how many samples will reuse theirs."""
    reused = 0
    for sample in samples:
        stored = priors.get((sample.benchmark, str(sample.sample_id)))
        if stored is None:
            continue
        why = mismatch(stored.get("fingerprint"), fingerprint_of(sample, main, cfg))
        if why:
            raise Stage1ReuseError(f"--stage1_from: {sample.benchmark}/{sample.sample_id}: {why}")
        reused += 1
    return reused


def load_stage1_priors(path: str | Path) -> dict:
    """(benchmark, sample_id) -> the stored `stage1` block, for the records of `path` that have one."""
    return {record_key(r): r["stage1"] for r in read_records(path) if r.get("stage1") and not r.get("error")}


@functools.lru_cache(maxsize=8)
def _shape_of(path: str):
    from cader.calibrate.compute import text_shape_from_config

    config = Path(path) / "config.json"
    return text_shape_from_config(json.loads(config.read_text(encoding="utf-8"))) if config.is_file() else None


def text_shapes(main, verifier) -> tuple | None:
    """(main, verifier) language-model sizes from the models' config.json (what cost.flops counts at), or None
    when a backend names no model folder (a test's scripted backend): then no FLOPs are recorded."""
    paths = [backend.model_path() for backend in (main, verifier)]
    shapes = [_shape_of(str(p)) if p else None for p in paths]
    return None if shapes[0] is None else (shapes[0], shapes[1] or shapes[0])


def process_sample(
    sample,
    video_file: str | Path,
    main: Backend,
    verifier: Backend,
    cfg: CaderConfig,
    prior: dict | None = None,
    reader=None,
) -> dict:
    """Run CADER on one sample and return its predictions.jsonl record (never raises for a per-sample problem).

    `prior`: a stored Stage-1 block of this sample (already checked by `check_stage1_priors`); its raw logits stand
    in for the Stage-1 forward, and F1 is decoded only if the sample goes to Stage 2.
    `reader`: the video to read instead of opening `video_file` (a `VideoReader`, or a video group's
    `SampleReader`, which raises the group's open error where a VideoReader would have raised it).
    """
    record = base_record(sample)
    record.update(stage1=None, route=None, stage2=None, pred=None, correct=False)
    cost = Cost(shapes=text_shapes(main, verifier))
    error = None
    try:
        check_sample(sample)
        if reader is None:  # grouped runs and variants share one reader per video (cader.evaluate.video_groups)
            reader = VideoReader(video_file, decode_workers=cfg.decode_workers)
        if not reader.duration > 0:
            raise VideoReadError(video_file, f"zero duration ({reader.duration})")
        record["duration"] = round(float(reader.duration), 3)
        flags = video_flags(reader)
        if flags:  # kept on a sample that then fails too: they say what the file is
            record["flags"] = flags
            log.warning("%s/%s: %s: %s", sample.benchmark, sample.sample_id, video_file, "; ".join(flags))
        check_duration(sample.duration, float(reader.duration))
        whole = WholeVideo(reader, cfg, cost)   # F1 and the RGR contexts: one decode of the video's r1 grid
        if prior is not None:
            f1, s1 = None, reuse_stage1(prior, sample.letters, cfg)
        else:
            f1 = whole.f1()
            s1 = run_stage1(main, f1, sample.question, sample.options, sample.letters, cfg, cost)
        record["stage1"] = {**s1.record, "fingerprint": fingerprint_of(sample, main, cfg)}
        to_stage2 = cfg.runs_stage2 and (cfg.routes_all or not s1.exits)
        record["route"] = "stage2" if to_stage2 else "exit"
        pred = s1.pred
        if to_stage2:
            if f1 is None:  # proposals need the Stage-1 frames themselves
                f1 = whole.f1()
            record["stage2"] = run_stage2(sample, reader, f1, s1.pred, cfg, main, verifier, cost, whole)
            pred = record["stage2"]["pred"]
        record["pred"] = pred
        record["correct"] = None if sample.answer is None else pred == sample.answer
    except VideoReadError as err:
        error = str(err)  # "video_unreadable: <path>: <reason>"
    except InvalidLogits as err:
        error = f"invalid_logits: {err.reason}: {err}"
    except SampleError as err:
        error = f"bad_sample: {err}"
    except DurationMismatch as err:
        error = f"duration_mismatch: {video_file}: {err}"
    except Stage2Failure as err:
        record["stage2"] = err.partial
        error = f"stage2_failed: {err}"
    except Exception as err:  # noqa: BLE001 - a model/processor crash on one sample is recorded, the run goes on
        error = f"{'stage1' if record['stage1'] is None else 'stage2'}_failed: {type(err).__name__}: {err}"
    if error is not None:
        record["pred"], record["correct"] = None, False
    cost.stop()
    record["cost"] = cost.to_dict()
    record["error"] = error
    return build_record(PredictionRecord, record)


def run_samples(
    samples: Iterable,
    data_root: str | Path,
    out_file: str | Path,
    main: Backend,
    verifier: Backend,
    cfg: CaderConfig,
    video_path=None,
    progress: bool = True,
    retry_failed: bool = False,
    stage1_priors: dict | None = None,
    concurrency: int = 1,
    group_by_video: bool = False,
) -> dict:
    """Process every sample not yet in `out_file`; returns counts {"done_before", "ran", "failed", "flagged",
    "retried", "stage1_reused"}.

    `retry_failed`: records with `error` set (say an unreadable video the user has since replaced) are taken out of
    the file first (an atomic rewrite) and their samples run again, so each sample keeps one record.
    `stage1_priors` (`load_stage1_priors`): Stage-1 results to reuse; checked before anything runs.
    `concurrency`: samples in flight; their model calls are merged into batched calls (`BatchingBackend`). Records
    are still written in sample order, each as soon as it and every sample before it are done.
    `group_by_video`: take the samples video by video, sharing one reader and its decodes per video (module
    docstring); records are then written in that order. Off by default here, so that a caller's records stay as they
    were; `evaluate/run.py` turns it on.
    """
    with exclusive_writer(out_file):  # before the first read: a second run on this file is refused, not doubled
        return _run_samples(samples, data_root, Path(out_file), main, verifier, cfg, video_path, progress,
                            retry_failed, stage1_priors, concurrency, group_by_video)


def _run_samples(samples, data_root, out_file: Path, main, verifier, cfg, video_path, progress, retry_failed,
                 stage1_priors, concurrency, group_by_video) -> dict:
    if video_path is None:
        from cader.evaluate.benchmarks import video_path
    records = read_records(out_file)  # a torn last line is skipped here, cut by the appender
    retried = 0
    if retry_failed and any(r.get("error") for r in records):
        kept = [r for r in records if not r.get("error")]
        retried = len(records) - len(kept)
        write_atomic(out_file, (jsonl_line(r) for r in kept))
        records = kept
    done = {record_key(r) for r in records}
    todo = [s for s in samples if (s.benchmark, str(s.sample_id)) not in done]
    priors = stage1_priors or {}
    counts = {"done_before": len(done), "ran": 0, "failed": 0, "flagged": 0, "retried": retried,
              "stage1_reused": check_stage1_priors(todo, priors, main, cfg)}
    with RecordWriter(out_file) as appender:
        bar = tqdm(
            total=len(todo), desc=f"cader[{cfg.variant}]", unit="sample", disable=not progress, dynamic_ncols=True
        )
        for _sample, record in records_of(todo, main, verifier, cfg, lambda s: video_path(s, data_root),
                                          concurrency=concurrency, group_by_video=group_by_video, priors=priors):
            bar.update(1)
            appender.write(record)
            counts["ran"] += 1
            counts["failed"] += record["error"] is not None
            counts["flagged"] += bool(record.get("flags"))
            # no forced redraw: the bar keeps its own interval (in a log file, TQDM_MININTERVAL)
            bar.set_postfix(failed=counts["failed"], refresh=False)
    return counts


def records_of(samples: Sequence, main: Backend, verifier: Backend, cfg: CaderConfig, video_of, *,
               concurrency: int = 1, group_by_video: bool = True, priors: dict | None = None):
    """Run CADER on `samples` and yield `(sample, record)` as each record becomes final, in processing order: the
    samples' own order, or with `group_by_video` a video's questions together (videos in the order of their first
    question, `cader.evaluate.video_groups`), each video read through one group whose Stage-1 decode and repeated
    crops its questions share (`cost.frames_shared` counts what a record took from the group). Writes nothing:
    `run_samples` adds the output file and resume, the lmms-eval model its side file.

    Args:
        samples: the samples to run
        main: the main model's backend
        verifier: the verifier's backend (may be `main`)
        cfg: CADER's settings
        video_of: the video file of a sample
        concurrency: samples in flight; their model calls are merged into batched calls (`BatchingBackend`)
        group_by_video: read each video once for all its questions (records equal per-question processing)
        priors: Stage-1 results to reuse, by (benchmark, sample_id), already checked (`check_stage1_priors`)
    """
    priors = priors or {}
    groups = None
    order = list(samples)
    if group_by_video:
        groups = GroupsInFlight(order, lambda s: str(video_of(s)), cfg.decode_workers, GROUP_CACHE_BYTES)
        order = groups.order
    # a reader keeping F1 for the sample's own request (the reader class looked up when used: tests replace it)
    read_ahead = stage1_ahead(video_of, cfg, opener=lambda *args, **kwargs: VideoReader(*args, **kwargs))

    def prepare(sample):
        """The sample's Stage-1 decode, done ahead while earlier samples wait on the model (`in_flight`)."""
        if (sample.benchmark, str(sample.sample_id)) in priors:  # F1 only if it goes to Stage 2
            return None
        if groups is None:
            return read_ahead(sample)
        groups.prepare(sample, lambda reader: WholeVideo(reader, cfg, Cost()).whole())
        return None

    def one(sample, main_backend, verifier_backend, prepared=None):
        prior = priors.get((sample.benchmark, str(sample.sample_id)))
        video = video_of(sample)
        if groups is None:
            record = process_sample(sample, video, main_backend, verifier_backend, cfg, prior, reader=prepared)
            return sample, record, None
        view = groups.acquire(sample)
        try:
            return sample, process_sample(sample, video, main_backend, verifier_backend, cfg, prior,
                                          reader=view), view
        finally:
            view.release()
            groups.release(sample)

    # Grouped (the CLI's default), decode ahead at every concurrency: one sample at a time (the HF backend's
    # default) still decodes the next video's F1 while this sample waits on the model.
    ahead = max(1, concurrency) if groups is not None else None
    for sample, record, view in records_in_flight(order, one, main, verifier, concurrency, prepare=prepare,
                                                  ahead=ahead):
        if view is not None:  # final here: every sample before it is done (video_groups, cost attribution)
            record["cost"].update(frames_shared=view.frames_shared(), forwards_shared=0)
        yield sample, record


# Pixels of windowed samplings (crops, RGR contexts) a grouped run keeps per video for its later questions: about
# 1.7 contexts at the paper's 768 x 65,536 px (150 MB each; questions that differ rarely propose the same window),
# every context at small frame budgets. Held per video group in flight, on top of its F1.
GROUP_CACHE_BYTES = 256 * 2**20


def run_variants(
    samples: Sequence,
    data_root: str | Path,
    out_dir: str | Path,
    main: Backend,
    verifier: Backend,
    cfgs: dict[str, CaderConfig],
    video_path=None,
    progress: bool = True,
    group_by_video: bool = True,
):
    """Every variant of `cfgs` on every sample, sample by sample, sharing decoded frames and repeated model calls
    (`cader.evaluate.variants`); writes `<out_dir>/<variant>/predictions.jsonl` (resumable per variant).
    `group_by_video`: the samples video by video, every question and variant of a video sharing its decodes
    (otherwise each sample shares only among its variants). Returns ({variant: counts}, SharedWork)."""
    from cader.evaluate.variants import SharedWork

    if video_path is None:
        from cader.evaluate.benchmarks import video_path
    out_dir, work = Path(out_dir), SharedWork()
    files = {v: out_dir / v / PREDICTIONS for v in cfgs}
    with ExitStack() as locks:
        for file in files.values():
            locks.enter_context(exclusive_writer(file))
        return _run_variants(samples, data_root, files, main, verifier, cfgs, video_path, progress, work,
                             group_by_video)


# A sample's variants ask again for the crops and RGR contexts an earlier variant decoded: keep up to this many
# pixel bytes of them (about 7 contexts at the paper's settings; one variant's Stage 2 is at most 2K + 1 = 5).
VARIANT_CACHE_BYTES = 2**30


def _run_variants(samples, data_root, files, main, verifier, cfgs, video_path, progress, work, grouped):
    from cader.evaluate.variants import MemoBackend

    done = {v: {record_key(r) for r in read_records(f)} for v, f in files.items()}
    counts = {v: {"done_before": len(done[v]), "ran": 0, "failed": 0} for v in cfgs}
    appenders = {v: RecordWriter(f) for v, f in files.items()}
    first = next(iter(cfgs.values()))
    groups = group_by_video(samples, lambda s: str(video_path(s, data_root))) if grouped else [[s] for s in samples]
    bar = tqdm(total=len(samples), desc=f"cader[{','.join(cfgs)}]", unit="sample", disable=not progress)
    try:
        for group_samples in groups:
            todo = [[v for v in cfgs if (s.benchmark, str(s.sample_id)) not in done[v]] for s in group_samples]
            if not any(todo):
                bar.update(len(group_samples))
                continue
            video = video_path(group_samples[0], data_root)
            group = VideoGroup(video, first.decode_workers, work, stage2_bytes=VARIANT_CACHE_BYTES)
            try:
                for i, (sample, variants) in enumerate(zip(group_samples, todo)):
                    memo_main = MemoBackend(main, work)
                    memo_verifier = memo_main if verifier is main else MemoBackend(verifier, work)
                    for variant in variants:
                        view = group.view((i, list(cfgs).index(variant)))
                        hits = memo_main.hits + (memo_verifier.hits if memo_verifier is not memo_main else 0)
                        record = process_sample(sample, video, memo_main, memo_verifier, cfgs[variant], reader=view)
                        view.release()
                        hits = memo_main.hits + (memo_verifier.hits if memo_verifier is not memo_main else 0) - hits
                        record["cost"].update(frames_shared=view.frames_shared(), forwards_shared=hits)
                        appenders[variant].write(record)
                        counts[variant]["ran"] += 1
                        counts[variant]["failed"] += record["error"] is not None
                    bar.update(1)
            finally:
                group.close()
    finally:
        bar.close()
        for appender in appenders.values():
            appender.close()
    return counts, work
