"""DeepSpeed settings mean what --print_config shows: each ZeRO option reaches the config the run uses
(strategy.config), and a ZeRO JSON contradicted by an option is an error naming both."""
import inspect

import pytest

pytest.importorskip("deepspeed")

from cader.train.cli import parse_sft_args
from cader.train.strategies import (
    NAMED_CONFIGS,
    CPUDeepSpeedStrategy,
    SFTDeepSpeedStrategy,
    load_deepspeed_config,
    zero_options,
)


def zero(strategy) -> dict:
    return strategy.config["zero_optimization"]


@pytest.mark.parametrize("name,stage,opt,params", [("zero2", 2, False, False), ("zero3", 3, False, False),
                                                   ("zero3_offload", 3, True, True)])
def test_a_named_config_runs_as_written_and_agreeing_options_change_nothing(name, stage, opt, params):
    plain = SFTDeepSpeedStrategy(name)
    assert plain.config == load_deepspeed_config(name)
    assert zero_options(zero(plain)) == {"stage": stage, "offload_optimizer": opt, "offload_parameters": params}
    agreeing = SFTDeepSpeedStrategy(name, stage=stage, offload_optimizer=opt, offload_parameters=params)
    assert agreeing.config == plain.config and agreeing.zero_stage_3 == (stage == 3)


@pytest.mark.parametrize("name,options,named", [
    ("zero3", {"stage": 2}, "stage=2"),
    ("zero3", {"offload_optimizer": True}, "offload_optimizer=True"),
    ("zero3_offload", {"offload_parameters": False}, "offload_parameters=False"),
    ("zero2", {"stage": 3, "offload_optimizer": True}, "stage=3"),
])
def test_an_option_contradicting_the_zero_json_names_both(name, options, named):
    with pytest.raises(ValueError, match="conflicting") as err:
        SFTDeepSpeedStrategy(name, **options)
    assert named in str(err.value) and repr(name) in str(err.value)


def test_without_a_json_each_option_builds_the_config():
    s2 = SFTDeepSpeedStrategy(zero_config=None, stage=2, offload_optimizer=True)
    assert zero(s2)["stage"] == 2 and zero(s2)["offload_optimizer"]["device"] == "cpu"
    assert "offload_param" not in zero(s2) and not s2.zero_stage_3
    assert s2.config["zero_force_ds_cpu_optimizer"] is False   # the module's AdamW, not DeepSpeed's CPU Adam
    s3 = SFTDeepSpeedStrategy(zero_config=None, stage=3, offload_parameters=True)
    assert zero(s3)["offload_param"]["device"] == "cpu" and "offload_optimizer" not in zero(s3) and s3.zero_stage_3
    assert zero(SFTDeepSpeedStrategy(zero_config=None, stage=1))["stage"] == 1
    with pytest.raises(ValueError, match="stage 3"):
        SFTDeepSpeedStrategy(zero_config=None, stage=2, offload_parameters=True)
    with pytest.raises(ValueError, match="zero_config"):
        SFTDeepSpeedStrategy(zero_config=None)
    with pytest.raises(ValueError, match="stage must be"):
        SFTDeepSpeedStrategy(zero_config=None, stage=4)


def test_the_cpu_variant_takes_the_same_options_over_gloo():
    s = CPUDeepSpeedStrategy("zero2", stage=2)
    assert zero(s)["stage"] == 2 and s._process_group_backend == "gloo"
    with pytest.raises(ValueError, match="conflicting"):
        CPUDeepSpeedStrategy("zero2", stage=3)


def test_print_config_shows_only_settings_that_take_effect_and_they_reach_the_config():
    cfg = parse_sft_args(["--config", "cot_mix.yaml"])
    shown = cfg.trainer.strategy.init_args
    accepted = set(inspect.signature(SFTDeepSpeedStrategy.__init__).parameters) - {"self"}
    assert set(shown.keys()) == accepted
    for ignored in ("reduce_bucket_size", "offload_params_device", "nvme_path", "loss_scale", "sub_group_size"):
        assert ignored not in shown   # Lightning's kwargs that a config file overrides
    flag = "--trainer.strategy.init_args."
    cfg = parse_sft_args(["--config", "cot_mix.yaml", f"{flag}zero_config", "null", f"{flag}stage", "2",
                          f"{flag}offload_optimizer", "true"])
    strategy = SFTDeepSpeedStrategy(**cfg.trainer.strategy.init_args.as_dict())
    assert zero(strategy)["stage"] == 2 and zero(strategy)["offload_optimizer"]["device"] == "cpu"
    assert strategy._timeout.total_seconds() == 120 * 60


def test_the_shipped_jsons_leave_lightnings_fields_to_the_trainer():
    for name in NAMED_CONFIGS:   # Lightning refuses gradient_accumulation_steps here and fills the rest itself
        config = load_deepspeed_config(name)
        assert not {"gradient_accumulation_steps", "train_micro_batch_size_per_gpu", "gradient_clipping",
                    "bf16", "fp16"} & set(config)


def test_deepspeeds_deprecated_collectives_are_silenced_and_no_other_warning():
    """DeepSpeed's calls of torch's deprecated all_gather_into_tensor / reduce_scatter_tensor printed two
    FutureWarnings every ZeRO-3 step; a strategy silences exactly those two messages."""
    import warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        SFTDeepSpeedStrategy("zero3")
        for name, new in (("reduce_scatter_tensor", "reduce_scatter_single"),
                          ("all_gather_into_tensor", "all_gather_single"), ("barrier", "other")):
            warnings.warn(f"`torch.distributed.{name}` is deprecated. Please use `torch.distributed.{new}` instead.",
                          FutureWarning, stacklevel=1)
    passed = [str(w.message) for w in seen if "torch.distributed." in str(w.message)]
    assert passed == ["`torch.distributed.barrier` is deprecated. Please use `torch.distributed.other` instead."]


def test_activation_checkpointing_is_enabled_without_a_deprecation_warning(tiny_model_dir):
    import warnings

    from cader.train.module import enable_checkpointing
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(tiny_model_dir)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        enable_checkpointing(model, {"use_reentrant": False})
    assert not [w for w in seen if issubclass(w.category, FutureWarning)]
    assert any(getattr(m, "gradient_checkpointing", False) for m in model.modules())
