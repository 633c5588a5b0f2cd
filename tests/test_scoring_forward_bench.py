"""scripts/bench/scoring_memory.py (B16): its arithmetic by hand, and both ways answering one call on the tiny model."""

import importlib

import pytest


def _bench():
    return importlib.import_module("cader.scripts.bench.scoring_memory")


def test_cache_arithmetic_by_hand():
    # the 8B in bf16: 36 layers x (keys + values) x 8 KV heads x head_dim 128 x 2 bytes
    assert _bench().cache_bytes_per_token(36) == 36 * 2 * 8 * 128 * 2 == 147_456
    # a 27.2k-token Stage-1 prompt: 3.7 GiB of cache a scoring forward used to build and throw away
    assert 27_200 * 147_456 / 2**30 == pytest.approx(3.735, abs=1e-3)


@pytest.mark.slow
def test_both_ways_score_the_same_prompts_in_one_call(tiny_model_dir):
    bench = _bench()
    today = bench.measure("today", str(tiny_model_dir), n_prompts=2, tokens=300, threads=1)
    new = bench.measure("new", str(tiny_model_dir), n_prompts=2, tokens=300, threads=1)
    assert today["prompt_tokens"] == new["prompt_tokens"] and len(set(new["prompt_tokens"])) == 2  # padded
    assert min(new["prompt_tokens"]) > 200
    for a, b in zip(today["letter_logits"], new["letter_logits"]):
        assert a == pytest.approx(b, abs=0.05)  # bf16: left padding with a mask vs right padding without one
    assert today["peak_growth_bytes"] >= 0 and new["peak_growth_bytes"] >= 0
    with pytest.raises(ValueError, match="way"):
        bench.measure("yesterday", str(tiny_model_dir), 1, 100)
