"""Bad input for the benchmark loaders: malformed rows come back as BenchmarkError naming file and row."""

import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from benchmark_facts import first_rows
from cader.dev.synthetic.eval_sets import write_eval_sets
from cader.evaluate.benchmarks import BenchmarkError, UnknownBenchmarkError, load_benchmark
from cader.evaluate.benchmarks.base import RowError, answer_letter, strip_letter_prefixes
from cader.evaluate.benchmarks.lvbench import parse_time_reference, split_options
from cader.evaluate.benchmarks.mlvu import NO_MATCH


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    out = tmp_path_factory.mktemp("pristine")
    # make_synthetic_data's eval half
    write_eval_sets(out / "eval", np.random.default_rng(5), 3, 2, {"duration_range": (12, 14)})
    return out / "eval"


@pytest.fixture
def root(pristine, tmp_path):
    """A private copy per test, so corrupting files does not leak between tests."""
    shutil.copytree(pristine, tmp_path / "eval", ignore=shutil.ignore_patterns("*.mp4"))
    return tmp_path / "eval"


def _rewrite_json(path, edit):
    rows = json.loads(path.read_text())
    edit(rows)
    path.write_text(json.dumps(rows))


def _rewrite_jsonl(path, edit):
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    edit(rows)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _rewrite_parquet(path, edit):
    rows = pq.read_table(path).to_pylist()
    edit(rows)
    pq.write_table(pa.Table.from_pylist(rows), path)


def _one_error(name, root, file_part, row):
    samples, errors = load_benchmark(name, root)
    assert len(errors) == 1, errors
    error = errors[0]
    assert isinstance(error, BenchmarkError) and error.benchmark == name
    assert file_part in error.file and error.row == row
    assert file_part in str(error) and f"row {row}" in str(error)
    return samples, error


def test_videomme_answer_outside_letters(root):
    def edit(rows):
        rows[1]["answer"] = "E"

    _rewrite_parquet(root / "videomme" / "videomme" / "test-00000-of-00001.parquet", edit)
    samples, error = _one_error("videomme_long", root, "test-00000-of-00001.parquet", 1)
    assert len(samples) == 2 and "not one of the letters" in error.reason


def test_mlvu_keeps_odd_rows_as_the_official_scorer_does_and_reports_bad_json_file(root):
    files = sorted((root / "mlvu" / "MLVU" / "json").glob("[1-7]_*.json"))
    _rewrite_json(files[0], lambda rows: rows[0].update(answer="chartreuse"))
    _rewrite_json(
        files[1], lambda rows: rows[0].update(candidates=["red", "red", "blue", "red"], answer="red")
    )
    samples, errors = load_benchmark("mlvu_dev", root)
    assert errors == [] and len(samples) == 3
    missing = next(s for s in samples if s.sample_id == f"{files[0].stem}-0")
    assert missing.answer == NO_MATCH and missing.meta["answer_not_in_options"] is True
    duplicate = next(s for s in samples if s.sample_id == f"{files[1].stem}-0")
    assert duplicate.answer == "D" and duplicate.meta["duplicate_options"] is True  # the last equal candidate
    files[1].write_text("{not json")
    _, errors = load_benchmark("mlvu_dev", root)
    assert any(e.file.endswith(files[1].name) and e.row is None for e in errors)


def test_mlvu_scores_blank_question_and_option_rows_and_flags_them(root):
    files = sorted((root / "mlvu" / "MLVU" / "json").glob("[1-7]_*.json"))
    clean, _ = load_benchmark("mlvu_dev", root)
    _rewrite_json(files[0], lambda rows: rows[0].update(question="  "))
    _rewrite_json(files[1], lambda rows: rows[0].update(candidates=["red", "", "blue", " "], answer="blue"))
    samples, errors = load_benchmark("mlvu_dev", root)
    assert errors == [] and len(samples) == len(clean)  # the official denominators: no row left out
    by_id = {s.sample_id: s for s in samples}
    blank_question = by_id[f"{files[0].stem}-0"]
    assert blank_question.question == "  " and blank_question.meta["empty_question"] is True
    assert "empty_options" not in blank_question.meta
    blank_options = by_id[f"{files[1].stem}-0"]
    assert blank_options.options == ["red", "", "blue", " "] and blank_options.answer == "C"
    assert blank_options.meta["empty_options"] == ["B", "D"] and "empty_question" not in blank_options.meta
    # text that is not text at all is still a broken row, named by file and row
    _rewrite_json(files[2], lambda rows: rows[0].update(candidates=["red", None]))
    _, errors = load_benchmark("mlvu_dev", root)
    assert [(e.file.endswith(files[2].name), e.row) for e in errors] == [(True, 0)]
    assert "candidates must be a list of strings" in errors[0].reason


