"""The lmms-eval model's server settings without lmms-eval: replica URLs joined with `|` (lmms-eval splits
model_args on commas), evaluate/run.py's server settings as `server.<field>`, which backends a run builds, and
what is refused before any model loads: backend=server without model_urls, server settings with another backend,
a bad or unknown `server.<field>`, a key or token as a model_arg or inside a replica URL (lmms-eval logs its
model_args), another verifier without its servers, and a server that cannot give exact scores (the backend's
start-up probe against a loopback stand-in answering as vLLM 0.32 does without the flag) or that nothing answers
on."""

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from cader.contracts.paper import PAPER, SELF_VERIFIER
from cader.evaluate.backends.server_build import MissingServers, ServerRoles, server_roles, split_urls
from cader.evaluate.lmms.run_context import refusal
from cader.evaluate.lmms.server_args import ServerRefusal, load_servers, server_options, url_list

A, B = "http://127.0.0.1:8100/v1", "http://127.0.0.1:8101"


def test_url_lists_are_joined_with_a_bar_or_what_lmms_eval_keeps_whole():
    assert url_list(f"{A}|{B}") == url_list(f" {A} | {B} |") == [A, B]
    assert url_list(f"[{A},{B}]") == url_list(f'"{A},{B}"') == [A, B]  # brackets and quotes keep lmms-eval's commas
    assert url_list(A) == [A] and url_list(None) == url_list("") == []
    assert split_urls(f"{A},{B}") == split_urls([A, B]) == [A, B]  # evaluate/run.py's comma list


def server_refusal(backend="server", model_urls=A, verifier_urls=None, config_server=None, **overrides):
    return refusal(overrides, 1, backend, None, {}, Path("."), model_urls=model_urls, verifier_urls=verifier_urls,
                   config_server=config_server)


@pytest.mark.parametrize(("args", "said"), [
    ({"model_urls": None}, "backend=server needs model_urls=URL (the main model's vLLM servers; several joined with |"),
    ({"backend": "hf"}, "model_args: model_urls: read only with backend=server (got backend=hf)"),
    ({"backend": "vllm", "model_urls": None, "server.retries": 2}, "server.retries: read only with backend=server"),
    ({"server.concurrency": 0}, "server.concurrency=0: server options: concurrency >= 1"),
    ({"server.timeout_s": "soon"}, "server.timeout_s='soon': Input should be a valid number"),
    ({"server.concurency": 2}, "unknown server.concurency (server settings: server.api_key_env, server.backoff_max_s"),
    ({"config_server": {"retries": -1}}, "server.retries=-1: server options:"),
    ({"api_key": "sk-123"}, "model_args: api_key: keys and tokens come from the environment only"),
    ({"server.api_key": "sk-123"}, "server.api_key: keys and tokens come from the environment only"),
    ({"server.api_key_env": "sk-123"}, "server.api_key_env='sk-123' is not an environment variable's name"),
    ({"model_urls": f"{B}|http://u:sk-123@127.0.0.1:8100/v1"}, "model_urls: http://***@127.0.0.1:8100/v1: a URL"),
    ({"verifier_urls": f"{B}?api-key=sk-123"}, "verifier_urls: http://127.0.0.1:8101?api-key=***: a URL carrying"),
    ({"backend": "hf", "model_urls": "http://u@127.0.0.1:8100"}, "model_urls: http://***@127.0.0.1:8100: a URL"),
])
def test_bad_server_settings_are_refused_by_name(args, said):
    why = server_refusal(**args)
    assert why is not None and said in why, why
    assert "sk-123" not in why.replace("server.api_key_env='sk-123'", "")  # no credential is quoted back


def test_good_server_settings_pass_and_take_evaluate_runs_names():
    assert server_refusal(model_urls=f"{A}|{B}", tau=0.5, **{"server.concurrency": 2, "server.timeout_s": 30}) is None
    assert server_refusal(backend="hf", model_urls=None) is None
    options = server_options({"concurrency": 3, "retries": 1}, {"concurrency": 2, "probe": False, "served_model": 7})
    assert (options.concurrency, options.retries, options.probe, options.served_model) == (2, 1, False, "7")
    assert options.timeout_s == 600.0  # evaluate/run.py's default


