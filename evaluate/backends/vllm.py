"""vLLM backend (optional extra: `pip install 'cader-toolkit[vllm]'`), for GPU throughput on the real models.

Same interface as the HF backend, batched across prompts:
- option letters: one decode step restricted to the letters' token ids with `logprobs_mode="processed_logprobs"`,
  so the returned log-probabilities are the letter logits minus one shared constant (log-sum-exp over the letters).
  Softmax(z / T), the margin and temperature fitting are unchanged by a shared shift, so these stand in for raw z.
- Yes/No: one decode step; the full-vocabulary log-probabilities of "Yes" and "No" (top-k of the raw distribution,
  a token outside the top-k gets probability 0).
- generation: greedy.
Frames are passed with their metadata so Qwen3-VL writes the real timestamps (as in `cader.vlm.messages.encode`).
Not exercised by the CPU test suite.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from cader.evaluate.backends.base import (
    Backend,
    BackendError,
    Generation,
    LetterLogits,
    Prompt,
    YesNo,
    template_check,
)
from cader.vlm.messages import build_messages, render

INSTALL_HINT = "the vLLM backend needs vLLM: pip install 'cader-toolkit[vllm]'"
YES_NO_TOPK = 20


def _import_vllm():
    try:
        import vllm
    except ImportError as err:
        raise ImportError(f"{INSTALL_HINT} ({err})") from err
    return vllm


class VLLMBackend(Backend):
    name = "vllm"

    def __init__(self, path: str, *, dtype: str = "auto", max_model_len: int | None = None, **engine_kwargs):
        vllm = _import_vllm()
        from transformers import AutoProcessor

        self._vllm = vllm
        self.path = str(path)
        self.processor = AutoProcessor.from_pretrained(self.path)
        self.tokenizer = self.processor.tokenizer
        self.template = template_check(self.processor)
        dtype = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(dtype, dtype)
        self.llm = vllm.LLM(
            model=self.path,
            dtype=dtype,
            max_model_len=max_model_len,
            max_logprobs=32,
            logprobs_mode="processed_logprobs",
            limit_mm_per_prompt={"video": 1},
            **engine_kwargs,
        )

    def fingerprint(self) -> str:
        from cader.evaluate.method.stage1_reuse import model_fingerprint

        return model_fingerprint(self.path)

    def token_id(self, text: str) -> int:
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        if len(ids) != 1:
            raise BackendError(f"{text!r} is not a single token for {self.path} (ids {ids})")
        return int(ids[0])

    def _request(self, prompt: Prompt) -> dict:
        messages = build_messages(prompt.user, system=prompt.system, video=prompt.video)
        text = render(
            self.processor,
            messages,
            enable_thinking=prompt.enable_thinking,
            prefill_think=self.template.prefill_think,
        )
        request = {"prompt": text}
        if prompt.video is not None:
            request["multi_modal_data"] = {"video": [(prompt.video.frames, prompt.video.metadata())]}
            request["mm_processor_kwargs"] = {"do_sample_frames": False, "do_resize": False}
        return request

    def _run(self, prompts: Sequence[Prompt], params):
        return self.llm.generate([self._request(p) for p in prompts], params, use_tqdm=False)

    def letter_logits(self, prompts: Sequence[Prompt], letters: Sequence[str]) -> list[LetterLogits]:
        ids = [self.token_id(letter) for letter in letters]
        params = self._vllm.SamplingParams(
            max_tokens=1, temperature=0.0, logprobs=len(ids), allowed_token_ids=ids
        )
        results = []
        for out in self._run(prompts, params):
            top = out.outputs[0].logprobs[0]
            results.append(
                LetterLogits(
                    [float(top[i].logprob) if i in top else -math.inf for i in ids], len(out.prompt_token_ids)
                )
            )
        return results

    def yes_no(self, prompts: Sequence[Prompt]) -> list[YesNo]:
        yes, no = self.token_id("Yes"), self.token_id("No")
        # raw (unprocessed) distribution: a separate request type is not needed since no processor restricts it
        params = self._vllm.SamplingParams(max_tokens=1, temperature=0.0, logprobs=YES_NO_TOPK)
        results = []
        for out in self._run(prompts, params):
            top = out.outputs[0].logprobs[0]
            p = [math.exp(top[i].logprob) if i in top else 0.0 for i in (yes, no)]
            results.append(YesNo(p[0], p[1], len(out.prompt_token_ids)))
        return results

    def generate(self, prompts: Sequence[Prompt], max_new_tokens: int) -> list[Generation]:
        params = self._vllm.SamplingParams(max_tokens=max_new_tokens, temperature=0.0)
        return [
            Generation(o.outputs[0].text, len(o.prompt_token_ids), len(o.outputs[0].token_ids))
            for o in self._run(prompts, params)
        ]
