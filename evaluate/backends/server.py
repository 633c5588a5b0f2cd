"""Server backend (`--backend server`): the main model and the verifier served by vLLM's OpenAI-compatible server,
each a list of replica URLs. The same prompts, frames and scores as the HF backend, over HTTP (docs/serving.md).

Named `server`, not `openai`: it needs a vLLM server (`logprob_token_ids`, per-request chat template and media
settings), and OpenAI's own API, which the name would suggest, gives neither.

- Prompts: the text is `cader.vlm.messages.prompt_text`, rendered here with the model's template exactly as the HF
  and in-process vLLM backends render it (video placeholder unwrapped, empty think block where the template ignores
  `enable_thinking`). The request's own `chat_template` passes that text through unchanged (`PASS_THROUGH_TEMPLATE`),
  so the server tokenizes the very text the HF processor gets; the server's default template never runs (with it,
  letter scores moved by ~0.015 in a hand check).
- Frames: the ones cader decoded, each a lossless PNG in a `data:video/jpeg` URL (vLLM's pre-decoded-frames form; its
  frame loader opens any allowed image format), with their metadata in `media_io_kwargs` and
  `do_sample_frames=False, do_resize=False`, as the in-process engine gets them. The server only takes integer
  frame indices; a variable-rate video's positions are re-expressed on a finer integer grid whose `<t seconds>` texts
  equal the HF processor's (`server_video_metadata`), and a video for which no grid does is refused with
  `vfr_timestamps` (the sample's record names it; the run counts it as failed).
- Scores: `logprob_token_ids` (with `logprobs: true`) returns the log-probabilities of exactly the ids asked for,
  whatever their rank, from the full-vocabulary log_softmax of the raw logits (vLLM's default
  `--logprobs-mode raw_logprobs`; every sampling setting is sent neutral, so nothing processes the logits anyway):
  P(Yes), P(No) as the HF backend's, letter scores = logits minus one shared constant, as the in-process vLLM
  backend's (`cader.evaluate.backends.vllm`). Generation is greedy.
- At start, one probe per replica (a two-frame video, the 26 letters scored): a server that refuses a needed
  option, scores other ids, or expands the probe to other token ids than the processor does is refused at once,
  with the server flag it lacks (`REQUIRED_FLAGS`); never a silent top-k fallback.
- Routing (`cader.evaluate.backends.routing`; the HTTP side in `cader.evaluate.backends.replicas`): requests
  carrying the same frames go to one replica (prefix and encoder caches), new ones to the least busy, at most
  `concurrency` per replica; failed requests are retried on another replica with bounded back-off. An API key
  comes from the environment variable `api_key_env` only.
- Secrets in a replica's URL (user:password@, query values) are used in its requests and nowhere else: every
  message, log line and file (server_routing.json, report.json, a record's error) names the URL as
  `cader.contracts.provenance.redact_url` shows it (`http://***@host:8000/v1`).
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import asdict

import numpy as np
from cader.contracts.provenance import redact_url
from cader.evaluate.backends.base import Backend, BackendError, Generation, LetterLogits, Prompt, YesNo
from cader.evaluate.backends.replicas import ReplicaPool, RequestFailed, ServerOptions, http_library  # noqa: F401 - imported from here
from cader.evaluate.backends.routing import request_work
from cader.evaluate.backends.vllm import LOGPROBS_MODE, letter_logits_from, yes_no_from

# The server flags exact scores need; the probe names the one a server lacks (docs/serving.md has the command).
REQUIRED_FLAGS = {
    "--trust-request-chat-template": "requests carry cader's chat template",
    "--trust-request-mm-kwargs": "requests carry the frames' metadata (media_io_kwargs, mm_processor_kwargs)",
    "--max-logprobs 32": "one request scores up to 26 option letters (logprob_token_ids; vLLM's default is 20)",
}
PROBE_LETTERS = [chr(c) for c in range(ord("A"), ord("Z") + 1)]
# The request's template: the prompt cader rendered, unchanged (module docstring).
PASS_THROUGH_TEMPLATE = "{{- cader_prompt -}}"
NEUTRAL_SAMPLING = {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0,
                    "presence_penalty": 0.0, "frequency_penalty": 0.0}
SCORING = {
    "letter_logits": "vLLM server logprob_token_ids at the letters' ids (raw_logprobs): the raw letter logits minus "
                     "one shared constant, any rank",
    "yes_no": "vLLM server logprob_token_ids at 'Yes' and 'No' (raw_logprobs): full-vocabulary softmax, any rank",
}


class ServerRefused(BackendError):
    """A server cannot give exact scores as started (a missing flag, another model): refused before any sample."""


class UnsendableVideo(BackendError):
    """A video the server cannot be given with the HF processor's timestamps (named reason first)."""


