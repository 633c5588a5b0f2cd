"""Write a self-contained HTML viewer for a CADER run folder (or a tree of them).

    python evaluate/view.py runs/tiny/eval --out runs/tiny/viewer.html
    cader view runs/tiny/eval/full/synthetic --video_root runs/tiny/data/eval --thumbs 4

One static file, no server and no CDN: the records are inlined as JSON and drawn by vanilla JS, lazily, so 2,000
samples open at once. See docs/viewer.md.
"""

import logging
import sys

from cader.cli.docstrings import argument_help
from cader.evaluate.viewer.build import write_viewer
from jsonargparse import ActionConfigFile, ArgumentParser


def build_parser(prog: str | None = None) -> ArgumentParser:
    helps = argument_help(write_viewer)
    parser = ArgumentParser(prog=prog, description=__doc__.split("\n")[0])
    parser.add_argument("--config", action=ActionConfigFile)
    parser.add_argument("root", type=str, help=helps["root"])
    parser.add_argument("--out", type=str | None, default=None, help=helps["out"])
    parser.add_argument("--video_root", type=str | None, default=None, help=helps["video_root"])
    parser.add_argument("--thumbs", type=int, default=0, help=helps["thumbs"])
    parser.add_argument("--calibration", type=list[str], default=[], help=helps["calibration"])
    parser.add_argument("--judgments", type=list[str], default=[], help=helps["judgments"])
    parser.add_argument("--judged_benchmarks", type=list[str], default=["agentvidbench"],
                        help=helps["judged_benchmarks"])
    return parser


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    args = build_parser(prog).parse_args(argv).as_dict()
    args.pop("config", None)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args["thumbs"] < 0:
        print("evaluate/view.py: error: --thumbs must be >= 0", file=sys.stderr)
        return 2
    try:
        path, built = write_viewer(**args)
    except FileNotFoundError as exc:
        print(f"evaluate/view.py: error: {exc}", file=sys.stderr)
        return 2
    problems = len(built.problems.messages)
    print(f"{path}: {len(built.cards)} samples in {len(built.runs)} runs, {path.stat().st_size / 1e6:.2f} MB, "
          f"{problems} problems" + (" (listed at the top of the page)" if problems else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
