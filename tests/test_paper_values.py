"""The paper's models, precision and numbers have one source, `cader.contracts.paper`: the default of every entry
point (`cader eval --help`, every shipped YAML, the lmms-eval model's arguments, the server backend's roles,
CaderConfig and RunOptions) equals the paper's value there, or is named there as a deliberate departure (the
miniature's CPU/tiny configurations may use the miniature's named departures too)."""

import dataclasses
import re
from pathlib import Path

import pytest
import yaml
from cader.contracts.paper import (
    DEPARTURES,
    MINIATURE,
    MINIATURE_CONFIGS,
    NOT_METHOD,
    PAPER,
    SELF_VERIFIER,
    TRAINING,
    paper_values,
    section,
)

REPO = Path(__file__).resolve().parents[1]
INFERENCE = paper_values(PAPER)
RECIPE = paper_values(TRAINING)
# configs of the other stages: no key of theirs is a CADER or SFT setting (calibrate's `delta` is its confidence level)
OTHER_STAGES = {"configs/calibrate/default.yaml", "configs/judge/default.yaml"}
TRAIN_PRECISION = {"bf16-true": "bfloat16", "bf16-mixed": "bfloat16"}   # Lightning's names of the paper's bf16


def departures(values: dict, paper: dict, miniature: bool) -> list[str]:
    """'name=value: why' for each setting in `values` that is neither the paper's (`paper`), nor a named departure,
    nor (for a CPU/tiny configuration) one of the miniature's; a setting of none of these kinds is unclassified."""
    problems = []
    for name, value in values.items():
        if name in NOT_METHOD:
            continue
        named = [d for d in (DEPARTURES.get(name), MINIATURE.get(name) if miniature else None) if d is not None]
        if name in paper and value == paper[name] or any(d.allows(value) for d in named):
            continue
        why = (f"the paper's is {paper[name]!r}" if name in paper else "named nowhere" if not named
               else "not the named departure")
        problems.append(f"{name}={value!r}: {why}")
    return problems


def help_defaults(help_text: str) -> dict:
    """{flag: its default, as YAML reads the text after 'default:'} of an argparse help text written without
    wrapping; each flag's entry runs from its line to the next flag's."""
    entries, current = {}, None
    for line in help_text.splitlines():
        start = re.match(r"^  --([\w.]+)", line)
        if start:
            current = start.group(1)
            entries[current] = line
        elif current and line.startswith("   "):
            entries[current] += " " + line.strip()
        else:
            current = None
    found = {name: re.search(r"\(type: [^()]*, default: ([^()]*)\)$", text) for name, text in entries.items()}
    return {name: yaml.safe_load(m.group(1)) for name, m in found.items() if m}


def test_every_paper_value_cites_its_section_and_every_departure_says_why():
    for paper in (PAPER, TRAINING):
        for f in dataclasses.fields(paper):
            assert section(f.name, paper).strip(), f.name
    assert all(d.reason.strip() for d in (*DEPARTURES.values(), *MINIATURE.values()))
    assert (PAPER.model, PAPER.verifier, PAPER.dtype) == ("Qwen/Qwen3-VL-8B-Instruct", "Qwen/Qwen3-VL-4B-Instruct",
                                                          "bfloat16")
    with pytest.raises(KeyError):
        section("no_such_setting")


def test_the_check_catches_a_changed_value_an_unnamed_one_and_a_miniature_value_outside_the_miniature():
    assert departures({"tau": 0.97, "crop_edge": "shift", "device": "cuda"}, INFERENCE, miniature=False) == []
    assert departures({"tau": 0.9}, INFERENCE, miniature=False) == ["tau=0.9: the paper's is 0.97"]
    assert departures({"verifier": "Qwen/Qwen3-VL-8B-Instruct"}, INFERENCE, miniature=False) == [
        "verifier='Qwen/Qwen3-VL-8B-Instruct': the paper's is 'Qwen/Qwen3-VL-4B-Instruct'"]
    assert departures({"shiny_new_knob": 1}, INFERENCE, miniature=False) == ["shiny_new_knob=1: named nowhere"]
    assert departures({"max_frames": 32}, INFERENCE, miniature=False) == ["max_frames=32: not the named departure"]
    assert departures({"max_frames": 32, "dtype": "float32"}, INFERENCE, miniature=True) == []


def test_cader_eval_help_shows_the_papers_defaults(monkeypatch):
    from cader.evaluate.method.config import CaderConfig
    from cader.evaluate.run import build_parser

    monkeypatch.setenv("COLUMNS", "1000")   # one line per flag: a hub id is never wrapped at its hyphens
    text = build_parser("cader eval").format_help()
    defaults = help_defaults(text)
    shown = {name: value for name, value in defaults.items() if name in INFERENCE or name in DEPARTURES}
    assert {"verifier", "dtype", "model", "tau", "delta", "k_reflections", "crop_edge", "p_yes_mode"} <= set(shown)
    assert departures(shown, INFERENCE, miniature=False) == []
    assert shown["verifier"] == PAPER.verifier and shown["dtype"] == PAPER.dtype
    assert SELF_VERIFIER in text   # the way to the main model as its own verifier is in the help
    # every CADER setting is the paper's, a named departure, or not part of the method
    unclassified = [f.name for f in dataclasses.fields(CaderConfig)
                    if f.name not in INFERENCE and f.name not in DEPARTURES and f.name not in NOT_METHOD]
    assert unclassified == []


