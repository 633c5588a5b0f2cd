"""Label mask against the tiny model's real chat template, budget vs the processor's real token count, batching."""
import json
import random

import pytest
import torch
from cader.train.budget import BudgetConfig
from cader.train.collate import IGNORE_INDEX, LengthGroupedBatchSampler, SampleEncoder, SkipSample, pad_batch
from cader.train.formats import Sample, read_source
from cader.vlm.loading import load_processor


@pytest.fixture(scope="module")
def sft_data(tmp_path_factory):
    from cader.dev.synthetic.dataset import Counts, Timeline, make_synthetic_data

    out = tmp_path_factory.mktemp("sft_data")
    # 32 s training videos: the budget checks below read a plan of a few timestamps (the default is 128 s)
    make_synthetic_data(out, counts=Counts(n_train=8, n_images=4, n_tool=1, n_eval=1, n_heldout=1),
                        timeline=Timeline(train_duration=32))
    return out / "train"


@pytest.fixture(scope="module")
def encoder(tiny_model_dir):
    return SampleEncoder(load_processor(str(tiny_model_dir)), BudgetConfig(max_length=2048))


def _samples(train_dir, fmt="longvt", name="longvt_sft.parquet"):
    """Tool-free single-video/image samples of one file."""
    out = []
    for s in read_source(fmt, train_dir / name):
        if isinstance(s, Sample) and sum(m["type"] == "video" for m in s.media) <= 1 and not any(
                t.role == "tool" or "<tool" in t.text for t in s.turns):
            out.append(s)
    return out


def test_labelled_span_is_exactly_target_plus_end_token(sft_data, encoder):
    tok = encoder.tokenizer
    checked = 0
    for fmt, name in [("longvt", "longvt_sft.parquet"), ("video_r1", "video_r1_cot.json"),
                      ("sharegpt", "sharegpt_conversations.json")]:
        for sample in _samples(sft_data, fmt, name)[:3]:
            if any(t.role == "tool" or "<tool" in t.text for t in sample.turns):
                continue
            item = encoder.encode(encoder.plan(sample, sft_data))
            mask = item["labels"] != IGNORE_INDEX
            # one contiguous span at the end of the sequence
            idx = mask.nonzero().flatten()
            assert idx[-1] == len(mask) - 1 and len(idx) == idx[-1] - idx[0] + 1
            assert tok.decode(item["input_ids"][mask]) == sample.turns[-1].text + "<|im_end|>"
            assert torch.equal(item["labels"][mask], item["input_ids"][mask])
            checked += 1
    assert checked >= 6


def test_budget_matches_processor_token_count(sft_data, encoder):
    for sample in _samples(sft_data)[:6]:
        planned = encoder.plan(sample, sft_data)
        actual = len(encoder.encode(planned)["input_ids"])
        # the plan is an upper bound (timestamp digits measured at their widest), never far from the truth
        assert actual <= planned.num_tokens <= actual + 16


def test_frame_reduction_keeps_the_whole_target(sft_data, tiny_model_dir):
    sample = next(s for s in _samples(sft_data) if s.media and s.media[0]["type"] == "video")
    wide = SampleEncoder(load_processor(str(tiny_model_dir)), BudgetConfig(max_length=2048))
    planned_wide = wide.plan(sample, sft_data)
    tight_len = planned_wide.num_tokens - 40
    tight = SampleEncoder(wide.processor, BudgetConfig(max_length=tight_len, min_frames=2))
    planned = tight.plan(sample, sft_data)
    assert planned.plan.video_frames[0] < planned_wide.plan.video_frames[0]
    item = tight.encode(planned)
    assert len(item["input_ids"]) <= tight_len
    mask = item["labels"] != IGNORE_INDEX
    assert tight.tokenizer.decode(item["input_ids"][mask]) == sample.turns[-1].text + "<|im_end|>"


