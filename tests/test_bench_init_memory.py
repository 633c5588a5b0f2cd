"""B10 (scripts/bench/init_memory.py): the memory probe, the random checkpoint, and a small run of both ways."""
import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "scripts" / "bench"


def _bench():
    module = importlib.import_module("cader.scripts.bench.init_memory")
    return module


def test_the_peak_probe_sees_a_freed_allocation():
    import numpy as np
    from cader.scripts.bench.harness import PeakRSS, status_kib

    peak = PeakRSS()
    start = status_kib("VmRSS") * 1024
    peak.start()
    block = np.ones(64 * 2**20, dtype=np.uint8)     # touched pages, then freed before the peak is read
    del block
    assert peak.stop() - start >= 60 * 2**20


def test_the_random_model_is_a_checkpoint_of_the_requested_size(tmp_path):
    from safetensors import safe_open
    from transformers import AutoConfig

    size = _bench().write_random_model(tmp_path, hidden_size=128, intermediate_size=256, layers=2)
    config = AutoConfig.from_pretrained(tmp_path)
    assert (config.text_config.hidden_size, config.text_config.num_hidden_layers) == (128, 2)
    assert config.vision_config.out_hidden_size == 128
    with safe_open(str(tmp_path / "model.safetensors"), framework="pt") as handle:
        stored = sum(handle.get_tensor(k).nbytes for k in handle.keys())  # noqa: SIM118 (a safe_open handle, no dict)
    assert size == stored


@pytest.mark.slow
@pytest.mark.heavy
@pytest.mark.timeout(300)
def test_both_ways_run_and_only_the_sharded_one_stays_below_the_model_size():
    result = _bench().main(hidden_size=512, intermediate_size=1408, layers=4)
    full, sharded = result["full_load"], result["sharded"]
    assert len(full["peak_over_start_mb"]) == len(sharded["peak_over_start_mb"]) == 2
    assert result["full_load_peak_over_model"] >= 1.0                  # every rank read the whole model
    assert result["sharded_peak_over_model"] < result["full_load_peak_over_model"]
    # each sharded rank keeps half of the weights (plus one padding element per odd-sized tensor)
    assert all(abs(mb - result["model_mb"] / 2) < 0.5 for mb in sharded["local_param_mb"])
