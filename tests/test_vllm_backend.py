"""The vLLM backend without vLLM: engine settings, request construction and the logprob-to-score mapping.

A stand-in `vllm` module records what the backend asks of the engine and answers with vLLM's output shapes
(`RequestOutput.outputs[0].logprobs[0]`: token id -> Logprob(logprob=...)), scoring exactly the ids asked for in
`logprob_token_ids` as vLLM 0.32 does. The real engine, against the HF backend: tests/test_vllm_real.py.
"""

import math
import sys
import types
import typing

import numpy as np
import pytest
from cader.evaluate.backends.base import BackendError, Prompt
from cader.evaluate.backends.vllm import (
    VERIFIER_ENGINE,
    FrameDigests,
    VLLMBackend,
    VLLMEngineConfig,
    letter_logits_from,
    video_uuid,
    yes_no_from,
)
from cader.vlm.messages import VIDEO_PAD, VIDEO_PLACEHOLDER
from cader.vlm.video import Frames


def test_engine_defaults_let_main_and_verifier_share_one_gpu():
    main = VLLMBackend.llm_kwargs("m", "bf16", VLLMEngineConfig())
    verifier = VLLMBackend.llm_kwargs("v", "bf16", VERIFIER_ENGINE)
    assert main["gpu_memory_utilization"] + verifier["gpu_memory_utilization"] <= 0.9
    assert main["dtype"] == "bfloat16" and main["max_model_len"] == 32768 and main["tensor_parallel_size"] == 1
    # raw_logprobs: full-vocabulary log_softmax, so P(Yes) is the HF backend's softmax (not renormalised)
    assert main["logprobs_mode"] == "raw_logprobs" and main["limit_mm_per_prompt"] == {"video": 1, "image": 0}
    assert "max_num_seqs" not in main  # None leaves vLLM's default
    eager = VLLMBackend.llm_kwargs("m", "auto", VLLMEngineConfig(enforce_eager=True, extra={"seed": 3}))
    assert eager["enforce_eager"] is True and eager["seed"] == 3


def test_on_a_cpu_unset_settings_start_the_engine_in_seconds_and_explicit_ones_win():
    cpu = VLLMBackend.llm_kwargs("m", "fp32", VLLMEngineConfig(), on_cpu=True)
    # eager, a 4,096-token context and an explicit 1 GiB KV cache: no torch.compile warm-up, no profiling of a
    # 32K-token dummy video, no share of the host's RAM reserved (the README's CPU route hung there for minutes)
    assert cpu["enforce_eager"] is True and cpu["max_model_len"] == 4096 and cpu["kv_cache_memory_bytes"] == 2**30
    gpu = VLLMBackend.llm_kwargs("m", "bf16", VLLMEngineConfig())
    assert gpu["enforce_eager"] is False and gpu["max_model_len"] == 32768 and "kv_cache_memory_bytes" not in gpu
    mine = VLLMEngineConfig(max_model_len=16384, enforce_eager=False, cpu_kv_cache_gib=0.5)
    cpu = VLLMBackend.llm_kwargs("m", "fp32", mine, on_cpu=True)
    assert (cpu["max_model_len"], cpu["enforce_eager"], cpu["kv_cache_memory_bytes"]) == (16384, False, 2**29)
    theirs = VLLMEngineConfig(extra={"kv_cache_memory_bytes": 3})  # vLLM's own keyword still gets through
    assert VLLMBackend.llm_kwargs("m", "fp32", theirs, on_cpu=True)["kv_cache_memory_bytes"] == 3


def test_prefix_caching_and_chunked_prefill_switches_reach_the_engine_only_when_set():
    assert "enable_prefix_caching" not in VLLMBackend.llm_kwargs("m", "bf16", VLLMEngineConfig())  # vLLM decides
    off = VLLMBackend.llm_kwargs("m", "bf16", VLLMEngineConfig(enable_prefix_caching=False,
                                                               enable_chunked_prefill=True))
    assert off["enable_prefix_caching"] is False and off["enable_chunked_prefill"] is True


