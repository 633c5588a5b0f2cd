"""The viewer page holds only what the user pointed it at, and odd values cost it nothing: figures named outside the
calibration's folder and videos outside --video_root (thumbnails and strips of frames alike) are not inlined, a NaN
or Infinity in a record is drawn as '-', names and judge text from the files are escaped."""

import json
import shutil

from cader.dev.viewer_records import synthetic_records
from cader.evaluate.report import write_report
from cader.evaluate.viewer.build import figures_of, write_viewer
from cader.evaluate.viewer.encode import decode
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
    records = synthetic_records(3, seed=5)
    records[0]["stage1"]["margin"] = float("nan")
    records[1]["cost"]["seconds"] = float("inf")
    run = tmp_path / "run"
    run.mkdir()
    (run / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))  # NaN, Infinity
    write_report(run, records)
    path, _ = write_viewer(run)
    cards = page_data(path)["cards"]
    assert len(cards) == 3 and cards[0]["s1"]["m"] is None  # drawn as '-'
    assert cards[1]["cost"]["seconds"] is None


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