def test_a_non_utf8_byte_costs_its_row_named_by_file_and_line(root):
    mlvu = min((root / "mlvu" / "MLVU" / "json").glob("[1-7]_*.json"))
    clean, _ = load_benchmark("mlvu_dev", root)
    text = json.dumps(json.loads(mlvu.read_text()), indent=1).encode()
    mlvu.write_bytes(text.replace(b'"question": "', b'"question": "caf\xe9 ', 1))
    samples, errors = load_benchmark("mlvu_dev", root)
    assert len(samples) == len(clean) - 1 and len(errors) == 1
    line = text[: text.index(b'"question"')].count(b"\n") + 1
    assert errors[0].row == 0 and f"not valid UTF-8 (byte 0xe9 at line {line})" in str(errors[0])
    # JSONL releases (synthetic, AgentVidBench, LVBench, VideoEval-Pro): that line alone, by file and line
    synthetic = root / "synthetic" / "test.jsonl"
    clean, _ = load_benchmark("synthetic", root)
    lines = synthetic.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"question": "', b'"question": "\xff', 1)
    synthetic.write_bytes(b"".join(lines))
    samples, errors = load_benchmark("synthetic", root)
    assert len(samples) == len(clean) - 1 and [e.row for e in errors] == [2]
    assert "not valid UTF-8 (byte 0xff at column" in errors[0].reason and "test.jsonl" in str(errors[0])


def test_longvideobench_bad_correct_choice_and_missing_field(root):
    def edit(rows):
        rows[0]["correct_choice"] = 9
        del rows[2]["candidates"]

    _rewrite_json(root / "longvideobench" / "lvb_val.json", edit)
    samples, errors = load_benchmark("longvideobench_val", root)
    assert len(samples) == 1
    assert [(e.row, "correct_choice" in e.reason or "candidates" in e.reason) for e in errors] == [
        (0, True),
        (2, True),
    ]


def test_lvbench_bad_line_and_bad_qa(root):
    path = root / "lvbench" / "data" / "video_info.meta.jsonl"
    _rewrite_jsonl(path, lambda rows: rows[0]["qa"][1].update(question="no options here"))
    path.write_text(path.read_text() + "{broken\n")
    samples, errors = load_benchmark("lvbench", root)
    assert len(samples) == 5
    assert {(e.row, "options" in e.reason or "JSON" in e.reason) for e in errors} == {
        ("1/qa[1]", True),
        (4, True),
    }


def test_videoevalpro_too_many_options(root):
    path = root / "videoevalpro" / "data" / "test-00000-of-00001.parquet"
    _rewrite_parquet(path, lambda rows: rows[2].update(options=[f"o{i}" for i in range(27)]))
    samples, error = _one_error("videoevalpro_mcq", root, "test-00000-of-00001.parquet", 2)
    assert len(samples) == 2 and "27 options" in error.reason


def test_videoevalpro_falls_back_to_answer_text(root):
    path = root / "videoevalpro" / "data" / "test-00000-of-00001.parquet"
    _rewrite_parquet(path, lambda rows: rows[0].update(answer="not an option"))
    samples, errors = load_benchmark("videoevalpro_mcq", root)
    assert errors == [] and samples[0].options[ord(samples[0].answer) - 65] == samples[0].meta["answer_text"]