def test_run_py_takes_the_switches_as_flags(monkeypatch, tmp_path):
    from cader.evaluate import run

    args = run.parse_arguments(["--model", "m", "--out", str(tmp_path), "--backend", "vllm",
                                "--vllm_main.enable_prefix_caching", "false",
                                "--vllm_verifier.enable_chunked_prefill", "false"])
    assert args.vllm_main.enable_prefix_caching is False and args.vllm_main.enable_chunked_prefill is None
    assert args.vllm_verifier.enable_chunked_prefill is False


def test_a_video_is_named_by_its_pixels_and_metadata_and_hashed_once_per_frame_array():
    frames = Frames(np.zeros((4, 32, 32, 3), np.uint8), np.arange(4) + 0.5, np.arange(4), native_fps=1.0)
    brighter = Frames(frames.frames + 1, frames.timestamps, frames.indices, 1.0)
    later = Frames(frames.frames, frames.timestamps + 1.0, frames.indices + 1, 1.0)  # same pixels, other times
    names = {video_uuid(v) for v in (frames, brighter, later)}
    assert len(names) == 3 and video_uuid(frames) == video_uuid(Frames(frames.frames.copy(), frames.timestamps,
                                                                       frames.indices, 1.0))
    digests = FrameDigests()
    assert digests.uuid(frames) == digests.uuid(frames) == video_uuid(frames) and digests.hashed == 1
    assert digests.uuid(later) == video_uuid(later) and digests.hashed == 1  # same array: metadata only
    del brighter
    gone = Frames(np.ones((2, 32, 32, 3), np.uint8), np.arange(2.0), np.arange(2), 1.0)
    digests.uuid(gone)
    assert len(digests._known) == 2
    del gone  # the array is freed: its digest goes with it (its id may be reused by another array)
    assert len(digests._known) == 1


def test_engine_settings_are_checked():
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        VLLMEngineConfig(gpu_memory_utilization=1.5)
    with pytest.raises(ValueError, match="own field"):
        VLLMEngineConfig(extra={"max_model_len": 10}).engine_kwargs()


def test_logprob_mapping_by_hand():
    # full-vocabulary log_softmax = z - logsumexp(z over the vocabulary): letter differences are the logits'
    z = np.array([2.0, 0.5, -1.0, 3.0, 0.0])  # ids 10..14; 13 is not a letter and outranks them all
    logp = z - math.log(np.exp(z).sum())
    full = {10 + k: float(v) for k, v in enumerate(logp)}
    scores = letter_logits_from(full, [10, 11, 12])
    assert np.allclose(np.array(scores) - scores[0], z[:3] - z[0])
    p_yes, p_no = yes_no_from(full, 12, 14)  # the whole vocabulary's softmax, not renormalised over Yes/No
    assert p_yes == pytest.approx(math.exp(-1.0) / np.exp(z).sum()) and p_no == pytest.approx(1 / np.exp(z).sum())
    # an id the engine did not score is an error: never -inf for a letter or 0 for "Yes"
    with pytest.raises(BackendError, match=r"option letter token id\(s\) \[11\]"):
        letter_logits_from({10: -0.1}, [10, 11])
    with pytest.raises(BackendError, match="Yes/No"):
        yes_no_from({5: math.log(0.7)}, 5, 6)


class _Logprob:
    def __init__(self, logprob):
        self.logprob = logprob


class _FakeLLM:
    calls: typing.ClassVar[list] = []

    def __init__(self, **kwargs):
        self.kwargs = kwargs

    def generate(self, requests, params, use_tqdm=False):
        _FakeLLM.calls.append((requests, params))
        outs = []
        for _ in requests:
            # vLLM answers logprob_token_ids with exactly those ids plus the sampled token (here 7)
            asked = params.logprob_token_ids or []
            top = {7: _Logprob(-0.05), **{i: _Logprob(-2.5 - 0.5 * k) for k, i in enumerate(asked)}}
            completion = types.SimpleNamespace(logprobs=[top], text="<answer>A</answer>", token_ids=[1, 2, 3])
            outs.append(types.SimpleNamespace(outputs=[completion], prompt_token_ids=list(range(42))))
        return outs


