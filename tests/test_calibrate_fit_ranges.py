"""calibrate/fit.py arguments out of range are one-line errors naming the flag (exit 2), not tracebacks."""

import json

import pytest
from cader.calibrate.fit import main
from cader.dev.calibration_rows import synthetic_prediction_rows


@pytest.fixture(scope="module")
def predictions(tmp_path_factory):
    path = tmp_path_factory.mktemp("p") / "p.jsonl"
    rows = synthetic_prediction_rows("synthetic", 80, 4, 1.5, seed=0)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(("flag", "value", "bounds"), [
    ("alpha", "0", "(0, 1)"), ("alpha", "1", "(0, 1)"), ("alpha", "1.5", "(0, 1)"), ("delta", "0", "(0, 1)"),
    ("temperature", "0", "(0, inf)"), ("temperature", "-2", "(0, inf)"), ("fit_fraction", "1", "(0, 1)"),
    ("fit_fraction", "0", "(0, 1)"), ("epsilon", "0", "(0, 1)"), ("budget", "1.5", "[0, 1]"),
    ("min_exits", "0", "[1, inf)"),
])
def test_out_of_range_is_one_line_naming_the_flag(predictions, tmp_path, capsys, flag, value, bounds):
    assert main(["--predictions", predictions, "--out", str(tmp_path / "c"), f"--{flag}", value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"calibrate/fit.py: error: --{flag} must be in {bounds}, got {float(value)!r}"
                   if flag != "min_exits" else f"calibrate/fit.py: error: --{flag} must be in {bounds}, got 0"]
    assert not (tmp_path / "c" / "calibration.json").exists()


def test_values_inside_the_ranges_run(predictions, tmp_path):
    assert main(["--predictions", predictions, "--out", str(tmp_path / "c"), "--mode", "budget", "--budget", "1",
                 "--fit_fraction", "0.3", "--figures", "false"]) == 0
