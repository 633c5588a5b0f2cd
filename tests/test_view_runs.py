"""The viewer's views in a real browser, driven as a reader drives them (headless Chromium over the DevTools pipe,
real mouse clicks): the runs side by side with numbers equal to each run's report.json, judge report and the
toolkit's paired test; the radars' values equal to the judge reports; the slices equal to report.json's breakdowns;
the question view with every run's answer, route and judgment; the judge's reasons; filters by tag; sorting; every
view inside a 1280 px window; a card whose record has a field of the wrong shape drawn, marked, without a script
error.

Chromium comes from scripts/install_browser.sh (Debian's `chromium`); without it these tests skip, saying so.
"""

import json
import math
import re

import numpy as np
import pytest
from cader.evaluate.report import compare_runs
from cader.evaluate.runner import read_records
from cader.evaluate.viewer.browser import Chromium, chromium_binary
from cader.evaluate.viewer.build import write_viewer
from PIL import Image
from view_run_tree import build_run_tree

# slow: the run tree takes seconds to build and the browser seconds to start
pytestmark = [pytest.mark.slow, pytest.mark.skipif(chromium_binary() is None,
                                                   reason="chromium is not installed (bash scripts/install_browser.sh)")]
REFERENCE = "eval/full/synthetic"


@pytest.fixture(scope="module")
def tree(tmp_path_factory, barcode_video):
    root = tmp_path_factory.mktemp("viewer_runs")
    (root / "videos").mkdir()
    (root / "videos" / barcode_video.name).symlink_to(barcode_video)
    build_run_tree(root / "runs", root / "videos" / barcode_video.name, n_synthetic=16)
    page, built = write_viewer([root / "runs"], root / "viewer.html", video_root=root / "videos", thumbs=2,
                               reference="full/synthetic")
    return root / "runs", page, built


@pytest.fixture(scope="module")
def browser():
    with Chromium(1280, 900) as chromium:
        yield chromium


def open_view(browser, page, fragment: str):
    browser.open(page.as_uri() + fragment)
    browser.wait_for("document.body && document.body.dataset.usableMs")
    assert browser.evaluate("document.getElementById('errors').textContent") == ""


def rows_of(browser, selector: str) -> list[dict]:
    """Each row of a table: its data- attributes and, per cell, the cell's data- attributes and text."""
    return browser.evaluate(f"""Array.from(document.querySelectorAll({json.dumps(selector)} + " tbody tr")).map((tr) =>
        ({{data: Object.assign({{}}, tr.dataset), cells: Array.from(tr.children).map((td) =>
            Object.assign({{text: td.textContent}}, td.dataset))}}))""")


def run_folder(runs_root, name):
    return runs_root / name  # the page names a run by its folder below the tree given


