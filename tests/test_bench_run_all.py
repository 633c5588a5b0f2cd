import importlib.util
import json
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "scripts" / "bench"


def load(name):
    module = importlib.import_module(f"cader.scripts.bench.{name}")
    return module


def test_every_check_points_at_a_bench_script_with_a_main():
    run_all = load("run_all")
    assert [c.key for c in run_all.CHECKS] == ["B1", "B2", "B3", "B4", "B5", "B6", "B7", "B8", "B9", "B10",
                                                   "B11", "B12", "B13", "B14", "B15", "B16", "B17", "B18", "B19"]
    for check in run_all.CHECKS:
        assert callable(run_all.load_main(check.script)), check.script


def test_a_failing_check_becomes_an_error_row_and_goals_are_applied(monkeypatch):
    run_all = load("run_all")
    broken = run_all.Check("PX", "broken", "does_not_exist.py", ">= 1", lambda r: r, lambda v: v >= 1)
    row = run_all.run_check(broken)
    assert row["value"] is None and row["status"].startswith("error: FileNotFoundError")
    p3 = next(c for c in run_all.CHECKS if c.key == "B3")
    assert abs(p3.value({"grouped_padding_fraction": 0.011}) - 1.1) < 1e-9 and p3.passes(1.1) and not p3.passes(6.0)
    table = run_all.format_table([row])
    assert "| PX | broken | – | >= 1 |" in table


def test_only_takes_the_keys_in_any_case_and_the_old_p_names():
    run_all = load("run_all")
    assert run_all.wanted_keys("B1, b5,P18") == {"B1", "B5", "B18"}
    assert run_all.wanted_keys("p4") == {"B4"} and run_all.wanted_keys("") == set()


def test_update_replaces_the_measured_rows_and_keeps_the_others_in_check_order(tmp_path, monkeypatch):
    from cader.scripts.bench import run_all as ra

    out = tmp_path / "bench.json"
    old = [{"key": "B1", "value": 1.0}, {"key": "B14", "value": 0.5}, {"key": "P99", "value": 9.0}]
    out.write_text(json.dumps(old))
    monkeypatch.setattr(ra, "run_check", lambda check, run=None: {"key": check.key, "title": "t", "goal": "g", "value": 0.4, "status": "pass",
                                                   "seconds": 1.0, "measured": {"date": "d"}})
    ra.main(only="B14", json_out=str(out), update=True)
    rows = json.loads(out.read_text())
    assert [r["key"] for r in rows] == ["B1", "B14"]  # a key CHECKS no longer has is dropped
    assert rows[0] == old[0] and rows[1]["value"] == 0.4 and rows[1]["measured"] == {"date": "d"}
    ra.main(only="B14", json_out=str(out))  # without --update the file holds this run's rows only
    assert [r["key"] for r in json.loads(out.read_text())] == ["B14"]
