"""`cader SUB --help` without importing the stage: no Lightning, torch or scipy for a help text.

`cader sft --help` is LightningCLI's help: building its parser imports Lightning, torch, torchmetrics and
torchvision (7 s on an idle 2-core machine, 24-28 s and 1 GB on a loaded one); eval's parser imports torch and
calibrate's scipy (1-5 s on a loaded machine). The text changes only when cader's code or those packages change.
So the first bare `--help` of a subcommand renders it as always and keeps the text in the user's cache
($XDG_CACHE_HOME/cader/help, else ~/.cache/cader/help), named by a key over everything the text is made from: the
subcommand and its fixed arguments, the terminal width, the versions of the packages the parsers come from, the
interpreter, and the size and modification time of every source file of cader. A later bare `--help` under the same
key prints the kept text and imports nothing of the stage. A changed file, package or width is a new key, so a kept
text is never stale; `CADER_HELP_CACHE=0` turns the cache off.

Only `cader SUB --help` (or `-h`) alone is served from the cache: any other argument (a --config whose values the
help would show, --print_config) builds the parser.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import io
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

HELP_FLAGS = (["--help"], ["-h"])
# the distributions the stages' parsers are made of (their help texts, defaults, the Trainer's flags)
PACKAGES = ("cader-toolkit", "jsonargparse", "docstring-parser", "lightning", "torch", "transformers", "peft")
CADER_PACKAGES = ("cader.vlm", "cader.train", "cader.calibrate", "cader.evaluate", "cader.contracts", "cader.cli")


def is_help_request(args: list[str]) -> bool:
    return args in HELP_FLAGS


def cache_dir() -> Path | None:
    """Where help texts are kept; None when the cache is turned off (CADER_HELP_CACHE=0)."""
    if os.environ.get("CADER_HELP_CACHE", "1") == "0":
        return None
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "cader" / "help"


def source_files() -> list[Path]:
    """Every Python file of cader's packages (found without importing them), in a fixed order."""
    files = []
    for package in CADER_PACKAGES:
        spec = importlib.util.find_spec(package)
        for folder in (spec.submodule_search_locations or []) if spec else []:
            files += Path(folder).rglob("*.py")
    return sorted(files)


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "-"


def help_key(subcommand: list[str]) -> str:
    """The digest a help text is kept under: what it is rendered from (module docstring)."""
    digest = hashlib.sha256()
    parts = [*subcommand, str(shutil.get_terminal_size().columns), sys.version, sys.executable,
             *(f"{name}=={_version(name)}" for name in PACKAGES)]
    for path in source_files():
        stat = path.stat()
        parts.append(f"{path}:{stat.st_size}:{stat.st_mtime_ns}")
    digest.update("\n".join(parts).encode())
    return digest.hexdigest()[:32]


def cached_help(subcommand: list[str], render: Callable[[], object]) -> int:
    """Print the help of `subcommand` (its name and fixed arguments) from the cache, else from `render()` (the
    stage's main with --help, which prints it and exits 0), keeping what it printed for the next time."""
    folder = cache_dir()
    kept = folder / f"{help_key(subcommand)}.txt" if folder is not None else None
    if kept is not None and kept.is_file():
        sys.stdout.write(kept.read_text(encoding="utf-8"))
        return 0
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            code = render()
        except SystemExit as done:   # argparse's --help exits after printing
            code = done.code
    text = out.getvalue()
    sys.stdout.write(text)
    if kept is not None and code in (0, None) and text:
        with contextlib.suppress(OSError):   # an unwritable cache costs the speed-up, not the help
            kept.parent.mkdir(parents=True, exist_ok=True)
            partial = kept.with_suffix(f".{os.getpid()}.tmp")
            partial.write_text(text, encoding="utf-8")
            partial.replace(kept)
    return 0 if code is None else code
