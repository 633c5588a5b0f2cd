"""What sft.py checks before it trains, each answered with one line instead of a traceback from deep inside Lightning,
DeepSpeed or torch: a GPU recipe on a machine without CUDA (and the flag that gives the CPU route), more GPUs than
the machine has, a resume checkpoint that is missing, empty or cut short; and where a run's files go.

Every function here is pure or reads only the files it names, so each is tested on its own.
"""
from __future__ import annotations

import importlib
import os
import re
import zipfile
from pathlib import Path

# The CPU route of a GPU recipe (configs/train/cpu.yaml): stacked after the recipe's own --config
CPU_ROUTE = "--config configs/train/cpu.yaml"


def strategy_class_name(strategy) -> str:
    """The strategy a parsed trainer config names: a class path (jsonargparse Namespace or dict), a registered name
    such as "deepspeed_stage_3", or an instance; '' for none."""
    if strategy is None:
        return ""
    if isinstance(strategy, str):
        return strategy
    class_path = strategy.get("class_path") if isinstance(strategy, dict) else getattr(strategy, "class_path", None)
    if class_path:
        return str(class_path)
    return f"{type(strategy).__module__}.{type(strategy).__qualname__}"


def _deepspeed_kind(name: str) -> str | None:
    """'cuda' for a DeepSpeed strategy that needs CUDA, 'cpu' for CPUDeepSpeedStrategy, None for any other."""
    if not name:
        return None
    if "." not in name:   # a registered name: "deepspeed", "deepspeed_stage_3_offload", ...
        return "cuda" if name.startswith("deepspeed") else None
    module, _, attr = name.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        return "cuda" if "deepspeed" in name.lower() and "cpudeepspeed" not in name.lower() else None
    from cader.train.strategies import CPUDeepSpeedStrategy
    from lightning.pytorch.strategies import DeepSpeedStrategy

    if isinstance(cls, type) and issubclass(cls, CPUDeepSpeedStrategy):
        return "cpu"
    if isinstance(cls, type) and issubclass(cls, DeepSpeedStrategy):
        return "cuda"
    return None


def requested_devices(devices) -> int | None:
    """The number of devices `trainer.devices` asks for (an int, a digit string or a list of indices); None for
    "auto", -1 and other forms that mean "whatever there is"."""
    if isinstance(devices, (list, tuple)):
        return len(devices)
    if isinstance(devices, str) and "," in devices:
        return len([d for d in devices.split(",") if d.strip()])
    try:
        count = int(devices)
    except (TypeError, ValueError):
        return None
    return count if count > 0 else None


def device_problem(accelerator: str | None, strategy, devices, cuda_devices: int) -> str | None:
    """Why this trainer config cannot start on a machine with `cuda_devices` CUDA GPUs (None if it can).

    accelerator: trainer.accelerator ("gpu", "cuda", "cpu", "auto", ...).
    strategy: trainer.strategy as parsed (see `strategy_class_name`).
    devices: trainer.devices as parsed.
    cuda_devices: torch.cuda.device_count() when CUDA is available, else 0.
    """
    accelerator = str(accelerator or "auto").lower()
    kind = _deepspeed_kind(strategy_class_name(strategy))
    wants_gpu = accelerator in ("gpu", "cuda")
    if cuda_devices == 0:
        if wants_gpu:
            needs = f"trainer.accelerator is {accelerator}" + (" with DeepSpeed" if kind == "cuda" else "")
        elif kind == "cuda":   # accelerator cpu/auto: Lightning's DeepSpeedStrategy still refuses anything but CUDA
            needs = f"the strategy {strategy_class_name(strategy).rpartition('.')[2]} (DeepSpeed) needs CUDA"
        else:
            return None
        return (f"{needs}, but this machine has no CUDA GPU (torch.cuda.is_available() is False); for a CPU dry "
                f"run add `{CPU_ROUTE}` after this config (one process, fp32, DeepSpeed ZeRO over gloo: "
                "CPUDeepSpeedStrategy)")
    wanted = requested_devices(devices)
    if (wants_gpu or accelerator == "auto") and wanted is not None and wanted > cuda_devices:
        return (f"trainer.devices is {wanted} but this machine has {cuda_devices} CUDA GPU"
                f"{'s' if cuda_devices != 1 else ''}; set --trainer.devices {cuda_devices}")
    return None


def machine_cuda_devices() -> int:
    """How many CUDA GPUs torch can use here (0 without CUDA, a driver or a GPU)."""
    import torch

    try:
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except RuntimeError:   # a CUDA build whose driver cannot be initialised
        return 0


# ---- resuming ----

LAST_NAME = re.compile(r"^last(-\d+)?\.ckpt$")   # Lightning's names for the `save_last` checkpoint


def last_checkpoint(folders: list[Path]) -> Path | None:
    """The checkpoint `--ckpt_path last` resumes from, as Lightning picks it: the newest `last*.ckpt` (file, folder
    or link) in the checkpoint folders; None when there is none (Lightning then starts from scratch). A link whose
    target is gone counts too (Lightning would skip it and silently start from scratch), so it is reported."""
    found = [p for folder in folders if folder.is_dir() for p in folder.iterdir() if LAST_NAME.match(p.name)]
    dated = [(p.lstat().st_mtime if not p.exists() else p.stat().st_mtime, p) for p in found]
    return max(dated)[1] if dated else None


