"""The checks evaluate/run.py makes on its flags before anything is loaded: one line per problem, naming the flag."""

from __future__ import annotations

import math
from pathlib import Path

from cader.contracts.calibration import NO_EXIT_TAU
from cader.contracts.paper import SELF_VERIFIER
from cader.evaluate.runner import parse_shard
from cader.vlm.loading import missing_local_path


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def argument_problems(args) -> list[str]:
    """Every flag value that cannot mean what it says, one line each (empty when all can). Checked before anything
    is loaded, so a typo costs no model load and no partial run: `--limit -3` would run all but the last 3.

    args: the parsed flags of evaluate/run.py.
    """
    problems = []
    if args.limit is not None and args.limit < 0:
        problems.append(f"--limit must be >= 0 (run the first N samples), got {args.limit}")
    for name in ("concurrency", "devices", "num_nodes"):
        if getattr(args, name) < 1:
            problems.append(f"--{name} must be >= 1, got {getattr(args, name)}")
    try:
        parse_shard(args.shard)
    except ValueError as err:
        problems.append(str(err))
    # tau: the rule calibration.json's tau follows (cader.contracts.calibration), so a flag cannot set what a
    # calibration file may not: M is in [0, 1], and NO_EXIT_TAU (just above 1) means "no sample exits".
    if not _finite(args.tau) or not 0.0 <= args.tau <= NO_EXIT_TAU:
        problems.append(f"--tau must be in [0, 1] (or {NO_EXIT_TAU!r}: no early exit), got {args.tau!r}")
    if not _finite(args.temperature) or args.temperature <= 0:
        problems.append(f"--temperature must be a finite number > 0, got {args.temperature!r}")
    if not _finite(args.delta) or not 0.0 <= args.delta <= 1.0:  # compared with P_yes, a probability
        problems.append(f"--delta must be in [0, 1], got {args.delta!r}")
    if getattr(args, "backend", "hf") == "hf" and not getattr(args, "merge", False):
        problems += device_problems(getattr(args, "device", "cpu"), cuda_devices())
    return problems


def cuda_devices() -> int:
    """CUDA devices this process can use (0 without a driver or a CUDA build of torch)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def device_problems(device: str, cuda_count: int) -> list[str]:
    """--device naming a CUDA GPU this machine does not have (a paper config, `device: cuda`, on a CPU machine): one
    line naming the flag that gives the CPU route, instead of the driver's traceback at model load."""
    if not str(device).startswith("cuda"):
        return []
    index = str(device).partition(":")[2]
    wanted = int(index) if index.isdigit() else 0
    if cuda_count == 0:
        return [(f"--device {device}: this machine has no CUDA GPU; pass --device cpu for a CPU dry run "
                 "(docs/walkthrough.md)")]
    if wanted >= cuda_count:
        return [f"--device {device}: this machine has {cuda_count} CUDA GPU(s) (cuda:0..cuda:{cuda_count - 1})"]
    return []


def path_problems(args) -> list[str]:
    """The input paths that do not exist, one line each naming the flag and the path.

    args: the parsed flags of evaluate/run.py.
    """
    problems = []
    if not args.merge and args.data_root and not Path(args.data_root).is_dir():
        problems.append(f"--data_root {args.data_root}: no such folder")
    for flag in ("calibration", "compare", "stage1_from"):
        value = getattr(args, flag)
        if value and not Path(value).is_file():
            problems.append(f"--{flag} {value}: no such file")
    if not args.merge:
        for flag in ("model", "verifier"):
            value = getattr(args, flag)
            if flag == "verifier" and value == SELF_VERIFIER:   # a keyword, not a path: the main model verifies
                continue
            problem = model_problem(value)
            if problem:
                problems.append(f"--{flag} {problem}")
    return problems


def model_problem(path: str | None) -> str | None:
    """Why --model/--verifier `path` is certainly not loadable (None when it may be): a local path naming no folder
    (`cader.vlm.loading.missing_local_path`; handed on, it would come back as a bad hub id), or a folder without
    config.json. A hub id is left to the loader: it may be in the cache, or downloadable.

    path: the --model or --verifier value.
    """
    if not path:
        return None
    local = Path(path).expanduser()
    if local.is_dir():
        return None if (local / "config.json").is_file() else f"{path}: folder has no config.json (not a model folder)"
    return f"{path}: no such folder" if missing_local_path(path) else None


def calibration_binding(args, values: dict) -> tuple[dict | None, str]:
    """(report.json's `calibration_binding` block or None, the refusal or the warning line, '' when none): whether
    --calibration was certified under this run's settings (backbone, Stage-1 frames and pixels, benchmark).

    args: the checked flags (--calibration, --model, --benchmark, --accept_calibration_mismatch).
    values: the run's CaderConfig values (r1, max_frames, max_pixels).
    """
    if not args.calibration:
        return None, ""
    from cader.calibrate.calibration_file import read_calibration
    from cader.evaluate.calibration_binding import check_binding, run_settings
    from cader.evaluate.method.stage1_reuse import model_fingerprint

    settings = run_settings(model=args.model, model_fingerprint=model_fingerprint(args.model), r1=values["r1"],
                            max_frames=values["max_frames"], max_pixels=values["max_pixels"],
                            benchmark=args.benchmark)
    verdict = check_binding(read_calibration(args.calibration), settings, args.accept_calibration_mismatch)
    return verdict.report_block(), verdict.message(args.calibration)
