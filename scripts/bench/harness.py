"""What the benches share: a function run in a fresh interpreter, the result printed and written, this process's
memory, the tiny model and the synthetic mix, generated videos and samples, the machine's load average (printed
beside timings taken on a shared machine), and the vLLM children's environment.

The memory benches measure what a new process costs, and the vLLM side of the parity bench runs under the
interpreter vLLM is installed in, so those run one function in a fresh interpreter, a jsonargparse function CLI like
every other script (`command()` builds its command line, so no caller hand-rolls an argv protocol of its own):

    python -m cader.scripts.bench.harness --function cader.scripts.bench.mix_memory:measure \
        --kwargs '{"way": "arrow", ...}' [--out result.json]
"""

from __future__ import annotations

import importlib
import itertools
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MEDIA_DIR = Path(tempfile.gettempdir()) / "cader_bench_media"  # videos written once and reused across runs
DEFAULT_VLLM_PYTHON = str(REPO / ".venv-vllm" / "bin" / "python")
CPU_ENGINE_ARGS = "--vllm_main.enforce_eager true --vllm_main.max_model_len 4096"


def emit(result: dict, json_out: str | None = None) -> dict:
    """Print `result` as JSON, write it to `json_out` too when given, and return it."""
    text = json.dumps(result, indent=2)
    print(text)
    if json_out:
        Path(json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(json_out).write_text(text + "\n")
    return result


# ---- one function in a fresh interpreter ----

def command(function: str, kwargs: dict, python: str = sys.executable, out: str | None = None) -> list[str]:
    """The command line that calls `function` (`package.module:name`, importable in `python`) with `kwargs`
    (JSON-serialisable) in a fresh `python`; the child writes the JSON result to `out` (None: its last line of
    stdout)."""
    if ":" not in function or function.startswith("__main__:"):
        raise ValueError(f"{function!r}: give the function as importable_module:name")
    line = [python, "-m", "cader.scripts.bench.harness", "--function", function, "--kwargs", json.dumps(kwargs)]
    return line + (["--out", out] if out else [])


def call(function: str, kwargs: str = "{}", out: str | None = None) -> None:
    """Call a function with keyword arguments and hand back its JSON result.

    Args:
        function: The function as importable_module:name.
        kwargs: A JSON object of its keyword arguments.
        out: Write the result here, atomically (default: print it as the last line of stdout).
    """
    module, name = function.split(":", 1)
    result = getattr(importlib.import_module(module), name)(**json.loads(kwargs))
    if out:
        from cader.vlm.files import write_json_atomic

        write_json_atomic(out, result)
    else:
        print(json.dumps(result))


class FreshProcessError(RuntimeError):
    """A fresh process that failed: its exit status and the last 40 lines of its output."""

    def __init__(self, function: str, returncode: int, output: str):
        self.returncode, self.tail = returncode, output.strip().splitlines()[-40:]
        super().__init__(f"{function} failed (exit {returncode}):\n" + "\n".join(self.tail))


class Fresh:
    """`function(**kwargs)` started at once in a fresh interpreter (`command`) and a process group of its own, so
    that the caller works meanwhile, its output to `log` (default: a temporary file). `result()` waits for the
    function's JSON result: FreshProcessError when it failed, subprocess.TimeoutExpired past `timeout`; the child
    and whatever it started are stopped either way (`stop()`)."""

    def __init__(self, function: str, kwargs: dict, python: str = sys.executable, env: dict | None = None,
                 cwd: str | Path | None = None, log: Path | None = None):
        self.function, self._tmp = function, tempfile.TemporaryDirectory(prefix="bench_fresh_")
        self.out, self.log = Path(self._tmp.name) / "result.json", log or Path(self._tmp.name) / "output.log"
        with self.log.open("w") as output:
            self.process = subprocess.Popen(command(function, kwargs, python, str(self.out)), env=env, cwd=cwd,
                                            stdout=output, stderr=subprocess.STDOUT, start_new_session=True)

    def result(self, timeout: float | None = None) -> dict:
        try:
            self.process.wait(timeout)
            if self.process.returncode != 0 or not self.out.exists():
                raise FreshProcessError(self.function, self.process.returncode, self.log.read_text())
            return json.loads(self.out.read_text())
        finally:
            self.stop()

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, 9)  # the child and what it started: the process group it leads
            self.process.wait()
        self._tmp.cleanup()


def run_fresh(function: str, kwargs: dict, env: dict | None = None, timeout: float | None = None) -> dict:
    """`function(**kwargs)`'s JSON result from a fresh interpreter (`Fresh`), waited for."""
    return Fresh(function, kwargs, env=env).result(timeout)


# ---- memory of this process ----

def status_kib(field: str) -> int:
    """A field of /proc/self/status in KiB (VmRSS, VmHWM, RssAnon, ...)."""
    text = Path("/proc/self/status").read_text()
    return int(re.search(rf"^{field}:\s+(\d+) kB", text, re.MULTILINE).group(1))


class Sampler:
    """`sample()` every `period_s` on a thread while inside: `series`, (time.perf_counter(), value) pairs."""

    def __init__(self, sample, period_s: float):
        self.sample, self.period_s, self.series = sample, period_s, []
        self._stop, self._thread = threading.Event(), threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.series.append((time.perf_counter(), self.sample()))
            self._stop.wait(self.period_s)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


