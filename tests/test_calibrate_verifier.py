"""The verifier threshold with a guarantee (calibrate/verifier.py): what missing the evidence means, which verify
steps count (the first per sample), rows left out by reason, and `calibrate/fit.py --verifier_alpha` end to end;
the guarantee itself by simulation."""

import json
import math

import numpy as np
import pytest
from cader.calibrate.ltt import select_verifier_threshold
from cader.calibrate.options import FitOptions, OutputOptions
from cader.calibrate.pipeline import calibrate_predictions
from cader.calibrate.verifier import misses_evidence, verify_observations
from cader.calibrate.videos import video_key
from cader.dev.calibration_rows import synthetic_prediction_rows


def test_missing_the_evidence_by_hand():
    assert not misses_evidence([10, 30], [12, 15]) and misses_evidence([10, 30], [28, 33])
    assert not misses_evidence([10, 30], [28, 33], "overlaps") and misses_evidence([10, 30], [30, 33], "overlaps")
    assert not misses_evidence([10, 30], [10, 30])  # the evidence exactly filling the crop is held
    with pytest.raises(ValueError, match="evidence rule"):
        misses_evidence([0, 1], [0, 1], "near")


def _verify(iteration, crop, p_yes):
    return {"phase": "verify", "iteration": iteration, "window": crop, "crop": crop, "r2": 1.0, "n_frames": 8,
            "p_yes": p_yes, "accepted": p_yes is not None and p_yes >= 0.6}


def _rows(n, seed=0, miss_given_p=lambda p: 0.6 * (1 - p)):
    """Rows of a uniform_stage2 run whose first crop holds the evidence more often the higher its P_yes."""
    rng = np.random.default_rng(seed)
    rows = synthetic_prediction_rows("synthetic", n, 4, 1.5, seed=seed, stage2_accuracy=0.7)
    for row in rows:
        p = float(rng.uniform())
        miss = rng.uniform() < miss_given_p(p)
        row["meta"] = {"evidence_window": [100.0, 104.0]}
        first = [95.0, 110.0] if not miss else [300.0, 320.0]
        # a second step after a rejection: never counted (its existence depends on the run's threshold)
        row["stage2"]["steps"] = [_verify(0, first, p), _verify(1, [500.0, 520.0], 0.99)]
    return rows


def test_first_verify_step_per_sample_and_rows_left_out_by_reason(tmp_path):
    rows = _rows(6)
    rows[1]["meta"] = {}
    rows[2]["stage2"]["steps"] = []
    rows[3]["stage2"]["steps"][0]["p_yes"] = None  # the no_verifier variant
    rows[4]["error"] = "video_unreadable: x"
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + json.dumps(rows[0]) + "\n[1]\n")
    p_yes, miss, videos, left_out = verify_observations([path])
    assert videos == [video_key(rows[i]["benchmark"], rows[i]["sample_id"], rows[i]["video"]) for i in (0, 5)]
    assert p_yes.tolist() == [rows[0]["stage2"]["steps"][0]["p_yes"], rows[5]["stage2"]["steps"][0]["p_yes"]]
    assert miss.tolist() == [rows[i]["stage2"]["steps"][0]["crop"][0] == 300.0 for i in (0, 5)]
    assert dict(left_out) == {"no_evidence_window": 1, "no_verify_step": 1, "unverified_or_malformed_step": 1,
                              "row_error": 1, "duplicate": 1, "malformed_row": 1}


def test_fit_verifier_alpha_end_to_end(tmp_path, capsys):
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _rows(1500)))
    payload = calibrate_predictions([str(path)], str(tmp_path / "cal"), fit=FitOptions(verifier_alpha=0.1),
                                    output=OutputOptions(figures=False))
    v = payload["verifier"]
    assert v["n"] == 1500 and v["threshold"] is not None and v["upper_bound_miss"] <= 0.1
    # miss probability 0.6 (1 - p): the accepted crops' true miss rate at threshold t is 0.3 (1 - t)
    assert 0.3 * (1 - v["threshold"]) <= 0.1 + 0.03
    assert v["paper_threshold"] == 0.6 and v["paper_n_accepted"] == pytest.approx(600, abs=80)
    hopeless = tmp_path / "h.jsonl"
    hopeless.write_text("".join(json.dumps(r) + "\n" for r in _rows(200, miss_given_p=lambda p: 0.5)))
    capsys.readouterr()
    payload = calibrate_predictions([str(hopeless)], str(tmp_path / "h"),
                                    fit=FitOptions(verifier_alpha=0.05), output=OutputOptions(figures=False))
    assert payload["verifier"]["threshold"] is None
    assert "no verifier threshold certified" in capsys.readouterr().err


def test_verifier_guarantee_by_simulation():
    """Accepted first crops miss the evidence with rate > alpha_v in at most about delta of the draws."""
    alpha_v, delta, n_draws = 0.1, 0.1, 200
    rng = np.random.default_rng(4)
    violations = found = 0
    for _ in range(n_draws):
        p = rng.uniform(0, 1, 500)
        miss = rng.uniform(0, 1, 500) < 0.5 * (1 - p) ** 2
        t = select_verifier_threshold(p, miss, alpha_v, delta)["threshold"]
        if t is not None:
            found += 1
            violations += (1 - t) ** 2 / 6 > alpha_v  # exact miss rate among P_yes >= t (P_yes uniform)
    assert found >= 0.9 * n_draws
    assert violations / n_draws <= delta + 3 * math.sqrt(delta * (1 - delta) / n_draws), violations
