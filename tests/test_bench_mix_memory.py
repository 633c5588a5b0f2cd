"""P11's harness runs end to end: each measurement in a fresh interpreter (`in_fresh_process`), both mixes training
the same items. Its figures are the bench's business (scripts/bench/run_all.py); this only keeps the harness whole,
e.g. the fresh process importing the benches' own modules by their package."""

import pytest
from cader.scripts.bench import mix_memory

pytestmark = pytest.mark.slow


def test_both_mixes_are_measured_in_fresh_processes_and_train_the_same_items(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    result = mix_memory.main(rows=2000, work_dir=str(tmp_path))  # every file with rows to train
    runs = result["runs"]
    assert set(runs) == {f"{way}_{phase}" for way in mix_memory.WAYS for phase in ("cold", "warm")}
    assert len({r["digest"] for r in runs.values()}) == 1 and result["items"] > 0
    assert all(r["rss_mib"] > r["rss_before_mib"] > 0 for r in runs.values())
    assert result["rss_arrow_over_dicts"] > 0
