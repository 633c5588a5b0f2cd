"""Judge model providers: OpenAI-compatible servers, Anthropic, and a local HF model.

Decoding is greedy / temperature 0 wherever the API still takes a sampling parameter. Anthropic removed them at
Claude Opus 4.7 (the paper's judge, AgentVidBench App. D Table 16): the API answers 400 "`temperature` is deprecated
for this model" and the anthropic SDK no longer accepts the argument, so the Anthropic provider sends none.

Every provider turns a chat (system text + alternating user/assistant messages) into the reply text. Transport
failures are normalised to ProviderError(transient=...) so the retry logic in client.py is provider-agnostic.
Keys come from the environment only and are never logged.
"""

from __future__ import annotations

import os
import threading
from typing import Protocol
from urllib.parse import urlparse

LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}
# A placeholder key for keyless local servers (vLLM/SGLang and the loopback test double accept any key).
PLACEHOLDER_KEY = "EMPTY"


class ProviderError(RuntimeError):
    """A failed judge call. `transient` says whether retrying can help (429, 5xx, timeouts, dropped connections)."""

    def __init__(self, message: str, *, transient: bool, status: int | None = None):
        super().__init__(message)
        self.transient = transient
        self.status = status


class Provider(Protocol):
    model: str

    def complete(self, system: str, messages: list[dict]) -> str: ...


def _is_transient_status(status: int | None) -> bool:
    return status is not None and (status in (408, 409, 425, 429) or status >= 500)


def _classify(error: Exception, module) -> ProviderError:
    """Map an openai/anthropic SDK exception onto ProviderError (both SDKs share these class names)."""
    name = type(error).__name__
    if isinstance(error, getattr(module, "APITimeoutError", ())):
        return ProviderError(f"timeout: {name}", transient=True)
    if isinstance(error, getattr(module, "APIConnectionError", ())):
        return ProviderError(f"connection error: {name}", transient=True)
    status = getattr(error, "status_code", None)
    if isinstance(error, getattr(module, "APIStatusError", ())):
        # Only the body's error type (e.g. overloaded_error), never its message: OpenAI's 401 message echoes a
        # masked fragment of the key, and rows and logs must not carry any of it.
        kind = getattr(error, "type", None)
        detail = f" ({kind})" if isinstance(kind, str) and kind.replace("_", "").isalnum() else ""
        return ProviderError(f"HTTP {status}: {name}{detail}", transient=_is_transient_status(status),
                             status=status)
    return ProviderError(f"{name}: {error}", transient=False)


def _api_key(env_var: str, base_url: str | None) -> str:
    key = os.environ.get(env_var)
    if key:
        return key
    if base_url:  # self-hosted OpenAI-compatible servers commonly run without auth
        return PLACEHOLDER_KEY
    raise ProviderError(f"set {env_var} in the environment (keys are read from the environment only)",
                        transient=False)


def is_loopback(base_url: str | None) -> bool:
    return bool(base_url) and urlparse(base_url).hostname in LOOPBACK_HOSTS


class OpenAICompatibleProvider:
    """Any server speaking /v1/chat/completions: OpenAI, vLLM, SGLang, the loopback test double."""

    def __init__(self, model: str, base_url: str | None = None, *, timeout: float = 120.0, max_tokens: int = 4096,
                 api_key_env: str = "OPENAI_API_KEY"):
        import openai

        self._openai = openai
        self.model = model
        self.max_tokens = max_tokens
        # SDK retries are off: client.py owns retry, backoff and the attempt count.
        self._client = openai.OpenAI(api_key=_api_key(api_key_env, base_url), base_url=base_url or None,
                                     timeout=timeout, max_retries=0)

    def complete(self, system: str, messages: list[dict]) -> str:
        try:
            response = self._client.chat.completions.create(
                model=self.model, messages=[{"role": "system", "content": system}, *messages],
                temperature=0, max_tokens=self.max_tokens)
        except self._openai.OpenAIError as error:
            raise _classify(error, self._openai) from None
        if not response.choices:
            raise ProviderError("empty choices in response", transient=True)
        return response.choices[0].message.content or ""


def anthropic_root(base_url: str | None) -> str | None:
    """The SDK posts to {base_url}/v1/messages, so an OpenAI-style ".../v1" base_url is cut back to its root."""
    if not base_url:
        return None
    return base_url.rstrip("/").removesuffix("/v1")


class AnthropicProvider:
    """The Messages API (the paper's judge: claude-opus-4-7, max output 4,096 tokens; App. D Table 16)."""

    def __init__(self, model: str, base_url: str | None = None, *, timeout: float = 120.0, max_tokens: int = 4096,
                 api_key_env: str = "ANTHROPIC_API_KEY"):
        import anthropic

        self._anthropic = anthropic
        self.model = model
        self.max_tokens = max_tokens
        # SDK retries are off: client.py owns retry, backoff and the attempt count.
        self._client = anthropic.Anthropic(api_key=_api_key(api_key_env, base_url), base_url=anthropic_root(base_url),
                                           timeout=timeout, max_retries=0)

    def complete(self, system: str, messages: list[dict]) -> str:
        try:
            response = self._client.messages.create(model=self.model, system=system, messages=messages,
                                                    max_tokens=self.max_tokens)
        except self._anthropic.AnthropicError as error:
            raise _classify(error, self._anthropic) from None
        text = "".join(block.text for block in response.content if getattr(block, "type", None) == "text")
        if not text.strip():
            # An empty reply cannot go back in a repair turn (the API rejects an empty assistant message), so it
            # is a provider failure: retried, unless the model refused (the same prompt would be refused again).
            raise ProviderError(f"empty reply (stop_reason={response.stop_reason})",
                                transient=response.stop_reason != "refusal")
        return text


class HFLocalProvider:
    """A local HF checkpoint via cader.vlm.loading, greedy decoding; calls are serialised (one model, one device)."""

    def __init__(self, model: str, base_url: str | None = None, *, timeout: float = 0.0, max_tokens: int = 4096,
                 device: str = "cpu"):
        from cader.vlm.loading import load_model, load_processor

        self.model = model
        self.max_tokens = max_tokens
        self._processor = load_processor(model)
        self._model = load_model(model, device=device)
        self._lock = threading.Lock()

    def complete(self, system: str, messages: list[dict]) -> str:
        import torch

        chat = [{"role": "system", "content": [{"type": "text", "text": system}]}]
        chat += [{"role": m["role"], "content": [{"type": "text", "text": m["content"]}]} for m in messages]
        with self._lock:
            inputs = self._processor.apply_chat_template(chat, add_generation_prompt=True, tokenize=True,
                                                         return_dict=True, return_tensors="pt")
            inputs = inputs.to(self._model.device)
            with torch.inference_mode():
                output = self._model.generate(**inputs, do_sample=False, max_new_tokens=self.max_tokens)
            new_tokens = output[0, inputs["input_ids"].shape[1]:]
            return self._processor.decode(new_tokens, skip_special_tokens=True)


PROVIDERS = {"openai": OpenAICompatibleProvider, "openai-compatible": OpenAICompatibleProvider,
             "anthropic": AnthropicProvider, "hf-local": HFLocalProvider}


def make_provider(name: str, model: str, base_url: str | None = None, **kwargs) -> Provider:
    try:
        factory = PROVIDERS[name]
    except KeyError:
        raise ValueError(f"unknown provider {name!r}; choose one of {sorted(PROVIDERS)}") from None
    return factory(model, base_url, **kwargs)
