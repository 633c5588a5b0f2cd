"""Evaluation backends for tests and measurements: scripted replies in place of a model, and a real backend slowed
by a fixed latency per call.

- `ScriptedBackend`: Stage-1 option logits chosen by the prompt's question, a fixed proposal, final answer and
  P(Yes), with failures on demand; the runner, the report and the file contracts run on it without a model.
- `FixedLatencyBackend`: wraps a backend and sleeps a fixed time per call, standing in for a GPU forward whose cost
  barely grows with the batch (the concurrency and overlap measurements in `scripts/bench/`).
"""

from __future__ import annotations

import time

from cader.evaluate.backends.base import Backend, Generation, LetterLogits, YesNo

WINDOW_REPLY = '"relevant_windows": [[20, 30]]'
ANSWER_REPLY = "<answer>B</answer>"


def question_of(prompt) -> str:
    """The question a CADER prompt asks (its first line starting with "Question")."""
    line = next(line for line in prompt.user.splitlines() if line.startswith("Question"))
    return line.removeprefix("Question: ")


class ScriptedBackend(Backend):
    """Stage-1 logits by question; every proposal, final answer and verifier reply fixed.

    A logits value that is an exception is raised by that question's Stage-1 call, and a verifier call on a question
    in `fail_on` raises RuntimeError, so a run meets a failure in either stage where a test places one; a prompt
    whose video has no frames raises ValueError, as a real backend's does. The final
    answer is told from the proposal by its prompt (only the answer prompt names "the most relevant segment").
    """

    def __init__(self, logits_by_question: dict, proposal: str = WINDOW_REPLY, answer: str = ANSWER_REPLY,
                 p_yes: float = 0.95, fail_on=()):
        self.logits_by_question, self.proposal, self.answer, self.p_yes = logits_by_question, proposal, answer, p_yes
        self.fail_on = set(fail_on)

    @staticmethod
    def _check_frames(prompts) -> None:
        """A prompt whose video has no frames is refused, as the real backends refuse it (`cader.vlm.messages`)."""
        for prompt in prompts:
            if prompt.video is not None and len(prompt.video) == 0:
                raise ValueError("cannot encode a video with no frames")

    def letter_logits(self, prompts, letters):
        self._check_frames(prompts)
        out = []
        for prompt in prompts:
            value = self.logits_by_question[question_of(prompt)]
            if isinstance(value, Exception):
                raise value
            out.append(LetterLogits(value, 5))
        return out

    def yes_no(self, prompts):
        self._check_frames(prompts)
        if self.fail_on and any(question_of(p) in self.fail_on for p in prompts):
            raise RuntimeError("verifier down")
        return [YesNo(self.p_yes, 1 - self.p_yes, 5) for _ in prompts]

    def generate(self, prompts, max_new_tokens):
        self._check_frames(prompts)
        return [Generation(self.answer if "most relevant segment" in p.user else self.proposal, 5, 3)
                for p in prompts]


class FixedLatencyBackend:
    """Delegates to a backend and sleeps `latency` seconds per call (one call = one batched forward on a GPU)."""

    def __init__(self, inner, latency: float):
        self.inner, self.latency, self.calls = inner, latency, 0
        self.name, self.template = f"latency({inner.name})", getattr(inner, "template", None)

    def fingerprint(self):
        return self.inner.fingerprint()

    def _wait(self):
        self.calls += 1
        time.sleep(self.latency)

    def letter_logits(self, prompts, letters):
        self._wait()
        return self.inner.letter_logits(prompts, letters)

    def yes_no(self, prompts):
        self._wait()
        return self.inner.yes_no(prompts)

    def generate(self, prompts, max_new_tokens):
        self._wait()
        return self.inner.generate(prompts, max_new_tokens)
