"""The replicas of the server backend (`cader.evaluate.backends.server`): JSON requests sent through a `Router`
(affinity, capacity, retries with back-off), each replica named in messages and files by its URL with the
credentials hidden (`cader.contracts.provenance.redact_url`); the secrets in a URL travel in its requests only."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from cader.contracts.provenance import redact_url, redact_urls_logged_by
from cader.evaluate.backends.base import BackendError
from cader.evaluate.backends.routing import Router

log = logging.getLogger(__name__)


def http_library():
    """The HTTP library the installed OpenAI and Anthropic SDKs are built on: httpx2 in the SDK versions that replaced
    httpx."""
    try:
        import httpx2 as httpx
    except ImportError:
        import httpx
    return httpx


def checked_url(httpx, url: str, shown: str) -> None:
    """ValueError unless `url` is an http(s) URL with a host, naming it as `shown` (its credentials hidden). One that
    httpx cannot read is not named beyond its scheme, nor is httpx's refusal passed on: either may quote a piece of
    a password (a raw '/' makes the rest of it read as a port)."""
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, ValueError, TypeError):
        parsed, shown = None, f"{url.partition('://')[0] if '://' in url else ''}://***"
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.host:
        raise ValueError(f"{shown}: not a server URL (http://host:port, with or without /v1; a password holding "
                         "'/', '?', '#', '@', ',' or '|' must be %-encoded)")


class RequestFailed(Exception):
    """A request that may succeed on another replica (no answer, a dropped connection, a 5xx)."""


@dataclass
class ServerOptions:
    """How the server backend talks to its replicas (`--server.*`).

    Attributes:
        concurrency: Requests in flight per replica (vLLM batches them); the run's --concurrency should be about
            replicas x this, so every replica has work.
        timeout_s: Seconds one request may take before it counts as failed and is retried elsewhere (a long video's
            prefill on a busy GPU takes tens of seconds; a stopped server never answers).
        retries: Times a failed request is retried (on another replica when one is up) before its sample fails.
        backoff_s: A replica that failed is left out this long, doubling with each consecutive failure...
        backoff_max_s: ...up to this.
        api_key_env: Environment variable holding the API key (vLLM's --api-key) or token of a hosted endpoint; never
            a flag, never logged.
        served_model: The model name the servers serve (null: the only one /v1/models lists).
        probe: Check each replica at start with one request (refuse a server that cannot give exact scores).
    """

    concurrency: int = 4
    timeout_s: float = 600.0
    retries: int = 4
    backoff_s: float = 1.0
    backoff_max_s: float = 30.0
    api_key_env: str = "VLLM_API_KEY"
    served_model: str | None = None
    probe: bool = True

    def __post_init__(self):
        if self.concurrency < 1 or self.retries < 0 or self.timeout_s <= 0:
            raise ValueError(f"server options: concurrency >= 1, retries >= 0, timeout_s > 0; got {self}")


class ReplicaPool:
    """Sends JSON requests to replicas through a `Router`: affinity, capacity, retries with back-off."""

    def __init__(self, urls: Sequence[str], options: ServerOptions):
        httpx = http_library()
        if not urls:
            raise ValueError("no server URLs (--model_urls / --verifier_urls)")
        self.urls = [u.rstrip("/").removesuffix("/v1") for u in urls]
        self.shown = [redact_url(u) for u in self.urls]  # what messages and files name: credentials hidden
        for url, shown in zip(self.urls, self.shown):
            checked_url(httpx, url, shown)
        self.options = options
        self.router = Router(len(self.urls), options.concurrency, options.backoff_s, options.backoff_max_s)
        self._cond = threading.Condition()
        logging.getLogger(httpx.__name__).setLevel(logging.WARNING)  # not one INFO line per request in the run's log
        redact_urls_logged_by(httpx.__name__)  # should a caller lower that level again
        key = os.environ.get(options.api_key_env) if options.api_key_env else None
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        limits = httpx.Limits(max_connections=len(self.urls) * options.concurrency + 4)
        self._http = httpx.Client(headers=headers, limits=limits,
                                  timeout=httpx.Timeout(options.timeout_s, connect=min(10.0, options.timeout_s)))
        # enough threads that every replica can be full while others wait for theirs
        self._pool = ThreadPoolExecutor(len(self.urls) * options.concurrency * 2, thread_name_prefix="cader-server")
        self.key_replicas: dict[str, dict[int, int]] = {}  # affinity key -> {replica: requests answered there}

    def get(self, i: int, path: str) -> dict:
        response = self._http.get(self.urls[i] + path)
        response.raise_for_status()
        return response.json()

    def post_once(self, i: int, body: dict) -> dict:
        """One request to replica `i`: the answer; RequestFailed to retry elsewhere; BackendError for a bad request."""
        httpx = http_library()
        try:
            response = self._http.post(self.urls[i] + "/v1/chat/completions", json=body)
        except httpx.HTTPError as err:  # refused, dropped, timed out
            raise RequestFailed(redact_url(f"{self.shown[i]}: {type(err).__name__}: {err}")) from err
        # a server's error text may echo the request's URL
        if response.status_code >= 500 or response.status_code in (408, 429):
            raise RequestFailed(redact_url(f"{self.shown[i]}: HTTP {response.status_code}: {response.text[:300]}"))
        if response.status_code != 200:  # the same request fails on every replica
            raise BackendError(redact_url(f"{self.shown[i]}: HTTP {response.status_code}: {response.text[:500]}"))
        return response.json()

    def post(self, key: str, work: float, body: dict) -> dict:
        """One request, routed; retried on another replica after a failure, `retries` times at most."""
        tried: set[int] = set()
        errors: list[str] = []
        while True:
            with self._cond:
                while (i := self.router.pick(key, time.monotonic(), tried)) is None:
                    self._cond.wait(timeout=max(0.05, self.router.next_up(time.monotonic())))
                self.router.start(i, work)
            ok = True
            try:
                answer = self.post_once(i, body)
            except RequestFailed as err:
                ok = False
                errors.append(str(err))
            finally:
                with self._cond:
                    self.router.finish(i, work, ok, time.monotonic())
                    if ok:
                        per_key = self.key_replicas.setdefault(key, {})
                        per_key[i] = per_key.get(i, 0) + 1
                    self._cond.notify_all()
            if ok:
                return answer
            tried.add(i)
            log.warning("request failed on replica %d (%s), %d of %d retries used", i, errors[-1][:200],
                        len(errors) - 1, self.options.retries)
            if len(errors) > self.options.retries:
                raise BackendError(f"server_unavailable: {len(errors)} attempts failed; last: {errors[-1]}")

    def post_all(self, requests: Sequence[tuple[str, float, dict]]) -> list[dict]:
        """Every (key, work, body) at once, each routed on its own; answers in order."""
        futures = [self._pool.submit(self.post, *request) for request in requests]
        return [f.result() for f in futures]

    def accounting(self) -> dict:
        """Per replica: requests sent and failed; per affinity key: requests answered by each replica."""
        with self._cond:
            counts = self.router.counts()
            return {"replicas": [{"url": u, **c} for u, c in zip(self.shown, counts)],
                    "keys": {k: {str(i): n for i, n in v.items()} for k, v in self.key_replicas.items()}}

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._http.close()