def test_the_runs_side_by_side_carry_each_runs_own_numbers(tree, browser):
    runs_root, page, built = tree
    open_view(browser, page, "")
    assert browser.evaluate("document.body.dataset.view") == "runs"  # several runs: the page opens on them
    head = browser.evaluate("Array.from(document.querySelectorAll('#summary thead th')).map((th) => th.textContent)")
    column = {name: k for k, name in enumerate(head)}
    rows = {r["data"]["run"]: r for r in rows_of(browser, "#summary")}
    assert set(rows) == set(built.runs) and len(built.runs) == 5
    judges = {"eval/full/agentvidbench": runs_root / "judge", "eval/no_rgr/agentvidbench":
              runs_root / "eval" / "no_rgr" / "agentvidbench" / "judge"}
    for name, row in rows.items():
        report = json.loads((run_folder(runs_root, name) / "report.json").read_text())
        overall, cells = report["overall"], row["cells"]
        accuracy = cells[column["accuracy % [95% exact]"]]
        assert float(accuracy["v"]) == overall["accuracy"]
        low, high = overall["accuracy_ci95_exact"]
        assert f"[{low:.2f}, {high:.2f}]" in accuracy["text"]
        assert float(cells[column["Stage-1 exit %"]]["v"]) == overall["stage1_exit_rate"]
        # as report.json gives it: the cost per sample, and the wall-clock seconds from its timing block
        seconds = ((report.get("timing") or {}).get("seconds") or {}).get("per_sample")
        per_sample = {**report["cost"]["per_sample"], **({} if seconds is None else {"seconds": seconds})}
        for key, title in (("seconds", "s / sample"), ("forwards", "forwards / sample"),
                           ("frames_decoded", "frames / sample")):
            assert (title in column) == (key in per_sample), title
            if key in per_sample:
                assert float(cells[column[title]]["v"]) == pytest.approx(per_sample[key])
        if name in judges:
            judge = json.loads((judges[name] / "judge_report.json").read_text())
            assert float(cells[column["Traj"]]["v"]) == pytest.approx(judge["traj"])
            assert float(cells[column["MC-rate"]]["v"]) == pytest.approx(judge["mc_rate"])
            for axis in ("P1", "P2", "P3", "P5"):
                assert float(cells[column[axis]]["v"]) == pytest.approx(judge[axis]), (name, axis)
            assert judge["P4"] is None and "v" not in cells[column["P4"]]  # not applicable: shown as '-'
        else:
            assert cells[column["Traj"]]["text"] == "-"
    # deltas: to the reference where the questions are shared, the paired test evaluate/report.py computes
    assert rows[REFERENCE]["data"].get("base") is None and "reference" in rows[REFERENCE]["cells"][column[
        "Δ acc, paired [95% CI]"]]["text"]
    for name in ("eval/rejected/synthetic", "eval/too_broad/synthetic", "eval/no_rgr/agentvidbench"):
        base = REFERENCE if "synthetic" in name else "eval/full/agentvidbench"
        assert rows[name]["data"]["base"] == base
        expected = compare_runs(read_records(run_folder(runs_root, name) / "predictions.jsonl"),
                                read_records(run_folder(runs_root, base) / "predictions.jsonl"))
        paired = rows[name]["cells"][column["Δ acc, paired [95% CI]"]]
        assert int(paired["n"]) == expected["n"] > 0
        assert float(paired["diff"]) == pytest.approx(100 * expected["bootstrap"]["diff"], abs=1e-4)
        assert float(paired["low"]) == pytest.approx(100 * expected["bootstrap"]["low"], abs=1e-4)
        p_value = rows[name]["cells"][column["McNemar p (only this / only base)"]]["p"]
        assert float(p_value) == pytest.approx(expected["mcnemar"]["p_value"], abs=1e-5)


def test_each_judged_run_has_a_radar_of_its_judge_reports_axes(tree, browser):
    runs_root, page, _ = tree
    open_view(browser, page, "#v=runs")
    radars = browser.evaluate("""Array.from(document.querySelectorAll('figure.radar')).map((f) => {
        const svg = f.querySelector('svg'), run = f.querySelector('polygon.radar-run');
        return {run: f.dataset.run, cx: +svg.dataset.cx, cy: +svg.dataset.cy, r: +svg.dataset.r,
                values: Object.assign({}, run.dataset), points: run.getAttribute('points'),
                ref: !!f.querySelector('polygon.radar-ref')}; })""")
    assert [r["run"] for r in radars] == ["eval/full/agentvidbench", "eval/no_rgr/agentvidbench"]
    for radar, folder in zip(radars, (runs_root / "judge", runs_root / "eval" / "no_rgr" / "agentvidbench" / "judge")):
        judge = json.loads((folder / "judge_report.json").read_text())
        points = [tuple(map(float, p.split(","))) for p in radar["points"].split()]
        for k, (axis, (x, y)) in enumerate(zip(("p1", "p2", "p3", "p4", "p5"), points)):
            value = judge[axis.upper()]
            assert radar["values"][axis] == ("" if value is None else str(value))
            # drawn where the value says: its distance from the centre is r * value / 2, on the axis's direction
            radius = math.hypot(x - radar["cx"], y - radar["cy"])
            assert radius == pytest.approx(radar["r"] * (value or 0) / 2, abs=0.01), (radar["run"], axis)
            if value:
                angle = -math.pi / 2 + 2 * math.pi * k / 5
                assert (x - radar["cx"], y - radar["cy"]) == pytest.approx((radius * math.cos(angle),
                                                                            radius * math.sin(angle)), abs=0.01)
    assert radars[1]["ref"]  # the no_rgr run's radar shows the run it is compared with beneath


