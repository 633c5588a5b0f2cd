"""Faults that stop training instead of exporting a broken model: a non-finite loss, and a loss that explodes.

A NaN or infinite loss (e.g. `--model.lr 1e30`) would be back-propagated into NaN weights, and the export would
write them with exit 0; a divergent run (e.g. `--model.lr 1000`) keeps finite but huge losses and exports a
collapsed model. `LossGuard` looks at every loss before its backward pass, so the step that would corrupt the
weights is never applied, and raises `TrainingStopped` (sft.py prints its one line and exits 3 with no export).

The rule (`judge_loss`, a pure function of the guard's state and one loss) holds from the first step:
- the reference is max(the median of the first `baseline_steps` losses that passed the check, `loss_floor`),
  where the floor is the loss of a uniform guess over the vocabulary, ln(vocab) (11.9 nats for Qwen3-VL's 151,936
  tokens, 6.52 for the tiny model). A fine-tune's first batches can be ones the model already knows (the miniature's
  SFT starts at 0.062 then 10.9 nats), and 10x such a loss is no explosion; ten times worse than guessing is reached
  only by divergence.
- a loss above `runaway_factor` x the reference stops the run at once: no healthy step is 100 times worse than
  guessing, and a divergence can last fewer steps than any patience before the model collapses to a constant,
  finite loss (a `--model.lr 1000` run of the tiny model: 6.56, 3.1e6, 2.0e7, then a constant 6.52);
- a loss above `explosion_factor` x the reference for `explosion_patience` consecutive steps stops it (one bad
  batch does not).
An exploded loss never joins the baseline, so an explosion that starts inside the baseline window cannot raise its
own threshold (the first rule took the median of the first 3 losses whatever they were: 6.56, 3.1e6, 2.0e7 made a
threshold of 3.1e7, and the run above exported its collapsed model with exit 0). Now the miniature
(cot_mix_tiny.yaml) with `--model.lr 1000` logs 0.062, 10.9 and stops at step 3 on a loss of 3.3e7, exit 3.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import lightning as L
import torch


class TrainingStopped(RuntimeError):
    """Training stopped on a fault of the run itself (the message names the step); nothing is exported."""


@dataclass(frozen=True)
class GuardRule:
    """The settings of the loss check (see the module docstring); `explosion_factor` None turns both explosion
    checks off (a non-finite loss always stops the run)."""

    explosion_factor: float | None = 10.0
    runaway_factor: float | None = 100.0
    baseline_steps: int = 3
    explosion_patience: int = 3
    loss_floor: float = 0.0


@dataclass(frozen=True)
class GuardState:
    """What the check remembers: the baseline losses (those that passed, at most `baseline_steps`) and how many
    consecutive losses were over the explosion threshold."""

    baseline: tuple[float, ...] = ()
    exploded: int = 0


def reference_loss(baseline: tuple[float, ...] | list[float], floor: float) -> float | None:
    """max(median of `baseline`, `floor`); None when there is neither (no loss yet and no floor to compare with)."""
    if baseline:
        return max(statistics.median(baseline), floor)
    return floor if floor > 0 else None


def judge_loss(state: GuardState, loss: float, rule: GuardRule) -> tuple[GuardState, str | None]:
    """The state after `loss` and why training must stop (None: go on)."""
    if not math.isfinite(loss):
        return state, f"the loss is {loss} (not finite)"
    if rule.explosion_factor is None:
        return state, None
    reference = reference_loss(state.baseline, rule.loss_floor)
    if reference is None:   # the very first loss with no floor: it is the baseline
        return GuardState((loss,), 0), None
    basis = (f"max(the baseline median {statistics.median(state.baseline):.4g}, the uniform-guess loss "
             f"{rule.loss_floor:.4g})" if state.baseline else f"the uniform-guess loss {rule.loss_floor:.4g}")
    if rule.runaway_factor is not None and loss > rule.runaway_factor * reference:
        return state, (f"the loss exploded: {loss:.4g} > {rule.runaway_factor:g} x {basis} in one step "
                       "(turn off with --loss_guard.explosion_factor null)")
    if loss > rule.explosion_factor * reference:
        exploded = state.exploded + 1
        if exploded >= rule.explosion_patience:
            return GuardState(state.baseline, exploded), (
                f"the loss exploded: {loss:.4g} > {rule.explosion_factor:g} x {basis} for {exploded} steps "
                "(turn off with --loss_guard.explosion_factor null)")
        return GuardState(state.baseline, exploded), None
    baseline = state.baseline + (loss,) if len(state.baseline) < rule.baseline_steps else state.baseline
    return GuardState(baseline, 0), None


def uniform_guess_loss(module) -> float | None:
    """ln(vocab size) of the model `module` trains (its `model.config`), the cross-entropy of a uniform guess."""
    config = getattr(getattr(module, "model", None), "config", None)
    if config is None:
        return None
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    vocab = getattr(text, "vocab_size", None)
    return math.log(vocab) if vocab and vocab > 1 else None


class LossGuard(L.Callback):
    def __init__(self, explosion_factor: float | None = 10.0, baseline_steps: int = 3, explosion_patience: int = 3,
                 loss_floor: float | None = None, runaway_factor: float | None = 100.0):
        """
        Args:
            explosion_factor: stop when the loss exceeds this many times the reference (max(the median of the first
                `baseline_steps` losses that passed, `loss_floor`)) for `explosion_patience` consecutive steps;
                null turns both explosion checks off (a non-finite loss always stops the run).
            baseline_steps: how many first passing losses (micro-batches) make the baseline median.
            explosion_patience: consecutive exploded losses that stop the run (one bad batch does not).
            loss_floor: the least reference, in nats; null takes ln(vocab size) of the model being trained (the
                loss of a uniform guess) when training starts.
            runaway_factor: stop at once, from the first step, when one loss exceeds this many times the reference
                (a divergence can collapse to a finite constant loss before the patience runs out); null leaves
                only the patient check.
        """
        if explosion_factor is not None and not explosion_factor > 1:
            raise ValueError(f"explosion_factor must be > 1 or null, got {explosion_factor}")
        if runaway_factor is not None and explosion_factor is not None and not runaway_factor >= explosion_factor:
            raise ValueError(f"runaway_factor must be >= explosion_factor ({explosion_factor}) or null, "
                             f"got {runaway_factor}")
        if baseline_steps < 1 or explosion_patience < 1:
            raise ValueError("baseline_steps and explosion_patience must be at least 1")
        self.explosion_factor, self.baseline_steps = explosion_factor, baseline_steps
        self.explosion_patience, self.runaway_factor = explosion_patience, runaway_factor
        self.loss_floor = loss_floor
        self.state = GuardState()
        self._batch = (0, 0)

    @property
    def baseline(self) -> list[float]:
        return list(self.state.baseline)

    def rule(self) -> GuardRule:
        return GuardRule(self.explosion_factor, self.runaway_factor, self.baseline_steps, self.explosion_patience,
                         self.loss_floor or 0.0)

    def state_dict(self) -> dict:
        return {"baseline": list(self.state.baseline), "exploded": self.state.exploded}

    def load_state_dict(self, state_dict: dict) -> None:   # a resumed run keeps the first steps' baseline
        self.state = GuardState(tuple(float(x) for x in state_dict["baseline"]), int(state_dict["exploded"]))

    def on_train_start(self, trainer, pl_module):
        if self.loss_floor is None:
            self.loss_floor = uniform_guess_loss(pl_module)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._batch = (trainer.current_epoch, batch_idx)

    def verdict(self, loss: float) -> str | None:
        """Why training must stop after `loss` (None: go on); updates the baseline and the explosion count."""
        self.state, reason = judge_loss(self.state, loss, self.rule())
        return reason

    def on_before_backward(self, trainer, pl_module, loss):
        # accumulated micro-batches see loss / accumulate_grad_batches: scale back, so the baseline means the same
        value = float(loss.detach()) * max(1, trainer.accumulate_grad_batches)
        reason = self.verdict(value)
        if trainer.world_size > 1:   # every rank stops together, or the others would hang in the next collective
            bad = trainer.strategy.reduce_boolean_decision(reason is not None, all=False)
            if bad and reason is None:
                reason = "another rank's loss failed the check"
        if reason is not None:
            epoch, batch = self._batch
            raise TrainingStopped(f"training stopped at step {trainer.global_step + 1} (epoch {epoch}, batch "
                                  f"{batch}): {reason}; nothing exported")


def finite_state(module: torch.nn.Module) -> str | None:
    """The name of a parameter holding a NaN or infinity (None when all are finite)."""
    for name, param in module.named_parameters():
        if param.numel() and not bool(torch.isfinite(param.detach()).all()):
            return name
    return None