def _fake_module(with_token_ids=True):
    module = types.ModuleType("vllm")
    module.LLM = _FakeLLM
    module.__version__ = "0.32.0"

    class SamplingParams(types.SimpleNamespace):
        __struct_fields__ = ("max_tokens", "temperature", "logprobs") + (("logprob_token_ids",) if with_token_ids
                                                                          else ())

        def __init__(self, **kw):
            super().__init__(**{"logprob_token_ids": None, **kw})

    module.SamplingParams = SamplingParams
    return module


@pytest.fixture
def fake_vllm(monkeypatch):
    module = _fake_module()
    monkeypatch.setitem(sys.modules, "vllm", module)
    _FakeLLM.calls = []
    return module


def test_backend_requests_and_scores_through_the_engine_interface(fake_vllm, tiny_model_dir):
    backend = VLLMBackend(str(tiny_model_dir), dtype="fp32", engine=VLLMEngineConfig(gpu_memory_utilization=0.3))
    assert backend.llm.kwargs["gpu_memory_utilization"] == 0.3 and backend.llm.kwargs["dtype"] == "float32"
    frames = Frames(np.zeros((4, 32, 32, 3), np.uint8), np.arange(4) + 0.5, np.arange(4), native_fps=1.0)
    prompts = [Prompt("Q1?", video=frames), Prompt("Q2?", video=frames)]
    a, _ = backend.letter_logits(prompts, ["A", "B", "C"])
    requests, params = _FakeLLM.calls[-1]
    assert len(requests) == 2  # one engine call for the whole batch: continuous batching fills
    assert params.max_tokens == 1 and params.temperature == 0.0
    assert params.logprob_token_ids == [backend.token_id(x) for x in "ABC"]  # scored whatever their rank
    assert a.logits == pytest.approx([-2.5, -3.0, -3.5]) and a.prompt_tokens == 42
    assert requests[0]["multi_modal_data"]["video"][0][1] == frames.metadata()
    # a video goes with its name, so vLLM keys its caches by it instead of hashing the frames per request
    assert requests[0]["multi_modal_uuids"] == requests[1]["multi_modal_uuids"] == {"video": [video_uuid(frames)]}
    assert backend.frame_digests.hashed == 1
    # vLLM expands only <|video_pad|>: the template's outer vision tokens must not reach it (HF's layout)
    assert VIDEO_PAD in requests[0]["prompt"] and VIDEO_PLACEHOLDER not in requests[0]["prompt"]
    (yn,) = backend.yes_no([Prompt("Is it?", video=frames)])
    _, params = _FakeLLM.calls[-1]
    assert params.logprob_token_ids == [backend.token_id("Yes"), backend.token_id("No")]
    assert yn.p_yes == pytest.approx(math.exp(-2.5)) and yn.p_no == pytest.approx(math.exp(-3.0))
    (g,) = backend.generate([Prompt("Why?", enable_thinking=True)], 16)
    assert g.text == "<answer>A</answer>" and g.completion_tokens == 3
    assert backend.prompt_token_ids([Prompt("Why?")]) == [list(range(42))]
    described = backend.describe()
    assert "logprob_token_ids" in described["yes_no"] and described["vllm"] == "0.32.0"
    # the switches as asked and as the engine runs them (a stand-in engine has no vllm_config: null)
    assert described["engine"]["enable_prefix_caching"] is None and described["engine"]["max_model_len"] == 32768
    assert described["engine_effective"]["enable_prefix_caching"] is None


