"""The viewer page holds only what the user pointed it at, and odd values cost it nothing: figures named outside the
calibration's folder (by name or through a link) and videos outside --video_root (thumbnails and strips of frames
alike) are not inlined, a NaN or Infinity in a record is drawn as '-' and counted as a problem, a field of the wrong
shape marks its card and is left out of the sums, names and judge text from the files are escaped."""

import json
import shutil

import pytest
from cader.dev.viewer_records import synthetic_records
from cader.evaluate.report import write_report
from cader.evaluate.viewer.build import figures_of, write_viewer
from cader.evaluate.viewer.encode import decode
from cader.evaluate.viewer.runs import summary_row
from cader.evaluate.viewer.thumbs import video_file
from PIL import Image


def page_data(path) -> dict:
    return {"cards": decode(path.read_text(encoding="utf-8"))}


def test_only_figures_inside_the_calibration_folder_are_inlined(tmp_path):
    secret = tmp_path / "elsewhere" / "private.png"
    secret.parent.mkdir()
    Image.new("RGB", (4, 4), "blue").save(secret)
    folder = tmp_path / "cal"
    (folder / "figures").mkdir(parents=True)
    Image.new("RGB", (4, 4), "red").save(folder / "figures" / "ok.png")
    calibration = {"figures": [str(secret), "../elsewhere/private.png", "figures/ok.png"]}
    assert figures_of(folder / "calibration.json", calibration) == [folder / "figures" / "ok.png"]
    only_outside = {"figures": [str(secret)]}  # nothing listed inside: the folder's own figures/ instead
    assert figures_of(folder / "calibration.json", only_outside) == [folder / "figures" / "ok.png"]


def test_videos_outside_the_video_root_are_not_read(tmp_path):
    root = tmp_path / "data"
    (root / "videos").mkdir(parents=True)
    assert video_file("videos/a.mp4", root) == root / "videos" / "a.mp4"
    assert video_file(str(root / "videos" / "a.mp4"), root) == root / "videos" / "a.mp4"
    assert video_file("../other/a.mp4", root) is None
    assert video_file("/etc/passwd", root) is None
    assert video_file("videos/a.mp4", None) is None


def test_a_thumbnail_outside_the_root_is_a_named_problem(tmp_path, barcode_video):
    records = synthetic_records(2, seed=4)
    outside = tmp_path / "outside.mp4"
    shutil.copy(barcode_video, outside)
    records[0]["video"] = str(outside)
    run = tmp_path / "run"
    run.mkdir()
    (run / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    root = tmp_path / "root"
    root.mkdir()
    _, built = write_viewer(run, video_root=root, thumbs=2)
    assert built.thumbs_made == 0
    assert any("is outside --video_root" in p and str(outside) in p for p in built.problems.messages)


def test_a_record_with_nan_or_infinity_still_gets_its_page(tmp_path):
    records = [r for r in synthetic_records(8, seed=5) if r["stage1"]][:4]
    records[0]["stage1"]["margin"] = float("nan")
    records[1]["cost"]["seconds"] = float("inf")
    records[2]["stage1"]["logits"][1] = float("-inf")
    run = tmp_path / "run"
    run.mkdir()
    (run / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))  # NaN, Infinity
    write_report(run, records)
    path, built = write_viewer(run)
    cards = page_data(path)["cards"]
    assert len(cards) == 4 and cards[0]["s1"]["m"] is None  # drawn as '-'
    assert cards[1]["cost"]["seconds"] is None
    # a margin or logit that is no number breaks the contract: the card says so and the page counts it
    assert "stage1.margin" in cards[0]["bad"] and "finite" in cards[0]["bad"]
    assert "stage1.logits" in cards[2]["bad"] and "-Infinity" in cards[2]["bad"]
    assert cards[3]["bad"] is None
    for card in (cards[0], cards[2]):
        assert any(card["id"] in m and "stage1." in m for m in built.problems.messages)
    assert f'data-count="{len(built.problems.messages)}"' in path.read_text()


