"""Does a calibration hold where it is applied? The settings calibration.json recorded against a run's own.

calibrate/fit.py records under ``settings`` what produced the margins its threshold was certified on
(`cader.calibrate.settings`): the backbone's fingerprint, the Stage-1 frame settings (r1, max_frames, max_pixels),
whether Stage 1 thinks, and the benchmarks. A threshold certified at one frame budget says nothing at another
(confidence barely moves when evidence is cut while errors rise), so evaluate/run.py --calibration refuses a run
whose settings differ, naming each field with both values, unless told to accept the mismatch; then its report
says the guarantee does not transfer.

Rules (pure; no file or model is read here):
- the backbone matches by fingerprint; by name only where either side has no fingerprint;
- r1, max_frames, max_pixels and Stage-1 thinking must be equal (numbers compared as numbers);
- the run's benchmark must be one the calibration was certified on, a held-out split ``<name>_heldout`` counting
  as ``<name>`` (the synthetic set's calibration split is ``synthetic_heldout``);
- a field the calibration could not record (rows without a fingerprint, or pooled over several values) matches
  nothing: no recorded value means no evidence that the guarantee covers the run's;
- a calibration.json without ``settings`` (written before they were recorded) mismatches as a whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

STAGE1_FIELDS = ("r1", "max_frames", "max_pixels", "enable_thinking")
HELDOUT_SUFFIX = "_heldout"
NOT_RECORDED = "not recorded"


@dataclass(frozen=True)
class FieldMismatch:
    """One setting where the calibration and the run differ."""

    field: str
    calibrated: Any
    run: Any

    def __str__(self) -> str:
        return f"{self.field}: calibrated {self.calibrated!r}, run {self.run!r}"


def run_settings(*, model: str | None, model_fingerprint: str | None, r1: float, max_frames: int, max_pixels: int,
                 benchmark: str, enable_thinking: bool = False) -> dict:
    """A run's settings in the shape of calibration.json's ``settings`` block."""
    return {"backbone": {"name": model, "fingerprint": model_fingerprint},
            "stage1": {"r1": r1, "max_frames": max_frames, "max_pixels": max_pixels,
                       "enable_thinking": enable_thinking},
            "benchmarks": [benchmark]}


def _recorded(settings: dict, field: str, value):
    """What to show for a calibrated value: the value, the pooled values, or NOT_RECORDED."""
    if value is not None:
        return value
    mixed = (settings.get("mixed") or {}).get(field)
    return f"mixed {mixed}" if mixed else NOT_RECORDED


def _equal(a, b) -> bool:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool | type(None)):
        return float(a) == float(b)
    return a == b


def benchmark_family(name: str) -> str:
    """A benchmark's name with a held-out split's suffix removed (``synthetic_heldout`` -> ``synthetic``)."""
    return name.removesuffix(HELDOUT_SUFFIX) if name.endswith(HELDOUT_SUFFIX) else name


def binding_mismatches(calibrated: dict | None, run: dict) -> list[FieldMismatch]:
    """Every field where the calibration's recorded ``settings`` and the run's (``run_settings``) differ, in a fixed
    order (backbone, Stage-1 settings, benchmark); empty when the calibration holds for the run."""
    if not isinstance(calibrated, dict):
        return [FieldMismatch("settings", NOT_RECORDED + " (calibration.json predates recorded settings)",
                              "the run's settings")]
    out = []
    cal_bb, run_bb = calibrated.get("backbone") or {}, run.get("backbone") or {}
    if cal_bb.get("fingerprint") is not None and run_bb.get("fingerprint") is not None:
        if cal_bb["fingerprint"] != run_bb["fingerprint"]:
            out.append(FieldMismatch("backbone.fingerprint", cal_bb["fingerprint"], run_bb["fingerprint"]))
    elif cal_bb.get("name") is None or cal_bb.get("name") != run_bb.get("name"):
        if cal_bb.get("name") is None:  # neither a fingerprint nor a name to compare
            out.append(FieldMismatch("backbone.fingerprint", _recorded(calibrated, "backbone.fingerprint", None),
                                     run_bb.get("fingerprint") or run_bb.get("name")))
        else:
            out.append(FieldMismatch("backbone.name", cal_bb["name"], run_bb.get("name")))
    cal_s1, run_s1 = calibrated.get("stage1") or {}, run.get("stage1") or {}
    for name in STAGE1_FIELDS:
        cal_v, run_v = cal_s1.get(name), run_s1.get(name)
        if cal_v is None or not _equal(cal_v, run_v):
            out.append(FieldMismatch(f"stage1.{name}", _recorded(calibrated, name, cal_v), run_v))
    families = {benchmark_family(b) for b in calibrated.get("benchmarks") or []}
    for bench in run.get("benchmarks") or []:
        if benchmark_family(bench) not in families:
            out.append(FieldMismatch("benchmark", sorted(calibrated.get("benchmarks") or []) or NOT_RECORDED, bench))
    return out


@dataclass(frozen=True)
class BindingVerdict:
    """What a run does with a calibration: use it (it holds), refuse it, or use it saying the guarantee does not
    transfer (accepted mismatch)."""

    mismatches: list[FieldMismatch]
    accepted: bool

    @property
    def holds(self) -> bool:
        return not self.mismatches

    @property
    def refused(self) -> bool:
        return bool(self.mismatches) and not self.accepted

    def message(self, calibration: str) -> str:
        """One line: the refusal (exit 2) or the note the report carries; '' when the calibration holds."""
        if self.holds:
            return ""
        fields = "; ".join(str(m) for m in self.mismatches)
        if self.refused:
            return (f"--calibration {calibration} was certified under other settings ({fields}); its guarantee "
                    f"does not transfer to this run (--accept_calibration_mismatch true to use it anyway)")
        return f"calibration {calibration}: guarantee does not transfer ({fields})"

    def report_block(self) -> dict:
        """The report.json ``calibration_binding`` block."""
        return {"holds": self.holds, "accepted_mismatch": bool(self.mismatches) and self.accepted,
                "guarantee_transfers": self.holds,
                "mismatches": [{"field": m.field, "calibrated": m.calibrated, "run": m.run} for m in self.mismatches]}


def report_line(block: dict | None) -> str:
    """report.md's line for a report.json ``calibration_binding`` block ('' when there is none or it holds)."""
    if not block or block.get("holds", True):
        return ""
    fields = "; ".join(f"{m['field']}: calibrated {m['calibrated']!r}, run {m['run']!r}" for m in block["mismatches"])
    return f"**Calibration: guarantee does not transfer** (mismatch accepted: {fields})."


def check_binding(calibration_payload: dict, run: dict, accept_mismatch: bool = False) -> BindingVerdict:
    """The verdict for a run (``run_settings``) applying ``calibration_payload`` (a validated calibration.json)."""
    return BindingVerdict(binding_mismatches(calibration_payload.get("settings"), run), bool(accept_mismatch))
