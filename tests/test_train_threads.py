"""`--num_threads`: a tiny fit gives the same losses under OMP_NUM_THREADS=1 and =2 when the option fixes torch's
thread count, and the export records it."""
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cader.train.cli import apply_num_threads, parse_sft_args

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def train_dir(tmp_path_factory):
    from cader.dev.synthetic.dataset import Counts, make_synthetic_data

    out = tmp_path_factory.mktemp("threads_train")
    make_synthetic_data(out, counts=Counts(n_train=8, n_images=2, n_tool=1, n_eval=1, n_heldout=1))
    return out / "train"


def tiny_fit_config(root: Path, model_dir: Path, train_dir: Path, max_steps: int = 3, epochs: int = 1, **trainer) -> Path:
    """A config file for a few-step CPU fit of the tiny model on the synthetic Video-R1 file."""
    source = {"name": "video_r1", "format": "video_r1", "path": str(train_dir / "video_r1_cot.json")}
    config = {
        "seed_everything": 0,
        "model": {"model_path": str(model_dir), "lr": 0.002, "dtype": "float32"},
        "data": {"sources": [source], "batch_size": 1, "max_length": 1024, "num_workers": 0,
                 "plan_cache_dir": str(root / "plan_cache")},
        "trainer": {"default_root_dir": str(root), "accelerator": "cpu", "devices": 1, "precision": "32-true",
                    "max_steps": max_steps, "max_epochs": epochs, "log_every_n_steps": 1, "use_distributed_sampler": False,
                    "enable_checkpointing": False, "enable_model_summary": False, "enable_progress_bar": False,
                    "logger": {"class_path": "lightning.pytorch.loggers.CSVLogger",
                               "init_args": {"save_dir": str(root), "name": "logs"}}, **trainer},
    }
    root.mkdir(parents=True, exist_ok=True)
    path = root / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def run_sft(config: Path, *args: str, omp: str = "1") -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": omp, "MKL_NUM_THREADS": omp}
    return subprocess.run([sys.executable, str(REPO / "train" / "sft.py"), "--config", str(config), *args],
                          check=False, capture_output=True, text=True, env=env, timeout=300)


def logged_losses(root: Path) -> list[float]:
    with open(next(root.glob("logs/version_*/metrics.csv"))) as f:
        rows = list(csv.DictReader(f))
    return [float(r["train_loss"]) for r in rows if r.get("train_loss")]


def test_apply_num_threads_sets_torch_and_rejects_nonsense():
    import torch

    before = torch.get_num_threads()
    try:
        assert apply_num_threads(1) == 1 == torch.get_num_threads()
        assert apply_num_threads(None) == 1            # None leaves the current setting alone
        with pytest.raises(ValueError, match="num_threads"):
            apply_num_threads(0)
    finally:
        torch.set_num_threads(before)


def test_num_threads_is_a_top_level_option_defaulting_to_torch():
    assert parse_sft_args(["--config", "cot_mix.yaml"]).num_threads is None
    assert parse_sft_args(["--config", "cot_mix_tiny.yaml", "--num_threads", "3"]).num_threads == 3


@pytest.mark.slow
def test_fixed_threads_give_equal_losses_under_different_omp_settings(tiny_model_dir, train_dir, tmp_path):
    losses, exports = {}, {}
    for omp in ("1", "2"):
        root = tmp_path / f"omp{omp}"
        done = run_sft(tiny_fit_config(root, tiny_model_dir, train_dir), "--num_threads", "1", omp=omp)
        assert "torch intra-op threads: 1" in done.stderr
        assert done.returncode == 0, done.stderr[-3000:]
        losses[omp] = logged_losses(root)
        # piped stdout: progress lines instead of Lightning's bar, one per step here, without v_num
        lines = [line for line in done.stdout.splitlines() if line.startswith("train step ")]
        assert [line.split(" | ")[0] for line in lines] == [f"train step {k}/3 ({100 * k / 3:.1f}%)" for k in (1, 2, 3)]
        assert all(" | loss " in line and "ETA " in line for line in lines) and "v_num" not in done.stdout
        exports[omp] = json.loads((root / "export" / "cader_export.json").read_text())
    assert len(losses["1"]) == 3
    assert losses["2"] == pytest.approx(losses["1"], abs=1e-6, rel=0)
    # the option, not the environment, set the threads: the OMP_NUM_THREADS=2 run trained on one
    assert exports["2"]["num_threads"] == 1 and exports["2"]["torch_num_threads"] == 1
    assert exports["2"]["global_step"] == 3 and exports["2"]["provenance"]["packages"]["torch"]
    # without the option the environment decides: the same run under OMP_NUM_THREADS=2 uses two threads
    # (--plan_only: the thread setting is applied and logged before planning, and no model is loaded)
    done = run_sft(tiny_fit_config(tmp_path / "default", tiny_model_dir, train_dir), "--plan_only", "true", omp="2")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "torch intra-op threads: 2" in done.stderr
