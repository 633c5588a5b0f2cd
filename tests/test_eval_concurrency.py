"""Many samples in flight: the same records as one at a time, in the same order, with merged model calls."""

import threading
import time

import pytest
from cader.contracts.jsonl import read_jsonl
from cader.evaluate.backends.base import Backend, Generation, LetterLogits, YesNo
from cader.evaluate.backends.batching import BatchingBackend
from cader.evaluate.benchmarks.base import Sample
from cader.evaluate.method.config import CaderConfig
from cader.evaluate.runner import run_samples

LETTERS = ["A", "B", "C", "D"]


class PerPrompt(Backend):
    """Answers each prompt on its own (so merged calls must route results back correctly); optional latency."""

    name = "per_prompt"

    def __init__(self, latency=0.0):
        self.latency, self.calls, self.prompts = latency, 0, 0
        self._lock = threading.Lock()

    def _count(self, prompts):
        with self._lock:
            self.calls += 1
            self.prompts += len(prompts)
        time.sleep(self.latency)

    def letter_logits(self, prompts, letters):
        self._count(prompts)
        out = []
        for p in prompts:
            i = int(p.user.split("\n")[0].removeprefix("Question: q"))
            out.append(LetterLogits([0.0, 40.0, 0.0, 0.0] if i % 2 == 0 else [0.0, 0.1, 0.0, float(i) / 100], 5))
        return out

    def yes_no(self, prompts):
        self._count(prompts)
        return [YesNo(0.9, 0.1, 5) for _ in prompts]

    def generate(self, prompts, max_new_tokens):
        self._count(prompts)
        return [Generation("<answer>B</answer>" if "most relevant segment" in p.user
                           else '"relevant_windows": [[20, 30]]', 5, 3) for p in prompts]


def _samples(video, n):
    return [Sample("bench", f"s{i}", video, f"q{i}", ["a", "b", "c", "d"], LETTERS, "B", 60.0, {}) for i in range(n)]


def _strip(record):
    return {k: v for k, v in record.items() if k != "cost"} | {
        "cost": {k: v for k, v in record["cost"].items() if k != "seconds"}}


def _unshared(record):
    """A grouped record as the per-question run writes it: without the shared parts of its cost."""
    cost = {k: v for k, v in record["cost"].items() if k not in ("frames_shared", "forwards_shared")}
    return {**record, "cost": cost}


@pytest.fixture
def video_root(barcode_video):
    return barcode_video.parent, barcode_video.name


def _run(samples, root, out, backend, concurrency):
    cfg = CaderConfig(max_frames=8, max_pixels=2048, max_new_tokens_propose=16, max_new_tokens_answer=16)
    return run_samples(samples, root, out, backend, backend, cfg, video_path=lambda s, r: r / s.video,
                       progress=False, concurrency=concurrency)


def test_concurrent_run_writes_the_same_records_in_order_with_fewer_model_calls(tmp_path, video_root):
    root, name = video_root
    samples = _samples(name, 8)
    one, many = PerPrompt(), PerPrompt()
    _run(samples, root, tmp_path / "one.jsonl", one, 1)
    _run(samples, root, tmp_path / "many.jsonl", many, 4)
    a, b = read_jsonl(tmp_path / "one.jsonl"), read_jsonl(tmp_path / "many.jsonl")
    assert [r["sample_id"] for r in b] == [f"s{i}" for i in range(8)]
    assert [_strip(r) for r in a] == [_strip(r) for r in b]
    assert many.prompts == one.prompts and many.calls < one.calls


def test_batching_backend_merges_concurrent_calls_and_routes_results(video_root):
    inner = PerPrompt(latency=0.05)
    waiting = [4]
    wrapped = BatchingBackend(inner, max_batch=4, max_wait_s=1.0, in_flight=lambda: waiting[0])
    from cader.evaluate.backends.base import Prompt

    results = {}

    def ask(i):
        (r,) = wrapped.letter_logits([Prompt(f"Question: q{i}\nOptions:")], LETTERS)
        results[i] = r.logits

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(4)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert time.monotonic() - start < 0.5  # all four were waiting: no sitting out max_wait_s
    assert inner.calls == 1 and inner.prompts == 4
    assert results[1][3] == pytest.approx(0.01) and results[3][3] == pytest.approx(0.03) and results[0][1] == 40.0


def test_a_failing_batched_call_fails_each_sample_of_it(tmp_path, video_root):
    class Broken(PerPrompt):
        def letter_logits(self, prompts, letters):
            raise RuntimeError("CUDA out of memory")

    root, name = video_root
    _run(_samples(name, 4), root, tmp_path / "p.jsonl", Broken(), 4)
    records = read_jsonl(tmp_path / "p.jsonl")
    assert len(records) == 4 and all(r["error"].startswith("stage1_failed: RuntimeError") for r in records)


def test_variants_in_one_pass_equal_separate_runs_with_shared_work(tmp_path, video_root):
    from cader.evaluate.method.config import VARIANTS
    from cader.evaluate.runner import run_variants

    root, name = video_root
    samples = _samples(name, 4)
    base = {"max_frames": 8, "max_pixels": 2048, "max_new_tokens_propose": 16, "max_new_tokens_answer": 16}
    cfgs = {v: CaderConfig(variant=v, **base) for v in VARIANTS}
    counts, work = run_variants(samples, root, tmp_path / "all", PerPrompt(), PerPrompt(), cfgs,
                                video_path=lambda s, r: r / s.video, progress=False)
    assert all(c["ran"] == 4 for c in counts.values())
    for variant, cfg in cfgs.items():
        alone = tmp_path / f"{variant}.jsonl"
        run_samples(samples, root, alone, PerPrompt(), PerPrompt(), cfg, video_path=lambda s, r: r / s.video,
                    progress=False)
        together = read_jsonl(tmp_path / "all" / variant / "predictions.jsonl")
        assert [_strip(r) for r in read_jsonl(alone)] == [_strip(_unshared(r)) for r in together], variant
    # Stage 1 once instead of six times, the first proposal once instead of five, F1 decoded once
    assert work.calls < 0.45 * work.calls_asked and work.frames < 0.45 * work.frames_asked
    # each record's own cost, of which the shared part: the rest adds up to what was computed
    rows = [r for v in cfgs for r in read_jsonl(tmp_path / "all" / v / "predictions.jsonl")]
    assert sum(r["cost"]["frames_decoded"] - r["cost"]["frames_shared"] for r in rows) == work.frames
    assert sum(r["cost"]["forwards"] - r["cost"]["forwards_shared"] for r in rows) == work.calls
    assert sum(r["cost"]["frames_decoded"] for r in rows) == work.frames_asked
    again, _ = run_variants(samples, root, tmp_path / "all", PerPrompt(), PerPrompt(), cfgs,
                            video_path=lambda s, r: r / s.video, progress=False)
    assert all(c["ran"] == 0 and c["done_before"] == 4 for c in again.values())  # resumable per variant
