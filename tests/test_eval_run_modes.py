"""evaluate/run.py's modes refuse what they cannot do with one line and exit 2, before any model or benchmark loads;
a merge with no shard files writes an empty report."""

import json
from pathlib import Path

import pytest
from cader.contracts.paper import PAPER
from cader.evaluate import run, run_models


@pytest.fixture
def inputs(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")   # passes the path check; nothing here may load it
    data = tmp_path / "data"
    data.mkdir()
    return ["--model", str(model), "--benchmark", "synthetic", "--data_root", str(data)]


@pytest.fixture
def nothing_loads(monkeypatch):
    def refuse_to_load(*args, **kwargs):
        raise AssertionError("a refused run loaded a model")

    monkeypatch.setattr(run_models, "make_backend", refuse_to_load)
    monkeypatch.setattr(run, "_load_samples", refuse_to_load)


def errors(capsys) -> list[str]:
    return [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]


@pytest.mark.parametrize("extra", [["--shard", "0/2"], ["--merge", "true"]])
def test_the_launcher_refuses_a_shard_or_merge_of_its_own(tmp_path, inputs, nothing_loads, capsys, extra):
    assert run.main([*inputs, "--devices", "2", *extra, "--out", str(tmp_path / "o")]) == 2
    assert errors(capsys) == ["error: --devices/--num_nodes shard the run themselves; drop --shard/--merge"]


def test_variants_refuse_a_shard(tmp_path, inputs, nothing_loads, capsys):
    assert run.main([*inputs, "--variants", "all", "--shard", "1/2", "--out", str(tmp_path / "o")]) == 2
    assert errors(capsys) == ["error: --variants runs in one process; drop --shard"]


@pytest.mark.parametrize("missing", ["model", "benchmark", "data_root"])
def test_a_run_names_the_first_missing_input(tmp_path, inputs, nothing_loads, capsys, missing):
    given = dict(zip(inputs[::2], inputs[1::2], strict=True))
    del given[f"--{missing}"]
    argv = [x for flag_value in given.items() for x in flag_value]
    assert run.main([*argv, "--out", str(tmp_path / "o")]) == 2
    assert errors(capsys) == [f"error: --{missing} is required (unless --merge)"]
    assert not (tmp_path / "o" / "predictions.jsonl").exists()


def test_a_bad_config_is_refused_before_the_output_is_claimed(tmp_path, inputs, nothing_loads, capsys):
    assert run.main([*inputs, "--r_min", "5", "--r_max", "1", "--out", str(tmp_path / "o")]) == 2
    assert errors(capsys) == ["error: r_min (5.0) must not exceed r_max (1.0)"]
    assert list((tmp_path / "o").iterdir()) == []


def test_a_merge_of_no_shards_writes_an_empty_report(tmp_path, nothing_loads):
    out = tmp_path / "o"
    assert run.main(["--merge", "true", "--out", str(out)]) == 0
    assert (out / "predictions.jsonl").read_text() == ""
    assert json.loads((out / "report.json").read_text())["n"] == 0


@pytest.mark.parametrize("device, count, expected", [
    ("cpu", 0, []),
    ("cuda", 0, [("--device cuda: this machine has no CUDA GPU; pass --device cpu for a CPU dry run "
                  "(docs/walkthrough.md)")]),
    ("cuda:1", 1, ["--device cuda:1: this machine has 1 CUDA GPU(s) (cuda:0..cuda:0)"]),
    ("cuda:1", 2, []),
    ("cuda", 8, []),
])
def test_a_cuda_device_the_machine_lacks_is_one_line_naming_the_cpu_route(device, count, expected):
    from cader.evaluate.run_checks import device_problems

    assert device_problems(device, count) == expected


def test_the_paper_eval_config_on_a_machine_without_cuda_is_refused_before_any_load(tmp_path, capsys, monkeypatch):
    from cader.evaluate import run_checks

    monkeypatch.setattr(run_checks, "cuda_devices", lambda: 0)   # what this CPU machine has, on any machine
    config = Path(__file__).resolve().parents[1] / "configs" / "eval" / "cader.yaml"
    code = run.main(["--config", str(config), "--model", str(tmp_path), "--benchmark", "synthetic",
                     "--data_root", str(tmp_path), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "--device cuda: this machine has no CUDA GPU; pass --device cpu" in err
    assert "Traceback" not in err


def _server_args(**flags):
    from types import SimpleNamespace

    base = {"backend": "server", "model": "main", "verifier": PAPER.verifier, "model_urls": "http://a:1",
            "verifier_urls": None, "vllm_main": None, "vllm_verifier": None, "device": "cpu", "dtype": "float32",
            "attn_implementation": None, "server": None, "hf_max_batch_tokens": None}
    return SimpleNamespace(**{**base, **flags})


@pytest.mark.parametrize(("flags", "built", "shared"), [
    # the default: the paper's verifier, on servers of its own
    ({"verifier_urls": "http://c:3"}, [("main", ["http://a:1"]), (PAPER.verifier, ["http://c:3"])], False),
    # the main model verifies (--verifier main_model, or --model named again): its servers serve both roles
    ({"verifier": "main_model"}, [("main", ["http://a:1"])], True),
    ({"verifier": "main"}, [("main", ["http://a:1"])], True),
    ({"verifier": "main_model", "model_urls": "http://a:1|http://b:2"}, [("main", ["http://a:1", "http://b:2"])],
     True),  # lmms-eval's "|"
    ({"verifier": "small", "verifier_urls": "http://c:3"}, [("main", ["http://a:1"]), ("small", ["http://c:3"])], False),
    ({"verifier": "main_model", "verifier_urls": "http://c:3"}, [("main", ["http://a:1"]), ("main", ["http://c:3"])],
     False),  # the main model verifying on replicas of its own
])
def test_server_roles_decide_which_backends_a_run_builds(monkeypatch, flags, built, shared):
    from cader.evaluate.method.config import CaderConfig

    made = []
    monkeypatch.setattr(run_models, "make_backend",
                        lambda kind, path, *a, urls=None, **k: made.append((path, urls)) or object())
    main, verifier = run.load_backends(_server_args(**flags), [CaderConfig()])
    assert made == built and (main is verifier) == shared


@pytest.mark.parametrize(("flags", "message"), [
    ({"model_urls": None}, "--backend server needs --model_urls"),
    ({"verifier": "small"}, "--verifier small is another model: give its servers with --verifier_urls"),
    # the paper's verifier is the default: without its servers the run is refused, naming the way out
    ({}, (f"--verifier {PAPER.verifier} is another model: give its servers with --verifier_urls \\(or "
          "--verifier main_model: the main model's servers verify too, not the paper's Stage 2\\)")),
])
def test_a_server_run_without_the_servers_it_needs_is_refused_by_flag(monkeypatch, flags, message):
    from cader.evaluate.method.config import CaderConfig

    monkeypatch.setattr(run_models, "make_backend", lambda *a, **k: pytest.fail("a refused run built a backend"))
    with pytest.raises(run.RunError, match=message):
        run.load_backends(_server_args(**flags), [CaderConfig()])
