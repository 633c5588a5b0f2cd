"""Benchmark registry: each name maps to a loader that reads the benchmark's released layout.

    from cader.evaluate.benchmarks import available, load_benchmark, video_path
    samples, errors = load_benchmark("lvbench", data_root)   # errors: rows that could not be used

The registry is found, not written: every module of this package that defines ``BENCHMARK`` (a
``base.Benchmark``) or ``BENCHMARKS`` (several, as ``synthetic.py``'s two splits) registers those names, so adding
a benchmark is adding its module. ``available()`` lists the names, ``released()`` those with an official release
(``python -m cader.evaluate.benchmarks [--real true]`` prints them, one a line, for shell scripts); ``benchmarks()`` gives the registrations, with each one's folder, macro metric
and synthetic writer. The synthetic names are ``synthetic`` (test split) and ``synthetic_heldout`` (the held-out
split for ``calibrate/fit.py``; a separate name rather than a ``--split`` flag so every CLI that takes
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
import importlib
import pkgutil
from pathlib import Path

from cader.evaluate.benchmarks.base import LETTERS, Benchmark, BenchmarkError, Loader, Sample

__all__ = [
    "LETTERS",
    "Benchmark",
    "BenchmarkError",
    "Sample",
    "UnknownBenchmarkError",
    "available",
    "benchmarks",
    "get_benchmark",
    "load_benchmark",
    "macro_metric",
    "released",
    "video_path",
]

_NOT_LOADERS = {"base"}


def _discover() -> dict[str, Benchmark]:
    """Every registration of this package's modules, in ``write_order`` then name order; a name registered
    twice is an import-time error naming both modules (two loaders cannot answer one ``--benchmark``)."""
    found: dict[str, tuple[Benchmark, str]] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name in _NOT_LOADERS or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        registered = getattr(module, "BENCHMARKS", ()) + (
            (module.BENCHMARK,) if hasattr(module, "BENCHMARK") else ()
        )
        for benchmark in registered:
            if benchmark.name in found:
                raise ValueError(
                    f"benchmark {benchmark.name!r} is registered by both {found[benchmark.name][1]} and "
                    f"{module.__name__}"
                )
            found[benchmark.name] = (benchmark, module.__name__)
    ordered = sorted((b for b, _ in found.values()), key=lambda b: (b.write_order, b.name))
    return {b.name: b for b in ordered}


_REGISTRY: dict[str, Benchmark] = _discover()


class UnknownBenchmarkError(KeyError):
    """An unknown benchmark name; the message suggests the closest known names."""

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0])


def available() -> list[str]:
    """Every registered ``--benchmark`` name, sorted."""
    return sorted(_REGISTRY)


def benchmarks() -> list[Benchmark]:
    """Every registration, in the order ``write_eval_sets`` writes their synthetic copies."""
    return list(_REGISTRY.values())


def released() -> list[str]:
    """The names of the benchmarks with an official release, in write order (the synthetic task's left out):
    what the miniature runs full CADER on besides ``synthetic``, and what end-to-end tests iterate."""
    return [b.name for b in _REGISTRY.values() if b.released]


def get_benchmark(name: str) -> Benchmark:
    """The registration of ``name``; ``UnknownBenchmarkError`` with a did-you-mean otherwise.

    name: a ``--benchmark`` name.
    """
    if name not in _REGISTRY:
        close = difflib.get_close_matches(name, _REGISTRY, n=3, cutoff=0.5)
        hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        raise UnknownBenchmarkError(f"unknown benchmark {name!r}.{hint} Known: {', '.join(available())}")
    return _REGISTRY[name]


def get_loader(name: str) -> Loader:
    """The loader of ``name`` (see ``get_benchmark``).

    name: a ``--benchmark`` name.
    """
    return get_benchmark(name).load


def macro_metric(name: str | None) -> str | None:
    """The macro metric ``name`` is reported with (MLVU's "M-Avg"), or None: plain accuracy, also for a name
    the registry does not know (records of another toolkit's task are still reported).

    name: the ``benchmark`` field of a record.
    """
    benchmark = _REGISTRY.get(name) if isinstance(name, str) else None
    return benchmark.macro_metric if benchmark else None


def load_benchmark(name: str, data_root: str | Path) -> tuple[list[Sample], list[BenchmarkError]]:
    """All samples of ``name`` under ``data_root`` in file order, plus the rows that could not be used.

    name: a ``--benchmark`` name.
    data_root: the folder holding the benchmark's folder (or the benchmark's folder itself).
    """
    return get_loader(name)(data_root)


def video_path(sample: Sample, data_root: str | Path) -> Path:
    """The video file of ``sample`` under ``data_root``.

    sample: a loaded sample.
    data_root: the ``data_root`` it was loaded from.
    """
    return Path(data_root) / sample.video
