"""The robustness grid's two most different cells from scratch (heavy tier): the README's run and the cell that
differs from it in every factor (seed, torch threads, training loss, data order) each hold every bar."""

import importlib
import json

import pytest

grid = importlib.import_module("cader.scripts.miniature_seeds")


@pytest.mark.heavy
# measured (docs/measured/miniature_grid.json): the last cell's proposals lose their grounding (windows far past the
# scene, docs/miniature.md "What is still fragile"); strict, so the run that fixes it fails here until this goes
@pytest.mark.xfail(strict=True, reason="DESIGN[-1]'s first proposals are too broad (docs/miniature.md#robustness)")
def test_the_two_cells_that_differ_in_every_factor_hold_every_bar(tmp_path):
    first, last = grid.DESIGN[0], grid.DESIGN[-1]
    # one at a time: the last cell's two torch threads want both cores of a 2-core machine
    records = grid.main(cells=[first, last], workdir=str(tmp_path / "cells"), parallel=1,
                        json_out=str(tmp_path / "grid.json"))
    assert [r["name"] for r in records] == [first.name, last.name]
    for record in records:
        failed = [bar for bar, held in record["numbers"]["bars"].items() if not held]
        assert failed == [], (record["name"], failed, record["numbers"])
    saved = json.loads((tmp_path / "grid.json").read_text())
    assert saved["newest"]["cells"] == 2 and set(saved["newest"]["spread"]["bars_held"].values()) == {2}
