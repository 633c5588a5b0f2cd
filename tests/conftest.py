"""Session-wide fixtures: the tiny offline Qwen3-VL and small synthetic videos (built once per test session)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

# Tests never reach a hub: everything they load is built here.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """An HF folder with the tiny random-weight Qwen3-VL, its processor and chat template."""
    from cader.dev.tiny import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny_model") / "model", seed=0)


def write_barcode_video(path, n_frames: int, fps: float, width: int = 64, height: int = 48) -> None:
    """A video whose frame k encodes k in its pixels: four horizontal bands hold the base-8 digits of k as grey
    levels 32*digit, so a decoded frame tells its own index (robust to codec error at these flat levels)."""
    import av

    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=int(fps) if float(fps).is_integer() else fps)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        stream.options = {"qscale": "1"}
        for k in range(n_frames):
            img = np.zeros((height, width, 3), np.uint8)
            for band in range(4):
                img[band * height // 4 : (band + 1) * height // 4] = 32 * ((k // 8**band) % 8)
            for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def read_barcode(frame: np.ndarray) -> int:
    h = frame.shape[0]
    digits = [int(round(frame[b * h // 4 + 2 : (b + 1) * h // 4 - 2].mean() / 32)) for b in range(4)]
    return sum(d * 8**b for b, d in enumerate(digits))


@pytest.fixture(scope="session")
def barcode_video(tmp_path_factory):
    """60 s at 10 fps (600 frames), each frame readable back to its index with `read_barcode`."""
    path = tmp_path_factory.mktemp("videos") / "barcode.mp4"
    write_barcode_video(path, n_frames=600, fps=10)
    return path


def write_coded_video(path, encoder, options, n_frames=240, rate=24, durations_ms=None, container_options=None):
    """A 64x48 test video whose frames all differ. `durations_ms`: how long each frame is shown (variable frame
    rate, timestamps in milliseconds) instead of 1/rate; `container_options`: the muxer's (e.g. {"live": "1"})."""
    from fractions import Fraction

    import av

    with av.open(str(path), "w", options=container_options or {}) as container:
        try:
            stream = container.add_stream(encoder, rate=rate)
        except ValueError as err:  # UnknownCodecError: an encoder this PyAV build lacks
            pytest.skip(f"no {encoder} encoder: {err}")
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        if durations_ms is not None:
            stream.codec_context.time_base = Fraction(1, 1000)
        stream.options = options
        pts = 0
        for k in range(n_frames):
            img = np.zeros((48, 64, 3), np.uint8)
            img[:, : (k % 64)] = (7 * k) % 256
            img[:8, :8] = (13 * k) % 256
            frame = av.VideoFrame.from_ndarray(img, format="rgb24")
            if durations_ms is not None:
                frame.pts, frame.time_base = pts, Fraction(1, 1000)
                pts += int(durations_ms[k])
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def sequential_decode(path) -> np.ndarray:
    """Ground truth: every frame in presentation order, from one decode of the whole video stream (the one FFmpeg
    picks as best, as decord does)."""
    import av

    with av.open(str(path)) as container:
        return np.stack([f.to_ndarray(format="rgb24") for f in container.decode(container.streams.best("video"))])


def readme_main_job() -> str:
    """The README's third command (the main job: SFT of the tiny model on the synthetic mix), exactly as README.md shows it."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    block = readme.split("```bash\n", 1)[1].split("```", 1)[0].splitlines()
    if len(block) < 3 or "train/sft.py" not in block[2]:
        raise AssertionError(f"README.md's first bash block no longer ends with the main job: {block}")
    return block[2]


class _ShippedRun:
    """The README's main job, started in the background as soon as the session knows a test needs it, so that
    its training (the most expensive step of the suite) overlaps the tests that run before those that use it."""

    def __init__(self):
        self.proc = None
        self.workdir = None
        self.log = None

    def start(self) -> None:
        if self.proc is not None:
            return
        self.workdir = Path(tempfile.mkdtemp(prefix="cader-shipped-run-"))
        self.log = self.workdir / "main_job.log"
        repo = Path(__file__).resolve().parents[1]
        # the README line names its scripts relative to the repository and its outputs relative to the working
        # directory; `python` must be this interpreter
        command = readme_main_job().replace("python scripts/", f"python {repo}/scripts/").replace(
            "python train/", f"python {repo}/train/").replace("configs/train/", f"{repo}/configs/train/")
        env = {**os.environ, "PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")}
        # one core for the training, the rest for the tests that run meanwhile: two torch thread pools spinning on
        # the same cores slow both several times over (measured on 2 cores: 16 training steps a minute, not ~160)
        threads = str(max(1, (os.cpu_count() or 2) // 2))
        env.update(OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
        with open(self.log, "wb") as log:
            # a session of its own, so that stopping it stops the three commands' processes too
            self.proc = subprocess.Popen(["bash", "-c", command], cwd=self.workdir, env=env, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        # pytest_sessionfinish stops the job, but not when pytest itself is killed (SIGKILL, a CI timeout): a
        # watchdog outside both stops the job's group once this interpreter is gone, and ends with the job
        watch = (f"while kill -0 {os.getpid()} 2>/dev/null && kill -0 -{self.proc.pid} 2>/dev/null; do sleep 2; done; "
                 f"kill -9 -{self.proc.pid} 2>/dev/null; true")
        subprocess.Popen(["sh", "-c", watch], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)

    def wait(self):
        self.start()
        rc = self.proc.wait(timeout=3600)
        if rc != 0:
            tail = self.log.read_text(encoding="utf-8", errors="replace")[-4000:]
            pytest.fail(f"the README's main job exited {rc} in {self.workdir}:\n{tail}")
        return self.workdir

    def stop(self, remove: bool) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if remove and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


_SHIPPED = _ShippedRun()


def pytest_itemcollected(item):
    """A test of the README's main job (the `shipped_tiny_run` fixture: the miniature trained from scratch, about a
    quarter of an hour of one core) belongs to the heavy tier wherever it is written. Marked as it is collected,
    before `-m` deselects."""
    if "shipped_tiny_run" in getattr(item, "fixturenames", ()):
        item.add_marker(pytest.mark.heavy)


@pytest.hookimpl(trylast=True)   # after `-m`/`-k` deselection: a session that runs none of them starts nothing
def pytest_collection_modifyitems(session, config, items):
    """Tests that need the shipped run go last, and the run starts now, while the others execute."""
    needs = [item for item in items if "shipped_tiny_run" in getattr(item, "fixturenames", ())]
    if needs and not config.option.collectonly:
        items[:] = [item for item in items if item not in needs] + needs
        _SHIPPED.start()


def pytest_sessionfinish(session, exitstatus):
    _SHIPPED.stop(remove=exitstatus == 0)


@pytest.fixture(scope="session")
def shipped_tiny_run():
    """The README's main job as shipped (tiny model, default synthetic data, `train/sft.py --config
    configs/train/cot_mix_tiny.yaml`), run once per session in a folder of its own whose `runs/tiny/` holds model,
    data and sft/export, laid out as `scripts/quickstart.sh` expects. The slow tests that need a trained miniature
    share it. The run starts in the background at collection (`pytest_collection_modifyitems`); this waits for it."""
    return _SHIPPED.wait()
