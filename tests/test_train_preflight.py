"""What train/sft.py says instead of a traceback (a GPU recipe without a GPU, a broken resume checkpoint, another
run's checkpoint), and where a run's files go: all under `--trainer.default_root_dir`."""
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from cader.train.preflight import (
    CPU_ROUTE,
    checkpoint_problem,
    device_problem,
    last_checkpoint,
    outside_run_dir,
    requested_devices,
    resume_problem,
    state_dict_mismatch,
)

REPO = Path(__file__).resolve().parents[1]
SFT_DEEPSPEED = {"class_path": "cader.train.strategies.SFTDeepSpeedStrategy", "init_args": {"zero_config": "zero3"}}
CPU_DEEPSPEED = {"class_path": "cader.train.strategies.CPUDeepSpeedStrategy", "init_args": {"zero_config": "zero3"}}


# ---- no GPU for a GPU config ----

@pytest.mark.parametrize("accelerator,strategy", [("gpu", SFT_DEEPSPEED), ("cuda", "auto"), ("cpu", SFT_DEEPSPEED),
                                                  ("auto", "deepspeed_stage_3"), ("gpu", None)])
def test_a_gpu_config_without_cuda_names_the_cpu_route(accelerator, strategy):
    problem = device_problem(accelerator, strategy, 8, cuda_devices=0)
    assert problem and CPU_ROUTE in problem and "no CUDA GPU" in problem and "\n" not in problem


@pytest.mark.parametrize("accelerator,strategy,devices,gpus", [
    ("cpu", CPU_DEEPSPEED, 1, 0),        # the CPU route itself
    ("cpu", "auto", 1, 0), ("auto", "auto", "auto", 0), ("gpu", SFT_DEEPSPEED, 8, 8), ("gpu", SFT_DEEPSPEED, -1, 2),
    ("gpu", SFT_DEEPSPEED, "0,1", 2)])
def test_configs_the_machine_can_run_pass(accelerator, strategy, devices, gpus):
    assert device_problem(accelerator, strategy, devices, cuda_devices=gpus) is None


def test_more_gpus_than_the_machine_has_says_how_many_there_are():
    problem = device_problem("gpu", SFT_DEEPSPEED, "8", cuda_devices=1)
    assert problem == "trainer.devices is 8 but this machine has 1 CUDA GPU; set --trainer.devices 1"
    assert requested_devices([0, 1, 2]) == 3 and requested_devices("auto") is None and requested_devices(-1) is None


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message a machine without CUDA gives")
def test_the_paper_recipe_on_this_cpu_machine_is_one_line_naming_the_cpu_route(tiny_model_dir, tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "train" / "sft.py"), "--config", "cot_mix.yaml",
                           "--model.model_path", str(tiny_model_dir), "--trainer.default_root_dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("sft: ")]
    assert len(lines) == 1 and "--config configs/train/cpu.yaml" in lines[0] and "Traceback" not in done.stderr
    assert not any(tmp_path.iterdir())   # nothing built, nothing written


# ---- resuming ----

def torch_file(path: Path) -> Path:
    torch.save({"state_dict": {"w": torch.zeros(3)}}, path)
    return path


def test_an_intact_checkpoint_passes_and_broken_ones_say_what_is_wrong(tmp_path):
    good = torch_file(tmp_path / "good.ckpt")
    assert checkpoint_problem(good) is None
    empty = tmp_path / "empty.ckpt"
    empty.write_bytes(b"")
    assert checkpoint_problem(empty) == "is empty (0 bytes)"
    cut = tmp_path / "cut.ckpt"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    assert "cut short" in checkpoint_problem(cut)
    other_zip = tmp_path / "other.ckpt"
    with zipfile.ZipFile(other_zip, "w") as z:
        z.writestr("readme.txt", "hello")
    assert "not a torch checkpoint" in checkpoint_problem(other_zip)
    assert checkpoint_problem(tmp_path / "missing.ckpt") == "does not exist"
    link = tmp_path / "dangling.ckpt"
    link.symlink_to(tmp_path / "gone")
    assert "does not exist" in checkpoint_problem(link) and "link" in checkpoint_problem(link)


def test_a_deepspeed_checkpoint_folder_is_checked_file_by_file(tmp_path):
    folder = tmp_path / "last.ckpt" / "checkpoint"
    folder.mkdir(parents=True)
    torch_file(folder / "zero_pp_rank_0_mp_rank_00_model_states.pt")
    optim = torch_file(folder / "zero_pp_rank_0_mp_rank_00_optim_states.pt")
    assert checkpoint_problem(tmp_path / "last.ckpt") is None
    optim.write_bytes(optim.read_bytes()[:100])
    problem = checkpoint_problem(tmp_path / "last.ckpt")
    assert "checkpoint/zero_pp_rank_0_mp_rank_00_optim_states.pt" in problem and "cut short" in problem
    (tmp_path / "empty.ckpt").mkdir()
    assert "no checkpoint files" in checkpoint_problem(tmp_path / "empty.ckpt")


