"""Judge model providers: OpenAI-compatible servers, Anthropic, and a local HF model.

What a request carries besides the prompt (token-limit parameter, temperature, reasoning effort, beta headers)
comes from the model family table in params.py, so reasoning models get `max_completion_tokens` and no temperature,
and Claude Opus 4.7 (the paper's judge, AgentVidBench App. D Table 16) gets no sampling parameter, which it rejects.

Every provider turns a chat (system text + alternating user/assistant messages) into a Completion (the reply text
and the model name the server says answered). Transport failures, including a 200 whose body is not the API's JSON
(truncated, text/plain), are normalised to ProviderError(transient=..., retry_after=...) so the retry logic in
client.py is provider-agnostic. Keys come from the environment only and are never logged.

The HTTP clients' timeouts are per read, so a reply that drips one byte a second never trips them; every request
of the openai and anthropic providers therefore runs under a deadline on the whole exchange (DeadlineTransport):
`timeout` seconds per call, or the question's remaining time budget (CALL_DEADLINE, set by client.py) if sooner.
"""

from __future__ import annotations

import os
import threading
import time
from contextvars import ContextVar
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Literal, Protocol

from cader.contracts.provenance import redact_url, redact_urls_logged_by
from cader.evaluate.backends.replicas import http_library
from cader.evaluate.judge.params import (
    CONTEXT_1M_BETA,
    ModelFamily,
    family_for,
    request_config,
    validate_families,
)

# The loopback test double's one model name (cader.dev.judge_double): it answers to no other, and a judgment
# served under it is reported as not coming from a real judge (aggregate.py).
LOOPBACK_MODEL = "loopback-judge"
# A placeholder key for keyless local servers (vLLM/SGLang and the loopback test double accept any key).
PLACEHOLDER_KEY = "EMPTY"


# time.monotonic() by which the current judge call must be over (the question's time budget); None: no budget.
CALL_DEADLINE: ContextVar[float | None] = ContextVar("judge_call_deadline", default=None)


def deadline_http_client(sdk, timeout: float):
    """The SDK's default HTTP client with a transport that holds each request to a deadline on the whole exchange.
    httpx logs each request's URL at INFO: it shows no credential of the --base_url (the SDKs log none)."""
    httpx = http_library()
    redact_urls_logged_by(httpx.__name__)

    class DeadlineStream(httpx.SyncByteStream):
        def __init__(self, inner, deadline: float, request):
            self._inner, self._deadline, self._request = inner, deadline, request

        def __iter__(self):
            for chunk in self._inner:
                if time.monotonic() > self._deadline:
                    raise httpx.ReadTimeout("the reply was still arriving at the call's deadline",
                                            request=self._request)
                yield chunk

        def close(self) -> None:
            self._inner.close()

    class DeadlineTransport(httpx.HTTPTransport):
        def handle_request(self, request):
            deadline = time.monotonic() + timeout
            budget = CALL_DEADLINE.get()
            if budget is not None:
                deadline = min(deadline, budget)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise httpx.ConnectTimeout("no time left for the call", request=request)
            # and no single wait (connect, a read of the headers) may outlast the deadline either
            waits = dict(request.extensions.get("timeout") or {})
            request.extensions["timeout"] = {name: remaining if waits.get(name) is None else min(waits[name], remaining)
                                             for name in ("connect", "read", "write", "pool")}
            response = super().handle_request(request)
            response.stream = DeadlineStream(response.stream, deadline, request)
            return response

    # the SDKs' own default connection limits (their default client's, which a custom transport replaces)
    limits = httpx.Limits(max_connections=1000, max_keepalive_connections=100)
    return sdk.DefaultHttpxClient(transport=DeadlineTransport(limits=limits), timeout=timeout)


@dataclass(frozen=True)
class Completion:
    text: str
    served_model: str | None = None  # the `model` field of the reply: who actually answered


