"""Faults that must stop training or be counted: non-finite and exploding losses, an empty mix, a video that
fails to decode inside a DataLoader worker."""
import json
import math
from pathlib import Path

import pytest
from cader.train.guards import (
    GuardRule,
    GuardState,
    LossGuard,
    TrainingStopped,
    judge_loss,
    reference_loss,
)
from test_train_threads import run_sft, tiny_fit_config

REPO = Path(__file__).resolve().parents[1]


def first_stop(losses: list[float], rule: GuardRule) -> tuple[int, str] | None:
    """The index of the first loss of `losses` that stops training and why (None: the whole sequence passes)."""
    state = GuardState()
    for index, loss in enumerate(losses):
        state, reason = judge_loss(state, loss, rule)
        if reason is not None:
            return index, reason
    return None


@pytest.fixture(scope="module")
def train_dir(tmp_path_factory):
    from cader.dev.synthetic.dataset import Counts, make_synthetic_data

    out = tmp_path_factory.mktemp("faults_train")
    make_synthetic_data(out, counts=Counts(n_train=8, n_images=2, n_tool=1, n_eval=1, n_heldout=1))
    return out / "train"


def test_explosion_threshold_is_factor_times_the_median():
    assert 10 * reference_loss([1.0, 3.0, 2.0], 0.0) == 20.0
    assert 4 * reference_loss([2.0, 100.0, 2.5], 0.0) == 10.0   # one bad first step does not move the median


def test_non_finite_losses_stop_at_once_even_in_the_baseline():
    for bad in (math.nan, math.inf, -math.inf):
        assert "not finite" in LossGuard().verdict(bad)


def test_explosion_needs_patience_consecutive_steps_over_the_threshold():
    guard = LossGuard(explosion_factor=10, baseline_steps=3, explosion_patience=3)
    assert [guard.verdict(x) for x in (2.0, 1.0, 3.0)] == [None] * 3     # baseline median 2 -> limit 20
    assert guard.verdict(25.0) is None and guard.verdict(30.0) is None
    assert guard.verdict(19.0) is None                                  # back under: the count restarts
    assert guard.verdict(21.0) is None and guard.verdict(22.0) is None
    reason = guard.verdict(500.0)
    assert reason and "exploded" in reason and "500" in reason and "median 2" in reason


def test_a_baseline_below_the_uniform_guess_loss_is_raised_to_it():
    assert 10 * reference_loss([0.05, 0.06, 0.07], math.log(1044)) == pytest.approx(10 * math.log(1044))
    assert 10 * reference_loss([20.0, 30.0, 40.0], 6.95) == 300.0


def test_the_miniatures_healthy_start_runs_on_and_its_lr_1000_divergence_stops():
    # the first losses of the miniature's SFT (cot_mix_tiny.yaml on the pre-trained tiny model), measured: the first
    # batch is one the model knows, the second is not; with lr 1000 the third step diverges
    # (a run stopped by the rule without the floor: first 5 losses' median 0.0298, then 8.38 for 3 steps)
    floor = math.log(1044)
    healthy_start = (0.0618, 10.93, 0.021, 0.0298, 0.035, 8.381, 7.9, 8.1, 3.0, 0.9, 0.4)
    healthy = LossGuard(baseline_steps=5, loss_floor=floor)
    assert all(healthy.verdict(x) is None for x in healthy_start)
    unfloored = LossGuard(baseline_steps=5, loss_floor=0.0)
    assert any(unfloored.verdict(x) for x in healthy_start)
    divergent = LossGuard(baseline_steps=3, loss_floor=floor)
    verdicts = [divergent.verdict(x) for x in (0.0618, 10.93, 9.1e5, 4.9e6, 1.7e7, 3.4e7, 4.3e6)]
    assert verdicts[:2] == [None] * 2 and "exploded" in verdicts[2] and "uniform-guess loss 6.951" in verdicts[2]


