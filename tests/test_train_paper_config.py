"""The paper config (configs/train/cot_mix.yaml) fits a disk and reads long videos from the frame cache."""
from pathlib import Path

import yaml

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "train" / "cot_mix.yaml"


def _config() -> dict:
    return yaml.safe_load(CONFIG.read_text())


def test_the_paper_run_keeps_a_bounded_number_of_checkpoints():
    callbacks = [c for c in _config()["trainer"]["callbacks"] if c["class_path"].endswith("ModelCheckpoint")]
    assert len(callbacks) == 1
    args = callbacks[0]["init_args"]
    # -1 keeps every one: 28 ZeRO-3 checkpoints of ~105 GB over the ~14,300 steps
    assert 0 <= args["save_top_k"] <= 1 and args.get("save_last") in (False, None, "link")


def test_long_videos_come_from_the_frame_cache_and_short_clips_are_decoded():
    data = _config()["data"]
    assert data.get("frame_cache_dir")
    by_name = {s["name"]: s for s in data["sources"]}
    assert by_name["longvideoreason"].get("frame_cache", True) is True
    assert by_name["videor1"]["frame_cache"] is False
