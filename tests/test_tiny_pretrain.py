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
from cader.dev.synthetic.dataset import Counts, make_synthetic_data
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
    make_synthetic_data(tmp_path / "data", seed=0, counts=Counts(n_train=8, n_images=0, n_tool=0, n_eval=2,
                                                                 n_heldout=8, n_test=2))
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


# ---- the tiny verifier (cader.dev.tiny_verifier, scripts/make_tiny_model.py --role verifier) -------------------------


def test_the_verifier_trains_on_c3_rows_of_videos_of_its_own_with_brief_events_too(tmp_path):
    from cader.dev.tiny_verifier import (
        VERIFY_EVENT_LEN,
        verifier_rows,
        verifier_user_text,
        write_verifier_set,
    )

    rows_file, specs = write_verifier_set(tmp_path, n_videos=2, seed=3)
    rows = json.loads(rows_file.read_text())
    assert len(rows) == 4 and all(row["messages"][1]["content"] == "<video>" + verifier_user_text() for row in rows)
    answers = {row["videos"][0]: row["messages"][2]["content"].rsplit("\n", 1)[-1] for row in rows}
    assert sorted(answers.values()) == ["No", "No", "Yes", "Yes"]
    assert all(clip.endswith("_pos.mp4") == (said == "Yes") and (tmp_path / clip).is_file()
               for clip, said in answers.items())
    assert not (tmp_path / "media" / "videos").exists()   # the clips alone: the verifier never sees a whole video
    # the evaluation's brief events as well as the training's: 1 to 10 s, inside the 16 s scene
    assert all(VERIFY_EVENT_LEN[0] <= s.t_e - s.t_s <= VERIFY_EVENT_LEN[1] for s in specs)
    assert VERIFY_EVENT_LEN[0] == 1
    with pytest.raises(ValueError, match="no verifier rows"):
        verifier_rows([r for r in json.loads(rows_file.read_text()) if r["messages"][2]["content"] == "x"])


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_script_writes_a_narrower_verifier_with_a_vocabulary_of_its_own(tmp_path, tiny_model_dir):
    from transformers import AutoConfig, AutoTokenizer

    out = tmp_path / "verifier"
    cmd = [sys.executable, str(REPO / "scripts/make_tiny_model.py"), "--out", str(out), "--role", "verifier",
           "--verify_epochs", "1", "--pretrain_videos", "2"]
    run = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)
    assert run.returncode == 0, run.stderr[-3000:]
    record = json.loads((out / "cader_tiny.json").read_text())
    assert record["role"] == "verifier" and record["size"] == "verifier"
    assert record["pretraining"]["verify_rows"] == 4 and record["pretraining"]["verify_epochs"] == 1
    assert not (tmp_path / "verifier_pretrain" / "data" / "media" / "videos").exists()
    verifier, main = (AutoConfig.from_pretrained(p).text_config for p in (out, tiny_model_dir))
    assert verifier.hidden_size * 2 == main.hidden_size
    ids = [{w: AutoTokenizer.from_pretrained(p).convert_tokens_to_ids(w) for w in ("Yes", "No", "<|video_pad|>")}
           for p in (out, tiny_model_dir)]
    assert all(ids[0][w] != ids[1][w] for w in ids[0]), ids   # no token id in common by chance
