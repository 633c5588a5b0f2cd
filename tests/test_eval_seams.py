"""Evaluation seams: bad input and faults end in a clear, counted outcome.

Whole-run problems (a flag value that cannot mean what it says, a missing model folder, data root or calibration
file, an output another run is writing) are one line on stderr and exit 2, before any model loads. Per-sample
problems (a video that is not the one annotated, a one-frame container, a predictions line that is not UTF-8, a
sample written twice) are recorded on the sample and counted, and the run goes on.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from cader.contracts.jsonl import FileInUse, exclusive_writer
from cader.dev.scripted import ScriptedBackend
from cader.evaluate.benchmarks.base import Sample
from cader.evaluate.method.config import CaderConfig
from cader.evaluate.report import build_report
from cader.evaluate.run import main
from cader.evaluate.runner import (
    check_duration,
    duration_tolerance,
    merge_shards,
    read_records,
    run_samples,
)
from conftest import write_barcode_video

LETTERS = ["A", "B", "C", "D"]
UNSURE = [0.0, 0.1, 0.0, 0.0]  # low margin: Stage 2


def sample(sid, video, duration=None, question="q0"):
    return Sample("bench", sid, video, question, ["a", "b", "c", "d"], LETTERS, "B", duration, {})


def run(samples, root, out, backend, **cfg):
    cfg = CaderConfig(max_frames=8, max_pixels=2048, **cfg)
    return run_samples(samples, root, out, backend, backend, cfg, video_path=lambda s, r: r / s.video,
                       progress=False)


@pytest.fixture
def model_dir(tmp_path):
    """A folder that passes the up-front model check (config.json present); nothing here loads it."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    return folder


def cli(tmp_path, model_dir, *extra):
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    return ["--model", str(model_dir), "--benchmark", "synthetic", "--data_root", str(data),
            "--out", str(tmp_path / "out"), "--progress", "false", *extra]


def error_lines(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("error:")]


# ---- flags and paths: one line, exit 2, nothing run ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--limit", "-3"], "error: --limit must be >= 0 (run the first N samples), got -3"),
        (["--tau", "2"], "error: --tau must be in [0, 1] (or 1.0000000000000002: no early exit), got 2.0"),
        (["--tau", "-0.1"], "error: --tau must be in [0, 1]"),
        (["--temperature", "0"], "error: --temperature must be a finite number > 0, got 0.0"),
        (["--temperature", "-2"], "error: --temperature must be a finite number > 0"),
        (["--concurrency", "-4"], "error: --concurrency must be >= 1, got -4"),
        (["--devices", "0"], "error: --devices must be >= 1, got 0"),
        (["--shard", "3/2"], "error: --shard 3/2: need 0 <= I < N"),
        (["--shard", "half"], "error: --shard must look like I/N"),
        (["--delta", "1.5"], "error: --delta must be in [0, 1], got 1.5"),
        # CaderConfig's own checks, now one line instead of a traceback
        (["--r1", "0"], "error: r1 must be a finite positive number, got 0.0"),
        (["--k_reflections", "-1"], "error: k_reflections must be >= 0, got -1"),
    ],
)
def test_a_bad_flag_value_is_refused_in_one_line(tmp_path, model_dir, capsys, flags, expected):
    assert main(cli(tmp_path, model_dir, *flags)) == 2
    lines = error_lines(capsys)
    assert len(lines) == 1 and lines[0].startswith(expected), lines
    assert not (tmp_path / "out" / "predictions.jsonl").exists()


def test_the_no_exit_sentinel_and_the_bounds_of_tau_are_accepted(tmp_path, model_dir, capsys):
    for tau in ("0", "1", "1.0000000000000002"):
        # past the flag checks: the empty data root is the first thing refused
        assert main(cli(tmp_path, model_dir, "--tau", tau)) == 2
        (line,) = error_lines(capsys)
        assert "--tau" not in line and "--data_root" in line


