"""The decoders resize each frame through a float buffer their thread keeps (`cader.vlm.frames._as_float`): the
bytes must be those of a fresh float conversion, whatever sizes come in turn and on whichever thread."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
import torch.nn.functional as F
from cader.vlm.frames import resize_to, upright


def fresh_float_resize(frames: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """The resize as written before the buffer: a fresh float tensor per call."""
    x = torch.from_numpy(np.ascontiguousarray(frames)).permute(0, 3, 1, 2).float()
    x = F.interpolate(x, size=size, mode="bilinear", antialias=True, align_corners=False)
    return x.round().clamp_(0, 255).to(torch.uint8).permute(0, 2, 3, 1).numpy()


def test_one_frame_at_a_time_gives_the_bytes_of_a_fresh_conversion_across_sizes_and_turns():
    rng = np.random.default_rng(3)
    shapes = [(72, 128), (90, 160), (72, 128), (128, 72)]
    for step, (h, w) in enumerate(shapes * 2):
        frame = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        picture = upright(frame, 90 * step)   # a rotated view has negative strides
        size = (32, 64) if picture.shape[0] < picture.shape[1] else (64, 32)
        assert np.array_equal(resize_to(picture[None], size), fresh_float_resize(picture[None], size))


def test_threads_keep_their_own_buffers():
    rng = np.random.default_rng(4)
    frames = rng.integers(0, 256, (24, 90, 160, 3), dtype=np.uint8)
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda f: resize_to(f[None], (32, 64))[0], frames))
    assert np.array_equal(np.stack(got), fresh_float_resize(frames, (32, 64)))
