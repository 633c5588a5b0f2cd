"""Several Table 2 variants in one pass (`evaluate/run.py --variants full,no_rgr,...` or `all`).

The variants differ only in what they do after Stage 1, and greedy decoding makes a model call a function of its
prompt. So the samples are taken one video at a time, one sample at a time within it, and every variant runs on a
sample before the next. Frames come from the video's `cader.evaluate.video_groups.VideoGroup` (each distinct frame
request decoded once for every question and variant of the video: F1, a crop, an RGR resample), and `MemoBackend`
answers each distinct model call of a sample once (Stage 1 for all six, the first proposal for all five that
propose, the first verification for the four that verify, ...). Each variant still gets the record it would get
alone, with the cost it would have alone, plus `cost.frames_shared` and `cost.forwards_shared`: how much of that
came from work already done for an earlier variant or question; `SharedWork` counts what was actually computed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cader.evaluate.backends.base import Backend, Prompt
from cader.vlm.video import Frames


def _frames_key(frames: Frames | None) -> tuple:
    # a video group hands out one Frames object per distinct request, and MemoBackend keeps every Frames it keyed
    # alive for its sample, so the object's identity names its content (hashing the pixels would cost more than
    # some forwards) and no id is reused by other frames while the memo lives
    return () if frames is None else (id(frames),)


def prompt_key(prompt: Prompt) -> tuple:
    return (prompt.system, prompt.user, bool(prompt.enable_thinking), _frames_key(prompt.video))


@dataclass
class SharedWork:
    """What the memos actually computed (model calls, frames decoded) against what was asked."""

    calls: int = 0
    calls_asked: int = 0
    frames: int = 0
    frames_asked: int = 0


class MemoBackend(Backend):
    """Answers a repeated call (same operation, arguments and prompts) from memory; one instance per sample.
    `hits` counts the prompts answered from memory (a record's `cost.forwards_shared`)."""

    def __init__(self, inner: Backend, work: SharedWork):
        self.inner, self.work, self._memo, self._alive, self.hits = inner, work, {}, [], 0
        self.name = f"memo({inner.name})"
        template = getattr(inner, "template", None)
        if template is not None:
            self.template = template

    def fingerprint(self):
        return self.inner.fingerprint()

    def model_path(self):
        return self.inner.model_path()

    def _call(self, key: tuple, prompts: Sequence[Prompt], run):
        out = [None] * len(prompts)
        missing = [i for i, p in enumerate(prompts) if (key, prompt_key(p)) not in self._memo]
        if missing:
            fresh = run([prompts[i] for i in missing])
            self.work.calls += 1
            for i, result in zip(missing, fresh):
                self._memo[(key, prompt_key(prompts[i]))] = result
                self._alive.append(prompts[i].video)  # its id is in the key: no other frames may take it
        self.hits += len(prompts) - len(missing)
        self.work.calls_asked += 1
        for i, p in enumerate(prompts):
            out[i] = self._memo[(key, prompt_key(p))]
        return out

    def letter_logits(self, prompts, letters):
        return self._call(("letters", tuple(letters)), prompts, lambda ps: self.inner.letter_logits(ps, letters))

    def yes_no(self, prompts):
        return self._call(("yes_no",), prompts, self.inner.yes_no)

    def generate(self, prompts, max_new_tokens):
        return self._call(("generate", int(max_new_tokens)), prompts,
                          lambda ps: self.inner.generate(ps, max_new_tokens))
