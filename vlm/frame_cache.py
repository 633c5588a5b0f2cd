"""Decoded-frame cache for training: each video sample's frames, already at its pixel budget, decoded once.

An exact decode at 1 fps must decode most frames of a clip to return one in thirty (see `cader.vlm.video`), and
training repeats that for every epoch and every run on the same mix. The cache keeps what the decode returns for one
video and one training sampling (`training_frames`: rate, frame count, pixel budget): the uint8 frames in a `.npy`
file (memory-mappable), their timestamps, frame indices and native rate in a `.json` file beside it. A hit reads
the file instead of opening and decoding the video, and gives the same bytes and the same timestamps.

The key is a hash of the media file's absolute path, size and modification time, the sampling settings, and what
makes the pixels (this cache's format, PyAV's FFmpeg libraries, torch, whose resize shrinks the frames): a changed
file, setting or library misses instead of serving stale frames. Entries are written with a temporary file and a
rename, the `.json` last, so DataLoader workers and ranks that fill the same entry at once never leave a torn one;
an entry that cannot be read is a miss and is written again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from cader.vlm.sampling import frames_at_rate
from cader.vlm.video import Frames, VideoReader

log = logging.getLogger(__name__)

CACHE_FORMAT = 1  # bump when what an entry holds, or how the frames are made, changes


@dataclass(frozen=True)
class TrainingSampling:
    """How training samples one video: `frames` frames at `fps` (fewer on a short video, see `training_frames`),
    each resized to at most `max_pixels` (None: the decoded size)."""

    fps: float
    frames: int
    max_pixels: int | None


def sample_for_training(reader: VideoReader, sampling: TrainingSampling) -> Frames:
    """The frames training gives the model: constant-rate sampling at `fps`, capped uniformly at `frames`; a video
    too short for `frames` frames at that rate gets `frames` frames spread evenly over it instead, so that it still
    fills the temporal groups the token budget planned."""
    if frames_at_rate(0.0, reader.duration, sampling.fps) >= sampling.frames:
        return reader.sample_uniform(sampling.fps, max_frames=sampling.frames, max_pixels=sampling.max_pixels)
    return reader.sample_count(sampling.frames, max_pixels=sampling.max_pixels)


def pixel_libraries() -> dict:
    """The versions of what turns a video file into the cached bytes: FFmpeg (decode, colour conversion) and
    torch (the resize)."""
    import av
    import torch

    libraries = getattr(av, "library_versions", {}) or {}
    return {"pyav": av.__version__, "torch": torch.__version__,
            **{name: ".".join(map(str, libraries[name])) for name in ("libavcodec", "libswscale") if name in libraries}}


@dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0
    bytes_written: int = 0
    write_errors: int = 0

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class FrameCache:
    """A folder of decoded training samplings, shared by every epoch, worker and rank that sees it. A miss is
    decoded on `decode_workers` parallel decoders (None: `cader.vlm.video.default_decode_workers`)."""

    root: Path
    decode_workers: int | None = None
    stats: CacheStats = field(default_factory=CacheStats)

    def __post_init__(self):
        self.root = Path(self.root)
        self._libraries = pixel_libraries()
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:  # DataLoader workers started with spawn receive a pickled copy
        return {k: v for k, v in self.__dict__.items() if k != "_lock"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def key(self, path: str | os.PathLike, sampling: TrainingSampling) -> str:
        """The entry name of this video file, as it is now, under this sampling."""
        path = Path(path).resolve()
        status = path.stat()
        identity = {"format": CACHE_FORMAT, "path": str(path), "size": status.st_size, "mtime_ns": status.st_mtime_ns,
                    "fps": float(sampling.fps), "frames": int(sampling.frames), "max_pixels": sampling.max_pixels,
                    "libraries": self._libraries}
        return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()

    def _files(self, key: str) -> tuple[Path, Path]:
        folder = self.root / key[:2]  # a fan-out folder: some 200K samples do not land in one directory
        return folder / f"{key}.npy", folder / f"{key}.json"

    def get(self, key: str) -> Frames | None:
        """The cached frames of `key`, or None when there is no whole entry."""
        pixels, meta = self._files(key)
        try:
            info = json.loads(meta.read_text())
            frames = np.load(pixels, allow_pickle=False)
        except (OSError, ValueError):  # absent, being replaced, or damaged: a miss, written again
            return None
        if info.get("format") != CACHE_FORMAT or list(frames.shape) != info["shape"] or frames.dtype != np.uint8:
            return None
        return Frames(frames, np.asarray(info["timestamps"], np.float64), np.asarray(info["indices"], np.int64),
                      float(info["native_fps"]))

    def put(self, key: str, frames: Frames, source: str | os.PathLike) -> int:
        """Store `frames` under `key`; returns the bytes written. The pixels go first and the metadata last, each
        by rename, so a reader sees a whole entry or none."""
        pixels, meta = self._files(key)
        pixels.parent.mkdir(parents=True, exist_ok=True)
        _save_atomic(pixels, lambda handle: np.save(handle, np.ascontiguousarray(frames.frames), allow_pickle=False))
        info = {"format": CACHE_FORMAT, "source": str(source), "shape": list(frames.frames.shape),
                # repr-exact floats: the timestamps read back are the decoded ones, bit for bit
                "timestamps": [float(t) for t in frames.timestamps], "indices": [int(i) for i in frames.indices],
                "native_fps": float(frames.native_fps)}
        text = json.dumps(info).encode()
        _save_atomic(meta, lambda handle: handle.write(text))
        return pixels.stat().st_size + len(text)

    def frames(self, path: str | os.PathLike, sampling: TrainingSampling) -> Frames:
        """The training frames of `path`: from the cache, else decoded and stored (a failed store only warns:
        the cache speeds training up, it never stops it)."""
        key = self.key(path, sampling)
        cached = self.get(key)
        if cached is not None:
            self._count(hits=1)
            return cached
        frames = sample_for_training(VideoReader(path, decode_workers=self.decode_workers), sampling)
        try:
            written = self.put(key, frames, path)
            self._count(misses=1, bytes_written=written)
        except OSError as err:  # a full or read-only disk
            self._count(misses=1, write_errors=1)
            if self.stats.write_errors == 1:
                log.warning("frame cache %s: cannot write (%s); decoding without it", self.root, err)
        return frames

    def contains(self, key: str) -> bool:
        """Whether a whole entry is stored under `key` (without reading its pixels)."""
        pixels, meta = self._files(key)
        return meta.is_file() and pixels.is_file()

    def fill(self, path: str | os.PathLike, sampling: TrainingSampling) -> int:
        """Decode and store the training frames of `path` unless they are stored already; the bytes written."""
        if self.contains(self.key(path, sampling)):
            return 0
        before = self.stats.bytes_written
        self.frames(path, sampling)
        return self.stats.bytes_written - before

    def _count(self, **deltas: int) -> None:
        with self._lock:
            for name, delta in deltas.items():
                setattr(self.stats, name, getattr(self.stats, name) + delta)


def _save_atomic(path: Path, write) -> None:
    """Call `write(handle)` on a temporary file next to `path`, then rename it to `path`."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def training_frames(path: str | os.PathLike, sampling: TrainingSampling, cache: FrameCache | None = None) -> Frames:
    """The frames training gives the model for the video at `path`: through `cache` when there is one."""
    if cache is None:
        return sample_for_training(VideoReader(path), sampling)
    return cache.frames(path, sampling)


def fill_in_worker(root: str, job: tuple[str, TrainingSampling]) -> tuple[str, int]:
    """`FrameCache(root).fill(*job)` for a pool of worker processes, one decoder each: ("written" | "present" |
    "failed: <path>: <reason>", bytes written). A video that cannot be decoded is reported, not raised: training
    skips it as it always did."""
    path, sampling = job
    try:
        written = FrameCache(root, decode_workers=1).fill(path, sampling)
    except Exception as err:  # noqa: BLE001 -- one bad video must not stop a fill of thousands
        return f"failed: {path}: {str(err).splitlines()[0][:200]}", 0
    return ("written" if written else "present"), written
