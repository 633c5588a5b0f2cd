"""What several benches set up alike: the tiny model and the synthetic mix in a temporary folder, a video encoded
from generated pictures, and the machine's load average (printed beside timings taken on a shared machine)."""

from __future__ import annotations

import itertools
import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np


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


def encode_video(path: Path, pictures: Iterable[np.ndarray], fps: int, codec: str = "libx264",
                 options: dict | None = None, bit_rate: int | None = None) -> Path:
    """Encode RGB `pictures` (uint8, one size) as a yuv420p video at `fps` with these encoder `options`, written
    under a temporary name and renamed, so that a video at `path` is always whole (benches reuse theirs)."""
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


def load_average() -> str:
    """The 1-, 5- and 15-minute load averages, as /proc/loadavg gives them ("n/a" where there is none)."""
    loadavg = Path("/proc/loadavg")
    return " ".join(loadavg.read_text().split()[:3]) if loadavg.exists() else "n/a"
