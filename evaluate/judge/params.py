"""Request parameters per judge model family, from the config, validated (unknown parameters are config errors).

Model families differ in what a request may carry:
- OpenAI reasoning models (gpt-5*, o1*, o3*, o4*) reject `max_tokens` ("use 'max_completion_tokens' instead") and
  any temperature other than the default; the paper uses GPT-5 beside the main judge (AgentVidBench App. D.5,
  Table 16: "maximum completion tokens").
- Claude Opus 4.7, the paper's judge (Table 16: "1M context enabled; maximum output tokens: 4,096"), takes no
  sampling parameters; the official harness enables the long window with the request header
  `anthropic-beta: context-1m-2025-08-07` (github.com/krafton-ai/agentvidbench, evaluation/judge.py,
  `anthropic_call`; read at commit 13059bb69fee92de5cc79aeda7836d8aa20ccaeb of its public mirror
  jhyeonseo/agentvidbench); the value is one of the anthropic SDK's `AnthropicBetaParam` literals.
- Other OpenAI-compatible models (vLLM, SGLang) decode greedily with temperature 0 and `max_tokens`.

The first family whose `providers` and `models` (fnmatch patterns, case-insensitive) match is used. The built-in
table (`providers.DEFAULT_FAMILIES`) is made from the provider registry (`providers.PROVIDERS`): each provider class
declares its API's families; the names a family may list are the registry's.
"""

from __future__ import annotations

import hashlib
import json
from fnmatch import fnmatchcase
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

# The beta that gives Claude its 1M-token context window, as the official harness's Anthropic client sends it.
CONTEXT_1M_BETA = "context-1m-2025-08-07"


class JudgeConfigError(ValueError):
    """The judge configuration is invalid; the message names the entry and the parameter."""


def _registry_of(info: ValidationInfo) -> dict[str, type]:
    """The provider registry (name -> class with its API) a family is validated against. It is handed in as the
    validation context by the registry's own module (providers.parse_families): this module is imported by that
    one, so it must not import it back."""
    registry = (info.context or {}).get("registry")
    if registry is None:
        raise ValueError("a model family is validated against a provider registry: use providers.parse_families")
    return registry


class ModelFamily(BaseModel):
    """What a request to one family of judge models carries besides the prompt and the token limit value."""

    model_config = ConfigDict(extra="forbid")
    name: str
    providers: list[str] = Field(min_length=1, description="names of the provider registry (providers.PROVIDERS)")
    models: list[str] = Field(min_length=1, description="fnmatch patterns on the model name, case-insensitive")
    token_limit_param: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    send_token_limit: bool = Field(default=True, description="false: no token limit is sent (the API's own)")
    temperature: float | None = Field(default=None, ge=0.0, le=2.0, description="null: not sent")
    temperature_fallback: bool = Field(default=False, description="a request the API rejects for its temperature "
                                                                  "goes again without one (the official harness)")
    reasoning_effort: Literal["minimal", "low", "medium", "high"] | None = None
    seed: int | None = Field(default=None, description="OpenAI `seed`; null: not sent")
    json_response: bool = Field(default=False, description="OpenAI response_format {type: json_object}")
    anthropic_beta: list[str] = Field(default_factory=list, description="anthropic-beta header values")

    @field_validator("providers")
    @classmethod
    def _registered(cls, names: list[str], info: ValidationInfo) -> list[str]:
        known = _registry_of(info)
        unknown = [name for name in names if name not in known]
        if unknown:
            raise ValueError(f"unknown provider(s) {unknown}; the registry has {', '.join(sorted(known))}")
        return names

    @model_validator(mode="after")
    def _fits_its_providers(self, info: ValidationInfo) -> ModelFamily:
        apis = {_registry_of(info)[name].API for name in self.providers}  # the wire format each name speaks
        only_anthropic = apis == {"anthropic-messages"}
        only_openai = apis == {"openai-chat-completions"}
        if self.anthropic_beta and not only_anthropic:
            raise ValueError("anthropic_beta is an Anthropic header: list only 'anthropic' in providers")
        openai_only = self.token_limit_param == "max_completion_tokens" or self.reasoning_effort or \
            self.seed is not None or self.json_response
        if openai_only and not only_openai:
            raise ValueError("max_completion_tokens, reasoning_effort, seed and json_response are OpenAI "
                             "chat-completions parameters: list only openai providers")
        if only_anthropic and self.token_limit_param != "max_tokens":
            raise ValueError("the Messages API takes max_tokens")
        return self

    def matches(self, provider: str, model: str) -> bool:
        return provider in self.providers and any(fnmatchcase(model.lower(), p.lower()) for p in self.models)

    def request_params(self) -> dict:
        """The family's request settings (what a judgment depends on), without the matching rules."""
        return self.model_dump(exclude={"name", "providers", "models"})


def _describe(error: ValidationError, where: str) -> str:
    lines = []
    for item in error.errors():
        loc = ".".join(str(p) for p in item["loc"])
        if item["type"] == "extra_forbidden":
            allowed = ", ".join(ModelFamily.model_fields)
            lines.append(f"{where}: unknown parameter {loc!r} (allowed: {allowed})")
        else:
            lines.append(f"{where}{'.' + loc if loc else ''}: {item['msg']}")
    return "; ".join(lines)


def validate_families(entries: list[dict], registry: dict[str, type]) -> list[ModelFamily]:
    """Validate a `families` list against a provider registry (name -> class, as providers.PROVIDERS); raises
    JudgeConfigError naming the entry."""
    if not isinstance(entries, list) or not entries:
        raise JudgeConfigError("judge config: families must be a non-empty list")
    families = []
    for index, entry in enumerate(entries):
        name = entry.get("name", "?") if isinstance(entry, dict) else "?"
        where = f"judge config families[{index}] ({name})"
        if not isinstance(entry, dict):
            raise JudgeConfigError(f"{where}: expected a mapping, got {type(entry).__name__}")
        try:
            families.append(ModelFamily.model_validate(entry, context={"registry": registry}))
        except ValidationError as error:
            raise JudgeConfigError(_describe(error, where)) from None
    return families


def family_for(provider: str, model: str, families: list[ModelFamily]) -> ModelFamily:
    for family in families:
        if family.matches(provider, model):
            return family
    raise JudgeConfigError(f"judge config: no entry of families matches provider {provider!r} and model {model!r}; "
                           "add one (or a catch-all with models: ['*'])")


def request_config(provider: str, model: str, max_tokens: int, family: ModelFamily) -> dict:
    """Everything a judgment depends on besides the prompt (never the key or the server address); `provider` is
    the name recorded for it (providers.judge_config passes the provider class's own name)."""
    return {"provider": provider, "model": model, "max_tokens": max_tokens, "family": family.name,
            **family.request_params()}


def config_hash(config: dict) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]
