import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "scripts" / "bench"


def load(name):
    module = importlib.import_module(f"cader.scripts.bench.{name}")
    return module


def test_every_check_points_at_a_bench_script_with_a_main():
    run_all = load("run_all")
    assert [c.key for c in run_all.CHECKS] == ["P1", "P2", "P3", "P4", "P5", "P6", "P7", "P8", "P9", "P10",
                                                   "P11", "P12", "P13", "P14", "P15", "P16", "P17", "P18", "P19"]
    for check in run_all.CHECKS:
        assert callable(run_all.load_main(check.script)), check.script


def test_a_failing_check_becomes_an_error_row_and_goals_are_applied(monkeypatch):
    run_all = load("run_all")
    broken = run_all.Check("PX", "broken", "does_not_exist.py", ">= 1", lambda r: r, lambda v: v >= 1)
    row = run_all.run_check(broken)
    assert row["value"] is None and row["status"].startswith("error: FileNotFoundError")
    p3 = next(c for c in run_all.CHECKS if c.key == "P3")
    assert abs(p3.value({"grouped_padding_fraction": 0.011}) - 1.1) < 1e-9 and p3.passes(1.1) and not p3.passes(6.0)
    table = run_all.format_table([row])
    assert "| PX | broken | – | >= 1 |" in table
