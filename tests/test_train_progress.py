"""Progress lines for logs: their fields by hand, when they are due, and the terminal bar without v_num."""
from types import SimpleNamespace

from cader.train.progress import ProgressLog, clock, progress_line, terminal_bar


def test_progress_line_fields():
    line = progress_line(40, 930, 2.34561, 1.2e-4, 2.0, 17.9)
    assert line == ("train step 40/930 (4.3%) | loss 2.3456 | lr 1.20e-04 | 2 steps/s | elapsed 0:00:17 | "
                    "ETA 0:07:25")   # (930 - 40) / 2 = 445 s
    assert progress_line(1, None, None, None, None, 0.0) == "train step 1 | loss ? | ? steps/s | elapsed 0:00:00"
    assert clock(3 * 3600 + 61.9) == "3:01:01" and clock(float("inf")) == "?"


class FakeTrainer(SimpleNamespace):
    pass


def test_lines_come_every_n_steps_plus_the_first_two_and_the_last(monkeypatch, capsys):
    from cader.train import progress

    monkeypatch.setattr(progress, "stdout_is_terminal", lambda: False)
    now = [0.0]
    monkeypatch.setattr(progress.time, "perf_counter", lambda: now[0])
    log = ProgressLog(every_n_steps=4, every_seconds=1e9)
    optimizer = SimpleNamespace(param_groups=[{"lr": 0.5}])
    trainer = FakeTrainer(global_step=0, optimizers=[optimizer], max_steps=10, estimated_stepping_batches=10,
                          global_rank=0)
    log.on_train_start(trainer, SimpleNamespace())
    for step in range(1, 11):
        for micro in range(2):          # two micro-batches per optimizer step (accumulation)
            trainer.global_step = step if micro else step - 1 if step > 1 else 0
            now[0] += 1.0
            log.on_train_batch_end(trainer, None, {"loss": float(step)}, None, 2 * step + micro)
    steps = [int(line.split()[2].split("/")[0]) for line in log.printed]
    assert steps == [1, 2, 4, 8, 10]
    # the mean loss of the four micro-batches since step 8: 9, 9, 10, 10
    assert log.printed[-1].startswith("train step 10/10 (100.0%) | loss 9.5000 | lr 5.00e-01")
    assert "v_num" not in capsys.readouterr().out


def test_terminal_bar_drops_v_num():
    bar = terminal_bar()
    base = type(bar).__mro__[1]
    module = SimpleNamespace()
    trainer = SimpleNamespace()
    original = base.get_metrics
    try:
        base.get_metrics = lambda self, t, m: {"v_num": 0, "train_loss": 1.0}
        assert bar.get_metrics(trainer, module) == {"train_loss": 1.0}
    finally:
        base.get_metrics = original
