"""transformers backend (default): Qwen3-VL through `cader.vlm.loading` and `cader.vlm.messages`.

`letter_logits` and `yes_no` (one forward each) batch up to `batch_size` prompts per forward with left padding, so
a caller with several samples in flight fills the device; results equal the unbatched ones. Generation runs one
prompt at a time. Option-letter logits are the lm_head outputs at the last prompt position for the
letters' token ids (one forward, `logits_to_keep=1`). Generation is greedy: the paper publishes no sampling settings,
and greedy keeps runs reproducible.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from cader.evaluate.backends.base import (
    Backend,
    BackendError,
    Generation,
    LetterLogits,
    Prompt,
    YesNo,
    template_check,
)
from cader.vlm.batch import pad_batch
from cader.vlm.loading import load_model, load_processor
from cader.vlm.messages import build_messages, encode


class HFBackend(Backend):
    name = "hf"

    def __init__(
        self,
        path: str,
        *,
        dtype: str = "auto",
        device: str = "cpu",
        attn_implementation: str | None = None,
        batch_size: int = 8,
    ):
        self.path = str(path)
        self.batch_size = max(1, int(batch_size))  # prompts per forward (letter_logits, yes_no, generate)
        self.processor = load_processor(self.path)
        self.model = load_model(
            self.path, dtype=dtype, device=device, attn_implementation=attn_implementation
        )
        self.tokenizer = self.processor.tokenizer
        self._single_token_ids: dict[str, int] = {}
        # A template without the Qwen3 thinking switch (released Instruct) gets the empty think block from us.
        self.template = template_check(self.processor)

    # ---- helpers -----------------------------------------------------------------------------------------
    def fingerprint(self) -> str:
        from cader.evaluate.method.stage1_reuse import model_fingerprint

        return model_fingerprint(self.path)

    def token_id(self, text: str) -> int:
        """The id of `text` as ONE token; BackendError otherwise (logits of a multi-token word are meaningless)."""
        if text not in self._single_token_ids:
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            if len(ids) != 1:
                raise BackendError(f"{text!r} is not a single token for {self.path} (ids {ids})")
            self._single_token_ids[text] = int(ids[0])
        return self._single_token_ids[text]

    def describe(self) -> dict:
        import transformers

        return {
            "name": self.name,
            "letter_logits": "lm_head logits at the last prompt position, at the letters' token ids",
            "yes_no": "softmax over the whole vocabulary at the last prompt position, at 'Yes' and 'No'",
            "dtype": str(self.model.dtype).removeprefix("torch."),
            "transformers": transformers.__version__,
        }

    def prompt_token_ids(self, prompts: Sequence[Prompt]) -> list[list[int]]:
        return [self._encoded(p)["input_ids"][0].tolist() for p in prompts]

    def _encoded(self, prompt: Prompt):
        messages = build_messages(prompt.user, system=prompt.system, video=prompt.video, images=prompt.images)
        return encode(
            self.processor,
            messages,
            video=prompt.video,
            images=prompt.images,
            enable_thinking=prompt.enable_thinking,
            prefill_think=self.template.prefill_think,
        )

    def _inputs(self, prompt: Prompt):
        batch = self._encoded(prompt)
        device, dtype = self.model.device, self.model.dtype
        out = {}
        for key, value in batch.items():
            if torch.is_tensor(value):
                value = value.to(device)
                if value.is_floating_point():
                    value = value.to(dtype)
            out[key] = value
        return out

    def _left_padded(self, items: list[dict]) -> dict:
        """One batch from single-prompt inputs, left-padded so every prompt ends at the last position."""
        return pad_batch(items, {"input_ids": self._pad_id(), "attention_mask": 0, "mm_token_type_ids": 0},
                         side="left")

    @torch.inference_mode()
    def _last_logits(self, prompts: Sequence[Prompt]) -> list[tuple[torch.Tensor, int]]:
        """Next-token logits after each prompt, `batch_size` prompts per forward (left padding)."""
        out = []
        for start in range(0, len(prompts), self.batch_size):
            items = [self._inputs(p) for p in prompts[start:start + self.batch_size]]
            batch = items[0] if len(items) == 1 else self._left_padded(items)
            logits = self.model(**batch, logits_to_keep=1).logits[:, -1].float()
            out += [(logits[i], int(x["input_ids"].shape[1])) for i, x in enumerate(items)]
        return out

    # ---- interface ---------------------------------------------------------------------------------------
    def letter_logits(self, prompts: Sequence[Prompt], letters: Sequence[str]) -> list[LetterLogits]:
        ids = torch.tensor([self.token_id(letter) for letter in letters])
        return [LetterLogits(logits[ids.to(logits.device)].cpu().tolist(), n_prompt)
                for logits, n_prompt in self._last_logits(prompts)]

    def yes_no(self, prompts: Sequence[Prompt]) -> list[YesNo]:
        yes, no = self.token_id("Yes"), self.token_id("No")
        results = []
        for logits, n_prompt in self._last_logits(prompts):
            probs = torch.softmax(logits, dim=-1)
            results.append(YesNo(float(probs[yes]), float(probs[no]), n_prompt))
        return results

    @torch.inference_mode()
    def generate(self, prompts: Sequence[Prompt], max_new_tokens: int) -> list[Generation]:
        """Greedy continuations, `batch_size` prompts per `model.generate` (left padding, as the scoring calls)."""
        results = []
        for start in range(0, len(prompts), self.batch_size):
            items = [self._inputs(p) for p in prompts[start:start + self.batch_size]]
            batch = items[0] if len(items) == 1 else self._left_padded(items)
            output = self.model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False,
                                         pad_token_id=self._pad_id())
            width = int(batch["input_ids"].shape[1])
            for row, item in zip(output, items):
                new_tokens = until_end(row[width:], self._end_ids())
                text = self.tokenizer.decode(new_tokens, skip_special_tokens=True)
                results.append(Generation(text, int(item["input_ids"].shape[1]), int(new_tokens.shape[0])))
        return results

    def _pad_id(self) -> int:
        return self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0

    def _end_ids(self) -> set[int]:
        ends = self.model.generation_config.eos_token_id
        return set(ends if isinstance(ends, (list, tuple)) else [] if ends is None else [ends])


def until_end(tokens: torch.Tensor, end_ids: set[int]) -> torch.Tensor:
    """A generated row up to and including its first end token: in a batch, a row that ended early is padded
    after it while the others go on (a lone prompt's row simply stops there)."""
    for i, token in enumerate(tokens.tolist()):
        if token in end_ids:
            return tokens[: i + 1]
    return tokens
