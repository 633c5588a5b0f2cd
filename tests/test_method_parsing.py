"""Robust parsing of proposals (C.2) and final answers (C.4)."""

import math

import pytest
from cader.evaluate.method.parsing import parse_time, parse_window, split_thinking
from hypothesis import given, settings
from hypothesis import strategies as st

LETTERS = ["A", "B", "C", "D"]


@pytest.mark.parametrize(
    "text, expected, how",
    [
        ('"relevant_windows": [["2100", "2130"]]', (2100.0, 2130.0), "keyed"),
        ('{"relevant_windows": [[2300, 2330]]}', (2300.0, 2330.0), "keyed"),
        ('Sure!\n```json\n{"relevant_windows": [[12.5, 40]]}\n```\nHope it helps', (12.5, 40.0), "keyed"),
        (
            "<think>maybe [1, 2]?</think>\n\"relevant_windows\": [['30s', '45 seconds']]",
            (30.0, 45.0),
            "keyed",
        ),
        ('"relevant_windows": [["2:10", "02:40"]]', (130.0, 160.0), "keyed"),
        ("The evidence is at [100, 160].", (100.0, 160.0), "bracket"),
        ("It happens from 1:00 to 1:30 in the clip.", (60.0, 90.0), "prose"),
    ],
)
def test_window_formats(text, expected, how):
    parsed = parse_window(text, 3600.0)
    assert parsed.window == expected
    assert parsed.how == how
    assert not parsed.swapped and not parsed.clipped


def test_window_reversed_and_out_of_range():
    p = parse_window('"relevant_windows": [["300", "200"]]', 3600)
    assert p.window == (200.0, 300.0) and p.swapped
    p = parse_window('"relevant_windows": [[-5, 20]]', 100)
    assert p.window == (0.0, 20.0) and p.clipped and p.raw == (-5.0, 20.0)
    p = parse_window('"relevant_windows": [[90, 150]]', 100)
    assert p.window == (90.0, 100.0) and p.clipped
    p = parse_window('"relevant_windows": [[500, 600]]', 100)  # wholly beyond the end -> a point at the end
    assert p.window == (100.0, 100.0) and p.clipped


def test_window_thinking_prefers_answer_part_but_falls_back_to_whole_text():
    p = parse_window('<think>try [1, 2]</think>"relevant_windows": [[10, 20]]', 100)
    assert p.window == (10.0, 20.0)
    p = parse_window("<think>the window is [40, 55]</think> I cannot tell.", 100)
    assert p.window == (40.0, 55.0)


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "I do not know where the evidence is.",
        '"relevant_windows": [["<start_seconds>", "<end_seconds>"]]',  # the echoed template
        '"relevant_windows": [[NaN, 20]]',
        '"relevant_windows": [["abc", "def"]]',
    ],
)
def test_window_unparseable(text):
    p = parse_window(text, 100)
    assert p.window is None and p.reason


def test_window_invalid_duration():
    assert parse_window("[1, 2]", 0.0).reason.startswith("invalid_duration")
    assert parse_window("[1, 2]", math.nan).window is None


def test_parse_time():
    assert parse_time("130") == 130.0
    assert parse_time("01:02:03.5") == 3723.5
    assert math.isnan(parse_time("x:y"))


def test_split_thinking():
    assert split_thinking("<think>a</think>b") == ("<think>a", "b")
    assert split_thinking("plain") == ("", "plain")


@pytest.mark.parametrize(
    "text, expected, how, n_windows",
    [
        # units: minutes and hours are converted; a bare number takes its partner's unit
        ("It happens from 2 to 3 minutes into the video.", (120.0, 180.0), "prose", 1),
        ('"relevant_windows": [["1.5 min", "2 min"]]', (90.0, 120.0), "keyed", 1),
        ("[1, 2 h]", (3600.0, 7200.0), "bracket", 1),
        ('"relevant_windows": [["1:00", "90s"]]', (60.0, 90.0), "keyed", 1),
        # the last keyed list wins (an echoed template or a draft comes first); its first window is used
        (
            'Format: "relevant_windows": [["<start_seconds>", "<end_seconds>"]]\n"relevant_windows": [[5, 15]]',
            (5.0, 15.0),
            "keyed",
            1,
        ),
        ('"relevant_windows": [[10, 20]] no wait "relevant_windows": [[30, 45]]', (30.0, 45.0), "keyed", 1),
        ('"relevant_windows": [[10, 20], [30, 40]]', (10.0, 20.0), "keyed", 2),
        ('{"relevant_window": [12, 40]}', (12.0, 40.0), "keyed", 1),
        # the same bare window written twice is still one window
        ("[100, 160], i.e. [100, 160]", (100.0, 160.0), "bracket", 1),
    ],
)
def test_window_units_last_keyed_and_counts(text, expected, how, n_windows):
    parsed = parse_window(text, 10_000.0)
    assert (parsed.window, parsed.how, parsed.n_windows) == (expected, how, n_windows)
    assert parsed.to_dict()["n_windows"] == n_windows


@pytest.mark.parametrize(
    "text, reason",
    [
        ("Tried [2100, 2130] already, so now [2300, 2330].", "ambiguous_bracket_windows:2"),
        ("either from 10 to 20 or from 30 to 40", "ambiguous_prose_windows:2"),
        # the answer part is ambiguous: the thinking text is not consulted
        ("<think>[40, 55]</think> [1, 2] or [3, 4]", "ambiguous_bracket_windows:2"),
    ],
)
def test_window_ambiguous_prose_gives_none(text, reason):
    parsed = parse_window(text, 3600.0)
    assert parsed.window is None and parsed.reason == reason


# (template, takes clock times): a clock time carries its own scale, so it is not combined with a unit
FORMATS = [
    ('"relevant_windows": [["{s}", "{e}"]]', True),
    ('```json\n{{"relevant_windows": [[{s}, {e}]]}}\n```', True),
    ("\"relevant_windows\": [['{s}s', '{e} seconds']]", False),
    ("The evidence is at [{s}, {e}].", True),
    ("It happens from {s} to {e} seconds.", False),
    ("between {s}s and {e}s", False),
]


def clock(t: int) -> str:
    return f"{t // 60}:{t % 60:02d}"


@settings(max_examples=200, deadline=None)
@given(
    start=st.integers(0, 7000),
    width=st.integers(0, 600),
    form=st.sampled_from(FORMATS),
    thinking=st.sampled_from(["", "<think>maybe [1, 2] or [5, 9]?</think>", "<think>from 3 to 4</think>\n"]),
    use_clock=st.booleans(),
)
def test_generated_windows_parse_to_their_numbers(start, width, form, thinking, use_clock):
    end = start + width
    template, takes_clock = form
    write = clock if use_clock and takes_clock else str
    reply = thinking + template.format(s=write(start), e=write(end))
    parsed = parse_window(reply, 8000.0)
    assert parsed.window == (float(start), float(end)), reply
    assert not parsed.swapped and not parsed.clipped


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=200), duration=st.floats(0.5, 1e5))
def test_any_text_gives_a_window_inside_the_video_or_a_reason(text, duration):
    parsed = parse_window(text, duration)
    if parsed.window is None:
        assert parsed.reason
    else:
        lo, hi = parsed.window
        assert 0.0 <= lo <= hi <= duration and parsed.reason is None


def test_split_thinking_at_the_last_closing_tag():
    assert split_thinking("<think>a</think>b</think>c") == ("<think>a</think>b", "c")
