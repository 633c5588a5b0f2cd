"""Image loading at the paper's per-image pixel cap (262,144 px, App. A), sides multiples of the 32-px merge unit."""

from __future__ import annotations

import os

from cader.vlm.sampling import fit_pixels
from PIL import Image, ImageOps, UnidentifiedImageError

IMAGE_MAX_PIXELS = 262_144


class ImageReadError(RuntimeError):
    def __init__(self, path, reason: str):
        self.path = str(path)
        super().__init__(f"image_unreadable: {self.path}: {reason}")


def load_image(path: str | os.PathLike, max_pixels: int = IMAGE_MAX_PIXELS) -> Image.Image:
    try:
        with Image.open(path) as im:
            # Phone photos store the sensor's landscape pixels plus an EXIF orientation: show them as a viewer does.
            im = ImageOps.exif_transpose(im).convert("RGB")
    except (FileNotFoundError, UnidentifiedImageError, OSError) as err:
        raise ImageReadError(path, str(err).splitlines()[0][:200]) from err
    h, w = fit_pixels(im.height, im.width, max_pixels)
    if (h, w) != (im.height, im.width):
        im = im.resize((w, h), Image.Resampling.BICUBIC)
    return im


# EXIF orientations that turn the picture a quarter turn, so a viewer sees it with width and height swapped.
_QUARTER_TURNS = {5, 6, 7, 8}


def displayed_size(path: str | os.PathLike) -> tuple[int, int]:
    """(height, width) of an image as a viewer shows it (EXIF orientation applied), from its header only."""
    try:
        with Image.open(path) as im:
            width, height = im.size
            if im.getexif().get(0x0112) in _QUARTER_TURNS:
                width, height = height, width
    except (FileNotFoundError, UnidentifiedImageError, OSError) as err:
        raise ImageReadError(path, str(err).splitlines()[0][:200]) from err
    return height, width
