"""Compute per sample (calibrate/compute.py) and the accuracy-compute frontier over tau (calibrate/frontier.py)."""

import csv
import json

import numpy as np
import pytest
from cader.calibrate.compute import (
    call_flops,
    calls_of_record,
    record_flops,
    sample_flops,
    text_shape_from_config,
)
from cader.calibrate.frontier import frontier_curve, frontier_markdown, main, operating_point
from cader.calibrate.options import OutputOptions, Rule
from cader.calibrate.pipeline import calibrate_predictions
from cader.contracts.calibration import NO_EXIT_TAU
from cader.dev.calibration_rows import synthetic_prediction_rows
from cader.vlm.flops import TextShape

# hidden 4, MLP 8, one layer, 2 query heads and 1 KV head of dim 2, vocab 10: q_dim 4, kv_dim 2,
# projections 4 * (4 + 4) + 4 * 4 = 48, MLP 3 * 4 * 8 = 96, per token 2 * (48 + 96) + 2 * 4 * 10 = 368,
# causal attention 2 * 2 * 4 * L^2 / 2 = 8 L^2
TINY = TextShape(hidden=4, intermediate=8, layers=1, heads=2, kv_heads=1, head_dim=2, vocab=10)
VERIFIER = TextShape(hidden=4, intermediate=4, layers=1, heads=2, kv_heads=1, head_dim=2, vocab=10)  # per token 272


def test_a_call_is_one_causal_forward_over_prompt_and_generated_tokens():
    assert call_flops(TINY, 3, 2) == 368 * 5 + 8 * 25 == 2040
    assert call_flops(TINY, 0, 0) == 0.0
    with pytest.raises(ValueError):
        call_flops(TINY, -1)


def test_main_model_and_verifier_are_counted_apart_at_their_own_sizes():
    flops = sample_flops([("stage1", 3, 0), ("main", 3, 2), ("verifier", 1, 0)], TINY, VERIFIER)
    stage1 = 368 * 3 + 8 * 9  # 1176
    # verifier: projections 48, MLP 3 * 4 * 4 = 48, per token 2 * 96 + 80 = 272, attention 8 * 1
    assert flops == {"stage1": stage1, "main": stage1 + 2040, "verifier": 272 + 8, "total": stage1 + 2040 + 280}
    with pytest.raises(ValueError, match="role"):
        sample_flops([("judge", 1, 1)], TINY)