# ---- pure helpers ---------------------------------------------------------------------------------------------------
def frame_time_texts(indices: Sequence[float], fps: float, merge: int = 2) -> list[str]:
    """The `<t seconds>` texts Qwen3-VL writes for a video (transformers' and vLLM's `_calculate_timestamps`): each
    temporal group of `merge` frames at the mean of its first and last frame's index / fps, one decimal."""
    idx = list(indices)
    if len(idx) % merge:
        idx += [idx[-1]] * (merge - len(idx) % merge)
    times = [i / fps for i in idx]
    return [f"{(times[k] + times[k + merge - 1]) / 2:.1f}" for k in range(0, len(times), merge)]


# Finer integer grids tried for a variable-rate video, in order: milliseconds, then MPEG's 90 kHz clock.
VFR_GRIDS = (1000.0, 90000.0)


def server_video_metadata(metadata: dict, merge: int = 2, grids: Sequence[float] = VFR_GRIDS,
                          max_nudge: int = 2) -> dict:
    """`Frames.metadata()` as the server takes it: integer frame indices, the same `<t seconds>` texts.

    A constant-rate video's indices are integers already. A variable-rate one's are positions on the average-rate
    grid, which the server refuses (HTTP 400): they become round(time * g) on a grid of g per second (fps = g). The
    texts are the only thing the model sees of these numbers, and a pair's mean can sit on a .x5 boundary that the
    processor's float arithmetic rounds one way and the grid's the other (2.3 s and 2.8 s: '2.6' vs '2.5'); such a
    pair's later index moves by up to `max_nudge` grid steps (1 ms each; frame order kept) until its text is the
    processor's. UnsendableVideo (`vfr_timestamps`) when no grid gives every text.
    """
    indices, fps = metadata["frames_indices"], float(metadata["fps"])
    if all(isinstance(i, int) for i in indices):
        return dict(metadata)
    wanted = frame_time_texts(indices, fps, merge)
    for grid in grids:
        fitted = [round(i / fps * grid) for i in indices]
        for k, text in enumerate(wanted):
            group = fitted[k * merge:(k + 1) * merge]
            last = k * merge + len(group) - 1  # the index nudged: the group's last (or only) frame
            low = fitted[last - 1] if len(group) > 1 else (fitted[last - 1] if last > 0 else 0)
            high = fitted[last + 1] if last + 1 < len(fitted) else None
            for step in sorted(range(-max_nudge, max_nudge + 1), key=abs):
                value = group[-1] + step
                if value < low or (high is not None and value > high):
                    continue
                if frame_time_texts([*group[:-1], value], grid, merge) == [text]:
                    fitted[last] = value
                    break
        if frame_time_texts(fitted, grid, merge) == wanted:
            return {"fps": grid, "frames_indices": fitted, "total_num_frames": fitted[-1] + 1}
    raise UnsendableVideo(f"vfr_timestamps: no integer frame grid ({', '.join(f'{g:g}/s' for g in grids)}) "
                          f"gives the processor's frame times {wanted[:4]}...")


