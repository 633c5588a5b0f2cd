"""B11's harness: each measurement runs in a fresh interpreter (`harness.run_fresh`), and both mixes train the same
items. Its figures are the bench's business (scripts/bench/run_all.py); this only keeps the harness whole, e.g. the
fresh process importing the benches' own modules by their package (one cold measurement of each way)."""

import pytest
from cader.scripts.bench import mix_memory

pytestmark = [pytest.mark.slow, pytest.mark.heavy]


def test_each_mix_is_measured_in_a_fresh_process_and_both_train_the_same_items(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    data = tmp_path / "data"
    data.mkdir()
    sources = mix_memory.write_mix(data, rows=2000)   # every file with rows to train (each file's row 0 is broken)
    runs = {way: mix_memory.run_fresh(way=way, data=str(data), sources=sources, cache=str(tmp_path / f"cache_{way}"),
                                      workers=1, planner="headers", model_dir=None) for way in mix_memory.WAYS}
    assert set(runs) == {"dicts", "arrow"}
    assert runs["dicts"]["digest"] == runs["arrow"]["digest"] and runs["arrow"]["items"] > 0
    assert all(r["rss_mib"] > r["rss_before_mib"] > 0 and r["seconds"] > 0 for r in runs.values())
