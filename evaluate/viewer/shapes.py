"""What the viewer reads of a run's report.json and judge_report.json, as models of the parts it computes with.

The two files have no contract of their own (evaluate/report.py and evaluate/judge.py write them), yet the viewer
multiplies, sorts and unpacks some of their values: a number there that is a string, or an interval that is not two
numbers, would stop the whole page. A file whose read parts have another shape is one problem naming the file and
the field, and is not used: the run is then summarised from its records, as a folder without report.json is, or
shown without the judge's numbers. Everything else in them is drawn by the generic tables, whatever its shape.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from cader.contracts.records import describe_validation_error
from cader.contracts.types import Number, Record
from pydantic import BaseModel, Field, ValidationError

Interval = Annotated[list[Number | None], Field(min_length=2, max_length=2)]
"""[low, high] of a confidence interval; nulls where it is undefined."""


class OverallShape(Record):
    n: int | None = None
    accuracy: Number | None = None
    accuracy_ci95_exact: Interval | None = None
    stage1_exit_rate: Number | None = None


class BenchmarkShape(Record):
    accuracy_ci95_exact: Interval | None = None
    stage1_accuracy_ci95_exact: Interval | None = None
    accuracy_ci95_video_bootstrap: Interval | None = None


class CostShape(Record):
    per_sample: dict[str, Number | None] | None = None


class SecondsShape(Record):
    per_sample: Number | None = None


class TimingShape(Record):
    seconds: SecondsShape | None = None


class ReportShape(Record):
    """report.json: the headline numbers of the Runs view and the tables of the Reports view."""

    overall: OverallShape | None = None
    benchmarks: dict[str, BenchmarkShape] | None = None
    cost: CostShape | None = None
    timing: TimingShape | None = None
    config: dict[str, Any] | None = None


class JudgeSliceShape(Record):
    traj: Number | None = None


class ProvenanceShape(Record):
    command: str | None = None


class JudgeReportShape(Record):
    """judge_report.json: the judge's numbers of the Runs view (table and radar), its slices and failure tags."""

    traj: Number | None = None
    mc_rate: Number | None = None
    P1: Number | None = None
    P2: Number | None = None
    P3: Number | None = None
    P4: Number | None = None
    P5: Number | None = None
    n_judged: int | None = None
    real_judge: bool | None = None
    slices: dict[str, dict[str, JudgeSliceShape | None]] | None = None
    failure_tags_per_100: dict[str, Number | None] | None = None
    provenance: ProvenanceShape | None = None


def usable(path: Path, payload: dict | None, shape: type[BaseModel], add_problem) -> dict | None:
    """`payload` (a JSON object read from `path`, or None) when the parts the viewer reads have their shape; else
    None, with one problem naming the file and the fields (`add_problem(message)`)."""
    if payload is None:
        return None
    try:
        shape.model_validate(payload)
    except ValidationError as error:
        add_problem(f"{path}: not used, a value the viewer computes with has another shape: "
                    f"{describe_validation_error(error)}")
        return None
    return payload
