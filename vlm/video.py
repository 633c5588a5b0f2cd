"""Video reading: open once, sample many times, return exactly the frames asked for with their timestamps.

A `VideoReader` opens a file once and reads its index (`cader.vlm.video_index`: decord's, or PyAV's where decord
cannot read the file; frame count, rate, keyframes, frame times) and serves many samplings of it:
CADER samples the same video several times per question (Stage 1 at 1 fps, then crops and RGR maps in Stage 2).
Every sampling method reduces to sorted unique frame indices (see `cader.vlm.sampling`, `cader.vlm.frame_grid` and
`cader.vlm.video_sampling`, where the samplers are), then to one decode. The decode is planned per keyframe interval (`cader.vlm.decode_plan`): seek to the keyframe,
decode forward to the last wanted frame of the interval, never decode a frame twice, and run the intervals on
parallel PyAV decoders. On the way, H.264 and HEVC decoders drop the pictures that are neither wanted nor referenced
by another picture (unreferenced B-frames: about half the frames of web video) without decoding them. Where the
video has no such pictures and its keyframes are far apart (Constrained Baseline, phone and screen recordings), one
sequential decode on FFmpeg's own threads costs less than the plan; the reader takes the cheaper of the two per
decode (`cader.vlm.decode_plan.choose_decode`, `decode_path`). Frame i is the i-th frame of one sequential decode of
the stream either way (tests: H.264, HEVC, VP9,
MPEG-4 and MPEG-2 in MP4, MOV, MKV, WebM, AVI, MPEG-TS and MPEG-PS, B-frames and open GOPs). The plan places
pictures by their timestamps, so where those cannot be trusted (containers without presentation times, see
`PLANNED_FORMATS`, or pictures that do not step through the frame table) the reader decodes the video sequentially:
exact by definition, as slow as transformers' PyAV loader. decord's own batch decode is never used: it returned
wrong frames for HEVC in MKV, AVI with B-frames, MPEG-PS, rotated and cut videos (tests). Measured in
scripts/bench/video_decode.py.

Times and frames meet in one table (`cader.vlm.frame_table`): frame i starts at i / fps for a constant-rate video,
at the container's own timestamp for a variable-rate one (phone and screen recordings). Timestamps returned are
those of the decoded frames, never the requested times, so the `<t seconds>` tokens the processor writes are the
real times.

A container may list more frames than its stream decodes (trailing packets that hold no picture: decord's `get_batch`
hangs on such a file, decord issue #373). A decode that finds the stream shorter than its index raises
`FrameCountMismatch` and trims the reader's frame table to the frames the stream has, so the index, the plan and the
decoded count agree from then on; the video is flagged (`VideoReader.flags`, counted process-wide in
`flag_counts()`), and the samplers (`sample_uniform` and the others) sample again on the trimmed table.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
from cader.vlm.decode_plan import (
    DecodePath,
    GopJob,
    StreamFacts,
    choose_decode,
    group_by_keyframe,
    split_balanced,
)
from cader.vlm.frame_table import FrameTable, frame_table, trim_table
from cader.vlm.frames import (  # noqa: F401 (the read's types and errors, re-exported: callers import them from here)
    FRAME_COUNT_OVER_REPORTED,
    FrameCountMismatch,
    Frames,
    VideoReadError,
    count_flag,
    flag_counts,
    resize_frames,
    resize_to,
    upright,
)
from cader.vlm.pyav_settings import (
    PLANNED_FORMATS,
    REORDER_PROBE_PACKETS,
    THINNABLE_CODECS,
    FirstFrame,
    default_decode_workers,
    reformat_options,
    steps_on,
)
from cader.vlm.sampling import fit_pixels
from cader.vlm.video_index import VideoIndex, read_index, video_stream
from cader.vlm.video_sampling import ReaderSampling

log = logging.getLogger(__name__)


class VideoReader(ReaderSampling):
    """One video file: its index (decord's, or PyAV's where decord fails), PyAV decoders per sampling;
    thread-safe. The samplings (`sample_uniform`, `sample_grid`, ...) are `cader.vlm.video_sampling`'s."""

    # A job gives up when this many pictures after a seek match no frame of the table; the decode then falls back to
    # a sequential one.
    SCAN_SLACK_FRAMES = 64
    STREAM_START = -1  # a seek ladder's last rung: decode from the start of the stream, on a fresh demuxer

    DECODE_PATHS = ("auto", "planned", "sequential")

    def __init__(self, path: str | os.PathLike, num_threads: int = 0, decode_workers: int | None = None,
                 skip_unwanted: bool = True, decode_path: str = "auto"):
        """Open `path` once and read its index (`cader.vlm.video_index`). `num_threads` goes to decord's reader
        (0 = its default); `decode_workers` is how many parallel PyAV decoders (or FFmpeg threads of the sequential
        decoder) one decode may use (None: `default_decode_workers()`); `skip_unwanted`: let the decoder drop pictures
        that are neither wanted nor referenced (`THINNABLE_CODECS`; the frames returned are the same either way);
        `decode_path`: "auto" takes the cheaper of the planned and the sequential decode per decode
        (`cader.vlm.decode_plan.choose_decode`), "planned" or "sequential" forces one (a video whose timestamps
        cannot place its pictures is always decoded sequentially). The frames are the same on every path."""
        if decode_path not in self.DECODE_PATHS:
            raise ValueError(f"decode_path must be one of {self.DECODE_PATHS}, got {decode_path!r}")
        self.path = Path(path)
        self.skip_unwanted = skip_unwanted
        self.decode_path = decode_path
        self.decode_workers = default_decode_workers() if decode_workers is None else max(1, int(decode_workers))
        if not self.path.is_file():
            raise VideoReadError(self.path, "file does not exist")
        if self.path.stat().st_size == 0:
            raise VideoReadError(self.path, "file is empty (0 bytes)")
        try:
            self.index: VideoIndex = read_index(self.path, num_threads)
        except ValueError as err:
            raise VideoReadError(self.path, str(err)) from err
        self.num_frames, self.native_fps = self.index.num_frames, self.index.fps
        if self.num_frames <= 0:
            raise VideoReadError(self.path, "video has no frames")
        if not np.isfinite(self.native_fps) or self.native_fps <= 0:
            raise VideoReadError(self.path, f"invalid frame rate {self.native_fps}")
        first = self._probe_first_frame()
        self._frame0_pts, self._coded_size, self.rotation = first.pts, first.coded_size, first.rotation
        self.container_format = first.container_format  # "image2" or "jpeg_pipe" for a picture renamed .mp4
        self.codec, self.reorders = first.codec, first.reorders
        # Frames come back as a viewer shows them: a phone held upright stores landscape pictures plus a rotation.
        quarter_turn = self.rotation in (90, 270)
        self.height, self.width = self._coded_size[::-1] if quarter_turn else self._coded_size
        self.frame_table: FrameTable = frame_table(self.num_frames, self.native_fps, self.index.frame_times,
                                                   first.seconds)
        self.num_frames, self.duration = len(self.frame_table), self.frame_table.duration
        keys = self.index.key_indices - self.frame_table.hidden
        self._key_indices = keys[keys >= 0]  # a keyframe among hidden frames: frame 0 stands for it
        # The planned decode needs timestamps it can trust; without them, or once it failed, decode sequentially.
        self.planned = first.pts is not None and bool(PLANNED_FORMATS & set(first.container_format.split(",")))
        self._kept: dict[tuple, Frames] = {}  # decodes done ahead of their use (`keep`)
        self._kept_lock = threading.Lock()
        self.flags: list[str] = []  # what is wrong with this video but was worked around (`FRAME_COUNT_OVER_REPORTED`)
        self.paths_taken: Counter = Counter()  # decodes by the path that ran ("planned", "sequential")

    def __repr__(self) -> str:
        return f"VideoReader({str(self.path)!r}, frames={self.num_frames}, fps={self.native_fps:.3f})"

    def keep(self, frames: Frames, max_pixels: int | None = None) -> None:
        """Hold `frames`, a decode of this reader made ahead of its use at `max_pixels` (by the decode-ahead stage of
        `cader.evaluate.in_flight`, say): the next decode of exactly those indices at that pixel budget, and every
        sampling that comes down to it, returns them instead of decoding again. Once: the caller that gets them owns
        them, and a later decode of the same frames decodes."""
        with self._kept_lock:
            self._kept[(np.asarray(frames.indices, np.int64).tobytes(), max_pixels)] = frames

    def decode_indices(self, indices: np.ndarray, max_pixels: int | None = None) -> Frames:
        """Decode exactly these (sorted, unique, in-range) frame indices in one batch, each frame resized to
        `max_pixels` as soon as it is decoded (a long video never sits in memory at native resolution)."""
        indices = np.asarray(indices, dtype=np.int64)
        if len(indices) and (indices[0] < 0 or indices[-1] >= self.num_frames or np.any(np.diff(indices) <= 0)):
            raise ValueError(f"{self.path}: frame indices must be sorted, unique and in [0, {self.num_frames})")
        if self._kept:
            with self._kept_lock:
                kept = self._kept.pop((indices.tobytes(), max_pixels), None)
            if kept is not None:
                return kept
        size = fit_pixels(self.height, self.width, max_pixels) if max_pixels else (self.height, self.width)
        if len(indices) == 0:
            return Frames(np.zeros((0, *size, 3), np.uint8), np.zeros(0), indices, self.native_fps)
        table = self.frame_table  # the one this decode places its frames by (a mismatch replaces it, see `_trim`)
        batch, planned_error = None, None  # no lock below: every decode opens decoders of its own
        if self.path_for(indices) == "planned":
            try:
                batch = self._scan(indices, max_pixels)
                self.paths_taken["planned"] += 1
            except Exception as err:  # noqa: BLE001 - timestamps that do not describe the display order, say
                planned_error = err
        if batch is None:
            try:
                batch = self._decode_sequentially(indices, max_pixels)
            except FrameCountMismatch as err:
                self._trim(err.decoded)  # the plan failed for want of those frames, not for its timestamps
                raise
            self.paths_taken["sequential"] += 1
            if planned_error is not None:
                self.planned = False  # a property of the file: later samplings go straight to the sequential decode
                log.warning("%s: planned decode failed (%s); decoding this video sequentially from now on",
                            self.path, str(planned_error).splitlines()[0][:200])
        return Frames(batch, table.starts[indices], indices, self.native_fps)

    @property
    def stream_facts(self) -> StreamFacts:
        """What `cader.vlm.decode_plan.choose_decode` needs: keyframes, droppable pictures, whether it may seek."""
        droppable = self.skip_unwanted and self.reorders and self.codec in THINNABLE_CODECS
        return StreamFacts(tuple(int(k) for k in self._key_indices), droppable, self.planned)

    def path_for(self, indices: np.ndarray) -> DecodePath:
        """The path a decode of these (sorted, unique) indices takes: the forced one (`decode_path`), else the cheaper
        one for this video; always "sequential" where the timestamps cannot place the pictures."""
        if not self.planned or self.decode_path == "sequential":
            return "sequential"
        if self.decode_path == "planned":
            return "planned"
        return choose_decode(indices, self.stream_facts, self.decode_workers)

    def _trim(self, decoded: int) -> None:
        """Make the reader agree with a stream that decodes `decoded` frames where its index listed more: trim the
        frame table and the keyframes, and flag the video (once, counted in `flag_counts()`)."""
        with self._kept_lock:
            if decoded >= self.num_frames:
                return  # another thread trimmed it already
            log.warning("%s: %s: the index lists %d frames, the stream decodes %d; sampling the %d", self.path,
                        FRAME_COUNT_OVER_REPORTED, self.num_frames, decoded, decoded)
            self.frame_table = trim_table(self.frame_table, decoded)
            self._key_indices = self._key_indices[self._key_indices < decoded]
            self.num_frames, self.duration = len(self.frame_table), self.frame_table.duration
            if FRAME_COUNT_OVER_REPORTED not in self.flags:
                self.flags.append(FRAME_COUNT_OVER_REPORTED)
                count_flag(FRAME_COUNT_OVER_REPORTED)

    def _decode_sequentially(self, indices: np.ndarray, max_pixels: int | None) -> np.ndarray:
        """Exact by definition: one decode from the start of the stream, frame i being the i-th picture the decoder
        outputs, up to the last wanted frame. No seeks and no timestamps, so it holds where those fail (the fallback
        of the plan); it decodes every picture up to the last wanted frame, on FFmpeg's frame and slice threads
        (`decode_workers` of them), which on video without droppable pictures and with far-apart keyframes costs less
        than the plan (`cader.vlm.decode_plan`). Raises `FrameCountMismatch` when the stream ends first."""
        import av
        from av.video.reformatter import VideoReformatter

        out, slots = self._output(indices, max_pixels)
        last, count = int(indices[-1]), 0
        try:
            with av.open(str(self.path)) as container:
                stream = video_stream(container)
                # Frame threads return the pictures of one sequential decode, in the same order (a delay of
                # thread_count pictures); PyAV's default is slice threads, which x264's output (one slice) cannot use.
                stream.codec_context.thread_type = "AUTO"
                stream.codec_context.thread_count = self.decode_workers
                reformatter = VideoReformatter()
                for frame in container.decode(stream):
                    if count in slots:
                        self._write(frame, count, reformatter, out, slots[count])
                    count += 1
                    if count > last:
                        break
        except VideoReadError:
            raise
        except Exception as err:
            raise VideoReadError(self.path, f"decode failed at frame {count}: {str(err).splitlines()[0][:200]}") from err
        if count <= last:
            if count < self.num_frames:
                raise FrameCountMismatch(self.path, self.num_frames, count, last)
            raise VideoReadError(self.path, f"the stream ends after {count} frames; frame {last} was asked for")
        return out

    def _output(self, indices: np.ndarray, max_pixels: int | None) -> tuple[np.ndarray, dict[int, int]]:
        """The buffer a decode fills in place, and the slot of each wanted frame index in it.

        One buffer for the whole batch: a fresh array per frame would cost a page-faulting allocation per frame,
        which threads of one process partly serialize on (and then a copy to stack them).
        """
        size = fit_pixels(self.height, self.width, max_pixels) if max_pixels else (self.height, self.width)
        return np.empty((len(indices), *size, 3), np.uint8), {int(i): k for k, i in enumerate(indices)}

    def _write(self, frame, index: int, reformatter, out: np.ndarray, slot: int) -> None:
        """Convert a decoded picture to RGB, turn it upright, fit it to the buffer and write it to out[slot]."""
        height, width = self._coded_size
        if (frame.height, frame.width) != (height, width):
            raise VideoReadError(self.path, f"frame {index} is {frame.width}x{frame.height}, "
                                            f"the stream starts at {width}x{height}")
        # The same swscale conversion as to_ndarray, minus its fresh array; on this thread only (`reformat_options`).
        plane = reformatter.reformat(frame, format="rgb24", **reformat_options()).planes[0]
        rows = np.frombuffer(plane, np.uint8).reshape(height, plane.line_size)
        picture = upright(rows[:, : width * 3].reshape(height, width, 3), self.rotation)
        out[slot] = resize_to(picture[None], out.shape[1:3])[0]

    def _scan(self, indices: np.ndarray, max_pixels: int | None = None) -> np.ndarray:
        """Decode exactly `indices` with PyAV: one job per keyframe interval, jobs spread over parallel decoders.

        Each job seeks to its keyframe and decodes forward only as far as its last wanted frame (see
        `cader.vlm.decode_plan`), so no frame is decoded twice and the tail of every keyframe interval is skipped.
        Frame numbers come from presentation timestamps: the frame of the table starting at (pts - pts of frame 0).
        """
        runs = split_balanced(group_by_keyframe(indices, self._key_indices), self.decode_workers)
        out, slots = self._output(indices, max_pixels)
        if len(runs) == 1:
            found = self._decode_jobs(runs[0], slots, out)
        else:  # PyAV releases the GIL while decoding and converting, so threads give real parallelism
            with ThreadPoolExecutor(len(runs), thread_name_prefix="cader-decode") as pool:
                found = set().union(*pool.map(lambda run: self._decode_jobs(run, slots, out), runs))
        missing = [i for i in slots if i not in found]
        if missing:
            raise VideoReadError(self.path, f"frames {missing[:5]} not found while scanning (of {len(indices)})")
        return out

    def _probe_first_frame(self) -> FirstFrame:
        """Decode frame 0 with PyAV (see `FirstFrame`). Frame i is then the frame of the table starting i-th after
        frame 0's timestamp; the stream's start_time is not always that frame (AVI with B-frames numbers decoded
        frames from 1, for one)."""
        import av

        try:
            with av.open(str(self.path)) as container:
                stream = video_stream(container)
                first, pts = None, []
                for packet in container.demux(stream):  # the last packet, empty, flushes the decoder
                    if packet.pts is not None and len(pts) < REORDER_PROBE_PACKETS:
                        pts.append(packet.pts)
                    if first is None:
                        first = next(iter(packet.decode()), None)
                    if first is not None and len(pts) >= REORDER_PROBE_PACKETS:
                        break
                if first is None:
                    raise VideoReadError(self.path, "no decodable frame")
                rotation = round((first.rotation or 0) / 90.0) * 90 % 360
                seconds = None
                if first.pts is not None:  # the index's times count from start_time (1.4 s in an MPEG-TS, say)
                    seconds = float((first.pts - (stream.start_time or 0)) * stream.time_base)
                reorders = bool(np.any(np.diff(np.asarray(pts, dtype=np.int64)) < 0))  # decode order != display
                return FirstFrame(None if first.pts is None else int(first.pts), seconds,
                                  (int(first.height), int(first.width)), rotation, container.format.name,
                                  stream.codec_context.name, reorders)
        except VideoReadError:
            raise
        except Exception as err:  # PyAV raises its own error types per FFmpeg error code
            raise VideoReadError(self.path, f"cannot decode: {str(err).splitlines()[0][:200]}") from err

    def _decode_jobs(self, jobs: list[GopJob], slots: dict[int, int], out: np.ndarray) -> set[int]:
        """Run keyframe-interval jobs in order on one decoder of our own (PyAV containers are not shared); write
        wanted frame i to out[slots[i]]; return the indices written."""
        from av.video.reformatter import VideoReformatter

        found: set[int] = set()
        # One reformatter per decoder keeps its swscale context: frame.reformat() builds a new one per frame,
        # which costs more than the conversion itself (scripts/bench/video_decode.py).
        reformatter = VideoReformatter()
        with self._open_decoder() as container:
            stream = video_stream(container)
            thinnable = self.skip_unwanted and stream.codec_context.name in THINNABLE_CODECS
            for number, job in enumerate(jobs):
                # The first job decodes every picture: once pictures are dropped, timestamps that are consistently
                # wrong (decode order, say) can pass for the gaps the drops leave, so that job checks the stream
                # frame by frame.
                thin = thinnable and number > 0
                # A seek that lands past the job's first wanted frame is retried from earlier keyframes, and at last
                # from the start of the stream, on a fresh demuxer (no seek at all).
                for start in self._seek_starts(job.key):
                    if start == self.STREAM_START:
                        with self._open_decoder() as fresh:
                            self._run_job(fresh, video_stream(fresh), job, reformatter, slots, out, found, thin)
                        break
                    # Half a frame past the start: seeking backward then lands on it even if pts rounding is off.
                    target = self.frame_table.starts[start] + 0.5 * self.frame_table.period(start)
                    container.seek(self._frame0_pts + int(target / float(stream.time_base)), stream=stream,
                                   backward=True)
                    if self._run_job(container, stream, job, reformatter, slots, out, found, thin):
                        break
        return found

    def _open_decoder(self):
        """A PyAV container of our own (they are not shared between threads), its decoder on one thread: the
        parallelism is across keyframe intervals, and libavcodec's own slice/frame threads cost more than they
        give on small frames (scripts/bench/video_decode.py)."""
        import av

        container = av.open(str(self.path))
        video_stream(container).codec_context.thread_count = 1
        return container

    def _seek_starts(self, key: int) -> list[int]:
        """Where a job may start decoding, in order of preference: its keyframe; the keyframes 1, 2, 4, 8, ...
        intervals before it; the start of the stream (`STREAM_START`).

        Seeks can land late: decord's keyframe index is off by a frame or two in AVI and MKV, and MPEG-TS has no
        index at all, so a seek there lands up to a keyframe interval past its target. Every rung is exact; an
        earlier one only decodes more frames that nobody asked for.
        """
        earlier = self._key_indices[self._key_indices < key][::-1]
        ladder = [int(earlier[2**k - 1]) for k in range(len(earlier).bit_length())]
        return list(dict.fromkeys([key, *ladder, self.STREAM_START]))

    def _run_job(self, container, stream, job: GopJob, reformatter, slots: dict[int, int], out: np.ndarray,
                 found: set[int], thin: bool = False) -> bool:
        """Decode forward from where the container was seeked until the job's frames are written; with `thin`,
        pictures that are neither wanted nor referenced are dropped undecoded (see `_pictures`).

        Returns False, having written nothing, when the first decoded frame is already past a wanted one, or when
        no frame comes at all (a seek in an MPEG-TS can land at the end of the stream). Raises VideoReadError when
        the decoded timestamps do not step through the frame table one frame at a time (or over frames the decoder
        was allowed to drop): then they do not describe the display order (or the table is wrong), and no frame
        placed by them can be trusted.
        """
        pending = set(job.indices) - found
        if not pending:
            return True
        previous, unplaced, droppable, tick = None, 0, set(), float(stream.time_base)
        for frame in self._pictures(container, stream, pending, droppable if thin else None):
            index = self._frame_index(frame.pts, tick)
            if previous is None:  # where the seek landed
                if index < 0:  # leading pictures the table has no frame for, if any, come first
                    unplaced += 1
                    if unplaced > self.SCAN_SLACK_FRAMES:
                        raise VideoReadError(self.path, f"{unplaced} decoded pictures match no frame of the table")
                    continue
                if index > min(pending):
                    return False
            elif not steps_on(previous, index, droppable):
                raise VideoReadError(self.path, f"decoded timestamps are not in display order: frame {previous} "
                                                f"was followed by {'a picture without one' if index < 0 else index}")
            previous = index
            if index in pending:
                self._write(frame, index, reformatter, out, slots[index])
                found.add(index)
                pending.discard(index)
                if not pending:
                    break
        return previous is not None

    def _frame_index(self, pts: int | None, tick: float) -> int:
        """The frame of the table a picture or packet with this timestamp (`tick` seconds per unit) is (-1: none, or
        no timestamp)."""
        if pts is None:
            return -1
        return self.frame_table.nearest((pts - self._frame0_pts) * tick)

    def _pictures(self, container, stream, pending: set[int], droppable: set[int] | None):
        """The pictures `container.decode(stream)` yields from where it was seeked. With `droppable` (a set), each
        packet of a known frame nobody waits for is sent with skip_frame=NONREF, so the decoder drops it undecoded
        unless other pictures reference it (at 1 fps most frames decoded are such fillers, and in web video about
        half of them are unreferenced B-frames); those frames go into `droppable`. Wanted frames, and packets
        without a timestamp, are always decoded. Dropping a picture nothing references changes no other picture."""
        context, tick = stream.codec_context, float(stream.time_base)
        context.skip_frame = "DEFAULT"
        for packet in container.demux(stream):
            if droppable is not None:
                index = self._frame_index(packet.pts, tick)
                drop = index >= 0 and index not in pending
                context.skip_frame = "NONREF" if drop else "DEFAULT"
                if drop:
                    droppable.add(index)
            yield from packet.decode()
