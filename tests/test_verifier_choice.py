"""Which model verifies Stage 2's crops, and where a run says so.

- evaluate/run.py without --verifier loads the paper's Qwen3-VL-4B-Instruct beside the main model, in bf16;
  `--verifier main_model` (the one way to the main model as its own verifier) loads one model for both roles and
  warns; report.json, report.md and every Stage-2 record name the verifier and whether it is the main model.
- The two-model path on real tiny models: the miniature's verifier (narrower, another vocabulary) scores the very
  clip the main model then answers on, with its own token ids, its own processor and its own FLOPs.
"""

import json
import logging

import pytest
from cader.contracts.paper import PAPER, SELF_VERIFIER
from cader.contracts.records import PredictionRecord, build_record
from cader.dev.scripted import ScriptedBackend
from cader.evaluate import run, run_models
from pydantic import ValidationError

UNSURE = [0.0, 0.1, 0.0, 0.0]   # a low margin: the sample goes to Stage 2


class NamedScripted(ScriptedBackend):
    """A scripted backend that names the model it stands for, as a loaded backend does (`Backend.model_path`)."""

    def __init__(self, path: str, dtype: str):
        super().__init__({"q0": UNSURE, "q1": UNSURE})
        self.path, self.dtype = path, dtype


@pytest.fixture
def loads(monkeypatch):
    """Every backend evaluate/run.py builds, as (path, dtype), in order; none loads a model."""
    made = []

    def make_backend(kind, path, device, dtype, *args, **kwargs):
        made.append((path, dtype))
        return NamedScripted(path, dtype)

    monkeypatch.setattr(run_models, "make_backend", make_backend)
    return made


