"""The exact per-video mode: tau certified on one question per video, drawn at random.

Why this and not a per-video mean loss. The design-effect bound (calibrate/clusters.py) divides the counts by an
estimated variance inflation (Kish); it is an approximation, and with one video in the selection split it
estimates no inflation at all. Two exact alternatives were weighed:

- a per-video mean loss X_v in [0, 1] with a concentration bound over videos (Hoeffding or Bentkus, as in Dunn et
  al., arXiv 1809.07441, for two-level sampling): valid for a mean over all questions, but the precision risk is a
  ratio (errors among exits, the exit set depending on tau), not a mean of per-video losses, and Hoeffding-type
  bounds on [0, 1] means are far looser than an exact binomial on 0/1 outcomes;
- one question per video, drawn uniformly at random before any margin is looked at (this module): if videos are
  drawn independently, the drawn (margin, correct) pairs are independent and identically distributed whatever the
  correlation inside a video, so the number of errors among the exits at a fixed tau is exactly Binomial given
  the number of exits, and precision mode's Clopper-Pearson fixed-sequence test (calibrate/tau.py) holds exactly.

The second is chosen: it keeps the exact binomial test and needs no variance estimate. What it certifies is the
error among exits of a random question of a random video (each video weighs the same; with equally many questions
per video, the same as the question-weighted rate). The price is the discarded questions: under strong
within-video correlation they carry little information anyway, without it the design-effect mode certifies more.
The drawn question is chosen by the calibration seed, so a rerun certifies the same tau.

Fewer than two videos cannot certify anything about new videos: that is a refusal (``PerVideoError``), not a
certificate; and the temperature must be fitted on other videos than the ones selecting tau (a split by video
that did not fall back to questions), or the selection sample is not independent of T.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

MIN_VIDEOS = 2
# added to the calibration seed, so the draw inside videos is not the same stream as the fit/select shuffle
DRAW_SEED_OFFSET = 7919


class PerVideoError(ValueError):
    """The exact per-video mode cannot certify on these data (too few videos, or T fitted on the same videos)."""


def one_per_video(codes: Sequence[int], seed: int) -> np.ndarray:
    """Indices into ``codes`` (a video code per sample): one uniformly random sample per distinct video, sorted.

    The draw depends only on the codes and the seed, never on margins or outcomes."""
    codes = np.asarray(codes, dtype=np.int64)
    if codes.size == 0:
        return np.zeros(0, np.int64)
    rng = np.random.default_rng(seed + DRAW_SEED_OFFSET)
    order = np.lexsort((rng.random(codes.size), codes))  # by video, randomly within each video
    first = np.r_[True, codes[order][1:] != codes[order][:-1]]
    return np.sort(order[first])


def check_per_video(n_videos: int, split_used: str, temperature_fitted: bool) -> None:
    """Raise PerVideoError when the per-video mode cannot give an exact certificate."""
    if n_videos < MIN_VIDEOS:
        raise PerVideoError(
            f"the selection split holds {n_videos} video(s); the exact per-video mode needs at least {MIN_VIDEOS} "
            "(one video says nothing about the next one): this is a refusal, not a certificate")
    if temperature_fitted and split_used != "video":
        raise PerVideoError(
            "the exact per-video mode needs the temperature fitted on other videos than the ones selecting tau, but "
            f"the fit/select split was by {split_used} (fewer than two videos per benchmark, or --split_by question); "
            "pass more videos, or fix T with --temperature")


def clustered_selection_refusal(n_videos: int, holder: str = "the selection split holds") -> str | None:
    """Why a guarantee counting videos cannot be certified on ``n_videos`` videos (None when it can); ``holder``
    says what holds them, as the message's opening words."""
    if n_videos < MIN_VIDEOS:
        return (f"{holder} {n_videos} video(s): a bound counting videos needs at least {MIN_VIDEOS} "
                "(one video's questions are one trial, not many); this is a refusal, not a certificate")
    return None