class PeakRSS:
    """The highest resident set since `start()`: the kernel's high-water mark after resetting it, or (where the
    reset is not allowed) VmRSS sampled every millisecond."""

    def __init__(self):
        self._sampler = None

    def start(self) -> bool:
        """Reset the mark; False when the kernel refused and VmRSS is sampled instead."""
        try:
            Path("/proc/self/clear_refs").write_text("5")      # resets VmHWM to the current VmRSS
            return True
        except OSError:
            self._sampler = Sampler(lambda: status_kib("VmRSS"), 0.001).__enter__()
            return False

    def stop(self) -> int:
        """Peak resident bytes since start()."""
        if self._sampler is None:
            return status_kib("VmHWM") * 1024
        self._sampler.__exit__()
        return max([kib for _, kib in self._sampler.series] + [status_kib("VmRSS")]) * 1024


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages, as /proc/loadavg gives them ("n/a" where there is none)."""
    loadavg = Path("/proc/loadavg")
    return " ".join(loadavg.read_text().split()[:3]) if loadavg.exists() else "n/a"


# ---- inputs ----

@contextmanager
def tiny_inputs(model_dir: str | None, train_dir: str | None, prefix: str, **counts) -> Iterator[tuple]:
    """(model folder, training-mix folder, temporary folder): the given folders, else a fresh tiny model and the
    synthetic mix (`cader.dev.synthetic.dataset.Counts` fields as `counts`) written into the temporary folder,
    which is removed afterwards."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        tmp = Path(tmp)
        if model_dir is None:
            from cader.dev.tiny import make_tiny_model

            model_dir = str(make_tiny_model(tmp / "model"))
        if train_dir is None:
            from cader.dev.synthetic.dataset import Counts, make_synthetic_data

            make_synthetic_data(tmp / "data", counts=Counts(**{"n_eval": 1, "n_heldout": 1, **counts}))
            train_dir = tmp / "data" / "train"
        yield model_dir, Path(train_dir), tmp


def mix_sources(train_dir: Path, mix=None) -> list:
    """The `Source`s of the synthetic mix (`mix`: (name, format, file) rows, default all) found in `train_dir`."""
    from cader.dev.synthetic.train_mix import SYNTHETIC_MIX
    from cader.train.datamodule import Source

    return [Source(name, fmt, str(train_dir / file)) for name, fmt, file in (mix or SYNTHETIC_MIX)
            if (train_dir / file).exists()]


def write_qwen3vl(out_dir: str | Path, text: dict, vision: dict, mrope_section: list[int], dtype=None,
                  device: str = "cpu", seed: int = 0) -> int:
    """A random Qwen3-VL with the tiny model's tokenizer, processor and structure (`cader.dev.tiny`) and these
    text_config / vision_config fields, saved in `dtype` (default float32) with the processor; its tensor bytes."""
    import torch
    from cader.dev.tiny import build_processor, build_tokenizer, tiny_config
    from transformers import Qwen3VLForConditionalGeneration

    tokenizer = build_tokenizer()
    config = tiny_config(tokenizer)
    for part, fields in ((config.text_config, text), (config.vision_config, vision)):
        for key, value in fields.items():
            setattr(part, key, value)
    config.text_config.rope_parameters["mrope_section"] = mrope_section
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen3VLForConditionalGeneration(config).to(dtype or torch.float32)
    model.save_pretrained(out_dir)
    build_processor(tokenizer).save_pretrained(out_dir)
    return sum(t.numel() * t.element_size() for t in model.state_dict().values())


def encode_video(path: Path, pictures: Iterable, fps: int, codec: str = "libx264",
                 options: dict | None = None, bit_rate: int | None = None) -> Path:
    """Encode RGB `pictures` (uint8 arrays, one size) as a yuv420p video at `fps` with these encoder `options`,
    written under a temporary name and renamed, so that a video at `path` is always whole (benches reuse theirs)."""
    import av

    pictures = iter(pictures)
    first = next(pictures)
    partial = path.with_name(f".{path.name}.{os.getpid()}.tmp{path.suffix}")
    with av.open(str(partial), "w") as container:
        stream = container.add_stream(codec, rate=fps)
        (stream.height, stream.width), stream.pix_fmt = first.shape[:2], "yuv420p"
        if bit_rate is not None:
            stream.bit_rate = bit_rate
        stream.codec_context.options = options or {}
        for picture in itertools.chain([first], pictures):
            for packet in stream.encode(av.VideoFrame.from_ndarray(picture, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    partial.replace(path)
    return path


def shade_samples(root: Path, n: int) -> list:
    """`n` questions on one video in `root`: 60 s at 4 fps of grey shades, 64x64 (MPEG-4 Part 2)."""
    import numpy as np
    from cader.evaluate.benchmarks.base import Sample

    shades = (np.full((64, 64, 3), (k * 7) % 255, np.uint8) for k in range(240))
    video = encode_video(root / "clip.mp4", shades, 4, codec="mpeg4")
    return [Sample("bench", f"s{i}", video.name, f"Which shade is shown ({i})?", ["dark", "mid", "light", "none"],
                   list("ABCD"), "A", 60.0, {}) for i in range(n)]


def vllm_env() -> dict:
    """The environment of a vLLM child process: engine in-process (no spawn), a small CPU KV cache."""
    env = dict(os.environ)
    env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB; vLLM's CPU default takes a share of the machine's memory
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


if __name__ == "__main__":
    from jsonargparse import CLI

    CLI(call, as_positional=False)
