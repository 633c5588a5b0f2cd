"""Every benchmark loader on the conformance fixtures (tests/fixtures/<benchmark>/, laid out as the official
releases; see each PROVENANCE.md). The expected values are computed here from the raw files the way the official
harness reads them, not taken from the loaders."""

import json
import re
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from cader.evaluate.benchmarks import LETTERS, benchmarks, load_benchmark, video_path
from cader.evaluate.benchmarks.agentvidbench import parse_question, read_questions, read_video_table
from cader.evaluate.benchmarks.base import RowError
from cader.evaluate.judge.questions import InputRowError, load_questions

FIXTURES = Path(__file__).parent / "fixtures"


def load_videos(path: str | Path) -> tuple[dict[str, dict], list[InputRowError]]:
    """videos.jsonl rows keyed by ``file_name`` (a question's ``video_path``), each with ``duration_seconds`` added
    (None for "unknown"); malformed rows are returned as errors."""
    path = Path(path)
    table = read_video_table(path)
    videos = {name: {**row, "duration_seconds": table.seconds[name]} for name, row in table.rows.items()}
    return videos, [InputRowError(f"{path}:{line}: {reason}") for line, reason in table.errors]


def _load(name, folder):
    samples, errors = load_benchmark(name, FIXTURES / folder)
    assert errors == [], errors
    return {s.sample_id: s for s in samples}


def _file(root: Path, rel: str) -> Path:
    path = root / rel
    assert path.is_file(), path
    return path


RELEASED = [b for b in benchmarks() if b.released]


@pytest.mark.parametrize("registered", RELEASED, ids=[b.name for b in RELEASED])
def test_every_released_benchmark_has_a_conformance_fixture_it_reads(registered):
    # the shared checks; each benchmark's own test below compares it with its official reader
    root = FIXTURES / registered.folder
    assert (root / "PROVENANCE.md").is_file(), f"{registered.name}: no {root}/PROVENANCE.md"
    samples = list(_load(registered.name, registered.folder).values())
    assert samples, f"{registered.name}: the fixture holds no sample"
    for s in samples:
        assert s.benchmark == registered.name and s.meta.get("task_type"), s.sample_id
        assert s.letters == list(LETTERS[: len(s.options)])
        # None: no ground truth; MLVU's release rows whose answer is no candidate keep the scorer's NO_MATCH
        assert s.answer is None or s.answer in s.letters or s.meta.get("answer_not_in_options"), s.sample_id
        assert video_path(s, root).resolve().is_relative_to(root.resolve()), (registered.name, s.sample_id)
    # a release may name a video its download lost (LVBench's failed video2dataset rows), but not all of them
    assert any(video_path(s, root).is_file() for s in samples), f"{registered.name}: no video file found"


def test_videomme_long_as_lmms_eval_reads_it():
    root = FIXTURES / "videomme"
    rows = pq.read_table(root / "videomme" / "test-00000-of-00001.parquet").to_pylist()
    long_rows = [r for r in rows if r["duration"] == "long"]  # videomme_process_docs_long
    samples = _load("videomme_long", "videomme")
    assert list(samples) == [r["question_id"] for r in long_rows]
    for row in long_rows:
        s = samples[row["question_id"]]
        # videomme_doc_to_visual: data/<videoID>.mp4, else .MP4, else .mkv
        base = root / "data" / row["videoID"]
        expected = next(
            p
            for p in (base.with_suffix(".mp4"), base.with_suffix(".MP4"), base.with_suffix(".mkv"))
            if p.exists()
        )
        assert video_path(s, root) == expected
        assert s.answer == row["answer"]  # compared letter to letter
        assert [f"{letter}. {o}" for letter, o in zip(s.letters, s.options)] == row["options"]
        assert s.question == row["question"] and s.meta["task_type"] == row["task_type"]
    assert samples["602-1"].video.endswith(".mkv")


def _mlvu_official_gold(row):
    answer_idx = -1  # choice_bench.qa_template: the last equal candidate, else -1
    for idx, candidate in enumerate(row["candidates"]):
        if candidate == row["answer"]:
            answer_idx = idx
    return chr(ord("A") + answer_idx)


def test_mlvu_dev_scores_every_official_row():
    root = FIXTURES / "mlvu"
    samples = _load("mlvu_dev", "mlvu")
    expected = {}
    for file in sorted((root / "MLVU" / "json").glob("*.json")):
        rows = json.loads(file.read_text())
        if any("candidates" not in r for r in rows):
            continue  # 8_sub_scene / 9_summary: generation tasks
        task = file.stem.split("_", 1)[1]  # choice_bench's data_list key
        for index, row in enumerate(rows):
            expected[f"{file.stem}-{index}"] = (task, _mlvu_official_gold(row), row, file.stem)
    assert set(samples) == set(expected)
    per_task = {}
    for sample_id, (task, gold, row, stem) in expected.items():
        s = samples[sample_id]
        assert (s.meta["task_type"], s.answer, s.options) == (task, gold, row["candidates"])
        assert video_path(s, root) == _file(root, f"MLVU/video/{stem}/{row['video']}")
        assert s.duration == row["duration"]
        per_task[task] = per_task.get(task, 0) + 1
    assert per_task["plotQA"] == 3  # the official denominator: odd rows included
    assert samples["1_plotQA-1"].meta["duplicate_options"] and samples["1_plotQA-1"].answer == "C"
    assert samples["1_plotQA-2"].meta["answer_not_in_options"] and samples["1_plotQA-2"].answer == "@"
    assert not samples["1_plotQA-2"].answer in samples["1_plotQA-2"].letters  # no prediction can match


