"""A loopback judge server speaking both OpenAI chat completions and Anthropic Messages (test double; 127.0.0.1).

It answers POST /v1/chat/completions (OpenAI shape) and POST /v1/messages (Anthropic shape: top-level `system`,
content blocks, errors in Anthropic's {"type": "error", "error": {...}} envelope) with a judgment that is valid for
the prompt it receives: the question id, SWEEP_REQUIRED flag and milestone ids are parsed from the user prompt
(the paper's prompt.USER_TEMPLATE or the official harness's layout; prediction text is fenced as "| " lines, so
it is never parsed as the template's own). Both APIs share one server, one script and one set of counters. Faults are scripted
per question: `script` is a list of actions consumed one per request for that question, the last repeating, e.g.
["malformed", "valid"] answers garbage once and then a valid judgment; ["500"] fails forever. "400" is a
non-retryable bad request, "overloaded" is Anthropic's HTTP 529, "empty" is a reply with no text, "two_objects" a
reply text holding two JSON objects, "truncated_body" a 200 whose JSON body is cut short, "text_body" a 200 with a
text/plain body, "out_of_tokens" an empty reply stopped by the token limit (a reasoning model that spent its
whole budget thinking), "drip" a valid reply whose body is sent one byte every `drip_seconds` (a slow body that
no per-read timeout catches), "huge_invalid" an invalid reply of 5 MB. Error replies carry `Retry-After: <retry_after>` when the server is given one.

Its identity is fixed: it answers only requests for its own model name (providers.LOOPBACK_MODEL; 404
model_not_found otherwise, as the real APIs do) and names itself in every reply's `model` field, so its made-up
judgments are never recorded under a real model's name. Tests that check the request shape a real model family
gets may let it also answer as that name (`also_answers_as`); its replies still name the loopback. For such names
it applies the real APIs' request rules (OpenAI reasoning models: no `max_tokens`, no temperature but the default).

Used by the tests, scripts/bench/judge_throughput.py and the quickstart:
    with LoopbackJudgeServer(delay=0.01) as server:
        ... --provider openai --base_url server.base_url ...
        ... --provider anthropic --base_url server.anthropic_base_url ...   (the SDK appends /v1/messages)
or from a shell:  python -m cader.dev.judge_double --url_file /tmp/url   (serves until SIGTERM/SIGINT)
"""

from __future__ import annotations

import hashlib
import json
import re
import signal
import threading
import time
from collections import Counter
from collections.abc import Sequence
from fnmatch import fnmatchcase
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING

from cader.contracts.judgments import FAILURE_TAGS, MILESTONE_STATUSES
from cader.evaluate.judge.providers import LOOPBACK_MODEL

if TYPE_CHECKING:
    from typing_extensions import Self

ACTIONS = ("valid", "fenced", "prose", "malformed", "wrong_milestones", "bad_score", "unknown_tag", "p4_null",
           "two_objects", "empty", "out_of_tokens", "truncated_body", "text_body", "400", "429", "500", "overloaded",
           "hang", "drip", "huge_invalid")
JSON = "application/json"
ERROR_STATUS = {"400": 400, "429": 429, "500": 500, "overloaded": 529}
# Anthropic's error `type` per HTTP status (https://docs.anthropic.com/en/api/errors).
ANTHROPIC_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                         429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}
# OpenAI reasoning models (the API's "Unsupported parameter"/"Unsupported value" 400s for these families).
REASONING_MODELS = ("gpt-5*", "o1*", "o3*", "o4*")
HUGE_CHARS = 5_000_000   # the huge_invalid reply's length
_QID = re.compile(r"^QUESTION_ID: (.*)$", re.MULTILINE)
_SWEEP = re.compile(r"^SWEEP_REQUIRED: (\w+)$", re.MULTILINE)
# A milestone line: "M1 [type]: ..." (the paper's layout) or "  M1 type=...: ..." (the official harness's).
_MILESTONE = re.compile(r"^ {0,2}(\S+) (?:\[[^\]\n]*\]|type=[^:\n]*):", re.MULTILINE)


