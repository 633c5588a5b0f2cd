"""The GPU check's one command (scripts/bench/gpu_run.sh + gpu_run.py), rehearsed on this CPU: the wheel install
against a fake wheel folder, the dry run through a fake $OUT, what a missing piece makes it say, the wheels' size
against the device call's limit, and the pieces the device run relies on (the time budget, the joined video, the
summary and its README block)."""

import base64
import hashlib
import importlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "bench" / "gpu_run.sh"
gpu_run = importlib.import_module("cader.scripts.bench.gpu_run")
gpu_decode = importlib.import_module("cader.scripts.bench.gpu_decode")
update_readme = importlib.import_module("cader.scripts.update_readme")


def fake_wheel(folder: Path, name: str = "cader_fake_probe", version: str = "0.0.1") -> Path:
    """A minimal valid pure-Python wheel (module `name` with VALUE = 1)."""
    folder.mkdir(parents=True, exist_ok=True)
    info = f"{name}-{version}.dist-info"
    files = {f"{name}/__init__.py": "VALUE = 1\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = [f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b'=').decode()},"
              f"{len(text.encode())}" for path, text in files.items()]
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        for member, text in files.items():
            wheel.writestr(member, text)
        wheel.writestr(f"{info}/RECORD", "\n".join([*record, f"{info}/RECORD,,"]) + "\n")
    return path


def run_script(tmp_path: Path, *args: str, wheels: Path | None = None, out: Path | None = None, timeout: int = 300):
    env = {**os.environ, "PYTHON": sys.executable, "GPU_RUN_SITE": str(tmp_path / "site"),
           "GPU_RUN_WHEELS": str(wheels or tmp_path / "wheels")}
    env.pop("OUT", None)
    if out is not None:
        env["OUT"] = str(out)
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=timeout,
                          check=False)


@pytest.mark.slow
def test_the_dry_run_installs_the_wheels_and_writes_every_part_under_out(tmp_path):
    out = tmp_path / "out"
    # every part but the CPU-only costs: ZeRO-3 on a CPU JIT-builds DeepSpeed's shared-memory op (minutes on a fresh
    # machine) and the Stage-1 role runs the verifier's code; the heavy tier runs them all
    parts = "[sft_plain_1, sft_plain_2, decode, scoring_verifier]"
    done = run_script(tmp_path, "--dry_run", "true", "--parts", parts, wheels=fake_wheel(tmp_path / "wheels").parent,
                      out=out)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    site = tmp_path / "site"
    assert (site / "cader_fake_probe" / "__init__.py").is_file()  # the install line ran against the wheel folder
    assert (site / "cader" / "vlm").resolve() == REPO / "vlm"  # cader importable from the checkout
    record = json.loads((out / "gpu.json").read_text())
    assert record["dry_run"] and record["depths"] == [1, 2] and "cader_fake_probe 0.0.1" in record["wheels"]
    assert {name: p["status"] for name, p in record["parts"].items()} == dict.fromkeys(json.loads(
        parts.replace("[", '["').replace("]", '"]').replace(", ", '", "')), "ok")
    summary = record["summary"]
    assert [row["layers"] for row in summary["sft"]["plain"]["rows"]] == [1, 2, 2]
    assert "not measured" in summary["sft"]["plain"]["rows"][-1]["what"]
    kernels = summary["scoring"]["verifier"]["kernels"]
    assert set(kernels) == set(gpu_run.importlib.import_module("cader.scripts.bench.gpu_scoring").KERNELS)
    assert "forward_s" in kernels["math"]  # the math kernel runs anywhere
    from cader.vlm.sampling import BACKBONE_MIN_FRAMES

    # the 2-second video at r1 = 1 fps: the backbone's minimum of 4 frames
    assert summary["decode"]["frames"] == BACKBONE_MIN_FRAMES and summary["decode"]["runs"][0]["cpu_s"] > 0
    log = (out / "gpu_run.log").read_text()
    assert "Measured by `bash scripts/bench/gpu_run.sh`" in log  # the README block, rendered from this run
    # what comes back from $OUT: at most 8 files, no deeper than 2 folders
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) <= 8 and all(len(p.relative_to(out).parts) <= 3 for p in files)