def test_longvideobench_val_as_the_official_dataloader_reads_it():
    root = FIXTURES / "longvideobench"
    rows = json.loads((root / "lvb_val.json").read_text())
    samples = _load("longvideobench_val", "longvideobench")
    assert list(samples) == [r["id"] for r in rows]
    for row in rows:
        s = samples[row["id"]]
        assert s.answer == chr(ord("A") + row["correct_choice"])
        assert s.options == row["candidates"] and s.duration == row["duration"]
        assert video_path(s, root) == _file(root, f"videos/{row['video_path']}")
        assert root / s.meta["subtitle_path"] == _file(root, f"subtitles/{row['subtitle_path']}")
        assert s.meta["task_type"] == row["question_category"]


def test_lvbench_reads_the_download_script_layout():
    root = FIXTURES / "lvbench"
    by_key = {}  # video2dataset sidecars: url carries the key the download script wrote
    for sidecar in (root / "scripts" / "videos").glob("*/*.json"):
        meta = json.loads(sidecar.read_text())
        if meta["status"] == "success":
            by_key[meta["url"].split("v=", 1)[1]] = sidecar.with_suffix(".mp4")
    samples = _load("lvbench", "lvbench")
    lines = [json.loads(x) for x in (root / "data" / "video_info.meta.jsonl").read_text().splitlines() if x]
    expected_ids = [str(qa["uid"]) for line in lines for qa in line["qa"]]  # compute_accuracy: str(qa["uid"])
    assert list(samples) == expected_ids
    for line in lines:
        for qa in line["qa"]:
            s = samples[str(qa["uid"])]
            assert s.answer == qa["answer"]
            stem, *option_lines = qa["question"].split("\n")
            assert s.question == stem and [f"({a}) {o}" for a, o in zip(s.letters, s.options)] == option_lines
            assert s.duration == pytest.approx(line["video_info"]["duration_minutes"] * 60)
            assert s.meta["question_type"] == qa["question_type"]
            if line["key"] in by_key:
                assert video_path(s, root) == by_key[line["key"]]
            else:  # failed download: the flat name, reported per sample by the runner
                assert s.video == f"videos/{line['key']}.mp4" and not video_path(s, root).exists()
    assert len(by_key) == 1


def test_lvbench_flat_videos_win_over_shards(tmp_path):
    import shutil

    shutil.copytree(FIXTURES / "lvbench", tmp_path / "lvbench")
    (tmp_path / "lvbench" / "videos").mkdir()
    (tmp_path / "lvbench" / "videos" / "kQ3nV8yTz1M.mp4").write_bytes(b"")
    samples = _load("lvbench", tmp_path / "lvbench")
    assert samples["101"].video == "videos/kQ3nV8yTz1M.mp4"


def test_videoevalpro_mcq_parses_the_meta_string():
    root = FIXTURES / "videoevalpro"
    rows = pq.read_table(root / "data" / "test-00000-of-00001.parquet").to_pylist()
    assert all(isinstance(r["meta"], str) for r in rows)  # the release stores meta as text
    samples = _load("videoevalpro_mcq", "videoevalpro")
    assert list(samples) == [f"{i:05d}" for i in range(len(rows))]
    for i, row in enumerate(rows):
        s = samples[f"{i:05d}"]
        assert s.answer == row["answer"]
        assert [f"{a}. {o}" for a, o in zip(s.letters, s.options)] == row["options"]
        assert video_path(s, root) == _file(root, f"videos/{row['video']}")  # <video_root>/<video>
        stated = json.loads(row["meta"]).get("duration")
        assert s.duration == (stated if isinstance(stated, (int, float)) else None)
        assert s.meta["task_type"] == row["qa_type"] and s.meta["answer_text"] == row["answer_text"]
    assert samples["00002"].meta["source_duration"] == "long"


def _official_duration(text):
    """orchestration.parse_duration: strip "~", split on ":"; 0.0 for unknown (the loader gives None)."""
    s = text.strip().lstrip("~").strip()
    try:
        parts = [int(p) for p in s.split(":")]
    except ValueError:
        return None
    return float(sum(p * 60**k for k, p in enumerate(reversed(parts))))


