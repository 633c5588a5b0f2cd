"""B15 (scripts/bench/loss_tail.py): both paths give the same loss; a small run reports the ratio against its goal."""
import importlib

import pytest


def _bench():
    return importlib.import_module("cader.scripts.bench.loss_tail")


def test_both_paths_compute_the_same_loss():
    bench = _bench()
    runs = {p: bench.measure(p, positions=64, labelled=8, hidden=32, vocab=100) for p in bench.PATHS}
    assert runs["labelled"]["loss"] == pytest.approx(runs["all_positions"]["loss"], rel=1e-2)   # bf16
    assert runs["labelled"]["weight_grad_bytes"] == 32 * 100 * 2
    with pytest.raises(ValueError):
        bench.measure("nowhere", positions=8, labelled=2, hidden=8, vocab=10)


@pytest.mark.slow
@pytest.mark.heavy
def test_a_small_run_in_fresh_processes_reports_the_ratio():
    result = _bench().main(positions=1_024, labelled=64, hidden=256, vocab=16_384)
    assert set(result["peak_growth_gib"]) == {"all_positions", "labelled"}
    assert result["meets_goal"] is (result["ratio"] <= 0.4)
    assert result["peak_growth_gib"]["labelled"] < result["peak_growth_gib"]["all_positions"]