# hand-made loss sequences: (losses, rule, index of the loss that stops training or None)
FLOOR = math.log(1044)
SEQUENCES = [
    # the --model.lr 1000 run that exported: the explosion starts inside the 3-step baseline window and lasts fewer
    # steps than the patience, then the model collapses to a constant loss
    ((6.56, 3.1e6, 2.0e7, 6.52, 6.52, 6.52), GuardRule(loss_floor=FLOOR), 1),
    # the same at the very first step (no loss yet, only the floor to compare with)
    ((5e5, 6.5, 6.5), GuardRule(loss_floor=FLOOR), 0),
    # measured on the tiny random model, lr 1000, max_steps 4: warm-up gives two equal losses, then divergence
    ((6.5583, 6.5588, 1.8438e7, 1.1632e7), GuardRule(loss_floor=FLOOR), 2),
    # a moderate explosion (between 10x and 100x) inside the baseline window: it never joins the baseline, so the
    # patience counts it and stops the third
    ((6.5, 80.0, 90.0, 95.0), GuardRule(loss_floor=FLOOR), 3),
    # one bad batch between healthy ones: patience, no stop
    ((6.5, 6.4, 80.0, 6.3, 6.2, 6.1), GuardRule(loss_floor=FLOOR), None),
    # without a floor the first loss is the baseline, checked from the second on
    ((2.0, 1000.0), GuardRule(loss_floor=0.0), 1),
    ((2.0, 19.0, 21.0, 2.5), GuardRule(loss_floor=0.0), None),
    # null explosion_factor: only the finite check
    ((6.5, 1e9, 1e9, 1e9), GuardRule(explosion_factor=None, loss_floor=FLOOR), None),
    ((6.5, 1e9, float("nan")), GuardRule(explosion_factor=None, loss_floor=FLOOR), 2),
    # runaway_factor null: only the patient check (the old rule without its baseline hole)
    ((6.56, 3.1e6, 2.0e7, 6.52), GuardRule(runaway_factor=None, loss_floor=FLOOR), None),
    ((6.56, 3.1e6, 2.0e7, 2.1e7), GuardRule(runaway_factor=None, loss_floor=FLOOR), 3),
]


@pytest.mark.parametrize("losses,rule,stop", SEQUENCES)
def test_hand_made_loss_sequences_stop_where_they_must(losses, rule, stop):
    found = first_stop(list(losses), rule)
    assert (found[0] if found else None) == stop, found


def test_an_exploded_loss_never_joins_the_baseline():
    state = GuardState()
    for loss in (6.5, 80.0, 6.4):
        state, _ = judge_loss(state, loss, GuardRule(loss_floor=FLOOR))
    assert state.baseline == (6.5, 6.4) and state.exploded == 0
    assert reference_loss((), FLOOR) == FLOOR and reference_loss((), 0.0) is None
    assert reference_loss((20.0, 30.0), FLOOR) == 25.0


def test_the_runaway_message_names_the_loss_and_the_reference():
    _, reason = judge_loss(GuardState((6.56,), 0), 3.1e6, GuardRule(loss_floor=FLOOR))
    assert "exploded" in reason and "3.1e+06" in reason and "100 x" in reason and "6.951" in reason
    with pytest.raises(ValueError, match="runaway_factor"):
        LossGuard(explosion_factor=10, runaway_factor=5)


def test_the_floor_is_ln_vocab_of_the_model_being_trained(tiny_model_dir):
    from types import SimpleNamespace

    from cader.train.guards import uniform_guess_loss
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(tiny_model_dir)
    vocab = config.get_text_config().vocab_size
    assert uniform_guess_loss(SimpleNamespace(model=SimpleNamespace(config=config))) == pytest.approx(math.log(vocab))
    assert uniform_guess_loss(SimpleNamespace()) is None


