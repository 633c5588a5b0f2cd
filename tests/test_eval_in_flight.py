"""Samples in flight: the decode-ahead stage (cader.evaluate.in_flight) and the batcher's one-call-at-a-time rule."""

import threading
import time

import numpy as np
import pytest
from cader.evaluate.backends.base import Backend, LetterLogits, Prompt
from cader.evaluate.backends.batching import BatchingBackend
from cader.evaluate.in_flight import records_in_flight
from cader.vlm.video import VideoReader

LETTERS = ["A", "B", "C", "D"]


class Recorder(Backend):
    """Answers prompt i with logits [i, 0, 0, 0]; records how many of its calls overlap and what each held."""

    name = "recorder"

    def __init__(self, latency=0.0, hold=None):
        self.latency, self.hold, self.batches, self.running, self.most_running = latency, hold, [], 0, 0
        self._lock = threading.Lock()

    def letter_logits(self, prompts, letters):
        with self._lock:
            self.running += 1
            self.most_running = max(self.most_running, self.running)
            self.batches.append([p.user for p in prompts])
        try:
            if self.hold is not None:
                self.hold(len(self.batches))
            time.sleep(self.latency)
            return [LetterLogits([float(p.user.removeprefix("q")), 0.0, 0.0, 0.0], 1) for p in prompts]
        finally:
            with self._lock:
                self.running -= 1

    def yes_no(self, prompts):
        raise NotImplementedError

    def generate(self, prompts, max_new_tokens):
        raise NotImplementedError


def _ask(backend, i):
    (r,) = backend.letter_logits([Prompt(f"q{i}")], LETTERS)
    return r.logits[0]


def _one(sample, main, verifier, prepared):
    return sample, prepared, _ask(main, sample)


def test_results_come_in_order_with_what_was_prepared_for_each_sample():
    inner = Recorder(latency=0.01)
    out = list(records_in_flight(list(range(10)), _one, inner, inner, 3, prepare=lambda s: f"frames of {s}"))
    assert [(s, p, logit) for s, p, logit in out] == [(i, f"frames of {i}", float(i)) for i in range(10)]
    assert sum(len(b) for b in inner.batches) == 10 and len(inner.batches) < 10  # merged calls


def test_one_at_a_time_runs_on_the_calling_thread_with_nothing_prepared():
    inner = Recorder()
    out = list(records_in_flight([0, 1], _one, inner, inner, 1, prepare=lambda s: pytest.fail("prepared")))
    assert out == [(0, None, 0.0), (1, None, 1.0)] and len(inner.batches) == 2


def test_a_failing_prepare_leaves_the_work_to_the_sample():
    def prepare(sample):
        if sample == 2:
            raise OSError("disk gone")
        return sample

    inner = Recorder()
    out = list(records_in_flight(list(range(4)), _one, inner, inner, 2, prepare=prepare))
    assert [p for _, p, _ in out] == [0, 1, None, 3]


def test_the_next_samples_are_decoded_while_the_first_batch_is_in_the_model():
    """Four samples in flight, the first batched call held until sample 5's decode has started: without decode-ahead
    that decode would start only once the call returned (the hold would time out)."""
    started = {}
    fifth_started = threading.Event()

    def prepare(sample):
        started[sample] = True
        if sample == 5:
            fifth_started.set()
        return sample

    def hold(call_number):
        if call_number == 1:
            assert fifth_started.wait(timeout=5.0), "no sample was decoded ahead while the model ran"

    inner = Recorder(hold=hold)
    out = list(records_in_flight(list(range(8)), _one, inner, inner, 4, prepare=prepare))
    assert [s for s, _, _ in out] == list(range(8))


def test_prepared_work_is_bounded_by_concurrency_plus_ahead():
    live, most = [0], [0]
    lock = threading.Lock()

    def prepare(sample):
        with lock:
            live[0] += 1
            most[0] = max(most[0], live[0])
        return sample

    def one(sample, main, verifier, prepared):
        _ask(main, sample)
        with lock:
            live[0] -= 1
        return sample

    inner = Recorder(latency=0.02)
    assert list(records_in_flight(list(range(30)), one, inner, inner, 3, prepare=prepare, ahead=2)) == list(range(30))
    assert most[0] <= 3 + 2


