"""The lmms-eval model's server settings (`backend=server`), read from its model_args without lmms-eval, so that
they are checked, and refused by name, before anything loads.

lmms-eval 0.7.3 splits `--model_args` on commas (lmms_eval/utils.py `simple_parse_args_string`: a comma outside
quotes, braces and brackets ends an argument; each value is then turned into a bool, int or float when it reads as
one), so several replica URLs are joined with `|`: `model_urls=http://node1:8000|http://node2:8000`. What that
parser keeps in one value with its commas, `[a,b]` or a quoted `"a,b"`, is read too (`url_list`).

The settings are evaluate/run.py's, under the same names: `model_urls`, `verifier_urls`, and `server.<field>` for
each `--server.<field>` flag (`ServerOptions`: concurrency per replica, timeout_s, retries, backoff_s,
backoff_max_s, api_key_env, served_model, probe), after the `server:` block of the `config=` file when it has one.
A key or token is never a model_arg (lmms-eval logs its model_args), nor part of a URL (a user, password, query or
fragment in model_urls/verifier_urls is refused): it comes from the environment variable that `server.api_key_env`
names (default VLLM_API_KEY).
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Mapping

from cader.contracts.paper import SELF_VERIFIER
from cader.contracts.provenance import redact_url
from cader.evaluate.backends.base import BackendError
from cader.evaluate.backends.server import ServerOptions
from cader.evaluate.backends.server_build import (
    MissingServers,
    load_server_backends,
    server_roles,
    split_urls,
)

SERVER_PREFIX = "server."
SERVER_FIELDS = {f.name for f in dataclasses.fields(ServerOptions)}
SEPARATOR = "|"
# a model_arg named like a credential: refused whatever its value (`server.api_key_env` names a variable: allowed)
SECRET_NAME = re.compile(r"(^|[._])(api_?key|key|token|password|secret)$", re.IGNORECASE)
VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def url_list(value) -> list[str]:
    """model_urls=/verifier_urls= -> the URLs: `a|b` (or `[a,b]`, `"a,b"`, which lmms-eval keeps whole)."""
    if value is None:
        return []
    return split_urls(str(value).strip().strip("\"'[]"))


def split_server_args(overrides: Mapping) -> tuple[dict, dict]:
    """({field: value} of the `server.<field>` model_args, the other model_args)."""
    server = {k[len(SERVER_PREFIX):]: v for k, v in overrides.items() if k.startswith(SERVER_PREFIX)}
    rest = {k: v for k, v in overrides.items() if not k.startswith(SERVER_PREFIX)}
    return server, rest


def secret_problem(names) -> str | None:
    """Why a model_arg named like a key or token is refused (None when none is)."""
    secret = sorted(name for name in names if SECRET_NAME.search(name))
    if not secret:
        return None
    return (f"model_args: {', '.join(secret)}: keys and tokens come from the environment only (lmms-eval logs its "
            f"model_args); set VLLM_API_KEY, or name another variable with server.api_key_env=NAME")


def server_options(config_block: Mapping | None, values: Mapping) -> ServerOptions:
    """ServerOptions from the config file's `server:` block, then the `server.<field>` model_args; ValueError, one
    line naming the model_arg, for an unknown field or a value it cannot take."""
    from pydantic import TypeAdapter, ValidationError

    merged = {**(config_block or {}), **values}
    unknown = sorted(set(merged) - SERVER_FIELDS)
    if unknown:
        raise ValueError(f"model_args: unknown {', '.join(SERVER_PREFIX + k for k in unknown)} (server settings: "
                         f"{', '.join(SERVER_PREFIX + k for k in sorted(SERVER_FIELDS))})")
    hints = typing.get_type_hints(ServerOptions)
    for name, value in merged.items():  # lmms-eval made a number of a numeric-looking name
        if str in typing.get_args(hints[name]) + (hints[name],) and isinstance(value, (int, float)) \
                and not isinstance(value, bool):
            merged[name] = str(value)
    env = merged.get("api_key_env")
    if env and not VARIABLE_NAME.match(str(env)):
        raise ValueError(f"model_args: server.api_key_env={env!r} is not an environment variable's name (it names "
                         "the variable holding the key, never the key)")
    try:
        return TypeAdapter(ServerOptions).validate_python(merged)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        if where:  # one field's type
            raise ValueError(f"model_args: server.{where}={first.get('input')!r}: {first['msg']}") from None
        # ServerOptions' own range check, which names no field: the values given, and the rule without its repr
        given = ", ".join(f"{SERVER_PREFIX}{k}={v!r}" for k, v in merged.items())
        rule = first["msg"].removeprefix("Value error, ").split("; got", 1)[0]
        raise ValueError(f"model_args: {given}: {rule}") from None


def server_problem(backend: str, model_urls, verifier_urls, server_values: Mapping,
                   config_block: Mapping | None = None) -> str | None:
    """Why the server model_args cannot go ahead (None when they can): a URL carrying credentials, server settings
    without backend=server, backend=server without model_urls, a server setting it cannot take."""
    for name, value in (("model_urls", model_urls), ("verifier_urls", verifier_urls)):
        secret = [redact_url(url) for url in url_list(value) if redact_url(url) != url]
        if secret:  # lmms-eval logs its model_args and writes them into its results
            return (f"model_args: {name}: {', '.join(secret)}: a URL carrying a user, password, query or fragment "
                    "would be written to lmms-eval's logs; give the servers' key in the environment variable "
                    "server.api_key_env names (default VLLM_API_KEY)")
    given = [name for name, value in (("model_urls", model_urls), ("verifier_urls", verifier_urls)) if value]
    given += [SERVER_PREFIX + k for k in server_values]
    if backend != "server":
        if given:
            return f"model_args: {', '.join(given)}: read only with backend=server (got backend={backend})"
        return None
    if not url_list(model_urls):
        return ("model_args: backend=server needs model_urls=URL (the main model's vLLM servers; several joined with "
                f"{SEPARATOR}: lmms-eval splits model_args on commas; docs/lmms_eval.md)")
    try:
        server_options(config_block, server_values)
    except ValueError as err:
        return str(err)
    return None


class ServerRefusal(Exception):
    """The servers cannot be used as given (the message says why, in one line)."""


def load_servers(model: str, verifier: str, model_urls, verifier_urls, needs_verifier: bool,
                 server_values: Mapping, config_block: Mapping | None = None):
    """(main, verifier) server backends, as evaluate/run.py builds them for --backend server (the verifier shares
    the main model's when it is the same model); ServerRefusal, one line, when a needed model has no servers, or a
    server cannot be reached or cannot give exact scores (the backend's start-up probe names the server flag it
    lacks).

    Args:
        model: the model= model_arg
        verifier: the verifier's folder or hub id (`verifier_model`: the main model's when it verifies itself)
        model_urls: the model_urls= model_arg
        verifier_urls: the verifier_urls= model_arg
        needs_verifier: whether the run calls the verifier (CaderConfig uses_verifier and runs_stage2)
        server_values: the `server.<field>` model_args
        config_block: the config file's `server:` block
    """
    try:
        roles = server_roles(model, verifier, url_list(model_urls), url_list(verifier_urls), needs_verifier)
        options = server_options(config_block, server_values)
    except MissingServers as err:
        raise ServerRefusal(f"model_args: verifier={err.path} is another model than model= and the run calls it: "
                            f"give its servers with verifier_urls=URL{SEPARATOR}URL (or verifier={SELF_VERIFIER}: "
                            "the main model's servers verify too, not the paper's Stage 2)") from None
    except ValueError as err:
        raise ServerRefusal(str(err)) from None
    try:
        return load_server_backends(roles, options)
    except (BackendError, OSError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ServerRefusal(f"backend=server, model={model}: {first}") from None
