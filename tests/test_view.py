"""`cader view` without a browser: records digested into cards, filter counts against report.json, the inlined JSON,
broken input listed (never dropped), thumbnails from a real video, judgments by question id, the CLI."""

import base64
import io
import json
import math
from collections import Counter
from pathlib import Path

import pytest
from cader.contracts.records import JudgmentRecord, build_record
from cader.dev.viewer_records import synthetic_records
from cader.evaluate.report import write_report
from cader.evaluate.viewer.build import write_viewer
from cader.evaluate.viewer.collect import FILTERS, card_of, iterations, resamples, softmax
from cader.evaluate.viewer.encode import decode
from cader.evaluate.viewer.page import table_html
from cader.evaluate.viewer.thumbs import thumb_window, window_strips
from PIL import Image


def write_run(folder, records, report=True):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    if report:
        write_report(folder, records)
    return folder


def page_data(path) -> dict:
    """The page's cards, joined back from its columns and lines (encode.decode)."""
    return {"cards": decode(path.read_text(encoding="utf-8"))}


STEPS = [
    {"phase": "propose", "iteration": 0, "context": "F1", "n_frames": 8, "tried": [], "raw_output": "[[20, 30]]",
     "parsed": {"window": [20.0, 30.0], "how": "bracket"}, "window": [20.0, 30.0], "too_broad": False},
    {"phase": "verify", "iteration": 0, "window": [20.0, 30.0], "crop": [19.0, 31.0], "r2": 2.0, "n_frames": 24,
     "p_yes": 0.2, "f": 0.3, "accepted": False},
    {"phase": "resample", "iteration": 1, "mode": "rgr", "fps_map": [[19.0, 31.0, 0.3]],
     "unexplored": [[0.0, 19.0], [31.0, 60.0]], "n_frames": 50},
    {"phase": "propose", "iteration": 1, "context": "rgr", "n_frames": 50, "tried": [[20.0, 30.0]],
     "raw_output": "[[40, 50]]", "parsed": {"window": [40.0, 50.0], "how": "bracket"}, "window": [40.0, 50.0],
     "too_broad": False},
    {"phase": "verify", "iteration": 1, "window": [40.0, 50.0], "crop": [40.0, 50.0], "r2": 2.4, "n_frames": 24,
     "p_yes": 0.9, "f": 1.0, "accepted": True},
    {"phase": "answer", "window": [40.0, 50.0], "n_frames": 24, "raw_output": "<answer>C</answer>",
     "parsed": {"letter": "C", "how": "answer_tag/alone"}, "pred": "C", "fallback_to_stage1": False},
]


def test_each_proposal_is_paired_with_the_verification_of_its_iteration():
    rounds = iterations(STEPS)
    assert [(r["i"], r["win"], r["crop"], r["p"], r["ok"], r["ctx"]) for r in rounds] == [
        (0, [20.0, 30.0], [19.0, 31.0], 0.2, False, "F1"),
        (1, [40.0, 50.0], [40.0, 50.0], 0.9, True, "rgr"),
    ]
    assert rounds[1]["tried"] == [[20.0, 30.0]]
    (rgr,) = resamples(STEPS)
    assert rgr["i"] == 1 and rgr["map"] == [[19.0, 31.0, 0.3]] and rgr["unexplored"] == [[0.0, 19.0], [31.0, 60.0]]
    # the thumbnails show the crop the answer was given on
    card = card_of({"stage2": {"pred": "C", "accepted": [40.0, 50.0], "cycles": 2, "fallback": None,
                               "steps": STEPS}}, "run")
    assert thumb_window(card) == (40.0, 50.0)


