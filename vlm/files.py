"""Atomic file writes: readers see the old file or the new one, never half of one.

Every result file of the pipeline (reports, calibration.json, data_report.json, plan caches, merged predictions,
judge cache entries) is written through `write_atomic`, JSON documents through `write_json_atomic`: the text goes
to a temporary file with a name unique to this call in the same folder, is flushed to disk, then replaces the
target with os.replace. The unique name matters when several processes (DDP ranks, shards) write the same target
at once: each leaves a whole file, and a failed write leaves no tmp behind.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path


def _umask() -> int:
    # Linux reports it in /proc without changing it; elsewhere it can only be read by setting it and back, which
    # other threads creating files at that instant would see
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: str | os.PathLike, content: str | Iterable[str], durable: bool = True) -> Path:
    """Write `content` (a string, or lines/chunks written in order) to `path` atomically; returns the path.

    `durable` also fsyncs before the replace, so a crash right after cannot leave an empty file; a cache whose
    lost entries are only misses can skip that cost (it serialises concurrent writers on some filesystems).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp creates the file 0600; the result is an ordinary output file, so it gets the mode any file
        # written with open() would: 0666 less the umask (a shared run folder stays readable by the group)
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            if isinstance(content, str):
                handle.write(content)
            else:
                handle.writelines(content)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def finite_or_none(value):
    """`value` with every NaN or infinite float replaced by None, recursively: JSON has no NaN."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(v) for v in value]
    return value


def write_json_atomic(path: str | os.PathLike, payload, durable: bool = True) -> Path:
    """`payload` as indented strict JSON (NaN and infinities written as null) through `write_atomic`."""
    return write_atomic(path, json.dumps(finite_or_none(payload), indent=2, allow_nan=False) + "\n", durable)
