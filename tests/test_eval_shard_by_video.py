"""Shards hold whole videos, balanced by duration: longest processing time first, hand-computed."""

import pytest
from cader.evaluate.benchmarks.base import Sample
from cader.evaluate.shards import balance, select_samples, shard_videos, video_weights


def _sample(i, video, duration=60.0):
    return Sample("bench", f"s{i}", video, f"q{i}", ["a", "b"], ["A", "B"], "A", duration, {})


@pytest.mark.parametrize(
    ("weights", "n", "ranks"),
    [
        # 5 -> r0 (5|0); 4 -> r1 (5|4); 3 -> r1 (5|7); 3 -> r0 (8|7); 3 -> r1 (8|10)
        ([5, 4, 3, 3, 3], 2, [0, 1, 1, 0, 1]),
        # 7, 5, 4 one each; 3 -> r2 (7|5|7); 1 -> r1 (7|6|7)
        ([7, 5, 4, 3, 1], 3, [0, 1, 2, 2, 1]),
        # given in any order: heaviest first (the 9 at the end goes first, to r0)
        ([1, 2, 9], 2, [1, 1, 0]),
        # equal weights: earlier item first, equal loads: lower rank
        ([1, 1, 1, 1], 2, [0, 1, 0, 1]),
        # more ranks than items: the last ranks stay empty
        ([2, 1], 4, [0, 1]),
        ([], 3, []),
    ],
)
def test_balance_is_longest_processing_time_first(weights, n, ranks):
    assert balance(weights, n) == ranks


def test_balance_beats_round_robin_and_refuses_no_ranks():
    weights = [6, 5, 4, 3, 2, 2]  # round robin by item: 6+4+2 = 12 against 5+3+2 = 10
    ranks = balance(weights, 2)
    loads = [sum(w for w, r in zip(weights, ranks) if r == k) for k in range(2)]
    assert loads == [11, 11]
    with pytest.raises(ValueError):
        balance([1.0], 0)


def test_video_weights_sum_durations_and_fall_back_to_counts():
    samples = [_sample(0, "a", 100.0), _sample(1, "b", 30.0), _sample(2, "a", 100.0), _sample(3, "c", None)]
    # c states no duration: it counts the median of the stated ones (100, 30, 100 -> 100)
    assert video_weights(samples) == {"a": 200.0, "b": 30.0, "c": 100.0}
    unknown = [_sample(0, "a", None), _sample(1, "b", float("nan")), _sample(2, "a", 0)]
    assert video_weights(unknown) == {"a": 2.0, "b": 1.0}  # none stated: question counts


def test_shards_hold_whole_videos_balanced_by_duration():
    # a long video with 3 questions (3 x 1800 s), then short ones: b 2 x 600, c 3 x 300, d 1 x 300
    spec = [("a", 1800.0)] * 3 + [("b", 600.0)] * 2 + [("c", 300.0)] * 3 + [("d", 300.0)]
    order = [0, 3, 5, 1, 6, 8, 4, 2, 7]  # interleaved in the benchmark
    samples = [_sample(i, *spec[k]) for i, k in enumerate(order)]
    # weights a 5400, b 1200, c 900, d 300 -> a r0; b r1; c r1 (2100); d r1 (2400)
    assert shard_videos(samples, 2) == {"a": 0, "b": 1, "c": 1, "d": 1}
    shards = [select_samples(samples, shard=(i, 2)) for i in range(2)]
    assert {s.video for s in shards[0]} == {"a"} and {s.video for s in shards[1]} == {"b", "c", "d"}
    # a partition in benchmark order, each video on one shard
    assert sorted(s.sample_id for shard in shards for s in shard) == sorted(s.sample_id for s in samples)
    for shard in shards:
        assert [s.sample_id for s in shard] == [s.sample_id for s in samples if s in shard]
    assert select_samples(samples, shard=(1, 2)) == shards[1]  # deterministic


def test_limit_first_then_shards_of_what_is_left():
    samples = [_sample(i, v) for i, v in enumerate("aabbc")]
    # the first 3: a 120 s, b 60 s -> two shards of one video each
    assert [s.sample_id for s in select_samples(samples, limit=3, shard=(0, 2))] == ["s0", "s1"]
    assert [s.sample_id for s in select_samples(samples, limit=3, shard=(1, 2))] == ["s2"]
    assert select_samples(samples, limit=3, shard=(2, 3)) == []  # more shards than videos: an empty one
    assert [s.sample_id for s in select_samples(samples, limit=2)] == ["s0", "s1"]
