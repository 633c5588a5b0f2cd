"""transformers backend (default): Qwen3-VL through `cader.vlm.loading` and `cader.vlm.messages`.

`letter_logits` and `yes_no` are scoring forwards: only the next-token logits after each prompt are read, so they
run with `use_cache=False` (a cache they would throw away: 3.7 GiB per 27k-token Stage-1 prompt of the 8B) and
project only each prompt's last position onto the vocabulary (`logits_to_keep`). Prompts share a forward under a
token budget (`max_batch_tokens`, prompts x longest prompt, and at most `batch_size` prompts;
`cader.vlm.batch.token_budget_groups`): a prompt over the budget runs alone, since one long video prompt already
fills a GPU. A shared scoring forward is right-padded and runs without an attention mask: each prompt's positions
come first and a causal position never sees the pads behind it, so no (B, 1, L, L) mask is built (transformers
builds a dense one for any padded batch with a mask) and each prompt's logits equal its unbatched ones.

Generation (greedy: the paper publishes no sampling settings, and greedy keeps runs reproducible) shares
`model.generate` under the same budget counted with the new tokens; it must append after the prompt, so it
left-pads, and a padded generation batch carries a mask of at most budget x L bytes (a prompt over the budget runs
alone, unpadded, without one).
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
from cader.vlm.batch import pad_batch, token_budget_groups
from cader.vlm.loading import load_model, load_processor
from cader.vlm.messages import build_messages, encode

# Padded tokens (prompts x longest prompt) per forward. A forward of 8,192 tokens keeps an H100-class GPU's matmuls
# busy (8192 x 4096 x 12288 for the 8B's MLP), so a larger batch buys no speed, only memory; short prompts (the
# verifier's crops, the tiny model's) still share a forward.
DEFAULT_MAX_BATCH_TOKENS = 8192


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
        max_batch_tokens: int = DEFAULT_MAX_BATCH_TOKENS,
    ):
        self.path = str(path)
        self.batch_size = max(1, int(batch_size))  # prompts per forward at most (letter_logits, yes_no, generate)
        self.max_batch_tokens = max(1, int(max_batch_tokens))  # padded tokens per forward (module docstring)
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
            "forwards": {"max_batch_tokens": self.max_batch_tokens, "max_prompts": self.batch_size,
                         "scoring": "use_cache=False, right-padded, no attention mask",
                         "generation": "left-padded"},
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
        return self._on_device(self._encoded(prompt))

    def _staged(self, prompt: Prompt) -> dict:
        """A prompt's inputs in the model's dtype, still on the host: a call's prompts wait there for their forward
        (the processor's fp32 pixels would take twice the memory)."""
        return {key: value.to(self.model.dtype) if torch.is_tensor(value) and value.is_floating_point() else value
                for key, value in self._encoded(prompt).items()}

    def _on_device(self, batch) -> dict:
        device, dtype = self.model.device, self.model.dtype
        out = {}
        for key, value in batch.items():
            if torch.is_tensor(value):
                value = value.to(device)
                if value.is_floating_point():
                    value = value.to(dtype)
            out[key] = value
        return out

    def _groups(self, items: list, extra_tokens: int = 0) -> list[list[int]]:
        lengths = [int(x["input_ids"].shape[-1]) + extra_tokens for x in items]
        return token_budget_groups(lengths, self.max_batch_tokens, self.batch_size)

    def _scoring_batch(self, items: list) -> dict:
        """One scoring forward's inputs: right-padded, and no attention mask (module docstring)."""
        return pad_batch(items, {"input_ids": self._pad_id(), "mm_token_type_ids": 0}, side="right")

    def _left_padded(self, items: list[dict]) -> dict:
        """One generation batch, left-padded so every prompt ends at the last position."""
        return pad_batch(items, {"input_ids": self._pad_id(), "attention_mask": 0, "mm_token_type_ids": 0},
                         side="left")

    @torch.inference_mode()
    def _last_logits(self, prompts: Sequence[Prompt]) -> list[tuple[torch.Tensor, int]]:
        """Next-token logits after each prompt (and its length), in order: scoring forwards under the token budget."""
        items = [self._staged(p) for p in prompts]
        out: list = [None] * len(items)
        for group in self._groups(items):
            lengths = [int(items[i]["input_ids"].shape[-1]) for i in group]
            batch = self._on_device(self._scoring_batch([items[i] for i in group]))
            # the rows' last positions as a 1-D index (every transformers 5.x reads it as "these positions"; a 2-D
            # index, one position per row, is read so only from 5.2x on), each row then takes its own
            positions = sorted({n - 1 for n in lengths})
            keep = torch.tensor(positions, device=self.model.device)
            logits = self.model(**batch, use_cache=False, logits_to_keep=keep).logits
            for row, (i, n_prompt) in enumerate(zip(group, lengths)):
                out[i] = (logits[row, positions.index(n_prompt - 1)].float(), n_prompt)
                items[i] = None  # its pixels are done with: the call's memory falls as its forwards go
            del batch
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
        """Greedy continuations in order, prompts sharing a `model.generate` under the token budget (counted with
        the new tokens, whose cache the batch holds) with left padding."""
        items = [self._staged(p) for p in prompts]
        results: list = [None] * len(items)
        for group in self._groups(items, extra_tokens=max_new_tokens):
            parts = [items[i] for i in group]
            batch = self._on_device(parts[0] if len(parts) == 1 else self._left_padded(parts))
            output = self.model.generate(**batch, max_new_tokens=max_new_tokens, do_sample=False,
                                         pad_token_id=self._pad_id())
            width = int(batch["input_ids"].shape[1])
            for row, i in zip(output, group):
                new_tokens = until_end(row[width:], self._end_ids())
                text = self.tokenizer.decode(new_tokens, skip_special_tokens=True)
                results[i] = Generation(text, int(items[i]["input_ids"].shape[-1]), int(new_tokens.shape[0]))
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
