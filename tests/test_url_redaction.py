"""Secrets inside URLs (user:password@, query values) never reach a message, a log line or a file.

The one redaction (`cader.contracts.provenance.redact_url`) by property, then each path a URL takes: the server
backend's start-up error (evaluate/run.py --backend server, and the lmms-eval model's servers), its failed requests
and routing file, and the judge's report written with a `?sig=` --base_url against the loopback judge double."""

import json
import logging
import shlex
import socket
import sys
from pathlib import Path

import pytest
from cader.contracts.provenance import redact_argv, redact_url
from hypothesis import given, settings
from hypothesis import strategies as st

SECRET = "SeCrEt"  # every credential in these tests holds it; nothing written or printed may

# ---- the redaction, by property -------------------------------------------------------------------------------------

ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
# what a user name may hold raw (RFC 3986 unreserved, sub-delims, %-escapes), and a password besides: ':', '@' and
# the '/' of a base64 key (a raw '?' or '#' in a password is ambiguous: tested by hand below)
USER_CHARS = ALNUM + "-._~!$&'()*+,;=%"
PASSWORD_CHARS = USER_CHARS + ":@/"
# a query value or fragment: anything but the separators (a value ending in a closing quote or bracket is the
# text around the URL, tested by hand)
VALUE_CHARS = ALNUM + "-._~!$'()*+,:@/?=%"
VALUE_END = ALNUM + "-_~!$*+/@?=%"

names = st.text(alphabet=ALNUM + "-_.", min_size=1, max_size=8)
hosts = st.sampled_from(["127.0.0.1", "localhost", "node-1.cluster.internal", "[::1]", "api.example.org"])
paths = st.sampled_from(["/", "/v1", "/openai/deployments/gpt/v1", "/v1/"])


def secret_text(chars: str, end_chars: str | None = None):
    """A random credential around SECRET: whatever is shown of it, some of SECRET shows."""
    tail = st.text(alphabet=end_chars, min_size=1, max_size=1) if end_chars else st.just("")
    return st.tuples(st.text(alphabet=chars, max_size=12), tail).map(lambda t: t[0] + SECRET + t[1])


@st.composite
def credentialed_urls(draw):
    """(a URL with credentials in its userinfo, query values or fragment, the URL redact_url must make of it)."""
    scheme, host, path = draw(st.sampled_from(["http", "https"])), draw(hosts), draw(paths)
    port = draw(st.one_of(st.just(""), st.integers(1, 65535).map(lambda p: f":{p}")))
    user = draw(st.one_of(st.just(""), secret_text(USER_CHARS).map(lambda u: u + "@"),
                          st.tuples(st.text(alphabet=USER_CHARS, max_size=6), secret_text(PASSWORD_CHARS))
                          .map(lambda t: f"{t[0]}:{t[1]}@")))
    query_names = draw(st.lists(names, max_size=4))
    values = [draw(secret_text(VALUE_CHARS, VALUE_END)) for _ in query_names]
    fragment = draw(st.one_of(st.just(""), secret_text(VALUE_CHARS, VALUE_END)))
    query = "&".join(f"{n}={v}" for n, v in zip(query_names, values))
    url = f"{scheme}://{user}{host}{port}{path}{'?' + query if query else ''}{'#' + fragment if fragment else ''}"
    expected = (f"{scheme}://{'***@' if user else ''}{host}{port}{path}"
                f"{'?' + '&'.join(n + '=***' for n in query_names) if query_names else ''}"
                f"{'#***' if fragment else ''}")
    return url, expected


@settings(max_examples=200, deadline=None)
@given(credentialed_urls(), st.sampled_from(["{}", "refused: {} (ConnectError)", "'{}'", "[{}]", "url={}, retry"]))
def test_a_url_anywhere_in_a_text_keeps_its_address_and_loses_every_credential(case, frame):
    url, expected = case
    assert redact_url(frame.format(url)) == frame.format(expected)
    assert SECRET not in redact_url(frame.format(url))


@settings(max_examples=100, deadline=None)
@given(st.lists(credentialed_urls(), min_size=1, max_size=4), st.sampled_from([",", "|", " ", ", "]))
def test_every_url_of_a_list_is_redacted(cases, separator):
    """`--model_urls a,b`, lmms-eval's `model_urls=a|b`: each URL on its own, the separators kept."""
    joined = separator.join(url for url, _ in cases)
    assert redact_url(joined) == separator.join(expected for _, expected in cases)


@given(st.text(alphabet=ALNUM + " -_./,:|=@", max_size=40))
def test_text_without_a_url_is_left_as_it_is(text):
    assert redact_url(text) == text


