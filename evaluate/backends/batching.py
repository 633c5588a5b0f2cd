"""Many samples in flight: a backend wrapper that merges concurrent calls into one batched call.

With `--concurrency N` the runner drives N samples at once, each through the ordinary per-sample Algorithm 1 code
(`cader.evaluate.runner.process_sample`) on its own thread: a sample's state is its position in that code, and every
model call is a point where it waits. `BatchingBackend` collects the calls those threads make and hands the inner
backend one call per kind: vLLM then receives every pending request in one `generate` (its continuous batching
fills), and the HF backend one left-padded forward for the Stage-1 letters or the verifier. Calls are merged only
when they are the same operation with the same arguments (the same letters; the same `max_new_tokens`).

A call waits for company at most `max_wait_s`, or `wait_fraction` of the last inner call's time when that is longer
(`first_wait_s` before any call has been timed),
and never once `max_batch` prompts are pending or every in-flight sample is waiting on the model; so one sample
alone runs as fast as without the wrapper. The window grows with the call because going out short-handed costs a
whole extra call later: on a busy machine the threads coming back from one batch took longer than 50 ms to ask
again, and a fixed 50 ms window (with an in-flight count that missed the threads between two samples, since fixed
in `cader.evaluate.in_flight`) sent 24 Stage-1 calls at concurrency 4 out as 12 calls instead of 6
(scripts/bench/overlap.py, load average 6 on 2 cores).

One inner call at a time: the inner backend is one device (one GPU forward, one vLLM engine whose calls are
serialised anyway), so a call that arrives while another is running waits for it and then goes out with everything
that arrived meanwhile. Before, it went out on its own after `max_wait_s` and ran next to the first (a smaller
batch, and on a CPU model two forwards whose OpenMP teams fight each other and the decode threads for the cores).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future

from cader.evaluate.backends.base import Backend, Generation, LetterLogits, Prompt, YesNo


class BatchingBackend(Backend):
    def __init__(self, inner: Backend, max_batch: int = 8, max_wait_s: float = 0.05, in_flight=None,
                 wait_fraction: float = 0.25, first_wait_s: float = 0.25):
        """Args:
            inner: The backend that makes the calls (one at a time).
            max_batch: Prompts per inner call at most.
            max_wait_s: Seconds a call waits for company at least (module docstring).
            in_flight: A callable giving how many samples are being processed now (a call dispatches as soon as
                all of them are waiting, without sitting out the window).
            wait_fraction: The window is also this fraction of the last inner call's seconds, when that is longer.
            first_wait_s: The window before any call has been timed (a model call is assumed to cost more).
        """
        self.inner, self.max_batch, self.max_wait_s = inner, max(1, int(max_batch)), float(max_wait_s)
        self.wait_fraction, self._last_call_s, self._free_since = float(wait_fraction), 0.0, float("-inf")
        self.first_wait_s = float(first_wait_s)
        self.name = f"batching({inner.name})"
        self._in_flight = in_flight or (lambda: 1)
        self._lock = threading.Condition()
        self._pending: list[tuple[tuple, list[Prompt], Future]] = []
        self._busy = False  # an inner call is running (one at a time: module docstring)
        self.calls_made = 0  # inner calls, for tests and benchmarks
        template = getattr(inner, "template", None)
        if template is not None:
            self.template = template

    def fingerprint(self) -> str | None:
        return self.inner.fingerprint()

    def model_path(self) -> str | None:
        return self.inner.model_path()

    def describe(self) -> dict:
        return {**self.inner.describe(), "batching": {"max_batch": self.max_batch, "max_wait_s": self.max_wait_s,
                                                      "wait_fraction": self.wait_fraction,
                                                      "first_wait_s": self.first_wait_s}}

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
            deadline = _now() + self._window()
            batch = []
            while not future.done():  # done: another thread took these prompts into its call
                # A call that waited out a running one gives the samples of that one a window to come back with
                # their next calls (they come back together; without it, this call went out alone just before).
                deadline = max(deadline, self._free_since + self._window())
                left = deadline - _now()
                if not self._busy and (left <= 0 or self._ready(key)):
                    batch, self._busy = self._take(key), True
                    break
                # busy: the running call notifies when it ends; idle: wait for company until the deadline
                self._lock.wait(timeout=None if self._busy else left)
        if batch:
            self._run(key, batch)
        return future.result()

    def _window(self) -> float:
        if self.calls_made == 0:  # nothing timed yet: the first wave's decodes end up to 0.2 s apart when busy
            return max(self.max_wait_s, self.first_wait_s)
        return max(self.max_wait_s, self.wait_fraction * self._last_call_s)

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
        started = _now()
        try:
            if key[0] == "letter_logits":
                results = self.inner.letter_logits(prompts, list(key[1]))
            elif key[0] == "yes_no":
                results = self.inner.yes_no(prompts)
            else:
                results = self.inner.generate(prompts, key[1])
            self.calls_made += 1
            start = 0
            for ps, future in batch:
                future.set_result(results[start:start + len(ps)])
                start += len(ps)
        except BaseException as err:  # noqa: BLE001 -- every sample of the batch sees the failure of its own call
            for _, future in batch:
                if not future.done():
                    future.set_exception(err)
        finally:  # the next call may go; the samples of this one see their results
            with self._lock:
                self._busy, self._last_call_s = False, _now() - started
                self._free_since = _now()
                self._lock.notify_all()


def _now() -> float:
    import time

    return time.monotonic()
