"""The viewer in a real browser: headless Chromium loads the page for a quickstart-shaped run tree, runs its script,
and the DOM it leaves has a card per sample (#all), filter counts equal to the reports' numbers and no script error;
a screenshot is not blank; of 2,000 synthetic records only the first screen's cards are drawn (it prints the
numbers). tests/test_view_runs.py drives the views with real clicks.

Chromium comes from scripts/install_browser.sh (Debian's `chromium`); without it these tests skip, saying so.
"""

import json
import re
import shutil
import subprocess
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from cader.evaluate.viewer.build import write_viewer
from PIL import Image
from view_run_tree import build_run_tree

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# slow: the run tree takes seconds to build and each page load starts a browser (about 30 s for the module)
pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (bash scripts/install_browser.sh)")]
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium(tmp_path, *args, timeout=90) -> str:
    profile = tmp_path / f"profile-{len(list(tmp_path.glob('profile-*')))}"
    done = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args], capture_output=True, text=True, check=False,
                          timeout=timeout)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def dump_dom(tmp_path, page, fragment="") -> str:
    """The DOM after the page's scripts ran (virtual time lets its timers and observers settle first)."""
    return chromium(tmp_path, "--virtual-time-budget=5000", "--dump-dom", page.as_uri() + fragment)


class Elements(HTMLParser):
    """Every element's tag, attributes and direct text, in document order."""

    def __init__(self):
        super().__init__()
        self.items, self.stack = [], []

    def handle_starttag(self, tag, attrs):
        self.items.append({"tag": tag, **{k: v or "" for k, v in attrs}, "text": ""})
        if tag not in ("img", "input", "br", "meta", "rect", "line"):
            self.stack.append(self.items[-1])

    def handle_endtag(self, tag):
        while self.stack and self.stack.pop()["tag"] != tag:
            pass

    def handle_data(self, data):
        if self.stack:
            self.stack[-1]["text"] += data

    def where(self, **attrs):
        return [e for e in self.items if all(e.get(k) is not None and re.search(v, e[k]) for k, v in attrs.items())]


def parse(dom: str) -> Elements:
    parser = Elements()
    parser.feed(dom)
    return parser


@pytest.fixture(scope="module")
def run_tree(tmp_path_factory, barcode_video):
    root = tmp_path_factory.mktemp("viewer_tree")
    (root / "videos").mkdir()
    video = root / "videos" / barcode_video.name
    video.symlink_to(barcode_video)
    build_run_tree(root / "runs", video, n_synthetic=16)
    page, built = write_viewer(root / "runs", root / "viewer.html", video_root=root / "videos", thumbs=2)
    return root / "runs", page, built


def expected_counts(runs_root) -> dict:
    """The filter counts as the run's own report.json files state them."""
    counts = {"benchmark": Counter(), "run": Counter(), "fallback": Counter(), "correct": Counter(), "route": Counter()}
    for path in sorted(runs_root.rglob("report.json")):
        report = json.loads(path.read_text())
        overall, finished = report["overall"], report["overall"]["n"] - report["overall"]["failures"]
        counts["run"][str(path.parent.relative_to(runs_root))] += report["n"]
        for name, summary in report["benchmarks"].items():
            counts["benchmark"][name] += summary["n"]
        counts["fallback"].update(report["fallbacks"])
        counts["correct"]["failed"] += report["failures"]["count"]
        counts["correct"]["correct"] += round(overall["accuracy"] * overall["n_scored"] / 100)
        counts["route"]["stage2"] += round(overall["stage2_trigger_rate"] * finished / 100)
        counts["route"]["exit"] += round(overall["stage1_exit_rate"] * finished / 100)
    return counts


def shown_counts(elements: Elements) -> dict:
    out: dict = {}
    for span in elements.where(tag="^span$", **{"class": "^count$"}):
        out.setdefault(span["data-dim"], {})[span["data-value"]] = int(span["text"])
    return out


def test_every_sample_is_a_card_and_the_counts_are_the_reports(tmp_path, run_tree):
    runs_root, page, built = run_tree
    elements = parse(dump_dom(tmp_path, page, "#all"))
    body = elements.where(tag="^body$")[0]
    assert body.get("data-ready") == "1", "the viewer script did not finish"
    errors = elements.where(id="^errors$")[0]
    assert "hidden" in errors and errors["text"].strip() == "", errors["text"]
    cards = elements.where(tag="^article$", **{"class": r"\bcard\b"})
    assert len(cards) == len(built.cards) == sum(1 for p in runs_root.rglob("predictions.jsonl")
                                                 for line in p.read_text().splitlines() if line.strip())
    assert all("filled" in c["class"] for c in cards)  # #all: every card's body was drawn without an error
    shown, expected = shown_counts(elements), expected_counts(runs_root)
    for dim in ("run", "benchmark", "fallback", "correct"):
        assert {k: v for k, v in shown[dim].items() if k in expected[dim]} == dict(expected[dim]), dim
    # the report's route rates are over the samples that did not fail; so are the page's route counts once the
    # failed ones are filtered out (a sample whose Stage 2 failed keeps its route in the record)
    unfailed = "|".join(f"correct:{v}" for v in shown["correct"] if v != "failed")
    routes = shown_counts(parse(dump_dom(tmp_path, page, f"#f={unfailed}")))["route"]
    assert {k: v for k, v in routes.items() if k in expected["route"]} == dict(expected["route"])
    # the trajectory parts are in the DOM: timelines for Stage-2 cards, thumbnails, judgments, the figure
    assert len(elements.where(tag="^svg$", **{"class": "timeline"})) == shown["route"]["stage2"]
    # frames: of the window each answer was given on, and a strip per crop the verifier judged
    frames = sum(len(c.get("thumbs") or []) + sum(len(r.get("strip") or []) for r in (c.get("s2") or {}).get("rounds", []))
                 for c in built.cards)
    assert len(elements.where(tag="^img$", alt="^frame at")) == frames > 2 * built.thumbs_made > 0
    # questions 100-102 judged for the full run (103 not), 100-103 for the no_rgr run, each on its own run's cards
    assert len(elements.where(tag="^div$", **{"class": "^judge$"})) == 3 + 4
    assert elements.where(tag="^img$", alt="^reliability.png$")[0]["src"].startswith("data:image/png;base64,")
    assert not [e for e in elements.items if e["tag"] in ("script", "link", "img") and
                re.match(r"(https?:)?//", e.get("src", "") + e.get("href", ""))]  # nothing fetched from elsewhere