def test_truncation_cuts_only_the_target_end(sft_data, encoder, tiny_model_dir):
    # a CoT row (a direct-answer row's target is shorter than the cut)
    sample = next(s for s in _samples(sft_data)
                  if s.media and s.media[0]["type"] == "video" and "</think><answer>" in s.turns[-1].text)
    full = encoder.encode(encoder.plan(sample, sft_data))
    start = int((full["labels"] != IGNORE_INDEX).nonzero()[0])
    # room for the prompt with all its vision tokens and 40 target tokens; min_frames pins the frames
    n_frames = encoder.plan(sample, sft_data).plan.video_frames[0]
    cut = SampleEncoder(encoder.processor, BudgetConfig(max_length=start + 40, min_frames=n_frames,
                                                        min_pixels=10**9, min_target_tokens=10))
    item = cut.encode(cut.plan(sample, sft_data))
    assert len(item["input_ids"]) == start + 40
    assert torch.equal(item["input_ids"], full["input_ids"][: start + 40])   # vision block intact
    assert (item["labels"] != IGNORE_INDEX).sum() == 40


def test_missing_media_and_over_budget_are_skips(sft_data, encoder, tmp_path):
    sample = _samples(sft_data)[0]
    with pytest.raises(SkipSample) as err:
        encoder.plan(sample, tmp_path)
    assert err.value.reason == "missing_media" and sample.sample_id in str(err.value)
    tiny = SampleEncoder(encoder.processor, BudgetConfig(max_length=30))
    with pytest.raises(SkipSample) as err:
        tiny.plan(sample, sft_data)
    assert err.value.reason == "over_budget"
    bad = tmp_path / "media" / "videos"
    bad.mkdir(parents=True)
    (bad / "x.mp4").write_bytes(b"not a video")
    rows = [{"messages": json.dumps([{"role": "user", "content": [
        {"type": "video_url", "video_url": {"url": "media/videos/x.mp4"}}, {"type": "text", "text": "q"}]},
        {"role": "assistant", "content": "<answer>A</answer>"}])}]
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "bad.parquet")
    (corrupt,) = read_source("longvt", tmp_path / "bad.parquet")
    with pytest.raises(SkipSample) as err:
        encoder.plan(corrupt, tmp_path)
    assert err.value.reason == "bad_video"
    (bad / "y.jpg").write_bytes(b"not an image")
    rows = [{"messages": json.dumps([{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "media/videos/y.jpg"}}, {"type": "text", "text": "q"}]},
        {"role": "assistant", "content": "<answer>A</answer>"}])}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "bad_image.parquet")
    (corrupt,) = read_source("longvt", tmp_path / "bad_image.parquet")
    with pytest.raises(SkipSample) as err:
        encoder.plan(corrupt, tmp_path)
    assert err.value.reason == "bad_image" and "y.jpg" in str(err.value)


