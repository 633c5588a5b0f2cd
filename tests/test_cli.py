"""The command lines: `cader` and its subcommands, the documented script paths, and a help text for every flag."""

import json
import shlex
import subprocess
import sys
import sysconfig
from itertools import pairwise
from pathlib import Path

import pytest
import yaml
from cader.cli.main import STAGES, load_script, main

REPO = Path(__file__).resolve().parents[1]

# The command lines README.md, docs/walkthrough.md and the quickstart scripts show, with placeholders filled in,
# parsed in full here (tests/test_readme_docs.py checks every flag of every documented line exists).
DOCUMENTED = [
    "train/sft.py --config configs/train/cot_mix_tiny.yaml",
    ("train/sft.py --config configs/train/cot_mix.yaml --data.release_root /data/LongVT-Parquet "
     "--data.media_root /data/LongVT-Source --plan_only true"),
    "train/sft.py --config cot_mix.yaml --trainer.num_nodes 2",
    "train/sft.py --config cot_mix.yaml --model.lora_r 64",
    "train/sft.py --config cot_mix.yaml --ckpt_path last",
    "train/sft.py --config configs/train/cot_mix.yaml --trainer.num_nodes 2 --trainer.devices 8",
    ("evaluate/run.py --config configs/eval/cader.yaml --model runs/sft/export --verifier Qwen/Qwen3-VL-4B-Instruct "
     "--benchmark videomme_long --data_root /data/benchmarks --out runs/heldout --variant no_stage2"),
    ("evaluate/run.py --config configs/eval/cader.yaml --model runs/sft/export --verifier Qwen/Qwen3-VL-4B-Instruct "
     "--benchmark lvbench --data_root /data/benchmarks --out runs/lvbench "
     "--calibration runs/calibration/calibration.json --devices 8 --num_nodes 2 --backend vllm --concurrency 32 "
     "--variants all --retry_failed true --crop_edge clip --p_yes_mode yes_no --vllm_main.max_model_len 16384"),
    ("evaluate/run.py --config configs/eval/cader.yaml --out runs/lvbench --variant no_rgr "
     "--stage1_from runs/lvbench/predictions.jsonl"),
    "evaluate/run.py --merge true --out runs/lvbench",
    ("evaluate/run.py --config configs/eval/cader_tiny.yaml --model runs/tiny/sft/export "
     "--verifier runs/tiny/verifier --benchmark synthetic --data_root runs/tiny/data/eval --out runs/tiny/eval "
     "--variant full --limit 8 --progress false --calibration c.json --compare p.jsonl --limit 48"),
    ("calibrate/fit.py --predictions runs/heldout/predictions.jsonl --out runs/calibration --mode precision "
     "--alpha 0.05 --delta 0.1"),
    "calibrate/fit.py --predictions a.jsonl --out runs/calibration --mode budget --budget 0.5",
    "calibrate/fit.py --config configs/calibrate/default.yaml --predictions A.jsonl B.jsonl --out runs/calibration",
    ("evaluate/judge.py --config configs/judge/default.yaml --predictions runs/agentvidbench/predictions.jsonl "
     "--questions /data/agentvidbench/questions.jsonl --out runs/judge"),
    ("evaluate/judge.py --config configs/judge/default.yaml --predictions runs/agentvidbench/predictions.jsonl "
     "--questions /data/agentvidbench/questions.jsonl --out runs/judge --provider openai "
     "--base_url http://HOST:8000/v1 --model NAME --concurrency 16 --progress false"),
    ("evaluate/judge.py --config configs/judge/default.yaml --prediction_format agentvidbench_run "
     "--predictions exp/ours_gemini-2.5-flash_run1 --questions /data/agentvidbench/questions.jsonl "
     "--out runs/judge_ours"),
    "evaluate/judge.py compare runs/a/predictions.jsonl runs/b/predictions.jsonl",
]
SUBCOMMAND_OF_SCRIPT = {"train/sft.py": "sft", "evaluate/run.py": "eval", "calibrate/fit.py": "calibrate",
                        "evaluate/judge.py": "judge"}


def printed_config(argv: list[str], capsys) -> dict:
    """The configuration `cader <argv> --print_config` prints, run in this process."""
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--print_config"])
    assert exit_info.value.code in (0, None)
    return yaml.safe_load(capsys.readouterr().out)


