"""Per video, not per question: a video's questions (and Table 2 variants) share one reader and its decodes.

Long-video benchmarks ask many questions about each video (LVBench about 15), and every question's Stage 1 samples
the same frames (same r1, frame cap and pixel budget). The runner therefore takes the samples video by video
(`group_by_video`) and gives each video one `VideoGroup`: one `VideoReader`, and a memo of its samplings. Each
sample (each variant of a sample, under `--variants`) reads through its own `SampleReader`, a view of the group
that a `VideoReader` caller cannot tell apart from the reader itself.

What is kept, and for how long:
- whole-video samplings (F1 of each frame setting, or the whole-video decode of F1 and the r1 lattice that the RGR
  contexts are taken from, `cader.evaluate.method.whole_video`): for the whole group;
- windowed samplings and frame lists (Stage-2 crops, RGR contexts): in the group too, shared when requested twice,
  but only the most recently used up to `stage2_bytes` of pixels (a sample in flight keeps its own alive anyway);
- a group is closed (its frames dropped) as soon as its last sample is done: one group per sample in flight.

Cost attribution (`SampleReader.frames_shared`): a record's `cost.frames_decoded` stays what the question costs
alone, as the method counts it (so full / uniform_stage2 ratios and the paper's Table 3 figures mean the same in a
grouped run); `cost.frames_shared` says how many of those frames it took from its video group instead of decoding
them. Each decode is paid by exactly one record, the first in processing order among those that asked for that very
decode, so the frames a run actually decoded are sum(frames_decoded - frames_shared). The first in order, not the
first in time: with samples in flight the same record pays whatever thread happened to decode first. F1 is never
dropped within a group, so its attribution is the same on every run; a windowed sampling dropped for the byte budget
is decoded again, and paid again, by the next to ask, which with samples in flight can depend on timing (the sum
stays exact). A rerun after an interruption pays again for what it decodes again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field

from cader.vlm.video import Frames, VideoReader


def group_by_video(samples: Iterable, key: Callable) -> list[list]:
    """The samples in groups of one video: groups in order of each video's first sample, samples in their order.

    Args:
        samples: Benchmark samples.
        key: sample -> the identity of its video (its resolved path).
    """
    groups: dict[Hashable, list] = {}
    for sample in samples:
        groups.setdefault(key(sample), []).append(sample)
    return list(groups.values())


@dataclass(eq=False)
class _Entry:
    """One distinct sampling of the group's video: decoded once, asked for by `requesters` ((*position, seq))."""

    pinned: bool
    n: int = 0
    nbytes: int = 0
    frames: Frames | None = None
    error: Exception | None = None
    ready: threading.Event = field(default_factory=threading.Event)
    requesters: list[tuple] = field(default_factory=list)


