"""The offline data recipe (`cader.evaluate.lmms.local_data`, no lmms-eval needed): from cader benchmark folders (the
conformance fixtures, in their releases' layouts) it writes each lmms-eval dataset's rows where `datasets` finds a
local `dataset_path`, and links the videos where the tasks' doc_to_visual look; every row, read back as lmms-eval
hands it to the model (`cader.evaluate.lmms.docs`), is the sample `cader eval`'s loader makes of the same release
row. Missing videos and unwritable rows are named and make the command exit 1; a missing folder exits 2."""

import json
import shutil
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from cader.evaluate.benchmarks import load_benchmark
from cader.evaluate.lmms.docs import sample_from_doc
from cader.evaluate.lmms.local_data import DATASETS, main, write_local_data

FIXTURES = Path(__file__).resolve().parent / "fixtures"
V2 = FIXTURES / "lmms_local_data" / "videomme_v2"


@pytest.fixture
def data_root(tmp_path):
    root = tmp_path / "data"
    for folder in ("videomme", "mlvu", "lvbench", "longvideobench"):
        shutil.copytree(FIXTURES / folder, root / folder)
    shutil.copytree(V2, root / "videomme_v2")
    return root


def local_rows(out: Path, key: str) -> list[dict]:
    spec = DATASETS[key]
    (file,) = (out / spec.dataset_path / "data").glob(f"{spec.split}-*.parquet")
    return pq.read_table(file).to_pylist()


def same_question(sample, expected) -> None:
    got = (sample.question, sample.options, sample.letters, sample.answer, sample.duration)
    assert got == (expected.question, expected.options, expected.letters, expected.answer, expected.duration)


def test_rows_read_back_as_the_loaders_samples(data_root, tmp_path):
    out = tmp_path / "lmms_home"
    manifest = write_local_data(str(data_root), str(out))
    assert set(manifest) == set(DATASETS)

    long_rows = [r for r in local_rows(out, "videomme") if r["duration"] == "long"]  # videomme_process_docs_long
    expected, _ = load_benchmark("videomme_long", data_root)
    assert len(long_rows) == len(expected) > 0
    for i, (row, sample) in enumerate(zip(long_rows, expected)):
        video = out / "hf_home" / "videomme" / "data" / Path(sample.video).name
        assert video.is_symlink() and video.resolve() == (data_root / sample.video).resolve()
        got = sample_from_doc("videomme_long", row, i, str(video))
        same_question(got, sample)
        assert got.sample_id == sample.sample_id

    for key, benchmark, task in (("mlvu_dev", "mlvu_dev", "mlvu_dev"), ("lvbench", "lvbench", "lvbench"),
                                 ("longvideobench", "longvideobench_val", "longvideobench_val_v")):
        rows, (expected, _) = local_rows(out, key), load_benchmark(benchmark, data_root)
        assert len(rows) == len(expected) > 0, key
        for i, (row, sample) in enumerate(zip(rows, expected)):
            got = sample_from_doc(task, row, i, "video")
            same_question(got, sample)
            if key != "mlvu_dev":  # MLVU_dev rows name no question: lmms-eval knows them by doc id
                assert got.sample_id == sample.sample_id

    mlvu = local_rows(out, "mlvu_dev")
    assert {row["task_type"] for row in mlvu} <= {"anomaly_reco", "count", "ego", "needle", "order", "plotQA",
                                                  "topic_reasoning"}  # mlvu_aggregate_results_dev's task types
    for row in mlvu:  # the video where mlvu_doc_to_visual_dev looks: $HF_HOME/mlvu/<video_name>
        assert (out / "hf_home" / "mlvu" / row["video_name"]).resolve().is_file()
    # lvbench_doc_to_visual: $HF_HOME/lvbench/<video_path> (the fixture has one key's video, in a download shard)
    linked = [row for row in local_rows(out, "lvbench") if (out / "hf_home" / "lvbench" / row["video_path"]).is_symlink()]
    assert [row["key"] for row in linked] == ["kQ3nV8yTz1M"] * 2
    lvb = local_rows(out, "longvideobench")
    assert all("candidates" not in row and row["option4"] == "N/A" or len({row[f"option{i}"] for i in range(5)}) == 5
               for row in lvb)
    for row in lvb:  # longvideobench_doc_to_visual_v: $HF_HOME/datasets/longvideobench/videos/<video_path>
        assert (out / "hf_home" / "datasets" / "longvideobench" / "videos" / row["video_path"]).resolve().is_file()