def test_the_explosion_check_can_be_turned_off_but_not_the_finite_check():
    guard = LossGuard(explosion_factor=None, baseline_steps=1)
    assert guard.verdict(1.0) is None
    assert all(guard.verdict(1e9) is None for _ in range(10))
    assert "not finite" in guard.verdict(math.nan)
    with pytest.raises(ValueError, match="explosion_factor"):
        LossGuard(explosion_factor=0.5)


def test_the_baseline_survives_a_resume():
    guard = LossGuard(baseline_steps=2)
    guard.verdict(1.0), guard.verdict(1.5)
    resumed = LossGuard(baseline_steps=2)
    resumed.load_state_dict(guard.state_dict())
    assert resumed.baseline == [1.0, 1.5] and TrainingStopped.__mro__[1] is RuntimeError


def test_print_config_shows_the_guard_and_progress_settings(capsys):
    import yaml
    from cader.train.cli import make_cli

    with pytest.raises(SystemExit):
        make_cli(["--config", "cot_mix_tiny.yaml", "--loss_guard.explosion_factor", "null", "--print_config"])
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["loss_guard"] == {"explosion_factor": None, "baseline_steps": 3, "explosion_patience": 3,
                                     "loss_floor": None, "runaway_factor": 100.0}
    assert printed["progress_log"]["when"] == "auto" and "num_threads" in printed


def test_an_empty_mix_is_an_error_not_a_base_model_export(tiny_model_dir, train_dir, tmp_path, capsys):
    import importlib

    sft = importlib.import_module("cader.train.sft")
    config = tiny_fit_config(tmp_path, tiny_model_dir, train_dir)
    assert sft.main(["--config", str(config), "--data.sources", "[]"]) == 2
    assert "no sources" in capsys.readouterr().err
    assert not (tmp_path / "export").exists()
    assert sft.main(["--config", str(config), "--data.sources", "[]", "--plan_only", "true"]) == 2


def test_a_video_failing_in_a_worker_is_counted_and_not_replaced_by_a_neighbour(tiny_model_dir, tmp_path):
    from cader.dev.synthetic.dataset import Counts, make_synthetic_data
    from cader.train.datamodule import SFTDataModule, Source

    make_synthetic_data(tmp_path / "data", counts=Counts(n_train=8, n_images=2, n_tool=1, n_eval=1,
                                                         n_heldout=1))
    train = tmp_path / "data" / "train"
    rows = json.loads((train / "video_r1_cot.json").read_text())
    victim = next(r for r in rows if r["data_type"] == "video"
                  and sum(x["path"] == r["path"] for x in rows) == 1)   # a video no other row uses
    dm = SFTDataModule([Source("video_r1", "video_r1", str(train / "video_r1_cot.json"))],
                       processor_path=str(tiny_model_dir), batch_size=8, num_workers=1, max_length=1024,
                       report_dir=str(tmp_path / "run"), plan_cache_dir=str(tmp_path / "cache"))
    dm.setup("fit")
    planned = len(dm.items)
    (train / victim["path"]).write_bytes(b"this is no longer a video")   # planned fine, fails to decode
    batches = [dm.on_before_batch_transfer(b, 0) for b in dm.train_dataloader()]   # a worker process encodes
    assert len(batches) == 1 and batches[0]["input_ids"].shape[0] == planned - 1   # no duplicate refill
    report = json.loads((tmp_path / "run" / "data_report.json").read_text())
    entry = report["sources"]["video_r1"]
    assert report["decode_failed"] == 1 and sum(entry["decode_failed"].values()) == 1
    [ids] = entry["decode_failed_ids"].values()
    assert ids[0].startswith(f"video_r1:{victim['problem_id']}: ") and victim["path"].lstrip("./") in ids[0]
    assert report["sources"]["video_r1"]["train_samples"] == planned and "provenance" in report