def test_agentvidbench_missing_video_path_and_duplicate_id(root):
    def edit(rows):
        del rows[0]["video_path"]
        rows[2]["question_id"] = rows[1]["question_id"]

    _rewrite_jsonl(root / "agentvidbench" / "questions.jsonl", edit)
    samples, errors = load_benchmark("agentvidbench", root)
    assert len(samples) == 1
    assert [(e.row, e.reason.split(" ")[0]) for e in errors] == [(1, "missing"), (3, "duplicate")]


def test_agentvidbench_bad_video_table_rows_are_counted(root):
    path = root / "agentvidbench" / "videos.jsonl"
    _rewrite_jsonl(path, lambda rows: rows[1].update(duration="about ten minutes"))
    samples, error = _one_error("agentvidbench", root, "videos.jsonl", 2)
    assert len(samples) == 3 and "H:MM:SS" in error.reason
    assert samples[1].duration is None and samples[1].meta["duration_source"] == "not in video table"


def test_synthetic_missing_answer_and_non_list_options(root):
    def edit(rows):
        rows[0]["answer"] = None
        rows[1]["options"] = "red, green"

    _rewrite_jsonl(root / "synthetic" / "heldout.jsonl", edit)
    samples, errors = load_benchmark("synthetic_heldout", root)
    assert samples == [] and [e.row for e in errors] == [1, 2]
    assert all("heldout.jsonl" in str(e) for e in errors)


def test_unknown_benchmark_suggests_the_closest_name(root):
    with pytest.raises(UnknownBenchmarkError, match="Did you mean 'lvbench'") as info:
        load_benchmark("lvbnech", root)
    assert isinstance(info.value, KeyError)
    with pytest.raises(KeyError, match="Known: "):
        load_benchmark("zzzz", root)


def test_missing_layout_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="lvb_val.json"):
        load_benchmark("longvideobench_val", tmp_path)


def test_answer_letter_is_deterministic_and_strict():
    options, letters = ["red", "green", "blue"], ["A", "B", "C"]
    assert [answer_letter(a, options, letters) for a in ("B", "(C)", "A.", " green ", "Blue.")] == [
        "B",
        "C",
        "A",
        "B",
        "C",
    ]
    for bad in ("D", "", None, "purple"):
        with pytest.raises(RowError):
            answer_letter(bad, options, letters)
    with pytest.raises(RowError, match="several"):
        answer_letter("red", ["red", "Red"], ["A", "B"])


def test_strip_letter_prefixes_only_when_every_option_is_lettered_in_order():
    assert strip_letter_prefixes(["A. red", "B. green"]) == ["red", "green"]
    assert strip_letter_prefixes(["(A) red", "(B) green"]) == ["red", "green"]
    assert strip_letter_prefixes(["A. red", "C. green"]) == ["A. red", "C. green"]
    assert strip_letter_prefixes(["A cat", "B movie"]) == ["A cat", "B movie"]


def test_lvbench_parsers():
    assert split_options("Q?\n(A) x\n(B) y (z)") == ("Q?", ["x", "y (z)"])
    with pytest.raises(RowError):
        split_options("Q?\n(B) x\n(A) y")
    assert parse_time_reference("01:05-1:02:03") == [65.0, 3723.0]
    assert parse_time_reference("00:10-00:05") is None
    assert parse_time_reference(None) is None and parse_time_reference("soon") is None


# Where each loader reads the question text, the options and the video path of its first row, and how the error
# for that row is named: the ``first_row`` of each fixture folder's facts.json (tests/benchmark_facts.py).
FIRST_ROW = first_rows()


def _edit_first_row(root, name, field, value):
    path = root / FIRST_ROW[name]["file"]

    def edit(rows):
        rows[0][field] = value(rows[0][field]) if callable(value) else value

    {".parquet": _rewrite_parquet, ".json": _rewrite_json, ".jsonl": _rewrite_jsonl}[path.suffix](path, edit)
    return path


