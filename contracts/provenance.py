"""Where a result came from: the code (git commit and whether the tree was dirty), the packages, the date and the
command line. Every stage writes this block into its summary file (report.json, calibration.json,
judge_report.json, the export's cader_export.json), so a number can be traced to what produced it.

Nothing here may fail a run: a checkout without git, or a package that is not installed, is recorded as null.
"""

from __future__ import annotations

import datetime as _dt
import importlib.metadata
import itertools
import logging
import platform
import re
import shlex
import subprocess
import sys
from pathlib import Path

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


# Where a URL starts inside any text (a message, a command line, a comma or `|` list of URLs): its scheme.
_URL_START = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
# Punctuation that closes the text around a URL (a quote, a bracket, a list's separator), not part of the URL.
_URL_CLOSERS = "'\"`.,;:)]}>|"
MASK = "***"


def _redact_one(url: str) -> str:
    """One URL (scheme://...), its userinfo, query values and fragment masked (`redact_url`)."""
    scheme, rest = url.split("://", 1)
    # The userinfo ends at the last "@" of the authority, which ends at the first "/", "?" or "#" (RFC 3986). A raw
    # "/" in a password (a base64 key) moves that "@" past a "/": then the last "@" before the first "?"/"#" ends
    # it (on a path with an "@" this hides more, never less). A "?" or "#" before an "@" and no "/" between them
    # is either a password holding "?" or a query value holding "@": which part is the host cannot be told, so
    # all of it is hidden.
    at = re.split(r"[/?#]", rest, maxsplit=1)[0].rfind("@")
    if rest.split("/", 1)[0].rfind("@") > at:
        return f"{scheme}://{MASK}"
    at = re.split(r"[?#]", rest, maxsplit=1)[0].rfind("@")
    userinfo = f"{MASK}@" if at >= 0 else ""
    rest = rest[at + 1:]
    rest, hash_mark, fragment = rest.partition("#")
    address, question_mark, query = rest.partition("?")
    # every value is masked whatever its name (a signature `sig=`, a session id...): the names say what was sent
    items = (name for name in re.split(r"[&;]", query) if name)
    query = "&".join(f"{item.partition('=')[0]}={MASK}" if "=" in item else MASK for item in items)
    return (f"{scheme}://{userinfo}{address}{question_mark}{query}"
            f"{hash_mark}{MASK if fragment else ''}")


def redact_url(text: str) -> str:
    """`text` with every URL in it stripped of what may be a credential; the one redaction of URLs that every log
    line, error message and output file goes through. In each URL (scheme://..., found anywhere in the text, in
    lists joined with `,` or `|` too) the userinfo becomes `***` (`http://***@host:8000/v1`), every query value
    `***` with its name kept (`?api-key=***&sig=***`; a lone item `?***`) and a fragment `#***`; scheme, host, port
    and path are kept. Text without a URL is returned as it is."""
    if "://" not in text:
        return text
    starts = [m.start() for m in _URL_START.finditer(text)] + [len(text)]
    out = [text[:starts[0]]]
    for start, next_start in itertools.pairwise(starts):
        # a URL runs to white space or to the next URL's scheme; what follows it there stays as it is
        space = re.search(r"\s", text[start:next_start])
        end = start + space.start() if space else next_start
        url = text[start:end].rstrip(_URL_CLOSERS)  # never into "://": the "/" stops it
        out += [_redact_one(url), text[start + len(url):next_start]]
    return "".join(out)


class RedactURLs(logging.Filter):
    """A log filter passing every record on with the URLs in its message redacted (`redact_url`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = redact_url(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


def redact_urls_logged_by(*names: str) -> None:
    """Redact the URLs in what the named loggers log themselves (a logger's filters do not see its children's
    records): HTTP clients, such as httpx, which logs each request's URL, password and query included, at INFO."""
    for name in names:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactURLs) for f in logger.filters):
            logger.addFilter(RedactURLs())


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
