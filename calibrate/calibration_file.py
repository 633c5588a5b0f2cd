"""calibration.json: built and validated through `cader.contracts.records.CalibrationFile`, written atomically.

``load_calibration(path) -> (temperature, tau)`` is what evaluate/run.py --calibration calls.
"""

from __future__ import annotations

import json
from pathlib import Path

from cader.contracts.records import CalibrationFile, build_record, describe_validation_error
from cader.vlm.files import write_json_atomic
from pydantic import ValidationError

REQUIRED_KEYS = tuple(name for name, info in CalibrationFile.model_fields.items() if info.is_required())


class CalibrationFileError(ValueError):
    """calibration.json is missing, unreadable or violates the schema; the message names the file."""


def write_calibration(path: str | Path, payload: dict) -> Path:
    """`payload` built through the CalibrationFile model, then written atomically (NaN as null)."""
    return write_json_atomic(path, build_record(CalibrationFile, payload))


def validate_calibration(payload: dict, where: str = "calibration.json") -> dict:
    """`payload` unchanged when it satisfies CalibrationFile; CalibrationFileError naming `where` and the field."""
    if not isinstance(payload, dict):
        raise CalibrationFileError(f"{where}: expected a JSON object, got {type(payload).__name__}")
    missing = [k for k in REQUIRED_KEYS if k not in payload]
    if missing:
        raise CalibrationFileError(f"{where}: missing keys {missing}")
    try:
        CalibrationFile.model_validate(payload)
    except ValidationError as error:
        raise CalibrationFileError(f"{where}: {describe_validation_error(error)}") from None
    return payload


def read_calibration(path: str | Path) -> dict:
    """The whole validated calibration.json as a dict."""
    p = Path(path)
    try:
        payload = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CalibrationFileError(f"{p}: calibration file not found (run calibrate/fit.py first)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CalibrationFileError(f"{p}: cannot read calibration JSON ({exc})") from None
    return validate_calibration(payload, str(p))


def load_calibration(path: str | Path) -> tuple[float, float]:
    """(temperature, tau) from a calibration.json written by calibrate/fit.py, validated."""
    payload = read_calibration(path)
    return float(payload["temperature"]), float(payload["tau"])