def test_slices_are_report_jsons_breakdowns_and_the_judges_slices(tree, browser):
    runs_root, page, _ = tree
    open_view(browser, page, "#v=slices")
    tables = browser.evaluate("Array.from(document.querySelectorAll('table.slices')).map((t) => [t.dataset.benchmark, "
                              "t.dataset.grouping])")
    assert ["synthetic", "task_type"] in tables
    assert {tuple(t) for t in tables if t[0] == "agentvidbench"} == {("agentvidbench", g) for g in
                                                                    ("difficulty", "category", "skill")}
    checked = 0
    for bench, grouping in tables:
        for row in rows_of(browser, f'table.slices[data-benchmark="{bench}"][data-grouping="{grouping}"]'):
            group = row["data"]["group"]
            for cell in row["cells"][2:]:
                if "run" not in cell:
                    continue
                folder = run_folder(runs_root, cell["run"])
                if bench == "agentvidbench":  # sliced as the judge report slices it (accuracy a fraction there)
                    judge_dir = runs_root / "judge" if "full" in cell["run"] else folder / "judge"
                    expected = json.loads((judge_dir / "judge_report.json").read_text())["slices"][grouping][group]
                    assert float(cell["acc"]) == pytest.approx(100 * expected["accuracy"], abs=0.005)
                else:
                    report = json.loads((folder / "report.json").read_text())
                    expected = report["breakdowns"][bench][grouping][group]
                    assert float(cell["acc"]) == expected["accuracy"]
                    assert [float(cell["low"]), float(cell["high"])] == expected["ci95_exact"]
                assert int(cell["n"]) == expected["n"]
                checked += 1
    assert checked >= 10
    assert browser.evaluate("document.documentElement.scrollWidth") <= 1280


def test_the_question_view_shows_every_runs_answer_route_and_judgment(tree, browser):
    runs_root, page, _ = tree
    open_view(browser, page, "#v=question&q=agentvidbench/agentvidbench-1")
    rows = rows_of(browser, "table.runs-on-question")
    assert [r["data"]["run"] for r in rows] == ["eval/full/agentvidbench", "eval/no_rgr/agentvidbench"]
    for row in rows:
        folder = run_folder(runs_root, row["data"]["run"])
        record = next(r for r in read_records(folder / "predictions.jsonl") if r["sample_id"] == "agentvidbench-1")
        assert row["data"]["pred"] == record["pred"]
        assert row["cells"][3]["text"] == record["route"]
        assert row["cells"][5]["text"].startswith("accepted" if record["stage2"]["accepted"] else "not_accepted")
    # each run's card follows, with the judge's reasons: per-axis rationale, each ground-truth milestone with its
    # status and evidence, the failure tags
    judgment = next(json.loads(line) for line in (runs_root / "judge" / "judgments.jsonl").read_text().splitlines()
                    if json.loads(line)["question_id"] == 101)
    card = '#question article.card[data-run="eval/full/agentvidbench"] '
    axes = rows_of(browser, card + "table.axes")
    assert [(r["cells"][0]["text"], r["cells"][2]["text"]) for r in axes] == [
        (a, judgment["axis_rationales"][a]) for a in ("P1", "P2", "P3", "P4", "P5")]
    milestones = rows_of(browser, card + "table.milestones")
    record = next(r for r in read_records(runs_root / "eval" / "full" / "agentvidbench" / "predictions.jsonl")
                  if r["sample_id"] == "agentvidbench-1")
    truth = {m["id"]: m["description"] for m in record["meta"]["milestones"]}
    judged = {m["id"]: m for m in judgment["milestones"]}
    assert [r["cells"][0]["text"] for r in milestones] == list(truth)
    for r in milestones:
        mid = r["cells"][0]["text"]
        assert r["cells"][2]["text"] == truth[mid]
        assert r["cells"][3]["text"] == (judged[mid]["status"] if mid in judged else "not judged")
        assert r["cells"][4]["text"] == (judged[mid]["evidence"] if mid in judged else "")
    tags = browser.evaluate(f"Array.from(document.querySelectorAll({json.dumps(card + 'a.tag')})).map((a) => a.textContent)")
    assert sorted(set(tags)) == sorted(judgment["failure_tags"])
    # the accepted window and the rejected ones as strips of frames, beside the timeline
    strips = browser.evaluate("Array.from(document.querySelectorAll('#question .strip')).map((s) => [s.className, "
                              "s.querySelectorAll('img').length])")
    assert ["strip acc", 2] in strips and ["strip rej", 2] in strips