def test_stage1_probabilities_are_the_temperature_softmax():
    # softmax([0, ln 3] / 1) = [1/4, 3/4]; at T = 2 the logits halve: [0, ln 3 / 2] -> [1/(1+sqrt 3), sqrt 3/(1+sqrt 3)]
    assert softmax([0.0, math.log(3)], 1.0) == pytest.approx([0.25, 0.75])
    assert softmax([0.0, math.log(3)], 2.0) == pytest.approx([1 / (1 + 3**0.5), 3**0.5 / (1 + 3**0.5)])
    assert softmax([1000.0, 0.0], 1.0) == pytest.approx([1.0, 0.0])  # no overflow
    card = card_of({"stage1": {"logits": [0.0, math.log(3)], "temperature": 1.0, "pred": "B", "margin": 0.5}}, "r")
    assert card["s1"]["probs"] == [0.25, 0.75]
    assert card_of({"stage1": {"logits": ["x"], "temperature": 1.0}}, "r")["s1"]["probs"] == []  # bad logits


def filter_counts(cards: list[dict]) -> dict[str, dict[str, int]]:
    """Cards per value of each filter dimension (what the page's filters count)."""
    return {dim: dict(sorted(Counter(c["f"][dim] for c in cards).items())) for dim in FILTERS}


def test_filter_counts_are_the_reports_numbers(tmp_path):
    records = synthetic_records(300, seed=3)
    report = write_report(tmp_path, records)
    counts = filter_counts([card_of(r, "run") for r in records])
    assert counts["benchmark"] == {b: s["n"] for b, s in report["benchmarks"].items()}
    finished_stage2 = {k: v for k, v in counts["fallback"].items() if not k.startswith("(")}
    assert finished_stage2 == report["fallbacks"]
    overall = report["overall"]
    assert counts["correct"]["failed"] == report["failures"]["count"] == overall["failures"]
    assert counts["correct"]["correct"] == round(overall["accuracy"] * overall["n_scored"] / 100)
    ok = overall["n"] - overall["failures"]
    assert counts["route"]["stage2"] == round(overall["stage2_trigger_rate"] * ok / 100)
    assert counts["route"]["exit"] == round(overall["stage1_exit_rate"] * ok / 100)


def test_inlined_json_cannot_close_its_script_element(tmp_path):
    record = synthetic_records(1)[0] | {"question": "</script><script>window.bad = 1</script><!-- \u2028"}
    path, _ = write_viewer(write_run(tmp_path / "run", [record]))
    text = path.read_text(encoding="utf-8")
    # the index's, the question lines', the card lines' and the viewer script's own
    assert text.count("</script>") == 4
    assert page_data(path)["cards"][0]["q"] == record["question"]


def test_broken_lines_are_listed_and_broken_records_still_shown(tmp_path):
    good = synthetic_records(3)
    folder = tmp_path / "run"
    folder.mkdir()
    lines = [json.dumps(good[0]), "{not json", "[1, 2]", json.dumps({"sample_id": "half", "benchmark": "b"}),
             json.dumps(good[1])]
    (folder / "predictions.jsonl").write_text("\n".join(lines) + "\n")
    path, built = write_viewer(folder)
    messages = built.problems.messages
    assert any(":2: not valid JSON" in m for m in messages) and any(":3: expected a JSON object" in m for m in messages)
    assert any(":4: shown flagged" in m for m in messages)
    assert "no report.json" in path.read_text()
    cards = page_data(path)["cards"]
    assert [c["id"] for c in cards] == [good[0]["sample_id"], "half", good[1]["sample_id"]]
    assert cards[1]["bad"] and cards[0]["bad"] is None
    assert f'data-count="{len(messages)}"' in path.read_text()


def test_thumbnails_are_small_frames_of_the_window(barcode_video):
    from conftest import read_barcode

    (frames,), why = window_strips(barcode_video, [(20.0, 30.0)], 3)
    assert why is None and len(frames) == 3
    assert all(20.0 <= f["t"] <= 30.0 for f in frames)
    for frame in frames:
        picture = Image.open(io.BytesIO(base64.b64decode(frame["src"].split(",", 1)[1])))
        assert picture.format == "JPEG" and picture.height == 64
        # the barcode video shows its own frame index: the thumbnail is the frame at that time (10 fps)
        import numpy as np

        assert abs(read_barcode(np.asarray(picture.convert("RGB"))) - round(frame["t"] * 10)) <= 1
    strips, why = window_strips(barcode_video.parent / "nope.mp4", [(None, None)], 3)
    assert strips == [] and "does not exist" in why


