"""Which contract a file of the pipeline follows, by its name, and checking a whole file against it: the tests'
check of every file a run writes (the product reads its files through `cader.contracts.jsonl` and the models)."""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path

from cader.contracts.jsonl import read_validated
from cader.contracts.records import (
    CalibrationFile,
    JudgmentRecord,
    PredictionRecord,
    TimingRecord,
    describe_validation_error,
)
from pydantic import BaseModel, ValidationError

# File name pattern -> the model of its records (shards of a run are predictions files too).
CONTRACTS: tuple[tuple[str, type[BaseModel]], ...] = (
    ("predictions.jsonl", PredictionRecord),
    ("predictions.shard-*-of-*.jsonl", PredictionRecord),
    ("timings.jsonl", TimingRecord),
    ("timings.shard-*-of-*.jsonl", TimingRecord),
    ("judgments.jsonl", JudgmentRecord),
    ("calibration.json", CalibrationFile),
)


def contract_for(path: str | Path) -> type[BaseModel] | None:
    """The model a file of this name holds, or None for a file outside the contracts."""
    name = Path(path).name
    return next((model for pattern, model in CONTRACTS if fnmatch.fnmatchcase(name, pattern)), None)


def file_problems(path: str | Path) -> list[str]:
    """Every way the file breaks its contract, as '<file>[:<line>]: <field>: <what>'; empty when it keeps it."""
    model = contract_for(path)
    if model is None:
        raise ValueError(f"{path}: no contract for a file of this name")
    if Path(path).suffix == ".jsonl":
        return [str(problem) for problem in read_validated(path, model).problems]
    try:
        model.model_validate(json.loads(Path(path).read_text(encoding="utf-8")))
    except json.JSONDecodeError as error:
        return [f"{path}: not valid JSON ({error.msg})"]
    except ValidationError as error:
        return [f"{path}: {describe_validation_error(error)}"]
    return []
