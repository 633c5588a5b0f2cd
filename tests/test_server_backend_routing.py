"""The server backend's pure parts, by hand: routing (affinity, least work, capacity, back-off, retries' choice of
another replica), the integer frame grid of a variable-rate video, the server's logprob answer, the refusal's flag,
the fleet's command and core split. No server here (tests/test_server_backend_real.py has the real ones)."""

import numpy as np
import pytest
from cader.dev.vllm_fleet import SERVER_FLAGS, core_split, server_command
from cader.evaluate.backends.base import BackendError, Prompt
from cader.evaluate.backends.routing import ReplicaState, Router, backoff_delay, least_work, request_work
from cader.evaluate.backends.server import (
    REQUIRED_FLAGS,
    UnsendableVideo,
    affinity_key,
    content_key,
    frame_time_texts,
    id_logprobs,
    missing_flag,
    server_video_metadata,
)
from cader.vlm.video import Frames


def test_backoff_doubles_from_the_base_up_to_the_cap():
    assert [backoff_delay(f, 1.0, 5.0) for f in range(5)] == [0.0, 1.0, 2.0, 4.0, 5.0]
    assert backoff_delay(3, 0.5, 30.0) == 2.0


def test_request_work_counts_frames_images_and_tokens():
    assert request_work(0, 0, 1) == 1.0 + 1 / 16
    assert request_work(8, 2, 32) == 1.0 + 8 + 2 + 2.0


def test_least_work_breaks_ties_by_requests_then_index_and_skips_down_or_excluded():
    states = [ReplicaState(work=3.0, requests=1), ReplicaState(work=3.0, requests=0), ReplicaState(work=1.0)]
    assert least_work(states, now=0.0) == 2
    assert least_work(states, now=0.0, exclude={2}) == 1
    states[1].down_until = 10.0
    assert least_work(states, now=5.0, exclude={2}) == 0
    assert least_work(states, now=5.0, exclude={0, 2}) is None


def test_a_key_stays_on_its_replica_and_new_keys_go_to_the_least_busy():
    router = Router(2, capacity=4)
    assert router.pick("video-a", 0.0) == 0
    router.start(0, 5.0)
    assert router.pick("video-b", 0.0) == 1          # replica 0 has work in flight
    router.start(1, 1.0)
    assert router.pick("video-a", 0.0) == 0          # affinity beats load
    router.start(0, 5.0)
    assert router.pick("video-c", 0.0) == 1          # 10 vs 1 in flight
    router.finish(0, 5.0, ok=True, now=0.0)
    router.finish(0, 5.0, ok=True, now=0.0)
    assert router.states[0].work == 0.0 and router.states[0].requests == 0
    assert router.counts() == [{"sent": 2, "failed": 0}, {"sent": 1, "failed": 0}]


def test_a_full_replica_makes_its_keys_wait_rather_than_spill():
    router = Router(2, capacity=1)
    assert router.pick("a", 0.0) == 0
    router.start(0, 1.0)
    assert router.pick("a", 0.0) is None             # its replica is full: wait (its caches are there)
    assert router.pick("b", 0.0) == 1
    router.finish(0, 1.0, ok=True, now=0.0)
    assert router.pick("a", 0.0) == 0


def test_a_failed_replica_backs_off_and_its_keys_move():
    router = Router(2, capacity=4, backoff_s=1.0, backoff_max_s=4.0)
    assert router.pick("a", 0.0) == 0
    router.start(0, 1.0)
    router.finish(0, 1.0, ok=False, now=10.0)
    assert router.states[0].down_until == 11.0 and router.states[0].failed == 1
    assert router.pick("a", 10.5, exclude={0}) == 1  # the retry goes elsewhere, and the key moves there
    assert router.home["a"] == 1
    router.start(1, 1.0)
    router.finish(1, 1.0, ok=True, now=10.6)
    assert router.pick("a", 12.0) == 1               # stays on its new replica once the old one is back
    # consecutive failures double the back-off up to the cap; a success clears them
    for now in (20.0, 30.0, 40.0, 50.0):
        router.start(0, 1.0)
        router.finish(0, 1.0, ok=False, now=now)
    assert router.states[0].failures == 5 and router.states[0].down_until == 54.0
    assert router.next_up(52.0) == 0.0               # replica 1 is up
    router.start(0, 1.0)
    router.finish(0, 1.0, ok=True, now=60.0)
    assert router.states[0].failures == 0


def test_every_replica_down_means_wait_until_the_first_is_back():
    router = Router(2, capacity=2, backoff_s=2.0)
    for i in (0, 1):
        router.start(i, 1.0)
        router.finish(i, 1.0, ok=False, now=0.0)
    assert router.pick("a", 1.0) is None and router.next_up(1.0) == 1.0
    assert router.pick("a", 2.0, exclude={0, 1}) == 0  # all failed this request: retry one that is back


def test_router_refuses_nonsense_sizes():
    with pytest.raises(ValueError):
        Router(0, capacity=1)
    with pytest.raises(ValueError):
        Router(1, capacity=0)


