"""End to end on the tiny random Qwen3-VL: HF backend, run.py on synthetic benchmarks, every variant, configs."""

import json
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
import yaml
from cader.contracts.calibration import NO_EXIT_TAU
from cader.evaluate.backends.base import Generation, Prompt
from cader.evaluate.method.config import VARIANTS, CaderConfig

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    from cader.dev.synthetic.dataset import Counts, Frames, Timeline, make_synthetic_data

    out = tmp_path_factory.mktemp("synthetic_data")
    make_synthetic_data(
        out,
        seed=0,
        counts=Counts(n_train=8,  # enough LongVT rows for each of its five release files
                      n_images=1, n_tool=1, n_eval=3, n_heldout=2),
        frames=Frames(width=64, height=48, fps=4),
        timeline=Timeline(eval_duration=(24, 30), train_duration=24,
                          scene_len=8,  # short scenes keep the videos short (the default is 16 s in 128 s)
                          event_len=2.0,
                          train_event_len=4.0),  # the default (4-10 s) must fit the 8 s scene with 1 s either side
    )
    return out / "eval"


@pytest.fixture(scope="module")
def backend(tiny_model_dir):
    from cader.evaluate.backends.hf import HFBackend

    return HFBackend(str(tiny_model_dir))


def _frames(n=4):
    from cader.vlm.video import Frames

    rng = np.random.default_rng(0)
    return Frames(
        rng.integers(0, 255, (n, 64, 64, 3), dtype=np.uint8), np.arange(n, dtype=float), np.arange(n), 1.0
    )


def test_hf_backend_letter_logits_match_full_forward(backend):
    import torch

    prompt = Prompt("Question: q\nOptions:\nA. x\nB. y\nAnswer:", system="sys", video=_frames())
    (scores,) = backend.letter_logits([prompt], ["A", "B", "C"])
    ((full, n_tokens),) = backend._last_logits([prompt])
    ids = [backend.token_id(letter) for letter in "ABC"]
    assert scores.logits == pytest.approx(full[ids].tolist(), abs=1e-5)
    assert scores.prompt_tokens == n_tokens > 10
    (yn,) = backend.yes_no([prompt])
    probs = torch.softmax(full, -1)
    assert (
        yn.p_yes == pytest.approx(float(probs[backend.token_id("Yes")]), rel=1e-4) and yn.p_yes + yn.p_no < 1
    )
    (gen,) = backend.generate([Prompt("hi", video=_frames(), enable_thinking=True)], max_new_tokens=3)
    assert gen.completion_tokens <= 3 and isinstance(gen.text, str)
    from cader.evaluate.backends.base import BackendError

    with pytest.raises(BackendError):
        backend.token_id("relevant_windows")


def test_vllm_backend_import_error_says_how_to_install():
    pytest.importorskip("transformers")
    try:
        import vllm  # noqa: F401
    except ImportError:
        from cader.evaluate.backends.vllm import VLLMBackend

        with pytest.raises(ImportError, match=r"pip install 'cader-toolkit\[vllm\]'"):
            VLLMBackend("/nonexistent")
    else:
        pytest.skip("vllm installed")


def test_full_stage2_path_with_real_model_and_video(backend, data_root):
    """Real decoding, crops, RGR and verifier forward; only the main model's *text* is scripted (tiny model text is
    noise), forcing reject -> RGR -> accept -> answer."""
    from cader.evaluate.benchmarks import load_benchmark, video_path
    from cader.evaluate.runner import process_sample

    class ScriptedText(type(backend)):
        def __init__(self, inner, texts):
            self.__dict__.update(inner.__dict__)
            self.texts = list(texts)

        def generate(self, prompts, max_new_tokens):
            return [Generation(self.texts.pop(0), 1, 1) for _ in prompts]

    samples, errors = load_benchmark("synthetic", data_root)
    assert samples and not errors
    sample = samples[0]
    main = ScriptedText(
        backend, ['"relevant_windows": [["2", "4"]]', '"relevant_windows": [["10", "13"]]', "[20, 22]"]
    )
    # tau > 1: always Stage 2; delta > 1: every window rejected -> two RGR resamples, budget exhausted.
    cfg = CaderConfig(tau=1.01, delta=1.01, max_frames=12, max_pixels=2048, max_new_tokens_answer=4)
    rec = process_sample(sample, video_path(sample, data_root), main, backend, cfg)
    assert rec["error"] is None and rec["route"] == "stage2"
    s2 = rec["stage2"]
    assert s2["fallback"] == "not_accepted" and s2["cycles"] == 3 and rec["pred"] == rec["stage1"]["pred"]
    resample = [s for s in s2["steps"] if s["phase"] == "resample"]
    assert resample[0]["fps_map"][0][:2] == [2.0, 4.0] and 0 < resample[0]["n_frames"] <= 12
    verify = [s for s in s2["steps"] if s["phase"] == "verify"]
    # [2, 4] widened to min_crop = 10 s about its midpoint, then shifted inside the video
    assert verify[0]["crop"] == [0.0, 10.0] and verify[0]["r2"] == 8.0 and 0 < verify[0]["p_yes"] < 1
    assert rec["cost"]["frames_decoded"] > rec["stage1"]["n_frames"]

    main.texts = ['"relevant_windows": [["10", "13"]]', "<answer>B</answer>"]
    rec = process_sample(
        sample,
        video_path(sample, data_root),
        main,
        backend,
        CaderConfig(tau=1.01, delta=0.0, max_frames=12, max_pixels=2048),
    )
    assert rec["stage2"]["accepted"] == [10.0, 13.0] and rec["pred"] == "B"
    assert rec["correct"] == (sample.answer == "B")


