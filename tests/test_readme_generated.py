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
    assert {"quickstart", "seeds_summary", "bench_summary"} <= set(readme)


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


def _seeds(held: dict, flags: dict) -> dict:
    return {"seeds": [0, 1, 2], "bars": {b: b for b in held},
            "spread": {"bars_held": held, "stage1_accuracy": {"median": 0.5, "min": 0.25, "max": 0.75}},
            "per_seed": {str(s): {"red_flags": flags.get(s, [])} for s in (0, 1, 2)}}


@pytest.mark.parametrize(("held", "flags", "want"), [
    ({"a": 3, "b": 3}, {}, "2 of 2 bars hold on every seed"),
    ({"a": 3, "b": 2}, {1: ["T on a search bound"]}, "1 of 2 bars hold on every seed"),
])
def test_seeds_summary_counts_bars_held_on_every_seed(held, flags, want):
    line = update_readme.render_seeds_summary(_seeds(held, flags))
    assert want in line
    assert "median 50.0 % (min 25.0 %, max 75.0 %)" in line
    assert ("red flags: on seed 1" if flags else "red flags: none on any seed") in line


def test_the_real_files_render_without_a_missing_marker():
    for name, (file, render) in update_readme.RENDERERS.items():
        body = render(json.loads((update_readme.MEASURED / file).read_text()))
        assert body.strip() and "not measured yet" not in body, name
