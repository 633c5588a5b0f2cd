"""Progress of a fit in plain lines, for logs (nohup, SLURM, CI), and a terminal bar without `v_num`.

Lightning's rich bar redraws one terminal line: written to a file it shows nothing until the fit ends, and its
`v_num` (the logger's version, shown as `v_num: 0.000`) means nothing to a reader. When stdout is not a terminal,
sft.py turns the bar off and `ProgressLog` prints one line every `every_n_steps` optimizer steps or `every_seconds`
seconds, whichever comes first, plus the first and the last step:

    train step 40/930 (4.3%) | loss 2.3456 | lr 1.20e-04 | 2.41 steps/s | elapsed 0:00:17 | ETA 0:06:09
"""
from __future__ import annotations

import datetime
import math
import sys
import time
from typing import Literal

import lightning as L
from lightning.pytorch.callbacks import RichProgressBar, TQDMProgressBar
from lightning.pytorch.utilities import rank_zero_only


def stdout_is_terminal() -> bool:
    return bool(getattr(sys.stdout, "isatty", lambda: False)())


def clock(seconds: float) -> str:
    """H:MM:SS of a duration (rounded down to the second); '?' when unknown."""
    if not math.isfinite(seconds) or seconds < 0:
        return "?"
    return str(datetime.timedelta(seconds=int(seconds)))


def progress_line(step: int, total: int | None, loss: float | None, lr: float | None, rate: float | None,
                  elapsed: float) -> str:
    """One progress line: step/total, mean loss since the last line, lr, optimizer steps per second, ETA."""
    parts = [f"train step {step}/{total} ({100 * step / total:.1f}%)" if total else f"train step {step}"]
    parts.append(f"loss {loss:.4f}" if loss is not None else "loss ?")
    if lr is not None:
        parts.append(f"lr {lr:.2e}")
    parts.append(f"{rate:.3g} steps/s" if rate else "? steps/s")
    parts.append(f"elapsed {clock(elapsed)}")
    if total:
        parts.append(f"ETA {clock((total - step) / rate) if rate else '?'}")
    return " | ".join(parts)


class ProgressLog(L.Callback):
    def __init__(self, when: Literal["auto", "always", "never"] = "auto", every_n_steps: int = 50,
                 every_seconds: float = 30.0):
        """
        Args:
            when: "auto" prints lines only when stdout is not a terminal (a log file; there sft.py also turns
                Lightning's bar off), "always" prints them beside the bar, "never" leaves only the bar.
            every_n_steps: a line at least every this many optimizer steps.
            every_seconds: a line at least every this many seconds (the first that comes wins).
        """
        self.when, self.every_n_steps, self.every_seconds = when, max(1, every_n_steps), every_seconds
        self.printed: list[str] = []
        self._reset()

    def _reset(self) -> None:
        self._start = self._last_print = self._seen_step = None
        self._start_step, self._lines, self._losses = 0, 0, []

    def enabled(self) -> bool:
        return self.when == "always" or (self.when == "auto" and not stdout_is_terminal())

    def total_steps(self, trainer, pl_module) -> int | None:
        count = getattr(pl_module, "_total_optimizer_steps", None)
        try:
            total = count() if callable(count) else trainer.estimated_stepping_batches
        except (AttributeError, TypeError, RuntimeError):   # a module without a datamodule that can tell
            total = trainer.max_steps
        return int(total) if total and math.isfinite(total) and total > 0 else None

    def on_train_start(self, trainer, pl_module):
        self._reset()
        self._total = self.total_steps(trainer, pl_module)

    @rank_zero_only
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if not self.enabled():
            return
        now = time.perf_counter()
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if loss is not None:
            self._losses.append(float(loss))
        step, previous = trainer.global_step, self._seen_step
        self._seen_step = step
        if self._start is None:   # rate and ETA count from the first batch done, past loading and warm-up costs
            self._start, self._last_print, self._start_step = now, now, step
        if step == previous or step == 0:   # inside a gradient-accumulation window: no optimizer step yet
            return
        due = (self._lines < 2 or step % self.every_n_steps == 0 or now - self._last_print >= self.every_seconds
               or (self._total and step >= self._total))
        if due:
            self._emit(trainer, step, now)

    def _emit(self, trainer, step: int, now: float) -> None:
        done = step - self._start_step
        rate = done / (now - self._start) if done > 0 and now > self._start else None
        lr = trainer.optimizers[0].param_groups[0]["lr"] if trainer.optimizers else None
        loss = sum(self._losses) / len(self._losses) if self._losses else None
        line = progress_line(step, self._total, loss, lr, rate, now - self._start)
        print(line, flush=True)
        self.printed.append(line)
        self._last_print, self._lines, self._losses = now, self._lines + 1, []

    @rank_zero_only
    def on_train_end(self, trainer, pl_module):
        if self.enabled() and self._start is not None:
            print(f"train done: {trainer.global_step} steps in {clock(time.perf_counter() - self._start)}",
                  flush=True)


def _without_version(metrics: dict) -> dict:
    metrics.pop("v_num", None)   # the logger's version number: not progress
    return metrics


class RichBarWithoutVersion(RichProgressBar):
    def get_metrics(self, trainer, pl_module):
        return _without_version(super().get_metrics(trainer, pl_module))


class TQDMBarWithoutVersion(TQDMProgressBar):
    def get_metrics(self, trainer, pl_module):
        return _without_version(super().get_metrics(trainer, pl_module))


def terminal_bar():
    """Lightning's default bar (rich when installed, else tqdm), minus `v_num`."""
    from lightning.pytorch.utilities.imports import _RICH_AVAILABLE

    return RichBarWithoutVersion() if _RICH_AVAILABLE else TQDMBarWithoutVersion()
