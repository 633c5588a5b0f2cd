"""Robust parsing of proposals (C.2) and final answers (C.4)."""

import math

import pytest
from cader.evaluate.method.parsing import parse_answer, parse_time, parse_window, split_thinking

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
    "text, letter, how",
    [
        ("<answer>C</answer>", "C", "answer_tag"),
        ("<think>A or B? I pick <answer>A</answer></think>Final: <answer>(B)</answer>", "B", "answer_tag"),
        ("<answer>c</answer>", "C", "answer_tag"),
        ("<answer>B. the red car</answer>", "B", "answer_tag"),
        ("D", "D", "bare_letter"),
        ("(B).", "B", "bare_letter"),
        ("After watching, the answer is C because ...", "C", "answer_is"),
        ("I think B. the dog is right", "B", "option_marker"),
        ("A man walks; option C fits", "C", "last_letter"),
    ],
)
def test_answer_formats(text, letter, how):
    p = parse_answer(text, LETTERS)
    assert (p.letter, p.how) == (letter, how)


def test_answer_restricted_to_valid_letters():
    assert parse_answer("<answer>E</answer>", LETTERS).letter is None
    assert parse_answer("<answer>E</answer> so B", LETTERS).letter == "B"
    assert parse_answer("Z", LETTERS).letter is None
    assert parse_answer("Z", [chr(ord("A") + i) for i in range(26)]).letter == "Z"
    none = parse_answer("no idea at all", LETTERS)
    assert none.letter is None and none.reason == "no_valid_letter"
    assert parse_answer("", LETTERS).reason == "empty_output"


def test_answer_thinking_truncated_searches_whole_text():
    # a closed think block with nothing after it: fall back to the thinking text
    assert parse_answer("<think>it must be <answer>D</answer></think>", LETTERS).letter == "D"


def test_parsers_are_deterministic():
    text = "x A y B z <answer>C</answer> [3, 9]"
    assert {parse_answer(text, LETTERS) for _ in range(5)} == {parse_answer(text, LETTERS)}
    assert {parse_window(text, 50) for _ in range(5)} == {parse_window(text, 50)}
