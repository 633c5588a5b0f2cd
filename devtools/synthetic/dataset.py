"""One call that writes the whole embedded-default data set (used by ``scripts/make_synthetic_data.py``).

``<out>/train/`` holds the CoT training mix (see ``train_mix``), ``<out>/eval/`` the benchmark layouts (see
``eval_sets``; pass ``<out>/eval`` as ``--data_root``). Separate child generators are spawned from the seed for
the training and evaluation halves, so changing ``n_train`` leaves the evaluation files unchanged and vice versa.
What is drawn comes in three groups: how many of each thing (``Counts``), what a frame is (``Frames``) and how long
videos, scenes and events last (``Timeline``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from cader.dev.synthetic.eval_sets import write_eval_sets
from cader.dev.synthetic.train_mix import write_json, write_training_mix


@dataclass(frozen=True)
class Counts:
    """How many of each thing is drawn.

    Args:
        n_train: training videos (shared round-robin by the four formats). 192, trained for 5 epochs: with 96
            videos for 10 epochs (the same steps) the tiny model memorised some seeds' videos instead of reading the
            colour from pixels (held-out Stage 1 46 % against 77 %, docs/miniature.md#robustness).
        n_images: training images (image CoT samples).
        n_tool: tool-call samples per training format (the training loader must drop them).
        n_eval: questions per benchmark (LVBench: videos, two questions each).
        n_heldout: questions in the synthetic_heldout split (calibration). 240, so that half of it (the selection
            split) can certify early exits at alpha = 0.05, delta = 0.1: with no error among them that takes at
            least 45 exits (Clopper-Pearson), and calibrate/fit.py tests only thresholds with 50 or more.
        n_unseen: training videos whose scene holds no event, with six direct-answer rows each, one per letter
            (``train_mix.add_unseen_rows``: Stage 1 learns to be unsure when its frames miss the answer, which a
            quarter of the evaluation videos' brief events make it); null: ``n_train // 12``, at least 1 (16 of
            the 192).
        n_test: questions in the synthetic test split (full CADER and the ablation table; null: n_eval).
            scripts/make_synthetic_data.py asks for 96, so that a Table 2 gap of ~10 points is significant by
            McNemar's test (on 32 one seed's 12.5-point gap had p = 0.12).
    """

    n_train: int = 192
    n_images: int = 24
    n_tool: int = 3
    n_eval: int = 8
    n_heldout: int = 240
    n_unseen: int | None = None
    n_test: int | None = None


@dataclass(frozen=True)
class Frames:
    """What a frame is.

    Args:
        width: frame width in pixels (even).
        height: frame height in pixels (even).
        fps: native frame rate of every video.
    """

    width: int = 96
    height: int = 64
    fps: int = 2


@dataclass(frozen=True)
class Timeline:
    """How long videos, scenes and events last.

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

    eval_duration: tuple[int, int] = (128, 128)
    train_duration: int = 128
    scene_len: int = 16
    event_len: float | tuple[int, int] = (1, 6)
    train_event_len: float | tuple[int, int] = (4, 10)
    decoy_rate: float = 0.5

    def videos(self, frames: Frames, train: bool) -> dict:
        """``random_cued_spec``'s keyword arguments for the training (`train`) or the evaluation videos."""
        return {"duration_range": (self.train_duration,) * 2 if train else tuple(self.eval_duration),
                "scene_len": self.scene_len, "event_len": self.train_event_len if train else self.event_len,
                "fps": frames.fps, "width": frames.width, "height": frames.height, "decoy_rate": self.decoy_rate}


def make_synthetic_data(out: str | Path, seed: int = 0, counts: Counts | None = None, frames: Frames | None = None,
                        timeline: Timeline | None = None) -> dict:
    """Write train/ and eval/ under ``out`` (a group left out takes its defaults); return a summary (also written to
    ``out/summary.json``). ``n_test`` questions go to the ``synthetic`` test split, ``n_eval`` to every other
    benchmark."""
    c, f, t = counts or Counts(), frames or Frames(), timeline or Timeline()
    if f.width % 2 or f.height % 2:
        raise ValueError(f"width and height must be even for yuv420 video, got {f.width}x{f.height}")
    if min(c.n_train, c.n_eval, c.n_heldout, c.n_eval if c.n_test is None else c.n_test) < 1 \
            or min(c.n_images, c.n_tool) < 0:
        raise ValueError("n_train, n_eval, n_heldout and n_test must be >= 1; n_images and n_tool >= 0")
    if not 2 * t.scene_len <= t.eval_duration[0] <= t.eval_duration[1] or t.train_duration < 2 * t.scene_len:
        raise ValueError(f"video durations must hold two scenes ({2 * t.scene_len} s) and eval min <= max; got eval "
                         f"{t.eval_duration}, train {t.train_duration}")
    out = Path(out)
    train_rng, eval_rng = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    train = write_training_mix(out / "train", train_rng, c.n_train, c.n_images, c.n_tool, t.videos(f, train=True),
                               max(1, c.n_train // 12) if c.n_unseen is None else c.n_unseen)
    evals = write_eval_sets(out / "eval", eval_rng, c.n_eval, c.n_heldout, t.videos(f, train=False), c.n_test)
    summary = {"seed": seed,
               "train": {k: {"total": v["total"], "tool_call": v["tool_call"]} for k, v in train["sources"].items()},
               "eval": {k: v["expected_samples"] for k, v in evals["benchmarks"].items()}}
    write_json(out / "summary.json", summary)
    return summary
