import importlib.util
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "bench" / "gpu_sft_step.py"


def load_script():
    module = importlib.import_module("cader.scripts.bench.gpu_sft_step")
    return module


def test_mrope_section_covers_half_the_head_dim():
    bench = load_script()
    assert bench.mrope_section(128) == [24, 20, 20]
    assert sum(bench.mrope_section(16)) == 8


@pytest.mark.slow
def test_cpu_shrunken_step_reports_throughput_and_flops():
    bench = load_script()
    result = bench.main(shape="tiny", seq_len=400, steps=1, gradient_checkpointing=False)
    assert result["visual_tokens"] > 0 and result["seq_len"] == 400
    assert result["tokens_per_s"] > 0 and result["tflops_lm"] > 0 and result["tflops_vit"] > 0
    assert all(loss == loss for loss in result["losses"])  # finite, not NaN
    assert result["mfu_lm"] is None  # no peak FLOP/s is quoted for a CPU


def test_one_decoder_layer_by_hand_and_the_8b_on_one_gpu():
    from cader.vlm.flops import QWEN3_VL_8B_TEXT

    bench = load_script()
    # q 4096x4096, k/v 4096x1024 each, o 4096x4096, gate/up/down 4096x12288, two norms of 4096, q/k norms of 128
    want = 4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 12288 + 2 * 4096 + 2 * 128
    assert bench.text_layer_params(QWEN3_VL_8B_TEXT) == want == 192_946_432
    full = bench.plan_memory(8_767_123_696, 36, QWEN3_VL_8B_TEXT, 36)
    assert full["model_state_gib"] > 139                 # does not fit one H200 (DeepSpeed's estimator: 149 GB)
    for layers in (8, 16):                               # the default depths do, with room for activations
        assert bench.plan_memory(8_767_123_696, 36, QWEN3_VL_8B_TEXT, layers)["model_state_gib"] < 100


def test_the_layer_count_matches_a_built_model():
    from dataclasses import replace

    bench = load_script()
    counts = [sum(p.numel() for p in bench.build_model(replace(bench.TINY_TEXT, layers=n), bench.TINY_VISION,
                                                       "cpu", torch.float32)[0].parameters()) for n in (1, 2)]
    assert counts[1] - counts[0] == bench.text_layer_params(bench.TINY_TEXT)


def test_extrapolation_is_the_straight_line_through_the_depths():
    bench = load_script()
    assert bench.extrapolate([8, 16], [1.0, 1.8], 36) == pytest.approx(3.8)   # 0.2 + 0.1 per layer
    with pytest.raises(ValueError):
        bench.extrapolate([8, 8], [1.0, 1.1], 36)


@pytest.mark.slow
@pytest.mark.heavy
def test_two_depths_run_in_fresh_processes_and_extrapolate():
    bench = load_script()
    result = bench.main(shape="tiny", seq_len=300, steps=1, gradient_checkpointing=False, layers="1,2")
    assert [r["layers"] for r in result["runs"]] == [1, 2]
    assert "not measured" in result["extrapolated"]["what"] and result["extrapolated"]["layers"] == 2
