"""Data-parallel evaluation on several GPUs/nodes with torchrun (`evaluate/run.py --devices N [--num_nodes M]`).

The command the user runs becomes the launcher: it starts `torch.distributed.run` with one process per device,
each process a shard of the videos (rank r of world w takes `--shard r/w`: whole videos with all their
questions, balanced by duration, `cader.evaluate.shards.shard_videos`; it writes its own
`predictions.shard-r-of-w.jsonl`, resumable like any run) on device `cuda:LOCAL_RANK`. A rank the balance gives no
video (more ranks than videos) writes an empty shard and its marker. A rank that finishes writes a
`.done` marker beside its shard; node 0's launcher waits for all markers (shards on other nodes reach it through the
shared output folder) and merges them into predictions.jsonl and the report. Nothing else is shared between ranks,
so a slow rank holds no collective and no timeout applies.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

RUN_SCRIPT = Path(__file__).resolve().with_name("run.py")


def launched_rank() -> tuple[int, int, int] | None:
    """(rank, world size, local rank) when this process was started by torchrun, else None."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return None
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", "0"))


def rank_device(device: str, local_rank: int) -> str:
    """`cuda` -> `cuda:<local rank>` (one GPU per rank); other devices as given."""
    return f"cuda:{local_rank}" if device == "cuda" else device


def torchrun_command(devices: int, num_nodes: int, argv: list[str], env: dict) -> list[str]:
    """The torchrun invocation that re-runs evaluate/run.py with the same arguments on every device."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(devices), "--nnodes", str(num_nodes)]
    if num_nodes == 1:
        cmd.append("--standalone")
    else:
        for key in ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK"):
            if key not in env:
                raise ValueError(f"--num_nodes {num_nodes}: set {key} on every node (see docs/walkthrough.md, Multi-node)")
        cmd += ["--node_rank", env["NODE_RANK"], "--master_addr", env["MASTER_ADDR"], "--master_port",
                env["MASTER_PORT"]]
    return cmd + [str(RUN_SCRIPT), *argv]


def done_marker(shard_file: Path) -> Path:
    return shard_file.with_suffix(".done")


def launch(devices: int, num_nodes: int, argv: list[str]) -> int:
    """Run the ranks of this node; the exit status of torchrun (non-zero when a rank failed)."""
    return subprocess.call(torchrun_command(devices, num_nodes, argv, dict(os.environ)))


def wait_for_shards(out_dir: Path, world: int, poll_s: float = 5.0, timeout_s: float | None = None) -> None:
    """Block until every rank's `.done` marker is in `out_dir` (all ranks of all nodes finished)."""
    markers = [done_marker(out_dir / f"predictions.shard-{r}-of-{world}.jsonl") for r in range(world)]
    start = time.monotonic()
    while not all(m.exists() for m in markers):
        if timeout_s is not None and time.monotonic() - start > timeout_s:
            missing = [m.name for m in markers if not m.exists()]
            raise TimeoutError(f"ranks still running after {timeout_s:.0f} s: {missing}")
        time.sleep(poll_s)
