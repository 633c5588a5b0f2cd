"""The vLLM backend without vLLM: engine settings, request construction and the logprob-to-score mapping.

A stand-in `vllm` module records what the backend asks of the engine and answers with vLLM's output shapes
(`RequestOutput.outputs[0].logprobs[0]`: token id -> Logprob(logprob=...)); the GPU check is
scripts/bench/vllm_parity.py.
"""

import math
import sys
import types

import numpy as np
import pytest
from cader.evaluate.backends.base import Prompt
from cader.evaluate.backends.vllm import (
    VERIFIER_ENGINE,
    VLLMBackend,
    VLLMEngineConfig,
    letter_logits_from,
    yes_no_from,
)
from cader.vlm.video import Frames


def test_engine_defaults_let_main_and_verifier_share_one_gpu():
    main = VLLMBackend.llm_kwargs("m", "bf16", VLLMEngineConfig())
    verifier = VLLMBackend.llm_kwargs("v", "bf16", VERIFIER_ENGINE)
    assert main["gpu_memory_utilization"] + verifier["gpu_memory_utilization"] <= 0.9
    assert main["dtype"] == "bfloat16" and main["max_model_len"] == 32768 and main["tensor_parallel_size"] == 1
    assert main["logprobs_mode"] == "processed_logprobs" and main["limit_mm_per_prompt"] == {"video": 1}
    assert "max_num_seqs" not in main  # None leaves vLLM's default
    eager = VLLMBackend.llm_kwargs("m", "auto", VLLMEngineConfig(enforce_eager=True, extra={"seed": 3}))
    assert eager["enforce_eager"] is True and eager["seed"] == 3


def test_engine_settings_are_checked():
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        VLLMEngineConfig(gpu_memory_utilization=1.5)
    with pytest.raises(ValueError, match="own field"):
        VLLMEngineConfig(extra={"max_model_len": 10}).engine_kwargs()


def test_logprob_mapping_by_hand():
    # letters restricted: log_softmax over the letters = z - logsumexp(z); margins at T = 1 are unchanged
    z = np.array([2.0, 0.5, -1.0])
    lse = math.log(np.exp(z).sum())
    scores = letter_logits_from({10: z[0] - lse, 11: z[1] - lse, 12: z[2] - lse, 99: -0.1}, [10, 11, 12])
    assert np.allclose(np.array(scores) - scores[0], z - z[0])
    assert letter_logits_from({10: -0.1}, [10, 11]) == [-0.1, -math.inf]
    assert yes_no_from({5: math.log(0.7), 6: math.log(0.2)}, 5, 6) == pytest.approx((0.7, 0.2))
    assert yes_no_from({5: math.log(0.7)}, 5, 6) == pytest.approx((0.7, 0.0))


class _Logprob:
    def __init__(self, logprob):
        self.logprob = logprob


class _FakeLLM:
    calls = []

    def __init__(self, **kwargs):
        self.kwargs = kwargs

    def generate(self, requests, params, use_tqdm=False):
        _FakeLLM.calls.append((requests, params))
        outs = []
        for _ in requests:
            top = {i: _Logprob(-0.5 - 0.1 * k) for k, i in enumerate(params.allowed_token_ids or [7, 8])}
            completion = types.SimpleNamespace(logprobs=[top], text="<answer>A</answer>", token_ids=[1, 2, 3])
            outs.append(types.SimpleNamespace(outputs=[completion], prompt_token_ids=[0] * 42))
        return outs


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.LLM = _FakeLLM
    module.SamplingParams = lambda **kw: types.SimpleNamespace(**{"allowed_token_ids": None, **kw})
    monkeypatch.setitem(sys.modules, "vllm", module)
    _FakeLLM.calls = []
    return module


def test_backend_requests_and_scores_through_the_engine_interface(fake_vllm, tiny_model_dir):
    backend = VLLMBackend(str(tiny_model_dir), dtype="fp32", engine=VLLMEngineConfig(gpu_memory_utilization=0.3))
    assert backend.llm.kwargs["gpu_memory_utilization"] == 0.3 and backend.llm.kwargs["dtype"] == "float32"
    frames = Frames(np.zeros((4, 32, 32, 3), np.uint8), np.arange(4) + 0.5, np.arange(4), native_fps=1.0)
    prompts = [Prompt("Q1?", video=frames), Prompt("Q2?", video=frames)]
    (a, b) = backend.letter_logits(prompts, ["A", "B", "C"])
    requests, params = _FakeLLM.calls[-1]
    assert len(requests) == 2  # one engine call for the whole batch: continuous batching fills
    assert params.max_tokens == 1 and params.temperature == 0.0
    assert params.allowed_token_ids == [backend.token_id(x) for x in "ABC"]
    assert a.logits == pytest.approx([-0.5, -0.6, -0.7]) and a.prompt_tokens == 42
    assert requests[0]["multi_modal_data"]["video"][0][1] == frames.metadata()
    (yn,) = backend.yes_no([Prompt("Is it?", video=frames)])
    assert yn.p_yes == 0.0 and yn.p_no == 0.0  # the stand-in's top-k holds neither word
    (g,) = backend.generate([Prompt("Why?", enable_thinking=True)], 16)
    assert g.text == "<answer>A</answer>" and g.completion_tokens == 3


def test_run_parses_engine_settings_into_engine_configs(monkeypatch, tmp_path):
    """evaluate/run.py hands make_backend real VLLMEngineConfig objects (jsonargparse leaves namespaces)."""
    from cader.evaluate import run

    seen = {}

    def fake_make_backend(kind, path, device, dtype, attn, engine=None):
        seen[path] = engine
        raise SystemExit(0)

    monkeypatch.setattr(run, "make_backend", fake_make_backend)
    monkeypatch.setattr(run, "load_benchmark", lambda *a: ([], []), raising=False)
    import cader.evaluate.benchmarks as benchmarks

    monkeypatch.setattr(benchmarks, "load_benchmark", lambda *a: ([], []))
    with pytest.raises(SystemExit):
        run.main(["--model", "m", "--benchmark", "synthetic", "--data_root", str(tmp_path), "--out", str(tmp_path / "o"),
                  "--backend", "vllm", "--vllm_main.gpu_memory_utilization", "0.4"])
    assert isinstance(seen["m"], VLLMEngineConfig) and seen["m"].gpu_memory_utilization == 0.4
