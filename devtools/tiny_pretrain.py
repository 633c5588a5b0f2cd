"""The tiny model's stand-in for pre-training: temporal grounding (paper App. C.2) on synthetic videos of its own.

Qwen3-VL-8B-Instruct comes out of pre-training able to place an event in time from the textual timestamps between
its frames, and CADER's proposal step (C.2) uses that ability zero-shot: the paper's SFT mix holds no grounding rows.
A random-weight tiny model has no such ability, and a few CPU minutes of the SFT mix do not teach it: the proposal
collapses to one constant window and every Stage-2 crop misses (issue 15). So the embedded default's "Instruct"
model is the random model after a short grounding pass (``pretrain_grounding``): C.2 proposal and reflection rows
whose target is the window holding the event, trained with ``train/sft.py`` itself (``configs/train/
grounding_tiny.yaml``) and exported with the processor and chat template as any SFT export is.

Its videos are drawn from a seed of their own (``GROUNDING_SEED``), so they are neither the SFT mix's videos nor
any evaluation video: a proposal that finds the event on a held-out video is generalisation, not recall.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
from cader.dev.synthetic.media import random_cued_spec, write_video
from cader.dev.synthetic.train_mix import REFLECT_EVERY, proposal_row, reflection_windows, write_json

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "train" / "grounding_tiny.yaml"
# Far from make_synthetic_data's seeds (0 by default, small integers in tests), whose two child generators draw
# the SFT and evaluation videos.
GROUNDING_SEED = 7919
# The same videos as make_synthetic_data's training half: 128 s at 2 fps, 96x64, a 16 s light scene holding a 4-10 s
# coloured event.
VIDEO = {"duration_range": (128, 128), "scene_len": 16, "event_len": (4, 10), "fps": 2, "width": 96, "height": 64}


def write_grounding_set(out: str | Path, n_videos: int, seed: int = GROUNDING_SEED) -> Path:
    """Write ``n_videos`` videos and their proposal rows (every ``REFLECT_EVERY``-th also as a reflection row) as
    LLaMA-Factory sharegpt ``grounding.json`` under ``out``; return its path."""
    out = Path(out)
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n_videos):
        spec = random_cued_spec(rng, f"ground_{i:04d}", **VIDEO)
        write_video(spec, out / "media" / "videos" / f"{spec.name}.mp4")
        rows.append(proposal_row(spec))
        if i % REFLECT_EVERY == 0:
            rows.append(proposal_row(spec, reflection_windows(rng, spec)))
    write_json(out / "grounding.json", rows)
    return out / "grounding.json"


def pretrain_grounding(base: str | Path, work: str | Path, n_videos: int = 96, epochs: int = 25,
                       seed: int = GROUNDING_SEED) -> Path:  # fmt: skip
    """Train the model at ``base`` on a fresh grounding set under ``work``; return the HF export folder."""
    from cader.train.sft import main as sft_main

    work = Path(work)
    rows = write_grounding_set(work / "data", n_videos, seed)
    source = [{"name": "grounding", "format": "sharegpt", "path": str(rows)}]
    argv = [
        "--config", str(CONFIG),
        "--model.model_path", str(base),
        "--data.sources", json.dumps(source),
        "--data.frame_cache_dir", str(work / "frame_cache"),
        "--trainer.default_root_dir", str(work / "run"),
        "--trainer.max_epochs", str(epochs),
    ]  # fmt: skip
    code = sft_main(argv)
    if code != 0:
        raise RuntimeError(f"grounding pre-training of {base} failed (train/sft.py exit {code}); see its log above")
    return work / "run" / "export"


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
