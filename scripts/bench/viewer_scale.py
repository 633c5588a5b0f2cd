"""B18: `cader view` at 20,000 samples: build time, time to a usable page, time per filter click.

Two layouts of 20,000 synthetic records (`cader.dev.viewer_records`: every route and Stage-2 ending):
  one_run   one run of 20,000 samples (no question shared: the largest page);
  variants  four runs of the same 5,000 questions (a benchmark under four settings: runs side by side, paired tests).
For each: `write_viewer`'s wall time and the page's size; then headless Chromium (Debian's `chromium`, driven over
the DevTools pipe by `cader.evaluate.viewer.browser`) opens the page `repeats` times afresh and the page reports when
it was usable (its first screen, the runs' summary or the first cards, drawn and painted: `data-usable-ms`, measured
from navigation); then real mouse clicks toggle filter values on and off and the page reports each click's time from
the input event to the painted result (`data-input-ms`). The machine's load average is recorded with the numbers.

Goals: usable <= 2,000 ms, click <= 200 ms, build <= 15 s. The headline is the worst of usable / 2,000 ms (median
of the repeats), click / 200 ms (the slowest click) and build / 15 s over both layouts: <= 1 meets every goal.

    python scripts/bench/viewer_scale.py --json_out docs/measured/viewer_scale.json     # ~2 min on 2 cores
"""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from cader.scripts.bench.harness import emit
from jsonargparse import CLI

GOALS = {"usable_ms": 2000.0, "click_ms": 200.0, "build_s": 15.0}
CLICKS = [("route", "stage2"), ("correct", "wrong"), ("benchmark", "lvbench"), ("fallback", "not_accepted")]


def write_runs(folder: Path, n: int, runs: int) -> list[Path]:
    """`runs` run folders of n / runs records each (the same questions, answered anew per run), with report.json."""
    from cader.dev.viewer_records import synthetic_records
    from cader.evaluate.report import write_report

    out = []
    for k in range(runs):
        run = folder / f"variant{k}"
        run.mkdir(parents=True, exist_ok=True)
        records = synthetic_records(n // runs, seed=0, variant=None if runs == 1 else k)
        (run / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        write_report(run, records)
        out.append(run)
    return out


def measure_page(page: Path, repeats: int, width: int = 1280, height: int = 900) -> dict:
    """Time to usable over `repeats` fresh loads, then one click time per filter toggle (on, then off)."""
    from cader.evaluate.viewer.browser import Chromium

    opens = []
    with Chromium(width, height) as browser:
        for _ in range(repeats):
            load_s = browser.open(page.as_uri())
            ready = browser.wait_for("document.body && document.body.dataset.usableMs && [+document.body.dataset."
                                     "usableMs, +document.body.dataset.readyMs, document.getElementsByTagName('*')."
                                     "length]")
            opens.append({"usable_ms": ready[0], "script_done_ms": ready[1], "dom_nodes": ready[2],
                          "load_event_s": round(load_s, 3)})
        browser.open(page.as_uri() + "#v=samples")
        browser.wait_for("document.body.dataset.usableMs")
        clicks = []
        for dim, value in CLICKS + CLICKS:  # each value chosen, then (second pass) left again
            before = browser.evaluate("document.body.dataset.inputs || '0'")
            browser.click(f'input[data-dim="{dim}"][data-value="{value}"]')
            browser.wait_for(f"document.body.dataset.inputs !== {json.dumps(before)}")
            clicks.append(float(browser.evaluate("document.body.dataset.inputMs")))
        nodes = browser.evaluate("document.getElementsByTagName('*').length")
    return {"opens": opens, "usable_ms_median": statistics.median(o["usable_ms"] for o in opens),
            "clicks_ms": clicks, "click_ms_median": statistics.median(clicks), "click_ms_max": max(clicks),
            "dom_nodes_after_clicks": nodes}


def measure_layout(folder: Path, n: int, runs: int, repeats: int) -> dict:
    from cader.evaluate.viewer.build import write_viewer

    folders = write_runs(folder, n, runs)
    started = time.perf_counter()
    page, built = write_viewer([str(f) for f in folders], folder / "viewer.html")
    build_s = time.perf_counter() - started
    result = {"samples": len(built.cards), "runs": runs, "build_s": round(build_s, 2),
              "page_mb": round(page.stat().st_size / 1e6, 2), **measure_page(page, repeats)}
    result["ratios"] = {"usable": result["usable_ms_median"] / GOALS["usable_ms"],
                        "click": result["click_ms_max"] / GOALS["click_ms"], "build": build_s / GOALS["build_s"]}
    return result


def main(n: int = 20_000, repeats: int = 3, layouts: str = "one_run,variants", json_out: str | None = None) -> dict:
    """Build and time the page for each layout; print and return the numbers.

    Args:
        n: Samples per page.
        repeats: Fresh loads of each page (the usable time is their median).
        layouts: Comma-separated: one_run (one run of n), variants (four runs of n / 4 shared questions).
        json_out: Also write the result here as JSON (docs/measured/viewer_scale.json).
    """
    shapes = {"one_run": 1, "variants": 4}
    wanted = [name.strip() for name in layouts.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in shapes]
    if unknown:
        raise ValueError(f"--layouts: unknown {unknown}; choose from {sorted(shapes)}")
    result = {"n": n, "goals": GOALS, "cpus": os.cpu_count(), "load_average_before": os.getloadavg(), "layouts": {}}
    with tempfile.TemporaryDirectory(prefix="viewer-scale-") as tmp:
        for name in wanted:
            result["layouts"][name] = measure_layout(Path(tmp) / name, n, shapes[name], repeats)
    result["load_average_after"] = os.getloadavg()
    result["ratio"] = round(max(max(r["ratios"].values()) for r in result["layouts"].values()), 3)
    result["meets_goal"] = result["ratio"] <= 1.0
    return emit(result, json_out)


if __name__ == "__main__":
    CLI(main, as_positional=False)