def test_filters_and_a_tag_filter_respond_to_clicks(tree, browser):
    _, page, built = tree
    open_view(browser, page, "#v=samples")

    def click(selector):
        before = browser.evaluate("document.body.dataset.inputs || '0'")
        browser.click(selector)
        browser.wait_for(f"document.body.dataset.inputs !== {json.dumps(before)}")
        return browser.evaluate("parseInt(document.getElementById('shown').textContent)")

    tagged = [c for c in built.cards if "counting_error" in {t for j in c.get("judge") or [] for t in j["tags"]}]
    assert click('input[data-dim="tag"][data-value="counting_error"]') == len(tagged) > 0
    drawn = browser.evaluate("Array.from(document.querySelectorAll('article.card')).map((a) => a.dataset.run)")
    assert sorted(drawn) == sorted(c["f"]["run"] for c in tagged)
    assert "tag:counting_error" in browser.evaluate("decodeURIComponent(location.hash)")  # the address keeps it
    assert click('input[data-dim="tag"][data-value="counting_error"]') == len(built.cards)
    stage2 = sum(c["f"]["route"] == "stage2" for c in built.cards)
    assert click('input[data-dim="route"][data-value="stage2"]') == stage2
    # a count is over the cards the other dimensions' choices leave
    correct = sum(c["f"]["route"] == "stage2" and c["f"]["correct"] == "correct" for c in built.cards)
    assert browser.evaluate("document.querySelector('.count[data-dim=\"correct\"][data-value=\"correct\"]')"
                            ".textContent") == str(correct)
    click('input[data-dim="route"][data-value="stage2"]')


def test_a_table_sorts_by_the_clicked_column(tree, browser):
    _, page, _ = tree
    open_view(browser, page, "#v=runs")
    browser.click("#summary thead th:nth-child(4)")
    first = [float(r["cells"][3]["v"]) for r in rows_of(browser, "#summary")]
    browser.click("#summary thead th:nth-child(4)")
    second = [float(r["cells"][3]["v"]) for r in rows_of(browser, "#summary")]
    assert first == sorted(first, reverse=True) and second == sorted(second)


@pytest.mark.parametrize("view", ["runs", "slices", "samples", "question", "reports"])
def test_every_view_fits_a_1280_px_window(tree, browser, view, tmp_path):
    _, page, _ = tree
    fragment = "#v=question&q=agentvidbench/agentvidbench-1" if view == "question" else f"#v={view}"
    open_view(browser, page, fragment)
    assert browser.evaluate("document.body.dataset.view") == view
    assert browser.evaluate("document.documentElement.scrollWidth") <= 1280
    if view == "reports":  # the report tables, opened, scroll inside their boxes
        browser.evaluate("document.querySelectorAll('details').forEach((d) => d.open = true)")
        assert browser.evaluate("document.documentElement.scrollWidth") <= 1280
    shot = browser.screenshot(tmp_path / f"{view}.png")
    pixels = np.asarray(Image.open(shot).convert("L"), dtype=np.float64)
    assert pixels.shape == (900, 1280) and pixels.std() > 20, f"{view}: the screenshot looks blank"


def test_a_missing_question_and_odd_addresses_open_unharmed(tree, browser):
    _, page, _ = tree
    for fragment in ("#v=question&q=nope/none", "#v=__proto__&f=__proto__:x|constructor:y", "#q=%E0%A4%A&v=runs"):
        open_view(browser, page, fragment)
    open_view(browser, page, "#v=question&q=nope/none")
    assert re.search("No question nope/none", browser.evaluate("document.getElementById('question').textContent"))


def test_a_card_with_a_field_of_the_wrong_shape_is_drawn_marked(tmp_path, browser):
    from test_view_untrusted import broken_records

    records, broken = broken_records()
    run = tmp_path / "run"
    run.mkdir()
    (run / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    page, _ = write_viewer(run)
    open_view(browser, page, "#v=samples&all")  # every card drawn, and no script error
    cards = browser.evaluate("Array.from(document.querySelectorAll('#cards article.card')).map((a) => "
                             "[a.querySelector('.sid').textContent, (a.querySelector('.body > p.bad') || {}).textContent])")
    marked = {sid.split(" / ")[-1]: text for sid, text in cards}
    assert len(marked) == len(broken)
    for sample, name in broken:
        assert marked[sample].startswith("breaks the predictions contract") and name.split(".")[0] in marked[sample]