def test_images_go_to_the_engine_with_their_placeholders(fake_vllm, tiny_model_dir):
    image = np.zeros((32, 64, 3), np.uint8)
    backend = VLLMBackend(str(tiny_model_dir), engine=VLLMEngineConfig(max_images=1))
    assert backend.llm.kwargs["limit_mm_per_prompt"] == {"video": 1, "image": 1}
    request = backend._request(Prompt("What is shown?", images=(image,)))
    assert request["multi_modal_data"] == {"image": [image]} and "<|image_pad|>" in request["prompt"]
    with pytest.raises(BackendError, match="max_images=1"):
        backend._request(Prompt("Two?", images=(image, image)))


def test_an_engine_without_logprob_token_ids_is_refused(monkeypatch, tiny_model_dir):
    monkeypatch.setitem(sys.modules, "vllm", _fake_module(with_token_ids=False))
    with pytest.raises(ImportError, match="no logprob_token_ids"):
        VLLMBackend(str(tiny_model_dir))


def test_run_parses_engine_settings_into_engine_configs(monkeypatch, tmp_path):
    """evaluate/run.py hands make_backend real VLLMEngineConfig objects (jsonargparse leaves namespaces)."""
    from cader.evaluate import run, run_models

    seen = {}

    def fake_make_backend(kind, path, device, dtype, attn, engine=None, **more):
        seen[path] = engine
        raise SystemExit(0)

    monkeypatch.setattr(run_models, "make_backend", fake_make_backend)
    monkeypatch.setattr(run, "load_benchmark", lambda *a: ([], []), raising=False)
    from cader.evaluate import benchmarks

    monkeypatch.setattr(benchmarks, "load_benchmark", lambda *a: ([], []))
    with pytest.raises(SystemExit):
        run.main(["--model", "m", "--benchmark", "synthetic", "--data_root", str(tmp_path), "--out", str(tmp_path / "o"),
                  "--backend", "vllm", "--vllm_main.gpu_memory_utilization", "0.4"])
    assert isinstance(seen["m"], VLLMEngineConfig) and seen["m"].gpu_memory_utilization == 0.4


# ---- scripts/bench/vllm_parity.py and vllm_records.py: the comparisons that must fail on a real difference ------------------------
def _parity_bench():
    import importlib

    return importlib.import_module("cader.scripts.bench.vllm_parity")


def _records_bench():
    import importlib

    return importlib.import_module("cader.scripts.bench.vllm_records")


def _answers(p_yes=1e-3, ids=(1, 2, 3), logits=(1.0, 0.2, -0.5)):
    return [
        {"kind": "stage1", "sample_id": "s", "prompt_token_ids": list(ids), "letter_logits": list(logits)},
        {"kind": "verifier", "sample_id": "s", "prompt_token_ids": list(ids), "p_yes": p_yes, "p_no": 2e-3},
        {"kind": "final", "sample_id": "s", "prompt_token_ids": list(ids), "text": "<answer>A</answer>"},
    ]


def test_parity_accepts_a_shared_shift_and_rejects_every_real_difference():
    bench = _parity_bench()
    shifted = _answers(logits=(1.0 - 7.3, 0.2 - 7.3, -0.5 - 7.3))  # vLLM: logits minus the log-sum-exp
    ok = bench.compare(_answers(), shifted, tolerance=1e-4)
    assert ok["failures"] == [] and ok["prompt_ids_equal"] == 3 and ok["max_margin_diff"] < 1e-12
    # two more prompt tokens (the template's outer vision pair)
    longer = bench.compare(_answers(), _answers(ids=(9, 1, 2, 3, 9)))
    assert len(longer["failures"]) == 3 and all("prompt token ids differ" in f for f in longer["failures"])
    # a "Yes" outside a top-k list reads 0: 1e-3 apart is within 1e-4? no, and log space says inf
    zero = bench.compare(_answers(), _answers(p_yes=0.0))
    assert zero["max_log_p_diff"] == math.inf and any("p_yes" in f for f in zero["failures"])
    # 1e-6 against 1.05e-6 is 5e-8 apart, inside 1e-4 absolutely, yet 5 % off: log space catches it
    assert bench.compare(_answers(p_yes=1e-6), _answers(p_yes=1.05e-6))["failures"]
    margin = bench.compare(_answers(), _answers(logits=(1.0, 0.2005, -0.5)))
    assert any("margin" in f for f in margin["failures"])
    flipped = bench.compare(_answers(), _answers(logits=(0.2, 1.0, -0.5)))
    assert any("top letter" in f for f in flipped["failures"])


