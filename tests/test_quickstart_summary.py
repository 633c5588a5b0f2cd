"""SUMMARY.md says, in the summary itself, when a quickstart run proves nothing."""

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
summary = importlib.import_module("cader.scripts.quickstart_summary")
quickstart_time = importlib.import_module("cader.scripts.quickstart_time")

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
             [_stage1(i, True, 0.9) for i in range(12, 24)])
    _run(tmp_path, "no_rgr", [_routed(i, False, i % 2 == 0) for i in range(12)] +
         [_stage1(i, True, 0.9) for i in range(12, 24)])
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


# ---- the other layouts, the temperature fit, the run's time --------------------------------------------------------

COLOURS = ["red", "green", "blue", "yellow", "cyan", "magenta"]   # devtools/synthetic/media.py's training order


def _layout_record(i: int, options: list[str], answer_colour: str, pred: str) -> dict:
    letters = list("ABCDEFGHIJKLMNOPQRSTUVWXYZ"[: len(options)])
    answer = letters[options.index(answer_colour)]
    return {"benchmark": "videomme_long", "sample_id": str(i), "options": options, "letters": letters,
            "answer": answer, "pred": pred, "correct": pred == answer, "error": None}


def test_the_other_layouts_are_explained_by_the_runs_own_answers(tmp_path):
    # four shuffled options; the model answers the letter the colour had in training (red A, green B, blue C, ...)
    rows = []
    for i in range(8):
        colour = COLOURS[i % 3]                      # red, green, blue: training letters A, B, C
        options = [c for c in COLOURS[:4] if c != colour][::-1] + [colour]   # the answer is always D
        rows.append(_layout_record(i, options, colour, "ABC"[i % 3]))
    folder = tmp_path / "eval" / "full" / "videomme_long"
    _write(folder / "predictions.jsonl", rows)
    (folder / "report.json").write_text(json.dumps({
        "config": {"calibration_binding": {"holds": False, "accepted_mismatch": True}},
        "calibration_transfer": {"warn": True, "p_value": 0.001}}))
    (tmp_path / "eval" / "full" / "synthetic").mkdir()   # the synthetic split is Table 2's, not a layout row
    flags, facts = [], {}
    text = "\n".join(summary.other_layouts_section(tmp_path, flags, facts))
    assert flags == [] and list(facts["other_layouts"]) == ["videomme_long"]
    row = facts["other_layouts"]["videomme_long"]
    assert row["accuracy"]["k"] == 0 and row["accuracy"]["chance"] == 0.25 and row["options"] == [4]
    assert (row["training_letter"]["k"], row["training_letter"]["n"]) == (8, 8)
    assert "| videomme_long | 8 | 4 | 0/8 = 0.0 %" in text
    assert "certified elsewhere (mismatch accepted); margins differ (KS p = 0.001)" in text
    assert "answers that letter in 8/8 = 100.0 % [63.1 %, 100.0 %] of the questions" in text
    assert "a letter drawn at random would be it in 25.0 % (one-sided binomial p = 1.5e-05)" in text
    assert "canonical_colour_options" in text
    assert "1 used the synthetic calibration outside the settings it was certified under" in text
    assert "and 1 have Stage-1 margins unlike the calibration's" in text


def test_a_training_letter_the_options_do_not_offer_is_not_counted():
    # magenta is F in training: a 4-option question cannot be answered with it; a time question has no colour
    rows = [_layout_record(0, ["red", "green", "blue", "magenta"], "magenta", "D"),
            _layout_record(1, ["00:10-00:14", "00:40-00:44", "01:00-01:04", "01:20-01:24"], "00:40-00:44", "B"),
            _layout_record(2, ["green", "red", "blue", "cyan"], "red", "A")]
    reading = summary.training_letter_reading(rows)
    assert (reading["k"], reading["n"]) == (1, 1)