def _first_row_error(root, name, field, value):
    clean, _ = load_benchmark(name, root)
    path = _edit_first_row(root, name, field, value)
    samples, errors = load_benchmark(name, root)
    assert len(errors) == 1, errors
    assert errors[0].file.endswith(path.name) and errors[0].row == FIRST_ROW[name]["error_row"]
    assert len(samples) == len(clean) - 1
    return errors[0].reason


# MLVU's official scorer asks blank question and option texts as they are and scores the row
# (test_mlvu_scores_blank_question_and_option_rows_and_flags_them); every other loader rejects them.
BLANK_SCORED = {name for name, first in FIRST_ROW.items() if first.get("blank_text_scored")}


# a blank text is a row error except where the official scorer asks it as released (BLANK_SCORED); missing is always
BLANK_QUESTION_CASES = [(name, bad) for name in sorted(FIRST_ROW) for bad in ["", "   ", None, float("nan")]
                        if not (name in BLANK_SCORED and isinstance(bad, str))]


@pytest.mark.parametrize("name, bad", BLANK_QUESTION_CASES)
def test_empty_or_missing_question_text_is_a_counted_row_error(root, name, bad):
    if isinstance(bad, float) and FIRST_ROW[name]["file"].endswith(".parquet"):
        bad = None  # a NaN written by pandas into a string column reads back from parquet as null
    reason = _first_row_error(root, name, FIRST_ROW[name]["question"], bad)
    assert "question" in reason or "missing" in reason


@pytest.mark.parametrize("name", sorted(set(FIRST_ROW) - BLANK_SCORED))
def test_an_empty_option_is_a_counted_row_error(root, name):
    def blank_second(options):
        return [options[0], "  ", *options[2:]]

    reason = _first_row_error(root, name, FIRST_ROW[name]["options"], blank_second)
    assert "empty" in reason


@pytest.mark.parametrize("name", sorted(FIRST_ROW))
@pytest.mark.parametrize(
    "escape", ["../../../outside.mp4", "/etc/passwd", "C:\\videos\\x.mp4", "..\\..\\x.mp4"]
)
def test_a_video_path_leaving_the_data_root_is_a_counted_row_error(root, name, escape):
    if FIRST_ROW[name].get("video_is_an_id"):  # the row names the video by id; the loader adds the suffix
        escape = escape.removesuffix(".mp4")
    reason = _first_row_error(root, name, FIRST_ROW[name]["video"], escape)
    assert "absolute" in reason or "outside" in reason or "leaves" in reason


def test_lvbench_key_leaving_the_data_root_loses_that_video_only(root):
    path = root / "lvbench" / "data" / "video_info.meta.jsonl"
    clean, _ = load_benchmark("lvbench", root)
    _rewrite_jsonl(path, lambda rows: rows[0].update(key="../../x"))
    samples, error = _one_error("lvbench", root, "video_info.meta.jsonl", 1)
    assert len(samples) == len(clean) - 2 and "leaves the data root" in error.reason


def test_lvbench_empty_question_and_option_beyond_z(root):
    path = root / "lvbench" / "data" / "video_info.meta.jsonl"
    many = (
        "Q?" + "".join(f"\n({letter}) o{letter}" for letter in "ABCDEFGHIJKLMNOPQRSTUVWXYZ") + "\n(AA) extra"
    )

    def edit(rows):
        rows[0]["qa"][0]["question"] = "\n(A) x\n(B) y"
        rows[0]["qa"][1]["question"] = many
        rows[1]["qa"][0]["question"] = "Q?\n(A) x\n(B) \n(C) z"

    _rewrite_jsonl(path, edit)
    _, errors = load_benchmark("lvbench", root)
    assert [(e.row, e.reason) for e in errors] == [
        ("1/qa[0]", "question is empty"),
        ("1/qa[1]", "more than 26 options (an option lettered beyond Z)"),
        ("2/qa[0]", "option B is empty"),
    ]


@pytest.mark.parametrize("name", sorted(FIRST_ROW))
def test_more_than_26_options_is_a_counted_row_error(root, name):
    reason = _first_row_error(root, name, FIRST_ROW[name]["options"], [f"colour {i}" for i in range(27)])
    assert "27 options" in reason
