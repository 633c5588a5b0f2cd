"""scripts/miniature_seeds.py: the robustness grid's design, its cells' numbers and the grid file they go to."""

import importlib
import json
from collections import Counter

import pytest

grid = importlib.import_module("cader.scripts.miniature_seeds")


def test_the_design_takes_every_value_of_every_factor_at_least_twice_over_three_or_more_seeds():
    cells = grid.DESIGN
    assert len(cells) >= 8 and len({c.seed for c in cells}) >= 3
    for factor, values in (("threads", (1, 2)), ("loss", ("labelled", "all")), ("order", (0, 1))):
        counts = Counter(getattr(c, factor) for c in cells)
        assert all(counts[v] >= 2 for v in values), (factor, counts)
    assert len({c.name for c in cells}) == len(cells)
    # the heavy tier's two cells differ in every factor
    first, last = cells[0], cells[-1]
    assert all(getattr(first, f) != getattr(last, f) for f in ("seed", "threads", "loss", "order"))


def test_a_cell_names_its_folder_and_sets_the_quickstarts_variables():
    assert grid.Cell().name == "seed_0"   # the README's run
    cell = grid.Cell(3, 2, "all", 1)
    assert cell.name == "seed_3_threads2_loss_all_order1"
    assert cell.env() == {"SEED": "3", "THREADS": "2", "LOSS": "all", "DATA_ORDER": "1"}


def _numbers(stage1=0.5, bars=None):
    return {"stage1_accuracy": stage1, "margin_auroc": 0.9, "table2": {"full": 0.9},
            "bars": bars or {b: True for b in grid.BARS}, "red_flags": []}


def test_cells_append_and_the_newest_training_code_is_what_counts(tmp_path):
    path = tmp_path / "grid.json"
    old = {"cell": {"seed": 0}, "training_code": "old", "numbers": _numbers(0.1)}
    grid.append_cell(path, old)
    grid.append_cell(path, {"cell": {"seed": 0}, "training_code": "new", "numbers": _numbers(0.5)})
    grid.append_cell(path, {"cell": {"seed": 1}, "training_code": "new", "numbers": _numbers(0.7)})
    grid.append_cell(path, {"cell": {"seed": 1}, "training_code": "new", "numbers": _numbers(0.9)})   # a rerun
    saved = json.loads(path.read_text())
    assert len(saved["records"]) == 4 and saved["records"][0] == old   # appended, nothing rewritten
    newest = grid.newest_cells(saved["records"])
    assert [c["numbers"]["stage1_accuracy"] for c in newest] == [0.5, 0.9]
    assert saved["newest"]["cells"] == 2
    assert saved["newest"]["spread"]["stage1_accuracy"] == {"min": 0.5, "median": 0.7, "max": 0.9, "n": 2}
    assert saved["newest"]["spread"]["bars_held"] == dict.fromkeys(grid.BARS, 2)


def test_the_spread_skips_cells_that_did_not_measure_a_number():
    cells = [{"numbers": _numbers(s)} for s in (0.2, None, 0.6)]
    out = grid.aggregate(cells)
    assert out["stage1_accuracy"] == {"min": 0.2, "median": pytest.approx(0.4), "max": 0.6, "n": 2}
    assert grid.spread([None]) == {"min": None, "median": None, "max": None, "n": 0}


def test_the_training_code_fingerprint_follows_the_committed_tree():
    fingerprint = grid.training_code()
    assert len(fingerprint) == 12 and fingerprint == grid.training_code()
