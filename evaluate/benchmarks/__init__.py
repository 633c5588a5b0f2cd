"""Benchmark registry: each name maps to a loader that reads the benchmark's released layout.

    from cader.evaluate.benchmarks import available, load_benchmark, video_path
    samples, errors = load_benchmark("lvbench", data_root)   # errors: rows that could not be used

Names: videomme_long, mlvu_dev, longvideobench_val, lvbench, videoevalpro_mcq, agentvidbench, and the synthetic
ones written by ``scripts/make_synthetic_data.py``: ``synthetic`` (test split) and ``synthetic_heldout`` (the
held-out split for ``calibrate/fit.py``; a separate name rather than a ``--split`` flag so every CLI that takes
``--benchmark`` can select it). Each loader's module docstring gives the layout it expects under
``<data_root>/<folder>/``; ``data_root`` may also point straight at that folder.

Each layout is the official release's, pinned by a conformance fixture under ``tests/fixtures/<benchmark>/`` whose
``PROVENANCE.md`` names the release files and reader code every field and rule comes from.

Contract: a malformed row never raises; it comes back as a ``BenchmarkError`` naming file and row, so the runner
records and counts it. Empty or missing question/option text, more than 26 options and a video path that is
absolute or climbs out of ``data_root`` with ``..`` are such row errors. A missing layout raises ``FileNotFoundError``; an unknown name raises
``UnknownBenchmarkError`` (a ``KeyError``) with a did-you-mean suggestion. Gold answers are always letters,
extracted deterministically.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from pathlib import Path

from cader.evaluate.benchmarks import (
    agentvidbench,
    longvideobench,
    lvbench,
    mlvu,
    synthetic,
    videoevalpro,
    videomme,
)
from cader.evaluate.benchmarks.base import LETTERS, BenchmarkError, Sample

__all__ = [
    "LETTERS",
    "BenchmarkError",
    "Sample",
    "UnknownBenchmarkError",
    "available",
    "load_benchmark",
    "video_path",
]

Loader = Callable[[str | Path], tuple[list[Sample], list[BenchmarkError]]]

_REGISTRY: dict[str, Loader] = {
    videomme.NAME: videomme.load,
    mlvu.NAME: mlvu.load,
    longvideobench.NAME: longvideobench.load,
    lvbench.NAME: lvbench.load,
    videoevalpro.NAME: videoevalpro.load,
    agentvidbench.NAME: agentvidbench.load,
    "synthetic": synthetic.load,
    "synthetic_heldout": synthetic.load_heldout,
}


class UnknownBenchmarkError(KeyError):
    """An unknown benchmark name; the message suggests the closest known names."""

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0])


def available() -> list[str]:
    return sorted(_REGISTRY)


def get_loader(name: str) -> Loader:
    if name not in _REGISTRY:
        close = difflib.get_close_matches(name, _REGISTRY, n=3, cutoff=0.5)
        hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise UnknownBenchmarkError(f"unknown benchmark {name!r}.{hint} Known: {', '.join(available())}")
    return _REGISTRY[name]


def load_benchmark(name: str, data_root: str | Path) -> tuple[list[Sample], list[BenchmarkError]]:
    """All samples of ``name`` under ``data_root`` in file order, plus the rows that could not be used."""
    return get_loader(name)(data_root)


def video_path(sample: Sample, data_root: str | Path) -> Path:
    return Path(data_root) / sample.video