def _logits(n: int, temperature: float, seed: int = 0):
    """Logits whose gold letter is drawn from softmax(z / temperature): calibrated at that temperature."""
    import numpy as np

    rng = np.random.default_rng(seed)
    z = rng.normal(0.0, 4.0, size=(n, 6))
    p = np.exp(z / temperature - (z / temperature).max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return z.tolist(), [int(rng.choice(6, p=row)) for row in p]


def test_the_ece_check_finds_the_nll_optimal_t_and_brackets_the_ece_change():
    logits, gold = _logits(2000, 2.0)
    check = summary.ece_check(logits, gold, 2.0, resamples=200)
    assert 1.7 < check["nll_best_t"] < 2.3 and check["nll_fitted"] < check["nll_raw"]
    lo, hi = check["ece_change_ci95"]
    assert lo <= check["ece_change"] <= hi and check["ece_fitted"] < check["ece_raw"]
    again = summary.ece_check(logits, gold, 2.0, resamples=200)
    assert again == check   # a fixed seed: the same numbers on every machine


def test_the_calibration_section_explains_the_ece_of_a_fit_and_flags_a_fit_that_raised_nll(tmp_path):
    logits, gold = _logits(240, 2.0)
    rows = [{"sample_id": str(i), "letters": LETTERS, "answer": LETTERS[g], "error": None,
             "stage1": {"logits": z, "pred": "A", "margin": 0.5}} for i, (z, g) in enumerate(zip(logits, gold))]
    _write(tmp_path / "eval" / "heldout_stage1" / "predictions.jsonl", rows)
    cal = {"temperature": 2.0, "fit": {"n": 120, "nll_before": 0.9, "nll_after": 0.7, "ece_before": 0.111,
                                       "ece_after": 0.160}}
    flags, facts = [], {}
    text = "\n".join(summary.temperature_lines(tmp_path, cal, flags, facts))
    assert flags == [] and "NLL 0.900 at T = 1 → 0.700 at T = 2, the criterion T minimises" in text
    assert "ECE 0.111 → 0.160 (15 equal-width bins of P_top1, a criterion the fit does not optimise)" in text
    assert "on all 240 held-out samples" in text and "bootstrap 95 % interval" in text
    assert facts["calibration"]["ece_check"]["n"] == 240
    cal["fit"]["nll_after"] = 1.2
    summary.temperature_lines(tmp_path, cal, flags, {})
    assert flags == ["the temperature fit raised the NLL it minimises (0.9 -> 1.2): the fit is broken"]


def test_run_time_keeps_the_steps_that_ran_and_the_machine_and_only_a_complete_run_is_a_reference(tmp_path):
    settings = "LIMIT=8 TABLE2_LIMIT=96 HELDOUT_LIMIT=240 BACKEND=hf"
    lines = [{"load_average": [3.5, 2.0, 1.0]}] + [{"key": k, "seconds": 10, "ran": True} for k in quickstart_time.STEP_NAMES]
    lines.append({"key": "full", "seconds": 5, "ran": True})   # a key of several commands adds up
    timed = quickstart_time.run_time_of(lines, settings, {"cores": 2})
    assert timed["complete"] and timed["steps"]["full"] == 15 and timed["main_job_seconds"] == 30
    assert timed["total_seconds"] == 105 and timed["machine"] == {"cores": 2, "load_average_at_start": [3.5, 2.0, 1.0]}
    (tmp_path / "run_time.json").write_text(json.dumps(timed))
    assert quickstart_time.reference_step_lines(tmp_path / "run_time.json", settings)[:2] == ["model 10", "data 10"]
    assert quickstart_time.reference_step_lines(tmp_path / "run_time.json", "LIMIT=2") == []   # other settings, other times
    resumed = quickstart_time.run_time_of([{"key": "model", "seconds": 0, "ran": False}, *lines[2:]], settings, {})
    assert not resumed["complete"] and resumed["skipped"] == ["model"] and resumed["main_job_seconds"] is None
    assert resumed["total_seconds"] is None


def test_summary_json_holds_no_wall_clock_time(tmp_path):
    _quickstart(tmp_path, good=True)
    for variant in ("full", "no_stage2"):   # a report written before timings.jsonl: seconds in its cost
        report = tmp_path / "eval" / variant / "synthetic" / "report.json"
        payload = json.loads(report.read_text())
        payload["cost"]["per_sample"]["seconds"] = 0.28
        report.write_text(json.dumps(payload))
    _, facts = summary.summarize(tmp_path)
    assert "seconds" not in json.dumps(facts)


def test_the_docs_render_the_measured_time_with_its_machine_and_refuse_an_incomplete_run():
    update_readme = importlib.import_module("cader.scripts.update_readme")
    timed = quickstart_time.run_time_of([{"load_average": [3.5, 2.0, 1.0]}]
                                + [{"key": k, "seconds": 120, "ran": True} for k in quickstart_time.STEP_NAMES],
                                "LIMIT=8", {"arch": "x86_64", "cpu": "Some CPU", "cores": 2, "memory_gib": 7.8,
                                            "load_average_at_end": [1.5, 1.0, 1.0]})
    table = update_readme.render_quickstart_time(timed)
    assert "| tiny SFT (train/sft.py) | 2.0 min |" in table
    assert "| **the main job** (the README's third line: model, data, sft) | **6.0 min** |" in table
    assert "| **the whole quickstart** | **20.0 min** |" in table
    line = update_readme.render_quickstart_time_summary(timed)
    assert "the main job took 6.0 min and the whole quickstart 20.0 min on x86_64, 2 cores (Some CPU)" in line
    assert "load average 3.5 at the start and 1.5 at the end (other jobs shared the cores)" in line
    incomplete = {**timed, "complete": False}
    assert "not measured from a complete run" in update_readme.render_quickstart_time(incomplete)


def test_a_rising_ece_is_read_from_the_runs_own_confidence_on_each_side_of_the_accuracy():
    check = {"accuracy": 0.779, "confidence_raw": 0.860, "confidence_fitted": 0.728, "confidence_wrong_raw": 0.512,
             "nll_best_t": 1.8, "ece_best_t": 1.0}
    line = summary.ece_reading(check, 1.98)
    assert "at T = 1 the model is over-confident (mean P_top1 0.860 against accuracy 0.779)" in line
    assert "at T = 1.98 under-confident (0.728)" in line and "(mean P_top1 0.512 at T = 1)" in line
    assert "different temperatures (T ≈ 1.8 and T ≈ 1)" in line


def test_the_docs_quickstart_block_explains_the_ece_and_the_other_layouts():
    update_readme = importlib.import_module("cader.scripts.update_readme")
    facts = {"calibration": {"temperature": 1.98, "tau": 0.15, "mode": "precision", "exit_rate": 0.79,
                             "exit_accuracy": 1.0,
                             "ece_check": {"n": 240, "nll_raw": 0.883, "nll_fitted": 0.725, "nll_best_t": 1.8,
                                           "ece_raw": 0.103, "ece_fitted": 0.166, "confidence_raw": 0.86,
                                           "confidence_fitted": 0.728, "accuracy": 0.779}},
             "other_layouts": {"mlvu_dev": {"accuracy": {"n": 8, "rate": 0.125, "chance": 0.25},
                                            "training_letter": {"k": 2, "n": 3}},
                               "agentvidbench": {"accuracy": {"n": 8, "rate": 0.0, "chance": 1 / 26},
                                                 "training_letter": {"k": 1, "n": 8}}}}
    text = update_readme.render_quickstart(facts)
    assert "NLL 0.883 → 0.725 (T is fitted by NLL, lowest near T = 1.8); ECE 0.103 → 0.166" in text
    assert "the NLL-optimal T leaves the model under-confident" in text
    assert "the 2 released layouts (8 questions each): accuracy 0.0 %–12.5 % at chance 3.8 %–25.0 %" in text
    assert "training letter in 3/11 questions" in text


def test_the_stage2_section_names_the_verifier_and_says_when_the_main_model_verified(tmp_path):
    _quickstart(tmp_path, good=True)
    text, facts = summary.summarize(tmp_path)
    assert "- verifier: not named in the records" in text   # records written before they named it
    rows = [json.loads(line) for line in (tmp_path / "eval/full/synthetic/predictions.jsonl").read_text().splitlines()]
    for own in (True, False):
        block = {"model": "runs/tiny/verifier" if own else "runs/tiny/sft/export", "main_model": not own}
        _run(tmp_path, "full", [{**r, "stage2": {**r["stage2"], "verifier": block}} if r["stage2"] else r
                                for r in rows])
        text, facts = summary.summarize(tmp_path)
        assert facts["stage2"]["verifier_models"] == [block]
        said = ("`runs/tiny/verifier`, a model of its own beside the main model, as in the paper" if own else
                "`runs/tiny/sft/export`, the main model itself: not the paper's two-model Stage 2")
        assert f"- verifier: {said}" in text