def content_key(prompt: Prompt) -> str:
    """A hash of the frames (with their indices and times) and images a prompt carries, else of its text: requests
    with the same key share the server's encoder cache and the prefix of their video tokens."""
    h = hashlib.blake2b(digest_size=12)
    if prompt.video is not None:
        video = prompt.video
        h.update(b"video")
        for array in (video.frames, video.indices, video.timestamps):
            h.update(str(array.shape).encode())
            h.update(np.ascontiguousarray(array).tobytes())
    for image in prompt.images:
        h.update(np.ascontiguousarray(image).tobytes())
    if prompt.video is None and not prompt.images:
        h.update(f"{prompt.system}\x00{prompt.user}".encode())
    return h.hexdigest()


def affinity_key(prompt: Prompt, content: str | None = None) -> str:
    """What routes a request: the video file its frames come from when the frames say so (a `source` attribute), so
    that a question's crops follow its video; else `content_key` (a video's questions share its Stage-1 frames, so
    they still meet on one replica, and a crop goes where the least work is)."""
    source = getattr(prompt.video, "source", None) if prompt.video is not None else None
    return f"video:{source}" if source else (content or content_key(prompt))


def png_base64(frame: np.ndarray) -> str:
    """One RGB frame as base64 PNG: lossless (a JPEG would change the pixels the model sees); level 1 for speed."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(frame)).save(buffer, format="PNG", compress_level=1)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def id_logprobs(choice: dict) -> dict[int, float]:
    """{token id: log-probability} of the first generated position of a chat-completion choice, read from the
    `token_id:N` entries `return_tokens_as_token_ids` gives (text tokens could be ambiguous)."""
    content = ((choice.get("logprobs") or {}).get("content") or [])
    if not content:
        raise BackendError("the server returned no logprobs (was logprobs: true dropped?)")
    out = {}
    for entry in content[0].get("top_logprobs") or []:
        token = str(entry.get("token", ""))
        if token.startswith("token_id:"):
            out[int(token.split(":", 1)[1])] = float(entry["logprob"])
    return out


def missing_flag(message: str) -> str | None:
    """The server flag a refused probe names or implies, from the server's error text; None if it is something else."""
    text = message.lower()
    if "trust-request-chat-template" in text:
        return "--trust-request-chat-template"
    if "trust-request-mm-kwargs" in text:
        return "--trust-request-mm-kwargs"
    if "max_logprobs" in text or "max-logprobs" in text:
        return "--max-logprobs 32"
    if "limit_mm_per_prompt" in text or "at most 0 video" in text:
        return "--limit-mm-per-prompt '{\"video\": 1, \"image\": 4}'"
    if "logprob_token_ids" in text and ("extra" in text or "not permitted" in text):
        return "a vLLM with logprob_token_ids (0.32 or later)"
    return None