def test_the_run_options_and_cader_config_defaults_are_the_papers():
    from cader.evaluate.method.config import CaderConfig
    from cader.evaluate.run_options import RunOptions

    options = {f.name: f.default for f in dataclasses.fields(RunOptions) if f.name in INFERENCE or f.name in DEPARTURES}
    assert options == {"model": None, "verifier": PAPER.verifier, "dtype": PAPER.dtype}
    assert departures(options, INFERENCE, miniature=False) == []
    assert departures(CaderConfig().to_dict(), INFERENCE, miniature=False) == []


def eval_configs() -> list[Path]:
    return sorted((REPO / "configs" / "eval").glob("*.yaml"))


@pytest.mark.parametrize("path", eval_configs(), ids=lambda p: p.name)
def test_every_shipped_eval_config_is_the_paper_or_a_named_departure(path):
    values = yaml.safe_load(path.read_text(encoding="utf-8"))
    name = str(path.relative_to(REPO))
    assert departures(values, INFERENCE, miniature=name in MINIATURE_CONFIGS) == []
    # each names its verifier: the paper's, or (the miniature) its own tiny verifier, never the main model by default
    assert values["verifier"] == (MINIATURE["verifier"].value if name in MINIATURE_CONFIGS else PAPER.verifier)


def train_settings(config: dict) -> dict:
    """A train/sft.py config's settings under the paper's names (only those it sets; the effective batch when it
    sets the batch size)."""
    model, data, trainer = (config.get(k) or {} for k in ("model", "data", "trainer"))
    pairs = {"model_path": model.get("model_path"), "lr": model.get("lr"), "warmup_ratio": model.get("warmup_ratio"),
             "lr_scheduler": model.get("lr_scheduler_type"), "dtype": model.get("dtype"),
             "precision": TRAIN_PRECISION.get(trainer.get("precision"), trainer.get("precision")),
             "epochs": trainer.get("max_epochs"), "max_length": data.get("max_length"), "fps": data.get("fps"),
             "max_frames": data.get("max_frames"), "video_max_pixels": data.get("video_max_pixels"),
             "image_max_pixels": data.get("image_max_pixels")}
    if "lora_r" in model:
        pairs["full_parameter"] = not model["lora_r"]
    if "batch_size" in data:
        pairs["effective_batch"] = (data["batch_size"] * trainer.get("devices", 1) * trainer.get("num_nodes", 1)
                                    * trainer.get("accumulate_grad_batches", 1))
    settings = {name: value for name, value in pairs.items() if value is not None}
    if "dtype" in settings and settings["dtype"] == TRAINING.precision:
        settings["precision"] = settings.pop("dtype")  # the weights' dtype at load is the recipe's precision too
    return settings


def test_the_paper_recipe_is_table_6_and_every_tiny_or_cpu_train_config_departs_by_name():
    recipe = train_settings(yaml.safe_load((REPO / "configs/train/cot_mix.yaml").read_text(encoding="utf-8")))
    assert recipe == {name: value for name, value in RECIPE.items() if name != "full_parameter"}
    for path in sorted((REPO / "configs" / "train").glob("*.yaml")):
        name = str(path.relative_to(REPO))
        if name == "configs/train/cot_mix.yaml":
            continue
        assert name in MINIATURE_CONFIGS, f"{name}: a shipped train config that is neither the recipe nor named"
        settings = train_settings(yaml.safe_load(path.read_text(encoding="utf-8")))
        assert departures(settings, RECIPE, miniature=True) == [], name


def test_every_shipped_yaml_is_classified():
    shipped = {str(p.relative_to(REPO)) for p in (REPO / "configs").rglob("*.yaml")}
    classified = {str(p.relative_to(REPO)) for p in eval_configs()} | OTHER_STAGES | set(MINIATURE_CONFIGS) | {
        "configs/train/cot_mix.yaml"}
    assert shipped <= classified, shipped - classified
    assert set(MINIATURE_CONFIGS) <= shipped


def _cader_init_defaults() -> dict:
    """The lmms-eval model's model_arg defaults (`ModelArgs`, which needs no lmms-eval)."""
    from cader.evaluate.lmms.run_context import ModelArgs

    return {f.name: f.default for f in dataclasses.fields(ModelArgs)}


def test_the_lmms_eval_model_and_the_server_backend_default_to_the_papers_verifier_and_bf16():
    from cader.evaluate.backends.server_build import server_roles
    from cader.evaluate.lmms.answering import verifier_model, weights_dtype

    defaults = _cader_init_defaults()
    # without config= or a model_arg: the paper's verifier, in bf16 (the model resolves its None defaults so)
    assert verifier_model(defaults["verifier"], {}, "m") == PAPER.verifier
    assert weights_dtype(defaults["dtype"], {}) == PAPER.dtype
    # with a config file: the file's (the paper config's are the paper's, the miniature's its named departures)
    paper = yaml.safe_load((REPO / "configs/eval/cader.yaml").read_text(encoding="utf-8"))
    tiny = yaml.safe_load((REPO / "configs/eval/cader_tiny.yaml").read_text(encoding="utf-8"))
    assert (verifier_model(None, paper, "m"), weights_dtype(None, paper)) == (PAPER.verifier, PAPER.dtype)
    assert (verifier_model(None, tiny, "m"), weights_dtype(None, tiny)) == (
        MINIATURE["verifier"].value, MINIATURE["dtype"].value)
    # the main model as its own verifier only when asked for by name (or by naming the main model again)
    assert verifier_model(SELF_VERIFIER, paper, "m") == verifier_model("m", {}, "m") == "m"
    roles = server_roles("m", None, ["http://a:1"], ["http://b:2"], True)
    assert (roles.verifier, roles.verifier_urls) == (PAPER.verifier, ("http://b:2",))