def test_the_batcher_makes_one_inner_call_at_a_time_and_merges_what_arrives_meanwhile():
    inner = Recorder(latency=0.3)
    wrapped = BatchingBackend(inner, max_batch=4, max_wait_s=0.05, in_flight=lambda: 4, wait_fraction=0.0,
                              first_wait_s=0.0)
    results = {}

    def ask(i, delay):
        time.sleep(delay)
        results[i] = _ask(wrapped, i)

    # q0 waits out its window alone and goes; q1-q3 arrive while its call runs
    threads = [threading.Thread(target=ask, args=(0, 0.0))] + [
        threading.Thread(target=ask, args=(i, 0.15)) for i in (1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {0: 0.0, 1: 1.0, 2: 2.0, 3: 3.0}
    assert inner.most_running == 1
    assert [sorted(b) for b in inner.batches] == [["q0"], ["q1", "q2", "q3"]]


def test_the_window_grows_with_the_last_call():
    """After a 0.4 s call the window is 0.1 s (a quarter), so a partner 0.06 s late still joins the call."""
    inner = Recorder(latency=0.4)
    wrapped = BatchingBackend(inner, max_batch=4, max_wait_s=0.02, in_flight=lambda: 2, wait_fraction=0.25,
                              first_wait_s=0.0)
    _ask(wrapped, 9)  # in_flight 2, alone: waits out 0.02 s, then a 0.4 s call
    inner.latency = 0.0
    threads = [threading.Thread(target=_ask, args=(wrapped, 0))]
    late = threading.Thread(target=lambda: (time.sleep(0.06), _ask(wrapped, 1)))
    for t in (*threads, late):
        t.start()
    for t in (*threads, late):
        t.join()
    assert [sorted(b) for b in inner.batches] == [["q9"], ["q0", "q1"]]


def test_the_first_call_waits_longer_for_its_wave():
    """Nothing timed yet: a partner 0.15 s late (its decode ended later) joins the first call."""
    inner = Recorder()
    wrapped = BatchingBackend(inner, max_batch=4, max_wait_s=0.05, in_flight=lambda: 2, first_wait_s=0.25)
    late = threading.Thread(target=lambda: (time.sleep(0.15), _ask(wrapped, 1)))
    late.start()
    _ask(wrapped, 0)
    late.join()
    assert [sorted(b) for b in inner.batches] == [["q0", "q1"]]


def test_a_failed_inner_call_frees_the_batcher_for_the_next():
    class Flaky(Recorder):
        def letter_logits(self, prompts, letters):
            if not self.batches:
                self.batches.append(["failed"])
                raise RuntimeError("CUDA out of memory")
            return super().letter_logits(prompts, letters)

    inner = Flaky()
    wrapped = BatchingBackend(inner, max_batch=2, max_wait_s=0.01, in_flight=lambda: 1)
    with pytest.raises(RuntimeError, match="out of memory"):
        _ask(wrapped, 0)
    start = time.monotonic()
    assert _ask(wrapped, 1) == 1.0 and time.monotonic() - start < 1.0


def test_a_kept_decode_is_returned_once_for_the_same_frames_and_pixel_budget(barcode_video, monkeypatch):
    reader = VideoReader(barcode_video, decode_workers=1)
    direct = reader.sample_uniform(1.0, max_frames=8, max_pixels=2048)
    ahead = VideoReader(barcode_video, decode_workers=1)
    ahead.keep(ahead.sample_uniform(1.0, max_frames=8, max_pixels=2048), 2048)
    decodes = []
    real_scan = VideoReader._scan
    monkeypatch.setattr(VideoReader, "_scan", lambda self, *a, **k: decodes.append(1) or real_scan(self, *a, **k))
    first = ahead.sample_uniform(1.0, max_frames=8, max_pixels=2048)
    assert decodes == []  # served from the kept decode
    assert np.array_equal(first.frames, direct.frames) and np.array_equal(first.timestamps, direct.timestamps)
    assert np.array_equal(first.indices, direct.indices)
    ahead.sample_uniform(1.0, max_frames=8, max_pixels=2048)  # once: the second decodes
    ahead.keep(first, 2048)
    ahead.sample_uniform(1.0, max_frames=8, max_pixels=1024)  # another pixel budget is another decode
    ahead.sample_uniform(1.0, max_frames=4, max_pixels=2048)  # other frames too
    assert len(decodes) == 3


def test_stage1_ahead_gives_the_same_records_and_decodes_f1_once(barcode_video, monkeypatch):
    from cader.dev.scripted import ScriptedBackend
    from cader.evaluate.benchmarks.base import Sample
    from cader.evaluate.in_flight import stage1_ahead
    from cader.evaluate.method.config import CaderConfig
    from cader.evaluate.runner import process_sample

    cfg = CaderConfig(max_frames=8, max_pixels=2048, decode_workers=1)
    backend = ScriptedBackend({"q0": [0.0, 0.1, 0.0, 0.0], "q1": [0.0, 40.0, 0.0, 0.0]})
    samples = [Sample("bench", f"s{i}", barcode_video.name, f"q{i}", ["a", "b", "c", "d"], LETTERS, "B", 60.0, {})
               for i in range(2)]
    decodes = []   # frames of each decode that ran (a decode answered by `keep` runs none)
    real_scan, real_sequential = VideoReader._scan, VideoReader._decode_sequentially
    monkeypatch.setattr(VideoReader, "_scan", lambda self, idx, *a: decodes.append(len(idx)) or real_scan(self, idx, *a))
    monkeypatch.setattr(VideoReader, "_decode_sequentially",
                        lambda self, idx, *a: decodes.append(len(idx)) or real_sequential(self, idx, *a))

    def strip(record):
        return {**record, "cost": {k: v for k, v in record["cost"].items() if k != "seconds"}}

    alone = strip(process_sample(samples[0], barcode_video, backend, backend, cfg))  # goes to Stage 2
    alone_decodes, decodes[:] = list(decodes), []
    prepare = stage1_ahead(lambda s: barcode_video, cfg, priors={("bench", "s1"): {"logits": [0, 1, 0, 0]}})
    assert prepare(samples[1]) is None  # a stored Stage 1: nothing ahead
    prepared = prepare(samples[0])
    assert decodes == alone_decodes[:1] == [8 + 60 - 1]  # the whole-video decode (F1 and the 1-fps lattice), ahead
    record = strip(process_sample(samples[0], barcode_video, backend, backend, cfg, reader=prepared))
    assert record == alone and record["route"] == "stage2" and record["cost"]["frames_decoded"] > 8
    assert decodes == alone_decodes  # then only the Stage-2 decodes: F1 not again