@pytest.mark.slow
@pytest.mark.parametrize("lr,max_steps,why", [("1e30", 9, "not finite"),
                                              # 6.56, 6.56, 1.8e7, 1.2e7: the explosion starts inside the first rule's
                                              # 3-step baseline and the run ends before its patience: it exported
                                              ("1000", 4, "at step 3 (epoch 0, batch 2): the loss exploded")])
def test_a_nan_or_divergent_run_stops_naming_the_step_and_exports_nothing(tiny_model_dir, train_dir, tmp_path,
                                                                           lr, max_steps, why):
    config = tiny_fit_config(tmp_path, tiny_model_dir, train_dir, max_steps=max_steps, epochs=3)
    done = run_sft(config, "--model.lr", lr)
    assert done.returncode == 3, done.stderr[-2000:]
    message = [line for line in done.stderr.splitlines() if line.startswith("sft: ")]
    assert len(message) == 1 and "training stopped at step" in message[0] and why in message[0]
    assert not (tmp_path / "export").exists()


def test_under_a_trainer_the_worker_failure_reaches_the_report(tiny_model_dir, tmp_path):
    import lightning as L
    from cader.dev.synthetic.dataset import Counts, make_synthetic_data
    from cader.train.datamodule import SFTDataModule, Source
    from cader.train.module import SFTModule

    make_synthetic_data(tmp_path / "data", counts=Counts(n_train=8, n_images=2, n_tool=1, n_eval=1,
                                                         n_heldout=1))
    train = tmp_path / "data" / "train"
    rows = json.loads((train / "video_r1_cot.json").read_text())
    victim = next(r for r in rows if r["data_type"] == "video" and sum(x["path"] == r["path"] for x in rows) == 1)
    dm = SFTDataModule([Source("video_r1", "video_r1", str(train / "video_r1_cot.json"))],
                       processor_path=str(tiny_model_dir), batch_size=8, num_workers=1, max_length=1024,
                       plan_cache_dir=str(tmp_path / "cache"))
    dm.setup("fit")          # planned from the intact file; the trainer's setup keeps this plan
    (train / victim["path"]).write_bytes(b"no video here")
    seen = []

    stale = tmp_path / "run" / "decode_failures" / "rank3.json"     # left by an earlier, wider run
    stale.parent.mkdir(parents=True)
    stale.write_text(json.dumps([{"source": "video_r1", "sample_id": "old", "reason": "bad_media", "detail": "x"}]))

    class BatchSizes(L.Callback):
        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            seen.append(batch["input_ids"].shape[0])

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            # what another rank's data module writes when its worker fails (merged by rank 0 at the end)
            other = {"source": "video_r1", "sample_id": "video_r1:99", "reason": "bad_media", "detail": "elsewhere"}
            (tmp_path / "run" / "decode_failures" / "rank1.json").write_text(json.dumps([other]))

    trainer = L.Trainer(default_root_dir=str(tmp_path / "run"), accelerator="cpu", devices=1, max_steps=1,
                        logger=False, enable_progress_bar=False, enable_model_summary=False,
                        enable_checkpointing=False, use_distributed_sampler=False, callbacks=[BatchSizes()])
    trainer.fit(SFTModule(str(tiny_model_dir), lr=1e-3), datamodule=dm)
    assert seen == [len(dm.items) - 1]
    report = json.loads((tmp_path / "run" / "data_report.json").read_text())
    assert (tmp_path / "run" / "decode_failures" / "rank0.json").is_file() and not stale.exists()
    assert report["decode_failed"] == 2 and report["sources"]["video_r1"]["decode_failed"] == {"bad_media": 2}


