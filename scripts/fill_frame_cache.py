"""Decode every video sample of a training config once, into its frame cache, before the GPU job.

    python scripts/fill_frame_cache.py --config configs/train/cot_mix.yaml --data.frame_cache_dir /fast/frames \\
        [--workers 16] [--dry_run true] [any other train/sft.py flag]

The paper trains one epoch, so a cache filled lazily by the first epoch would never be read: this fills it ahead, on
CPU nodes, with the same config and flags as train/sft.py (`--data.frame_cache_dir` is required; the training run
then takes the same value). The mix is planned as `--plan_only true` plans it (from the plan cache when that is
warm), and each planned video sampling (file, rate, frame count, pixel budget) is decoded on one of `--workers`
processes (one decoder and one torch thread each) and stored with `cader.vlm.frame_cache`. Entries already there
are kept, so a stopped fill resumes where it was; a video that cannot be decoded is counted and left to training,
which skips it as it always did. Prints one JSON summary: entries written, already there and failed, bytes, seconds,
and `bytes_at_most`, the disk the planned samplings can take (frames x pixel budget x 3); `--dry_run true` stops
there. The command line is train/sft.py's LightningCLI plus those two options (`FillFrameCacheCLI`).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from pathlib import Path

import torch
from cader.train.cli import SFTCLI, make_cli
from cader.vlm.frame_cache import TrainingSampling, fill_in_worker


def video_samplings(items, fps: float) -> list[tuple[str, TrainingSampling]]:
    """The distinct (video path, sampling) pairs of planned training samples at base rate `fps`, in plan order."""
    seen: dict[tuple[str, TrainingSampling], None] = {}
    for item in items:
        for media in item.sample.media:
            if media["type"] == "video":
                sampling = TrainingSampling(fps, item.plan.video_frames[0], item.plan.video_max_pixels)
                seen[(str(Path(item.media_root) / media["path"]), sampling)] = None
    return list(seen)


def bytes_at_most(jobs: list[tuple[str, TrainingSampling]]) -> int:
    """An upper bound of the cache's size: every planned frame at its full pixel budget, 3 bytes a pixel."""
    return sum(sampling.frames * sampling.max_pixels * 3 for _, sampling in jobs if sampling.max_pixels)


class FillFrameCacheCLI(SFTCLI):
    """train/sft.py's command line (the same config files and flags) plus the fill's own options, listed first."""

    usage = ("%(prog)s [--workers N] [--dry_run true] --data.frame_cache_dir DIR [--config CONFIG]\n"
             "       [any other train/sft.py flag]")
    description = ("Decode every video sample of a training config once, into the frame cache training then reads. "
                   "Every flag but --workers and --dry_run is train/sft.py's.")

    def add_arguments_to_parser(self, parser) -> None:
        super().add_arguments_to_parser(parser)
        parser.add_argument("--workers", type=int | None, default=None,
                            help="decoding processes, one decoder and one torch thread each (default: the usable "
                                 "cores)")
        parser.add_argument("--dry_run", type=bool, default=False,
                            help="plan the mix and print how many samplings it holds and the bytes they can take; "
                                 "decode nothing")
        # the fill's options lead the help, before the SFT recipe's (the default group holds both)
        group = parser._action_groups[1]
        own = [a for a in group._group_actions if a.dest in ("workers", "dry_run")]
        group._group_actions[:] = own + [a for a in group._group_actions if a not in own]


def planned_items(config):
    """Plan the mix of a parsed train/sft.py configuration: (planned samples, base rate, frame cache folder)."""
    from cader.train.cli import local_processor_problem
    from cader.train.datamodule import SFTDataModule

    data = config.data.as_dict()
    if not data.get("frame_cache_dir"):
        raise SystemExit("fill_frame_cache: set --data.frame_cache_dir (the folder training will read)")
    data["report_dir"] = data.get("report_dir") or config.trainer.default_root_dir or "."
    module = SFTDataModule(**data)
    module.read_all()
    problem = local_processor_problem(module.processor_path)
    if problem:
        raise SystemExit(f"fill_frame_cache: {problem}")
    if not Path(module.processor_path).is_dir():
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # in the local cache: never reach for the network
    module.prepare_data()
    module.setup("fit")
    return module.frame_cache_items(), module.budget.fps, data["frame_cache_dir"]


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Parse the command line, then `fill_frame_cache` its configuration; exit 0.

    argv: train/sft.py's flags plus --workers and --dry_run (default: sys.argv[1:]).
    prog: the program name the usage shows.
    """
    fill_frame_cache(make_cli(argv, prog, FillFrameCacheCLI).config)
    return 0


def fill_frame_cache(config) -> dict:
    """Plan the mix of `config` (a parsed FillFrameCacheCLI) and decode each planned sampling into its frame cache;
    returns the printed summary (the plan alone under `dry_run`)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    workers = max(1, config.workers or cores)
    items, fps, root = planned_items(config)
    jobs = video_samplings(items, fps)
    plan = {"frame_cache_dir": str(root), "samplings": len(jobs), "bytes_at_most": bytes_at_most(jobs)}
    if config.dry_run:
        print(json.dumps(plan, indent=1))
        return plan
    start = time.perf_counter()
    counts = {"written": 0, "present": 0, "failed": 0}
    written_bytes, failures = 0, []
    # one torch thread per process, as in a DataLoader worker: the parallelism is across processes
    with ProcessPoolExecutor(workers, initializer=torch.set_num_threads, initargs=(1,)) as pool:
        for done, (outcome, size) in enumerate(pool.map(partial(fill_in_worker, str(root)), jobs, chunksize=4), 1):
            status = outcome.split(":", 1)[0]
            counts[status] += 1
            written_bytes += size
            if status == "failed":
                failures.append(outcome.split(": ", 1)[1])
            if done % 1000 == 0:
                print(f"fill_frame_cache: {done}/{len(jobs)} samplings", file=sys.stderr)
    summary = {**plan, **counts, "bytes_written": written_bytes,
               "seconds": round(time.perf_counter() - start, 1), "workers": workers, "failures": failures[:20]}
    print(json.dumps(summary, indent=1))
    return summary


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    sys.exit(main())
