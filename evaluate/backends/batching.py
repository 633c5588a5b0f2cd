"""Many samples in flight: a backend wrapper that merges concurrent calls into one batched call.

With `--concurrency N` the runner drives N samples at once, each through the ordinary per-sample Algorithm 1 code
(`cader.evaluate.runner.process_sample`) on its own thread: a sample's state is its position in that code, and every
model call is a point where it waits. `BatchingBackend` collects the calls those threads make and hands the inner
backend one call per kind: vLLM then receives every pending request in one `generate` (its continuous batching
fills), and the HF backend one left-padded forward for the Stage-1 letters or the verifier. Calls are merged only
when they are the same operation with the same arguments (the same letters; the same `max_new_tokens`).

A call waits at most `max_wait_s` for company, and never once `max_batch` prompts are pending or every in-flight
sample is waiting on the model; so one sample alone runs as fast as without the wrapper.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future

from cader.evaluate.backends.base import Backend, Generation, LetterLogits, Prompt, YesNo


class BatchingBackend(Backend):
    def __init__(self, inner: Backend, max_batch: int = 8, max_wait_s: float = 0.05, in_flight=None):
        """`in_flight`: a callable giving how many samples are being processed now (a call dispatches as soon as
        all of them are waiting, without sitting out `max_wait_s`)."""
        self.inner, self.max_batch, self.max_wait_s = inner, max(1, int(max_batch)), float(max_wait_s)
        self.name = f"batching({inner.name})"
        self._in_flight = in_flight or (lambda: 1)
        self._lock = threading.Condition()
        self._pending: list[tuple[tuple, list[Prompt], Future]] = []
        self.calls_made = 0  # inner calls, for tests and benchmarks
        template = getattr(inner, "template", None)
        if template is not None:
            self.template = template

    def fingerprint(self) -> str | None:
        return self.inner.fingerprint()

    def describe(self) -> dict:
        return {**self.inner.describe(), "batching": {"max_batch": self.max_batch, "max_wait_s": self.max_wait_s}}

    def prompt_token_ids(self, prompts: Sequence[Prompt]) -> list[list[int]]:
        return self.inner.prompt_token_ids(prompts)

    # ---- the interface: each call joins the pending list and waits for its share of a batched result ----------
    def letter_logits(self, prompts: Sequence[Prompt], letters: Sequence[str]) -> list[LetterLogits]:
        return self._submit(("letter_logits", tuple(letters)), prompts)

    def yes_no(self, prompts: Sequence[Prompt]) -> list[YesNo]:
        return self._submit(("yes_no",), prompts)

    def generate(self, prompts: Sequence[Prompt], max_new_tokens: int) -> list[Generation]:
        return self._submit(("generate", int(max_new_tokens)), prompts)

    # ---- batching ---------------------------------------------------------------------------------------------
    def _submit(self, key: tuple, prompts: Sequence[Prompt]) -> list:
        future: Future = Future()
        with self._lock:
            self._pending.append((key, list(prompts), future))
            self._lock.notify_all()
            deadline_left = self.max_wait_s
            while not future.done() and not self._ready(key):
                if deadline_left <= 0:
                    break
                waited_from = _now()
                self._lock.wait(timeout=deadline_left)
                deadline_left -= _now() - waited_from
            batch = [] if future.done() else self._take(key)
        if batch:
            self._run(key, batch)
        return future.result()

    def _ready(self, key: tuple) -> bool:
        same = sum(len(p) for k, p, _ in self._pending if k == key)
        return same >= self.max_batch or len(self._pending) >= max(1, self._in_flight())

    def _take(self, key: tuple) -> list[tuple[list[Prompt], Future]]:
        taken, kept, size = [], [], 0
        for k, prompts, future in self._pending:
            if k == key and size < self.max_batch:
                taken.append((prompts, future))
                size += len(prompts)
            else:
                kept.append((k, prompts, future))
        self._pending = kept
        return taken

    def _run(self, key: tuple, batch: list[tuple[list[Prompt], Future]]) -> None:
        prompts = [p for ps, _ in batch for p in ps]
        try:
            if key[0] == "letter_logits":
                results = self.inner.letter_logits(prompts, list(key[1]))
            elif key[0] == "yes_no":
                results = self.inner.yes_no(prompts)
            else:
                results = self.inner.generate(prompts, key[1])
            self.calls_made += 1
        except BaseException as err:  # noqa: BLE001 -- every sample of the batch sees the failure of its own call
            for _, future in batch:
                future.set_exception(err)
            return
        start = 0
        for ps, future in batch:
            future.set_result(results[start:start + len(ps)])
            start += len(ps)
        with self._lock:
            self._lock.notify_all()


def _now() -> float:
    import time

    return time.monotonic()