def _torch_file_problem(path: Path) -> str | None:
    """Why `path`, a file torch.save wrote (a zip archive), cannot be loaded; None if it looks whole."""
    size = path.stat().st_size
    if size == 0:
        return "is empty (0 bytes)"
    if not zipfile.is_zipfile(path):   # the zip's directory is at its end: a cut-short file has none
        return f"is cut short or not a checkpoint ({size} bytes, no end-of-archive record)"
    try:
        with zipfile.ZipFile(path) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, OSError) as err:
        return f"is unreadable ({err})"
    if not any(name.endswith("data.pkl") for name in names):
        return "is a zip file but not a torch checkpoint (no data.pkl)"
    return None


def checkpoint_problem(path: Path) -> str | None:
    """Why the checkpoint at `path` (a Lightning .ckpt file, or a DeepSpeed checkpoint folder of .pt files) cannot
    be resumed from; None if every file of it looks whole. Reads only the archives' directories, not the tensors."""
    if path.is_symlink() and not path.exists():
        return f"is a link to {os.readlink(path)}, which does not exist"
    if not path.exists():
        return "does not exist"
    if path.is_file():
        return _torch_file_problem(path)
    parts = sorted(p for p in path.rglob("*.pt") if p.is_file())
    if not parts:
        return "is a folder holding no checkpoint files (*.pt)"
    for part in parts:
        problem = _torch_file_problem(part)
        if problem:
            return f"holds {part.relative_to(path)}, which {problem}"
    return None


def intact_alternatives(bad: Path) -> list[Path]:
    """Other checkpoints beside `bad` that pass `checkpoint_problem`, newest first."""
    folder = bad.parent
    if not folder.is_dir():
        return []
    others = [p for p in folder.iterdir() if p.name.endswith(".ckpt") and p.name != bad.name
              and not p.is_symlink() and checkpoint_problem(p) is None]
    return sorted(others, key=lambda p: p.stat().st_mtime, reverse=True)


def resume_problem(ckpt_path: str | None, checkpoint_folders: list[Path]) -> tuple[str | None, str | None]:
    """(the checkpoint path to hand to `Trainer.fit`, or None; a one-line error, or None) for `--ckpt_path`.

    "last" resolves as Lightning does (`last_checkpoint`); a first run with `--ckpt_path last` and no checkpoint
    yet starts from scratch, as Lightning's own "last" does. Other special values ("best", "hpc", registry
    names) pass through to Lightning unchecked.
    """
    if ckpt_path is None:
        return None, None
    if ckpt_path == "last":
        path = last_checkpoint(checkpoint_folders)
        if path is None:
            return "last", None
    elif ckpt_path in ("best", "hpc") or ckpt_path.startswith("registry:"):
        return ckpt_path, None
    else:
        path = Path(ckpt_path)
    problem = checkpoint_problem(path)
    if problem is None:
        return str(path), None
    others = intact_alternatives(path)
    advice = (f"resume from an intact one, e.g. --ckpt_path {others[0]}" if others else
              "no intact checkpoint beside it: train again without --ckpt_path (or pass one you kept elsewhere)")
    return None, f"--ckpt_path {ckpt_path}: {path} {problem}; {advice}"


def state_dict_mismatch(err: BaseException, ckpt_path: str | None) -> str | None:
    """A one-line reason for torch's 'Error(s) in loading state_dict' while resuming (None for any other error)."""
    text = str(err)
    if ckpt_path is None or not text.startswith("Error(s) in loading state_dict"):
        return None
    missing = re.search(r"Missing key\(s\) in state_dict: (.*?)(?:\.\s*\n|\.\s*Unexpected|$)", text, re.DOTALL)
    unexpected = re.search(r"Unexpected key\(s\) in state_dict: (.*?)(?:\.\s*\n|$)", text, re.DOTALL)
    counts = []
    for label, match in (("missing", missing), ("unexpected", unexpected)):
        if match:
            keys = re.findall(r'"([^"]+)"', match.group(1))
            counts.append(f"{len(keys)} {label} keys, e.g. {keys[0]}" if keys else f"{label} keys")
    detail = "; ".join(counts) or text.splitlines()[0]
    return (f"--ckpt_path {ckpt_path}: the checkpoint does not fit this model ({detail}): it was written by "
            "another run (full SFT vs LoRA, another model); give each run its own --trainer.default_root_dir")


# ---- where a run's files go ----

def outside_run_dir(paths: dict[str, str | None], root: str) -> list[str]:
    """The settings of `paths` ({setting: folder}) whose folder is not inside `root`: files that would not move
    with `--trainer.default_root_dir`."""
    base = os.path.realpath(root)
    return [f"{name} {path}" for name, path in paths.items()
            if path and os.path.commonpath([base, os.path.realpath(path)]) != base]
