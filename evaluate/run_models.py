"""Which models an evaluate/run.py run loads, and what it says about them: the main model and the verifier (the
paper's Qwen3-VL-4B-Instruct unless --verifier names another, or `main_model` for the main model verifying its own
crops), each on the backend --backend names (transformers, vLLM in this process, or vLLM OpenAI servers), and the
report's and the log's account of them."""

from __future__ import annotations

import logging
from pathlib import Path

from cader.contracts.paper import PAPER, SELF_VERIFIER, is_self_verifier
from cader.evaluate.backends.base import BackendError
from cader.evaluate.backends.server import ServerOptions
from cader.evaluate.backends.server_build import MissingServers, server_roles, split_urls
from cader.evaluate.method.config import CaderConfig
from cader.vlm.files import write_json_atomic

log = logging.getLogger("cader.evaluate.run")


class RunError(Exception):
    """A whole-run problem (an unreadable input, a model that does not load, an output in use): one line, exit 2."""


def make_backend(kind: str, path: str, device: str, dtype: str, attn_implementation: str | None, engine=None,
                 urls: list[str] | None = None, server: ServerOptions | None = None,
                 max_batch_tokens: int | None = None):
    """A loaded model: HFBackend, VLLMBackend or ServerBackend.

    kind: hf, vllm or server.
    path: the model's folder or hub id.
    device: the HF backend's torch device.
    dtype: the weights dtype (auto: the checkpoint's).
    attn_implementation: the HF attention kernel (None: transformers' choice).
    engine: the vLLM engine settings (VLLMEngineConfig).
    urls: the server backend's replicas.
    server: the server backend's options (ServerOptions).
    max_batch_tokens: the HF backend's padded tokens per forward (None: its default).
    """
    if kind == "server":
        from cader.evaluate.backends.server import ServerBackend

        return ServerBackend(path, urls or [], server)
    if kind == "vllm":
        from cader.evaluate.backends.vllm import VLLMBackend

        return VLLMBackend(path, dtype=dtype, engine=engine)
    from cader.evaluate.backends.hf import HFBackend

    budget = {} if max_batch_tokens is None else {"max_batch_tokens": max_batch_tokens}
    return HFBackend(path, dtype=dtype, device=device, attn_implementation=attn_implementation, **budget)


def verifier_path(args) -> str | None:
    """The verifier's folder or hub id: --verifier, or --model under --verifier main_model.

    args: the parsed flags.
    """
    return args.model if is_self_verifier(args.verifier, args.model) else args.verifier


def say_which_verifier(args, needs_verifier: bool) -> None:
    """One log line naming the verifier, a warning when it is not the paper's two-model Stage 2.

    args: the checked flags.
    needs_verifier: whether any configuration of the run calls the verifier.
    """
    if not needs_verifier:
        return
    if is_self_verifier(args.verifier, args.model):
        log.warning("the main model verifies its own crops (--verifier %s): not the paper's Stage 2, whose verifier is "
                    "%s, and about twice the verifier's cost; report.json and every Stage-2 record say so",
                    SELF_VERIFIER, PAPER.verifier)
    else:
        log.info("verifier: %s%s", args.verifier, " (the paper's)" if args.verifier == PAPER.verifier else "")


def _load_backend(args, flag: str, path: str, engine, urls: list[str] | None = None):
    """The backend of `path`; RunError (one line) when it does not load: a hub id that is not there, no network, a
    server that cannot give exact scores.

    args: the checked flags (--backend, --device, --dtype, --attn_implementation, --server).
    flag: the flag that named `path`, for the message.
    path: the model's folder or hub id.
    engine: its vLLM engine settings.
    urls: its servers (--backend server).
    """
    try:
        return make_backend(args.backend, path, args.device, args.dtype, args.attn_implementation, engine=engine,
                            urls=urls, server=args.server, max_batch_tokens=args.hf_max_batch_tokens)
    except BackendError as err:  # a server refused at start: the message names the server flag it lacks
        raise RunError(f"--{flag} {path}: {err}") from None
    except (OSError, ValueError) as err:
        log.debug("loading %s failed", path, exc_info=True)
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        hint = ""
        if flag == "verifier" and path == PAPER.verifier:   # the default: say what it is and how to choose another
            hint = (f"; it is the paper's verifier, the default: download it, or name another with --verifier PATH, "
                    f"or --verifier {SELF_VERIFIER} to have the main model verify (not the paper's Stage 2)")
        raise RunError(f"--{flag} {path}: cannot load it ({first}){hint}") from None


