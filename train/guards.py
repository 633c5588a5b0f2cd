"""Faults that stop training instead of exporting a broken model: a non-finite loss, and a loss that explodes.

A NaN or infinite loss (e.g. `--model.lr 1e30`) would be back-propagated into NaN weights, and the export would
write them with exit 0; a divergent run (e.g. `--model.lr 1000`) keeps finite but huge losses and exports a
collapsed model. `LossGuard` looks at every loss before its backward pass, so the step that would corrupt the
weights is never applied, and raises `TrainingStopped` (sft.py prints its one line and exits 3 with no export).

Explosion rule: the median of the first `baseline_steps` losses is the baseline; a loss above
`explosion_factor` x baseline for `explosion_patience` consecutive steps afterwards stops the run. The default
factor 10 is far above the noise of SFT losses (a batch of long targets against one of short ones differs by well
under 3x), while a diverging model's cross-entropy climbs to the uniform-guess value ln(vocab) ~ 12 nats and past
it (a confident wrong model), i.e. 10x and more of a fine-tuning loss of ~1.
"""
from __future__ import annotations

import math
import statistics

import lightning as L
import torch


class TrainingStopped(RuntimeError):
    """Training stopped on a fault of the run itself (the message names the step); nothing is exported."""


def explosion_threshold(baseline_losses: list[float], factor: float) -> float:
    """The loss above which a step counts as exploded: `factor` x the median of the baseline losses."""
    return factor * statistics.median(baseline_losses)


class LossGuard(L.Callback):
    def __init__(self, explosion_factor: float | None = 10.0, baseline_steps: int = 3, explosion_patience: int = 3):
        """
        Args:
            explosion_factor: stop when the loss exceeds this many times the median of the first `baseline_steps`
                losses for `explosion_patience` consecutive steps; null turns the explosion check off (a
                non-finite loss always stops the run).
            baseline_steps: how many first losses (micro-batches) make the baseline median.
            explosion_patience: consecutive exploded losses that stop the run (one bad batch does not).
        """
        if explosion_factor is not None and not explosion_factor > 1:
            raise ValueError(f"explosion_factor must be > 1 or null, got {explosion_factor}")
        if baseline_steps < 1 or explosion_patience < 1:
            raise ValueError("baseline_steps and explosion_patience must be at least 1")
        self.explosion_factor, self.baseline_steps = explosion_factor, baseline_steps
        self.explosion_patience = explosion_patience
        self.baseline: list[float] = []
        self.exploded = 0
        self._batch = (0, 0)

    def state_dict(self) -> dict:
        return {"baseline": self.baseline, "exploded": self.exploded}

    def load_state_dict(self, state_dict: dict) -> None:   # a resumed run keeps the first steps' baseline
        self.baseline, self.exploded = list(state_dict["baseline"]), int(state_dict["exploded"])

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
        limit = explosion_threshold(self.baseline, self.explosion_factor)
        self.exploded = self.exploded + 1 if loss > limit else 0
        if self.exploded >= self.explosion_patience:
            return (f"the loss exploded: {loss:.4g} > {self.explosion_factor:g} x the first {len(self.baseline)} "
                    f"losses' median {statistics.median(self.baseline):.4g} for {self.exploded} steps "
                    f"(turn off with --loss_guard.explosion_factor null)")
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