@pytest.mark.parametrize(("text", "shown"), [
    ("http://user:SeCrEt@127.0.0.1:8000/v1", "http://***@127.0.0.1:8000/v1"),
    ("https://h.example.org/v1?api-key=SeCrEt&sig=SeCrEt&deployment=gpt", "https://h.example.org/v1?api-key=***&sig=***&deployment=***"),
    ("http://127.0.0.1:8000/v1?SeCrEt", "http://127.0.0.1:8000/v1?***"),               # a lone item: maybe a token
    ("http://h:8000/v1#SeCrEt", "http://h:8000/v1#***"),
    ("http://u:ab/SeCrEt+==@h:8000/v1", "http://***@h:8000/v1"),                          # a raw base64 password
    ("http://u:a?SeCrEt@h/v1", "http://***"),                # '?' before '@': password or query? all of it hidden
    ("http://h?next=a@SeCrEt", "http://***"),
    ("http://h/v1?sig=SeCrEt').", "http://h/v1?sig=***')."),                               # the text's closers kept
    ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
    ("runs/x/predictions.jsonl", "runs/x/predictions.jsonl"),
])
def test_the_rule_by_hand(text, shown):
    assert redact_url(text) == shown


def test_argv_lists_of_urls_lose_every_credential():
    """The provenance command of a server run: `--model_urls` lists several replicas in one argument."""
    argv = ["evaluate/run.py", "--model_urls", "http://a:SeCrEt@h1:8000/v1,http://b:SeCrEt@h2:8000/v1",
            "--verifier_urls=http://h3:8000/v1?api_key=SeCrEt|http://c@h4:8000"]
    assert redact_argv(argv) == ["evaluate/run.py", "--model_urls", "http://***@h1:8000/v1,http://***@h2:8000/v1",
                                 "--verifier_urls=http://h3:8000/v1?api_key=***|http://***@h4:8000"]


# ---- Q7: the server backend ---------------------------------------------------------------------------------------


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound for a moment, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def credentialed(port: int) -> str:
    return f"http://user:{SECRET}-pw@127.0.0.1:{port}/v1?api_key={SECRET}-key"


def files_text(folder: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file())


def test_run_py_names_an_unreachable_credentialed_replica_without_its_credentials(tiny_model_dir, tmp_path, capsys,
                                                                                   caplog):
    from cader.evaluate.run import main

    (tmp_path / "data" / "synthetic").mkdir(parents=True)
    (tmp_path / "data" / "synthetic" / "test.jsonl").write_text("")
    url = credentialed(closed_port())
    argv = ["--model", str(tiny_model_dir), "--benchmark", "synthetic", "--data_root", str(tmp_path / "data"),
            "--out", str(tmp_path / "out"), "--progress", "false", "--backend", "server", "--model_urls",
            f"{url},{url}", "--server.timeout_s", "5", "--verifier", "main_model"]   # one model: its servers alone
    with caplog.at_level(logging.DEBUG):
        assert main(argv) == 2
    captured = capsys.readouterr()
    (line,) = [x for x in captured.err.splitlines() if x.startswith("error:")]
    assert "http://***@127.0.0.1:" in line and "/v1?api_key=***: cannot list its models" in line
    assert SECRET not in captured.err + captured.out + caplog.text + files_text(tmp_path / "out")


def test_failed_requests_and_the_routing_file_name_replicas_without_credentials(caplog):
    from cader.evaluate.backends.base import BackendError
    from cader.evaluate.backends.server import ReplicaPool, ServerOptions

    ports = closed_port(), closed_port()
    urls = [credentialed(ports[0]), f"http://{SECRET}@127.0.0.1:{ports[1]}"]
    pool = ReplicaPool(urls, ServerOptions(retries=1, backoff_s=0.01, backoff_max_s=0.01, timeout_s=5))
    try:
        with caplog.at_level(logging.DEBUG), pytest.raises(BackendError) as failed:
            pool.post("key", 1.0, {"model": "m"})  # each replica refuses the connection: the sample's error
        accounting = pool.accounting()  # server_routing.json
    finally:
        pool.close()
    assert str(failed.value).startswith("server_unavailable: 2 attempts failed; last: http://***@127.0.0.1:")
    assert [r["url"] for r in accounting["replicas"]] == [f"http://***@127.0.0.1:{ports[0]}/v1?api_key=***",
                                                          f"http://***@127.0.0.1:{ports[1]}"]
    assert SECRET not in str(failed.value) + caplog.text + json.dumps(accounting)


