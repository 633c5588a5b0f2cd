"""Decoded-frame cache for training: each video sample's frames, already at its pixel budget, decoded once.

An exact decode at 1 fps must decode most frames of a clip to return one in thirty (see `cader.vlm.video`), and
training repeats that for every epoch and every run on the same mix. The cache keeps what the decode returns for one
video and one training sampling (`training_frames`: rate, frame count, pixel budget): the uint8 frames in a `.npy`
file (memory-mappable), their timestamps, frame indices and native rate in a `.json` file beside it. A hit reads
the file instead of opening and decoding the video, and gives the same bytes and the same timestamps.

The key is a hash of the media file's absolute path, size and modification time, the sampling settings, and what
makes the pixels (this cache's format, PyAV's FFmpeg libraries, torch, whose resize shrinks the frames): a changed
file, setting or library misses instead of serving stale frames. Entries are written with a temporary file and a
rename, the `.json` last, so DataLoader workers and ranks that fill the same entry at once never leave a torn one.

The `.json` also holds a checksum of the pixel bytes (BLAKE2b), checked on every read along with the `.npy` header
and size against the `.json`'s shape and dtype: a damaged entry (an empty or cut `.npy`, a `.json` that is not this
format's, flipped pixel bytes) is never served and never stops training. It is a miss: counted (`CacheStats.damaged`
and `misses`), named once in the log with why, decoded again and written over.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from cader.vlm.sampling import frames_at_rate
from cader.vlm.video import Frames, VideoReader

log = logging.getLogger(__name__)

# bump when what an entry holds, or how the frames are made, changes (2: the pixels' checksum in the `.json`). The
# format is part of the key, so a bump leaves the older entries unread (delete them to free their disk).
CACHE_FORMAT = 2
METADATA_FIELDS = ("format", "shape", "dtype", "pixels_blake2b", "timestamps", "indices", "native_fps")


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
    damaged: int = 0  # entries found damaged: each is also a miss, decoded and written again

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
        self._reported: set[str] = set()  # damaged files already named in the log

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
        """The cached frames of `key`, or None when there is no whole entry. A damaged entry is None too, counted and
        named in the log (once): the caller decodes and writes it again."""
        pixels, meta = self._files(key)
        try:
            entry = _read_metadata(meta)
            if entry is None:  # no entry, or one whose pixels are still being written
                return None
            frames = _read_pixels(pixels, entry, verify=True)
        except DamagedEntry as damage:
            self._report(damage)
            return None
        return Frames(frames, entry.timestamps, entry.indices, entry.native_fps)

    def put(self, key: str, frames: Frames, source: str | os.PathLike) -> int:
        """Store `frames` under `key`; returns the bytes written. The pixels go first and the metadata (with the
        pixels' checksum) last, each by rename, so a reader sees a whole entry or none."""
        pixels, meta = self._files(key)
        pixels.parent.mkdir(parents=True, exist_ok=True)
        array = np.ascontiguousarray(frames.frames)
        _save_atomic(pixels, lambda handle: np.save(handle, array, allow_pickle=False))
        info = {"format": CACHE_FORMAT, "source": str(source), "shape": list(array.shape), "dtype": str(array.dtype),
                "pixels_blake2b": pixels_checksum(array),
                # repr-exact floats: the timestamps read back are the decoded ones, bit for bit
                "timestamps": [float(t) for t in frames.timestamps], "indices": [int(i) for i in frames.indices],
                "native_fps": float(frames.native_fps)}
        text = json.dumps(info).encode()
        _save_atomic(meta, lambda handle: handle.write(text))
        return pixels.stat().st_size + len(text)

    def frames(self, path: str | os.PathLike, sampling: TrainingSampling) -> Frames:
        """The training frames of `path`: from the cache, else (no entry, or a damaged one) decoded and stored over
        it (a failed store only warns: the cache speeds training up, it never stops it)."""
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
        """Whether a whole entry is stored under `key`: its `.json` is this format's and the `.npy` header and size
        agree with it. The pixels are not read (a resumed fill checks thousands of entries): their checksum is
        checked by `get`, on every read."""
        pixels, meta = self._files(key)
        try:
            entry = _read_metadata(meta)
            if entry is None:
                return False
            _read_pixels(pixels, entry, verify=False)
        except DamagedEntry:
            return False  # the fill decodes it again; `get` names the damage then
        return True

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

    def _report(self, damage: DamagedEntry) -> None:
        """Count a damaged entry; name it in the log the first time this cache meets it."""
        with self._lock:
            self.stats.damaged += 1
            first = str(damage.path) not in self._reported
            self._reported.add(str(damage.path))
        if first:
            log.warning("frame cache: damaged entry %s (%s); a miss: decoded again and written over", damage.path,
                        damage.reason)


class DamagedEntry(Exception):
    """A stored entry that must not be served: `path` is its damaged file, `reason` says how."""

    def __init__(self, path: Path, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


@dataclass(frozen=True)
class _Metadata:
    """What an entry's `.json` promises about its `.npy`, and the frames' times."""

    shape: tuple[int, ...]
    pixels_blake2b: str
    timestamps: np.ndarray
    indices: np.ndarray
    native_fps: float


def pixels_checksum(frames: np.ndarray) -> str:
    """The checksum an entry keeps of its pixel bytes (C order)."""
    return hashlib.blake2b(np.ascontiguousarray(frames).data, digest_size=16).hexdigest()


def _read_metadata(meta: Path) -> _Metadata | None:
    """The `.json` of an entry, checked field by field; None when there is none. Raises DamagedEntry."""
    try:
        text = meta.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as err:
        raise DamagedEntry(meta, f"unreadable: {err}") from None
    try:
        info = json.loads(text)
    except ValueError as err:  # also a file that is not UTF-8
        raise DamagedEntry(meta, f"not JSON: {err}") from None
    if not isinstance(info, dict):
        raise DamagedEntry(meta, f"a JSON {type(info).__name__}, not an object")
    if info.get("format") != CACHE_FORMAT:
        raise DamagedEntry(meta, f"format {info.get('format')!r}, not {CACHE_FORMAT}")
    missing = [name for name in METADATA_FIELDS if name not in info]
    if missing:
        raise DamagedEntry(meta, f"no {', '.join(missing)}")
    shape = info["shape"]
    if not (isinstance(shape, list) and shape and all(type(n) is int and n >= 0 for n in shape)):
        raise DamagedEntry(meta, f"shape {shape!r} is not a list of sizes")
    if info["dtype"] != "uint8" or not isinstance(info["pixels_blake2b"], str):
        raise DamagedEntry(meta, f"dtype {info['dtype']!r} or checksum {info['pixels_blake2b']!r} is not this "
                                 "format's")
    try:
        timestamps = np.asarray(info["timestamps"], np.float64)
        indices = np.asarray(info["indices"], np.int64)
        native_fps = float(info["native_fps"])
    except (TypeError, ValueError, OverflowError) as err:
        raise DamagedEntry(meta, f"timestamps, indices or native_fps are not numbers: {err}") from None
    if not (math.isfinite(native_fps) and native_fps > 0):
        raise DamagedEntry(meta, f"native_fps {native_fps} is not a frame rate")
    if timestamps.shape != (shape[0],) or indices.shape != (shape[0],):
        raise DamagedEntry(meta, f"{timestamps.shape} timestamps and {indices.shape} indices for {shape[0]} frames")
    return _Metadata(tuple(shape), info["pixels_blake2b"], timestamps, indices, native_fps)


def _read_pixels(pixels: Path, entry: _Metadata, verify: bool) -> np.ndarray | None:
    """The frames of an entry's `.npy` once its header, size and (`verify`) checksum match `entry`; with `verify`
    off, only the header and size are checked and nothing is returned. Raises DamagedEntry."""
    expected = math.prod(entry.shape)  # uint8: one byte an element
    try:
        with open(pixels, "rb") as handle:
            version = np.lib.format.read_magic(handle)
            if version not in ((1, 0), (2, 0)):
                raise DamagedEntry(pixels, f".npy version {version}, not one np.save writes for these frames")
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            shape, fortran_order, dtype = read_header(handle)
            if tuple(shape) != entry.shape or dtype != np.uint8 or fortran_order:
                raise DamagedEntry(pixels, f"holds {dtype} {tuple(shape)}{' (Fortran order)' * fortran_order}, "
                                           f"its .json says uint8 {entry.shape}")
            size = os.fstat(handle.fileno()).st_size
            if size != handle.tell() + expected:
                raise DamagedEntry(pixels, f"{size} bytes, not the {handle.tell() + expected} of its header and "
                                           "shape")
            if not verify:
                return None
            frames = np.fromfile(handle, np.uint8, count=expected)
    except FileNotFoundError:
        raise DamagedEntry(pixels, "missing, while its .json is there") from None
    except (OSError, ValueError, EOFError) as err:  # an empty or garbled header
        raise DamagedEntry(pixels, f"not a whole .npy file: {err}") from None
    if frames.size != expected:
        raise DamagedEntry(pixels, f"{frames.size} pixel bytes read, {expected} expected")
    if pixels_checksum(frames) != entry.pixels_blake2b:
        raise DamagedEntry(pixels, "its pixel bytes do not match the checksum written with them")
    return frames.reshape(entry.shape)


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