def test_judgments_attach_by_question_id_to_the_judged_benchmark(tmp_path):
    records = synthetic_records(2)
    records[0] |= {"benchmark": "agentvidbench", "question_id": 7}
    records[1] |= {"question_id": 7}  # another benchmark: not the judged one
    write_run(tmp_path / "eval" / "run", records)
    judgment = build_record(JudgmentRecord, {
        "question_id": 7, "system": "cader", "judge_model": "j", "scores": {"P1": 2, "P2": 1, "P3": 0, "P4": None,
        "P5": 2}, "traj": 0.625, "mc_rate": 0.5, "milestones": [{"id": "M1", "status": "partial", "evidence": "e"}],
        "failure_tags": ["counting_error"], "summary": "s", "attempts": 1, "error": None})
    (tmp_path / "judge").mkdir()
    (tmp_path / "judge" / "judgments.jsonl").write_text(json.dumps(judgment) + "\n{broken\n")
    path, built = write_viewer(tmp_path)
    cards = page_data(path)["cards"]
    assert cards[0]["judge"][0]["scores"]["P1"] == 2 and cards[0]["judge"][0]["tags"] == ["counting_error"]
    assert "judge" not in cards[1]
    assert any("judgments.jsonl:2" in m for m in built.problems.messages)


def test_report_sections_become_tables():
    html = table_html({"videomme_long": {"n": 3, "accuracy": 66.67}, "lvbench": {"n": 1, "accuracy": None}})
    assert html.count("<tr>") == 3 and "videomme_long" in html and "66.67" in html and "<td>-</td>" in html
    per_bench = table_html({"lvbench": [{"bin": ">=0.995", "n": 2}], "mlvu_dev": [{"bin": "<0.90", "n": 0}]})
    assert per_bench.count("<table>") == 2


def test_cli_view_writes_the_page_and_refuses_a_folder_without_runs(tmp_path, capsys):
    from cader.cli.main import main

    folder = write_run(tmp_path / "run", synthetic_records(5))
    out = tmp_path / "page.html"
    assert main(["view", str(folder), "--out", str(out)]) == 0
    assert len(page_data(out)["cards"]) == 5
    assert "5 samples in 1 runs" in capsys.readouterr().out
    (tmp_path / "empty").mkdir()
    assert main(["view", str(tmp_path / "empty")]) == 2
    assert "no predictions.jsonl" in capsys.readouterr().err


def test_a_calibration_named_relative_to_the_workdir_is_found_and_inlined(tmp_path, monkeypatch):
    from PIL import Image as PILImage

    # the quickstart passes --calibration runs/tiny/calibration/calibration.json, relative to its WORKDIR
    calibration = tmp_path / "work" / "runs" / "tiny" / "calibration"
    (calibration / "figures").mkdir(parents=True)
    PILImage.new("RGB", (8, 8), "red").save(calibration / "figures" / "risk_coverage.png")
    (calibration / "calibration.json").write_text(json.dumps({"temperature": 1.5, "tau": 0.9,
                                                              "figures": ["figures/risk_coverage.png"]}))
    records = synthetic_records(4)
    run = write_run(tmp_path / "work" / "runs" / "tiny" / "eval" / "full" / "b", records, report=False)
    write_report(run, records, config={"calibration": "runs/tiny/calibration/calibration.json"})
    monkeypatch.chdir(tmp_path)  # not the WORKDIR: found from the run folder's parents
    path, built = write_viewer(tmp_path / "work" / "runs" / "tiny" / "eval")
    assert [p.resolve() for p in built.calibrations] == [(calibration / "calibration.json").resolve()]
    assert 'alt="risk_coverage.png" src="data:image/png;base64,' in path.read_text()


def test_a_single_predictions_file_is_a_run(tmp_path):
    side = tmp_path / "cader_records.jsonl"  # what `lmms-eval --model cader` writes
    side.write_text("".join(json.dumps(r) + "\n" for r in synthetic_records(3)))
    write_report(tmp_path, synthetic_records(7))  # a report.json of some other file in the folder: not shown
    path, built = write_viewer(side)
    assert path == tmp_path / "cader_records.viewer.html"
    assert built.runs == ["cader_records.jsonl"] and len(page_data(path)["cards"]) == 3
    assert "no report.json" in path.read_text()


