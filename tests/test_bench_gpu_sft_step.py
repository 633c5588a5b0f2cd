"""The SFT part of the GPU check (scripts/bench/gpu_sft_step.py): its memory plan and depth choice, the model it
builds, SFTModule's loss through it, and the DeepSpeed config it hands the engine. The steps themselves run in the
dry run (tests/test_bench_gpu_run.py)."""

import importlib
from dataclasses import replace

import pytest
import torch

bench = importlib.import_module("cader.scripts.bench.gpu_sft_step")


def test_mrope_section_covers_half_the_head_dim():
    assert bench.mrope_section(128) == [24, 20, 20]
    assert sum(bench.mrope_section(16)) == 8


def test_one_decoder_layer_by_hand_and_the_released_8b():
    from cader.vlm.flops import QWEN3_VL_8B_TEXT, QWEN3_VL_8B_VISION

    # q 4096x4096, k/v 4096x1024 each, o 4096x4096, gate/up/down 4096x12288, two norms of 4096, q/k norms of 128
    want = 4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 12288 + 2 * 4096 + 2 * 128
    assert bench.text_layer_params(QWEN3_VL_8B_TEXT) == want == 192_946_432
    assert bench.model_params(QWEN3_VL_8B_TEXT, QWEN3_VL_8B_VISION) == 8_767_123_696  # the released checkpoint's
    from cader.scripts.bench.gpu_scoring import QWEN3_VL_4B_TEXT, QWEN3_VL_4B_VISION

    # the verifier's widths: the released 4B (tied embeddings) has 4,437,815,808
    assert bench.model_params(QWEN3_VL_4B_TEXT, QWEN3_VL_4B_VISION, tied=True) == 4_437_815_808
    full = bench.plan_memory(QWEN3_VL_8B_TEXT, QWEN3_VL_8B_VISION, 36)
    assert full["model_state_gib"] > 139  # does not fit one H200 (DeepSpeed's estimator: 149 GB)


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_the_parameter_count_matches_a_built_model(layers):
    model, _ = bench.build_model(replace(bench.TINY_TEXT, layers=layers), bench.TINY_VISION, "cpu", torch.float32)
    assert sum(p.numel() for p in model.parameters()) == bench.model_params(bench.TINY_TEXT, bench.TINY_VISION, layers)


@pytest.mark.parametrize(("free_gib", "depths"), [(78.0, [4, 8]), (139.0, [8, 16])])
def test_the_depths_fit_an_h100_and_an_h200_by_the_plan(free_gib, depths):
    from cader.vlm.flops import QWEN3_VL_8B_TEXT as T
    from cader.vlm.flops import QWEN3_VL_8B_VISION as V

    assert bench.choose_depths(free_gib) == depths
    need = bench.plan_memory(T, V, depths[1])["model_state_gib"] + bench.STEP_HEADROOM_GIB
    assert need <= free_gib
    # the deepest pair that fits: the next one would not
    assert bench.plan_memory(T, V, 2 * depths[1])["model_state_gib"] + bench.STEP_HEADROOM_GIB > free_gib


def test_a_gpu_too_small_for_two_layers_is_refused():
    with pytest.raises(ValueError, match="even 2 layers"):
        bench.choose_depths(20.0)


def test_extrapolation_is_the_straight_line_through_the_depths():
    assert bench.extrapolate([8, 16], [1.0, 1.8], 36) == pytest.approx(3.8)  # 0.2 + 0.1 per layer
    with pytest.raises(ValueError):
        bench.extrapolate([8, 8], [1.0, 1.1], 36)


def test_the_loss_step_is_sftmodules_loss():
    model, special = bench.build_model(bench.TINY_TEXT, bench.TINY_VISION, "cpu", torch.float32)
    batch, _ = bench.synthetic_batch(special, bench.TINY_TEXT, bench.TINY_VISION, 200, "cpu", torch.float32)
    torch.manual_seed(0)
    with torch.no_grad():
        ours = bench.SFTLossStep(model)(**batch)
        transformers_loss = model(**batch).loss  # lm_head at every position: the same mean up to float order
    assert ours.item() == pytest.approx(transformers_loss.item(), rel=1e-5)


def test_zero3_is_the_recipes_json_with_what_lightning_adds():
    from cader.train.strategies import load_deepspeed_config

    config = bench.zero3_config()
    assert config["zero_optimization"] == load_deepspeed_config("zero3")["zero_optimization"]
    assert config["bf16"] == {"enabled": True} and config["gradient_clipping"] == 1.0
    assert config["train_micro_batch_size_per_gpu"] == 1 and config["gradient_accumulation_steps"] == 1


def test_an_unknown_engine_is_refused():
    with pytest.raises(ValueError, match="zero3 or none"):
        bench.step_function(torch.nn.Linear(1, 1), {}, "zero2", 1e-5, "cpu")