def test_the_shape_comes_from_a_qwen3_vl_config():
    config = {"text_config": {"hidden_size": 4, "intermediate_size": 8, "num_hidden_layers": 1,
                              "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 2, "vocab_size": 10}}
    assert text_shape_from_config(config) == TINY


def test_a_record_without_a_flops_block_spreads_its_tokens_over_its_calls():
    record = {"cost": {"prompt_tokens": 12, "completion_tokens": 4},
              "stage2": {"steps": [{"phase": "propose"}, {"phase": "verify", "p_yes": 0.9},
                                   {"phase": "verify", "p_yes": None}, {"phase": "answer"}]}}
    # Stage 1 + 2 generations + 1 scored verification = 4 calls of 3 prompt tokens; 2 generated tokens each
    assert calls_of_record(record) == [("stage1", 3, 0), ("main", 3, 2), ("main", 3, 2), ("verifier", 3, 0)]
    flops, estimated = record_flops(record, TINY)
    assert estimated and flops["stage1"] == 1176 and flops["verifier"] == 1176
    given = {"stage1": 1.0, "main": 2.0, "verifier": 3.0, "total": 5.0}
    assert record_flops({"cost": {"flops": given}}, TINY) == (given, False)


def test_operating_points_by_hand():
    margin = [0.9, 0.5, 0.2, 0.95]
    s1, s2 = [True, False, False, True], [True, True, False, False]
    f1, full = [1e12, 1e12, 1e12, 1e12], [5e12, 3e12, 3e12, 5e12]
    # tau 0.5: samples 0, 1, 3 exit (Stage 1 right, wrong, right), sample 2 takes Stage 2 (wrong)
    assert operating_point(margin, s1, s2, f1, full, 0.5) == {"tau": 0.5, "exit_rate": 0.75, "final_accuracy": 0.5,
                                                             "mean_tflops": 1.5}
    always = operating_point(margin, s1, s2, f1, full, NO_EXIT_TAU)
    assert (always["exit_rate"], always["final_accuracy"], always["mean_tflops"]) == (0.0, 0.5, 4.0)
    curve = frontier_curve(margin, s1, s2, f1, full)
    assert len(curve) == 5 and curve[0]["mean_tflops"] == 1.0 and curve[-1]["tau"] == NO_EXIT_TAU
    assert [r["mean_tflops"] for r in curve] == sorted(r["mean_tflops"] for r in curve)
    table = frontier_markdown({"always_stage2": {**always, "temperature": None}}, 4, 0)
    assert "| always_stage2 | – | no exit | 0.000 | 0.5000 | 4 |" in table


def test_frontier_from_a_uniform_stage2_run(tmp_path, capsys):
    rows = synthetic_prediction_rows("synthetic", 300, 4, 1.5, seed=0, stage2_accuracy=0.8)
    for i, row in enumerate(rows):
        row["cost"].update(prompt_tokens=3000 + i, completion_tokens=200)
        row["stage2"]["steps"] = [{"phase": "propose"}, {"phase": "verify", "p_yes": 0.8}, {"phase": "answer"}]
    rows[0]["error"] = "video_unreadable: x"  # counted, not used
    rows[1]["stage1"]["margin"] = float("nan")  # breaks the contract: counted and named, not used
    path = tmp_path / "u.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    calibrate_predictions([str(path)], str(tmp_path / "cal"), rule=Rule(alpha=0.15, min_exits=10),
                          output=OutputOptions(figures=False))
    capsys.readouterr()
    assert main(["--predictions", str(path), "--calibration", str(tmp_path / "cal" / "calibration.json"),
                 "--out", str(tmp_path / "f")]) == 0
    printed = capsys.readouterr()
    assert "left out: {'failed': 1, 'non_finite': 1}" in printed.out
    assert printed.err.startswith(f"{path}:2: left out (stage1.margin: ")
    assert (tmp_path / "f" / "figures" / "frontier.png").read_bytes()[:4] == b"\x89PNG"
    table = list(csv.DictReader((tmp_path / "f" / "figures" / "frontier.csv").open()))
    points = {r["point"]: r for r in table if r["point"] != "curve"}
    assert set(points) == {"certified", "paper", "always_stage2", "stage1_only"}
    assert float(points["always_stage2"]["exit_rate"]) == 0.0 and float(points["stage1_only"]["exit_rate"]) == 1.0
    assert float(points["stage1_only"]["mean_tflops"]) < float(points["certified"]["mean_tflops"]) < float(
        points["always_stage2"]["mean_tflops"])
    md = (tmp_path / "f" / "frontier.md").read_text()
    assert "| certified |" in md and "298 samples" in md and "298 rows estimated" in md
    assert main(["--predictions", str(tmp_path / "none.jsonl"), "--calibration",
                 str(tmp_path / "cal" / "calibration.json"), "--out", str(tmp_path / "g")]) == 2
    np.testing.assert_allclose(float(points["always_stage2"]["final_accuracy"]),
                               np.mean([r["correct"] for r in rows[2:]]))


def test_a_row_with_a_non_finite_margin_or_logit_is_left_out_and_named():
    from cader.calibrate.frontier import frontier_from_rows

    rows = synthetic_prediction_rows("synthetic", 20, 4, 1.5, seed=2, stage2_accuracy=0.9)
    rows[3]["stage1"]["margin"] = float("nan")
    rows[5]["stage1"]["logits"][2] = float("-inf")
    result = frontier_from_rows(rows, temperature=1.5, tau=0.9, main=TINY)
    assert result["n"] == 18 and result["skipped"] == {"non_finite": 2}
    assert [(i, m.split(":")[0]) for i, m in result["problems"]] == [(3, "stage1.margin"), (5, "stage1.logits")]


def test_the_report_reads_the_same_numbers_from_the_run_records():
    from cader.calibrate.frontier import frontier_from_rows

    rows = synthetic_prediction_rows("synthetic", 40, 4, 1.5, seed=2, stage2_accuracy=0.9)
    for row in rows:
        row["cost"]["flops"] = {"stage1": 1e12, "main": 4e12, "verifier": 1e12, "total": 5e12}
    result = frontier_from_rows(rows, temperature=1.5, tau=NO_EXIT_TAU, main=TINY)
    assert result["n"] == 40 and result["estimated_rows"] == 0 and result["skipped"] == {}
    certified, always = result["points"]["certified"], result["points"]["always_stage2"]
    assert certified["mean_tflops"] == always["mean_tflops"] == 5.0  # nothing exits at tau above 1
    assert result["points"]["stage1_only"]["mean_tflops"] == 1.0
    assert frontier_from_rows([{"error": "x"}], 1.5, 0.5)["n"] == 0
