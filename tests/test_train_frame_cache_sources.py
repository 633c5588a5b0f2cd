"""A source can stay out of the frame cache (`Source.frame_cache: false`, cot_mix's short clips): its videos are
decoded every time, the others are read through the cache, and the fill covers only the cached sources."""
import pytest


@pytest.mark.slow
def test_a_source_left_out_of_the_frame_cache_is_decoded_and_not_filled(tiny_model_dir, tmp_path):
    from cader.dev.synthetic.dataset import Counts, Timeline, make_synthetic_data
    from cader.train.datamodule import SFTDataModule, Source

    make_synthetic_data(tmp_path / "data", counts=Counts(n_train=8, n_images=2, n_tool=1, n_eval=1,
                                                         n_heldout=1), timeline=Timeline(train_duration=32))
    train = tmp_path / "data" / "train"
    cache = tmp_path / "frames"
    dm = SFTDataModule([Source("long", "video_r1", str(train / "video_r1_cot.json")),
                        Source("clips", "video_r1", str(train / "video_r1_cot.json"), frame_cache=False)],
                       processor_path=str(tiny_model_dir), batch_size=1, max_length=1024, report_dir=str(tmp_path),
                       plan_cache_dir=None, plan_workers=1, frame_cache_dir=str(cache))
    dm.setup()
    sources = dm.items.sources
    assert set(sources.tolist()) == {0, 1}
    assert len(dm.frame_cache_items()) == int((sources == 0).sum())   # the fill's work: the cached source only

    dataset = dm.train_dataloader().dataset

    def entries() -> int:
        return len(list(cache.rglob("*.npy"))) if cache.exists() else 0

    clip = next(i for i in range(len(sources)) if sources[i] == 1)
    assert "pixel_values_videos" in dataset[clip] and entries() == 0     # decoded, nothing written
    long = next(i for i in range(len(sources)) if sources[i] == 0)
    assert "pixel_values_videos" in dataset[long] and entries() == 1     # through the cache
