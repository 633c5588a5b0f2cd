"""Decode every video sample of a training config once, into its frame cache, before the GPU job.

    python scripts/fill_frame_cache.py --config configs/train/cot_mix.yaml --data.frame_cache_dir /fast/frames \\
        [--workers 16] [--dry_run] [any other train/sft.py flag]

The paper trains one epoch, so a cache filled lazily by the first epoch would never be read: this fills it ahead, on
CPU nodes, with the same config and flags as train/sft.py (`--data.frame_cache_dir` is required; the training run
then takes the same value). The mix is planned as `--plan_only true` plans it (from the plan cache when that is
warm), and each planned video sampling (file, rate, frame count, pixel budget) is decoded on one of `workers`
processes (one decoder and one torch thread each) and stored with `cader.vlm.frame_cache`. Entries already there
are kept, so a stopped fill resumes where it was; a video that cannot be decoded is counted and left to training,
which skips it as it always did. Prints one JSON summary: entries written, already there and failed, bytes, seconds,
and `bytes_at_most`, the disk the planned samplings can take (frames x pixel budget x 3); `--dry_run` stops there.
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


def take_flag(argv: list[str], name: str, has_value: bool) -> str | None:
    """Remove `name` (and its value) from `argv`; its value, "true" for a bare switch, None when absent."""
    if name not in argv:
        return None
    at = argv.index(name)
    value = argv[at + 1] if has_value else "true"
    del argv[at:at + 1 + has_value]
    return value


def planned_items(argv: list[str]):
    """Plan the mix of the train/sft.py command line `argv`: (planned samples, base rate, frame cache folder)."""
    from cader.train.cli import local_processor_problem, parse_sft_args
    from cader.train.datamodule import SFTDataModule

    config = parse_sft_args(argv)
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
    return module.items, module.budget.fps, data["frame_cache_dir"]


OWN_HELP = """usage: fill_frame_cache.py [--workers N] [--dry_run] --data.frame_cache_dir DIR [train/sft.py flags]

Decode every video sample of a training config once, into the frame cache training then reads.

this script's options:
  --workers N   decoding processes, one decoder and one torch thread each (default: the usable cores)
  --dry_run     plan the mix and print how many samplings it holds and the bytes they can take; decode nothing

Every other flag is train/sft.py's, with the same config files:
"""


def main(argv: list[str] | None = None) -> dict:
    """Fill the cache for train/sft.py's command line `argv` plus `--workers N` (default: the usable cores) and
    `--dry_run` (plan and size only)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:   # its own flags first; the SFT parser then prints the rest and exits
        print(OWN_HELP)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    workers = max(1, int(take_flag(argv, "--workers", True) or cores))
    dry_run = take_flag(argv, "--dry_run", False) is not None
    items, fps, root = planned_items(argv)
    jobs = video_samplings(items, fps)
    plan = {"frame_cache_dir": str(root), "samplings": len(jobs), "bytes_at_most": bytes_at_most(jobs)}
    if dry_run:
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
    main()
