"""calibration.json: atomic write and validated read (schema in DESIGN.md section 2).

``load_calibration(path) -> (temperature, tau)`` is what evaluate/run.py --calibration calls.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

from cader.calibrate.tau import MODES, NO_EXIT_TAU

REQUIRED_KEYS = ("temperature", "tau", "mode", "alpha", "delta", "fit", "select", "sources", "seed")


class CalibrationFileError(ValueError):
    """calibration.json is missing, unreadable or violates the schema; the message names the file."""


def _finite_or_none(value):
    """JSON has no NaN/inf: turn them into null, recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(v) for v in value]
    return value


def write_json_atomic(path: str | Path, payload: dict) -> Path:
    """Write JSON to a temporary file in the same folder, then os.replace it over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(_finite_or_none(payload), indent=2, allow_nan=False) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def validate_calibration(payload: dict, where: str = "calibration.json") -> dict:
    if not isinstance(payload, dict):
        raise CalibrationFileError(f"{where}: expected a JSON object, got {type(payload).__name__}")
    missing = [k for k in REQUIRED_KEYS if k not in payload]
    if missing:
        raise CalibrationFileError(f"{where}: missing keys {missing}")
    t, tau = payload["temperature"], payload["tau"]
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
        raise CalibrationFileError(f"{where}: temperature must be a finite number > 0, got {t!r}")
    if isinstance(tau, bool) or not isinstance(tau, (int, float)) or not (0.0 <= tau <= NO_EXIT_TAU):
        raise CalibrationFileError(
            f"{where}: tau must be a number in [0, 1] (or {NO_EXIT_TAU!r} = no exit), got {tau!r}"
        )
    if payload["mode"] not in MODES:
        raise CalibrationFileError(f"{where}: mode must be one of {MODES}, got {payload['mode']!r}")
    for key in ("fit", "select"):
        if not isinstance(payload[key], dict):
            raise CalibrationFileError(f"{where}: {key!r} must be an object")
    if not isinstance(payload["sources"], list):
        raise CalibrationFileError(f"{where}: 'sources' must be a list of paths")
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
