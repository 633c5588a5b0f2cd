"""SUMMARY.md says, in the summary itself, when a quickstart run proves nothing."""

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
summary = importlib.import_module("cader.scripts.quickstart_summary")

LETTERS = list("ABCDEF")


def _write(path: Path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _stage1(i, right, margin):
    answer = LETTERS[i % 6]
    pred = answer if right else LETTERS[(i + 1) % 6]
    return {"benchmark": "synthetic_heldout", "sample_id": str(i), "answer": answer, "letters": LETTERS,
            "stage1": {"pred": pred, "margin": margin, "logits": [0.0] * 6}, "pred": pred, "correct": right,
            "route": "exit", "stage2": None, "error": None, "duration": 128.0,
            "meta": {"evidence_window": [40.0, 42.0]}}


def _routed(i, s1_right, final_right, parsed=True, fallback=None):
    r = _stage1(i, s1_right, 0.01)
    answer = r["answer"]
    r["pred"] = answer if final_right else LETTERS[(i + 2) % 6]
    r["correct"] = final_right
    r["route"] = "stage2"
    steps = [{"phase": "propose", "window": [32.0, 48.0] if parsed else None}]
    if parsed:
        steps += [{"phase": "verify", "crop": [32.0, 48.0], "p_yes": 0.9},
                  {"phase": "verify", "crop": [80.0, 96.0], "p_yes": 0.1}]
    r["stage2"] = {"steps": steps, "accepted": [32.0, 48.0] if parsed and not fallback else None,
                   "fallback": fallback if fallback else (None if parsed else "unparseable_proposal")}
    return r


def _run(root: Path, variant: str, rows):
    folder = root / "eval" / variant / "synthetic"
    _write(folder / "predictions.jsonl", rows)
    (folder / "report.json").write_text(json.dumps({"cost": {"per_sample": {"forwards": 3.0, "frames_decoded": 40}},
                                                    "comparison": {"mcnemar": {"p_value": 0.03}}}))
    (folder / "report.md").write_text("report\n")


def _quickstart(root: Path, good: bool):
    (root / "sft" / "export").mkdir(parents=True)
    (root / "sft" / "export" / "config.json").write_text("{}")
    heldout = [_stage1(i, good and i % 3 != 0 or (not good and i % 6 == 0), 0.9 if i % 3 else 0.01) for i in range(48)]
    _write(root / "eval" / "heldout_stage1" / "predictions.jsonl", heldout)
    (root / "calibration").mkdir()
    (root / "calibration" / "calibration.json").write_text(json.dumps(
        {"temperature": 1.7 if good else 50.0, "tau": 0.3, "mode": "budget",
         "fit": {"at_bound": not good, "bounds": [0.05, 50.0]}, "select": {"n": 24, "exit_rate": 0.5,
                                                                           "exit_accuracy": 0.9}}))
    if good:
        full = [_routed(i, False, True) for i in range(12)] + [_stage1(i, True, 0.9) for i in range(12, 24)]
        _run(root, "full", full)
        _run(root, "no_stage2", [_stage1(i, i >= 12, 0.9) for i in range(24)])
    else:
        full = [_routed(i, False, False, parsed=False) for i in range(12)]
        _run(root, "full", full)
        _run(root, "no_stage2", [_stage1(i, False, 0.9) for i in range(12)])
    (root / "judge").mkdir()
    (root / "judge" / "judge_report.json").write_text(json.dumps(
        {"real_judge": False, "judge_model": "loopback-judge", "n": 4, "accuracy": 0.5, "traj": 0.5, "mc_rate": 0.5}))


def test_a_run_that_proves_nothing_is_flagged_in_the_summary(tmp_path):
    _quickstart(tmp_path, good=False)
    text, facts = summary.summarize(tmp_path)
    assert len(facts["red_flags"]) == 6
    flags = text.split("## Red flags")[1].split("\n## ")[0]
    assert "Stage-1 accuracy is within chance" in flags
    assert "does not rise with the margin" in flags     # its few right answers all have the smallest margins
    assert "search bound" in flags
    assert "proposals parse" in flags
    assert "every Stage-2 attempt fell back" in flags
    assert "every Table 2 row has the same accuracy" in flags
    assert "not a real judge" in text.split("## Caveat")[1].split("\n## ")[0]


def test_a_working_run_has_no_red_flag_and_labels_the_loopback_judge_as_a_caveat(tmp_path):
    _quickstart(tmp_path, good=True)
    text, facts = summary.summarize(tmp_path)
    assert facts["stage1_heldout"]["k"] == 32 and facts["table2"]["full"]["accuracy"]["k"] == 24
    assert "## Red flags" not in text and facts["red_flags"] == []
    caveats = [line for line in text.split("## Caveat")[1].split("\n## ")[0].splitlines() if line.startswith("- ")]
    assert len(caveats) == 1 and "not a real judge" in caveats[0] and facts["caveats"] == [caveats[0][4:-2]]
    assert "held-out Stage-1 accuracy 32/48" in text
    assert "first proposals parsed into a window: 12/12" in text
    assert "AUROC 1.0" in text
    assert "samples with an accepted crop: Stage 1 0/12 = 0.0 %" in text and "12 corrected" in text
    assert "| no_stage2 | 24 |" in text and "| uniform_stage2 | – | not run |" in text


def test_the_table2_section_reports_full_cost_against_uniform_stage2(tmp_path):
    def with_cost(record, forwards, frames):
        return {**record, "cost": {"forwards": forwards, "frames_decoded": frames}}

    # full: 8 exits at 1 forward / 32 frames, 4 routed at 5 / 96; uniform_stage2: all 12 routed at 5 / 96
    full = [with_cost(_stage1(i, True, 0.9), 1, 32) for i in range(8)]
    full += [with_cost(_routed(i, False, True), 5, 96) for i in range(8, 12)]
    _run(tmp_path, "full", full)
    _run(tmp_path, "uniform_stage2", [with_cost(_routed(i, False, True), 5, 96) for i in range(12)])
    text, facts = summary.summarize(tmp_path)
    cost = facts["cost_vs_uniform"]
    assert cost["ratio_full_over_uniform"]["forwards"] == pytest.approx((8 + 20) / 12 / 5)       # 0.467
    assert cost["ratio_full_over_uniform"]["frames_decoded"] == pytest.approx((256 + 384) / 12 / 96)  # 0.556
    assert "forwards 0.467, decoded frames 0.556 (goal ≤ 0.6)" in text


def test_safeguard_rows_that_match_full_are_explained_by_the_runs_own_proposals(tmp_path):
    _quickstart(tmp_path, good=True)
    for variant in ("no_verifier", "no_reflection"):   # same records as full: same accuracy
        _run(tmp_path, variant, [_routed(i, False, True) for i in range(12)] +
             [_stage1(i, True, 0.9) for i in range(12, 24)])  # fmt: skip
    _run(tmp_path, "no_rgr", [_routed(i, False, i % 2 == 0) for i in range(12)] +
         [_stage1(i, True, 0.9) for i in range(12, 24)])  # fmt: skip
    text, _ = summary.summarize(tmp_path)
    line = next(line for line in text.splitlines() if "match `full`'s accuracy" in line)
    # the evidence window [40, 42] lies in every first proposal [32, 48]; no_rgr differs, so it is not named
    assert "`no_verifier`, `no_reflection` match" in line and "no_rgr" not in line and "12/12 routed" in line


def test_no_safeguard_reading_without_routed_proposals_or_when_rows_differ():
    assert summary.safeguard_reading({"full": 0.7, "no_verifier": 0.6}, {"stage2": {"proposals": {
        "contains_evidence": {"k": 5, "n": 5}}}}) == []
    assert summary.safeguard_reading({"full": 0.7, "no_verifier": 0.7}, {"stage2": {"proposals": {
        "contains_evidence": {"k": 0, "n": 0}}}}) == []


def test_the_summary_links_the_viewer_page_when_the_run_has_one(tmp_path):
    _quickstart(tmp_path, good=True)
    assert "view.html" not in summary.summarize(tmp_path)[0]
    (tmp_path / "view.html").write_text("<html></html>")
    assert "[view.html](view.html)" in summary.summarize(tmp_path)[0]


def test_margin_trend_is_the_one_sided_mann_whitney_test_with_its_auroc():
    # right margins 0.9, 0.8, 0.3; wrong 0.5, 0.1: 5 of the 6 (right, wrong) pairs are ordered, AUROC 5/6;
    # exact one-sided p: of the C(5,2) = 10 ways to pick the two wrong ranks, U >= 5 for (1,2) and (1,3): 0.2
    trend = summary.margin_trend([0.9, 0.8, 0.3, 0.5, 0.1], [True, True, True, False, False])
    assert trend["auroc"] == pytest.approx(5 / 6) and trend["p_value"] == pytest.approx(0.2)
    assert summary.margin_trend([0.9, 0.8], [True, True])["p_value"] is None


def test_a_run_whose_ablations_all_match_full_within_noise_is_flagged(tmp_path):
    _quickstart(tmp_path, good=True)
    _run(tmp_path, "no_verifier", [_stage1(i, i >= 12, 0.9) for i in range(24)])
    for variant in ("no_stage2", "no_verifier"):   # both gaps within noise
        (tmp_path / "eval" / variant / "synthetic" / "report.json").write_text(json.dumps(
            {"cost": {"per_sample": {}}, "comparison": {"mcnemar": {"p_value": 0.25}}}))
    _text, facts = summary.summarize(tmp_path)
    assert any("no Table 2 row differs significantly" in f and "p = 0.25" in f for f in facts["red_flags"])
    _run(tmp_path, "no_rgr", [_stage1(i, i >= 12, 0.9) for i in range(24)])   # p = 0.03 in _run: one gap holds
    assert not any("differs significantly" in f for f in summary.summarize(tmp_path)[1]["red_flags"])