def retry_after_seconds(headers, now: float | None = None) -> float | None:
    """Seconds the server asks us to wait: `retry-after-ms`, or `Retry-After` as seconds or an HTTP-date
    (RFC 9110, section 10.2.3). None when absent or unreadable; never negative."""
    if headers is None:
        return None
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            return max(0.0, float(value) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class ProviderError(RuntimeError):
    """A failed judge call. `transient` says whether retrying can help (429, 5xx, timeouts, dropped connections)."""

    def __init__(self, message: str, *, transient: bool, status: int | None = None,
                 retry_after: float | None = None):
        # a judgment row, the report and the console carry this text: any URL in it (an SDK's error naming the
        # --base_url) shows no credential
        super().__init__(redact_url(message))
        self.transient = transient
        self.status = status
        self.retry_after = retry_after  # seconds the server asked for (Retry-After), if it said


class Provider(Protocol):
    """What the judge pipeline needs of a provider instance. A provider *class* also declares, for the registry:
    ``NAME`` (what ``judge_config`` records, whichever registered name built it), ``API`` (its wire format:
    "openai-chat-completions", "anthropic-messages" or another; params.py checks which parameters a family may send
    by it) and ``FAMILIES`` (the request parameters of its models' families, most specific first, the last a
    catch-all with ``models: ["*"]``; without ``providers``, which the registry fills in)."""

    model: str
    config: dict  # what a judgment depends on besides the prompt (params.judge_config)

    def complete(self, system: str, messages: list[dict]) -> Completion: ...


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
        response = getattr(error, "response", None)
        return ProviderError(f"HTTP {status}: {name}{detail}", transient=_is_transient_status(status),
                             status=status, retry_after=retry_after_seconds(getattr(response, "headers", None)))
    return ProviderError(f"{name}: {error}", transient=False)


def with_temperature_fallback(create, family: ModelFamily, bad_request: type[Exception] | tuple):
    """`create(with_temperature=True)`, and once more without a temperature when the family allows it and the API
    rejected the request for it (the official harness: temperature 0 first, then the model's default, on a 400
    whose message names temperature or says unsupported, or an SDK that refuses the argument itself). The message
    is read for that choice only, never logged: a provider's error text may echo request details."""
    try:
        return create(True)
    except bad_request as error:
        message = str(error).lower()
        if not (family.temperature_fallback and family.temperature is not None
                and ("temperature" in message or "unsupported" in message)):
            raise
    return create(False)


def malformed_body(error: Exception) -> ProviderError:
    """A 200 whose body is not the API's JSON (cut short by a proxy, an HTML/text error page): the same request
    can succeed, so it is transient."""
    return ProviderError(f"HTTP 200 with an unreadable body: {type(error).__name__}", transient=True)


def _api_key(env_var: str, base_url: str | None) -> str:
    key = os.environ.get(env_var)
    if key:
        return key
    if base_url:  # self-hosted OpenAI-compatible servers commonly run without auth
        return PLACEHOLDER_KEY
    raise ProviderError(f"set {env_var} in the environment (keys are read from the environment only)",
                        transient=False)


class OpenAICompatibleProvider:
    """Any server speaking /v1/chat/completions: OpenAI, vLLM, SGLang, the loopback test double."""

    NAME = "openai"
    API = "openai-chat-completions"
    FAMILIES = (
        {"name": "openai-reasoning", "models": ["gpt-5*", "o1*", "o3*", "o4*"],
         "token_limit_param": "max_completion_tokens", "temperature": None},
        {"name": "openai-compatible", "models": ["*"], "token_limit_param": "max_tokens", "temperature": 0.0},
    )

    def __init__(self, model: str, base_url: str | None = None, *, timeout: float = 120.0, max_tokens: int = 4096,
                 family: ModelFamily | None = None, api_key_env: str = "OPENAI_API_KEY"):
        import openai

        self._openai = openai
        self.model = model
        self.max_tokens = max_tokens
        self.family = family or family_for(self.NAME, model, parse_families(None))
        self.config = judge_config(self.NAME, model, max_tokens, self.family)
        # SDK retries are off: client.py owns retry, backoff and the attempt count.
        self._client = openai.OpenAI(api_key=_api_key(api_key_env, base_url), base_url=base_url or None,
                                     timeout=timeout, max_retries=0,
                                     http_client=deadline_http_client(openai, timeout))

    def request_kwargs(self, with_temperature: bool = True) -> dict:
        """The family's parameters: reasoning models take max_completion_tokens and no temperature."""
        kwargs = {self.family.token_limit_param: self.max_tokens} if self.family.send_token_limit else {}
        if self.family.temperature is not None and with_temperature:
            kwargs["temperature"] = self.family.temperature
        if self.family.reasoning_effort is not None:
            kwargs["reasoning_effort"] = self.family.reasoning_effort
        if self.family.seed is not None:
            kwargs["seed"] = self.family.seed
        if self.family.json_response:
            kwargs["response_format"] = {"type": "json_object"}
        return kwargs

    def complete(self, system: str, messages: list[dict]) -> Completion:
        from openai.types.chat import ChatCompletion

        def create(with_temperature: bool):
            return self._client.chat.completions.create(
                model=self.model, messages=[{"role": "system", "content": system}, *messages],
                **self.request_kwargs(with_temperature))

        try:
            response = with_temperature_fallback(create, self.family, self._openai.BadRequestError)
        except self._openai.OpenAIError as error:
            raise _classify(error, self._openai) from None
        except (ValueError, TypeError) as error:  # a 200 body cut short: json.JSONDecodeError is a ValueError
            raise malformed_body(error) from None
        if not isinstance(response, ChatCompletion):  # the SDK hands back the text of a non-JSON body
            raise malformed_body(TypeError(f"{type(response).__name__} body"))
        if not response.choices:
            raise ProviderError("empty choices in response", transient=True)
        choice = response.choices[0]
        text = getattr(choice.message, "content", None) or ""
        if not text.strip() and choice.finish_reason == "length":
            # A reasoning model can spend the whole limit thinking; asking again would do the same.
            raise ProviderError(f"the reply reached {self.family.token_limit_param}={self.max_tokens} before any "
                                "text; raise --max_tokens", transient=False)
        return Completion(text, getattr(response, "model", None))


def anthropic_root(base_url: str | None) -> str | None:
    """The SDK posts to {base_url}/v1/messages, so an OpenAI-style ".../v1" base_url is cut back to its root."""
    if not base_url:
        return None
    return base_url.rstrip("/").removesuffix("/v1")


class AnthropicProvider:
    """The Messages API (the paper's judge: claude-opus-4-7, max output 4,096 tokens, 1M context; App. D Table 16)."""

    NAME = "anthropic"
    API = "anthropic-messages"
    FAMILIES = (
        {"name": "claude-opus-4-7", "models": ["claude-opus-4-7*"], "temperature": None,
         "anthropic_beta": [CONTEXT_1M_BETA]},
        {"name": "anthropic", "models": ["*"], "temperature": None},
    )

    def __init__(self, model: str, base_url: str | None = None, *, timeout: float = 120.0, max_tokens: int = 4096,
                 family: ModelFamily | None = None, api_key_env: str = "ANTHROPIC_API_KEY"):
        import anthropic

        self._anthropic = anthropic
        self.model = model
        self.max_tokens = max_tokens
        self.family = family or family_for(self.NAME, model, parse_families(None))
        self.config = judge_config(self.NAME, model, max_tokens, self.family)
        # The 1M-context beta travels as a client default header, as in the official harness's Anthropic client.
        headers = {"anthropic-beta": ",".join(self.family.anthropic_beta)} if self.family.anthropic_beta else None
        # SDK retries are off: client.py owns retry, backoff and the attempt count.
        self._client = anthropic.Anthropic(api_key=_api_key(api_key_env, base_url), base_url=anthropic_root(base_url),
                                           timeout=timeout, max_retries=0, default_headers=headers,
                                           http_client=deadline_http_client(anthropic, timeout))

    def request_kwargs(self, with_temperature: bool = True) -> dict:
        kwargs = {"max_tokens": self.max_tokens}
        if self.family.temperature is not None and with_temperature:
            kwargs["temperature"] = self.family.temperature
        return kwargs

    def complete(self, system: str, messages: list[dict]) -> Completion:
        from anthropic.types import Message

        def create(with_temperature: bool):
            return self._client.messages.create(model=self.model, system=system, messages=messages,
                                                **self.request_kwargs(with_temperature))

        try:
            # TypeError: anthropic SDKs from 2.x on refuse a temperature argument before any request is sent
            response = with_temperature_fallback(create, self.family, (self._anthropic.BadRequestError, TypeError))
        except self._anthropic.AnthropicError as error:
            raise _classify(error, self._anthropic) from None
        except (ValueError, TypeError) as error:  # a 200 body cut short
            raise malformed_body(error) from None
        if not isinstance(response, Message) or not isinstance(response.content, list):
            raise malformed_body(TypeError(f"{type(response).__name__} body"))
        text = "".join(block.text for block in response.content if getattr(block, "type", None) == "text")
        if not text.strip():
            # An empty reply cannot go back in a repair turn (the API rejects an empty assistant message), so it
            # is a provider failure: retried, unless the model refused (the same prompt would be refused again).
            raise ProviderError(f"empty reply (stop_reason={response.stop_reason})",
                                transient=response.stop_reason != "refusal")
        return Completion(text, getattr(response, "model", None))


class HFLocalProvider:
    """A local HF checkpoint via cader.vlm.loading, greedy decoding; calls are serialised (one model, one device)."""

    NAME = "hf-local"
    API = "hf-local"
    FAMILIES = ({"name": "hf-local", "models": ["*"], "temperature": None},)

    def __init__(self, model: str, base_url: str | None = None, *, timeout: float = 0.0, max_tokens: int = 4096,
                 family: ModelFamily | None = None, device: str = "cpu"):
        from cader.vlm.loading import load_model, load_processor

        self.model = model
        self.max_tokens = max_tokens
        self.family = family or family_for(self.NAME, model, parse_families(None))
        self.config = judge_config(self.NAME, model, max_tokens, self.family)
        self._processor = load_processor(model)
        self._model = load_model(model, device=device)
        self._lock = threading.Lock()

    def complete(self, system: str, messages: list[dict]) -> Completion:
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
            return Completion(self._processor.decode(new_tokens, skip_special_tokens=True), self.model)


# The provider registry: each --provider name and the class it builds. Everything else that names a provider comes
# from it: the CLI's --provider choices (ProviderName), the names a family may list (params.ModelFamily) and the
# built-in family table (DEFAULT_FAMILIES, from each class's FAMILIES). One class may serve several names.
PROVIDERS: dict[str, type] = {
    "anthropic": AnthropicProvider,
    "openai": OpenAICompatibleProvider,
    "openai-compatible": OpenAICompatibleProvider,
    "hf-local": HFLocalProvider,
}
ProviderName = Literal[tuple(sorted(PROVIDERS))]  # the registry's names, as a type jsonargparse shows as choices


def families_of_the_registry(registry: dict[str, type]) -> list[dict]:
    """The built-in family table: every class's specific families first, then every class's catch-all, each
    listing the names the class is registered under (a catch-all ahead of another class's specific family
    would never shadow it, as they list other providers; within a class the order is the class's own).

    registry: provider name -> class, as PROVIDERS.
    """
    classes = list(dict.fromkeys(registry.values()))
    names = {cls: [name for name, other in registry.items() if other is cls] for cls in classes}

    def entry(cls: type, family: dict) -> dict:
        return {"name": family["name"], "providers": names[cls], **{k: v for k, v in family.items() if k != "name"}}

    specific = [entry(cls, family) for cls in classes for family in cls.FAMILIES[:-1]]
    return specific + [entry(cls, cls.FAMILIES[-1]) for cls in classes]


DEFAULT_FAMILIES: list[dict] = families_of_the_registry(PROVIDERS)


def parse_families(entries: list[dict] | None) -> list[ModelFamily]:
    """The config's `families` list (None: the built-in table) validated against this registry; raises
    params.JudgeConfigError naming the entry."""
    return validate_families(DEFAULT_FAMILIES if entries is None else entries, PROVIDERS)


def judge_config(provider: str, model: str, max_tokens: int, family: ModelFamily) -> dict:
    """Everything a judgment depends on besides the prompt, under the provider class's own name: one class
    registered under several names (openai, openai-compatible) judges alike under each, so a rerun under another
    of them re-judges nothing."""
    registered = PROVIDERS.get(provider)
    return request_config(registered.NAME if registered is not None else provider, model, max_tokens, family)


def make_provider(name: str, model: str, base_url: str | None = None, *, families: list[dict] | None = None,
                  **kwargs) -> Provider:
    """A provider whose request parameters come from the first matching entry of `families` (None: defaults).
    Raises params.JudgeConfigError for an invalid family table or a model no entry matches."""
    try:
        factory = PROVIDERS[name]
    except KeyError:
        raise ValueError(f"unknown provider {name!r}; choose one of {sorted(PROVIDERS)}") from None
    family = family_for(name, model, parse_families(families))
    try:
        return factory(model, base_url, family=family, **kwargs)
    except http_library().InvalidURL:  # its text quotes the piece it could not read: a piece of a password perhaps
        raise ProviderError(f"--base_url {redact_url(base_url or '')}: not a URL (a password holding '/', '?', '#' "
                            "or '@' must be %-encoded)", transient=False) from None