def help_text(argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main([*argv, "--help"])
    assert exit_info.value.code in (0, None)
    return capsys.readouterr().out


def cader_console_script() -> Path:
    """The `cader` console script of the environment running the tests: pip writes it to that interpreter's
    scripts folder, so the test checks this installation even when PATH names another one (or none)."""
    name = "cader.exe" if sys.platform == "win32" else "cader"
    return Path(sysconfig.get_path("scripts")) / name


def test_cader_help_lists_every_subcommand_with_its_line():
    cader = cader_console_script()
    assert cader.is_file(), f"no cader console script at {cader}: pip install -e . with {sys.executable}"
    proc = subprocess.run([str(cader), "--help"], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    for name in ("sft", "plan", "eval", "merge", "calibrate", "judge", "compare"):
        assert name in STAGES
        assert f"    {name} " in proc.stdout, name
    assert "(evaluate/judge.py compare)" in " ".join(proc.stdout.split())
    # `python -m cader.cli` is the same command for an environment whose scripts folder is not on PATH
    module = subprocess.run([sys.executable, "-m", "cader.cli", "--help"], capture_output=True, text=True,
                            timeout=120, check=False)
    assert module.returncode == 0, module.stderr
    assert module.stdout == proc.stdout


def test_cader_help_imports_no_stage():
    code = ("import sys\nfrom cader.cli.main import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith(('lightning', 'torch', 'cader.'))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert proc.stdout.strip().splitlines()[-1] == "['cader.cli', 'cader.cli.main']"


def test_an_unknown_subcommand_names_the_known_ones(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["evaluate"])
    assert exit_info.value.code == 2 and "'calibrate'" in capsys.readouterr().err


@pytest.mark.parametrize("name", list(STAGES))
def test_subcommand_help_shows_the_stage_flags_and_no_function_reprs(name, capsys):
    text = help_text([name], capsys)
    assert f"usage: {STAGES[name].prog or f'cader {name}'}" in text
    assert "<function" not in text and "<lambda" not in text and "Unvalidated" not in text
    expected = {"sft": "--trainer.max_steps", "plan": "--plan_only", "eval": "--benchmark", "merge": "--merge",
                "calibrate": "--predictions", "transfer": "--level", "judge": "--prediction_format",
                "compare": "--n_resamples", "audit": "--labels", "frontier": "--verifier"}
    assert expected[name] in text


def stage_parsers():
    run, fit, judge = (load_script(STAGES[name]) for name in ("eval", "calibrate", "judge"))
    return {"eval": run.build_parser(), "calibrate": fit.build_parser(), "judge": judge.judge_parser(),
            "compare": judge.compare_parser()}


@pytest.mark.parametrize("name", ["eval", "calibrate", "judge", "compare"])
def test_every_flag_has_a_one_line_help(name):
    parser = stage_parsers()[name]
    flags = [action for action in parser._actions if action.option_strings]
    assert len(flags) > 5
    for action in flags:
        flag = max(action.option_strings, key=len)
        assert action.help and action.help.strip(), f"{name} {flag} has no help"


def test_choices_print_as_choices(capsys):
    text = " ".join(help_text(["eval"], capsys).split())
    assert "--variant {full,no_stage2,uniform_stage2,no_verifier,no_reflection,no_rgr}" in text
    assert "--crop_edge {clip,shift}" in text and "--p_yes_mode {vocab,yes_no}" in text
    assert "--backend {hf,vllm,server}" in text
    for benchmark in ("videomme_long", "mlvu_dev", "longvideobench_val", "lvbench", "videoevalpro_mcq",
                      "agentvidbench", "synthetic_heldout"):
        assert benchmark in text
    assert "Temporal Segment Proposal" in text and "Eq. 4" in text   # the CADER constants cite the paper
    assert "--mode {precision,budget,accuracy,cascade,joint}" in " ".join(help_text(["calibrate"], capsys).split())
    judge_help = " ".join(help_text(["judge"], capsys).split())
    from cader.evaluate.judge.providers import PROVIDERS

    assert "--provider {" + ",".join(sorted(PROVIDERS)) + "}" in judge_help
    assert "--prediction_format {agentvidbench_run,cader}" in judge_help


def test_choice_literals_match_the_registries():
    from typing import get_args, get_type_hints

    from cader.calibrate.options import Rule
    from cader.calibrate.tau import MODES
    from cader.evaluate.judge.adapters import PREDICTION_FORMATS
    from cader.evaluate.judge.providers import PROVIDERS

    judge = load_script(STAGES["judge"])
    mode = get_type_hints(Rule)["mode"]
    assert get_args(mode) == MODES
    assert set(get_args(judge.PredictionFormat)) == set(PREDICTION_FORMATS)
    assert set(get_args(judge.Provider)) == set(PROVIDERS)


@pytest.mark.parametrize("command", DOCUMENTED, ids=lambda c: c.split()[0] + " " + " ".join(c.split()[1:3]))
def test_documented_command_parses(command, capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    script, *args = shlex.split(command)
    config = printed_config([SUBCOMMAND_OF_SCRIPT[script], *args], capsys)
    given = {flag[2:]: value for flag, value in pairwise(args)   # a repeated flag: the last one counts
             if flag.startswith("--") and not value.startswith("--")}
    for key, value in given.items():
        if key != "config" and "." not in key:
            parsed = config[key] if isinstance(config[key], list) else [config[key]]
            assert value.lower() in [str(item).lower() for item in parsed], key


# each builds its CLI in a fresh interpreter (7-14 s measured on 2 shared cores): slow
@pytest.mark.slow
@pytest.mark.parametrize("script", ["train/sft.py", "evaluate/run.py", "calibrate/fit.py", "evaluate/judge.py"])
def test_script_paths_still_run(script):
    command = next(shlex.split(c) for c in DOCUMENTED if c.startswith(script))
    proc = subprocess.run([sys.executable, *command, "--print_config"], cwd=REPO, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert yaml.safe_load(proc.stdout)


@pytest.mark.slow
def test_judge_help_lists_compare():
    proc = subprocess.run([sys.executable, "evaluate/judge.py", "--help"], cwd=REPO, capture_output=True, text=True,
                          timeout=120, check=True)
    assert "{compare}" in proc.stdout and "    compare " in proc.stdout


def test_plan_and_merge_add_their_switch(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    assert printed_config(["plan", "--config", "cot_mix"], capsys)["plan_only"] is True
    assert printed_config(["sft", "--config", "cot_mix"], capsys)["plan_only"] is False
    assert printed_config(["merge", "--out", "runs/x"], capsys)["merge"] is True


@pytest.mark.slow
def test_cader_calibrate_writes_what_fit_py_writes(tmp_path, capsys):
    from cader.dev.calibration_rows import synthetic_prediction_rows

    predictions = tmp_path / "predictions.jsonl"
    rows = synthetic_prediction_rows("synthetic", 240, seed=3, stage2_accuracy=0.6)
    predictions.write_text("".join(json.dumps(row) + "\n" for row in rows))
    flags = ["--predictions", str(predictions), "--mode", "budget", "--budget", "0.5", "--figures", "false"]
    proc = subprocess.run([sys.executable, str(REPO / "calibrate/fit.py"), *flags, "--out", str(tmp_path / "script")],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert main(["calibrate", *flags, "--out", str(tmp_path / "cader")]) == 0
    assert "tau =" in capsys.readouterr().out
    # the same file but for the provenance block, whose date and command line name each run (that is its point)
    script, cader = (json.loads((tmp_path / d / "calibration.json").read_text()) for d in ("script", "cader"))
    assert script.pop("provenance")["command"] != cader.pop("provenance")["command"]
    assert script == cader
    assert (tmp_path / "script" / "summary.md").read_text() == (tmp_path / "cader" / "summary.md").read_text()


@pytest.mark.slow
def test_cader_compare_computes_what_judge_py_compare_computes(tmp_path, capsys):
    files = []
    for name, every in (("cader", 3), ("single", 2)):
        files.append(tmp_path / name / "predictions.jsonl")
        files[-1].parent.mkdir()
        files[-1].write_text("".join(json.dumps({"question_id": i, "correct": i % every != 0}) + "\n"
                                     for i in range(30)))
    flags = [*map(str, files), "--n_resamples", "500"]
    proc = subprocess.run([sys.executable, str(REPO / "evaluate/judge.py"), "compare", *flags,
                           "--json_out", str(tmp_path / "script.json")], capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    assert main(["compare", *flags, "--json_out", str(tmp_path / "cader.json")]) == 0
    assert capsys.readouterr().out.strip() == proc.stdout.strip()
    assert (tmp_path / "script.json").read_text() == (tmp_path / "cader.json").read_text()


def test_judge_without_its_inputs_says_which_are_missing(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["judge", "--predictions", "p.jsonl"])
    assert exit_info.value.code == 2
    assert "--questions, --out, --model" in capsys.readouterr().err