@pytest.mark.parametrize("name, flag", [("view", "--video_root"), ("export-lmms", "--out")])
def test_the_tools_help_names_every_flag(name, flag, capsys):
    from cader.cli.main import TOOLS, load_script, main

    with pytest.raises(SystemExit) as exit_info:
        main([name, "--help"])
    assert exit_info.value.code in (0, None)
    text = capsys.readouterr().out
    assert f"usage: cader {name}" in text and flag in text
    for action in load_script(TOOLS[name]).build_parser()._actions:
        assert action.help and action.help.strip(), f"{name} {action.option_strings} has no help"


# ---- several runs side by side ----------------------------------------------------------------------------------------


def test_several_roots_are_runs_named_below_their_common_folder_and_the_reference_is_chosen(tmp_path, capsys):
    from cader.cli.main import main

    a = write_run(tmp_path / "seed1" / "full" / "synthetic", synthetic_records(8, seed=0, variant=1))
    b = write_run(tmp_path / "seed2" / "full" / "synthetic", synthetic_records(8, seed=0, variant=2))
    out = tmp_path / "both.html"
    assert main(["view", str(a), str(b), "--out", str(out), "--reference", "seed2/full/synthetic"]) == 0
    assert "16 samples in 2 runs" in capsys.readouterr().out
    cards = page_data(out)["cards"]
    assert {c["f"]["run"] for c in cards} == {"seed1/full/synthetic", "seed2/full/synthetic"}
    text = out.read_text()
    assert '<tr data-run="seed2/full/synthetic" class="reference">' in text
    assert 'data-run="seed1/full/synthetic" data-base="seed2/full/synthetic"' in text
    # a name that matches no run, or several, is a one-line error naming the runs
    assert main(["view", str(a), str(b), "--out", str(out), "--reference", "full/synthetic"]) == 2
    err = capsys.readouterr().err
    assert "matches several runs" in err and "seed1/full/synthetic" in err and "Traceback" not in err
    assert main(["view", str(a), "--reference", "nope"]) == 2
    assert "--reference 'nope' names no run" in capsys.readouterr().err


def test_a_run_without_report_json_is_summarised_from_its_records():
    from cader.evaluate.report import build_report
    from cader.evaluate.viewer.runs import Run, summary_row

    records = synthetic_records(40, seed=6)
    from_records = summary_row(Run("r", Path("r/predictions.jsonl"), records, report=None))
    from_report = summary_row(Run("r", Path("r/predictions.jsonl"), records, report=build_report(records)))
    for key in ("n", "accuracy", "ci", "exit_rate"):
        assert from_records[key] == from_report[key], key
    assert from_records["cost"]["forwards"] == pytest.approx(from_report["cost"]["forwards"], abs=1e-3)


def test_each_run_is_compared_with_the_reference_or_the_first_run_on_its_questions():
    from cader.evaluate.viewer.runs import Run, comparison_bases

    one, two = synthetic_records(8, seed=0, variant=1), synthetic_records(8, seed=0, variant=2)
    other = [r | {"benchmark": "agentvidbench"} for r in synthetic_records(4, seed=9)]
    runs = [Run(n, Path(n), rs) for n, rs in (("a", one), ("b", two), ("c", other), ("d", other))]
    bases = comparison_bases(runs, runs[1])
    assert [None if b is None else b.name for b in bases] == ["b", None, "d", "c"]