def load_backends(args, cfgs: list[CaderConfig]):
    """(main, verifier) backends; one copy when they are the same model or no configuration uses the verifier.

    args: the checked flags.
    cfgs: the configurations the run runs.
    """
    verifier = verifier_path(args)
    needs_verifier = any(c.uses_verifier and c.runs_stage2 for c in cfgs)
    say_which_verifier(args, needs_verifier)
    if args.backend == "server":  # which servers serve which role: the rule the lmms-eval model shares
        try:
            roles = server_roles(args.model, verifier, split_urls(args.model_urls), split_urls(args.verifier_urls),
                                 needs_verifier)
        except MissingServers as err:
            if err.role == "model":
                raise RunError("--backend server needs --model_urls (the main model's servers, comma separated)") from None
            raise RunError(f"--verifier {err.path} is another model: give its servers with --verifier_urls (or "
                           f"--verifier {SELF_VERIFIER}: the main model's servers verify too, not the paper's "
                           "Stage 2)") from None
        main_backend = _load_backend(args, "model", args.model, args.vllm_main, list(roles.model_urls))
        if roles.verifier is None:
            return main_backend, main_backend
        return main_backend, _load_backend(args, "verifier", roles.verifier, args.vllm_verifier,
                                           list(roles.verifier_urls))
    main_backend = _load_backend(args, "model", args.model, args.vllm_main)
    if not needs_verifier or verifier == args.model:
        return main_backend, main_backend
    return main_backend, _load_backend(args, "verifier", verifier, args.vllm_verifier)


def write_server_accounting(out: Path, shard, main_backend, verifier_backend) -> None:
    """<out>/server_routing.json (per shard when sharded): each server backend's requests per replica and per
    affinity key (which replica answered the requests carrying the same frames), for the logs and the tests.

    out: the output folder.
    shard: (I, N) or None.
    main_backend: the main model's backend.
    verifier_backend: the verifier's backend.
    """
    roles = {"model": main_backend} | ({} if verifier_backend is main_backend else {"verifier": verifier_backend})
    accounting = {role: b.accounting() for role, b in roles.items() if hasattr(b, "accounting")}
    if not accounting:
        return
    name = "server_routing.json" if shard is None else f"server_routing.shard-{shard[0]}-of-{shard[1]}.json"
    write_json_atomic(out / name, accounting)
    for role, acc in accounting.items():
        log.info("%s servers: %s", role, ", ".join(f"{r['url']} {r['sent']} requests ({r['failed']} failed)"
                                                   for r in acc["replicas"]))


def describe_backends(main_backend, verifier_backend) -> dict:
    """The report's `chat_template` and `backends` blocks for each role; warns of a template without thinking-off.

    main_backend: the main model's backend.
    verifier_backend: the verifier's backend.
    """
    roles = (("model", main_backend), ("verifier", verifier_backend))
    # Whether each model's template honours enable_thinking, and so whether the backend adds the think block itself.
    templates = {role: (backend.template.to_dict() if getattr(backend, "template", None) else None)
                 for role, backend in roles}
    # how each backend reads its scores (vLLM: logprob_token_ids over the whole vocabulary, never a top-k list)
    described = {role: (backend.describe() if hasattr(backend, "describe") else {"name": type(backend).__name__})
                 for role, backend in roles}
    for role, check in templates.items():
        if check and check["think_block_added"]:
            log.warning(
                "the %s's chat template ignores enable_thinking; thinking-off prompts get the empty think block "
                "from cader (recorded in report.json config.chat_template)", role
            )
    return {"chat_template": templates, "backends": described}