@pytest.fixture
def inputs(tmp_path, barcode_video):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"text_config": {  # a language model's sizes: FLOPs are counted
        "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2,
        "num_key_value_heads": 1, "head_dim": 4, "vocab_size": 10}}))
    bench = tmp_path / "data" / "synthetic"
    (bench / "videos").mkdir(parents=True)
    (bench / "videos" / "v.mp4").symlink_to(barcode_video)
    rows = [{"id": f"s{i}", "video": "videos/v.mp4", "duration": 60.0, "question": f"q{i}",
             "options": ["a", "b", "c", "d"], "answer": "B"} for i in range(2)]
    (bench / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return ["--model", str(model), "--benchmark", "synthetic", "--data_root", str(tmp_path / "data"),
            "--out", str(tmp_path / "out"), "--progress", "false", "--max_frames", "8", "--max_pixels", "2048"]


def outputs(tmp_path) -> tuple[dict, str, list[dict]]:
    out = tmp_path / "out"
    records = [json.loads(line) for line in (out / "predictions.jsonl").read_text().splitlines()]
    return json.loads((out / "report.json").read_text()), (out / "report.md").read_text(), records


def test_without_the_flag_the_papers_verifier_loads_beside_the_main_model_in_bf16(tmp_path, inputs, loads):
    assert run.main(inputs) == 0
    model = inputs[1]
    assert loads == [(model, "bfloat16"), (PAPER.verifier, "bfloat16")]
    report, markdown, records = outputs(tmp_path)
    config = report["config"]
    assert (config["verifier"], config["verifier_is_main_model"], config["dtype"]) == (PAPER.verifier, False,
                                                                                       "bfloat16")
    assert f"Verifier: `{PAPER.verifier}` (the paper's); main model `{model}`." in markdown
    assert [r["route"] for r in records] == ["stage2", "stage2"]
    assert all(r["stage2"]["verifier"] == {"model": PAPER.verifier, "main_model": False} for r in records)
    assert report["verifiers"] == [{"model": PAPER.verifier, "main_model": False}]   # as the records say


@pytest.mark.parametrize("named", [SELF_VERIFIER, "model"])
def test_the_main_model_verifies_only_when_asked_and_every_output_says_so(tmp_path, inputs, loads, caplog, named):
    model = inputs[1]
    with caplog.at_level(logging.WARNING):
        assert run.main([*inputs, "--verifier", SELF_VERIFIER if named == SELF_VERIFIER else model]) == 0
    assert loads == [(model, "bfloat16")]   # one model in both roles
    report, markdown, records = outputs(tmp_path)
    assert (report["config"]["verifier"], report["config"]["verifier_is_main_model"]) == (model, True)
    assert "Verifier: the main model itself" in markdown and "not the paper's Stage 2" in markdown
    assert all(r["stage2"]["verifier"] == {"model": model, "main_model": True} for r in records)
    assert report["verifiers"] == [{"model": model, "main_model": True}]
    assert "the main model verifies its own crops" in caplog.text


def test_a_variant_without_the_verifier_loads_none_and_its_records_name_none(tmp_path, inputs, loads):
    assert run.main([*inputs, "--variant", "no_verifier"]) == 0
    assert loads == [(inputs[1], "bfloat16")]
    report, markdown, records = outputs(tmp_path)
    assert all("verifier" not in r["stage2"] for r in records) and report["verifiers"] == []
    assert "Verifier:" not in markdown


def test_the_self_verifier_keyword_is_not_a_path_and_the_papers_verifier_that_will_not_load_says_what_to_do(
        tmp_path, inputs, monkeypatch, capsys):
    from cader.evaluate.run_checks import path_problems

    args = run.parse_arguments([*inputs, "--verifier", SELF_VERIFIER])
    assert path_problems(args) == []
    args = run.parse_arguments([*inputs, "--verifier", str(tmp_path / "no_such_verifier")])
    assert path_problems(args) == [f"--verifier {tmp_path / 'no_such_verifier'}: no such folder"]

    def offline(kind, path, *args, **kwargs):
        if path == PAPER.verifier:
            raise OSError("We couldn't connect to the Hub")
        return NamedScripted(path, "bfloat16")

    monkeypatch.setattr(run_models, "make_backend", offline)
    assert run.main(inputs) == 2
    (line,) = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error")]
    assert line.startswith(f"error: --verifier {PAPER.verifier}: cannot load it (We couldn't connect to the Hub); "
                           "it is the paper's verifier, the default")
    assert f"--verifier {SELF_VERIFIER}" in line


def test_the_record_contract_takes_a_verifier_block_keeps_old_records_and_refuses_a_bad_one():
    stage2 = {"pred": "B", "accepted": None, "cycles": 0, "fallback": "unparseable_proposal", "steps": []}
    record = {"benchmark": "b", "sample_id": "s", "video": "v.mp4", "duration": 1.0, "question": "q",
              "options": ["a", "b"], "letters": ["A", "B"], "answer": "B",
              "stage1": {"logits": [0.0, 1.0], "pred": "B", "margin": 0.1, "temperature": 2.0, "n_frames": 1,
                         "fps": 1.0},
              "route": "stage2", "stage2": stage2, "pred": "B", "correct": True,
              "cost": {"forwards": 1, "frames_decoded": 1, "prompt_tokens": 1, "completion_tokens": 0},
              "error": None}
    assert "verifier" not in build_record(PredictionRecord, record)["stage2"]   # written before it was recorded
    named = {**record, "stage2": {**stage2, "verifier": {"model": PAPER.verifier, "main_model": False}}}
    assert build_record(PredictionRecord, named)["stage2"]["verifier"]["model"] == PAPER.verifier
    with pytest.raises(ValidationError, match="main_model"):
        build_record(PredictionRecord, {**record, "stage2": {**stage2, "verifier": {"model": "m"}}})


# ---- the two-model path on real tiny models -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_verifier_dir(tmp_path_factory):
    """The miniature's verifier as built (random weights): narrower than the tiny main model, its own vocabulary."""
    from cader.dev.tiny import make_tiny_model

    return make_tiny_model(tmp_path_factory.mktemp("tiny_verifier") / "verifier", seed=0, size="verifier")


@pytest.mark.slow
def test_two_tiny_models_share_one_decode_and_each_scores_with_its_own_token_ids(tiny_model_dir, tiny_verifier_dir,
                                                                                  barcode_video):
    import torch
    from cader.calibrate.compute import call_flops, text_shape_from_config
    from cader.evaluate.backends.base import Generation
    from cader.evaluate.backends.hf import HFBackend
    from cader.evaluate.benchmarks.base import Sample
    from cader.evaluate.method.config import CaderConfig
    from cader.evaluate.runner import process_sample

    main_model, verifier = HFBackend(str(tiny_model_dir)), HFBackend(str(tiny_verifier_dir))
    # another vocabulary: a score read at the main model's ids would be another token's
    assert verifier.token_id("Yes") != main_model.token_id("Yes")
    assert verifier.token_id("No") != main_model.token_id("No")
    seen = {}

    class ScriptedText(HFBackend):
        """The tiny main model with its generations scripted (its own text is noise); the clip it answers on kept."""

        def __init__(self, inner):
            self.__dict__.update(inner.__dict__)
            self.texts = ['"relevant_windows": [["20", "26"]]', "<answer>B</answer>"]

        def generate(self, prompts, max_new_tokens):
            seen["answered"] = prompts[0].video
            return [Generation(self.texts.pop(0), 1, 1) for _ in prompts]

    class Spy(HFBackend):
        def __init__(self, inner):
            self.__dict__.update(inner.__dict__)

        def yes_no(self, prompts):
            seen["verified"], seen["prompt"] = prompts[0].video, prompts[0]
            return super().yes_no(prompts)

    sample = Sample("bench", "s0", barcode_video.name, "q0", ["a", "b", "c", "d"], ["A", "B", "C", "D"], "B", 60.0,
                    {})
    cfg = CaderConfig(tau=1.01, delta=0.0, max_frames=8, max_pixels=2048)
    record = process_sample(sample, barcode_video, ScriptedText(main_model), Spy(verifier), cfg)
    assert record["error"] is None and record["stage2"]["accepted"] == [20.0, 26.0]
    assert record["stage2"]["verifier"] == {"model": str(tiny_verifier_dir), "main_model": False}
    assert seen["answered"] is seen["verified"]   # one decode of the crop: the verifier's clip is the answer's
    # P(Yes) is the verifier's own softmax at its own "Yes" id, not the main model's id or vocabulary
    ((logits, _),) = verifier._last_logits([seen["prompt"]])
    probs = torch.softmax(logits, -1)
    (verify,) = [s for s in record["stage2"]["steps"] if s["phase"] == "verify"]
    assert verify["p_yes_vocab"] == pytest.approx(float(probs[verifier.token_id("Yes")]), rel=1e-5)
    assert verify["p_yes_vocab"] != pytest.approx(float(probs[main_model.token_id("Yes")]), rel=1e-3)
    # the verifier's call costs FLOPs at its own, narrower, shape
    shape = text_shape_from_config(json.loads((tiny_verifier_dir / "config.json").read_text()))
    tokens = len(verifier.prompt_token_ids([seen["prompt"]])[0])
    assert record["cost"]["flops"]["verifier"] == pytest.approx(call_flops(shape, tokens), rel=1e-3)
