"""`evaluate/run.py --devices 2`: torchrun starts two ranks on the CPU, each a shard; the launcher merges them into
one predictions.jsonl equal (as a set of records, timings aside) to a one-process run."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cader.evaluate.launch import rank_device, torchrun_command

REPO = Path(__file__).resolve().parents[1]


def test_torchrun_command_and_devices():
    cmd = torchrun_command(4, 1, ["--out", "x"], {})
    assert cmd[1:3] == ["-m", "torch.distributed.run"] and "--standalone" in cmd and cmd[-2:] == ["--out", "x"]
    assert cmd[cmd.index("--nproc_per_node") + 1] == "4"
    multi = torchrun_command(8, 2, [], {"MASTER_ADDR": "n0", "MASTER_PORT": "29500", "NODE_RANK": "1"})
    assert "--standalone" not in multi and multi[multi.index("--node_rank") + 1] == "1"
    with pytest.raises(ValueError, match="MASTER_ADDR"):
        torchrun_command(8, 2, [], {})
    assert rank_device("cuda", 3) == "cuda:3" and rank_device("cpu", 3) == "cpu"


def _benchmark(root: Path, video: Path, n: int = 4) -> None:
    """`n` questions over two videos (shards hold whole videos: one video each, two questions each)."""
    folder = root / "synthetic"
    (folder / "videos").mkdir(parents=True)
    for name in ("clip0.mp4", "clip1.mp4"):
        (folder / "videos" / name).write_bytes(video.read_bytes())
    rows = [{"id": f"t{i}", "video": f"videos/clip{i % 2}.mp4", "duration": 60.0, "question": f"Which shade ({i})?",
             "options": ["dark", "mid", "light", "none"], "answer": "A", "evidence_window": [10.0, 12.0],
             "colour": "red"} for i in range(n)]
    (folder / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _clean_env() -> dict:
    drop = ("LOCAL_RANK", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_", "TORCHELASTIC_", "GROUP_RANK")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    return {**env, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_two_ranks_merge_to_the_one_process_records(tiny_model_dir, barcode_video, tmp_path):
    _benchmark(tmp_path / "data", barcode_video)
    # one tiny model serves as its own verifier (no 4B offline): what is tested is how ranks split and merge
    common = ["--model", str(tiny_model_dir), "--verifier", "main_model", "--benchmark", "synthetic",
              "--data_root", str(tmp_path / "data"),
              "--variant", "uniform_stage2", "--max_frames", "8", "--max_pixels", "2048", "--dtype", "float32",
              "--max_new_tokens_propose", "8", "--max_new_tokens_answer", "8", "--progress", "false"]
    runs = {}
    for label, extra in (("one", []), ("two", ["--devices", "2"])):
        out = tmp_path / label
        proc = subprocess.run([sys.executable, str(REPO / "evaluate" / "run.py"), *common, "--out", str(out), *extra],
                              env=_clean_env(), capture_output=True, text=True, timeout=360, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[label] = [json.loads(x) for x in (out / "predictions.jsonl").read_text().splitlines()]
    shards = sorted((tmp_path / "two").glob("predictions.shard-*-of-2.jsonl"))
    videos = [{json.loads(x)["video"] for x in shard.read_text().splitlines()} for shard in shards]
    assert len(videos) == 2 and all(len(v) == 1 for v in videos) and videos[0] != videos[1]  # one whole video each
    assert (tmp_path / "two" / "report.json").exists()

    def key(records):
        return sorted((r["sample_id"], r["pred"], r["route"], json.dumps(r["stage2"], sort_keys=True),
                       tuple(round(z, 4) for z in r["stage1"]["logits"])) for r in records)

    assert len(runs["two"]) == 4 and key(runs["one"]) == key(runs["two"])