def parse_prompt(user_text: str) -> tuple[str, str, list[str]]:
    """(question id, sweep flag, milestone ids) from a judge user prompt: the first QUESTION_ID and SWEEP_REQUIRED
    lines, and the milestone lines (all of them start a line; a fenced prediction's lines start with "| ")."""
    qid = _QID.search(user_text)
    sweep = _SWEEP.search(user_text)
    return (qid.group(1).strip() if qid else "?", sweep.group(1) if sweep else "unknown",
            list(dict.fromkeys(_MILESTONE.findall(user_text))))


def synthetic_judgment(qid: str, milestone_ids: Sequence[str], sweep: str) -> dict:
    """A deterministic, schema-valid judgment derived from the question id."""
    seed = hashlib.sha256(qid.encode()).digest()
    scores = {name: seed[i] % 3 for i, name in enumerate(
        ("task_understanding", "gt_evidence_coverage", "evidence_grounding", "evidence_completeness",
         "reasoning_faithfulness"))}
    rationales = {f"P{i}": "loopback" for i in range(1, 6)}
    if sweep == "unknown":  # the official prompt's fallback: the judge classifies the question itself
        decided = "YES" if seed[30] % 2 else "NO"
        rationales["P4"] = f"FALLBACK SWEEP={decided} because the loopback flipped a coin"
        sweep = decided.lower()
    if sweep == "no":
        scores["evidence_completeness"] = None
    coverage = [{"milestone_id": m, "status": MILESTONE_STATUSES[seed[5 + i % 20] % 4],
                 "evidence_in_prediction": f"loopback evidence for {m}"} for i, m in enumerate(milestone_ids)]
    tags = [FAILURE_TAGS[seed[26 + j] % len(FAILURE_TAGS)] for j in range(seed[25] % 3)]
    return {"process_scores": scores, "axis_rationales": rationales,
            "milestone_coverage": coverage, "failure_tags": list(dict.fromkeys(tags)),
            "summary": f"loopback judgment for question {qid}"}


