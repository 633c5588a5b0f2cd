"""calibration.json as a model: the temperature T and exit threshold tau that calibrate/fit.py chose, with the
numbers behind the choice (CADER, Adaptive Routing via Confidence: Confidence calibration; Eq. 2-3).

Only the nine keys a run needs to trust the file are required; a file written by calibrate/fit.py has them all.
The guarantee modes (cascade, joint) are Learn-then-Test runs (calibrate/ltt.py): ``select.constraints`` says, for
each constraint, how it is controlled and whether it is met.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from cader.contracts.provenance import ProvenanceRecord
from cader.contracts.types import Number, Record
from pydantic import Discriminator, Field, Tag, field_validator

CALIBRATION_MODES = ("precision", "budget", "accuracy", "cascade", "joint")
# M <= 1 always, so M >= NO_EXIT_TAU never holds: with tau = NO_EXIT_TAU every sample goes to Stage 2
NO_EXIT_TAU = math.nextafter(1.0, 2.0)


class TemperatureFitRecord(Record):
    """The temperature fit on the fit split: gold-letter NLL minimised over T, ECE on P_top1."""

    temperature: Number = Field(default=None, description="The fitted T of CADER Eq. 2.")
    n: int = Field(default=None, description="Samples in the fit split.")
    nll_before: Number | None = Field(default=None, description="Mean gold NLL at T = 1 (raw logits).")
    nll_after: Number | None = Field(default=None, description="Mean gold NLL at the fitted T.")
    ece_before: Number | None = Field(default=None, description="ECE of P_top1 at T = 1.")
    ece_after: Number | None = Field(default=None, description="ECE of P_top1 at the fitted T.")
    nll_paper: Number | None = Field(default=None, description="Mean gold NLL at the paper's T = 2.0.")
    ece_paper: Number | None = Field(default=None, description="ECE of P_top1 at the paper's T = 2.0.")
    at_bound: bool = Field(default=None, description="The optimum sits on a search bound (separable data).")
    bounds: list[Number] = Field(default=None, description="The search interval [T_min, T_max].")
    ece_bins: int = Field(default=None, description="Equal-width bins of the ECE.")


class FixedTemperatureRecord(Record):
    """A temperature given rather than fitted (`--temperature`): every sample selects tau."""

    temperature: Number = Field(description="The given T of CADER Eq. 2.")
    n: int = Field(description="0: no sample was spent on a fit.")
    fixed: Literal[True] = Field(description="Marks a given T.")
    nll_before: Number | None = Field(description="Mean gold NLL at T = 1 (raw logits), over every sample.")
    ece_before: Number | None = Field(description="ECE of P_top1 at T = 1.")
    nll_after: Number | None = Field(description="Mean gold NLL at the given T.")
    ece_after: Number | None = Field(description="ECE of P_top1 at the given T.")


def _fit_kind(value) -> str:
    # called with the raw dict when validating and with the model when dumping
    fixed = value.get("fixed") if isinstance(value, dict) else getattr(value, "fixed", None)
    return "fixed" if fixed is True else "fitted"


FitRecord = Annotated[
    Annotated[TemperatureFitRecord, Tag("fitted")] | Annotated[FixedTemperatureRecord, Tag("fixed")],
    Discriminator(_fit_kind),
]


class ConstraintRecord(Record):
    """One constraint of a Learn-then-Test run (cascade, joint modes)."""

    name: Literal["exit_error", "accuracy_loss", "stage2_fraction"] = Field(
        description="exit_error: Stage-1 wrong among exits; accuracy_loss: exit and Stage 1 wrong where Stage 2 is "
        "right, over all samples; stage2_fraction: share sent to Stage 2."
    )
    level: Number = Field(description="The bound: alpha, epsilon or the budget.")
    handled: str = Field(description="How it is controlled: a binomial test, or deterministic on the selection split.")
    met: bool = Field(description="It holds at the chosen tau (an exit set meeting it was certified).")
    value: Number | None = Field(default=None, description="Its rate on the selection split at the chosen tau.")
    upper_bound: Number | None = Field(
        default=None, description="One-sided (1 - delta) Clopper-Pearson bound on that rate (tested risks)."
    )
    reason: str | None = Field(default=None, description="Why it cannot be met; null when it is.")
    design_effect: Number = Field(
        default=None, description="cluster_bound: the design effect of the risk at the chosen tau (its bound is on "
        "the counts divided by it)."
    )


class TauSelectionRecord(Record):
    """Early exit at the chosen tau on the selection split, and how the mode chose it."""

    tau: Number = Field(default=None, description="The chosen tau.")
    n: int = Field(default=None, description="Samples in the selection split.")
    n_exits: int = Field(default=None, description="Samples with M >= tau (Stage-1 exits).")
    exit_rate: Number = Field(default=None, description="n_exits / n.")
    exit_accuracy: Number | None = Field(
        default=None, description="Stage-1 accuracy among exits; null when none exit."
    )
    upper_bound_error: Number | None = Field(
        default=None,
        description="One-sided (1 - delta) Clopper-Pearson upper bound on the error among exits (with cluster_bound, "
        "on the effective counts).",
    )
    design_effect: Number | None = Field(
        default=None, description="cluster_bound: max(1, clustered / naive variance) of the error among the exits "
        "at tau, over the selection split's videos; null when none exit."
    )
    n_exits_effective: Number = Field(default=None, description="cluster_bound: n_exits / design_effect.")
    upper_bound_error_naive: Number = Field(
        default=None, description="cluster_bound: the bound counting questions as independent trials, for comparison."
    )
    cluster_bound: bool = Field(default=None, description="precision/cascade/joint: the tests counted videos.")
    no_exit: bool = Field(default=None, description="No threshold qualified: tau is above 1, nothing exits.")
    min_exits: int = Field(default=None, description="precision: the fewest exits a tested threshold needs.")
    candidates: int = Field(default=None, description="precision: thresholds on the fixed grid.")
    tested: int = Field(default=None, description="precision: thresholds tested in sequence.")
    stopped_at: Number | None = Field(default=None, description="precision: the first threshold that failed.")
    reason: str = Field(default=None, description="precision: why nothing qualified.")
    budget: Number = Field(default=None, description="budget: the largest allowed Stage-2 fraction.")
    allowed_stage2: int = Field(default=None, description="budget: samples allowed below tau.")
    expected_final_accuracy: Number = Field(default=None, description="accuracy: final accuracy at tau.")
    stage1_only_accuracy: Number = Field(default=None, description="accuracy: everyone exits.")
    stage2_everywhere_accuracy: Number = Field(default=None, description="accuracy: nobody exits.")
    final_accuracy: Number = Field(
        default=None,
        description="Stage-1 answer on exits, Stage-2 answer otherwise, where Stage-2 outcomes are known.",
    )
    n_with_stage2: int = Field(default=None, description="Samples with a known Stage-2 outcome.")
    accuracy_loss: Number = Field(
        default=None, description="Share of samples that exit with Stage 1 wrong where Stage 2 is right."
    )
    certified: int = Field(default=None, description="cascade/joint: grid thresholds certified in sequence.")
    delta_risks: Number = Field(default=None, description="cascade/joint: the delta the risks are tested at.")
    constraints: list[ConstraintRecord] = Field(default=None, description="cascade/joint: each constraint.")
    unmet: list[str] = Field(default=None, description="cascade/joint: the constraints that cannot be met.")
    stopped_by: list[str] = Field(default=None, description="cascade/joint: the risks that ended the sequence.")


class PaperPointRecord(Record):
    """The paper's operating point (T = 2.0, tau = 0.97; CADER, Stage 1) on the same selection split."""

    temperature: Number = Field(default=None, description="2.0, the paper's T.")
    tau: Number = Field(default=None, description="0.97, the paper's tau.")
    n: int = Field(default=None, description="Samples in the selection split.")
    n_exits: int = Field(default=None, description="Samples that exit at the paper point.")
    exit_rate: Number = Field(default=None, description="n_exits / n.")
    exit_accuracy: Number | None = Field(default=None, description="Stage-1 accuracy among exits.")
    upper_bound_error: Number | None = Field(
        default=None, description="Upper bound on the error among exits (effective counts with cluster_bound)."
    )
    design_effect: Number | None = Field(default=None, description="cluster_bound: as select.design_effect.")
    n_exits_effective: Number = Field(default=None, description="cluster_bound: n_exits / design_effect.")
    upper_bound_error_naive: Number = Field(default=None, description="cluster_bound: counting questions.")
    meets_alpha: bool = Field(default=None, description="upper_bound_error <= alpha.")
    final_accuracy: Number = Field(
        default=None, description="Final accuracy where Stage-2 outcomes are known."
    )


