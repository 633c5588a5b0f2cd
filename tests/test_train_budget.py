"""Token budget (hand-computed Qwen3-VL token counts) and the LR schedule math."""
import math

import pytest
from cader.train.budget import BudgetConfig, ImageSpec, VideoSpec, image_tokens, plan_budget
from cader.train.schedule import optimizer_steps, warmup_steps
from test_train_schedule import lr_factors

# factor 32, temporal patch 2, timestamp 8 tokens: a 256x256 frame pair costs 8*8 + 2 + 8 = 74 tokens
SQUARE = {"height": 256, "width": 256}


def test_fits_untouched():
    plan = plan_budget(100, 50, [VideoSpec(60.0, **SQUARE)], [])
    assert plan.keep and plan.steps == []
    assert plan.video_frames == [60] and plan.video_sizes == [(256, 256)]
    assert plan.total_tokens == 100 + 50 + 30 * 74


def test_frames_reduced_first():
    plan = plan_budget(100, 100, [VideoSpec(600.0, **SQUARE)], [], BudgetConfig(max_length=4000))
    # room 3800 -> floor(3800 / 74) = 51 groups = 102 frames, pixels untouched
    assert plan.keep and plan.video_frames == [102] and plan.video_sizes == [(256, 256)]
    assert plan.total_tokens == 200 + 51 * 74 and plan.target_tokens == 100
    assert len(plan.steps) == 1 and plan.steps[0].startswith("frames")


def test_short_video_keeps_one_fps_while_long_one_is_capped():
    plan = plan_budget(100, 100, [VideoSpec(10.0, **SQUARE), VideoSpec(600.0, **SQUARE)], [],
                       BudgetConfig(max_length=3000))
    # short: 5 groups = 370; long gets floor((2800 - 370) / 74) = 32 groups = 64 frames
    assert plan.video_frames == [10, 64]
    assert plan.total_tokens == 200 + 370 + 32 * 74


def test_pixels_reduced_after_frames_hit_the_floor():
    plan = plan_budget(100, 100, [VideoSpec(600.0, **SQUARE)], [], BudgetConfig(max_length=300))
    # room 100 at 4 frames (2 groups): per-group patches <= 40 -> 6x6 merged patches = 192 px side
    assert plan.keep and plan.video_frames == [4] and plan.video_sizes == [(192, 192)]
    assert plan.total_tokens == 200 + 2 * (36 + 10)
    assert [s.split()[0] for s in plan.steps] == ["frames", "pixels"]


def test_target_end_cut_only_at_the_visual_floor():
    plan = plan_budget(100, 200, [VideoSpec(600.0, **SQUARE)], [], BudgetConfig(max_length=300))
    # visual floor: 4 frames at 128x128 = 2 * (16 + 10) = 52 tokens; target keeps 300 - 100 - 52
    assert plan.keep and plan.video_frames == [4] and plan.video_sizes == [(128, 128)]
    assert plan.target_tokens == 148 and plan.total_tokens == 300
    assert plan.steps[-1] == "target 200->148"


def test_dropped_when_even_the_floor_does_not_fit():
    plan = plan_budget(280, 40, [VideoSpec(600.0, **SQUARE)], [], BudgetConfig(max_length=300))
    assert not plan.keep and "over budget" in plan.reason
    assert plan.total_tokens == 280 + 40 + 52


def test_images_cost_and_shrink():
    assert image_tokens(512, 512, plan_budget.__defaults__[1]) == 16 * 16 + 2
    plan = plan_budget(10, 10, [], [ImageSpec(512, 512)], BudgetConfig(max_length=150))
    # room 130 -> 11x11 merged patches (352 px) = 123 tokens
    assert plan.keep and plan.image_sizes == [(352, 352)] and plan.total_tokens == 20 + 123


@pytest.mark.parametrize("step,expected", [(0, 0.0), (1, 1.0), (5, 0.5 * (1 + math.cos(math.pi * 4 / 9))),
                                           (10, 0.0)])
def test_cosine_with_warmup(step, expected):
    assert warmup_steps(10, 0.1) == 1
    assert lr_factors("cosine", 10, 1)[step] == pytest.approx(expected)


def test_paper_schedule_lengths():
    # 228,835 samples at effective batch 16 (Table 6): per-device 1 x 8 GPUs x accumulation 2
    steps = optimizer_steps(228_835, accumulate=2, world_size=8)
    assert steps == math.ceil(math.ceil(228_835 / 8) / 2) == 14_303
    assert warmup_steps(steps, 0.1) == 1_431
    assert lr_factors("cosine", steps, 1_431, steps=716)[715] == pytest.approx(0.5, abs=1e-3)   # half way up