def test_what_can_only_be_a_local_path(tmp_path, monkeypatch):
    from cader.vlm.loading import load_processor, missing_local_path

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    for path in ("/abs/model", "./export", "../export", "~/model", "a/b/c", "runs/export", "bad id"):
        assert missing_local_path(path), path
    for path in ("Qwen/Qwen3-VL-8B-Instruct", "gpt2", "runs", "other/export"):  # hub ids (or a folder)
        assert not missing_local_path(path), path
    with pytest.raises(FileNotFoundError, match=r"^runs/export: no such folder$"):
        load_processor("runs/export")


def test_a_missing_local_model_folder_is_named_in_one_line(tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    (tmp_path / "runs").mkdir()
    for missing in (tmp_path / "no" / "model", "./no_such_export", f"{tmp_path / 'runs'}/export"):
        argv = ["--model", str(missing), "--benchmark", "synthetic", "--data_root", str(data), "--out",
                str(tmp_path / "out")]
        assert main(argv) == 2
        assert error_lines(capsys) == [f"error: --model {missing}: no such folder"]
    empty = tmp_path / "empty_model"
    empty.mkdir()
    assert main(["--model", str(empty), "--benchmark", "synthetic", "--data_root", str(data), "--out",
                 str(tmp_path / "out")]) == 2
    assert error_lines(capsys) == [f"error: --model {empty}: folder has no config.json (not a model folder)"]


def test_missing_data_root_layout_and_calibration_are_one_line_each(tmp_path, model_dir, capsys):
    argv = cli(tmp_path, model_dir)
    argv[argv.index("--data_root") + 1] = str(tmp_path / "nowhere")
    assert main(argv) == 2
    assert error_lines(capsys) == [f"error: --data_root {tmp_path / 'nowhere'}: no such folder"]

    assert main(cli(tmp_path, model_dir)) == 2  # a folder without the benchmark's release layout
    (line,) = error_lines(capsys)
    assert line.startswith("error: --benchmark synthetic --data_root ") and "test.jsonl" in line

    assert main(cli(tmp_path, model_dir, "--calibration", str(tmp_path / "calibration.json"))) == 2
    assert error_lines(capsys) == [f"error: --calibration {tmp_path / 'calibration.json'}: no such file"]

    bad = tmp_path / "calibration.json"
    bad.write_text(json.dumps({"temperature": 1.5, "tau": 2.0}))  # refused by the same rule as --tau
    assert main(cli(tmp_path, model_dir, "--calibration", str(bad))) == 2
    (line,) = error_lines(capsys)
    assert line.startswith(f"error: --calibration {bad}:")


def test_other_missing_inputs_and_unknown_names_are_one_line_each(tmp_path, model_dir, capsys):
    for flag in ("--compare", "--stage1_from"):  # were read as empty files: a comparison with nothing
        assert main(cli(tmp_path, model_dir, flag, str(tmp_path / "p.jsonl"))) == 2
        assert error_lines(capsys) == [f"error: {flag} {tmp_path / 'p.jsonl'}: no such file"]
    assert main(cli(tmp_path, model_dir, "--variants", "full,no_sage2")) == 2
    (line,) = error_lines(capsys)
    assert line.startswith("error: unknown variant(s) ['no_sage2']")
    argv = cli(tmp_path, model_dir)
    argv[argv.index("--benchmark") + 1] = "mlvu"
    assert main(argv) == 2
    (line,) = error_lines(capsys)
    assert "unknown benchmark 'mlvu'" in line and "mlvu_dev" in line


def test_a_hub_id_that_does_not_load_is_one_line(tmp_path, capsys, monkeypatch):
    # offline (conftest sets HF_HUB_OFFLINE): the loader's own reason, in one line, not its traceback
    (tmp_path / "data" / "synthetic").mkdir(parents=True)
    (tmp_path / "data" / "synthetic" / "test.jsonl").write_text("")
    argv = ["--model", "nobody-xyz/no-such-model", "--benchmark", "synthetic", "--data_root",
            str(tmp_path / "data"), "--out", str(tmp_path / "out"), "--progress", "false"]
    assert main(argv) == 2
    (line,) = error_lines(capsys)
    assert line.startswith("error: --model nobody-xyz/no-such-model: cannot load it (")


# ---- one writer per predictions file -------------------------------------------------------------------------------


HOLD = textwrap.dedent(
    """
    import sys, time
    from cader.contracts.jsonl import exclusive_writer
    with exclusive_writer(sys.argv[1]):
        print("held", flush=True)
        sys.stdin.read()
    """
)


@pytest.fixture
def held(tmp_path):
    """Another process holding the writer lock of out/predictions.jsonl until the test ends."""
    target = tmp_path / "out" / "predictions.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(target)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    yield target, proc.pid
    proc.stdin.close()
    assert proc.wait(timeout=30) == 0


def test_a_second_run_on_one_out_is_refused_naming_the_holder(tmp_path, model_dir, barcode_video, held, capsys):
    target, pid = held
    with pytest.raises(FileInUse, match=rf"being written by another run \(pid {pid}, lock "):
        run([sample("s0", barcode_video.name, 60.0)], barcode_video.parent, target, ScriptedBackend({}))
    assert not target.exists()  # refused before anything was written
    assert main(cli(tmp_path, model_dir)) == 2
    (line,) = error_lines(capsys)
    assert line.startswith(f"error: {target} is being written by another run (pid {pid},")
    with pytest.raises(FileInUse):
        merge_shards(target.parent)


def test_the_lock_is_reentrant_in_a_process_and_released_on_exit(tmp_path):
    target = tmp_path / "predictions.jsonl"
    with exclusive_writer(target), exclusive_writer(target):
        pass
    with exclusive_writer(target) as lock:  # free again
        assert lock.read_text().strip().isdigit()


def test_a_sample_written_twice_counts_once(tmp_path, barcode_video, caplog):
    out = tmp_path / "predictions.jsonl"
    samples = [sample(f"s{i}", barcode_video.name, 60.0, question=f"q{i}") for i in range(3)]
    run(samples, barcode_video.parent, out, ScriptedBackend({f"q{i}": [0.0, 40.0, 0.0, 0.0] for i in range(3)}))
    lines = out.read_text().splitlines(keepends=True)
    out.write_text("".join(lines + lines[:2]))  # what two runs appending to one file at once left behind
    records = read_records(out)
    assert [r["sample_id"] for r in records] == ["s0", "s1", "s2"]
    assert f"{out}:4: a second record of bench/s0 (line 1 counts)" in caplog.text
    assert build_report(records)["n"] == 3
    target, n = merge_shards(tmp_path)
    assert n == 3 and len(target.read_text().splitlines()) == 3


def test_a_predictions_line_that_is_not_utf8_is_rerun_on_resume(tmp_path, barcode_video, caplog):
    out = tmp_path / "predictions.jsonl"
    samples = [sample(f"s{i}", barcode_video.name, 60.0, question=f"q{i}") for i in range(3)]
    backend = ScriptedBackend({f"q{i}": [0.0, 40.0, 0.0, 0.0] for i in range(3)})
    run(samples, barcode_video.parent, out, backend)
    lines = out.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"question": "q1"', b'"question": "q1\xe9"')
    out.write_bytes(b"".join(lines))
    counts = run(samples, barcode_video.parent, out, backend)
    assert counts["done_before"] == 2 and counts["ran"] == 1
    assert f"{out}:2: not valid UTF-8 (byte 0xe9" in caplog.text
    assert sorted(r["sample_id"] for r in read_records(out)) == ["s0", "s1", "s2"]


# ---- videos that are not what the benchmark says ------------------------------------------------------------------


def test_duration_tolerance_by_hand():
    assert duration_tolerance(20.0) == 5.0 and duration_tolerance(50.0) == 5.0  # the floor
    assert duration_tolerance(36_000.0) == 3_600.0 and duration_tolerance(600.0) == 60.0  # 10 %
    check_duration(None, 10.0)
    check_duration(600.0, 545.0)  # 55 s off: re-encode and rounding
    with pytest.raises(ValueError, match=r"decodes to 10.00 s, the benchmark says 36000 s \(tolerance 3600 s\)"):
        check_duration(36_000.0, 10.0)
    with pytest.raises(ValueError):
        check_duration(20.0, 25.5)


def test_wrong_videos_are_failed_or_flagged_and_counted(tmp_path, barcode_video):
    from PIL import Image

    root = tmp_path / "videos"
    root.mkdir()
    (root / "clip.mp4").symlink_to(barcode_video)  # 60 s
    Image.fromarray(np.full((48, 64, 3), 90, np.uint8)).save(root / "still.jpg")
    (root / "still.jpg").rename(root / "still.mp4")  # a picture under a video's name
    samples = [
        sample("annotated_10h", "clip.mp4", 36_000.0),
        sample("rounded", "clip.mp4", 63.0),
        sample("picture_annotated", "still.mp4", 120.0),
        sample("picture", "still.mp4", None),
    ]
    out = tmp_path / "predictions.jsonl"
    counts = run(samples, root, out, ScriptedBackend({"q0": [0.0, 40.0, 0.0, 0.0]}))
    records = {r["sample_id"]: r for r in read_records(out)}
    assert counts["failed"] == 2 and counts["flagged"] == 2  # both pictures are single frames
    ten_hours = records["annotated_10h"]
    assert ten_hours["error"].startswith(f"duration_mismatch: {root / 'clip.mp4'}: the video decodes to 60.00 s")
    assert ten_hours["pred"] is None and ten_hours["correct"] is False and ten_hours["duration"] == 60.0
    assert records["rounded"]["error"] is None and "flags" not in records["rounded"]
    assert records["picture_annotated"]["error"].startswith("duration_mismatch:")
    picture = records["picture"]
    assert picture["error"] is None and picture["pred"] == "B"  # run, scored, and flagged
    assert picture["flags"] and picture["flags"][0].startswith("single_frame: 1 frame of 0.040 s")
    report = build_report(list(records.values()))
    assert report["failures"]["by_reason"] == {"duration_mismatch": 2}


def test_a_one_frame_video_whose_crop_is_rejected_falls_back_to_stage1(tmp_path):
    write_barcode_video(tmp_path / "one.mp4", n_frames=1, fps=25)
    # a proposal inside the 20 % breadth limit of a 0.04 s video, a crop the verifier rejects
    backend = ScriptedBackend({"q0": UNSURE}, proposal='"relevant_windows": [[0, 0.005]]', p_yes=0.1)
    out = tmp_path / "predictions.jsonl"
    run([sample("one", "one.mp4")], tmp_path, out, backend)
    (record,) = read_records(out)
    assert record["error"] is None and record["route"] == "stage2"
    assert record["stage2"]["fallback"] == "not_accepted" and record["pred"] == record["stage1"]["pred"]
    phases = [step["phase"] for step in record["stage2"]["steps"]]
    assert phases == ["propose", "verify", "resample"]  # no proposal on an empty context
    assert record["stage2"]["steps"][-1]["n_frames"] == 0 and record["stage2"]["steps"][-1]["no_frames"] is True
    assert record["flags"][0].startswith("single_frame:")


def test_the_scripted_backend_refuses_a_video_without_frames():
    from cader.evaluate.backends.base import Prompt
    from cader.vlm.video import Frames

    empty = Frames(np.zeros((0, 4, 4, 3), np.uint8), np.zeros(0), np.zeros(0, np.int64), 25.0)
    with pytest.raises(ValueError, match="no frames"):
        ScriptedBackend({}).generate([Prompt("Question: q0", video=empty)], 8)



# a lock file does not outlive its run (issue 40: 50 `.lock` files stayed in the quickstart's folders)
def test_no_lock_file_outlives_its_writer_and_a_killed_writers_is_taken_over(tmp_path):
    target = tmp_path / "predictions.jsonl"
    with exclusive_writer(target) as lock:
        assert lock.read_text().strip().isdigit()
    assert not lock.exists()
    lock.write_text("99999\n")   # left by a writer killed with SIGKILL: no flock on it any more
    with exclusive_writer(target):
        assert lock.read_text().strip() == str(os.getpid())
    assert not lock.exists()