def test_video_mme_v2_rows_are_the_release_rows_with_eight_lettered_options(data_root, tmp_path):
    out = tmp_path / "lmms_home"
    write_local_data(str(data_root), str(out), datasets=["videomme_v2"])
    rows = local_rows(out, "videomme_v2")
    assert rows == pq.read_table(V2 / "test.parquet").to_pylist()
    for i, row in enumerate(rows):
        sample = sample_from_doc("videomme_v2", row, i, "v.mp4")
        assert sample.letters == list("ABCDEFGH") and sample.sample_id == row["question_id"]
        assert sample.options[0] == f"{row['video_id']} choice {row['question_id'][-1]}.0"
        assert sample.answer == row["answer"]
    # videomme_v2_doc_to_visual: $HF_HOME/videomme_v2/<video_id>.mp4; subtitles under subtitle/
    assert (out / "hf_home" / "videomme_v2" / "001.mp4").resolve() == (data_root / "videomme_v2" / "videos" / "001.mp4").resolve()
    assert (out / "hf_home" / "videomme_v2" / "subtitle" / "001.jsonl").is_symlink()
    assert not (out / "videomme_v2").exists()  # no folder of the working directory is named like a task


def test_missing_videos_are_named_and_exit_1_a_rerun_replaces_its_links(data_root, tmp_path, capsys):
    out = tmp_path / "lmms_home"
    assert main(["--data_root", str(data_root), "--out", str(out), "--datasets", "lvbench", "videomme"]) == 1
    err = capsys.readouterr().err
    # the fixtures hold no video for two short/medium Video-MME rows and one LVBench key
    assert "videomme: " in err and "aaaaaaaaaa1.mp4 (nor .MP4/.mkv)" in err
    assert "lvbench: lvbench 201: no video" in err and "3 rows or videos left out or missing" in err
    manifest = json.loads((out / "cader_local_data.json").read_text())
    assert set(manifest) == {"lvbench", "videomme"} and manifest["videomme"]["rows"] == 5
    assert main(["--data_root", str(data_root), "--out", str(out), "--datasets", "lvbench"]) == 1  # links replaced
    assert len(list((out / "lmms-eval" / "LVBench" / "data").glob("*.parquet"))) == 1


def test_unwritable_rows_are_named_not_written(data_root, tmp_path):
    file = data_root / "longvideobench" / "lvb_val.json"
    rows = json.loads(file.read_text())
    rows[0]["candidates"] = [f"c{i}" for i in range(6)]
    rows[1]["video_path"] = "../../elsewhere.mp4"
    file.write_text(json.dumps(rows))
    manifest = write_local_data(str(data_root), str(tmp_path / "out"), datasets=["longvideobench"])
    problems = manifest["longvideobench"]["problems"]
    assert manifest["longvideobench"]["rows"] == len(rows) - 2
    assert "row 0: candidates" in problems[0] and "not written" in problems[0]
    assert "row 1: video_path '../../elsewhere.mp4' leaves its folder; not written" in problems[1]


def test_a_missing_folder_or_unknown_dataset_is_one_line_exit_2(tmp_path, capsys):
    assert main(["--data_root", str(tmp_path), "--out", str(tmp_path / "o"), "--datasets", "lvbench"]) == 2
    assert f"{tmp_path / 'lvbench'}: no such folder (--datasets lvbench)" in capsys.readouterr().err
    assert main(["--data_root", str(tmp_path), "--out", str(tmp_path / "o"), "--datasets", "mvbench"]) == 2
    assert "--datasets: unknown mvbench (known: videomme, videomme_v2" in capsys.readouterr().err
    assert main(["--data_root", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    assert "none of the folders" in capsys.readouterr().err