def test_the_address_opens_a_filtered_view(tmp_path, run_tree):
    _, page, built = run_tree
    elements = parse(dump_dom(tmp_path, page, "#f=route:stage2|correct:wrong&all"))
    cards = elements.where(tag="^article$", **{"class": r"\bcard\b"})
    expected = [c for c in built.cards if c["f"]["route"] == "stage2" and c["f"]["correct"] == "wrong"]
    assert len(cards) == len(expected) > 0
    assert elements.where(tag="^body$")[0]["data-view"] == "samples"  # filters named: the samples open
    assert {c["data-route"] for c in cards} == {"stage2"} and {c["data-correct"] for c in cards} == {"wrong"}
    # a count is over the cards the other dimensions' choices leave: routes among the wrong answers
    wrong = Counter(c["f"]["route"] for c in built.cards if c["f"]["correct"] == "wrong")
    assert shown_counts(elements)["route"] == {k: wrong.get(k, 0) for k in shown_counts(elements)["route"]}
    assert elements.where(id="^shown$")[0]["text"].startswith(f"{len(expected)} of {len(built.cards)}")


def test_the_screenshot_is_not_blank(tmp_path, run_tree):
    _, page, _ = run_tree
    shot = tmp_path / "viewer.png"
    chromium(tmp_path, f"--screenshot={shot}", "--window-size=1280,1600", "--virtual-time-budget=5000",
             page.as_uri())
    pixels = np.asarray(Image.open(shot).convert("L"), dtype=np.float64)
    assert pixels.shape == (1600, 1280)
    assert pixels.std() > 20, f"screenshot looks blank (grey-level std {pixels.std():.1f})"
    rows_with_ink = (pixels < 128).any(axis=1).mean()
    assert rows_with_ink > 0.2, f"only {rows_with_ink:.0%} of the rows hold dark pixels (text, bars)"


def test_two_thousand_samples_draw_only_the_first_screen(tmp_path):
    from cader.dev.viewer_records import synthetic_records
    from cader.evaluate.report import write_report

    records = synthetic_records(2000)
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    write_report(folder, records)
    page, _ = write_viewer(folder)
    elements = parse(dump_dom(tmp_path, page))
    body = elements.where(tag="^body$")[0]
    ready_ms, script_ms = float(body["data-ready-ms"]), float(body["data-script-ms"])
    size_mb = page.stat().st_size / 1e6
    print(f"2,000 records: page {size_mb:.2f} MB, ready {ready_ms:.0f} ms after navigation, script {script_ms:.0f} ms")
    assert body["data-view"] == "samples"  # one run: the page opens on its samples, as before
    drawn = elements.where(tag="^article$", **{"class": r"\bcard\b"})
    assert 0 < len(drawn) < 100 and all("filled" in c["class"] for c in drawn)  # the first screen, drawn whole
    assert elements.where(id="^shown$")[0]["text"].startswith("2000 of 2000")
    assert sum(shown_counts(elements)["run"].values()) == 2000
    assert size_mb < 4


def test_every_variant_of_the_golden_pipeline_renders_without_a_script_error(tmp_path):
    """The golden run files (tests/fixtures/golden: every route, fallback, failure, the verifier skipped, shards)
    draw every card's body with no script error."""
    golden = json.loads((Path(__file__).parent / "fixtures" / "golden" / "pipeline.json").read_text())
    runs = tmp_path / "golden"
    n = 0
    for name, rows in golden.items():
        if name.endswith("/predictions.jsonl"):
            (runs / name).parent.mkdir(parents=True, exist_ok=True)
            # the golden file leaves out the wall-clock fields; put cost.seconds back so that records are whole
            rows = [r | {"cost": {**r["cost"], "seconds": 0.0}} for r in rows]
            (runs / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
            n += len(rows)
    page, built = write_viewer(runs)
    assert len(built.cards) == n and not [m for m in built.problems.messages if "shown flagged" in m]
    elements = parse(dump_dom(tmp_path, page, "#all"))
    errors = elements.where(id="^errors$")[0]
    assert "hidden" in errors and errors["text"].strip() == "", errors["text"]
    assert len(elements.where(tag="^article$", **{"class": r"\bfilled\b"})) == n
    fallbacks = Counter(c["f"]["fallback"] for c in built.cards)
    assert {"unparseable_proposal", "too_broad", "not_accepted", "none"} <= set(fallbacks)


def test_an_address_naming_object_members_or_a_bad_escape_opens_the_page_unharmed(tmp_path, run_tree):
    _, page, _ = run_tree
    for fragment in ("#f=__proto__:x|constructor:y|route:stage2", "#f=%E0%A4%A"):
        elements = parse(dump_dom(tmp_path, page, fragment))
        errors = elements.where(id="^errors$")[0]
        assert "hidden" in errors and errors["text"].strip() == "", (fragment, errors["text"])
        assert elements.where(tag="^article$", **{"class": r"\bcard\b"}), fragment
