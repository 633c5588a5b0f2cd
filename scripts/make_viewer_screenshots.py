"""Regenerate the screenshots of `cader view` shown in docs/viewer.md (docs/figures/viewer_*.png).

The page is the one tests/test_view_runs.py checks: a quickstart-shaped tree of runs made by the real runner,
report, calibration and judge aggregate on scripted replies (`cader.dev.viewer_records.write_run_tree`), on one
synthetic video of the miniature's kind (`cader.dev.synthetic.media`: a red shape fills the picture during
[20, 26) s of 60 s, inside a light scene), so the strip of the accepted window shows the shape and the rejected
windows' strips do not. Headless Chromium (Debian's `chromium`, scripts/install_browser.sh) draws each view in a
1280 px wide window.

    python scripts/make_viewer_screenshots.py --out docs/figures
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path

from jsonargparse import CLI

QUESTION = "agentvidbench/agentvidbench-1"
# name: (address, what to photograph: None for the window, "full" for the page (cut at 2,400 px), or a selector)
SHOTS = {
    "viewer_runs": ("#v=runs", None),
    "viewer_slices": ("#v=slices", None),
    "viewer_samples": ("#v=samples&f=run:eval/full/synthetic|route:stage2", None),
    "viewer_question": (f"#v=question&q={QUESTION}", "full"),
    "viewer_judge": (f"#v=question&q={QUESTION}", '#question article.card[data-run="eval/full/agentvidbench"] .judge'),
    "viewer_strips": (f"#v=question&q={QUESTION}", '#question article.card[data-run="eval/no_rgr/agentvidbench"] .body'),
    "viewer_reports": ("#v=reports", None),
}


def write_demo_page(folder: Path, thumbs: int = 4) -> Path:
    """The run tree (runs/tiny, as the quickstart names its own), its video and the page (reference:
    full/synthetic) under `folder`. The tree is given by its path relative to `folder`, so that the page's title
    names the runs as a user's would, not the temporary folder they were made in."""
    from cader.dev.synthetic.media import VideoSpec, write_video
    from cader.dev.viewer_records import write_run_tree
    from cader.evaluate.viewer.build import write_viewer

    spec = VideoSpec("v", duration=60.0, fps=4, t_s=20.0, t_e=26.0, colour="red", scene_s=16.0, scene_e=32.0)
    video = write_video(spec, folder / "videos" / "v.mp4")
    write_run_tree(folder / "runs" / "tiny", video, n_synthetic=16)
    with contextlib.chdir(folder):
        page, _ = write_viewer([Path("runs/tiny")], Path("viewer.html"), video_root=Path("videos"), thumbs=thumbs,
                               reference="full/synthetic")
    return folder / page


def main(out: str = "docs/figures", width: int = 1280, height: int = 900) -> list[Path]:
    """Write one PNG per view.

    Args:
        out: Folder for the PNGs (viewer_*.png).
        width: Window width in px (the views must fit it).
        height: Window height in px.
    """
    from cader.evaluate.viewer.browser import Chromium

    target = Path(out)
    target.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory(prefix="viewer-shots-") as tmp, Chromium(width, height) as browser:
        page = write_demo_page(Path(tmp))
        for name, (fragment, what) in SHOTS.items():
            browser.open(page.as_uri() + fragment)
            browser.wait_for("document.body && document.body.dataset.usableMs")
            errors = browser.evaluate("document.getElementById('errors').textContent")
            if errors:
                raise RuntimeError(f"{name}: the page reported script errors: {errors}")
            wide = browser.evaluate("document.documentElement.scrollWidth")
            if wide > width:
                raise RuntimeError(f"{name}: the view is {wide} px wide, more than the {width} px window")
            path = target / f"{name}.png"
            if what == "full":
                browser.screenshot(path, full_height=True, max_height=2400)
            else:
                browser.screenshot(path, selector=what)
            written.append(path)
            print(f"wrote {path}")
    return written


if __name__ == "__main__":
    CLI(main, as_positional=False)
