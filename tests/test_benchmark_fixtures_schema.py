"""The synthetic evaluation sets (``scripts/make_synthetic_data.py`` -> ``cader.dev.synthetic.eval_sets``) are
written in the same layouts as the release conformance fixtures: the same annotation files, and per file the same
fields with the same value types (nested fields included). The synthetic rows may add ``evidence_window`` (their
ground truth), which no release has."""

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from benchmark_facts import folder_facts, release_annotations
from cader.dev.synthetic.eval_sets import write_eval_sets

FIXTURES = Path(__file__).parent / "fixtures"
SYNTHETIC_ONLY = {"evidence_window"}

# benchmark folder -> the annotation files (globs) whose schema must match: each fixture's facts.json
ANNOTATIONS = release_annotations()


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    out = tmp_path_factory.mktemp("synth") / "eval"
    write_eval_sets(out, np.random.default_rng(0), n_eval=4, n_heldout=1,
                    video={"duration_range": (12, 14), "width": 32, "height": 32})
    return out


def describe(value) -> set[str]:
    """Type names of a JSON value, nested: {"list[str]"}, {"dict{id:str,type:str}"}; None -> {"null"}."""
    if value is None:
        return {"null"}
    if isinstance(value, bool):
        return {"bool"}
    if isinstance(value, (int, float, str)):
        return {type(value).__name__}
    if isinstance(value, list):
        inner = set().union(*(describe(v) for v in value)) - {"null"} if value else set()
        return {f"list[{'|'.join(sorted(inner))}]"} if inner else {"list"}
    if isinstance(value, dict):
        return {
            "dict{" + ",".join(f"{k}:{'|'.join(sorted(describe(v)))}" for k, v in sorted(value.items())) + "}"
        }
    return {type(value).__name__}


def _rows(path: Path) -> list[dict]:
    if path.suffix == ".parquet":
        return pq.read_table(path).to_pylist()
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    data = json.loads(path.read_text())
    return data if isinstance(data, list) else [data]


def schema(root: Path, pattern: str) -> dict[str, set[str]]:
    """field -> the non-null value types seen in any row of the files matching ``pattern``."""
    files = sorted(root.glob(pattern))
    assert files, f"no {pattern} under {root}"
    fields: dict[str, set[str]] = {}
    for file in files:
        for row in _rows(file):
            for key, value in row.items():
                fields.setdefault(key, set()).update(describe(value) - {"null"})
    return fields


def parquet_types(root: Path, pattern: str) -> dict[str, str]:
    types = {}
    for file in sorted(root.glob(pattern)):
        for field in pq.read_schema(file):
            types[field.name] = str(field.type).replace("element:", "item:")
    return types


@pytest.mark.parametrize(("folder", "pattern"), [(f, p) for f, ps in ANNOTATIONS.items() for p in ps])
def test_synthetic_annotation_schema_matches_the_release_fixture(synthetic, folder, pattern):
    release, ours = schema(FIXTURES / folder, pattern), schema(synthetic / folder, pattern)
    assert set(ours) - SYNTHETIC_ONLY == set(release), f"{folder}/{pattern}: fields differ"
    for field, types in release.items():
        # the generated value types are among the release's (a generated file may not use every variant,
        # e.g. a failed video2dataset download's error text); nothing the release does not have
        assert ours[field] <= types or (not ours[field] and not types), (
            folder,
            pattern,
            field,
            ours[field],
            types,
        )
        assert ours[field] or not types or field in ("error_message", "yt_meta_dict"), (folder, field)
    if pattern.endswith(".parquet"):
        release_types, our_types = (
            parquet_types(FIXTURES / folder, pattern),
            parquet_types(synthetic / folder, pattern),
        )
        assert {k: v for k, v in our_types.items() if k not in SYNTHETIC_ONLY} == release_types


@pytest.mark.parametrize("folder", sorted(ANNOTATIONS))
def test_synthetic_file_names_follow_the_release(synthetic, folder):
    def names(root):
        return {p.relative_to(root).as_posix() for pattern in ANNOTATIONS[folder] for p in root.glob(pattern)}

    release, ours = names(FIXTURES / folder), names(synthetic / folder)
    if folder_facts(folder)["fixed_file_names"]:
        assert ours == release
    else:  # names derived from ids: same folders and suffixes
        assert {(str(Path(p).parent.parent), Path(p).suffix) for p in ours} == {
            (str(Path(p).parent.parent), Path(p).suffix) for p in release
        }