@pytest.mark.slow
def test_run_py_all_variants_and_benchmarks(tiny_model_dir, data_root, tmp_path):
    import sys

    sys.path.insert(0, str(REPO / "evaluate"))
    from run import main

    config = str(REPO / "configs/eval/cader_tiny.yaml")
    base = [
        "--config",
        config,
        "--model",
        str(tiny_model_dir),
        "--verifier",
        str(tiny_model_dir),
        "--data_root",
        str(data_root),
        "--progress",
        "false",
    ]
    for variant in VARIANTS:
        out = tmp_path / variant
        argv = [
            "--benchmark",
            "synthetic",
            "--out",
            str(out),
            "--variant",
            variant,
            "--tau",
            repr(NO_EXIT_TAU),  # every sample to Stage 2 (a tau above it is refused, as calibration.json does)
            "--limit",
            "2",
        ]
        assert main(base + argv) == 0
        records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
        assert len(records) == 2 and all(r["error"] is None for r in records)
        report = json.loads((out / "report.json").read_text())
        assert report["config"]["variant"] == variant and (out / "report.md").exists()
        expected_route = "exit" if variant == "no_stage2" else "stage2"
        assert {r["route"] for r in records} == {expected_route}
    # every benchmark loads and runs (one sample each), and a rerun resumes without duplicates
    from cader.evaluate.benchmarks import released

    for bench in released():
        out = tmp_path / bench
        for _ in range(2 if bench == "lvbench" else 1):
            assert main(base + ["--benchmark", bench, "--out", str(out), "--limit", "1"]) == 0
        records = (out / "predictions.jsonl").read_text().splitlines()
        assert len(records) == 1 and json.loads(records[0])["error"] is None
    # shards + merge through the CLI
    out = tmp_path / "sharded"
    for i in range(2):
        assert (
            main(base + ["--benchmark", "synthetic", "--out", str(out), "--shard", f"{i}/2", "--tau", "0"])
            == 0
        )
    assert main(["--merge", "true", "--out", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["n"] == 3 and report["overall"]["stage1_exit_rate"] == 100.0


def test_calibration_file_sets_t_and_tau(tiny_model_dir, data_root, tmp_path):
    import sys

    sys.path.insert(0, str(REPO / "evaluate"))
    from run import main

    cal = tmp_path / "calibration.json"
    cal.write_text(
        json.dumps(
            {
                "temperature": 1.5,
                "tau": 0.0,
                "mode": "precision",
                "alpha": 0.05,
                "delta": 0.1,
                "fit": {},
                "select": {},
                "sources": [],
                "seed": 0,
            }
        )
    )
    out = tmp_path / "run"
    argv = [
        "--config",
        str(REPO / "configs/eval/cader_tiny.yaml"),
        "--model",
        str(tiny_model_dir),
        "--benchmark",
        "synthetic",
        "--data_root",
        str(data_root),
        "--out",
        str(out),
        "--limit",
        "2",
        "--calibration",
        str(cal),
        "--progress",
        "false",
        "--verifier",   # the config names the miniature's verifier; this test's one tiny model verifies itself
        "main_model",
    ]
    # certified under the run's own settings: used as it is
    from cader.evaluate.method.stage1_reuse import model_fingerprint

    payload = json.loads(cal.read_text())
    payload["settings"] = {"backbone": {"name": str(tiny_model_dir), "fingerprint": model_fingerprint(str(tiny_model_dir))},
                           "stage1": {"r1": 1.0, "max_frames": 32, "max_pixels": 2048, "enable_thinking": False},
                           "benchmarks": ["synthetic_heldout"]}
    cal.write_text(json.dumps(payload))
    assert main(argv) == 0
    records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert [r["stage1"]["temperature"] for r in records] == [1.5, 1.5]
    assert {r["route"] for r in records} == {"exit"}
    assert json.loads((out / "report.json").read_text())["config"]["calibration_binding"]["holds"] is True
    # certified at another frame budget: refused, naming the field; accepted on request, and the report says so
    payload["settings"]["stage1"]["max_frames"] = 64
    cal.write_text(json.dumps(payload))
    other = [*argv[:argv.index("--out") + 1], str(tmp_path / "other"), *argv[argv.index("--out") + 2:]]
    assert main(other) == 2
    assert main([*other, "--accept_calibration_mismatch", "true"]) == 0
    report = (tmp_path / "other" / "report.md").read_text()
    assert "guarantee does not transfer" in report and "stage1.max_frames: calibrated 64, run 32" in report


@pytest.mark.parametrize("name", ["cader.yaml", "cader_tiny.yaml"])
def test_eval_yaml_configs_parse(name):
    import sys

    sys.path.insert(0, str(REPO / "evaluate"))
    from run import build_parser

    path = REPO / "configs/eval" / name
    raw = yaml.safe_load(path.read_text())
    args = build_parser().parse_args(["--config", str(path), "--out", "/tmp/unused"])
    cfg = CaderConfig(**{k: getattr(args, k) for k in [f.name for f in fields(CaderConfig)]})
    for key, value in raw.items():
        parsed = getattr(args, key)
        assert (dict(vars(parsed)) if isinstance(value, dict) else parsed) == ({**dict(vars(parsed)), **value}
                                                                          if isinstance(value, dict) else value)
    if name == "cader.yaml":
        assert cfg.to_dict() == CaderConfig().to_dict()  # the shipped paper config is exactly the defaults
