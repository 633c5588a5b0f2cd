import importlib.util
from pathlib import Path

import pytest

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
