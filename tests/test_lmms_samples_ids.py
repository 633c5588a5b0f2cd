"""An lmms-eval samples file is read only when each line is its own document: a doc_id that is null (or not an
integer) or repeated, or a question logged twice, is an error naming the file and the line(s), and `cader compare`
refuses the file with that one line; keeping one copy would score an answer that may not be the system's."""

import json
from pathlib import Path

import pytest
from cader.evaluate.judge.compare import CompareInputError, compare_files
from cader.evaluate.lmms.samples import SamplesFileError, read_samples

SAMPLES = Path(__file__).resolve().parent / "fixtures" / "lmms_eval_samples" / "baseline_vlm"
MLVU = SAMPLES / "20261201_120000_samples_mlvu_dev.jsonl"
VIDEOMME = SAMPLES / "20261201_120000_samples_videomme_long.jsonl"


def edited(source: Path, tmp_path: Path, edit) -> Path:
    lines = [json.loads(line) for line in source.read_text().splitlines()]
    edit(lines)
    path = tmp_path / "run" / source.name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_a_repeated_doc_id_names_the_file_and_both_lines(tmp_path):
    path = edited(MLVU, tmp_path, lambda lines: lines[3].update(doc_id=lines[1]["doc_id"]))
    with pytest.raises(SamplesFileError) as caught:
        read_samples(path)
    assert str(caught.value) == (f"{path}: doc_id 1 is on lines 2 and 4: one document logged twice (a concatenated "
                                 "or edited file); compare cannot tell which answer is the system's")
    with pytest.raises(CompareInputError, match=r"doc_id 1 is on lines 2 and 4"):
        compare_files([str(path), str(MLVU)], n_resamples=10)


@pytest.mark.parametrize("bad", [None, "3", 2.0, True])
def test_a_doc_id_that_is_no_document_index_names_its_line(tmp_path, bad):
    path = edited(MLVU, tmp_path, lambda lines: lines[2].update(doc_id=bad))
    with pytest.raises(SamplesFileError, match=rf"^{path}: line 3: doc_id {bad!r} is not a document index"):
        read_samples(path)


def test_one_question_logged_on_two_lines_names_both(tmp_path):
    def same_question(lines):
        lines[4]["videomme_perception_score"]["question_id"] = lines[0]["videomme_perception_score"]["question_id"]

    path = edited(VIDEOMME, tmp_path, same_question)
    with pytest.raises(SamplesFileError, match=r"question 001-1 is logged twice, on lines 1 and 5"):
        read_samples(path)


def test_the_untouched_files_still_read():
    for path in (MLVU, VIDEOMME):
        scores = read_samples(path)
        assert scores.problems == [] and scores.by_doc
