"""tests/fixtures/make_benchmark_fixtures.py, the add-a-benchmark guide's regeneration step: it reproduces the committed
fixtures byte for byte and keeps the hand-written files (PROVENANCE.md, facts.json) it does not generate."""

import filecmp
import importlib.util
import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures"
WRITERS = ["videomme", "mlvu", "longvideobench", "lvbench", "videoevalpro", "agentvidbench"]


def load_writer(here: Path):
    spec = importlib.util.spec_from_file_location("make_benchmark_fixtures", FIXTURES / "make_benchmark_fixtures.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.HERE = here  # write into a copy, never over the committed fixtures
    return module


def differences(left: Path, right: Path) -> list[str]:
    cmp = filecmp.dircmp(left, right)
    found = [f"only in {left.name}: {n}" for n in cmp.left_only] + [f"only in the rewrite: {n}" for n in cmp.right_only]
    found += [f"differs: {n}" for n in filecmp.cmpfiles(left, right, cmp.common_files, shallow=False)[1]]
    for sub in cmp.common_dirs:
        found += [f"{sub}/{d}" for d in differences(left / sub, right / sub)]
    return found


@pytest.mark.parametrize("name", WRITERS)
def test_a_regeneration_reproduces_the_committed_fixture_and_keeps_its_hand_written_files(tmp_path, name):
    shutil.copytree(FIXTURES / name, tmp_path / name)
    hand_written = {p.name for p in (FIXTURES / name).iterdir() if p.name in ("PROVENANCE.md", "facts.json")}
    assert "PROVENANCE.md" in hand_written
    getattr(load_writer(tmp_path), name)()
    assert {p.name for p in (tmp_path / name).iterdir()} >= hand_written
    assert differences(FIXTURES / name, tmp_path / name) == []
