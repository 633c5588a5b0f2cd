"""The measured figures of README.md and docs/ are the rendering of docs/measured/ (scripts/update_readme.py), never
hand-typed, and no figure has been dropped from the pages."""

import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
update_readme = importlib.import_module("cader.scripts.update_readme")


def test_every_page_matches_docs_measured():
    pages = update_readme.pages(REPO)
    assert REPO / "README.md" in pages
    for page in pages:
        text = page.read_text()
        assert update_readme.render_readme(text) == text, f"{page} is stale: run python scripts/update_readme.py"


def test_every_renderer_has_a_block_on_some_page():
    # a block moved off a page must land on another one, or its figures are lost
    names = [name for page in update_readme.pages(REPO) for name in update_readme.block_names(page.read_text())]
    assert set(update_readme.RENDERERS) <= set(names), sorted(set(update_readme.RENDERERS) - set(names))
    readme = update_readme.block_names((REPO / "README.md").read_text())
    assert {"quickstart", "grid_summary", "bench_summary"} <= set(readme)


def test_the_check_fails_on_a_stale_page_and_names_it(tmp_path, capsys):
    page = tmp_path / "page.md"
    page.write_text("x\n<!-- BEGIN generated: bench -->\nold numbers\n<!-- END generated: bench -->\n")
    assert update_readme.main(files=[str(page)], check=True) == 1
    assert str(page) in capsys.readouterr().err
    assert update_readme.main(files=[str(page)]) == 0
    assert "old numbers" not in page.read_text()
    assert update_readme.main(files=[str(page)], check=True) == 0


def test_blocks_are_rendered_from_their_files(tmp_path):
    (tmp_path / "bench.json").write_text('[{"key": "B9", "title": "t", "goal": ">= 2x", "value": 2.5, "status": "pass"}]')
    (tmp_path / "quickstart.json").write_text(
        '{"stage1_heldout": {"k": 30, "n": 48, "rate": 0.625, "ci95": [0.474, 0.76], "chance": 0.1667},'
        ' "red_flags": ["the AgentVidBench judge is the loopback test double, not a real judge"]}')
    text = ("a\n<!-- BEGIN generated: bench -->\nold\n<!-- END generated: bench -->\nb\n"
            "<!-- BEGIN generated: quickstart -->\n<!-- END generated: quickstart -->\n")
    out = update_readme.render_readme(text, measured=tmp_path)
    assert "| B9 | t | 2.5 | >= 2x | pass |" in out and "old" not in out
    assert "held-out Stage-1 accuracy 30/48 = 62.5 % (95 % CI 47.4 %–76.0 %), chance 16.7 %" in out
    assert "red flags: the AgentVidBench judge is the loopback test double" in out
    assert out.startswith("a\n") and "\nb\n" in out


def test_bench_summary_counts_the_passes_and_names_every_miss():
    rows = [{"key": "B1", "title": "video decode: loader vs pyav", "goal": ">= 3x", "value": 3.1, "status": "pass"},
            {"key": "B7", "title": "samples in flight: 8 vs 1", "goal": ">= 5x", "value": 4.42,
             "status": "below goal"},
            {"key": "B9", "title": "overlap", "goal": "<= 1.15", "value": None, "status": "error: OSError: disk"}]
    line = update_readme.render_bench_summary(rows)
    assert "1 of 3 meet their goal" in line
    assert "B7 samples in flight 4.42 (goal >= 5x)" in line
    assert "B9 overlap – (goal <= 1.15; error: OSError: disk)" in line
    assert "B1" not in line
    assert update_readme.render_bench_summary(rows[:1]).endswith("1 of 1 meet their goal.\n")


def _grid(bars_per_cell: list[dict]) -> dict:
    from cader.scripts.miniature_seeds import aggregate

    records = [{"cell": {"seed": i, "threads": 1, "loss": "labelled", "order": 0}, "name": f"seed_{i}",
                "commit": "abc1234", "training_code": "t1",
                "numbers": {"stage1_accuracy": 0.25 * (i + 1), "margin_auroc": 0.9, "temperature": 1.5,
                            "exit_rate": 0.5, "proposals_contain_evidence": 0.8, "proposals_evidence_p": 1e-9,
                            "routed_stage1_accuracy": 0.2, "routed_final_accuracy": 0.9,
                            "table2": {"full": 0.9, "no_stage2": 0.8}, "cost_forwards": 0.5, "cost_frames": 0.6,
                            "red_flags": [], "bars": bars}} for i, bars in enumerate(bars_per_cell)]
    return {"bars": {b: f"bar {b}" for b in bars_per_cell[0]}, "records": records,
            "newest": {"cells": len(records), "spread": aggregate(records)}}


@pytest.mark.parametrize(("bars", "want"), [
    ([{"a": True, "b": True}] * 3, "every bar holds in 3 of 3 cells"),
    ([{"a": True, "b": True}, {"a": True, "b": False}, {"a": True, "b": True}],
     ("every bar holds in 2 of 3 cells; held-out Stage-1 accuracy median 50.0 % (min 25.0 %, max 75.0 %); bars not "
      "held everywhere: b (2/3)")),
])
def test_grid_summary_counts_the_cells_where_every_bar_holds(bars, want):
    assert want in update_readme.render_grid_summary(_grid(bars))


def test_grid_table_has_a_row_per_cell_and_counts_each_bar():
    table = update_readme.render_grid(_grid([{"a": True, "b": True}, {"a": True, "b": False}]))
    assert "| 0 | 1 | labelled | as shipped | 25.0 % | 0.900 | 1.500 | 50.0 % | 80.0 % | 20.0 % → 90.0 % | 90.0 % | 80.0 % | 2/2 |" in table
    assert "| 1 | 1 | labelled | as shipped | 50.0 % |" in table and "| 1/2 |" in table
    assert "- bar a: 2/2" in table and "- bar b: 1/2" in table and "commit abc1234" in table


def test_the_real_files_render_without_a_missing_marker():
    for name, (file, render) in update_readme.RENDERERS.items():
        body = render(json.loads((update_readme.MEASURED / file).read_text()))
        assert body.strip() and "not measured yet" not in body, name