def test_pad_batch_shapes_and_values():
    a = {"input_ids": torch.tensor([5, 6, 7]), "labels": torch.tensor([-100, 6, 7]),
         "attention_mask": torch.ones(3, dtype=torch.long), "pixel_values": torch.ones(4, 2),
         "image_grid_thw": torch.tensor([[1, 2, 2]])}
    b = {"input_ids": torch.tensor([8]), "labels": torch.tensor([8]), "attention_mask": torch.ones(1, dtype=torch.long)}
    batch = pad_batch([a, b], pad_id=0)
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, 0, 0]]
    assert batch["labels"].tolist() == [[-100, 6, 7], [8, -100, -100]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    assert batch["pixel_values"].shape == (4, 2) and "pixel_values_videos" not in batch


def _padding(batches, lengths):
    total = sum(max(lengths[i] for i in b) * len(b) for b in batches)
    return 1 - sum(lengths[i] for b in batches for i in b) / total


def test_length_grouping_lowers_padding_and_shards_evenly():
    rng = random.Random(0)
    lengths = [rng.randint(100, 4000) for _ in range(1000)]
    grouped = LengthGroupedBatchSampler(lengths, batch_size=8, seed=1, mega=32)
    batches = grouped.all_batches()
    assert sorted(i for b in batches for i in b) == list(range(1000))
    order = list(range(1000))
    rng.shuffle(order)
    random_batches = [order[i:i + 8] for i in range(0, 1000, 8)]
    assert _padding(batches, lengths) < 0.05 < _padding(random_batches, lengths)
    shards = [list(LengthGroupedBatchSampler(lengths, 8, seed=1, rank=r, world_size=3)) for r in range(3)]
    assert len({len(s) for s in shards}) == 1 and len(shards[0]) == len(LengthGroupedBatchSampler(lengths, 8,
                                                                                                 world_size=3))
    resumed = LengthGroupedBatchSampler(lengths, 8, seed=1)
    resumed.skip = 5
    assert list(resumed) == batches[5:]
    assert list(resumed) == batches          # skip applies once


def test_direct_answer_rows_put_the_letter_where_stage1_reads_it(sft_data, encoder):
    """A direct-answer row's labels start with the empty think block Stage 1 pre-fills, then the letter: the prompt
    tokens before the letter are exactly Stage 1's thinking-off prompt (cader.vlm.messages.render)."""
    from cader.evaluate.backends.base import template_check
    from cader.train.collate import chat_messages
    from cader.vlm.messages import render

    tok = encoder.tokenizer
    direct = [s for s in _samples(sft_data) if s.turns[-1].text.startswith("<think>\n\n</think>")]
    assert direct
    for sample in direct:
        messages = chat_messages(sample)
        # as a backend renders Stage 1: the empty think block comes from the template or, without the switch, from us
        stage1_text = render(encoder.processor, messages[:-1], enable_thinking=False,
                             prefill_think=template_check(encoder.processor).prefill_think)
        _, full = encoder.texts(sample)
        letter = sample.turns[-1].text[-1]
        assert letter in "ABCDEF" and full == stage1_text + letter + "<|im_end|>"
        ids = tok(full, add_special_tokens=False)["input_ids"]
        assert ids[: len(tok(stage1_text, add_special_tokens=False)["input_ids"])] == tok(
            stage1_text, add_special_tokens=False)["input_ids"]
        assert tok.decode(ids[-2:]) == letter + "<|im_end|>"


def test_every_assistant_turn_of_a_multi_turn_row_is_labelled(encoder, tmp_path):
    """A two-turn LLaMA-Factory row: both assistant answers (and their <|im_end|>) carry labels, nothing else does."""
    import json

    from cader.train.formats import read_source

    row = {"messages": [{"role": "user", "content": "First question?"}, {"role": "assistant", "content": "First answer."},
                        {"role": "user", "content": "Second question?"}, {"role": "assistant", "content": "Second answer."}]}
    path = tmp_path / "two_turns.json"
    path.write_text(json.dumps([row]))
    (sample,) = [s for s in read_source("sharegpt", path)]
    out = encoder.encode(encoder.plan(sample, tmp_path))
    labelled = out["labels"] != -100
    tok = encoder.tokenizer
    pieces, current = [], []
    for token, keep in zip(out["input_ids"].tolist(), labelled.tolist()):
        if keep:
            current.append(token)
        elif current:
            pieces.append(tok.decode(current))
            current = []
    if current:
        pieces.append(tok.decode(current))
    assert pieces == ["First answer.<|im_end|>", "Second answer.<|im_end|>"]


def test_one_pad_batch_pads_right_for_training_and_left_for_scoring():
    from cader.vlm.batch import pad_batch as pad_either_side

    short = {"input_ids": torch.tensor([[5, 6]]), "attention_mask": torch.tensor([[1, 1]]),
             "pixel_values_videos": torch.ones(4, 3), "video_grid_thw": torch.tensor([[1, 2, 2]])}
    long = {"input_ids": torch.tensor([[7, 8, 9]]), "attention_mask": torch.tensor([[1, 1, 1]])}
    pads = {"input_ids": 0, "attention_mask": 0}
    left = pad_either_side([short, long], pads, side="left")
    right = pad_either_side([short, long], pads, side="right")
    assert left["input_ids"].tolist() == [[0, 5, 6], [7, 8, 9]] and left["attention_mask"].tolist()[0] == [0, 1, 1]
    assert right["input_ids"].tolist() == [[5, 6, 0], [7, 8, 9]]
    assert left["pixel_values_videos"].shape == (4, 3) and left["video_grid_thw"].tolist() == [[1, 2, 2]]
