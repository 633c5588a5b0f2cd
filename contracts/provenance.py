"""Where a result came from: the code (git commit and whether the tree was dirty), the packages, the date and the
command line. Every stage writes this block into its summary file (report.json, calibration.json,
judge_report.json, the export's cader_export.json), so a number can be traced to what produced it.

Nothing here may fail a run: a checkout without git, or a package that is not installed, is recorded as null.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import platform
import re
import shlex
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from cader.contracts.types import Record
from pydantic import Field

# The packages whose versions change what a run computes (model code, kernels, decoding, statistics).
TRACKED_PACKAGES = (
    "cader-toolkit", "torch", "torchvision", "transformers", "tokenizers", "lightning", "deepspeed", "peft",
    "vllm", "decord", "av", "numpy", "scipy", "datasets", "pydantic", "openai", "anthropic", "lmms_eval",
)

# Command-line flags whose value must never reach a file (keys are read from the environment, but a user may still
# pass one on the command line of a wrapper).
_SECRET_FLAG_WORDS = {"key", "apikey", "token", "secret", "password", "passwd", "credentials"}

_REPO = Path(__file__).resolve().parent.parent


class ProvenanceRecord(Record):
    """The provenance block of a summary file."""

    git_commit: str | None = Field(default=None, description="HEAD of the cader checkout that ran, or null.")
    git_dirty: bool | None = Field(default=None, description="The checkout had uncommitted changes to tracked files.")
    packages: dict[str, str | None] = Field(default_factory=dict, description="Installed version of each package.")
    python: str | None = Field(default=None, description="Python version.")
    platform: str | None = Field(default=None, description="Operating system and machine.")
    date: str | None = Field(default=None, description="UTC time the block was written, ISO 8601.")
    command: str | None = Field(default=None, description="The command line (secret-looking values redacted).")


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(_REPO), *args], capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def _secret_name(name: str) -> bool:
    # by whole words of the name: api_key, hf-token, judge.secret, api-key, not monkey
    return any(w in _SECRET_FLAG_WORDS for w in re.split(r"[-_.]+", name.lower()))


def redact_url(text: str) -> str:
    """`text` with a URL's credentials hidden: the password of user:password@host, and the value of every query
    parameter whose name says key/token/secret/password (`?api-key=...`); any other text is returned as it is."""
    if "://" not in text:
        return text
    try:
        parts = urlsplit(text)
    except ValueError:
        return text
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        netloc = f"{userinfo.split(':', 1)[0]}:***@{host}" if ":" in userinfo else f"***@{host}"
    query = "&".join(f"{name}=***" if _secret_name(name) else f"{name}={value}" if eq else name
                     for name, eq, value in (item.partition("=") for item in parts.query.split("&") if item))
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_argv(argv: list[str]) -> list[str]:
    """argv with the value of every flag whose name says key/token/secret/password replaced by '***', and the
    credentials inside any URL (user:password@, a key in the query: `--base_url https://h/v1?api-key=...`) hidden."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append("***")
            hide_next = False
            continue
        name, eq, value = arg.partition("=")
        secret = name.startswith("-") and _secret_name(name)
        if secret and eq:
            out.append(f"{name}=***")
        elif eq and name.startswith("-"):
            out.append(f"{name}={redact_url(value)}")
        else:
            out.append(redact_url(arg))
            hide_next = secret
    return out


def collect_provenance(argv: list[str] | None = None) -> dict:
    """The provenance block as a plain dict (JSON-ready)."""
    head = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no") if head else None
    argv = list(sys.argv if argv is None else argv)
    record = ProvenanceRecord(
        git_commit=head or None,
        git_dirty=None if status is None else bool(status),
        packages={name: _version(name) for name in TRACKED_PACKAGES},
        python=platform.python_version(),
        platform=f"{platform.system()} {platform.machine()}",
        date=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        command=shlex.join(redact_argv(argv)) if argv else None,
    )
    return record.model_dump()
