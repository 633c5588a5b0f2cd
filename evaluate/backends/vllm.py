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
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

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


@dataclass
class VLLMEngineConfig:
    """One vLLM engine's settings (`--vllm_main.*`, `--vllm_verifier.*`).

    The defaults let the paper's pair, Qwen3-VL-8B (main) and Qwen3-VL-4B (verifier), share one 80 GB GPU: each engine
    pre-allocates its share of the GPU's memory for weights plus KV cache, and vLLM's own default (0.9 each) leaves the
    second engine nothing. 0.55 + 0.30 keeps 15 % for activations and the CUDA context.

    Attributes:
        gpu_memory_utilization: Share of the GPU's memory this engine pre-allocates for weights and KV cache.
        max_model_len: Longest prompt plus output in tokens (null: the model's own); 768 frames at 64 tokens per
            temporal pair is about 24.6K vision tokens.
        tensor_parallel_size: GPUs the engine splits the model over.
        enforce_eager: Skip CUDA-graph capture (less memory, slower decoding).
        max_num_seqs: Most sequences in one batch (null: vLLM's default).
        extra: Any other vllm.LLM keyword, passed as is.
    """

    gpu_memory_utilization: float = 0.55
    max_model_len: int | None = 32_768
    tensor_parallel_size: int = 1
    enforce_eager: bool = False
    max_num_seqs: int | None = None
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        if self.tensor_parallel_size < 1:
            raise ValueError(f"tensor_parallel_size must be >= 1, got {self.tensor_parallel_size}")

    def engine_kwargs(self) -> dict:
        kwargs = {k: v for k, v in asdict(self).items() if k != "extra" and v is not None}
        clash = set(kwargs) & set(self.extra)
        if clash:
            raise ValueError(f"extra repeats settings that have their own field: {sorted(clash)}")
        return {**kwargs, **self.extra}


VERIFIER_ENGINE = VLLMEngineConfig(gpu_memory_utilization=0.30)


def letter_logits_from(top: Mapping[int, float], ids: Sequence[int]) -> list[float]:
    """Option-letter scores from one decode step's log-probabilities restricted to the letters.

    With `allowed_token_ids` the processed log-probabilities are log_softmax over the letters only: the raw logits
    minus one shared log-sum-exp. Softmax(z / T) at T = 1, the argmax and the margin at T = 1 are unchanged by a
    shared shift; a letter absent from the returned top-k is -inf.
    """
    return [float(top[i]) if i in top else -math.inf for i in ids]


def yes_no_from(top: Mapping[int, float], yes: int, no: int) -> tuple[float, float]:
    """P(Yes), P(No) over the whole vocabulary from one decode step's top-k log-probabilities (0 outside the top-k)."""
    return tuple(math.exp(top[i]) if i in top else 0.0 for i in (yes, no))


def _logprobs(out) -> dict[int, float]:
    return {int(i): float(lp.logprob) for i, lp in out.outputs[0].logprobs[0].items()}


class VLLMBackend(Backend):
    name = "vllm"

    def __init__(self, path: str, *, dtype: str = "auto", engine: VLLMEngineConfig | None = None):
        vllm = _import_vllm()
        from transformers import AutoProcessor

        self._vllm = vllm
        self.path = str(path)
        self.processor = AutoProcessor.from_pretrained(self.path)
        self.tokenizer = self.processor.tokenizer
        self.template = template_check(self.processor)
        self.engine = engine or VLLMEngineConfig()
        self.llm = vllm.LLM(**self.llm_kwargs(self.path, dtype, self.engine))

    @staticmethod
    def llm_kwargs(path: str, dtype: str, engine: VLLMEngineConfig) -> dict:
        """Keyword arguments of `vllm.LLM` (a pure function, tested without vLLM)."""
        dtype = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(dtype, dtype)
        return {"model": str(path), "dtype": dtype, "max_logprobs": 32, "logprobs_mode": "processed_logprobs",
                "limit_mm_per_prompt": {"video": 1}, **engine.engine_kwargs()}

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
        return [LetterLogits(letter_logits_from(_logprobs(out), ids), len(out.prompt_token_ids))
                for out in self._run(prompts, params)]

    def yes_no(self, prompts: Sequence[Prompt]) -> list[YesNo]:
        yes, no = self.token_id("Yes"), self.token_id("No")
        # raw (unprocessed) distribution: a separate request type is not needed since no processor restricts it
        params = self._vllm.SamplingParams(max_tokens=1, temperature=0.0, logprobs=YES_NO_TOPK)
        return [YesNo(*yes_no_from(_logprobs(out), yes, no), len(out.prompt_token_ids))
                for out in self._run(prompts, params)]

    def generate(self, prompts: Sequence[Prompt], max_new_tokens: int) -> list[Generation]:
        params = self._vllm.SamplingParams(max_tokens=max_new_tokens, temperature=0.0)
        return [
            Generation(o.outputs[0].text, len(o.prompt_token_ids), len(o.outputs[0].token_ids))
            for o in self._run(prompts, params)
        ]
