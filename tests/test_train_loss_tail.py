"""The SFT loss at the labelled positions only (cader.train.loss, SFTModule.sft_loss): the same number as
transformers' loss over all positions (golden: today's `model(**batch).loss`, computed here), with LoRA too, and a
tail whose size follows the labelled positions, not the sequence."""
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from cader.train.loss import IGNORE_INDEX, labelled_loss, labelled_rows, next_token_labels
from cader.train.module import SFTModule
from cader.train.pixels import normalize_pixels


def test_each_position_predicts_the_next_label():
    labels = torch.tensor([[5, 6, -100, 7], [-100, 8, 9, -100]])
    assert next_token_labels(labels).tolist() == [[6, -100, 7, -100], [8, 9, -100, -100]]
    hidden = torch.arange(8.0).reshape(2, 4, 1)
    rows, targets = labelled_rows(hidden, labels)
    # (0,0)->6, (0,2)->7, (1,0)->8, (1,1)->9
    assert rows.flatten().tolist() == [0.0, 2.0, 4.0, 5.0] and targets.tolist() == [6, 7, 8, 9]


def test_the_loss_is_the_mean_over_labelled_tokens_by_hand():
    # one labelled position, two words, logits [0, log 3] -> p(word 1) = 3/4
    head = torch.nn.Linear(1, 2, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.tensor([[0.0], [torch.log(torch.tensor(3.0))]]))
    hidden = torch.tensor([[[1.0], [1.0], [1.0]]])
    labels = torch.tensor([[IGNORE_INDEX, 1, IGNORE_INDEX]])
    assert labelled_loss(hidden, labels, head).item() == pytest.approx(-torch.log(torch.tensor(0.75)).item())
    # two labelled positions: the mean of their losses (-log 3/4 and -log 1/4)
    labels = torch.tensor([[IGNORE_INDEX, 1, 0]])
    want = -(torch.log(torch.tensor(0.75)) + torch.log(torch.tensor(0.25))).item() / 2
    assert labelled_loss(hidden, labels, head).item() == pytest.approx(want)


def _batch(tiny_model_dir, tmp_path, n: int = 2):
    """A right-padded batch of `n` synthetic video samples, as training builds it (each sample after the first a few
    target tokens shorter, so the batch carries padding)."""
    from cader.dev.synthetic.dataset import Counts, make_synthetic_data
    from cader.train.collate import pad_batch
    from cader.train.datamodule import PlannedDataset, SFTDataModule, Source

    make_synthetic_data(tmp_path / "data", counts=Counts(n_train=8, n_images=2, n_tool=1, n_eval=1,
                                                         n_heldout=1))
    src = Source("video_r1", "video_r1", str(tmp_path / "data" / "train" / "video_r1_cot.json"))
    dm = SFTDataModule([src], processor_path=str(tiny_model_dir), batch_size=n, max_length=1024,
                       report_dir=str(tmp_path), plan_cache_dir=None, plan_workers=1)
    dm.setup()
    dataset = PlannedDataset(dm.items, dm.encoder)
    items = []
    for k in range(n):
        item = dict(dataset[k])
        for key in ("input_ids", "labels", "attention_mask", "mm_token_type_ids"):
            item[key] = item[key][: len(item[key]) - 5 * k]
        items.append(item)
    return normalize_pixels(pad_batch(items, dm.encoder.pad_id))   # the uint8 pixels as model inputs


def _compare(module, batch):
    """(today's loss: all positions, transformers' loss; the new one), and their gradients."""
    params = [p for p in module.model.parameters() if p.requires_grad]
    old = module.model(**batch).loss
    old_grads = torch.autograd.grad(old, params, allow_unused=True)
    new = module.sft_loss(batch)
    new_grads = torch.autograd.grad(new, params, allow_unused=True)
    return old, new, old_grads, new_grads


@pytest.mark.parametrize("lora_r", [0, 4])
def test_same_loss_and_gradients_as_transformers_all_positions(tiny_model_dir, tmp_path, lora_r):
    torch.manual_seed(0)
    batch = _batch(tiny_model_dir, tmp_path)
    assert (batch["attention_mask"] == 0).any(), "the batch must carry padding"
    assert (batch["labels"] == IGNORE_INDEX).float().mean() > 0.5, "most positions carry no label"
    module = SFTModule(str(tiny_model_dir), lora_r=lora_r)
    if lora_r:   # lora_B starts at zero: move the adapters, so the LoRA branch takes part in the number
        with torch.no_grad():
            for name, p in module.model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.05)
    old, new, old_grads, new_grads = _compare(module, batch)
    assert new.dtype == torch.float32 and abs(new.item() - old.item()) <= 1e-6 * max(1.0, abs(old.item()))
    for a, b in zip(old_grads, new_grads):
        if a is None:
            assert b is None or not b.any()
        else:
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-7)


