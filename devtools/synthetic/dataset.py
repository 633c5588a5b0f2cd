"""One call that writes the whole embedded-default data set (used by ``scripts/make_synthetic_data.py``).

``<out>/train/`` holds the CoT training mix (see ``train_mix``), ``<out>/eval/`` the benchmark layouts (see
``eval_sets``; pass ``<out>/eval`` as ``--data_root``). Separate child generators are spawned from the seed for
the training and evaluation halves, so changing ``n_train`` leaves the evaluation files unchanged and vice versa.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from cader.dev.synthetic.eval_sets import write_eval_sets
from cader.dev.synthetic.train_mix import write_json, write_training_mix


def make_synthetic_data(
    out: str | Path,
    seed: int = 0,
    n_train: int = 96,
    n_images: int = 24,
    n_tool: int = 3,
    n_eval: int = 8,
    n_heldout: int = 240,
    n_test: int | None = None,
    width: int = 96,
    height: int = 64,
    fps: int = 2,
    eval_duration: tuple[int, int] = (128, 128),
    train_duration: int = 128,
    scene_len: int = 16,
    event_len: float | tuple[int, int] = (1, 6),
    train_event_len: float | tuple[int, int] = (4, 10),
    decoy_rate: float = 0.5,
) -> dict:
    """Write train/ and eval/ under ``out``; return a summary (also written to ``out/summary.json``).

    ``n_test`` questions go to the ``synthetic`` test split (default ``n_eval``; the CLI asks for 96, enough for
    the quickstart's ablation table); every other benchmark gets ``n_eval``.

    ``event_len`` is the evidence of every evaluation video, in seconds, or a ``(lo, hi)`` range of whole seconds
    drawn per video: mostly brief, so Stage 1's sparse pass (32 frames over 128 s, one every 4 s) shows a 1 s event
    in a quarter of the videos, a 2 s one in half and a 4-6 s one always -- the spread of evidence lengths that gives
    Stage 1 both confident and uncertain samples, while a dense crop of the right window shows every one of them.
    Training videos get ``train_event_len`` instead, long enough that any 32-frame pass shows it: a row whose answer
    its frames cannot show only teaches the model to memorise videos (the real Qwen3-VL-8B-Instruct brings its
    perception from pre-training, not from such rows).

    ``decoy_rate`` gives that share of all videos a second light scene without the event (``random_cued_spec``):
    where the sparse pass misses a brief event, the two scenes look alike and the first proposal can pick the decoy,
    which is what CADER's verifier and reflection are for.
    """
    if width % 2 or height % 2:
        raise ValueError(f"width and height must be even for yuv420 video, got {width}x{height}")
    if min(n_train, n_eval, n_heldout, n_eval if n_test is None else n_test) < 1 or min(n_images, n_tool) < 0:
        raise ValueError("n_train, n_eval, n_heldout and n_test must be >= 1; n_images and n_tool >= 0")
    if not 2 * scene_len <= eval_duration[0] <= eval_duration[1] or train_duration < 2 * scene_len:
        raise ValueError(
            f"video durations must hold two scenes ({2 * scene_len} s) and eval min <= max; got eval "
            f"{eval_duration}, train {train_duration}"
        )
    out = Path(out)
    train_rng, eval_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    train = write_training_mix(
        out / "train", train_rng, n_train, n_images, n_tool, width, height, fps, train_duration, scene_len,
        train_event_len, decoy_rate,
    )
    evals = write_eval_sets(
        out / "eval", eval_rng, n_eval, n_heldout, tuple(eval_duration), width, height, fps, scene_len, event_len,
        n_test, decoy_rate,
    )
    summary = {
        "seed": seed,
        "train": {k: {"total": v["total"], "tool_call": v["tool_call"]} for k, v in train["sources"].items()},
        "eval": {k: v["expected_samples"] for k, v in evals["benchmarks"].items()},
    }
    write_json(out / "summary.json", summary)
    return summary


def describe(summary: dict) -> str:
    return json.dumps(summary, indent=1)