def test_an_all_failed_batch_still_runs_every_module_on_a_rank_of_many(tiny_model_dir):
    from types import SimpleNamespace

    from cader.train.module import SFTModule

    module = SFTModule(str(tiny_model_dir))
    assert module.model is not None   # loaded whole, before the stand-in trainer below (it has no strategy)
    module._trainer = SimpleNamespace(world_size=1)
    assert module.training_step({}, 0) is None          # alone: nothing to train, nobody waits
    module._trainer = SimpleNamespace(world_size=2)
    loss = module.training_step({}, 0)
    assert float(loss) == 0.0 and loss.requires_grad
    loss.backward()
    # every trainable parameter, vision tower included, joined the backward: its gradient exists and is zero
    for name, param in module.model.named_parameters():
        if param.requires_grad:
            assert param.grad is not None and not param.grad.any(), name


GUARD_SCRIPT = """
import sys
from pathlib import Path

import lightning as L
from cader.train.datamodule import SFTDataModule, Source
from cader.train.guards import LossGuard, TrainingStopped
from cader.train.module import SFTModule
from cader.train.strategies import CPUDeepSpeedStrategy

model_dir, data_file, root = sys.argv[1:4]


class RankOneFails(LossGuard):   # only rank 1 sees a bad loss, at its second step
    def verdict(self, loss):
        if self.rank == 1 and self.calls == 1:
            return "the loss is nan (not finite)"
        self.calls += 1
        return None

    def on_train_start(self, trainer, module):
        self.rank, self.calls = trainer.global_rank, 0


dm = SFTDataModule([Source("mix", "sharegpt", data_file)], processor_path=model_dir, batch_size=1,
                   max_length=1024, report_dir=root)
trainer = L.Trainer(default_root_dir=root, accelerator="cpu", devices=1, num_nodes=2,
                    strategy=CPUDeepSpeedStrategy("zero2"), precision="32-true", max_steps=4, max_epochs=4,
                    logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, use_distributed_sampler=False, callbacks=[RankOneFails()])
try:
    trainer.fit(SFTModule(model_dir, lr=1e-3), datamodule=dm)
except TrainingStopped as err:
    Path(root, f"stopped{trainer.global_rank}.txt").write_text(str(err))
    sys.exit(3)
"""


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_bad_loss_on_one_rank_stops_every_rank_without_a_hang(tiny_model_dir, tmp_path):
    import subprocess
    import sys

    pytest.importorskip("deepspeed")
    from test_train_zero3_multiprocess import _clean_environ, _free_port, _write_mix

    data, script, root = _write_mix(tmp_path), tmp_path / "guard.py", tmp_path / "run"
    script.write_text(GUARD_SCRIPT)
    root.mkdir()
    for _ in range(3):  # a free port can be taken before node 0 binds it: retry
        port = str(_free_port())
        procs = [subprocess.Popen([sys.executable, str(script), str(tiny_model_dir), str(data), str(root)],
                                  cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  env={**_clean_environ(), "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1",
                                       "TOKENIZERS_PARALLELISM": "false", "MASTER_ADDR": "127.0.0.1",
                                       "MASTER_PORT": port, "NODE_RANK": str(node)})
                 for node in (0, 1)]
        outs = [p.communicate(timeout=240) for p in procs]
        if not any("EADDRINUSE" in err for _, err in outs):
            break
    assert [p.returncode for p in procs] == [3, 3], outs[0][1][-3000:]
    messages = [(root / f"stopped{r}.txt").read_text() for r in (0, 1)]
    assert "at step 2" in messages[1] and "not finite" in messages[1]
    assert "at step 2" in messages[0] and "another rank" in messages[0]