class Table4Counts(Record):
    """Samples per margin interval, the bins of CADER Table 4."""

    fitted_T: dict[str, int] = Field(
        default=None, description="Margins at the chosen T: interval -> samples."
    )
    paper_T: dict[str, int] = Field(default=None, description="Margins at T = 2.0: interval -> samples.")


class MarginSummary(Record):
    """The selection split's Stage-1 margins, bounded in size."""

    n: int = Field(description="Samples in the selection split.")
    temperature: Number = Field(description="The T the margins are computed at.")
    exact: bool = Field(description="True: every margin; false: evenly spaced quantiles standing for n samples.")
    sorted: list[Number] = Field(description="The margins (or quantiles), ascending.")


class BackboneRecord(Record):
    """The model whose Stage-1 logits the calibration was fitted on."""

    name: str | None = Field(default=None, description="The run's --model (from the report.json beside the "
                             "predictions); null when no report names it, or reports name several.")
    fingerprint: str | None = Field(default=None, description="stage1.fingerprint.model of the rows: the folder's "
                                    "config, weight files and chat template (Stage-1 reuse's identity); null when "
                                    "the rows carry none or disagree.")


class Stage1SettingsRecord(Record):
    """The Stage-1 settings the margins came from; null where the rows carry none or disagree (see `mixed`)."""

    r1: Number | None = Field(default=None, description="Stage-1 frame rate in fps (CADER Eq. 1).")
    max_frames: int | None = Field(default=None, description="Stage-1 frame cap.")
    max_pixels: int | None = Field(default=None, description="Pixels per Stage-1 frame.")
    enable_thinking: bool = Field(default=None, description="Stage 1 prompts with thinking on (CADER: off).")