def reply_text(action: str, qid: str, ids: list[str], sweep: str) -> str:
    judgment = synthetic_judgment(qid, ids, sweep)
    if action in ("empty", "out_of_tokens"):
        return ""
    if action == "huge_invalid":  # a runaway reply: prose, then a JSON object cut off
        return ("The trajectory is long. " * (HUGE_CHARS // 24 + 1))[:HUGE_CHARS - 30] + '{"process_scores": {"P1": 2'
    if action == "fenced":
        return "```json\n" + json.dumps(judgment, indent=1) + "\n```"
    if action == "prose":
        return "Here is my evaluation.\n" + json.dumps(judgment) + "\nI hope this helps."
    if action == "malformed":
        return '{"process_scores": {"task_understanding": 2, '  # truncated JSON
    if action == "wrong_milestones":
        judgment["milestone_coverage"] = judgment["milestone_coverage"][:-1]
    elif action == "bad_score":
        judgment["process_scores"]["task_understanding"] = 3
    elif action == "unknown_tag":
        judgment["failure_tags"] = ["made_up_tag"]
    elif action == "p4_null":
        judgment["process_scores"]["evidence_completeness"] = None
    elif action == "two_objects":  # e.g. a draft and a final answer in one reply
        return json.dumps(judgment) + "\n" + json.dumps({**judgment, "summary": "second thoughts"})
    return json.dumps(judgment)


def content_text(content) -> str:
    """The text of a message's content: a plain string or a list of text blocks (both APIs allow either)."""
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content or [] if isinstance(block, dict))


def openai_request_problem(body: dict) -> str | None:
    """Why the real chat-completions API would answer 400 to this request from a reasoning model, or None."""
    model = str(body.get("model", "")).lower()
    if not any(fnmatchcase(model, pattern) for pattern in REASONING_MODELS):
        return None
    if "max_tokens" in body:
        return ("Unsupported parameter: 'max_tokens' is not supported with this model. "
                "Use 'max_completion_tokens' instead.")
    if body.get("temperature") not in (None, 1, 1.0):
        return (f"Unsupported value: 'temperature' does not support {body['temperature']} with this model. "
                "Only the default (1) value is supported.")
    return None


def anthropic_request_problem(body: dict, headers) -> str | None:
    """Why the real Messages API would answer 400 to this request (the rules a judge client could break), or None."""
    if not headers.get("anthropic-version"):
        return "anthropic-version: header is required"
    if not body.get("model") or not isinstance(body.get("max_tokens"), int):
        return "model and max_tokens are required"
    for name in ("temperature", "top_p", "top_k"):  # removed at Claude Opus 4.7, the paper's judge
        if name in body:
            return f"`{name}` is deprecated for this model."
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or messages[0].get("role") != "user":
        return "messages: must be a non-empty list starting with a user message"
    for index, message in enumerate(messages):
        if message.get("role") not in ("user", "assistant"):
            return f"messages.{index}.role: must be user or assistant (the system prompt is the top-level `system`)"
        final_assistant = index == len(messages) - 1 and message["role"] == "assistant"
        if not final_assistant and not content_text(message.get("content")).strip():
            return f"messages.{index}: text content blocks must contain non-whitespace text"
    return None


def error_payload(api: str, status: int, message: str, code: str | None = None) -> dict:
    """The error envelope of each API (shapes: tests/fixtures/judge_replies/)."""
    if api == "anthropic":
        return {"type": "error", "error": {"type": ANTHROPIC_ERROR_TYPES.get(status, "api_error"), "message": message},
                "request_id": "req_loopback"}
    return {"error": {"message": message, "type": "invalid_request_error" if status < 500 else "server_error",
                      "param": None, "code": code or status}}


class LoopbackJudgeServer:
    """Threaded HTTP server on 127.0.0.1:<port> speaking the subsets the openai and anthropic clients use."""

    def __init__(self, *, delay: float = 0.0, script: Sequence[str] = ("valid",),
                 per_question: dict[str, Sequence[str]] | None = None, hang_seconds: float = 5.0, port: int = 0,
                 retry_after: str | None = None, also_answers_as: Sequence[str] = (), drip_seconds: float = 1.0):
        for action in [*script, *(a for s in (per_question or {}).values() for a in s)]:
            if action not in ACTIONS:
                raise ValueError(f"unknown loopback action {action!r}; choose from {ACTIONS}")
        self.delay, self.hang_seconds, self.drip_seconds = delay, hang_seconds, drip_seconds
        self.retry_after = retry_after           # Retry-After header value sent with every error reply
        self.model_names = {LOOPBACK_MODEL, *also_answers_as}
        self.script, self.per_question = list(script), {str(k): list(v) for k, v in (per_question or {}).items()}
        self.calls: Counter = Counter()          # requests per question id
        self.requests: list[dict] = []           # every request body received (both APIs)
        self.api_keys: list[str] = []            # the key each request carried (x-api-key or Bearer token)
        self.headers: list[dict] = []            # every request's headers, lower-cased names, keys removed
        self.in_flight = self.max_in_flight = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    @property
    def anthropic_base_url(self) -> str:
        """The root URL for anthropic.Anthropic(base_url=...): the SDK itself posts to {root}/v1/messages."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())

    def start(self) -> Self:
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                        name="loopback-judge", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _next_action(self, qid: str) -> str:
        with self._lock:
            index = self.calls[qid]
            self.calls[qid] += 1
        script = self.per_question.get(qid, self.script)
        return script[min(index, len(script) - 1)]

    def _respond(self, body: dict, api: str, headers) -> tuple[int, dict | bytes, str, str]:
        """(status, JSON payload or raw body bytes, content type, the action taken)."""
        first_user = next((m.get("content", "") for m in body.get("messages") or [] if m.get("role") == "user"), "")
        first_user = content_text(first_user)
        if api == "anthropic" and (problem := anthropic_request_problem(body, headers)):
            # a request the real API would reject; no action used
            return 400, error_payload(api, 400, problem), JSON, "rejected"
        if body.get("model") not in self.model_names:
            message = f"The model `{body.get('model')}` does not exist (this is the loopback test double)"
            return 404, error_payload(api, 404, message, "model_not_found"), JSON, "rejected"
        if api == "openai" and (problem := openai_request_problem(body)):
            return 400, error_payload(api, 400, problem, "unsupported_parameter"), JSON, "rejected"
        qid, sweep, ids = parse_prompt(first_user)
        action = self._next_action(qid)
        time.sleep(self.delay)
        if action in ERROR_STATUS:
            status = ERROR_STATUS[action]
            return status, error_payload(api, status, f"loopback injected {action}"), JSON, action
        if action == "text_body":
            return 200, b"upstream proxy error: try again later", "text/plain", action
        if action == "hang":
            time.sleep(self.hang_seconds)
        text = reply_text(action, qid, ids, sweep)
        tokens_in, tokens_out = len(first_user) // 4, len(text) // 4
        if api == "anthropic":
            payload = {"id": f"msg_loopback_{qid}", "type": "message", "role": "assistant", "model": LOOPBACK_MODEL,
                       "content": [{"type": "text", "text": text}] if text else [],
                       "stop_reason": "max_tokens" if action == "out_of_tokens" else "end_turn", "stop_sequence": None,
                       "usage": {"input_tokens": tokens_in, "output_tokens": tokens_out}}
        else:
            payload = {"id": f"chatcmpl-loopback-{qid}", "object": "chat.completion", "created": int(time.time()),
                       "model": LOOPBACK_MODEL,
                       "choices": [{"index": 0, "finish_reason": "length" if action == "out_of_tokens" else "stop",
                                    "message": {"role": "assistant", "content": text}}],
                       "usage": {"prompt_tokens": tokens_in, "completion_tokens": tokens_out,
                                 "total_tokens": tokens_in + tokens_out}}
        if action == "truncated_body":  # a complete HTTP reply whose JSON stops half-way
            data = json.dumps(payload).encode()
            return 200, data[: len(data) // 2], JSON, action
        return 200, payload, JSON, action

    def _handler_class(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out in separate writes: avoid the 40 ms ACK stall

            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def _send(self, status: int, payload: dict | bytes, content_type: str = JSON, drip: bool = False) -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(data)))
                    if status >= 400 and server.retry_after is not None:
                        self.send_header("Retry-After", server.retry_after)
                    self.end_headers()
                    if not drip:
                        self.wfile.write(data)
                        return
                    self.wfile.flush()
                    for index in range(len(data)):  # a byte at a time: every read of the client gets something
                        self.wfile.write(data[index:index + 1])
                        self.wfile.flush()
                        time.sleep(server.drip_seconds)
                except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
                    self.close_connection = True  # the client gave up (timeout tests)

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": LOOPBACK_MODEL, "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError:
                    self._send(400, {"error": {"message": "request body is not JSON"}})
                    return
                path = self.path.split("?")[0].rstrip("/")
                # Exact match for Anthropic: a base_url ending in /v1 would make the SDK post to /v1/v1/messages.
                api = "anthropic" if path == "/v1/messages" else "openai" if path.endswith("/chat/completions") \
                    else None
                if api is None:
                    self._send(404, error_payload("anthropic" if path.endswith("/messages") else "openai", 404,
                                                  f"no route {self.path}"))
                    return
                key = self.headers.get("x-api-key") or self.headers.get("Authorization", "").removeprefix("Bearer ")
                with server._lock:
                    server.requests.append(body)
                    server.api_keys.append(key)
                    server.headers.append({name.lower(): value for name, value in self.headers.items()
                                           if name.lower() not in ("x-api-key", "authorization")})
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    status, payload, content_type, action = server._respond(body, api, self.headers)
                finally:
                    with server._lock:
                        server.in_flight -= 1
                self._send(status, payload, content_type, drip=action == "drip")

        return Handler


def serve(port: int = 0, delay: float = 0.0, url_file: str | None = None) -> None:
    """Serve made-up AgentVidBench judgments on 127.0.0.1 until SIGTERM or SIGINT (a test double, not a judge).

    It answers as the loopback model only.

    Args:
        port: The port to listen on (0: a free one).
        delay: Seconds before each reply.
        url_file: Write the base URL here once listening (atomically, so a reader never sees half of it).
    """
    server = LoopbackJudgeServer(delay=delay, port=port).start()
    if url_file:
        tmp = Path(url_file + ".tmp")
        tmp.write_text(server.base_url + "\n")
        tmp.replace(url_file)
    print(server.base_url, flush=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    server.stop()


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m cader.dev.judge_double`: `serve` as a function CLI."""
    from jsonargparse import CLI

    CLI(serve, args=None if argv is None else list(argv), as_positional=False)


if __name__ == "__main__":
    main()
