"""The files a pipeline run writes stay the same, field by field, across refactors.

`test_contracts.run_pipeline` drives every stage with the scripted backend and the loopback judge (every route,
fallback, failure, Stage-1 reuse, shards and merge, calibration fitted and fixed, judge retries), so its outputs are
deterministic up to timings and the temporary folder. They are compared with `tests/fixtures/golden/pipeline.json`;
after a change that is meant to alter the outputs, regenerate it with

    CADER_UPDATE_GOLDEN=1 python -m pytest -q tests/test_golden_outputs.py

and review the diff of the fixture like any other change.
"""

import json
import os
import re
from pathlib import Path

import pytest
from test_contracts import run_pipeline

GOLDEN = Path(__file__).parent / "fixtures" / "golden" / "pipeline.json"
TIMING_KEYS = {"seconds", "waited_s"}   # wall-clock measurements, different on every run
# The provenance block names the commit, date, versions and command line of each run: different by design. Its
# presence is kept, its values are not compared (tests/test_provenance.py checks them).
PROVENANCE_LINE = re.compile(r"^(Code `|Command: `|- provenance: ).*$\n?", re.MULTILINE)
# report.md's wall-clock line: its numbers are timings too (its presence is kept)
TIMING_LINE = re.compile(r"^(- wall-clock time).*$", re.MULTILINE)


def normalised(value, root: str):
    """`value` without timing fields or provenance values, with the test's folder written as <root>."""
    if isinstance(value, dict):
        return {k: "<provenance>" if k == "provenance" else normalised(v, root)
                for k, v in value.items() if k not in TIMING_KEYS}
    if isinstance(value, list):
        return [normalised(v, root) for v in value]
    if isinstance(value, str):
        return TIMING_LINE.sub(r"\1 <timing>", PROVENANCE_LINE.sub("", value.replace(root, "<root>")))
    return value


def record_key(record: dict) -> str:
    # the judge runs with concurrency 2, so judgments land in any order
    return json.dumps([record.get("benchmark"), record.get("sample_id"), record.get("question_id")], default=str)


def written_files(runs: Path, root: Path) -> dict:
    """Every file under `runs`, parsed and normalised, by its path relative to `runs`."""
    root, out = str(root), {}
    # a *.lock file is the one-writer lock of a predictions file: it holds the writer's pid
    for path in sorted(p for p in runs.rglob("*") if p.is_file() and p.suffix != ".lock"):
        name = str(path.relative_to(runs))
        if path.suffix == ".jsonl":
            rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            out[name] = sorted((normalised(r, root) for r in rows), key=record_key)
        elif path.suffix == ".json":
            out[name] = normalised(json.loads(path.read_text()), root)
        else:
            out[name] = normalised(path.read_text(), root)
    return out


def differences(expected, actual, where: str = "") -> list[str]:
    """Every field that differs, by its path (floats to 1e-9 relative)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = [f"{where}/{k}: missing" for k in expected.keys() - actual.keys()]
        out += [f"{where}/{k}: unexpected" for k in actual.keys() - expected.keys()]
        for k in expected.keys() & actual.keys():
            out += differences(expected[k], actual[k], f"{where}/{k}")
        return out
    if isinstance(expected, list) and isinstance(actual, list):
        if len(expected) != len(actual):
            return [f"{where}: {len(expected)} items, now {len(actual)}"]
        return [d for i, (e, a) in enumerate(zip(expected, actual)) for d in differences(e, a, f"{where}[{i}]")]
    if isinstance(expected, float) and isinstance(actual, float):
        return [] if actual == pytest.approx(expected, rel=1e-9, abs=1e-12) else [f"{where}: {expected} -> {actual}"]
    return [] if expected == actual else [f"{where}: {expected!r} -> {actual!r}"]


def test_pipeline_outputs_equal_the_golden_files(tmp_path, barcode_video, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "loopback-dummy")
    (tmp_path / "videos").mkdir()
    video = tmp_path / "videos" / barcode_video.name
    video.symlink_to(barcode_video)
    run_pipeline(tmp_path / "runs", video)
    actual = written_files(tmp_path / "runs", tmp_path)
    if os.environ.get("CADER_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(actual, indent=1, sort_keys=True) + "\n")
    expected = json.loads(GOLDEN.read_text())
    assert set(actual) == set(expected), sorted(set(actual) ^ set(expected))
    problems = differences(expected, actual)
    assert not problems, "\n".join(problems[:40])


def test_the_comparison_names_the_field_that_changed():
    expected = {"a.jsonl": [{"stage1": {"margin": 0.5, "pred": "B"}}], "b.json": {"tau": 0.97}}
    actual = {"a.jsonl": [{"stage1": {"margin": 0.5000001, "pred": "C"}}], "b.json": {"tau": 0.97, "new": 1}}
    assert sorted(differences(expected, actual)) == [
        "/a.jsonl[0]/stage1/margin: 0.5 -> 0.5000001",
        "/a.jsonl[0]/stage1/pred: 'B' -> 'C'",
        "/b.json/new: unexpected",
    ]
    assert normalised({"cost": {"seconds": 1.2, "forwards": 3}, "p": "/tmp/x/runs/a"}, "/tmp/x/runs") == {
        "cost": {"forwards": 3}, "p": "<root>/a"}
    assert normalised("## Cost\n- wall-clock time (timings.jsonl): 1.5 s over 3 samples\n", "/r") == (
        "## Cost\n- wall-clock time <timing>\n")


def test_predictions_hold_no_wall_clock_time_and_timings_files_hold_only_it():
    """Two machines' predictions files compare equal byte for byte: the golden predictions carry no `seconds`, and
    each run's timings.jsonl (whose values the comparison leaves out) names only samples."""
    golden = json.loads(GOLDEN.read_text())
    predictions = [name for name in golden if name.rsplit("/", 1)[-1].startswith("predictions")]
    timings = [name for name in golden if name.rsplit("/", 1)[-1].startswith("timings")]
    # every file the runner wrote has its timings beside it (judge_input/ is the test's own)
    assert timings and {name.replace("timings", "predictions") for name in timings} == set(predictions) - {
        "judge_input/predictions.jsonl"}
    assert all("seconds" not in r.get("cost", {}) for name in predictions for r in golden[name])
    assert all(set(r) == {"benchmark", "sample_id"} for name in timings for r in golden[name])