def test_last_resolves_as_lightning_does_and_a_broken_one_points_to_an_intact_one(tmp_path):
    import os

    folder = tmp_path / "checkpoints"
    folder.mkdir()
    assert last_checkpoint([folder, tmp_path / "absent"]) is None
    assert resume_problem("last", [folder]) == ("last", None)       # nothing yet: Lightning starts from scratch
    older = torch_file(folder / "epoch=0-step=1.ckpt")
    os.utime(older, (1, 1))
    last = folder / "last.ckpt"
    last.write_bytes(b"")
    assert last_checkpoint([folder]) == last
    path, problem = resume_problem("last", [folder])
    assert path is None and problem == (f"--ckpt_path last: {last} is empty (0 bytes); resume from an intact one, "
                                        f"e.g. --ckpt_path {older}")
    older.unlink()
    assert "train again without --ckpt_path" in resume_problem("last", [folder])[1]
    torch_file(last)
    assert resume_problem("last", [folder]) == (str(last), None)
    assert resume_problem(str(tmp_path / "nope.ckpt"), [folder])[1].endswith(
        "does not exist; no intact checkpoint beside it: train again without --ckpt_path (or pass one you kept "
        "elsewhere)")
    assert resume_problem(None, [folder]) == (None, None) and resume_problem("best", [folder]) == ("best", None)


def test_another_runs_checkpoint_is_one_line_naming_the_keys():
    full = torch.nn.Sequential(torch.nn.Linear(2, 2))
    lora_state = {"0.base_layer.weight": torch.zeros(2, 2), "0.lora_A.weight": torch.zeros(1, 2)}
    with pytest.raises(RuntimeError) as caught:
        full.load_state_dict(lora_state)
    line = state_dict_mismatch(caught.value, "last")
    assert line.startswith("--ckpt_path last: the checkpoint does not fit this model (2 missing keys, e.g. 0.weight; "
                           "2 unexpected keys, e.g. 0.base_layer.weight)")
    assert "--trainer.default_root_dir" in line and "\n" not in line
    assert state_dict_mismatch(caught.value, None) is None and state_dict_mismatch(RuntimeError("x"), "last") is None


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["truncate", "empty"])
def test_resuming_from_a_damaged_last_checkpoint_is_one_line_naming_the_file(tiny_model_dir, tmp_path, damage):
    from cader.dev.synthetic.dataset import Counts, make_synthetic_data
    from test_train_threads import run_sft, tiny_fit_config

    make_synthetic_data(tmp_path / "data", counts=Counts(n_train=8, n_images=2, n_tool=1, n_eval=1,
                                                         n_heldout=1))
    config = tiny_fit_config(tmp_path / "run", tiny_model_dir, tmp_path / "data" / "train", max_steps=2,
                             enable_checkpointing=True,
                             callbacks=[{"class_path": "lightning.pytorch.callbacks.ModelCheckpoint",
                                         "init_args": {"every_n_train_steps": 1, "save_last": True,
                                                       "save_top_k": -1}}])
    first = run_sft(config)
    assert first.returncode == 0, first.stderr[-2000:]
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    last.write_bytes(last.read_bytes()[:4096] if damage == "truncate" else b"")
    done = run_sft(config, "--trainer.max_steps", "3", "--ckpt_path", "last")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    [line] = [x for x in done.stderr.splitlines() if x.startswith("sft: ")]
    assert f"--ckpt_path last: {last}" in line and "step=2.ckpt" in line


# ---- one root moves every file of a run ----

def test_folders_outside_the_root_are_named():
    assert outside_run_dir({"a": "/r/run/checkpoints", "b": "/elsewhere/logs", "c": None}, "/r/run") == [
        "b /elsewhere/logs"]


def test_the_recipes_name_no_log_or_checkpoint_folder_of_their_own():
    import yaml

    for name in ("cot_mix.yaml", "cot_mix_tiny.yaml"):
        trainer = yaml.safe_load((REPO / "configs" / "train" / name).read_text())["trainer"]
        assert "logger" not in trainer, name
        assert all("dirpath" not in (c.get("init_args") or {}) for c in trainer.get("callbacks", [])), name
    paper = yaml.safe_load((REPO / "configs" / "train" / "cot_mix.yaml").read_text())["trainer"]
    assert paper["default_root_dir"] == "runs/sft"   # where the walkthrough's evaluation reads runs/sft/export


def test_one_root_places_logs_and_checkpoints(tiny_model_dir, tmp_path, caplog):
    from cader.train.cli import make_cli

    root = tmp_path / "side_run"
    cli = make_cli(["--config", "cot_mix.yaml", "--config", "cpu.yaml", "--model.model_path", str(tiny_model_dir),
                    "--trainer.default_root_dir", str(root)])
    cli.build()
    [checkpoint] = cli.trainer.checkpoint_callbacks
    assert checkpoint.dirpath == str((root / "checkpoints").resolve())
    assert Path(cli.trainer.logger.log_dir).parent == root / "logs"
    assert not caplog.records or "outside" not in caplog.text
    elsewhere = tmp_path / "elsewhere"
    cli = make_cli(["--config", "cot_mix_tiny.yaml", "--model.model_path", str(tiny_model_dir),
                    "--trainer.default_root_dir", str(root),
                    "--trainer.logger", json.dumps({"class_path": "lightning.pytorch.loggers.CSVLogger",
                                                    "init_args": {"save_dir": str(elsewhere)}})])
    cli.build()
    assert cli.trainer.logger.save_dir == str(elsewhere) and f"CSVLogger save_dir {elsewhere}" in caplog.text