def test_a_failure_log_forgets_what_a_resume_fetches_again():
    from cader.train.decode_failures import DecodeFailure, DecodeFailureLog, seen_before

    log = DecodeFailureLog()
    log.add([{"source": "s", "sample_id": "a", "reason": "bad_media", "detail": "x"}], epoch=0, batch=3)
    log.add([DecodeFailure("s", "b", "bad_media", "y")], epoch=1, batch=0)
    log.add([DecodeFailure("s", "c", "bad_media", "z", epoch=0, batch=5)], epoch=2, batch=9)  # keeps its own tag
    log.add([{"source": "s", "sample_id": "old", "reason": "bad_media", "detail": "w"}])       # untagged
    assert [(f.epoch, f.batch) for f in log.failures] == [(0, 3), (1, 0), (0, 5), (None, None)]
    # a checkpoint after 4 batches of epoch 0: batch 3 of epoch 0 was trained; batch 5 and epoch 1 come again
    assert seen_before(log.failures[0], 0, 4) and not seen_before(log.failures[2], 0, 4)
    assert not seen_before(log.failures[0], 0, 3) and seen_before(log.failures[1], 1, 1)
    assert log.keep_seen_before(0, 4) == 2
    assert [f.sample_id for f in log.failures] == ["a", "old"]


@pytest.mark.slow
def test_a_resumed_fit_counts_a_failure_after_its_checkpoint_once(tiny_model_dir, tmp_path):
    import lightning as L
    from cader.dev.synthetic.dataset import Counts, make_synthetic_data
    from cader.train.collate import LengthGroupedBatchSampler
    from cader.train.datamodule import SFTDataModule, Source
    from cader.train.module import SFTModule
    from lightning.pytorch.callbacks import ModelCheckpoint

    make_synthetic_data(tmp_path / "data", counts=Counts(n_train=8, n_images=2, n_tool=1, n_eval=1,
                                                         n_heldout=1))
    train = tmp_path / "data" / "train"
    rows = json.loads((train / "video_r1_cot.json").read_text())

    def data_module():
        dm = SFTDataModule([Source("video_r1", "video_r1", str(train / "video_r1_cot.json"))],
                           processor_path=str(tiny_model_dir), batch_size=1, max_length=1024,
                           report_dir=str(tmp_path / "run"), plan_cache_dir=str(tmp_path / "cache"))
        dm.setup("fit")
        return dm

    dm, resumed_dm = data_module(), data_module()   # both planned before the video breaks, as the first fit was
    order = [batch[0] for batch in LengthGroupedBatchSampler(dm.lengths, 1, seed=dm.seed, mega=dm.mega_batch)]
    paths = [r["path"] for r in rows]

    def only_video(index):   # the item's video path, when no other row uses that video
        media = dm.items[index].sample.media
        path = media[0]["path"] if media and media[0]["type"] == "video" else None
        return path if path is not None and sum(p.lstrip("./") == path.lstrip("./") for p in paths) == 1 else None

    failing_batch = next(b for b in range(2, len(order)) if only_video(order[b]))   # after the step-1 checkpoint
    (Path(dm.items[order[failing_batch]].media_root) / only_video(order[failing_batch])).write_bytes(b"not a video")

    def fit(module_dm, ckpt_path=None):
        trainer = L.Trainer(default_root_dir=str(tmp_path / "run"), accelerator="cpu", devices=1,
                            max_steps=len(order), logger=False, enable_progress_bar=False,
                            enable_model_summary=False, use_distributed_sampler=False,
                            callbacks=[ModelCheckpoint(dirpath=tmp_path / "ckpt", every_n_train_steps=1,
                                                       save_top_k=-1, filename="{step}")])
        trainer.fit(SFTModule(str(tiny_model_dir), lr=1e-3), datamodule=module_dm, ckpt_path=ckpt_path)

    def counted():
        report = json.loads((tmp_path / "run" / "data_report.json").read_text())
        logged = json.loads((tmp_path / "run" / "decode_failures" / "rank0.json").read_text())
        return report["decode_failed"], [(f["epoch"], f["batch"]) for f in logged]

    fit(dm)
    assert counted() == (1, [(0, failing_batch)])
    # the run stopped after its last step; resume it from step 1: the failing batch is fetched and fails again
    fit(resumed_dm, ckpt_path=str(tmp_path / "ckpt" / "step=1.ckpt"))
    assert counted() == (1, [(0, failing_batch)])   # once: the run as trained, not every attempt
