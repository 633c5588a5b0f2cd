"""The tiny model's pre-training stand-in (cader.dev.tiny_pretrain, scripts/make_tiny_model.py): the grounding
pass's rows are the App. C.2 prompts with the evidence window as target, the roles pass has every role, the videos
are none of the SFT or evaluation videos, and the script writes a complete model folder that differs from the random
init it started from."""

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from cader.dev.synthetic.dataset import make_synthetic_data
from cader.dev.tiny_pretrain import write_pretraining_set
from cader.evaluate.method.parsing import parse_window
from cader.evaluate.method.prompts import GROUNDING_SYSTEM

REPO = Path(__file__).resolve().parents[1]


def _digests(folder: Path) -> set[str]:
    """Whole videos only: a clip without the event is a stretch of plain background, alike in any data set."""
    return {hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*.mp4") if "clips" not in p.parts}


def test_grounding_rows_are_c2_prompts_whose_target_holds_the_event(tmp_path):
    grounding, roles = write_pretraining_set(tmp_path, n_videos=6)
    rows = json.loads(grounding.read_text())
    all_rows = json.loads(roles.read_text())
    assert all(row in all_rows for row in rows) and len(all_rows) == len(rows) + 6 * 4   # + verifier Yes/No, C.4, C.1
    reflections = 0
    for row in rows:
        system, user, answer = (m["content"] for m in row["messages"])
        assert system == GROUNDING_SYSTEM and user.startswith("<video>")
        window = parse_window(answer, 128.0).window
        assert window is not None and window[1] - window[0] == 16, answer
        assert (tmp_path / row["videos"][0]).is_file()
        if "have already been tried" in user:
            reflections += 1
            # the ranges it says failed are other scene-length slots, never the target
            tried = re.search(r"tried and failed: (.*)\n", user).group(1)
            starts = [float(x) for x in re.findall(r"\[(\d+)(?:\.0)?, ", tried)]
            assert starts and window[0] not in starts and all(s % 16 == 0 for s in starts), tried
    # six first proposals; a reflection for each decoy video and each 2nd other one
    assert len(rows) - reflections == 6 and 3 <= reflections <= 6


def test_grounding_videos_are_not_the_sft_or_evaluation_videos(tmp_path):
    write_pretraining_set(tmp_path / "ground", n_videos=8)
    make_synthetic_data(tmp_path / "data", seed=0, n_train=8, n_images=0, n_tool=0, n_eval=2, n_heldout=8, n_test=2)
    assert not _digests(tmp_path / "ground") & _digests(tmp_path / "data")


def test_same_seed_same_bytes_other_seed_other_videos(tmp_path):
    a, _ = write_pretraining_set(tmp_path / "a", n_videos=3, seed=1)
    b, _ = write_pretraining_set(tmp_path / "b", n_videos=3, seed=1)
    c, _ = write_pretraining_set(tmp_path / "c", n_videos=3, seed=2)
    assert a.read_bytes() == b.read_bytes() and _digests(a.parent) == _digests(b.parent)
    assert _digests(a.parent) != _digests(c.parent)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_script_writes_a_complete_trained_model(tmp_path):
    import torch
    from safetensors.torch import load_file

    out = tmp_path / "model"
    cmd = [sys.executable, str(REPO / "scripts/make_tiny_model.py"), "--out", str(out),
           "--grounding_epochs", "3", "--roles_epochs", "1", "--pretrain_videos", "4"]
    run = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    record = json.loads((out / "cader_tiny.json").read_text())
    assert record["pretraining"]["grounding_epochs"] == 3 and record["pretraining"]["roles_epochs"] == 1
    assert record["pretraining"]["videos"] == 4 and record["parameters"] > 0 and record["seed"] == 0
    assert (tmp_path / "model_pretrain" / "roles" / "export").is_dir()   # the second pass ran, from the first
    for name in ("config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja"):
        assert (out / name).is_file(), name
    assert not (tmp_path / "model.partial").exists()
    trained = load_file(out / "model.safetensors")
    random = load_file(tmp_path / "model_pretrain" / "random" / "model.safetensors")
    assert trained.keys() == random.keys()
    assert any(not torch.equal(trained[k], random[k]) for k in trained)


@pytest.mark.slow
def test_zero_epochs_writes_the_random_model(tmp_path):
    out = tmp_path / "model"
    cmd = [sys.executable, str(REPO / "scripts/make_tiny_model.py"), "--out", str(out), "--grounding_epochs", "0",
           "--roles_epochs", "0"]
    run = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "pretraining" not in json.loads((out / "cader_tiny.json").read_text())
    assert not (tmp_path / "model_pretrain").exists()