def test_a_url_httpx_cannot_read_is_refused_without_quoting_it():
    """httpx's own refusal quotes the piece it could not read: a raw '/' in a password reads as a bad port."""
    from cader.evaluate.backends.server import ReplicaPool, ServerOptions

    with pytest.raises(ValueError) as refused:
        ReplicaPool([f"http://user:{SECRET}/x@127.0.0.1:{closed_port()}/v1"], ServerOptions())  # port 'SeCrEt'?
    assert str(refused.value).startswith("http://***: not a server URL") and SECRET not in str(refused.value)


def test_the_lmms_model_refuses_an_unreachable_credentialed_replica_without_its_credentials(tiny_model_dir, caplog):
    from cader.evaluate.lmms.server_args import ServerRefusal, load_servers

    url = credentialed(closed_port())
    with caplog.at_level(logging.DEBUG), pytest.raises(ServerRefusal) as refused:
        load_servers(str(tiny_model_dir), "main_model", f"{url}|{url}", None, True, {"timeout_s": 5})
    assert "http://***@127.0.0.1:" in str(refused.value) and "cannot list its models" in str(refused.value)
    assert SECRET not in str(refused.value) + caplog.text


# ---- Q8: the judge ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("credentials", [f"?sig={SECRET}&api-version=2024", f"{SECRET}-user:{SECRET}-pw@"])
def test_the_judge_writes_and_prints_its_base_url_without_credentials(credentials, tmp_path, monkeypatch, capsys,
                                                                     caplog):
    """judge_report.json's provenance holds the command line; judgments.jsonl, the console and the log the errors
    and the requests (httpx logs each one's URL at INFO)."""
    from cader.dev.judge_double import LoopbackJudgeServer
    from cader.dev.judge_inputs import synthetic_benchmark
    from cader.evaluate.judge.cli import main

    monkeypatch.setenv("OPENAI_API_KEY", "loopback-dummy")
    questions, predictions = synthetic_benchmark(2, seed=0)
    (tmp_path / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    (tmp_path / "predictions.jsonl").write_text("".join(json.dumps(p) + "\n" for p in predictions))
    out = tmp_path / "out"
    with LoopbackJudgeServer() as server:
        base_url = (server.base_url.replace("http://", f"http://{credentials}") if "@" in credentials
                    else server.base_url + credentials)
        argv = ["--predictions", str(tmp_path / "predictions.jsonl"), "--questions", str(tmp_path / "questions.jsonl"),
                "--out", str(out), "--model", "loopback-judge", "--base_url", base_url, "--progress", "false",
                "--max_api_retries", "0", "--backoff_base", "0.001", "--backoff_max", "0.01", "--timeout", "5"]
        monkeypatch.setattr(sys, "argv", ["evaluate/judge.py", *argv])  # the provenance block reads the command
        with caplog.at_level(logging.DEBUG):
            try:
                main(argv)
            except SystemExit:  # every judgment failed: the SDK cannot post to a base_url holding a query
                pass
    report = json.loads((out / "judge_report.json").read_text())
    assert f"--base_url {shlex.quote(redact_url(base_url))}" in report["provenance"]["command"]
    assert "***" in report["provenance"]["command"]
    captured = capsys.readouterr()
    assert SECRET not in captured.out + captured.err + caplog.text + files_text(out)


def test_a_base_url_the_sdk_cannot_read_ends_the_judge_in_one_line_without_quoting_it(tmp_path, monkeypatch, capsys):
    """httpx's refusal quotes what it could not read: a raw '/' in a password reads as a bad port."""
    from cader.evaluate.judge.cli import main

    monkeypatch.setenv("OPENAI_API_KEY", "loopback-dummy")
    base_url = f"http://judge:{SECRET}/x@127.0.0.1:{closed_port()}/v1"
    with pytest.raises(SystemExit) as ended:
        main(["--predictions", str(tmp_path / "p.jsonl"), "--questions", str(tmp_path / "q.jsonl"), "--out",
              str(tmp_path / "out"), "--model", "loopback-judge", "--base_url", base_url, "--progress", "false"])
    assert str(ended.value.code).startswith("config error: --base_url http://***@127.0.0.1:")
    captured = capsys.readouterr()
    assert SECRET not in str(ended.value.code) + captured.out + captured.err


def test_a_judge_error_naming_the_url_keeps_no_credential():
    """What a judgment row's `error` carries: an SDK error other than the HTTP ones is passed on with its text."""
    import openai
    from cader.evaluate.judge.providers import _classify

    error = _classify(RuntimeError(f"cannot reach https://judge:{SECRET}@h.example.org/v1?sig={SECRET}"), openai)
    assert str(error) == "RuntimeError: cannot reach https://***@h.example.org/v1?sig=***"