def test_agentvidbench_as_the_official_harness_reads_it():
    root = FIXTURES / "agentvidbench"
    rows = [json.loads(x) for x in (root / "questions.jsonl").read_text().splitlines() if x]
    table = {v["file_name"]: v for v in map(json.loads, (root / "videos.jsonl").read_text().splitlines())}
    samples = _load("agentvidbench", "agentvidbench")
    assert sorted(samples, key=int) == [
        str(r["question_id"]) for r in sorted(rows, key=lambda r: r["question_id"])
    ]
    for row in rows:
        s = samples[str(row["question_id"])]
        assert (
            s.question == row["question_text"] and s.options == row["options"] and s.answer == row["answer"]
        )
        assert s.letters == list(LETTERS)
        assert video_path(s, root) == _file(root, row["video_path"])
        transcript = _file(root, row["transcript_path"])
        assert root / s.meta["transcript_path"] == transcript
        assert s.meta["transcript_available"] == (transcript.stat().st_size > 0)
        assert s.duration == _official_duration(table[row["video_path"]]["duration"])
        assert s.meta["categories"] == row["categories"] and s.meta["task_type"] == row["categories"][0]
        assert s.meta["milestones"] == row["milestones"] and s.meta["skills"] == row["skills"]
        assert s.meta.get("ecom_required") == row.get("ecom_required")
        assert ("ecom_required" in s.meta) == ("ecom_required" in row)
    assert samples["2"].duration == 17 * 60 and samples["2"].meta["duration_estimated"]
    assert samples["3"].duration is None and samples["3"].meta["duration_source"] == "unknown"
    assert read_video_table(root / "videos.jsonl").unknown == ["videos/video3.mp4"]


def test_the_judge_reads_the_same_question_file():
    root = FIXTURES / "agentvidbench"
    questions, errors = load_questions(root / "questions.jsonl")
    assert errors == []
    samples = _load("agentvidbench", "agentvidbench")
    assert set(questions) == set(samples)
    for key, q in questions.items():
        s = samples[key]
        assert (q.question, q.options, q.answer, q.milestones) == (
            s.question,
            s.options,
            s.answer,
            s.meta["milestones"],
        )
        assert q.categories == s.meta["categories"] and q.ecom_required == s.meta.get("ecom_required")
        assert q.video_path == s.video and q.transcript_path == s.meta["transcript_path"]
    videos, errors = load_videos(root / "videos.jsonl")
    assert errors == [] and videos["videos/video1.mp4"]["duration_seconds"] == 146.0
    assert videos["videos/video3.mp4"]["duration_seconds"] is None


def test_agentvidbench_options_as_letter_objects_and_defaults():
    row = json.loads((FIXTURES / "agentvidbench" / "questions.jsonl").read_text().splitlines()[0])
    lettered = dict(row, options=[{"letter": LETTERS[i], "text": o} for i, o in enumerate(row["options"])])
    del lettered["transcript_path"]
    parsed = parse_question(lettered)
    assert parsed.options == row["options"]
    assert parsed.transcript_path == "transcripts/video1.srt"  # orchestration's fallback: <video stem>.srt
    shuffled = dict(lettered, options=list(reversed(lettered["options"])))
    with pytest.raises(RowError, match="in order"):
        parse_question(shuffled)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("2:26", 146.0), ("~17:00", 1020.0), ("1:02:03", 3723.0), ("45", 45.0), ("unknown", None), ("", None)],
)
def test_video_table_durations(text, seconds, tmp_path):
    path = tmp_path / "videos.jsonl"
    path.write_text(json.dumps({"file_name": "videos/video1.mp4", "duration": text}) + "\n")
    table = read_video_table(path)
    assert table.errors == [] and table.seconds["videos/video1.mp4"] == seconds
    assert table.unknown == ([] if seconds is not None else ["videos/video1.mp4"])


@pytest.mark.parametrize("text", ["ten minutes", "2:75", "-3", "1::2"])
def test_malformed_video_table_durations_are_row_errors(text, tmp_path):
    path = tmp_path / "videos.jsonl"
    path.write_text(json.dumps({"file_name": "videos/video1.mp4", "duration": text}) + "\n")
    table = read_video_table(path)
    assert table.rows == {} and [line for line, _ in table.errors] == [1]


def test_question_file_line_errors_keep_their_line_numbers(tmp_path):
    path = tmp_path / "questions.jsonl"
    row = json.loads((FIXTURES / "agentvidbench" / "questions.jsonl").read_text().splitlines()[0])
    path.write_text("\n".join([json.dumps(row), "{bad", json.dumps(dict(row, question_text=" ")), ""]))
    parsed = read_questions(path)
    assert [line for line, _ in parsed] == [1, 2, 3]
    assert not isinstance(parsed[0][1], RowError)
    assert re.search("JSON", str(parsed[1][1])) and "empty" in str(parsed[2][1])


def test_agentvidbench_counts_questions_without_a_known_duration(caplog, tmp_path):
    import shutil

    shutil.copytree(FIXTURES / "agentvidbench", tmp_path / "agentvidbench")
    (tmp_path / "agentvidbench" / "videos.jsonl").unlink()  # the table is optional in the release's harness
    with caplog.at_level("WARNING"):
        samples, errors = load_benchmark("agentvidbench", tmp_path / "agentvidbench")
    assert errors == [] and all(s.duration is None for s in samples)
    assert {s.meta["duration_source"] for s in samples} == {"not in video table"}
    assert f"{len(samples)} question(s) have no known video duration" in caplog.text
