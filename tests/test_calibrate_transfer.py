"""The transfer test (calibrate/transfer.py): the margin summary calibration.json keeps, the two-sample test on it,
check_transfer's warning, and the command line."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from cader.calibrate.margin import margins
from cader.calibrate.options import OutputOptions
from cader.calibrate.pipeline import calibrate_predictions
from cader.calibrate.transfer import check_transfer, exchangeability_test, main, margin_summary
from cader.dev.calibration_rows import synthetic_prediction_rows
from scipy.stats import ks_2samp

REPO = Path(__file__).resolve().parents[1]


def test_summary_keeps_every_margin_or_evenly_spaced_quantiles():
    m = np.array([0.3, 0.1, 0.9])
    assert margin_summary(m, 2.0) == {"n": 3, "temperature": 2.0, "exact": True, "sorted": [0.1, 0.3, 0.9]}
    big = np.arange(4000) / 4000
    s = margin_summary(big, 1.0, max_points=100)
    assert s["n"] == 4000 and not s["exact"] and len(s["sorted"]) == 100
    assert s["sorted"][0] == pytest.approx(0.005, abs=1e-3) and np.all(np.diff(s["sorted"]) > 0)


def test_the_test_sees_a_shift_and_not_a_resample():
    rng = np.random.default_rng(0)
    ref = rng.beta(2, 2, 800)
    resample = rng.beta(2, 2, 500)
    same = exchangeability_test(ref, resample)
    moved = exchangeability_test(ref, rng.beta(2, 2, 500) * 0.8)
    assert same["p_value"] > 0.05 > moved["p_value"]
    assert same["p_value"] == pytest.approx(ks_2samp(ref, resample).pvalue)  # every margin kept: scipy's own
    # quantiles standing for many samples give nearly the statistic and the p-value of the full sample
    full = rng.beta(2, 2, 20_000)
    target = rng.beta(2.3, 2, 400)
    exact = exchangeability_test(full, target)
    summary = margin_summary(full, 1.0, max_points=1000)
    approx = exchangeability_test(np.asarray(summary["sorted"]), target, n_reference=summary["n"])
    assert approx["statistic"] == pytest.approx(exact["statistic"], abs=0.01)
    assert approx["p_value"] == pytest.approx(exact["p_value"], rel=0.5, abs=0.01)
    assert approx["n_calibration"] == 20_000


@pytest.mark.slow
def test_check_transfer_warns_on_a_different_model_and_passes_the_same_one(tmp_path):
    rows = synthetic_prediction_rows("a", 800, 4, 1.5, seed=0)
    path = tmp_path / "a.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    payload = calibrate_predictions([str(path)], str(tmp_path / "cal"), output=OutputOptions(figures=False))
    assert payload["select_margins"]["n"] == payload["select"]["n"] == 400
    t = payload["temperature"]
    other = synthetic_prediction_rows("a", 600, 4, 1.5, seed=5)  # the same model on new samples
    z = np.array([r["stage1"]["logits"] for r in other])
    ok = check_transfer(tmp_path / "cal" / "calibration.json", margins(z, t))
    assert not ok.warn and ok.p_value > 0.05 and ok.n_calibration == 400 and ok.n_target == 600
    sharper = check_transfer(payload, margins(z * 3.0, t))  # an over-confident model: margins pile up near 1
    assert sharper.warn and sharper.p_value < 0.05 and "WARNING" in sharper.message
    old = {k: v for k, v in payload.items() if k != "select_margins"}
    none = check_transfer(old, margins(z, t))
    assert none.p_value is None and not none.warn and "no select_margins" in none.message


@pytest.mark.slow
def test_transfer_command_line(tmp_path, capsys):
    for name, seed, scale in (("held", 0, 1.0), ("target", 1, 4.0)):
        rows = synthetic_prediction_rows(name, 300, 4, 1.5, seed=seed)
        for r in rows:
            r["stage1"]["logits"] = [x * scale for x in r["stage1"]["logits"]]
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + "{torn\n")
    calibrate_predictions([str(tmp_path / "held.jsonl")], str(tmp_path / "cal"),
                          output=OutputOptions(figures=False))
    cmd = [sys.executable, str(REPO / "calibrate" / "transfer.py"), "--calibration", str(tmp_path / "cal" /
           "calibration.json")]
    assert main([*cmd[2:], "--predictions", str(tmp_path / "held.jsonl")]) == 0  # in-process: one start is enough
    out = capsys.readouterr().out
    assert "consistent" in out and "malformed" in out
    assert main([*cmd[2:], "--predictions", str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl" in capsys.readouterr().err
    moved = subprocess.run([*cmd, "--predictions", str(tmp_path / "target.jsonl")], capture_output=True, text=True,
                           timeout=120, check=False)
    assert moved.returncode == 1 and "WARNING" in moved.stderr
