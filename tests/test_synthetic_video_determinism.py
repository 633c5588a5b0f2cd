"""``write_video`` gives the same bytes for the same spec, also in a process that decodes videos in between.

With x264's default CPU dispatch on an AVX-512 machine an encode that follows an rgb24 decode often came out
different (37-59 of 60 such encodes in a loop); a loop of encodes interleaved with decodes shows it. On a
machine whose x264 never takes that path the test passes either way.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from cader.dev.synthetic.media import random_cued_spec, write_video

av = pytest.importorskip("av")


def decoded_rgb_digest(path: Path) -> str:
    """sha256 of every decoded frame as rgb24, the way the evaluation reads the files (swscale yuv -> rgb)."""
    digest = hashlib.sha256()
    with av.open(str(path)) as container:
        for frame in container.decode(video=0):
            digest.update(frame.to_ndarray(format="rgb24").tobytes())
    return digest.hexdigest()


def test_same_spec_same_bytes_with_decodes_in_between(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    # small cued clips (16 s at 2 fps, 32x32) with scene, event and decoy: a few ms each to encode
    specs = [
        random_cued_spec(rng, f"v{i}", (16, 16), 8, (1, 3), fps=2, width=32, height=32, decoy_rate=0.5)
        for i in range(6)
    ]
    # the first pass runs before any decode in this test: the bytes every later pass must repeat
    first = {spec.name: write_video(spec, tmp_path / f"first_{spec.name}.mp4").read_bytes() for spec in specs}
    pixels = {spec.name: decoded_rgb_digest(tmp_path / f"first_{spec.name}.mp4") for spec in specs}
    differing = []
    for repetition in range(4):
        for spec in specs:
            path = write_video(spec, tmp_path / f"{repetition}_{spec.name}.mp4")
            if path.read_bytes() != first[spec.name]:
                differing.append(f"{spec.name} (repetition {repetition}): bytes")
            if decoded_rgb_digest(path) != pixels[spec.name]:
                differing.append(f"{spec.name} (repetition {repetition}): decoded pixels")
    checks = 2 * 4 * len(specs)
    assert not differing, f"{len(differing)} of {checks} checks differ from the first encode: {differing}"
