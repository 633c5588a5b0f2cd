"""Write a self-contained HTML viewer of CADER runs side by side (run folders, or trees of them).

    python evaluate/view.py runs/tiny/eval --out runs/tiny/viewer.html --reference full/synthetic
    cader view runs/a/eval/full/synthetic runs/b/eval/full/synthetic --video_root runs/tiny/data/eval --thumbs 4

One static file, no server and no CDN: the records are inlined as compact JSON and drawn by vanilla JS, only as
many cards as the screen shows, so 20,000 samples open at once. See docs/viewer.md.
"""

import logging
import sys

from cader.cli.function_cli import call_arguments, function_parser
from cader.evaluate.viewer.build import write_viewer
from jsonargparse import ArgumentParser


def build_parser(prog: str | None = None) -> ArgumentParser:
    """The flags of evaluate/view.py: `write_viewer`'s parameters, the run folders given without a flag."""
    return function_parser(write_viewer, prog, positional=("root",), description=__doc__.split("\n")[0])


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Write the viewer and print its size and problem count; exit 2 on a missing run.

    argv: the flags (default: sys.argv[1:]).
    prog: the program name the usage shows.
    """
    args = call_arguments(build_parser(prog), argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args["thumbs"] < 0:
        print("evaluate/view.py: error: --thumbs must be >= 0", file=sys.stderr)
        return 2
    try:
        path, built = write_viewer(**args)
    except (FileNotFoundError, ValueError) as exc:  # a missing run; a --reference that names none of the runs
        print(f"evaluate/view.py: error: {exc}", file=sys.stderr)
        return 2
    problems = len(built.problems.messages)
    print(f"{path}: {len(built.cards)} samples in {len(built.runs)} runs, {path.stat().st_size / 1e6:.2f} MB, "
          f"{problems} problems" + (" (listed at the top of the page)" if problems else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