def test_the_verifier_is_the_papers_on_its_own_servers_and_shares_the_main_ones_only_when_the_main_model_verifies():
    # no verifier named: the paper's, which needs servers of its own
    assert server_roles("m", None, [A], [B], True) == ServerRoles("m", (A,), PAPER.verifier, (B,))
    with pytest.raises(MissingServers, match=f"verifier {PAPER.verifier}"):
        server_roles("m", None, [A], [], True)
    # the main model verifies (SELF_VERIFIER, or the main model named again): its servers serve both roles
    assert (server_roles("m", SELF_VERIFIER, [A], [], True) == server_roles("m", "m", [A], [], True)
            == server_roles("m", "m", [A], [A], True) == ServerRoles("m", (A,)))
    assert server_roles("m", "v", [A], [], False) == ServerRoles("m", (A,))  # the run never calls the verifier
    assert server_roles("m", "v", [A], [B], True) == ServerRoles("m", (A,), "v", (B,))
    assert server_roles("m", "m", [A], [B], True) == ServerRoles("m", (A,), "m", (B,))  # its own servers
    with pytest.raises(MissingServers, match="verifier v"):
        server_roles("m", "v", [A], [], True)
    with pytest.raises(ServerRefusal, match=r"verifier=v is another model than model= .* verifier_urls=URL\|URL "
                                            r"\(or verifier=main_model: the main model's servers verify too"):
        load_servers("m", "v", A, None, True, {})


# vLLM 0.32's answer to a request carrying a chat template, started without the flag (vllm/renderers/online_renderer.py)
NO_TEMPLATE_FLAG = ("Chat template is passed with request, but --trust-request-chat-template is not set. Refused "
                    "request with untrusted chat template.")


class VllmWithoutTheFlag(BaseHTTPRequestHandler):
    def reply(self, status: int, payload: dict) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.reply(200, {"object": "list", "data": [{"id": "tiny", "object": "model"}]})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.reply(400, {"error": {"message": NO_TEMPLATE_FLAG, "type": "BadRequestError", "param": None,
                                   "code": 400}})

    def log_message(self, *args):
        pass


def test_a_server_that_cannot_give_exact_scores_or_does_not_answer_is_refused_naming_why(tiny_model_dir):
    server = ThreadingHTTPServer(("127.0.0.1", 0), VllmWithoutTheFlag)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        with pytest.raises(ServerRefusal) as refused:
            load_servers(str(tiny_model_dir), SELF_VERIFIER, f"{url}|{url}", None, True, {"timeout_s": 30})
    finally:
        server.shutdown()
        server.server_close()
    said = str(refused.value)
    assert said.startswith(f"backend=server, model={tiny_model_dir}: ") and "\n" not in said
    assert "cannot give exact scores: start it with --trust-request-chat-template" in said

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{probe.getsockname()[1]}"
    with pytest.raises(ServerRefusal, match=f"{dead}: cannot list its models"):
        load_servers(str(tiny_model_dir), SELF_VERIFIER, dead, None, True, {"timeout_s": 5})


def test_lmms_evals_own_parser_keeps_a_bar_list_whole_and_url_list_reads_it():
    """The real lmms-eval 0.7.3 parser (.venv-lmms) on a model_args string as the docs write it: the `|` list
    reaches the model as one value, `server.<field>` keeps its dotted name and becomes a number."""
    import subprocess

    from test_lmms_eval_run import VENV, WHY_NOT

    if WHY_NOT is not None:
        pytest.skip(str(WHY_NOT))
    model_args = f"model=m,backend=server,model_urls={A}|{B},server.concurrency=2"
    parsed = subprocess.run(
        [str(VENV / "bin" / "python"), "-c",
         ("import json, sys; from lmms_eval.utils import simple_parse_args_string as p; "
          "print(json.dumps(p(sys.argv[1])))"), model_args],
        capture_output=True, text=True, timeout=120, check=True)
    args = json.loads(parsed.stdout.strip().splitlines()[-1])
    assert args["server.concurrency"] == 2 and url_list(args["model_urls"]) == [A, B]
    assert server_options(None, {"concurrency": args["server.concurrency"]}).concurrency == 2
