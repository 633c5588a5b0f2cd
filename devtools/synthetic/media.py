"""Synthetic media with a learnable visual question (the miniature's data).

Every synthetic video is a grey background with a small dark square patrolling the top band (so consecutive
frames differ), and one *event*: during ``[t_s, t_e)`` a shape of one colour fills the frame below the band.
The question "What colour is the shape that appears in the video?" is therefore decidable from pixels, but only
at known times, which gives CADER's Stage 2 a window to find. Frame ``i`` is shown at ``i / fps`` seconds and the
event covers frames ``round(t_s * fps) .. round(t_e * fps) - 1``; ``t_s`` and ``t_e`` are multiples of ``1 / fps``.

The miniature's videos (``random_cued_spec``) are long against the event, which makes them a miniature of
the paper's setting: a 1-6 s event inside a 128 s video, so Stage 1's 1 fps pass (capped at 32 frames, one every
4 s) sees a brief event in only some of the videos -- right when it does, guessing when it does not -- while a dense
crop of the right window always shows it. The event lies inside a 16 s *scene* whose background is light
(``SCENE``), visible to the sparse pass in every video: that is the coarse cue a proposal can localise from, as a
real model localises from a scene it can see at 1 fps. ``scene_s``/``scene_e`` carry it (``None`` for videos
without one). A video may also hold a *decoy* (``decoy_s``/``decoy_e``): a second light scene without the event.
Where the sparse pass saw the event, the proposal can tell the two apart; where it did not, they look alike, the
first proposal can pick the decoy, and only the verifier (its crop shows no event) and reflection (try the other
scene) recover the sample -- the case CADER's Stage 2 is built for, which makes its ablations measurable.

Images use the same picture (grey, distractor, coloured centre shape) for the image-CoT part of the mix.

Everything is driven by an explicit ``numpy.random.Generator`` so a seed fixes every file byte for byte.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# The six colours an event can have: far apart in RGB so they survive yuv420 + h264 and stay easy to learn.
EVENT_COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (220, 30, 30), "green": (30, 190, 40), "blue": (30, 60, 220), "yellow": (235, 220, 30),
    "cyan": (30, 210, 220), "magenta": (210, 40, 200),
}
# Names used only as distractor options (never shown), so that 26-option questions have 26 distinct colours.
DISTRACTOR_COLOURS: tuple[str, ...] = (
    "white", "black", "orange", "purple", "pink", "brown", "grey", "navy", "teal", "olive", "maroon", "lime", "gold",
    "silver", "beige", "turquoise", "violet", "indigo", "crimson", "coral",
)
ALL_COLOUR_NAMES: tuple[str, ...] = tuple(EVENT_COLOURS) + DISTRACTOR_COLOURS
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"

BACKGROUND = (110, 110, 110)
SCENE = (220, 220, 220)   # the light background of the scene around the event
DISTRACTOR = (60, 60, 60)
COLOUR_QUESTION = "What colour is the shape that appears in the video?"
IMAGE_QUESTION = "What colour is the shape in the image?"


@dataclass(frozen=True)
class VideoSpec:
    """What one synthetic video shows; ``t_s``/``t_e`` in seconds (``t_e`` exclusive)."""

    name: str
    duration: float
    fps: int
    t_s: float
    t_e: float
    colour: str
    width: int = 96
    height: int = 64
    scene_s: float | None = None
    scene_e: float | None = None
    # a second light scene without the event: the proposal's wrong first guess when the sparse pass misses the event
    decoy_s: float | None = None
    decoy_e: float | None = None

    @property
    def num_frames(self) -> int:
        return round(self.duration * self.fps)

    @property
    def event_frames(self) -> tuple[int, int]:
        """Half-open frame index range of the event."""
        return round(self.t_s * self.fps), round(self.t_e * self.fps)

    @property
    def scene_frames(self) -> tuple[int, int]:
        """Half-open frame index range of the light scene ((0, 0) without one)."""
        if self.scene_s is None or self.scene_e is None:
            return 0, 0
        return round(self.scene_s * self.fps), round(self.scene_e * self.fps)

    def is_light(self, index: int) -> bool:
        """Whether frame ``index`` lies in the scene or the decoy (both drawn on the light background)."""
        start, end = self.scene_frames
        if start <= index < end:
            return True
        return self.decoy_s is not None and round(self.decoy_s * self.fps) <= index < round(self.decoy_e * self.fps)


def draw_frame(spec_w: int, spec_h: int, index: int, colour: str | None, scene: bool = False,
               fill: bool = False) -> np.ndarray:
    """One RGB frame: grey (light inside a scene), a dark square moving along the top band, and the coloured
    shape when ``colour``: a centred block (images), or everything below the band when ``fill`` (videos)."""
    frame = np.empty((spec_h, spec_w, 3), dtype=np.uint8)
    frame[:] = SCENE if scene else BACKGROUND
    band = max(4, spec_h // 8)
    x = (index * 3) % max(1, spec_w - band)
    frame[0:band, x : x + band] = DISTRACTOR
    if colour is not None:
        rgb = EVENT_COLOURS[colour]
        if fill:
            # the whole picture below the band: at Stage 1's small pixel budget a frame is only a few tokens,
            # and every one of them carries the colour
            frame[band:] = rgb
        else:
            # a centred block covering half of each dimension: big enough to survive any pixel budget
            y0, y1 = spec_h // 4, spec_h - spec_h // 4
            x0, x1 = spec_w // 4, spec_w - spec_w // 4
            frame[y0:y1, x0:x1] = rgb
    return frame


# The encoder settings behind "the same spec gives the same bytes": one thread, fixed rate control, and on x86
# a fixed SIMD level. x264 otherwise picks its code by CPU, and its AVX-512 path (taken on AVX-512 machines)
# is not deterministic in a process that decodes: an encode that follows an rgb24 decode often comes out
# different (37-59 of 60 in a loop of encodes each followed by a decode; keyframes a few bytes longer, decoded
# pixels off by 1-2 levels over the GOP) though the pictures fed in are identical. SSSE3 is the lowest level
# whose output equals the AVX2 and the clean AVX-512 output (the bytes the project measured with); plain C and
# SSE2 give other bytes. Every x86-64 CPU of the last 15 years has SSSE3 (a CPU without it would stop on an
# illegal instruction). Elsewhere (arm64) x264's own choice stands: its bytes differ from x86's either way.
X264_OPTIONS: dict[str, str] = {"preset": "veryfast", "crf": "20", "threads": "1"}
if platform.machine().lower() in ("x86_64", "amd64"):
    X264_OPTIONS["x264-params"] = "asm=ssse3"


def write_video(spec: VideoSpec, path: Path) -> Path:
    """Encode ``spec`` as H.264 (yuv420p) mp4 with PyAV; exact frame times ``i / fps``."""
    import av  # local import: only the generator needs the encoder

    path.parent.mkdir(parents=True, exist_ok=True)
    start, end = spec.event_frames
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("libx264", rate=spec.fps)
        stream.width, stream.height = spec.width, spec.height
        stream.pix_fmt = "yuv420p"
        stream.codec_context.options = X264_OPTIONS | {"g": str(4 * spec.fps)}
        for i in range(spec.num_frames):
            colour = spec.colour if start <= i < end else None
            picture = draw_frame(spec.width, spec.height, i, colour, scene=spec.is_light(i), fill=True)
            frame = av.VideoFrame.from_ndarray(picture, format="rgb24")
            frame.pts = i
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def write_image(colour: str, path: Path, width: int = 96, height: int = 64, index: int = 0) -> Path:
    """PNG or JPEG (by suffix) of the event picture."""
    from PIL import Image

    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(draw_frame(width, height, index, colour)).save(path, quality=95)  # PNG ignores the quality
    return path


def random_cued_spec(rng: np.random.Generator, name: str, duration_range: tuple[int, int] = (128, 128),
                     scene_len: int = 16, event_len: float | tuple[int, int] = 2.0, fps: int = 4,
                     colours: tuple[str, ...] = tuple(EVENT_COLOURS), width: int = 96, height: int = 64,
                     decoy_rate: float = 0.0) -> VideoSpec:
    """A long video with one light scene of ``scene_len`` s at a random multiple of ``scene_len`` and, inside it,
    an ``event_len`` s event starting on a whole second at least 1 s after the scene starts and ending at least 1 s
    before it ends. Durations are whole multiples of ``scene_len`` (rounded down, at least two scenes).
    ``event_len`` given as ``(lo, hi)`` draws a whole number of seconds in that range per video. With probability
    ``decoy_rate`` the video also gets a decoy: a second light scene, at another slot, without the event (no draw
    is made when the rate is 0, so such videos keep their bytes)."""
    longest = max(event_len) if isinstance(event_len, tuple) else event_len
    if scene_len < longest + 2:
        raise ValueError(f"the scene ({scene_len} s) must be at least the event ({longest} s) plus 2 s")
    if isinstance(event_len, tuple):
        event_len = float(rng.integers(event_len[0], event_len[1] + 1))
    duration = int(rng.integers(duration_range[0], duration_range[1] + 1))
    slots = max(2, duration // scene_len)
    scene_s = float(int(rng.integers(slots)) * scene_len)
    # whole seconds, as the releases state times (LVBench's MM:SS time references)
    t_s = float(rng.integers(int(scene_s) + 1, int(scene_s + scene_len - 1 - event_len) + 1))
    colour = colours[int(rng.integers(len(colours)))]
    decoy_s = None
    if decoy_rate > 0 and rng.random() < decoy_rate:
        others = [k for k in range(slots) if k * scene_len != scene_s]
        decoy_s = float(others[int(rng.integers(len(others)))] * scene_len)
    return VideoSpec(name, float(slots * scene_len), fps, t_s, t_s + event_len, colour, width, height, scene_s,
                     scene_s + scene_len, decoy_s, None if decoy_s is None else decoy_s + scene_len)


def clip_spec(spec: VideoSpec, name: str, start: float, end: float) -> VideoSpec:
    """``spec`` cut to ``[start, end)`` (on its frame grid) as a video of its own: event and scene shifted, the
    event dropped when the clip misses it (the training mix's verifier/answer clips)."""
    event = (max(spec.t_s, start) - start, min(spec.t_e, end) - start)
    has_event = event[1] > event[0]

    def inside(s: float | None, e: float | None) -> tuple[float, float] | None:   # [s, e) within the clip, shifted
        if s is None or e is None or min(e, end) <= max(s, start):
            return None
        return max(s, start) - start, min(e, end) - start

    scene, decoy = inside(spec.scene_s, spec.scene_e), inside(spec.decoy_s, spec.decoy_e)
    return VideoSpec(name, end - start, spec.fps, *(event if has_event else (0.0, 0.0)), spec.colour, spec.width,
                     spec.height, *(scene or (None, None)), *(decoy or (None, None)))


def colour_options(rng: np.random.Generator, answer: str, n_options: int) -> tuple[list[str], str]:
    """``n_options`` distinct colour names including ``answer`` in random order; returns (options, letter).

    Up to six options are drawn from the event colours (the hard, learnable distractors); beyond that the
    distractor-only names fill up to 26.
    """
    if not 2 <= n_options <= len(ALL_COLOUR_NAMES):
        raise ValueError(f"n_options must be in [2, {len(ALL_COLOUR_NAMES)}], got {n_options}")
    others = [c for c in EVENT_COLOURS if c != answer]
    others = [others[i] for i in rng.permutation(len(others))]
    pool = others + [DISTRACTOR_COLOURS[i] for i in rng.permutation(len(DISTRACTOR_COLOURS))]
    options = [answer] + pool[: n_options - 1]
    options = [options[i] for i in rng.permutation(n_options)]
    return options, LETTERS[options.index(answer)]


def canonical_colour_options(answer: str) -> tuple[list[str], str]:
    """The six event colours in their fixed order (A. red .. F. magenta); returns (options, letter).

    Used by the training mix and the ``synthetic``/``synthetic_heldout`` benchmarks: with a fixed order the letter
    is a function of the colour shown, so the tiny 2-layer model can learn colour -> letter from pixels (with
    shuffled options it would have to read and match the option texts, which it does not learn in a CPU-sized
    run). The released-format benchmarks keep ``colour_options`` (their option counts are part of the format).
    """
    options = list(EVENT_COLOURS)
    if answer not in options:
        raise ValueError(f"answer must be an event colour {options}, got {answer!r}")
    return options, LETTERS[options.index(answer)]


def timestamp(seconds: float) -> str:
    """``MM:SS`` (or ``H:MM:SS`` past an hour) as used in time references."""
    s = round(seconds)
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m:02d}:{sec:02d}"