@pytest.mark.parametrize("cost", ["12 forwards", [1, 2]])
def test_a_cost_that_is_no_object_in_a_run_without_report_json_marks_only_its_card(tmp_path, cost):
    records = synthetic_records(3, seed=3)
    records[1]["cost"] = cost
    run = tmp_path / "run"
    run.mkdir()
    (run / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    path, built = write_viewer(run)
    cards = page_data(path)["cards"]
    assert len(cards) == 3 and cards[1]["bad"].startswith("cost: ") and cards[0]["bad"] is None
    assert [m for m in built.problems.messages if records[1]["sample_id"] in m and "cost: " in m]


# a field of the wrong shape, where the viewer sums, iterates or counts by it
BROKEN_FIELDS = {
    "cost": "x", "stage1": ["x"], "stage2": "x", "meta": "x", "benchmark": ["b"], "correct": [1], "options": "AB",
    "duration": "long", "video": ["v.mp4"],
}
BROKEN_PARTS = {  # (part, key): value, inside a Stage-2 record
    ("cost", "forwards"): "x", ("cost", "flops"): {"total": "x"}, ("stage2", "steps"): "x",
    ("stage2", "fallback"): ["too_broad"], ("stage2", "cycles"): "two",
}
BROKEN_STEPS = {"iteration": ["x"], "parsed": "x", "window": "x", "crop": 5, "fps_map": "x"}


def broken_records() -> tuple[list[dict], list[tuple[str, str]]]:
    """Stage-2 records each with one field of the wrong shape, and (sample id, field) of each."""
    stage2 = [r for r in synthetic_records(200, seed=11) if r["route"] == "stage2" and r["stage2"]["cycles"] > 1]
    records, broken = [], []

    def take(name: str) -> dict:
        record = json.loads(json.dumps(stage2[len(records)]))
        record["sample_id"] = f"broken-{len(records)}"
        records.append(record)
        broken.append((record["sample_id"], name))
        return record

    for name, value in BROKEN_FIELDS.items():
        take(name)[name] = value
    for (part, key), value in BROKEN_PARTS.items():
        take(f"{part}.{key}")[part][key] = value
    for key, value in BROKEN_STEPS.items():
        record = take(f"stage2.steps.{key}")
        for step in record["stage2"]["steps"]:
            if key in step:
                step[key] = value
        if key == "iteration":  # one kind of key beside another: they must not be compared
            record["stage2"]["steps"][0]["iteration"] = "x"
    return records, broken


def test_a_field_of_the_wrong_shape_marks_its_card_and_the_rest_is_drawn(tmp_path):
    records, broken = broken_records()
    good = synthetic_records(6, seed=12)
    run = tmp_path / "run"  # no report.json: the summary is summed from the records
    run.mkdir()
    (run / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in good + records))
    path, built = write_viewer(run, video_root=tmp_path / "videos", thumbs=1)  # no video there: none decoded
    cards = {c["id"]: c for c in page_data(path)["cards"]}
    assert len(cards) == len(good) + len(records)
    assert all(cards[r["sample_id"]]["bad"] is None for r in good)
    for sample, name in broken:
        assert name.split(".")[0] in cards[sample]["bad"], (sample, name)
        assert any(sample in m and name.split(".")[0] in m for m in built.problems.messages), (sample, name)
    # the summary sums every record but a broken field: no cost of a record whose cost breaks the contract
    intact = [r for r, (_, name) in zip(records, broken) if not name.startswith("cost")] + good
    row = summary_row(built.run_data[0])
    assert row["n"] == len(cards)
    assert row["cost"]["forwards"] == pytest.approx(sum(r["cost"]["forwards"] for r in intact) / len(cards), abs=1e-3)


def test_a_figure_linked_from_outside_the_calibration_folder_is_not_inlined(tmp_path):
    secret = tmp_path / "elsewhere" / "private.png"
    secret.parent.mkdir()
    Image.new("RGB", (4, 4), "blue").save(secret)
    folder = tmp_path / "cal"
    (folder / "figures").mkdir(parents=True)
    Image.new("RGB", (4, 4), "red").save(folder / "figures" / "ok.png")
    (folder / "figures" / "link.png").symlink_to(secret)  # a name inside the folder, a file outside it
    (folder / "linked").symlink_to(secret.parent, target_is_directory=True)
    calibration = {"figures": ["figures/link.png", "linked/private.png", "figures/ok.png"]}
    assert figures_of(folder / "calibration.json", calibration) == [folder / "figures" / "ok.png"]
    # nothing usable listed: the folder's own figures/, without the link either
    assert figures_of(folder / "calibration.json", {"figures": ["figures/link.png"]}) == [folder / "figures" / "ok.png"]


