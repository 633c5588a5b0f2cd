"""The miniature's verifier: a second tiny Qwen3-VL, at the verifier's widths (``cader.dev.tiny.TINY_SIZES``), taught
the C.3 role alone.

The paper verifies crops with Qwen3-VL-4B-Instruct, a smaller model than the main one and not fine-tuned: it brings
the Yes/No judgement of a clip from pre-training (Implementation Details; App. C.3). The miniature mirrors that: the
verifier is built like the tiny main model, with a narrower language model and a vocabulary of its own, and its
stand-in for pre-training is one pass of ``train/sft.py`` (``configs/train/pretrain_tiny.yaml``) on C.3 rows of
videos of its own: a clip of the scene holding the event, target ``Yes``; a clip of another stretch (the decoy scene
where there is one), target ``No``. It never sees the SFT mix, as the paper's verifier never sees the SFT data.

Its videos are the main model's pre-training videos (``tiny_pretrain.VIDEO``) with events of 1-10 s instead of
4-10 s, drawn from a seed of their own (neither the SFT mix's, the main model's pre-training's nor any evaluation
video): the evaluation's events are 1-6 s, and a clip at a crop's density shows every one of them, so a verifier
must say Yes to a 1 s event too. Measured with the role probe's verifier crops on a held-out split (60 videos):
trained on 4-10 s events only, its P(Yes) on crops with a 1-2 s event stayed near 0 (AUROC 0.81 on one seed); with
1-10 s events, AUROC 1.0 on seeds 1 and 2. The language model is half the main model's width; the vision tower keeps
the main model's (a 16-wide tower separated the crops less well on one of two seeds). Its P(Yes) then separates crops
with the evidence from crops without, so the miniature's Stage 2 verifies for real, with two models: two loads, two
processors and two sets of token ids.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from cader.dev.synthetic.media import (
    COLOUR_QUESTION,
    LETTERS,
    VideoSpec,
    canonical_colour_options,
    random_cued_spec,
)
from cader.dev.synthetic.train_mix import write_cader_roles, write_json
from cader.dev.tiny_pretrain import CONFIG_NAME, PRETRAIN_SEED, VIDEO, install, random_start, train_pass
from cader.evaluate.method.prompts import verifier_prompt

VERIFY_EPOCHS = 20
VERIFY_SEED = PRETRAIN_SEED + 1000   # the verifier's videos: far from every other seed of the miniature
VERIFY_EVENT_LEN = (1, 10)           # seconds: the evaluation's brief events (1-6 s) and the training's (4-10 s)


def verifier_user_text() -> str:
    """The C.3 user turn of every synthetic verifier row (one question, the six colours in their fixed order)."""
    options, _ = canonical_colour_options("red")
    return verifier_prompt(COLOUR_QUESTION, options, LETTERS[: len(options)])[1]


def verifier_rows(rows: list[dict]) -> list[dict]:
    """The C.3 rows among CADER role rows (``write_cader_roles``); ValueError when there are none."""
    user = "<video>" + verifier_user_text()
    found = [row for row in rows if row["messages"][1]["content"] == user]
    if not found:
        raise ValueError(f"no verifier rows (C.3 prompt) among {len(rows)} role rows")
    return found


def write_verifier_set(out: str | Path, n_videos: int, seed: int = VERIFY_SEED) -> tuple[Path, list[VideoSpec]]:
    """``n_videos`` videos' C.3 rows and their clips under ``out`` (``verify.json``, ``media/clips/``); returns the
    rows' file and the videos' specs. Only the clips are written: the verifier never sees a whole video."""
    out = Path(out)
    rng = np.random.default_rng(seed)
    specs = [random_cued_spec(rng, f"ver_{i:04d}", **{**VIDEO, "event_len": VERIFY_EVENT_LEN})
             for i in range(n_videos)]
    rows, _ = write_cader_roles(out, rng, specs)
    write_json(out / "verify.json", verifier_rows(rows))
    return out / "verify.json", specs


def make_tiny_verifier(out: str | Path, seed: int = 0, epochs: int = VERIFY_EPOCHS, n_videos: int = 96,
                       train_flags: tuple[str, ...] = ()) -> Path:
    """Build the tiny verifier and give it the C.3 role (module doc); work files in ``<out>_pretrain/``; returns
    ``out``, which appears complete or not at all.

    Args:
        out: the HF folder to write
        seed: its weight init, the pass's data order, and (offset from VERIFY_SEED) its videos
        epochs: epochs of the verifier pass (0: the random verifier)
        n_videos: videos whose two C.3 rows it trains on
        train_flags: flags for the pass's train/sft.py (``train_pass``)
    """
    work, model, record = random_start(out, seed, "verifier")
    record["role"] = "verifier"
    if epochs > 0:
        rows, _ = write_verifier_set(work / "data", n_videos, VERIFY_SEED + seed)
        model = train_pass(model, rows, work / "verify", work / "frame_cache", epochs, seed, train_flags)
        record["pretraining"] = {"videos": n_videos, "video_seed": VERIFY_SEED + seed, "event_len": VERIFY_EVENT_LEN,
                                 "verify_rows": len(json.loads(rows.read_text())), "verify_epochs": epochs,
                                 "config": CONFIG_NAME}
    return install(model, out, record)
