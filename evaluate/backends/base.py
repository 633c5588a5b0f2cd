"""The small interface CADER needs from a vision-language model.

Three operations, all on a `Prompt` (system text, user text, optional video frames and images, thinking switch):
- `letter_logits`: raw next-token logits of the option letters after the prompt (one forward, no generation);
- `yes_no`: the next-token probabilities of "Yes" and "No" (the verifier, App. C.3);
- `generate`: greedy text generation (proposals and final answers, thinking on).
Each returns how many prompt/completion tokens it used so the caller can account for cost. Batched methods take a
list of prompts and return one result per prompt, in order. `prompt_token_ids` says which ids a backend feeds its
model for a prompt (the parity check between backends compares them), and `describe` how it reads each score, for
report.json.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from cader.vlm.chat_template import honours_thinking_switch
from cader.vlm.video import Frames


@dataclass
class Prompt:
    user: str
    system: str | None = None
    video: Frames | None = None
    enable_thinking: bool = False
    images: tuple = ()  # (H, W, 3) uint8 arrays, already sized to the pixel budget; shown before the video


@dataclass
class LetterLogits:
    logits: list[float]  # same order as the letters asked for
    prompt_tokens: int


@dataclass
class YesNo:
    p_yes: float  # softmax over the whole vocabulary at the next position
    p_no: float
    prompt_tokens: int


@dataclass
class Generation:
    text: str
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class TemplateCheck:
    """What the loaded chat template does with `enable_thinking`, and what the backend does about it."""

    honours_enable_thinking: bool

    @property
    def prefill_think(self) -> bool:
        # Thinking-off prompts get the empty think block from the backend when the template would not add it.
        return not self.honours_enable_thinking

    def to_dict(self) -> dict:
        return {"honours_enable_thinking": self.honours_enable_thinking, "think_block_added": self.prefill_think}


def template_check(processor) -> TemplateCheck:
    """Render a probe both ways with the processor's own template (see `cader.vlm.chat_template`)."""
    return TemplateCheck(honours_thinking_switch(processor))


class BackendError(RuntimeError):
    """The model could not be used as asked (e.g. a letter that is not a single token)."""


class Backend(ABC):
    name: str = "backend"

    def fingerprint(self) -> str | None:
        """The identity of the model behind this backend (Stage-1 reuse refuses results of another model)."""
        return None

    def model_path(self) -> str | None:
        """The folder or hub id of the model behind this backend (its config.json sizes the FLOPs a record
        counts), or None when there is none (a scripted test backend)."""
        return getattr(self, "path", None)

    def token_id(self, text: str) -> int:
        """The id of `text` as ONE token of the backend's `tokenizer`; BackendError otherwise (logits of a
        multi-token word are meaningless)."""
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        if len(ids) != 1:
            raise BackendError(f"{text!r} is not a single token for {self.path} (ids {ids})")
        return int(ids[0])

    def describe(self) -> dict:
        """How this backend computes each score (and with what), for the report's config block."""
        return {"name": self.name}

    def prompt_token_ids(self, prompts: Sequence[Prompt]) -> list[list[int]]:
        """The token ids the model is fed for each prompt (vision placeholders expanded)."""
        raise NotImplementedError(f"{type(self).__name__} does not expose its prompt token ids")

    @abstractmethod
    def letter_logits(self, prompts: Sequence[Prompt], letters: Sequence[str]) -> list[LetterLogits]: ...

    @abstractmethod
    def yes_no(self, prompts: Sequence[Prompt]) -> list[YesNo]: ...

    @abstractmethod
    def generate(self, prompts: Sequence[Prompt], max_new_tokens: int) -> list[Generation]: ...


def verifier_used(main: Backend, verifier: Backend) -> dict:
    """A Stage-2 record's `verifier` block: the model that scored the crops, and whether it is the main model (one
    backend object serving both roles, or two naming the same model)."""
    path = verifier.model_path()
    same = verifier is main or (path is not None and path == main.model_path())
    return {"model": None if path is None else str(path), "main_model": bool(same)}