def judged_tree(tmp_path, inside: bool, named: bool, runs: int = 2):
    """`runs` AgentVidBench runs of the same questions and one judge folder, inside the first run, or beside them
    with its report's command naming the first run's predictions (or naming nothing)."""
    folders = []
    for k in range(runs):
        records = [r | {"benchmark": "agentvidbench", "question_id": 7 + i}
                   for i, r in enumerate(synthetic_records(2, seed=0, variant=k))]
        folders.append(write_run(tmp_path / "eval" / f"run{k}", records))
    judge = folders[0] / "judge" if inside else tmp_path / "judge"
    judge.mkdir(parents=True)
    row = build_record(JudgmentRecord, {"question_id": 7, "system": "cader", "judge_model": "j", "scores": {
        "P1": 2, "P2": 1, "P3": 0, "P4": None, "P5": 2}, "traj": 0.625, "mc_rate": 0.5, "milestones": [],
        "failure_tags": ["counting_error"], "summary": "s", "attempts": 1, "error": None})
    (judge / "judgments.jsonl").write_text(json.dumps(row) + "\n")
    command = f"evaluate/judge.py --predictions {folders[0] / 'predictions.jsonl'}" if named else "evaluate/judge.py"
    (judge / "judge_report.json").write_text(json.dumps({"traj": 0.625, "P1": 2.0, "provenance": {"command": command}}))
    return tmp_path / "eval", judge


@pytest.mark.parametrize("inside, named", [(True, False), (False, True)])
def test_judgments_go_to_the_run_they_judged(tmp_path, inside, named):
    root, judge = judged_tree(tmp_path, inside, named)
    path, built = write_viewer(root, tmp_path / "page.html", judgments=[str(judge / "judgments.jsonl")])
    assert list(built.judge_owner.values()) == ["run0"]
    judged = {c["f"]["run"] for c in page_data(path)["cards"] if c.get("judge")}
    assert judged == {"run0"}
    assert 'data-run="run0"><svg' in path.read_text()  # its judge report's radar


def test_judgments_of_no_known_run_are_shown_on_every_judged_question_saying_so(tmp_path):
    root, judge = judged_tree(tmp_path, inside=False, named=False)
    path, built = write_viewer(root, tmp_path / "page.html", judgments=[str(judge / "judgments.jsonl")])
    assert any("cannot tell which run it judged" in m for m in built.problems.messages)
    assert {c["f"]["run"] for c in page_data(path)["cards"] if c.get("judge")} == {"run0", "run1"}


def test_a_failure_tag_is_a_filter_value_and_judge_reasons_reach_the_card(tmp_path):
    root, judge = judged_tree(tmp_path, inside=True, named=False, runs=1)
    rows = [json.loads(line) for line in (judge / "judgments.jsonl").read_text().splitlines()]
    rows[0]["axis_rationales"] = {"P1": "read the question right", "P4": None}
    (judge / "judgments.jsonl").write_text(json.dumps(rows[0]) + "\n")
    path, _ = write_viewer(root)
    cards = page_data(path)["cards"]
    assert [c["tags"] for c in cards] == [["counting_error"], ["(not judged)"]]
    assert cards[0]["judge"][0]["why"] == {"P1": "read the question right"}


def test_agentvidbench_is_sliced_by_difficulty_category_and_skill():
    from cader.evaluate.viewer.runs import Run
    from cader.evaluate.viewer.slices import run_slices

    records = synthetic_records(6, seed=2)
    for k, r in enumerate(records):
        r |= {"benchmark": "agentvidbench", "meta": {"difficulty": "hard" if k % 2 else "easy",
                                                     "categories": ["a", "b"] if k < 2 else ["a"], "skills": []}}
    slices = run_slices(Run("r", Path("r"), records))["agentvidbench"]
    assert {g: row["n"] for g, row in slices["difficulty"].items()} == {"easy": 3, "hard": 3}
    assert {g: row["n"] for g, row in slices["category"].items()} == {"a": 6, "b": 2}  # in each category listed
    assert list(slices["skill"]) == ["(missing)"]


def test_a_line_with_nan_is_written_as_null_and_only_such_lines_take_the_slow_path():
    from cader.evaluate.viewer.encode import json_line

    assert json_line({"m": float("nan"), "q": "a < b", "x": [1.5, float("inf")]}) == '{"m":null,"q":"a \\u003c b","x":[1.5,null]}'
    assert json_line({"q": "Infinity war"}) == '{"q":"Infinity war"}'