def test_a_calibration_a_report_names_is_read_only_when_it_is_a_calibration_file(tmp_path):
    private = tmp_path / "private"
    (private / "figures").mkdir(parents=True)
    Image.new("RGB", (4, 4), "blue").save(private / "figures" / "secret.png")
    (private / "notes.json").write_text(json.dumps({"temperature": "secret-value", "figures": []}))
    records = synthetic_records(3, seed=2)
    run = tmp_path / "run"
    run.mkdir()
    (run / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    report = write_report(run, records)  # as a run given --calibration private/notes.json would have written it
    report["config"] = {"calibration": str(private / "notes.json")}
    (run / "report.json").write_text(json.dumps(report))
    path, built = write_viewer(run)
    assert built.calibrations == [] and "secret-value" not in path.read_text()
    assert any("notes.json" in m and "calibration.json" in m for m in built.problems.messages)


def test_a_link_the_user_put_inside_the_root_is_followed(tmp_path):
    root, elsewhere = tmp_path / "data", tmp_path / "store"
    root.mkdir(), elsewhere.mkdir()
    (elsewhere / "v.mp4").write_bytes(b"")
    (root / "v.mp4").symlink_to(elsewhere / "v.mp4")
    assert video_file("v.mp4", root) == root / "v.mp4"


def test_run_names_and_judge_text_from_the_files_are_escaped(tmp_path):
    records = synthetic_records(3, seed=7)
    records[0]["benchmark"] = 'agentvidbench"><img src=x onerror=alert(1)>'
    run = tmp_path / "<b>run"
    run.mkdir()
    (run / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    write_report(run, records)
    (run / "judge_report.json").write_text(json.dumps({"traj": 0.5, "P1": 1.0, "warning": "<script>x()</script>",
                                                       "slices": {"difficulty": {"<i>hard</i>": {"n": 1}}}}))
    (run / "judgments.jsonl").write_text("")
    path, _ = write_viewer(tmp_path)
    text = path.read_text()
    assert "<b>run" not in text and "&lt;b&gt;run" in text
    assert "<img src=x" not in text and "<script>x()" not in text and "<i>hard</i>" not in text


def test_strips_of_frames_come_only_from_videos_inside_the_root(tmp_path, barcode_video):
    records = [r for r in synthetic_records(40, seed=4) if r["route"] == "stage2" and r["stage2"]["cycles"]][:2]
    inside = tmp_path / "root" / "videos"
    inside.mkdir(parents=True)
    shutil.copy(barcode_video, inside / "v.mp4")
    records[0]["video"] = "videos/v.mp4"
    records[1]["video"] = str(barcode_video)  # outside the root
    for record in records:  # the barcode video is 60 s long: the crops and the answer's window inside it
        record["duration"] = 60.0
        for step in record["stage2"]["steps"]:
            if step["phase"] in ("verify", "answer"):
                step["crop" if step["phase"] == "verify" else "window"] = [20.0, 30.0]
    run = tmp_path / "run"
    run.mkdir()
    (run / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    _, built = write_viewer(run, video_root=tmp_path / "root", thumbs=2)
    first, second = built.cards
    assert all(len(r["strip"]) == 2 for r in first["s2"]["rounds"] if r.get("crop"))
    assert not any("strip" in r for r in second["s2"]["rounds"]) and "thumbs" not in second
    assert any("is outside --video_root" in m for m in built.problems.messages)


@pytest.mark.parametrize("file, field, value", [
    ("report.json", "overall", "x"), ("report.json", "overall.accuracy_ci95_exact", [[1]]),
    ("report.json", "cost", "x"), ("report.json", "timing.seconds", 5), ("report.json", "config", ["x"]),
    ("report.json", "benchmarks.synthetic.accuracy_ci95_video_bootstrap", "x"),
    ("judge_report.json", "P1", "2"), ("judge_report.json", "slices.difficulty", "x"),
    ("judge_report.json", "failure_tags_per_100.counting_error", "x"), ("judge_report.json", "provenance", "x"),
])
def test_a_report_whose_numbers_have_another_shape_is_a_named_problem_and_not_used(tmp_path, file, field, value):
    records = [r | {"benchmark": "synthetic"} for r in synthetic_records(6, seed=1)]
    run = tmp_path / "run"
    run.mkdir()
    (run / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    report = write_report(run, records)
    judge = {"traj": 0.5, "mc_rate": 0.4, "P1": 1.0, "n_judged": 2, "provenance": {"command": "judge"},
             "slices": {"difficulty": {"hard": {"n": 1, "traj": 0.5}}}, "failure_tags_per_100": {"counting_error": 1}}
    payload = report if file == "report.json" else judge
    *parents, last = field.split(".")
    for key in parents:
        payload = payload[key]
    payload[last] = value
    (run / "report.json").write_text(json.dumps(report))
    (run / "judge_report.json").write_text(json.dumps(judge))
    (run / "judgments.jsonl").write_text("")
    _, built = write_viewer(run)
    (problem,) = [m for m in built.problems.messages if m.startswith(str(run / file))]
    assert "not used" in problem and field.split(".")[0] in problem
    used = built.run_data[0]
    assert (used.report is None) == (file == "report.json") and (used.judge_report is None) == (file != "report.json")
    assert summary_row(used)["n"] == 6
