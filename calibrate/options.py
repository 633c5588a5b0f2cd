"""The options of a calibration (calibrate/fit.py), in four groups: how tau is certified (`Rule`), what else is
fitted (`FitOptions`), how the fit/select split is made (`SplitOptions`) and what is read and drawn
(`OutputOptions`). Each field is a flag of calibrate/fit.py and a key of configs/calibrate/default.yaml under its own
name (`--alpha`, `alpha:`); --help lists the flags group by group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from cader.calibrate.ltt import select_tau_ltt
from cader.calibrate.tau import MODES, select_tau_accuracy, select_tau_budget, select_tau_precision

STAGE2_NEEDED = ("pass the predictions.jsonl of a uniform_stage2 run (rows with route == 'stage2' and "
                 "stage2.pred); rows join the Stage-1 rows by benchmark and sample_id")


class CalibrationInputError(ValueError):
    """The inputs cannot support the requested calibration (too few samples, no Stage-2 outcomes, ...)."""


@dataclass(frozen=True)
class Rule:
    """How tau is certified.

    Args:
        mode: how tau is chosen: precision (error among exits <= alpha w.p. 1 - delta), cascade (accuracy lost
            against always running Stage 2 <= epsilon w.p. 1 - delta), joint (exit error <= alpha and accuracy loss
            <= epsilon together w.p. 1 - delta, within the Stage-2 budget), budget (Stage-2 share <= budget, no
            guarantee), accuracy (best final accuracy, no guarantee); cascade, accuracy and joint with epsilon
            need Stage-2 outcomes (a uniform_stage2 run)
        alpha: precision and joint modes: the largest error allowed among early exits
        delta: the allowed probability that a guaranteed bound fails
        epsilon: cascade mode (required) and joint mode: the largest accuracy loss against always running Stage 2
        budget: budget mode: the largest share sent to Stage 2 (required); joint mode: the same as a constraint
        budget_guarantee: joint mode: bound the Stage-2 share with its own binomial test (delta split in half)
            instead of holding it on the selection split only
        min_exits: precision and joint modes: the fewest early exits a tau may have (verifier_alpha: the fewest
            accepted crops a threshold may have)
        cluster_bound: test each threshold on effective counts (exits and errors divided by the design effect of
            the errors among the selection split's videos), so questions sharing a video are not counted as
            independent trials; false counts questions (valid only when they are independent). The verifier
            threshold (verifier_alpha) is tested the same way, on the misses among accepted first crops
        per_video: the exact per-video mode (calibrate/per_video.py): tau is certified on one question per video of
            the selection split, drawn at random with the seed, so the exact bound holds however strongly questions
            on one video are correlated (it certifies the error of a random question of a random video); needs the
            split by video (or a fixed T) and at least two selection videos, else it refuses
    """

    mode: Literal["precision", "budget", "accuracy", "cascade", "joint"] = "precision"
    alpha: float = 0.05
    delta: float = 0.1
    epsilon: float | None = None
    budget: float | None = None
    budget_guarantee: bool = False
    min_exits: int = 50
    cluster_bound: bool = True
    per_video: bool = False

    @property
    def needs_stage2(self) -> bool:
        return self.mode in ("accuracy", "cascade") or (self.mode == "joint" and self.epsilon is not None)

    @property
    def guaranteed_risk(self) -> tuple[str, float] | None:
        """The risk the mode bounds with probability >= 1 - delta, as (name, level)."""
        if self.mode in ("precision", "joint"):
            return "exit_error", self.alpha
        if self.mode == "cascade":
            return "accuracy_loss", self.epsilon
        return None

    def choose(self, margin, s1_correct, s2_correct=None, clusters=None):
        """tau on one selection split; ``clusters`` (a video label per sample) makes the bounds count videos."""
        if self.needs_stage2 and s2_correct is None:
            raise CalibrationInputError(f"--mode {self.mode} needs Stage-2 outcomes for the same samples: "
                                        + STAGE2_NEEDED)
        if self.mode == "precision":
            return select_tau_precision(margin, s1_correct, alpha=self.alpha, delta=self.delta,
                                        min_exits=self.min_exits, clusters=clusters)
        if self.mode == "budget":
            return select_tau_budget(margin, self.budget)
        if self.mode == "accuracy":
            return select_tau_accuracy(margin, s1_correct, s2_correct)
        if self.mode == "cascade":
            return select_tau_ltt(margin, s1_correct, self.delta, epsilon=self.epsilon, s2_correct=s2_correct,
                                  mode="cascade", clusters=clusters)
        if self.mode == "joint":
            return select_tau_ltt(margin, s1_correct, self.delta, alpha=self.alpha, epsilon=self.epsilon,
                                  s2_correct=s2_correct, budget=self.budget, budget_guarantee=self.budget_guarantee,
                                  min_exits=self.min_exits, mode="joint", clusters=clusters)
        raise CalibrationInputError(f"unknown mode {self.mode!r}; choose one of {MODES}")


@dataclass(frozen=True)
class FitOptions:
    """What is fitted besides tau.

    Args:
        temperature: fix T to this value instead of fitting it (every sample then selects tau)
        per_benchmark: also choose a tau per benchmark on its own samples (a guarantee per group)
        verifier_alpha: also choose the verifier threshold delta_v so that an accepted first crop misses the
            evidence window with probability <= this, w.p. 1 - delta (needs verify steps and meta.evidence_window)
        evidence_rule: what hitting the evidence means for verifier_alpha: the crop contains or overlaps it
    """

    temperature: float | None = None
    per_benchmark: bool = False
    verifier_alpha: float | None = None
    evidence_rule: Literal["contains", "overlaps"] = "contains"


@dataclass(frozen=True)
class SplitOptions:
    """How the samples are split between fitting T and selecting tau.

    Args:
        split_by: what the fit/select split keeps together: video (each video's questions on one side, so tau is
            selected on videos the temperature fit never saw) or question (questions split independently, for
            comparison); a row without a video is a video of its own
        fit_fraction: share of the samples (of each benchmark's videos with split_by video) used to fit T; the
            rest selects tau
        seed: seed of the split into the T-fit part and the tau-selection part (and of the per-video draw)
    """

    split_by: Literal["video", "question"] = "video"
    fit_fraction: float = 0.5
    seed: int = 0


@dataclass(frozen=True)
class OutputOptions:
    """What is read and drawn.

    Args:
        strict: stop at the first malformed row instead of skipping and counting it
        figures: also write figures/*.png and the CSV behind each
        validity_splits: random fit/select/test splits behind figures/guarantee_validity.png (0: none)
    """

    strict: bool = False
    figures: bool = True
    validity_splits: int = 100
