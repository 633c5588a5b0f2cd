"""Bad input for the benchmark loaders: malformed rows come back as BenchmarkError naming file and row."""

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cader.evaluate.benchmarks import BenchmarkError, UnknownBenchmarkError, load_benchmark
from cader.evaluate.benchmarks.base import RowError, answer_letter, strip_letter_prefixes
from cader.evaluate.benchmarks.lvbench import parse_time_reference, split_options
from cader.evaluate.benchmarks.synth_data import make_synthetic_data


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    out = tmp_path_factory.mktemp("pristine")
    make_synthetic_data(
        out, seed=5, n_train=1, n_images=0, n_tool=0, n_eval=3, n_heldout=2, eval_duration=(12, 14)
    )
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


def test_mlvu_answer_not_among_candidates_and_bad_json_file(root):
    files = sorted((root / "mlvu" / "MLVU" / "json").glob("[1-7]_*.json"))
    _rewrite_json(files[0], lambda rows: rows[0].update(answer="chartreuse"))
    samples, error = _one_error("mlvu_dev", root, files[0].name, 0)
    assert len(samples) == 2 and "matches none" in error.reason
    files[1].write_text("{not json")
    _, errors = load_benchmark("mlvu_dev", root)
    assert any(e.file.endswith(files[1].name) and e.row is None for e in errors)


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
    path = root / "lvbench" / "video_info.meta.jsonl"
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


def test_agentvidbench_unknown_video_and_duplicate_id(root):
    def edit(rows):
        rows[0]["video_id"] = "v999"
        rows[2]["question_id"] = rows[1]["question_id"]

    _rewrite_jsonl(root / "agentvidbench" / "questions.jsonl", edit)
    samples, errors = load_benchmark("agentvidbench", root)
    assert len(samples) == 1
    assert [(e.row, e.reason.split(" ")[0]) for e in errors] == [(1, "video_id"), (3, "duplicate")]


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
