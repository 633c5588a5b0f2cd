"""Which server backends a run builds from its models and replica URLs: shared by the callers of the server backend
(the lmms-eval model `cader`, `cader.evaluate.lmms`; evaluate/run.py makes the same choices in its `load_backends`).

- URLs: a list of base URLs, given as one string separated by commas, `|` or white space (`split_urls`). `|` is
  the separator for lmms-eval's `--model_args`, which it splits on commas (lmms_eval/utils.py
  `simple_parse_args_string`: a comma outside quotes, braces and brackets ends an argument).
- Roles (`server_roles`): the main model needs its servers; the verifier (the paper's Qwen3-VL-4B-Instruct unless
  another is named) needs servers of its own when the run calls it; only when the main model verifies its own crops
  (`main_model`, or the main model named again) do the main model's servers serve both roles; a run that never calls
  the verifier builds only the main model's backend.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from cader.contracts.paper import PAPER, is_self_verifier
from cader.evaluate.backends.server import ServerOptions

URL_SEPARATORS = re.compile(r"[,|\s]+")


def split_urls(value: str | Sequence[str] | None) -> list[str]:
    """"a|b", "a,b", "a b" or ["a", "b"] -> ["a", "b"] (empty entries dropped, order kept)."""
    if value is None:
        return []
    parts = [value] if isinstance(value, str) else list(value)
    return [url for part in parts for url in URL_SEPARATORS.split(str(part)) if url]


class MissingServers(ValueError):
    """A model the run needs has no server URLs; `role` is "model" or "verifier", `path` the model."""

    def __init__(self, role: str, path: str):
        super().__init__(f"no server URLs for the {role} {path}")
        self.role, self.path = role, path


@dataclass(frozen=True)
class ServerRoles:
    """The server backends a run builds: the main model's, and the verifier's unless it shares the main one.

    Attributes:
        model: the main model's folder or hub id (its processor is read on the client)
        model_urls: the main model's replicas
        verifier: the verifier's folder or hub id; None when the main model's backend serves as the verifier
        verifier_urls: the verifier's replicas (empty when `verifier` is None)
    """

    model: str
    model_urls: tuple[str, ...]
    verifier: str | None = None
    verifier_urls: tuple[str, ...] = ()


def server_roles(model: str, verifier: str | None, model_urls: Sequence[str], verifier_urls: Sequence[str],
                 needs_verifier: bool) -> ServerRoles:
    """The backends to build (module docstring); MissingServers when a needed model has no URLs.

    Args:
        model: the main model
        verifier: the verifier (None: the paper's, PAPER.verifier; SELF_VERIFIER or `model`: the main model)
        model_urls: the main model's replicas
        verifier_urls: the verifier's replicas (empty: the main model's, when it is the same model)
        needs_verifier: whether any configuration of the run calls the verifier
    """
    if not model_urls:
        raise MissingServers("model", model)
    verifier = PAPER.verifier if verifier is None else verifier
    verifier = model if is_self_verifier(verifier, model) else verifier
    shared = verifier == model and (not verifier_urls or list(verifier_urls) == list(model_urls))
    if not needs_verifier or shared:
        return ServerRoles(model, tuple(model_urls))
    if not verifier_urls:
        raise MissingServers("verifier", verifier)
    return ServerRoles(model, tuple(model_urls), verifier, tuple(verifier_urls))


def load_server_backends(roles: ServerRoles, options: ServerOptions | None = None):
    """(main, verifier) ServerBackends of `roles`, the same object twice when the verifier shares the main one.
    Each replica is probed at start (ServerRefused, naming the server flag it lacks)."""
    from cader.evaluate.backends.server import ServerBackend

    main = ServerBackend(roles.model, list(roles.model_urls), options)
    if roles.verifier is None:
        return main, main
    try:
        return main, ServerBackend(roles.verifier, list(roles.verifier_urls), options)
    except BaseException:
        main.close()
        raise