class CalibrationSettings(Record):
    """What produced the margins: a run applying the calibration refuses other settings, naming each field
    (`cader.evaluate.calibration_binding`)."""

    backbone: BackboneRecord = Field(default=None, description="The model.")
    stage1: Stage1SettingsRecord = Field(default=None, description="The Stage-1 frame and prompt settings.")
    benchmarks: list[str] = Field(default=None, description="Benchmarks of the rows (a `<name>_heldout` split stands "
                                  "for `<name>`).")
    frames_shown: dict[str, Number] | None = Field(default=None, description="min, max and mean of stage1.n_frames.")
    mixed: dict[str, list] = Field(default=None, description="Fields on which rows disagree, with their values.")
    unknown: list[str] = Field(default=None, description="Fields no row or report states.")


class CalibrationFile(Record):
    """calibration.json, written by calibrate/fit.py and read by evaluate/run.py --calibration."""

    temperature: Number = Field(description="T for softmax(z / T) (CADER Eq. 2): a finite number > 0.")
    tau: Number = Field(
        description="Exit iff M >= tau (CADER Eq. 3, Algorithm 1 line 10): in [0, 1], or just above 1 for no exit."
    )
    mode: Literal[CALIBRATION_MODES] = Field(  # type: ignore[valid-type]
        description="How tau was chosen: precision (bounded error among exits), budget (Stage-2 share), accuracy, "
        "cascade (bounded accuracy loss against always running Stage 2), joint (several bounds at once)."
    )
    alpha: Number = Field(description="precision mode: the largest allowed error rate among exits.")
    delta: Number = Field(description="The bound holds with probability 1 - delta.")
    fit: FitRecord = Field(description="The temperature fit, or the given temperature (`fixed`).")
    select: TauSelectionRecord = Field(description="The tau selection on its own split.")
    sources: list[str] = Field(description="The predictions.jsonl files read.")
    seed: int = Field(description="Seed of the fit/select split.")
    paper_point: PaperPointRecord = Field(
        default=None, description="The paper's T and tau on the same split."
    )
    budget: Number | None = Field(default=None, description="budget mode: the largest Stage-2 fraction.")
    min_exits: int = Field(default=None, description="The fewest exits a tested threshold needs (as asked).")
    fit_fraction: Number = Field(default=None, description="Share of samples (videos) in the fit split.")
    split_by: Literal["video", "question"] = Field(
        default=None, description="What the fit/select split actually kept together: each video's questions, or none "
        "(question when a split by video fell back: no benchmark had two videos)."
    )
    split_by_requested: Literal["video", "question"] = Field(
        default=None, description="The split asked for (--split_by)."
    )
    per_video: dict | None = Field(
        default=None, description="The exact per-video mode: videos, questions in the selection split, questions used "
        "(one per video, drawn at random); null when off."
    )
    settings: CalibrationSettings = Field(
        default=None, description="What produced the margins (backbone, Stage-1 settings, benchmarks)."
    )
    cluster_bound: bool = Field(
        default=None, description="The bounds counted videos: effective counts n / design effect (calibrate/clusters.py)."
    )
    rows_without_video: int = Field(default=None, description="Usable rows with no video path (each its own video).")
    videos_fit: int = Field(default=None, description="Distinct videos in the fit split.")
    videos_select: int = Field(default=None, description="Distinct videos in the selection split.")
    videos_in_both: int = Field(
        default=None, description="Videos with questions in both splits (0 when split by video)."
    )
    n_samples: int = Field(default=None, description="Usable samples read.")
    n_benchmarks: int = Field(default=None, description="Benchmarks among them.")
    skipped: dict[str, int] = Field(default=None, description="Rows not used, by reason.")
    table4_counts: Table4Counts = Field(
        default=None, description="Samples per margin interval (CADER Table 4)."
    )
    figures: list[str] = Field(
        default=None, description="Figures written, relative to the calibration folder."
    )
    epsilon: Number | None = Field(
        default=None, description="cascade/joint: the largest accuracy loss against always running Stage 2."
    )
    select_margins: MarginSummary = Field(
        default=None, description="The selection split's margins, for the transfer test (calibrate/transfer.py)."
    )
    per_benchmark: dict[str, dict] = Field(
        default=None, description="--per_benchmark: tau and its exit statistics per benchmark (a guarantee per group)."
    )
    verifier: dict = Field(
        default=None, description="--verifier_alpha: the certified verifier threshold delta_v, or why none."
    )
    guarantee_validity: dict = Field(
        default=None, description="Realised risk over random fit/select/test splits (figures/guarantee_validity)."
    )
    provenance: ProvenanceRecord = Field(default=None, description="Code, packages, date and command line.")

    # The checks a run relies on, with messages that say what the value must be.
    @field_validator("temperature", mode="before")
    @classmethod
    def _positive_finite(cls, value):
        if not _is_number(value) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"temperature must be a finite number > 0, got {value!r}")
        return value

    @field_validator("tau", mode="before")
    @classmethod
    def _threshold(cls, value):
        if not _is_number(value) or not 0.0 <= value <= NO_EXIT_TAU:
            raise ValueError(f"tau must be a number in [0, 1] (or {NO_EXIT_TAU!r} = no exit), got {value!r}")
        return value

    @field_validator("mode", mode="before")
    @classmethod
    def _known_mode(cls, value):
        if value not in CALIBRATION_MODES:
            raise ValueError(f"mode must be one of {CALIBRATION_MODES}, got {value!r}")
        return value

    @field_validator("fit", "select", mode="before")
    @classmethod
    def _object(cls, value, info):
        if not isinstance(value, dict):
            raise ValueError(f"{info.field_name!r} must be an object")  # noqa: TRY004 (pydantic reports ValueError)
        return value

    @field_validator("sources", mode="before")
    @classmethod
    def _paths(cls, value):
        if not isinstance(value, list):
            raise ValueError("'sources' must be a list of paths")  # noqa: TRY004
        return value


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
