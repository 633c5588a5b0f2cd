import numpy as np
import pytest
from cader.vlm.image import IMAGE_MAX_PIXELS, ImageReadError, displayed_size, load_image
from PIL import Image


def test_large_image_fits_the_budget_in_merge_units(tmp_path):
    path = tmp_path / "big.png"
    Image.new("RGB", (1000, 700), (10, 200, 30)).save(path)
    im = load_image(path)
    assert im.width * im.height <= IMAGE_MAX_PIXELS and im.width % 32 == 0 and im.height % 32 == 0
    assert abs(im.width / im.height - 1000 / 700) < 0.1
    assert im.getpixel((5, 5)) == (10, 200, 30)


def test_exif_orientation_is_applied(tmp_path):
    # Stored landscape, 64 wide x 32 high, red block at the top-left; EXIF orientation 6 says "turn 90 degrees
    # clockwise to view", so the viewer sees a 32 x 64 portrait picture with the block at the top-right.
    pixels = np.zeros((32, 64, 3), np.uint8)
    pixels[:8, :8] = (255, 0, 0)
    stored = Image.fromarray(pixels)
    exif = stored.getexif()
    exif[0x0112] = 6
    path = tmp_path / "phone.jpg"
    stored.save(path, exif=exif, quality=95)
    im = load_image(path)
    assert im.size == (32, 64)
    assert displayed_size(path) == (64, 32)  # what the token budget plans with, from the header alone
    r, g, b = im.getpixel((im.width - 3, 3))
    assert r > 200 and g < 60 and b < 60
    assert im.getpixel((3, 3))[0] < 60


@pytest.mark.parametrize("content", [None, b"", b"not an image at all"])
def test_unreadable_images_raise_one_error_naming_the_path(tmp_path, content):
    path = tmp_path / "bad.jpg"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(ImageReadError, match="bad.jpg"):
        load_image(path)
    with pytest.raises(ImageReadError, match="bad.jpg"):
        displayed_size(path)
