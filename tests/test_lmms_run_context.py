"""What the lmms-eval model reads from its run and refuses before any model loads, without lmms-eval: the run's
--output_path (the side file's default folder), a task it cannot read, and, offline, a task whose rows or videos
are not where lmms-eval will look (it would exit 0 after loading the model); `lmms-eval models` lists cader."""

import sys
import types
from argparse import Namespace
from pathlib import Path

import pytest
from cader.evaluate.lmms import plugin
from cader.evaluate.lmms.run_context import (
    LmmsRun,
    ModelArgs,
    lmms_run,
    offline_data_problem,
    refusal,
    side_file,
)

# the built-in task YAMLs' data keys (lmms-eval 0.7.3: tasks/videomme/videomme.yaml, tasks/lvbench/lvbench.yaml)
VIDEOMME = {"task": "videomme_long", "dataset_path": "lmms-eval/Video-MME",
            "dataset_kwargs": {"token": True, "cache_dir": "videomme", "video": True}}
LVBENCH = {"task": "lvbench", "dataset_path": "lmms-eval/LVBench",
           "dataset_kwargs": {"token": True, "cache_dir": "lvbench", "video": True}}
OFFLINE = {"HF_HUB_OFFLINE": "1"}


def simple_evaluate(cli_args, tasks, task_manager):
    def model_constructor():  # one frame deeper, as the model's constructor is
        return lmms_run()

    return model_constructor()


def run_inside_simple_evaluate(cli_args, tasks):
    """Call lmms_run() from a function named like lmms-eval's, in a module named like lmms-eval's evaluator."""
    like_lmms_eval = types.FunctionType(simple_evaluate.__code__, {"__name__": "lmms_eval.evaluator",
                                                                   "lmms_run": lmms_run})
    return like_lmms_eval(cli_args, tasks, None)


def test_the_side_file_defaults_into_the_runs_output_path(tmp_path, caplog):
    run = run_inside_simple_evaluate(Namespace(output_path=str(tmp_path / "out")), ["videomme_long"])
    assert run == LmmsRun(str(tmp_path / "out"), ["videomme_long"], None)
    assert side_file(None, run) == tmp_path / "out" / "cader_lmms_records.jsonl"
    assert side_file(str(tmp_path / "mine.jsonl"), run) == tmp_path / "mine.jsonl"  # records= wins
    assert lmms_run() is None  # not inside lmms-eval
    assert side_file(None, LmmsRun(None)) == Path("cader_lmms_records.jsonl")
    assert "lmms-eval has no --output_path" in caplog.text


def test_offline_a_task_without_its_rows_or_videos_is_named(tmp_path):
    home = tmp_path / "home"
    env = OFFLINE | {"HF_HOME": str(home), "HF_DATASETS_CACHE": str(tmp_path / "cache")}
    why = offline_data_problem({"videomme_long": VIDEOMME, "lvbench": LVBENCH}, env, tmp_path)
    assert why.startswith("lmms-eval is offline (HF_HUB_OFFLINE/HF_DATASETS_OFFLINE) and cannot find")
    assert f"videomme_long: no video folder {home / 'videomme'}, no rows {tmp_path / 'lmms-eval/Video-MME'}" in why
    assert "lvbench: no video folder" in why and "python -m cader.evaluate.lmms.local_data" in why
    assert offline_data_problem({"videomme_long": VIDEOMME}, {"HF_HOME": str(home)}, tmp_path) is None  # online
    (home / "videomme").mkdir(parents=True)
    (tmp_path / "lmms-eval" / "Video-MME").mkdir(parents=True)  # the recipe's rows, in the working directory
    assert offline_data_problem({"videomme_long": VIDEOMME}, env, tmp_path) is None
    (home / "lvbench").mkdir()
    (tmp_path / "cache" / "lmms-eval___lv_bench").mkdir(parents=True)  # datasets' own offline cache
    assert offline_data_problem({"lvbench": LVBENCH}, env, tmp_path) is None


def test_the_models_own_model_args_keep_their_defaults_and_the_rest_go_on_to_be_checked():
    args, rest = ModelArgs.split({"backend": "server", "concurrency": 8, "tau": 0.9, "server.retries": 2, "taus": 1})
    assert (args.backend, args.concurrency, args.device, args.verifier, args.batch_size) == ("server", 8, "cpu", None, 1)
    assert rest == {"tau": 0.9, "server.retries": 2, "taus": 1}
    args, rest = ModelArgs.split({"concurrency": 2, "tau": 0.9, "taus": 1})
    why = refusal(rest, args.concurrency, args.backend, None, {}, Path("."))
    assert why.startswith("model_args: unknown taus (CADER settings: ") and "the model's own: attn_implementation," in why


def test_refusals_come_before_any_model_loads(tmp_path):
    def why(overrides=None, concurrency=1, backend="hf", run=None, environ=None):
        return refusal(overrides or {}, concurrency, backend, run, environ or {}, tmp_path)

    assert why() is None
    assert why({"taus": 0.5}).startswith("model_args: unknown taus (CADER settings:")
    assert why(concurrency=0) == "model_args: concurrency must be a whole number >= 1, got 0"
    assert why(backend="sglang") == "model_args: backend='sglang'; choose one of hf, vllm, server"
    assert "WORLD_SIZE=2" in why(environ={"WORLD_SIZE": "2"})
    mmmu = {"task": "mmmu_val", "dataset_path": "lmms-lab/MMMU"}
    assert "'mmmu_val' is not supported" in why(run=LmmsRun("out", [VIDEOMME, mmmu]))
    assert "videomme_long: no video folder" in why(run=LmmsRun("out", [VIDEOMME]),
                                                   environ=OFFLINE | {"HF_HOME": str(tmp_path)})


def test_lmms_eval_models_lists_cader(monkeypatch):
    """`lmms-eval models` prints lmms_eval.models' tables, which entry-point models never entered (0.7.3)."""
    models = types.ModuleType("lmms_eval.models")
    models.AVAILABLE_SIMPLE_MODELS = {"qwen2_5_vl": "Qwen2_5_VL"}
    registry = types.ModuleType("lmms_eval.models.registry_v2")
    registry.ModelManifest = lambda **fields: types.SimpleNamespace(**fields)
    monkeypatch.setitem(sys.modules, "lmms_eval", types.ModuleType("lmms_eval"))
    monkeypatch.setitem(sys.modules, "lmms_eval.models", models)
    monkeypatch.setitem(sys.modules, "lmms_eval.models.registry_v2", registry)
    manifest = plugin.manifest()
    assert (manifest.model_id, manifest.simple_class_path) == ("cader", "cader.evaluate.lmms.model.Cader")
    assert models.AVAILABLE_SIMPLE_MODELS == {"qwen2_5_vl": "Qwen2_5_VL", "cader": "Cader"}


@pytest.mark.parametrize("value", ["0", "", "false"])
def test_offline_switches_off_check_nothing(tmp_path, value):
    assert offline_data_problem({"videomme_long": VIDEOMME}, {"HF_HUB_OFFLINE": value}, tmp_path) is None
