"""Pixels cross the DataLoader worker boundary as uint8 (cader.train.pixels) and become the same fp32 model inputs
as the processor's own normalisation, bit for bit."""
import pytest
import torch
from cader.train.pixels import PIXEL_NORMS, PixelNorm, normalize_patches, normalize_pixels


def test_normalisation_by_hand():
    # two channels, each row channel-major: [c0 c0 c1 c1]
    patches = torch.tensor([[0, 255, 51, 102]], dtype=torch.uint8)
    norm = PixelNorm(mean=(0.5, 0.0), std=(0.5, 1.0), rescale_factor=1 / 255)
    out = normalize_patches(patches, norm)
    assert out.dtype == torch.float32
    assert out[0].tolist() == pytest.approx([-1.0, 1.0, 0.2, 0.4], abs=1e-7)


def test_uint8_pixels_without_their_normalisation_are_refused():
    batch = {"pixel_values_videos": torch.zeros(4, 6, dtype=torch.uint8)}
    with pytest.raises(ValueError, match="pixel_values_videos"):
        normalize_pixels(batch)
    fp32 = {"pixel_values": torch.zeros(2, 3)}
    assert normalize_pixels(fp32)["pixel_values"] is fp32["pixel_values"]   # already model inputs


@pytest.fixture(scope="module")
def mix(tiny_model_dir, tmp_path_factory):
    from cader.dev.synthetic.dataset import Counts, Timeline, make_synthetic_data
    from cader.train.datamodule import SFTDataModule, Source

    out = tmp_path_factory.mktemp("pixels")
    make_synthetic_data(out, counts=Counts(n_train=8, n_images=4, n_tool=1, n_eval=1, n_heldout=1),
                        timeline=Timeline(train_duration=32))
    sources = [Source("longvt", "longvt", str(out / "train" / "longvt_sft.parquet"))]
    dm = SFTDataModule(sources, processor_path=str(tiny_model_dir), batch_size=2, max_length=2048,
                       report_dir=str(out), plan_cache_dir=None, plan_workers=1, num_workers=1)
    dm.setup()
    return dm


def _module(tiny_model_dir, precision_plugin=None):
    """An SFTModule (weights not loaded) in a stub trainer with this precision plugin."""
    from types import SimpleNamespace

    from cader.train.module import SFTModule

    module = SFTModule(str(tiny_model_dir))
    if precision_plugin is not None:
        module._trainer = SimpleNamespace(precision_plugin=precision_plugin)
    return module


@pytest.mark.slow
def test_workers_hand_over_uint8_and_the_model_gets_todays_fp32_inputs(mix, tiny_model_dir):
    from cader.train.collate import SampleEncoder, pad_batch
    from cader.train.datamodule import PlannedDataset

    module = _module(tiny_model_dir)
    fp32_encoder = SampleEncoder(mix.encoder.processor, mix.budget)   # today's worker output
    sampler_batches = mix.train_dataloader().batch_sampler.all_batches()
    seen = set()
    for indices, batch in zip(sampler_batches, mix.train_dataloader()):   # through a worker process
        today = pad_batch([PlannedDataset(mix.items, fp32_encoder)[i] for i in indices], fp32_encoder.pad_id)
        inputs = module.model_inputs(batch)
        assert PIXEL_NORMS not in inputs and inputs.keys() == today.keys()
        for key in ("pixel_values_videos", "pixel_values"):
            if key in batch:
                seen.add(key)
                assert batch[key].dtype == torch.uint8 and today[key].dtype == torch.float32
                assert batch[key].element_size() * 4 == today[key].element_size()
                assert torch.equal(inputs[key], today[key]), key
        for key in today:
            if key not in ("pixel_values_videos", "pixel_values"):
                assert torch.equal(inputs[key], today[key]), key
    assert seen == {"pixel_values_videos", "pixel_values"}, "the mix must hold videos and images"


@pytest.mark.slow
def test_under_bf16_true_the_model_gets_the_bf16_of_todays_pixels(mix, tiny_model_dir):
    from cader.train.collate import SampleEncoder
    from lightning.pytorch.plugins.precision import HalfPrecision

    fp32_encoder = SampleEncoder(mix.encoder.processor, mix.budget)
    item = next(i for i in mix.items if any(m["type"] == "video" for m in i.sample.media))
    new, today = mix.encoder.encode(item), fp32_encoder.encode(item)
    plugin = HalfPrecision("bf16-true")
    inputs = _module(tiny_model_dir, plugin).model_inputs(new)
    # what Lightning's convert_input made of today's fp32 pixels before they reached the model
    assert torch.equal(inputs["pixel_values_videos"], plugin.convert_input(today)["pixel_values_videos"])
    assert inputs["pixel_values_videos"].dtype == torch.bfloat16