def test_records_must_agree_on_letters_routes_and_windows():
    bench = _records_bench()

    def record(sid, pred="A", route="stage2", window=(10.0, 20.0), error=None):
        steps = [{"phase": "propose", "window": list(window)}, {"phase": "verify", "window": None}]
        return {"benchmark": "synthetic", "sample_id": sid, "pred": pred, "route": route, "error": error,
                "stage1": {"pred": "B"}, "stage2": {"accepted": list(window), "fallback": None, "steps": steps}}

    hf = [record("1"), record("2")]
    assert bench.compare_records(hf, [record("2"), record("1")]) == []  # order does not matter
    bad = bench.compare_records(hf, [record("1", route="exit"), record("2", window=(11.0, 20.0))])
    assert len(bad) == 2 and "route HF 'stage2' vs vLLM 'exit'" in bad[0] and "windows" in bad[1]
    assert bench.compare_records(hf, [record("1")]) == ["synthetic/2: only in the HF records"]


def test_two_whole_runs_are_compared_file_by_file(tmp_path, capsys):
    import json

    bench = _records_bench()

    def write(root, name, rows):
        path = root / name / "predictions.jsonl"
        path.parent.mkdir(parents=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def record(sid, pred="A", route="exit"):
        return {"benchmark": "synthetic", "sample_id": sid, "pred": pred, "route": route, "error": None,
                "stage1": {"pred": pred}, "stage2": None}

    hf, vllm = tmp_path / "hf", tmp_path / "vllm"
    write(hf, "full", [record("1"), record("2", route="stage2")])
    write(hf, "no_stage2", [record("1")])
    write(vllm, "full", [record("2", route="stage2"), record("1")])
    write(vllm, "no_stage2", [record("1")])
    result = bench.runs(str(hf), str(vllm))
    assert (result["files"], result["records"], result["stage2"], result["failures"]) == (2, 3, 1, [])
    (vllm / "no_stage2" / "predictions.jsonl").write_text(json.dumps(record("1", pred="B")) + "\n")
    (vllm / "full" / "predictions.jsonl").unlink()
    capsys.readouterr()
    with pytest.raises(SystemExit):
        bench.runs(str(hf), str(vllm))
    failures = json.loads(capsys.readouterr().out)["failures"]
    assert len(failures) == 2 and failures[0].startswith("full/predictions.jsonl: no such file")
    assert failures[1].startswith("no_stage2/predictions.jsonl: synthetic/1:"), failures


def test_samples_per_second_leaves_loading_out_and_counts_samples_in_flight():
    bench = _records_bench()
    # one at a time: started at 10 s, each takes 2 s -> 3 samples in 6 s
    assert bench.samples_per_s([12.0, 14.0, 16.0], [2.0, 2.0, 2.0]) == pytest.approx(0.5)
    # three in flight, written together at 13 s after 3 s each: 3 samples in 3 s
    assert bench.samples_per_s([13.0, 13.0, 13.0], [3.0, 3.0, 3.0]) == pytest.approx(1.0)
    assert bench.samples_per_s([], []) is None
    # the first wave (here the first two records) left out: 2 samples started at 14 s, done at 16 s
    assert bench.samples_per_s([12.0, 13.0, 16.0, 16.0], [2.0, 3.0, 2.0, 2.0], skip=2) == pytest.approx(1.0)