class _RowsSeen:
    def __init__(self, head):
        self.rows = []
        head.register_forward_hook(lambda mod, args, out: self.rows.append(args[0].reshape(-1, args[0].shape[-1]).shape[0]))


def test_training_step_runs_lm_head_on_the_labelled_positions_only(tiny_model_dir, tmp_path):
    batch = _batch(tiny_model_dir, tmp_path)
    module = SFTModule(str(tiny_model_dir))
    seen = _RowsSeen(module.model.lm_head)
    stub = SimpleNamespace(world_size=1, log_every_n_steps=10**9, global_step=0, train_dataloader=None)
    module._trainer = stub
    module.log = module.log_dict = lambda *args, **kwargs: None
    loss = module.training_step(batch, 0)
    labelled = int((next_token_labels(batch["labels"]) != IGNORE_INDEX).sum())
    assert seen.rows == [labelled] and labelled < batch["input_ids"].numel() // 2
    assert torch.isfinite(loss)


def _saved_bytes(loss_fn, weight: torch.Tensor) -> int:
    """Bytes of activations autograd keeps for backward while `loss_fn()` runs (what its peak memory grows with;
    the `weight` it saves too is not counted: it exists anyway). The forward alone: tensors are saved as it runs."""
    total = 0

    def pack(t):
        nonlocal total
        if t.untyped_storage().data_ptr() != weight.untyped_storage().data_ptr():
            total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss_fn()
    return total


def test_at_real_width_the_tail_grows_with_labelled_positions_not_all(monkeypatch):
    """hidden 4096 (Qwen3-VL-8B), a reduced vocabulary (the property does not depend on it). float32: a CPU without
    bf16 matrix units (AVX2) takes minutes over bf16 GEMMs of this size, and what autograd saves grows the same way
    in either precision (bf16 only halves every term)."""
    from transformers.loss.loss_utils import ForCausalLMLoss

    hidden_size, vocab = 4096, 2048
    torch.manual_seed(0)
    head = torch.nn.Linear(hidden_size, vocab, bias=False)

    def tail(length: int, labelled: int, all_positions: bool):
        hidden = torch.randn(1, length, hidden_size, requires_grad=True)
        labels = torch.full((1, length), IGNORE_INDEX)
        labels[0, -labelled:] = torch.randint(0, vocab, (labelled,))
        if all_positions:   # today's path: lm_head everywhere, then transformers' loss
            return lambda: ForCausalLMLoss(head(hidden), labels, vocab)
        return lambda: labelled_loss(hidden, labels, head)

    def saved(*args):
        return _saved_bytes(tail(*args), head.weight)

    new_short, new_long, new_more_labels = saved(512, 64, False), saved(2048, 64, False), saved(512, 256, False)
    old_short, old_long = saved(512, 64, True), saved(2048, 64, True)
    assert new_long <= 1.05 * new_short            # four times the positions, the same labelled ones
    assert new_more_labels >= 3 * new_short         # four times the labelled positions
    assert old_long >= 3 * old_short                # today's grows with all positions
    assert new_long * 10 < old_long


def test_the_all_positions_option_is_transformers_loss_bit_for_bit(tiny_model_dir, tmp_path):
    # the tiny recipes keep it: the miniature's training is chaotic, and its measured numbers were made with it
    batch = _batch(tiny_model_dir, tmp_path)
    module = SFTModule(str(tiny_model_dir), loss_positions="all")
    assert torch.equal(module.sft_loss(batch), module.model(**batch).loss)
    rows = _RowsSeen(module._lm_head())
    module.sft_loss(batch)
    assert rows.rows == [batch["input_ids"].numel()]  # lm_head over every position


def test_the_tiny_recipes_train_with_the_paper_recipes_loss():
    import yaml

    # the miniature trains as the product does; the all-positions loss is one factor of its robustness grid
    # (scripts/miniature_seeds.py), not its recipe
    for name in ("cot_mix_tiny.yaml", "pretrain_tiny.yaml"):
        config = yaml.safe_load((Path(__file__).parents[1] / "configs" / "train" / name).read_text())
        assert config["model"].get("loss_positions", "labelled") == "labelled", name
    paper = yaml.safe_load((Path(__file__).parents[1] / "configs" / "train" / "cot_mix.yaml").read_text())
    assert paper["model"].get("loss_positions", "labelled") == "labelled"
