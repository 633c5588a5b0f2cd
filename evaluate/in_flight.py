"""Samples in flight, with the next samples' decode done ahead while these wait on the model.

With `--concurrency N` the runner processes N samples at once, each on its own thread, their model calls merged
by `BatchingBackend` into batches of up to N. On its own that pipeline runs in lockstep: the N threads decode their
videos, all N wait on one batched call, all N get their results back at once and decode the next N videos, while
the model waits. Decode and model take turns instead of overlapping: the run takes about
waves x (decode of N + one call), not waves x max(decode of N, one call) (`scripts/bench/overlap.py`, B9: 16
samples, 4 in flight, 2 s calls, wall / max(decode alone, model alone) 1.28-1.42 in lockstep, 1.08 with the decode
ahead, on 2 cores at load average 1-2).

`records_in_flight` adds a decode-ahead stage: `prepare(sample)` (open the video and decode its Stage-1 frames)
runs on `ahead` workers of its own, in sample order, up to `ahead` samples beyond those in flight, and the sample's
thread starts from what it prepared. So while N samples wait on the model, the next ones are being decoded, and when
the batch returns their threads go straight to the model with them. What stays bounded: at most
`concurrency + ahead` samples are between being taken up and being done, so at most that many hold Stage-1 frames.

At `concurrency` 1 (the HF backend's default) samples run one at a time on the calling thread, as the reference
order of work; given `ahead` (the grouped runner asks for one), the next samples are prepared on a worker meanwhile,
so the decode of the next video overlaps this sample's model calls there too.

`prepare` only does work the sample would do itself, and the sample checks it (a reader keeps a decode for the exact
frames and pixel budget it was made for: `VideoReader.keep`), so records are the same with or without it. A
`prepare` that raises is ignored: the sample then opens and decodes its video itself and records whatever fails.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from cader.evaluate.backends.base import Backend

log = logging.getLogger(__name__)


def records_in_flight(
    todo: Sequence,
    one: Callable,
    main: Backend,
    verifier: Backend,
    concurrency: int,
    prepare: Callable | None = None,
    ahead: int | None = None,
) -> Iterator:
    """Yield `one(sample, main, verifier, prepared)` for each sample of `todo`, in order.

    Args:
        todo: The samples, in the order their results are yielded.
        one: (sample, main backend, verifier backend, prepared or None) -> result; called on a sample thread.
        main: The main backend; with concurrency > 1, `one` gets a `BatchingBackend` around it.
        verifier: The verifier backend (the same object as `main` when one model does both).
        concurrency: Samples in flight, and the largest batch of merged model calls. 1: one sample at a time on the
            calling thread (the reference order of work), the next `ahead` prepared meanwhile (none by default).
        prepare: sample -> what `one` starts from (say a reader holding the Stage-1 frames), run ahead on worker
            threads; None: nothing ahead (`one` gets None).
        ahead: Samples prepared beyond those in flight, and the workers preparing them (None: `concurrency`, and
            none at concurrency 1; the runner asks for at least one).
    """
    if concurrency <= 1 or len(todo) <= 1:
        yield from _one_at_a_time(todo, one, main, verifier, prepare if len(todo) > 1 else None, ahead or 0)
        return
    from cader.evaluate.backends.batching import BatchingBackend

    ahead = concurrency if ahead is None else max(0, int(ahead))
    lock, left = threading.Lock(), [len(todo)]

    def in_flight() -> int:
        # Samples not done, at most one per thread: while that many remain, every thread is in `one`, or decoding
        # ahead, or about to take up its next sample. Counting only the samples inside `one` let the first thread back
        # from a batch go out alone while the others were between samples (on a busy machine, half the calls). A call
        # waits for the others at most the batcher's window.
        return min(concurrency, left[0])

    def batched(backend):
        # a backend whose calls may overlap (the server backend: each replica batches on its own) is called from the
        # sample threads directly: the batcher sends one merged call at a time, so a scoring batch would wait behind
        # a generation batch that another replica could have served
        if getattr(backend, "concurrent_calls", False):
            return backend
        return BatchingBackend(backend, max_batch=concurrency, in_flight=in_flight)

    wrapped_main = batched(main)
    wrapped_verifier = wrapped_main if verifier is main else batched(verifier)
    # Taken when a sample is submitted, given back when it is done (not when it is yielded: a slow sample at the
    # head must not stop the others from moving on).
    slots = threading.Semaphore(concurrency + ahead)

    def run(sample, prepared: Future | None):
        try:
            return one(sample, wrapped_main, wrapped_verifier, _prepared(sample, prepared))
        finally:
            with lock:
                left[0] -= 1
            slots.release()

    results: deque[Future] = deque()
    preparers = ThreadPoolExecutor(max(1, ahead), thread_name_prefix="cader-ahead") if prepare and ahead else None
    # Workers take the samples in order, so a video's questions (contiguous when grouped) are in flight together and
    # their requests reach the engine in the same batches (vLLM: one video prefill, then prefix-cache hits).
    samplers = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="cader-sample")
    try:
        for sample in todo:
            while not slots.acquire(timeout=0.05):  # meanwhile, hand out what is done, in order
                while results and results[0].done():
                    yield results.popleft().result()
            prepared = preparers.submit(prepare, sample) if preparers else None
            results.append(samplers.submit(run, sample, prepared))
            while results and results[0].done():
                yield results.popleft().result()
        while results:
            yield results.popleft().result()
    finally:
        samplers.shutdown(wait=True, cancel_futures=True)
        if preparers:
            preparers.shutdown(wait=True, cancel_futures=True)


def stage1_ahead(video_of: Callable, cfg, priors: dict | None = None, opener: Callable | None = None) -> Callable:
    """A `prepare` for `records_in_flight` that opens a sample's video and makes its whole-video decode (F1, with the
    r1 lattice where the RGR contexts come from it: `cader.evaluate.method.whole_video`), held by the reader
    (`VideoReader.keep`) for the sample's own request: hand the reader to `process_sample(..., reader=prepared)` and
    the sample decodes nothing twice. Ungrouped runs; a grouped run warms its video group.

    Args:
        video_of: sample -> its video file.
        cfg: The run's `CaderConfig` (r1, frame cap, pixel budget, decode workers), as Stage 1 samples with it.
        priors: Stored Stage-1 results by (benchmark, sample_id): those samples decode F1 only if they go to
            Stage 2, so nothing is decoded ahead for them.
        opener: (path, decode_workers=...) -> the reader (None: `VideoReader`).
    """
    from cader.evaluate.method.stage1 import Cost
    from cader.evaluate.method.whole_video import WholeVideo
    from cader.vlm.video import VideoReader

    opener = opener or VideoReader

    def prepare(sample):
        if priors and (sample.benchmark, str(sample.sample_id)) in priors:
            return None
        reader = opener(video_of(sample), decode_workers=cfg.decode_workers)
        # the sample's whole-video decode (F1, with the r1 lattice where Stage 2 takes its RGR contexts from it); the
        # sample's own call counts it
        reader.keep(WholeVideo(reader, cfg, Cost()).whole(), cfg.max_pixels)
        return reader

    return prepare


def _one_at_a_time(todo: Sequence, one: Callable, main: Backend, verifier: Backend, prepare: Callable | None,
                   ahead: int) -> Iterator:
    """One sample at a time on the calling thread (no batching); with `prepare` and `ahead` >= 1, the next `ahead`
    samples are prepared on a worker meanwhile, so the model does not wait for a decode the last sample's model
    calls could have hidden."""
    if prepare is None or ahead <= 0:
        for sample in todo:
            yield one(sample, main, verifier, None)
        return
    pending: deque[Future] = deque()
    with ThreadPoolExecutor(1, thread_name_prefix="cader-ahead") as preparer:
        try:
            for i, sample in enumerate(todo):
                while len(pending) <= ahead and i + len(pending) < len(todo):
                    pending.append(preparer.submit(prepare, todo[i + len(pending)]))
                yield one(sample, main, verifier, _prepared(sample, pending.popleft()))
        finally:
            for future in pending:
                future.cancel()


def _prepared(sample, prepared: Future | None):
    """What `prepare` made for the sample, or None (nothing ahead, or it failed: the sample does the work itself)."""
    if prepared is None:
        return None
    try:
        return prepared.result()
    except Exception as err:  # noqa: BLE001 - the sample redoes the work and records the failure, if it recurs
        log.debug("prepare failed for %s (the sample redoes it): %s", getattr(sample, "sample_id", sample), err)
        return None