def cot_text(spec: VideoSpec, letter: str) -> str:
    """A short, correct chain of thought plus answer in the target format ``<think>..</think><answer>X</answer>``."""
    scene = ""
    if spec.scene_s is not None:
        scene = f"From {spec.scene_s:.0f}s to {spec.scene_e:.0f}s the background turns light. "
    return (f"<think>The video is mostly a grey background. {scene}Between {spec.t_s:.0f}s and {spec.t_e:.0f}s a "
            f"large {spec.colour} shape appears in the frame, so the shape is {spec.colour}, which is "
            f"option {letter}.</think><answer>{letter}</answer>")


# What `enable_thinking=False` pre-fills after "<|im_start|>assistant\n" (cader.vlm.chat_template, Qwen3 convention).
EMPTY_THINK = "<think>\n\n</think>\n\n"


def direct_answer_text(letter: str) -> str:
    """A direct-answer target: the empty think block Stage 1's prompt pre-fills (thinking off), then the letter.

    Training on it puts the letter at exactly the position CADER Stage 1 reads option-letter logits from.
    """
    return f"{EMPTY_THINK}{letter}"


def image_cot_text(colour: str, letter: str) -> str:
    return (f"<think>The image shows a grey background with a large {colour} shape in the centre, so the answer "
            f"is option {letter}.</think><answer>{letter}</answer>")
