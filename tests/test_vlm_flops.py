import pytest
from cader.vlm.flops import (
    QWEN3_VL_8B_TEXT,
    TextShape,
    VisionShape,
    mfu,
    text_forward_flops,
    training_step_flops,
    vision_forward_flops,
)


def test_text_flops_hand_computed():
    s = TextShape(hidden=4, intermediate=8, layers=1, heads=2, kv_heads=1, head_dim=2, vocab=10)
    # proj: 4*(4 + 2*2) + 4*4 = 48; mlp: 3*4*8 = 96; dense per token: 2*(48+96) + 2*4*10 = 368
    # attention (causal): 1 * 2 * 2 * 4 * 3 * 3 * 0.5 = 72
    assert text_forward_flops(s, seq_len=3) == 368 * 3 + 72
    assert text_forward_flops(s, seq_len=3, causal=False) == 368 * 3 + 144


def test_8b_dense_flops_match_two_times_parameters():
    # The dense part should be ~2 FLOPs per parameter per token (8B LM: ~7.6e9 non-embedding+head params... )
    per_token = text_forward_flops(QWEN3_VL_8B_TEXT, seq_len=1)
    assert 2 * 7.0e9 < per_token < 2 * 8.5e9


def test_vision_flops_hand_computed():
    v = VisionShape(hidden=2, intermediate=4, depth=1, patch=1, temporal_patch=1, merge=1, out_hidden=3, deepstack=0)
    # one grid t=1,h=1,w=2: patches=2, merged=2; embed: 2*3*2*2 = 24
    # per patch: 2*(4*4 + 2*2*4) = 64 -> 128; attention: 2*2*2*2*2*1 = 32; mergers: 2*(4 + 6)*2 = 40
    assert vision_forward_flops(v, [(1, 1, 2)]) == 24 + 128 + 32 + 40


def test_training_and_mfu():
    assert training_step_flops(10.0) == 30.0
    assert mfu(1e15, 2.0, 1e15) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        mfu(1.0, 0.0, 1.0)
