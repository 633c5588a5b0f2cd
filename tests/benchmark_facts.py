"""What the benchmark tests know about each registered benchmark beyond its registration: the facts each
fixture folder states in ``tests/fixtures/<folder>/facts.json`` (the folder is the registration's ``folder``).

Keys: ``annotations`` (the release's annotation files, globs under the folder, whose schema the synthetic writer
must match), ``fixed_file_names`` (the release names those files; false: the names derive from ids),
``states_duration_seconds`` (the release gives each video's duration in seconds), and ``first_row`` when the
annotation rows are flat: ``benchmark``, ``file`` (under the folder), the ``question``/``options``/``video``
fields, ``error_row`` (the row label its BenchmarkError carries), optionally ``video_is_an_id`` (the row names
the video by id; the loader adds the folder and suffix) and ``blank_text_scored`` (the official scorer asks a
blank question or option as it is).
"""

from __future__ import annotations

import json
from pathlib import Path

from cader.evaluate.benchmarks import Benchmark, benchmarks

FIXTURES = Path(__file__).parent / "fixtures"


def facts_of(benchmark: Benchmark) -> dict:
    return folder_facts(benchmark.folder)


def folders() -> list[str]:
    """Every registered benchmark's folder, once, in write order."""
    return list(dict.fromkeys(b.folder for b in benchmarks()))


def folder_facts(folder: str) -> dict:
    """The folder's facts, or {} when it has none (``test_every_benchmark_states_its_facts`` fails then, with the
    folder's name, rather than collection failing for every test)."""
    path = FIXTURES / folder / "facts.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def first_rows() -> dict[str, dict]:
    """benchmark name -> its ``first_row`` facts, for every folder that states one."""
    rows = {}
    for folder in folders():
        first = folder_facts(folder).get("first_row")
        if first:
            rows[first["benchmark"]] = {**first, "file": f"{folder}/{first['file']}"}
    return rows


def release_annotations() -> dict[str, list[str]]:
    """folder -> annotation globs, for every folder laid out as a release."""
    return {f: folder_facts(f)["annotations"] for f in folders() if folder_facts(f).get("annotations")}
