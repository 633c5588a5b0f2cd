"""Faults that stop training instead of exporting a broken model: a non-finite loss, and a loss that explodes.

A NaN or infinite loss (e.g. `--model.lr 1e30`) would be back-propagated into NaN weights, and the export would
write them with exit 0; a divergent run (e.g. `--model.lr 1000`) keeps finite but huge losses and exports a
collapsed model. `LossGuard` looks at every loss before its backward pass, so the step that would corrupt the
weights is never applied, and raises `TrainingStopped` (sft.py prints its one line and exits 3 with no export).

Explosion rule: the baseline is the median of the first `baseline_steps` losses, but never less than the loss of a
uniform guess over the vocabulary, ln(vocab) (`loss_floor`; 11.9 nats for Qwen3-VL's 151,936 tokens, 6.95 for the
tiny model); a loss above `explosion_factor` x baseline for `explosion_patience` consecutive steps afterwards stops
the run. The floor is there because a fine-tune's first batches can be ones the model already knows: the miniature's
SFT starts at 0.062 then 10.9 nats, and 10x the first losses would stop that healthy run at once. Ten times worse
than guessing is reached only by divergence: with `--model.lr 1000` the miniature's loss is 0.062, 10.9, then
9.1e5, 4.9e6, 1.7e7 before the model collapses to one constant loss of 6.52 (and exports that collapsed model).
"""
from __future__ import annotations

import math
import statistics

import lightning as L
import torch


class TrainingStopped(RuntimeError):
    """Training stopped on a fault of the run itself (the message names the step); nothing is exported."""


def explosion_threshold(baseline_losses: list[float], factor: float, floor: float = 0.0) -> float:
    """The loss above which a step counts as exploded: `factor` x max(the median of the baseline losses, `floor`)."""
    return factor * max(statistics.median(baseline_losses), floor)


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
                 loss_floor: float | None = None):
        """
        Args:
            explosion_factor: stop when the loss exceeds this many times the median of the first `baseline_steps`
                losses for `explosion_patience` consecutive steps; null turns the explosion check off (a
                non-finite loss always stops the run).
            baseline_steps: how many first losses (micro-batches) make the baseline median.
            explosion_patience: consecutive exploded losses that stop the run (one bad batch does not).
            loss_floor: the least baseline, in nats; null takes ln(vocab size) of the model being trained (the
                loss of a uniform guess) when training starts.
        """
        if explosion_factor is not None and not explosion_factor > 1:
            raise ValueError(f"explosion_factor must be > 1 or null, got {explosion_factor}")
        if baseline_steps < 1 or explosion_patience < 1:
            raise ValueError("baseline_steps and explosion_patience must be at least 1")
        self.explosion_factor, self.baseline_steps = explosion_factor, baseline_steps
        self.explosion_patience = explosion_patience
        self.loss_floor = loss_floor
        self.baseline: list[float] = []
        self.exploded = 0
        self._batch = (0, 0)

    def state_dict(self) -> dict:
        return {"baseline": self.baseline, "exploded": self.exploded}

    def load_state_dict(self, state_dict: dict) -> None:   # a resumed run keeps the first steps' baseline
        self.baseline, self.exploded = list(state_dict["baseline"]), int(state_dict["exploded"])

    def on_train_start(self, trainer, pl_module):
        if self.loss_floor is None:
            self.loss_floor = uniform_guess_loss(pl_module)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._batch = (trainer.current_epoch, batch_idx)

    def verdict(self, loss: float) -> str | None:
        """Why training must stop after `loss` (None: go on); updates the baseline and the explosion count."""
        if not math.isfinite(loss):
            return f"the loss is {loss} (not finite)"
        if len(self.baseline) < self.baseline_steps:
            self.baseline.append(loss)
            return None
        if self.explosion_factor is None:
            return None
        floor = self.loss_floor or 0.0
        limit = explosion_threshold(self.baseline, self.explosion_factor, floor)
        self.exploded = self.exploded + 1 if loss > limit else 0
        if self.exploded >= self.explosion_patience:
            return (f"the loss exploded: {loss:.4g} > {self.explosion_factor:g} x max(the first {len(self.baseline)} "
                    f"losses' median {statistics.median(self.baseline):.4g}, the uniform-guess loss {floor:.4g}) "
                    f"for {self.exploded} steps (turn off with --loss_guard.explosion_factor null)")
        return None

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