@pytest.mark.parametrize(("setup", "reason"), [
    ("no_out", "gpu_run: OUT is not set"),
    ("no_wheels", "gpu_run: no wheels in"),
    ("broken_wheel", "gpu_run: installing the wheels in"),
])
def test_what_is_missing_stops_the_run_with_one_line(tmp_path, setup, reason):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    if setup == "broken_wheel":
        (wheels / "broken-1.0-py3-none-any.whl").write_text("not a zip")
    out = None if setup == "no_out" else tmp_path / "out"
    done = run_script(tmp_path, "--dry_run", "true", wheels=wheels, out=out, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().startswith(reason) and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not (tmp_path / "out" / "gpu.json").exists()


def test_an_unknown_part_stops_the_run_with_one_line(tmp_path, monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)  # what a dry run sets, left as it was
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", "2"))
    assert gpu_run.run(str(tmp_path), dry_run=True, parts=["sft_zero3_99"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("gpu_run: no part named sft_zero3_99: the parts are sft_zero3_1, sft_zero3_2, decode")
    assert len(err.splitlines()) == 1 and err in (tmp_path / "gpu_run.log").read_text()


def test_missing_modules_are_named_without_importing_them():
    assert gpu_run.missing_modules(("json", "no_such_module_for_gpu_run")) == ["no_such_module_for_gpu_run"]
    assert gpu_run.missing_modules() == []  # this environment has all of them


def tracked_bytes() -> int:
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=False)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    names = [REPO / name for name in listed.stdout.decode().split("\0") if name]
    return sum(path.stat().st_size for path in names if path.is_file())


def test_the_wheels_and_the_tracked_files_fit_one_device_call():
    limit = gpu_run.TRAVEL_LIMIT_MIB * 2**20
    planned = sum(size for _, size in gpu_run.WHEELS.values()) * 2**20
    assert tracked_bytes() + planned <= limit
    folder = REPO / ".whl"
    if not folder.is_dir():
        return  # a checkout that has not downloaded them (CI): the manifest's sizes are the check
    found = {path.name.split("-")[0].lower(): path for path in folder.glob("*.whl")}
    assert set(found) == set(gpu_run.WHEELS), "one wheel of each package, no other (two versions stop the install)"
    for name, (version, mib) in gpu_run.WHEELS.items():
        assert found[name].name.split("-")[1] == version
        assert abs(found[name].stat().st_size / 2**20 - mib) < 0.5, (name, found[name].stat().st_size / 2**20)
    assert tracked_bytes() + sum(path.stat().st_size for path in found.values()) <= limit


def test_the_downloads_are_python_312_manylinux_x86_64_wheels():
    commands = gpu_run.download_commands(".whl", python="python")
    binary = [argv for argv, _ in commands if "--only-binary=:all:" in argv]
    assert {argv[-1] for argv in binary} == {f"{n}=={v}" for n, (v, _) in gpu_run.WHEELS.items() if n != "deepspeed"}
    for argv in binary:
        assert argv[argv.index("--python-version") + 1] == "3.12" and "--no-deps" in argv
        assert "--platform=manylinux_2_28_x86_64" in argv and argv[argv.index("-d") + 1] == ".whl"
    build, env = commands[-1]
    assert build[2:4] == ["pip", "wheel"] and env == {"DS_BUILD_OPS": "0", "DS_ACCELERATOR": "cuda"}


def test_parts_run_in_order_within_the_budget_and_failures_are_recorded(tmp_path):
    Part = gpu_run.Part
    parts = [Part("quick", "builtins:dict", {"a": 1}, 1), Part("broken", "json:loads", {"s": "{"}, 1),
             Part("too_long", "builtins:dict", {}, 10_000), Part("decode", "builtins:dict", {}, 1)]
    from cader.scripts.bench.harness import Fresh

    broken = tmp_path / "broken_writer.py"
    broken.write_text("import sys\nprint('x264 broke', file=sys.stderr)\nsys.exit(3)\n")
    failing_writer = Fresh("runpy:run_path", {"path_name": str(broken)}, log=tmp_path / "writer.log")
    record, saves = {"parts": {}}, []
    gpu_run.run_parts(parts, record, failing_writer, 60, False, lambda: saves.append(dict(record["parts"])),
                      gpu_run.Log(tmp_path / "log"))
    got = record["parts"]
    assert list(got) == ["quick", "broken", "too_long", "decode"]
    assert got["quick"]["status"] == "ok" and got["quick"]["result"] == {"a": 1}
    assert got["broken"]["status"] == "failed" and got["broken"]["error"].startswith("JSONDecodeError")
    assert got["too_long"]["status"] == "skipped" and "needs ~10000 s" in got["too_long"]["reason"]
    assert got["decode"] == {"status": "failed", "error": "writing the video failed (exit 3): x264 broke"}
    assert len(saves) == 3  # after every part that ran: what was measured is on disk if the call is cut short


def test_a_part_over_the_budget_is_stopped(tmp_path):
    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text("import time\ntime.sleep(30)\n")
    part = gpu_run.Part("sleeper", "runpy:run_path", {"path_name": str(sleeper)}, 1)
    result, error = gpu_run.call(part, fresh=True, timeout=1, log=gpu_run.Log(tmp_path / "log"))
    assert result is None and error == "stopped after 1 s (the budget's end)"


@pytest.mark.parametrize(("seconds", "workers", "plan"), [
    (1800, 8, [(0, 226), (226, 226), (452, 226), (678, 226), (904, 226), (1130, 226), (1356, 226), (1582, 218)]),
    (4, 2, [(0, 2), (2, 2)]),
    (2, 4, [(0, 2)]),
    (5, 2, [(0, 4), (4, 1)]),
])
def test_segments_cover_the_video_in_whole_keyframe_intervals(seconds, workers, plan):
    assert gpu_decode.segment_plan(seconds, workers, 2) == plan


def test_joined_segments_play_as_one_video(tmp_path):
    import numpy as np
    from cader.vlm.video import VideoReader
    from conftest import write_coded_video

    parts = [tmp_path / "a.mp4", tmp_path / "b.mp4"]
    for part in parts:
        write_coded_video(part, "libx264", {"g": "12", "bf": "2"}, n_frames=24, rate=24)
    joined = tmp_path / "joined.mp4"
    gpu_decode.join_segments(parts, joined)
    frames = VideoReader(joined).decode_indices(np.arange(48))
    assert len(frames) == 48 and np.allclose(np.diff(frames.timestamps), 1 / 24)
    one = VideoReader(parts[0]).decode_indices(np.arange(24)).frames
    assert np.array_equal(frames.frames[:24], one) and np.array_equal(frames.frames[24:], one)


def test_the_prompts_hold_the_frames_they_are_named_for():
    from cader.scripts.bench.gpu_scoring import prompt_tokens_for

    for frames in (2, 4, 512, 768):  # scoring_memory.stage1_prompts: 2 * ((tokens - 120) // 72) frames
        assert 2 * max(1, (prompt_tokens_for(frames) - 120) // 72) == frames


def run_record(logits_shape: list[int]) -> dict:
    sft = {"shape": "8b", "seq_len": 10_240, "peak_flops": 989e12, "peak_memory_gib": 40.0, "mfu_lm": 0.4,
           "mfu_lm_plus_vit": 0.5, "tokens_per_s": 10_000.0}
    scoring = {"role": "stage1", "shape": "8b", "frames": 768, "prompt_tokens": 27_757, "extrapolated": {
        "default": {"what": "extrapolated", "forward_s": 2.0, "prefill_tokens_per_s": 13_878, "mfu_lm_plus_vit": 0.3}},
        "runs": [{"layers": d, "kernel": "default", "forward_s": 0.5 * d / 4, "vision_s": 0.2, "prompt_tokens": 27_757,
                  "prefill_tokens_per_s": 1.0, "peak_over_weights_gib": 3.0, "mfu_lm_plus_vit": 0.3,
                  "logits_shape": logits_shape} for d in (4, 8)]
        + [{"layers": 8, "kernel": "math", "error": "OutOfMemoryError: CUDA out of memory. Tried to allocate"}]}
    decode = {"cores": 16, "runs": [{"decoders": 8, "cpu_s": 40.0, "wall_s": 6.0, "frames": 768,
                                     "frame_hw": [192, 320]}]}
    return {"device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0+cu130", "transformers": "5.17.0",
            "date": "2026-12-08", "depths": [4, 8], "video": {"seconds": 1800},
            "parts": {"sft_zero3_4": {"status": "ok", "result": {**sft, "layers": 4, "step_seconds": 1.0}},
                      "sft_zero3_8": {"status": "ok", "result": {**sft, "layers": 8, "step_seconds": 1.5}},
                      "scoring_stage1": {"status": "ok", "result": scoring},
                      "decode": {"status": "ok", "result": decode},
                      "sft_plain_4": {"status": "skipped", "reason": "10 s of the budget left, needs ~60 s"}}}


def test_the_summary_extrapolates_and_flags_logits_of_the_wrong_shape():
    summary = gpu_run.summarize(run_record([1, 680]))
    rows = summary["sft"]["zero3"]["rows"]
    assert rows[-1]["layers"] == 36 and rows[-1]["step_seconds"] == pytest.approx(1.0 + 0.125 * 32)
    assert summary["decode"]["cpu_s_per_gpu_s"] == pytest.approx(20.0)  # 40 CPU-s over the 2.0 s forward
    assert summary["not_run"] == {"sft_plain_4": "10 s of the budget left, needs ~60 s"}
    assert len(summary["problems"]) == 1 and "letter_logits and yes_no cannot index" in summary["problems"][0]
    assert gpu_run.summarize(run_record([680]))["problems"] == []


def test_the_readme_block_says_no_run_until_gpu_json_is_there(tmp_path):
    text = "a\n<!-- BEGIN generated: gpu -->\nold\n<!-- END generated: gpu -->\n"
    assert update_readme.render_readme(text, measured=tmp_path) == text.replace("old\n", update_readme.NO_GPU_RUN)
    record = run_record([680])
    record["summary"] = gpu_run.summarize(record)
    (tmp_path / "gpu.json").write_text(json.dumps(record))
    block = update_readme.render_readme(text, measured=tmp_path)
    assert "on NVIDIA H100 80GB HBM3, torch 2.11.0+cu130, 2026-12-08" in block
    assert "36 layers (extrapolated) 5.00 s" in block and "math: OutOfMemoryError" in block
    assert "768 frames of B14's 30-minute 720p30 H.264" in block and "20.0 CPU-s per GPU-s" in block
    assert "not run: sft_plain_4 (10 s of the budget left, needs ~60 s)" in block
    assert "gpu" in update_readme.block_names((REPO / "README.md").read_text())


@pytest.mark.slow
@pytest.mark.heavy
def test_the_whole_dry_run_in_fresh_processes_as_on_the_device(tmp_path):
    out = tmp_path / "out"
    done = run_script(tmp_path, "--dry_run", "true", "--fresh", "true", wheels=fake_wheel(tmp_path / "w").parent,
                      out=out, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    record = json.loads((out / "gpu.json").read_text())
    assert [p["status"] for p in record["parts"].values()] == ["ok"] * 7
    assert set(record["summary"]["sft"]) == {"zero3", "plain"} and set(record["summary"]["scoring"]) == {
        "stage1", "verifier"}