class VideoGroup:
    """One video's reader and memo of samplings, for the samples of one group; thread-safe.

    The reader is opened on first use; an open that fails is kept and raised to every sample that reads (each
    records `video_unreadable` as it would alone, and the file is tried once).
    """

    def __init__(self, path, decode_workers: int | None = None, work=None, stage2_bytes: int = 0,
                 opener: Callable = VideoReader):
        """Args:
            path: The video file.
            decode_workers: Parallel decoders of the reader (`VideoReader`).
            work: A `cader.evaluate.variants.SharedWork` counting frames decoded and asked for (or None).
            stage2_bytes: Pixel bytes of windowed samplings (crops, RGR contexts) kept for later requests.
            opener: Makes the reader (`VideoReader`; tests count opens through it).
        """
        self.path, self.decode_workers, self.work, self.stage2_bytes = path, decode_workers, work, stage2_bytes
        self._opener, self._reader, self._open_error, self._opened = opener, None, None, False
        self._entries: OrderedDict[tuple, _Entry] = OrderedDict()
        self._lock = threading.Lock()
        self.closed = False

    def reader(self):
        """The group's VideoReader (opened once); raises the open's error on every call when it failed."""
        with self._lock:
            if not self._opened:
                self._opened = True
                try:
                    self._reader = self._opener(self.path, decode_workers=self.decode_workers)
                except Exception as err:  # noqa: BLE001 - recorded by each sample as process_sample would alone
                    self._open_error = err
        if self._open_error is not None:
            raise self._open_error
        return self._reader

    def view(self, position: tuple) -> SampleReader:
        """The reader of the sample (variant) at `position` in processing order (tuples compare in that order)."""
        return SampleReader(self, tuple(position))

    def cached_frames(self) -> int:
        """Frames the memo holds now."""
        with self._lock:
            return sum(e.n for e in self._entries.values() if e.frames is not None)

    def get(self, key: tuple, make: Callable[[], Frames], pinned: bool, requester: tuple) -> tuple[_Entry, Frames]:
        """The entry of `key` and its frames, decoded by `make` if no one has; a waiting request decodes again when
        the decode it waited for failed (or was dropped meanwhile)."""
        while True:
            with self._lock:
                entry = self._entries.get(key)
                creator = entry is None
                if creator:
                    entry = self._entries[key] = _Entry(pinned)
                else:
                    self._entries.move_to_end(key)
            if creator:
                try:
                    frames = make()
                except Exception as err:
                    with self._lock:
                        if self._entries.get(key) is entry:
                            del self._entries[key]
                    entry.error = err
                    entry.ready.set()
                    raise
                entry.frames, entry.n, entry.nbytes = frames, len(frames), int(frames.frames.nbytes)
                entry.ready.set()
            else:
                entry.ready.wait()
            with self._lock:
                if not creator:
                    frames = entry.frames
                    if entry.error is not None or frames is None:
                        continue
                entry.requesters.append(requester)
                if self.work is not None:
                    self.work.frames += entry.n if creator else 0
                    self.work.frames_asked += entry.n
                self._trim()
            return entry, frames

    def warm(self, key: tuple, make: Callable[[], Frames], pinned: bool) -> Frames | None:
        """Decode `key` into the memo ahead of the requests for it (`cader.evaluate.in_flight`), as no requester:
        the first sample to ask for it then finds it made and pays for it, in processing order, as if it had
        decoded it itself, so records and `frames_shared` are those of a run without decode-ahead. A failed decode
        is dropped: the sample then decodes itself and records what fails. None when someone made it already."""
        with self._lock:
            if key in self._entries:
                return None
            entry = self._entries[key] = _Entry(pinned)
        try:
            frames = make()
        except Exception as err:  # noqa: BLE001 - the sample meets the error again and records it
            with self._lock:
                if self._entries.get(key) is entry:
                    del self._entries[key]
            entry.error = err
            entry.ready.set()
            return None
        entry.frames, entry.n, entry.nbytes = frames, len(frames), int(frames.frames.nbytes)
        entry.ready.set()
        with self._lock:
            if self.work is not None:
                self.work.frames += entry.n
            self._trim()
        return frames

    def _trim(self) -> None:
        """Drop the least recently used windowed samplings beyond `stage2_bytes` (holders keep theirs alive)."""
        kept = sum(e.nbytes for e in self._entries.values() if not e.pinned and e.ready.is_set())
        for key in [k for k, e in self._entries.items() if not e.pinned and e.ready.is_set()]:
            if kept <= self.stage2_bytes:
                break
            entry = self._entries.pop(key)
            kept -= entry.nbytes
            entry.frames = None

    def paid_by(self, entry: _Entry) -> tuple:
        with self._lock:
            return min(entry.requesters)

    def close(self) -> None:
        """Drop every frame and the reader (the group's last sample is done)."""
        with self._lock:
            for entry in self._entries.values():
                entry.frames = None
            self._entries.clear()
            self._reader, self.closed = None, True