def test_frame_time_texts_average_each_temporal_pair():
    # frames at indices 0, 3, 6 of a 3 fps video: pairs (0, 1 s) -> 0.5, (2 s, 2 s padded) -> 2.0
    assert frame_time_texts([0, 3, 6], 3.0) == ["0.5", "2.0"]


def test_constant_rate_metadata_goes_as_it_is():
    meta = {"fps": 2.0, "frames_indices": [1, 5, 9, 13], "total_num_frames": 14}
    assert server_video_metadata(meta) == meta


def test_variable_rate_positions_move_to_a_millisecond_grid_with_the_same_texts():
    times = [0.0, 0.9, 2.3, 2.8, 4.6]
    meta = {"fps": 3.0, "frames_indices": [round(t * 3.0, 6) for t in times], "total_num_frames": 14}
    # the processor's float arithmetic puts the second pair's mean (2.55 s) just above .x5: '2.6'; on the grid it
    # is just below ('2.5'), so that pair's last frame moves one millisecond
    assert frame_time_texts(meta["frames_indices"], 3.0) == ["0.5", "2.6", "4.6"]
    assert frame_time_texts([2300, 2800], 1000.0) == ["2.5"]
    out = server_video_metadata(meta)
    assert out == {"fps": 1000.0, "frames_indices": [0, 900, 2300, 2801, 4600], "total_num_frames": 4601}
    assert frame_time_texts(out["frames_indices"], 1000.0) == ["0.5", "2.6", "4.6"]


def test_a_time_no_grid_can_write_is_refused_by_name():
    # a pair whose mean is 0.25 + 1e-7 s: '0.3' from the processor, 0.25 exactly ('0.2') on a grid allowed no nudge
    meta = {"fps": 1.0, "frames_indices": [0.0, 0.5000002], "total_num_frames": 1}
    assert frame_time_texts(meta["frames_indices"], 1.0) == ["0.3"]
    with pytest.raises(UnsendableVideo, match="^vfr_timestamps"):
        server_video_metadata(meta, max_nudge=0)
    assert server_video_metadata(meta)["frames_indices"] == [0, 501]


def test_affinity_key_is_the_frames_not_the_question():
    rng = np.random.default_rng(0)
    frames = Frames(rng.integers(0, 255, (4, 32, 32, 3), dtype=np.uint8), np.arange(4.0), np.arange(4), 1.0)
    other = Frames(frames.frames.copy(), np.arange(4.0), np.arange(4), 1.0)
    other.frames[3, 0, 0, 0] ^= 1
    a, b = Prompt("question 1", video=frames), Prompt("question 2", system="s", video=frames)
    assert affinity_key(a) == affinity_key(b) != affinity_key(Prompt("question 1", video=other))
    assert affinity_key(Prompt("x")) != affinity_key(Prompt("y"))
    # frames that name their video file route by it, so a question's crops (other frames) follow their video
    frames.source, other.source = "videos/a.mp4", "videos/a.mp4"
    assert affinity_key(a) == affinity_key(Prompt("q", video=other)) == "video:videos/a.mp4"
    assert content_key(a) != content_key(Prompt("q", video=other))


def test_logprobs_are_read_by_token_id_and_an_empty_answer_is_an_error():
    choice = {"logprobs": {"content": [{"token": "token_id:7", "logprob": -0.1, "top_logprobs": [
        {"token": "token_id:7", "logprob": -0.1}, {"token": "token_id:42", "logprob": -31.5},
        {"token": "Yes", "logprob": -2.0}]}]}}
    assert id_logprobs(choice) == {7: -0.1, 42: -31.5}
    with pytest.raises(BackendError):
        id_logprobs({"logprobs": None})


@pytest.mark.parametrize("message, flag", [
    ("Chat template is passed with request, but --trust-request-chat-template is not set.",
     "--trust-request-chat-template"),
    ("Per-request media_io_kwargs are disabled by default ... --trust-request-mm-kwargs", "--trust-request-mm-kwargs"),
    ("Requested 26 logprob_token_ids, greater than max allowed: 20. Set max_logprobs (--max-logprobs) to at least 26",
     "--max-logprobs 32"),
    ("something else entirely", None),
])
def test_a_refused_probe_names_the_server_flag(message, flag):
    assert missing_flag(message) == flag
    assert flag is None or flag in REQUIRED_FLAGS


def test_fleet_splits_cores_and_starts_servers_with_the_flags():
    assert core_split(2, 1) == ["0-1"] and core_split(2, 2) == ["0", "1"] and core_split(8, 3) == ["0-1", "2-4", "5-7"]
    assert core_split(1, 2) == ["0", "0"]
    cmd = server_command("m", 8100, python="py")
    assert cmd[:3] == ["py", "-m", "vllm.entrypoints.openai.api_server"] and "127.0.0.1" in cmd
    assert all(flag in cmd for flag in SERVER_FLAGS)
    dropped = server_command("m", 8100, python="py", drop_flags=("--max-logprobs",))
    assert "--max-logprobs" not in dropped and "32" not in dropped and "--trust-request-mm-kwargs" in dropped
