"""The learning-rate schedule: transformers' get_scheduler gives, at every step, the factors the recipe's own
formula gave (hand-computed here), the module's optimizer uses the configured one, and `--print_config` shows it."""
import importlib
import math
from pathlib import Path

import pytest
import torch
from cader.train.schedule import SCHEDULERS, make_scheduler, optimizer_steps, warmup_steps

REPO = Path(__file__).resolve().parents[1]


def lr_factors(kind: str, total_steps: int, warmup: int, steps: int | None = None) -> list[float]:
    """The multiplier of the base lr used by each of the first `steps` (default total_steps + 1) updates, read
    off the real scheduler on a one-parameter optimizer: what a run's optimizer sees, step by step."""
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    scheduler = make_scheduler(optimizer, kind, total_steps, warmup)
    out = []
    for _ in range(total_steps + 1 if steps is None else steps):
        out.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return out

# total 10 optimizer steps, 2 of warmup: after warmup, progress = (step - 2) / 8
EXPECTED = {
    "cosine": [0.0, 0.5, 1.0, 0.5 * (1 + math.cos(math.pi / 8)), 0.5 * (1 + math.cos(math.pi / 4)), None, 0.5,
               None, None, None, 0.0],
    "linear": [0.0, 0.5, 1.0, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125, 0.0],
    "constant_with_warmup": [0.0, 0.5] + [1.0] * 9,
}


def old_formula(step: int, total: int, warmup: int, kind: str) -> float:
    """The schedule train/schedule.py computed itself before it used transformers.get_scheduler."""
    if step < warmup:
        return step / max(1, warmup)
    if kind == "constant_with_warmup":
        return 1.0
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    if kind == "linear":
        return max(0.0, 1.0 - progress)
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


@pytest.mark.parametrize("kind", SCHEDULERS)
def test_lr_factor_by_hand(kind):
    got = lr_factors(kind, 10, 2)
    assert len(got) == 11
    for step, want in enumerate(EXPECTED[kind]):
        if want is not None:
            assert got[step] == pytest.approx(want, abs=1e-12), (kind, step)


@pytest.mark.parametrize("kind", SCHEDULERS)
@pytest.mark.parametrize("total,warmup", [(10, 1), (37, 4), (1_000, 100)])
def test_every_step_matches_the_old_formula(kind, total, warmup):
    got = lr_factors(kind, total, warmup)
    want = [old_formula(step, total, warmup, kind) for step in range(total + 1)]
    assert got == pytest.approx(want, abs=1e-12)


def test_unknown_names_fail_naming_the_setting():
    with pytest.raises(ValueError, match="lr_scheduler_type"):
        lr_factors("polynomial", 10, 2)


def test_warmup_and_step_counts():
    assert warmup_steps(10, 0.1) == 1 and warmup_steps(11, 0.1) == 2
    assert optimizer_steps(num_batches=10, accumulate=2, epochs=1, world_size=2) == 3


@pytest.mark.parametrize("kind", ["linear", "constant_with_warmup"])
def test_configure_optimizers_uses_the_configured_decay(tiny_model_dir, kind):
    from cader.train.module import SFTModule

    module = SFTModule(str(tiny_model_dir), lr=1.0, warmup_ratio=0.2, lr_scheduler_type=kind)
    module._total_optimizer_steps = lambda: 10
    config = module.configure_optimizers()
    optimizer, scheduler = config["optimizer"], config["lr_scheduler"]["scheduler"]
    lrs = []
    for _ in range(11):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs == pytest.approx(EXPECTED[kind])


def _sft():
    module = importlib.import_module("cader.train.sft")
    return module


def test_print_config_shows_the_scheduler(capsys):
    import yaml

    sft = _sft()
    for extra, want in (([], "cosine"), (["--model.lr_scheduler_type", "linear"], "linear")):
        with pytest.raises(SystemExit) as exit_info:
            sft.main(["--config", "cot_mix.yaml", *extra, "--print_config"])
        assert exit_info.value.code in (0, None)
        printed = yaml.safe_load(capsys.readouterr().out)
        assert printed["model"]["lr_scheduler_type"] == want
        assert printed["model"]["lr"] == 1e-5 and printed["model"]["warmup_ratio"] == 0.1
        assert printed["data"]["release_root"] and printed["data"]["media_root"]
    with pytest.raises(SystemExit):
        sft.main(["--config", "cot_mix.yaml", "--model.lr_scheduler_type", "polynomial", "--print_config"])
