"""A calibration bound to its settings: calibration.json records what produced the margins (calibrate/settings.py)
and a run's settings are compared with them field by field (cader.evaluate.calibration_binding)."""

import json

import pytest
from cader.calibrate.calibration_file import read_calibration
from cader.calibrate.options import OutputOptions, Rule
from cader.calibrate.pipeline import calibrate_predictions
from cader.calibrate.settings import collect_settings
from cader.dev.calibration_rows import synthetic_prediction_rows
from cader.evaluate.calibration_binding import (
    NOT_RECORDED,
    FieldMismatch,
    binding_mismatches,
    check_binding,
    run_settings,
)

FRAMES_768 = {"r1": 1.0, "max_frames": 768, "max_pixels": 65536}


def _fingerprint(frames=FRAMES_768, model="abc123"):
    return {"model": model, "frames": dict(frames), "sample": "s"}


def _run(**changes):
    values = {"model": "runs/sft/export", "model_fingerprint": "abc123", "r1": 1.0, "max_frames": 768,
              "max_pixels": 65536, "benchmark": "videomme_long"}
    return run_settings(**{**values, **changes})


def _calibrated(frames=FRAMES_768, benchmarks=("videomme_long",)):
    return collect_settings([_fingerprint(frames)] * 3, list(benchmarks) * 3, [256, 299, 768],
                            [{"model": "runs/sft/export", **frames}])


def test_settings_come_from_the_rows_fingerprints_and_the_report():
    s = _calibrated()
    assert s["backbone"] == {"name": "runs/sft/export", "fingerprint": "abc123"}
    assert s["stage1"] == {**FRAMES_768, "enable_thinking": False}
    assert s["benchmarks"] == ["videomme_long"] and s["frames_shown"] == {"min": 256, "max": 768, "mean": 441.0}
    assert s["mixed"] == {} and s["unknown"] == []


def test_rows_pooled_over_two_frame_budgets_record_no_single_budget():
    s = collect_settings([_fingerprint(), _fingerprint({**FRAMES_768, "max_frames": 256})], ["b", "b"], [1, 1])
    assert s["stage1"]["max_frames"] is None and s["mixed"] == {"max_frames": [256, 768]}
    assert "backbone.name" in s["unknown"]  # no report beside the predictions
    mismatch = {m.field: m for m in binding_mismatches(s, _run(benchmark="b"))}
    assert mismatch["stage1.max_frames"].calibrated == "mixed [256, 768]"


def test_a_calibration_from_one_frame_budget_is_refused_at_another():
    verdict = check_binding({"settings": _calibrated()}, _run(max_frames=256))
    assert verdict.refused and verdict.mismatches == [FieldMismatch("stage1.max_frames", 768, 256)]
    line = verdict.message("c.json")
    assert "stage1.max_frames: calibrated 768, run 256" in line and "--accept_calibration_mismatch" in line
    accepted = check_binding({"settings": _calibrated()}, _run(max_frames=256), accept_mismatch=True)
    assert not accepted.refused and "guarantee does not transfer" in accepted.message("c.json")
    assert accepted.report_block()["guarantee_transfers"] is False
    assert accepted.report_block()["mismatches"] == [{"field": "stage1.max_frames", "calibrated": 768, "run": 256}]


def test_every_mismatching_field_is_named_with_both_values():
    got = binding_mismatches(_calibrated(), _run(model_fingerprint="zzz", r1=0.5, max_pixels=4096, benchmark="lvbench"))
    assert [str(m) for m in got] == [
        "backbone.fingerprint: calibrated 'abc123', run 'zzz'",
        "stage1.r1: calibrated 1.0, run 0.5",
        "stage1.max_pixels: calibrated 65536, run 4096",
        "benchmark: calibrated ['videomme_long'], run 'lvbench'",
    ]


def test_the_same_settings_hold_and_a_heldout_split_stands_for_its_benchmark():
    assert binding_mismatches(_calibrated(), _run()) == []
    assert binding_mismatches(_calibrated(), _run(max_frames=768.0)) == []  # numbers compared as numbers
    heldout = _calibrated(benchmarks=("synthetic_heldout",))
    assert binding_mismatches(heldout, _run(benchmark="synthetic")) == []
    assert check_binding({"settings": heldout}, _run(benchmark="synthetic")).message("c.json") == ""


def test_the_backbone_matches_by_name_only_without_a_fingerprint():
    no_fingerprint = collect_settings([None], ["videomme_long"], [None], [{"model": "runs/sft/export", **FRAMES_768}])
    assert no_fingerprint["stage1"]["max_frames"] == 768  # from the report when the rows carry no fingerprint
    assert binding_mismatches(no_fingerprint, _run()) == []
    assert [m.field for m in binding_mismatches(no_fingerprint, _run(model="other"))] == ["backbone.name"]


def test_unknown_settings_and_old_files_match_nothing():
    unknown = collect_settings([None], ["videomme_long"], [None])
    fields = {m.field: m.calibrated for m in binding_mismatches(unknown, _run())}
    assert fields == {"backbone.fingerprint": NOT_RECORDED, "stage1.r1": NOT_RECORDED,
                      "stage1.max_frames": NOT_RECORDED, "stage1.max_pixels": NOT_RECORDED}
    old = check_binding({"temperature": 2.0, "tau": 0.97}, _run())
    assert old.refused and [m.field for m in old.mismatches] == ["settings"]


def test_calibrate_records_the_settings_of_real_rows_and_the_report(tmp_path):
    run = tmp_path / "heldout"
    run.mkdir()
    rows = synthetic_prediction_rows("synthetic_heldout", 200, 4, 1.5, seed=0)
    for row in rows:
        row["stage1"]["fingerprint"] = _fingerprint({"r1": 1.0, "max_frames": 32, "max_pixels": 4096})
    (run / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    (run / "report.json").write_text(json.dumps({"config": {"model": "runs/sft/export", "max_frames": 32}}))
    calibrate_predictions([str(run / "predictions.jsonl")], str(tmp_path / "c"), rule=Rule(alpha=0.2, min_exits=5),
                          output=OutputOptions(figures=False))
    settings = read_calibration(tmp_path / "c" / "calibration.json")["settings"]
    assert settings["stage1"] == {"r1": 1.0, "max_frames": 32, "max_pixels": 4096, "enable_thinking": False}
    assert settings["backbone"] == {"name": "runs/sft/export", "fingerprint": "abc123"}
    assert settings["frames_shown"]["max"] == 64 and settings["benchmarks"] == ["synthetic_heldout"]
    refused = check_binding({"settings": settings}, _run(max_frames=16, max_pixels=4096, benchmark="synthetic"))
    assert [str(m) for m in refused.mismatches] == ["stage1.max_frames: calibrated 32, run 16"]


@pytest.mark.parametrize("field", ["r1", "max_frames", "max_pixels"])
def test_each_stage1_field_is_checked(field):
    changed = {"r1": 2.0, "max_frames": 1, "max_pixels": 1}[field]
    assert [m.field for m in binding_mismatches(_calibrated(), _run(**{field: changed}))] == [f"stage1.{field}"]


def test_the_report_line_of_an_accepted_mismatch():
    from cader.evaluate.calibration_binding import report_line

    block = check_binding({"settings": _calibrated()}, _run(max_frames=256), accept_mismatch=True).report_block()
    assert report_line(block) == ("**Calibration: guarantee does not transfer** (mismatch accepted: "
                                  "stage1.max_frames: calibrated 768, run 256).")
    assert report_line(check_binding({"settings": _calibrated()}, _run()).report_block()) == ""
    assert report_line(None) == ""
