"""Thumbnails of the frames a sample was answered on, for the viewer (optional: only when the videos are reachable).

The frames come from the project's video reader (`cader.vlm.video.VideoReader`), a few per sample, shrunk to
about 64 px high and inlined as base64 JPEG, so a page of 2,000 samples with four thumbnails each stays a few MB.
Besides the window the answer was given on, each crop the verifier judged (accepted or rejected) gets its strip of
frames, drawn under the proposal timeline. A video that cannot be read costs that sample its thumbnails only: the
reason is returned, never raised.
"""

from __future__ import annotations

import base64
import io
import os
from pathlib import Path

from PIL import Image

THUMB_HEIGHT = 64
DECODE_PIXELS = 128 * 128  # decode small already: the reader resizes each frame as soon as it is decoded


def video_file(video: str | None, video_root: Path | None) -> Path | None:
    """Where a record's video is under `video_root` (the run's --data_root): a relative path below it, or an
    absolute one inside it; None for anything else (no root given, or a path that leads out of it), so a page
    never shows frames of a file the user did not point it at."""
    if not isinstance(video, str) or not video or video_root is None:
        return None
    # lexically (`..` folded, links not followed): a link the user put inside the root is a file they pointed at
    root = Path(os.path.abspath(video_root))
    path = Path(video) if Path(video).is_absolute() else Path(video_root) / video
    return path if Path(os.path.abspath(path)).is_relative_to(root) else None


def thumb_window(card: dict) -> tuple[float | None, float | None]:
    """The span the thumbnails show: the crop the final answer was given on, else the last crop verified, else the
    whole video (a Stage-1 exit)."""
    stage2 = card.get("s2") or {}
    answer = stage2.get("ans") or {}
    crops = [r["crop"] for r in stage2.get("rounds") or [] if r.get("crop")]
    window = answer.get("win") or (crops[-1] if crops else None)
    return (float(window[0]), float(window[1])) if window else (None, None)


def jpeg_data_uri(frame, height: int = THUMB_HEIGHT, quality: int = 70) -> str:
    """One RGB frame (H, W, 3 uint8) as a data: URI of a JPEG `height` px high (aspect kept)."""
    picture = Image.fromarray(frame)
    width = max(1, round(picture.width * height / max(1, picture.height)))
    picture = picture.resize((width, height), Image.BILINEAR)
    buffer = io.BytesIO()
    picture.save(buffer, format="JPEG", quality=quality)
    return "data:image/jpeg;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def window_strips(path: Path, windows: list[tuple[float | None, float | None]],
                  count: int) -> tuple[list[list[dict]], str | None]:
    """A strip of `count` frames per window [start, end] (None: the whole video) of one video, opened once; or no
    strips and the reason the video could not be read."""
    from cader.vlm.video import VideoReader, VideoReadError

    strips = []
    try:
        reader = VideoReader(path, decode_workers=1)  # one decoder: the viewer shares the machine with runs
        for start, end in windows:
            frames = reader.sample_count(count, start, end, max_pixels=DECODE_PIXELS)
            strips.append([{"t": round(float(t), 2), "src": jpeg_data_uri(f)}
                           for f, t in zip(frames.frames, frames.timestamps)])
    except (VideoReadError, OSError, ValueError, RuntimeError) as exc:
        return [], f"{type(exc).__name__}: {exc}"
    return strips, None


def verified_windows(card: dict) -> list[tuple[int, tuple[float, float]]]:
    """(round index, crop) of every proposal whose crop went to the verifier (accepted or rejected)."""
    rounds = (card.get("s2") or {}).get("rounds") or []
    return [(k, (float(r["crop"][0]), float(r["crop"][1]))) for k, r in enumerate(rounds) if r.get("crop")]