class SampleReader:
    """What one sample (one variant) reads its video through: `VideoReader`'s sampling calls, answered from the
    group's memo, plus everything else of the reader. Keeps the frames it handed out until `release`."""

    def __init__(self, group: VideoGroup, position: tuple):
        self.group, self.position = group, position
        self._requests: list[tuple[_Entry, int]] = []
        self._held: list[Frames] = []

    @property
    def duration(self) -> float:
        return self.group.reader().duration

    def __getattr__(self, name):
        if name.startswith("_"):  # no reader lookups for private names (copy, pickle probe them)
            raise AttributeError(name)
        return getattr(self.group.reader(), name)

    def _sample(self, key: tuple, make: Callable[[], Frames], pinned: bool) -> Frames:
        seq = len(self._requests)
        entry, frames = self.group.get(key, make, pinned, (*self.position, seq))
        self._requests.append((entry, seq))
        self._held.append(frames)
        return frames

    def sample_uniform(self, fps, start=None, end=None, max_frames=None, max_pixels=None,
                       rule: str = "bin_centre") -> Frames:
        key = ("uniform", float(fps), start, end, max_frames, max_pixels, rule)
        reader = self.group.reader()
        return self._sample(key, lambda: reader.sample_uniform(fps, start=start, end=end, max_frames=max_frames,
                                                                max_pixels=max_pixels, rule=rule),
                            pinned=start is None and end is None)

    def sample_grid(self, r1, max_frames=None, max_pixels=None, rule: str = "bin_centre") -> Frames:
        """The video's one whole-video decode (F1 and the r1 lattice, `cader.vlm.frame_grid`): kept for the group."""
        key = ("grid", float(r1), max_frames, max_pixels, rule)
        reader = self.group.reader()
        return self._sample(key, lambda: reader.sample_grid(r1, max_frames, max_pixels, rule), pinned=True)

    def sample_times(self, times: Sequence[float], max_pixels=None) -> Frames:
        key = ("times", tuple(float(t) for t in times), max_pixels)
        reader = self.group.reader()
        return self._sample(key, lambda: reader.sample_times(times, max_pixels=max_pixels), pinned=False)

    def release(self) -> None:
        """The sample is done: its frames may go (the group keeps what its memo keeps)."""
        self._held.clear()

    def frames_shared(self) -> int:
        """Frames this sample took from the group instead of decoding: those of each request that was not the first,
        in processing order, of the requests of its decode. Final once every earlier position is done."""
        return sum(entry.n for entry, seq in self._requests
                   if self.group.paid_by(entry) != (*self.position, seq))


class _AheadReader(SampleReader):
    """A reader whose samplings warm the group's memo (`VideoGroup.warm`) instead of asking as a sample."""

    def _sample(self, key: tuple, make: Callable[[], Frames], pinned: bool):
        frames = self.group.warm(key, make, pinned)
        return () if frames is None else frames   # made by someone else already: nothing to hand back


class GroupsInFlight:
    """The video groups of a run: samples in group order (`order`), each group opened by its first sample and closed
    when its last one is done, so only groups with a sample in flight hold frames; thread-safe.

    Use: `view = groups.acquire(sample)`, read the video through `view`, then `view.release()` and
    `groups.release(sample)`; once every sample before it is done, `view.frames_shared()` is final.
    """

    def __init__(self, todo: list, video_of: Callable, decode_workers: int | None = None, stage2_bytes: int = 0):
        """Args:
            todo: The samples to run.
            video_of: sample -> its video file (the group key).
            decode_workers: Parallel decoders per reader.
            stage2_bytes: Pixel bytes of windowed samplings each group keeps (`VideoGroup`).
        """
        self.video_of, self.decode_workers, self.stage2_bytes = video_of, decode_workers, stage2_bytes
        grouped = group_by_video(todo, video_of)
        self.order = [s for group in grouped for s in group]
        self._position = {id(s): (i,) for i, s in enumerate(self.order)}
        self._left = {video_of(group[0]): len(group) for group in grouped}
        self._open: dict[str, VideoGroup] = {}
        self._lock = threading.Lock()

    def _group(self, sample) -> VideoGroup:
        video = self.video_of(sample)
        with self._lock:
            if video not in self._open:
                self._open[video] = VideoGroup(video, self.decode_workers, stage2_bytes=self.stage2_bytes)
            return self._open[video]

    def acquire(self, sample) -> SampleReader:
        return self._group(sample).view(self._position[id(sample)])

    def prepare(self, sample, decode: Callable) -> None:
        """Decode ahead, into the sample's video group, what `decode(reader)` samples (e.g. its Stage-1 frames),
        before the sample is in flight: no sample's request, so the cost is attributed as without it
        (`VideoGroup.warm`). The group stays open until the video's last sample is released, as always."""
        decode(_AheadReader(self._group(sample), self._position[id(sample)]))

    def release(self, sample) -> None:
        video = self.video_of(sample)
        with self._lock:
            self._left[video] -= 1
            if self._left[video] == 0:
                self._open.pop(video).close()