# ---- the backend ----------------------------------------------------------------------------------------------------
class ServerBackend(Backend):
    name = "server"
    concurrent_calls = True  # thread-safe; the runner calls it from every sample thread (evaluate/in_flight.py)

    def __init__(self, path: str, urls: Sequence[str], options: ServerOptions | None = None):
        """Args:
            path: The model's folder or hub id, read here for its processor (chat template, tokenizer): the same
                model the servers serve.
            urls: Base URLs of its replicas (http://host:port, with or without /v1).
            options: Concurrency, time-outs, retries, API key variable.
        """
        from cader.evaluate.backends.base import template_check
        from cader.vlm.loading import load_processor

        self.path = str(path)
        self.options = options or ServerOptions()
        self.processor = load_processor(self.path)
        self.tokenizer = self.processor.tokenizer
        self.template = template_check(self.processor)
        self.merge = int(getattr(self.processor.video_processor, "temporal_patch_size", 2) or 2)
        self.pool = ReplicaPool(urls, self.options)
        self._urls_cache: OrderedDict[str, str] = OrderedDict()  # content key -> frames data URL (LRU)
        self._cache_lock = threading.Lock()
        self.served_model = self.options.served_model or self._served_model()
        if self.options.probe:
            for i in range(len(self.pool.urls)):
                self.probe(i)

    # ---- start-up ----------------------------------------------------------------------------------------------
    def _served_model(self) -> str:
        try:
            models = [m["id"] for m in self.pool.get(0, "/v1/models").get("data", [])]
        except Exception as err:  # noqa: BLE001 - any failure is a refusal; not chained: its text may hold the URL
            raise ServerRefused(redact_url(f"{self.pool.shown[0]}: cannot list its models ({type(err).__name__}: "
                                           f"{err})")) from None
        if len(models) != 1:
            raise ServerRefused(f"{self.pool.shown[0]} serves {models}; name one with --server.served_model")
        return models[0]

    def probe(self, i: int) -> None:
        """One exact-score request to replica `i`: ServerRefused, naming the flag, unless it answers as needed."""
        from cader.vlm.messages import build_messages, encode
        from cader.vlm.video import Frames

        url = self.pool.shown[i]
        frames = Frames(np.full((2, 32, 32, 3), 128, np.uint8), np.array([0.0, 0.5]), np.array([0, 1]), 2.0)
        prompt = Prompt("Which letter?", system="probe", video=frames)
        ids = [self.token_id(letter) for letter in PROBE_LETTERS]
        body = self._body(prompt, max_tokens=1, score_ids=ids)
        try:
            answer = self.pool.post_once(i, body)
        except (BackendError, RequestFailed) as err:
            flag = missing_flag(str(err))
            hint = f"start it with {flag} ({REQUIRED_FLAGS.get(flag, 'see docs/serving.md')})" if flag else \
                "see docs/serving.md for the flags cader needs"
            raise ServerRefused(f"{url} cannot give exact scores: {hint}; the server said: "
                                f"{redact_url(str(err))[:300]}") from None
        scored = id_logprobs(answer["choices"][0])
        missing = [t for t in ids if t not in scored]
        if missing:
            raise ServerRefused(f"{url} did not score token ids {missing[:5]} (a top-k answer, not "
                                f"logprob_token_ids): start it with --max-logprobs 32 on vLLM 0.32 or later")
        messages = build_messages(prompt.user, system=prompt.system, video=frames)
        expected = encode(self.processor, messages, video=frames, prefill_think=self.template.prefill_think)
        expected = expected["input_ids"][0].tolist()
        if answer.get("prompt_token_ids") != expected:
            raise ServerRefused(f"{url} expands the probe prompt to {len(answer.get('prompt_token_ids') or [])} "
                                f"tokens, the processor of {self.path} to {len(expected)}: another model or "
                                f"processor ({self.served_model})")

    # ---- requests ----------------------------------------------------------------------------------------------
    def _video_url(self, key: str, frames) -> str:
        with self._cache_lock:
            if key in self._urls_cache:
                self._urls_cache.move_to_end(key)
                return self._urls_cache[key]
        url = "data:video/jpeg;base64," + ",".join(png_base64(f) for f in frames.frames)
        with self._cache_lock:
            self._urls_cache[key] = url
            while len(self._urls_cache) > 8:  # a few videos in flight; each may be tens of MB
                self._urls_cache.popitem(last=False)
        return url

    def _body(self, prompt: Prompt, *, max_tokens: int, score_ids: Sequence[int] = (), content: str | None = None
              ) -> dict:
        """The chat-completion request of one prompt (module docstring)."""
        from cader.vlm.messages import build_messages, prompt_text

        messages = build_messages(prompt.user, system=prompt.system, video=prompt.video, images=prompt.images)
        text = prompt_text(self.processor, messages, has_video=prompt.video is not None,
                           enable_thinking=prompt.enable_thinking, prefill_think=self.template.prefill_think)
        parts: list[dict] = [{"type": "image_url", "image_url": {"url": "data:image/png;base64," + png_base64(im)}}
                             for im in prompt.images]
        body: dict = {"model": self.served_model, "max_tokens": int(max_tokens), **NEUTRAL_SAMPLING,
                      "chat_template": PASS_THROUGH_TEMPLATE, "chat_template_kwargs": {"cader_prompt": text},
                      "return_token_ids": True, "skip_special_tokens": True}
        if prompt.video is not None:
            if len(prompt.video) == 0:
                raise ValueError("cannot encode a video with no frames")
            meta = server_video_metadata(prompt.video.metadata(), self.merge)
            parts.append({"type": "video_url", "video_url": {"url": self._video_url(
                content or content_key(prompt), prompt.video)}})
            body["media_io_kwargs"] = {"video": {**meta, "num_frames": -1}}
        if prompt.video is not None or prompt.images:
            body["mm_processor_kwargs"] = {"do_sample_frames": False, "do_resize": False}
        parts.append({"type": "text", "text": prompt.user})
        body["messages"] = ([{"role": "system", "content": prompt.system}] if prompt.system else []) + [
            {"role": "user", "content": parts}]
        if score_ids:
            body.update(logprobs=True, logprob_token_ids=list(score_ids), return_tokens_as_token_ids=True)
        return body

    def _ask(self, prompts: Sequence[Prompt], max_tokens: int, score_ids: Sequence[int] = ()) -> list[dict]:
        requests = []
        for p in prompts:
            n_frames = len(p.video) if p.video is not None else 0
            content = content_key(p)  # hashed once: the route and the frames' cached data URL
            requests.append((affinity_key(p, content), request_work(n_frames, len(p.images), max_tokens),
                             self._body(p, max_tokens=max_tokens, score_ids=score_ids, content=content)))
        return self.pool.post_all(requests)

    # ---- the interface -----------------------------------------------------------------------------------------
    def fingerprint(self) -> str:
        from cader.evaluate.method.stage1_reuse import model_fingerprint

        return model_fingerprint(self.path)

    def describe(self) -> dict:
        return {"name": self.name, **SCORING, "logprobs_mode": LOGPROBS_MODE, "served_model": self.served_model,
                "replicas": list(self.pool.shown),
                "options": {k: v for k, v in asdict(self.options).items()},  # the key's variable name, never the key
                "api_key_set": bool(self.options.api_key_env and os.environ.get(self.options.api_key_env))}

    def prompt_token_ids(self, prompts: Sequence[Prompt]) -> list[list[int]]:
        return [list(a.get("prompt_token_ids") or []) for a in self._ask(prompts, 1)]

    def letter_logits(self, prompts: Sequence[Prompt], letters: Sequence[str]) -> list[LetterLogits]:
        ids = [self.token_id(letter) for letter in letters]
        return [LetterLogits(letter_logits_from(id_logprobs(a["choices"][0]), ids), a["usage"]["prompt_tokens"])
                for a in self._ask(prompts, 1, ids)]

    def yes_no(self, prompts: Sequence[Prompt]) -> list[YesNo]:
        yes, no = self.token_id("Yes"), self.token_id("No")
        out = []
        for a in self._ask(prompts, 1, [yes, no]):
            p_yes, p_no = yes_no_from(id_logprobs(a["choices"][0]), yes, no)
            out.append(YesNo(p_yes, p_no, a["usage"]["prompt_tokens"]))
        return out

    def generate(self, prompts: Sequence[Prompt], max_new_tokens: int) -> list[Generation]:
        return [Generation(a["choices"][0]["message"].get("content") or "", a["usage"]["prompt_tokens"],
                           a["usage"].get("completion_tokens", 0)) for a in self._ask(prompts, max_new_tokens)]

    def accounting(self) -> dict:
        return self.pool.accounting()

    def close(self) -> None:
        self.pool.close()

