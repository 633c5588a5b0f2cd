"""The tiny model's stand-in for pre-training: the CADER roles (paper App. C) on synthetic videos of its own.

Qwen3-VL-8B-Instruct comes out of pre-training able to place an event in time from the textual timestamps between
its frames, to say whether a clip shows something and to answer about it; CADER's proposal (C.2), verifier (C.3) and
final answer (C.4) use those abilities zero-shot: the paper's SFT mix holds none of them. A random-weight tiny model
has none, and a few CPU minutes of the SFT mix do not teach the grounding: the proposal collapses to one constant
window and every Stage-2 crop misses (measured with the role probe below). So the miniature's "Instruct" model is the random model after
two short passes with ``train/sft.py`` itself (``configs/train/pretrain_tiny.yaml``), exported with the processor
and chat template as any SFT export is:

1. grounding: the C.2 proposal and reflection rows alone, target the window holding the event;
2. roles: every role row of ``write_cader_roles`` (proposal, reflection, verifier Yes/No on clips, C.4 and C.1 on
   the clip of the event).

Why two passes in this order (each measured by the role probe, ``tests/role_probe.py``, on the held-out
split after the SFT): with the roles pass alone the proposal stays one or two constant
windows; with the grounding pass alone the proposals hold but the SFT then does not learn the colours (Stage 1 at
chance); grounding first, then the roles, gives both.

The videos are drawn from a seed of their own (``PRETRAIN_SEED``), so they are neither the SFT mix's videos nor any
evaluation video: a proposal that finds the event on a held-out video is generalisation, not recall.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
from cader.dev.synthetic.dataset import Frames, Timeline
from cader.dev.synthetic.media import random_cued_spec, write_video
from cader.dev.synthetic.train_mix import write_cader_roles, write_json
from cader.dev.tiny import make_tiny_model
from cader.evaluate.method.prompts import GROUNDING_SYSTEM

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "train" / "pretrain_tiny.yaml"
CONFIG_NAME = "configs/train/pretrain_tiny.yaml"   # as a record names it
# Far from make_synthetic_data's seeds (0 by default, small integers in tests), whose two child generators draw
# the SFT and evaluation videos.
PRETRAIN_SEED = 7919
# make_synthetic_data's training videos, so the two cannot drift apart (128 s at 2 fps, 96x64, a 16 s light scene
# holding a 4-10 s coloured event, half with a decoy scene)
VIDEO = Timeline().videos(Frames(), train=True)


def write_pretraining_set(out: str | Path, n_videos: int, seed: int = PRETRAIN_SEED) -> tuple[Path, Path]:
    """Write ``n_videos`` videos, their clips and role rows under ``out`` as LLaMA-Factory sharegpt files:
    ``grounding.json`` (the proposal and reflection rows) and ``roles.json`` (every role row); return both paths."""
    out = Path(out)
    rng = np.random.default_rng(seed)
    specs = [random_cued_spec(rng, f"pre_{i:04d}", **VIDEO) for i in range(n_videos)]
    for spec in specs:
        write_video(spec, out / "media" / "videos" / f"{spec.name}.mp4")
    rows, _ = write_cader_roles(out, rng, specs)
    grounding = [row for row in rows if row["messages"][0]["content"] == GROUNDING_SYSTEM]
    write_json(out / "grounding.json", grounding)
    write_json(out / "roles.json", rows)
    return out / "grounding.json", out / "roles.json"


def train_pass(model: Path, rows: Path, run: Path, cache: Path, epochs: int, train_seed: int = 0,
               train_flags: tuple[str, ...] = ()) -> Path:
    """One pass of train/sft.py (``CONFIG``) from ``model`` on the sharegpt file ``rows``, in ``run``; returns its
    HF export. ``train_seed`` seeds the pass (weights' randomness); ``train_flags`` go last to train/sft.py (the
    miniature's grid varies ``--num_threads``, ``--model.loss_positions`` and ``--data.seed`` with them)."""
    from cader.train.sft import main as sft_main

    source = [{"name": rows.stem, "format": "sharegpt", "path": str(rows)}]
    code = sft_main(["--config", str(CONFIG), "--model.model_path", str(model), "--data.sources", json.dumps(source),
                     "--data.frame_cache_dir", str(cache), "--trainer.default_root_dir", str(run),
                     "--trainer.max_epochs", str(epochs), "--seed_everything", str(train_seed), *train_flags])
    if code != 0:
        raise RuntimeError(f"pre-training pass {run.name} of {model} failed (train/sft.py exit {code}; log above)")
    return run / "export"


def random_start(out: str | Path, seed: int, size: str = "main") -> tuple[Path, Path, dict]:
    """The work folder ``<out>_pretrain``, the random tiny model of ``size`` built there and its record."""
    work = Path(f"{out}_pretrain")
    model = make_tiny_model(work / "random", seed=seed, size=size)
    return work, model, json.loads((model / "cader_tiny.json").read_text())


def make_pretrained_model(out: str | Path, seed: int = 0, grounding_epochs: int = 25, roles_epochs: int = 12,
                          n_videos: int = 96, train_flags: tuple[str, ...] = ()) -> Path:
    """The random model of ``seed`` after the two passes (module doc; a pass with 0 epochs is skipped), installed at
    ``out``; work files in ``<out>_pretrain/``. ``seed`` also seeds each pass and, offset from PRETRAIN_SEED, draws
    the videos. ``train_flags`` go to each pass (``train_pass``)."""
    work, model, record = random_start(out, seed)
    record["pretraining"] = {"videos": n_videos, "video_seed": PRETRAIN_SEED + seed,
                             "grounding_epochs": grounding_epochs, "roles_epochs": roles_epochs, "config": CONFIG_NAME}
    grounding, roles = write_pretraining_set(work / "data", n_videos, PRETRAIN_SEED + seed)
    for rows, epochs in ((grounding, grounding_epochs), (roles, roles_epochs)):
        if epochs > 0:
            model = train_pass(model, rows, work / rows.stem, work / "frame_cache", epochs, seed, train_flags)
    return install(model, out, record)


def install(export: str | Path, out: str | Path, record: dict) -> Path:
    """Copy ``export`` to ``out`` with ``record`` as ``cader_tiny.json``; ``out`` appears complete or not at all
    (scripts test for ``out/config.json`` to skip a finished step)."""
    out = Path(out)
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(export, tmp)
    (tmp / "cader_tiny.json").write_text(json.dumps(record, indent=2) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out
