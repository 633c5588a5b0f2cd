"""lmms-eval documents as cader samples (no lmms-eval needed): options per task family from the raw document, the
gold letter, a clear error for an unsupported task or a broken document, and the document hash."""

import hashlib

import numpy as np
import pytest
from cader.evaluate.lmms.docs import BadDocument, UnsupportedTask, doc_hash, family_of, sample_from_doc

# documents shaped as the lmms-eval task utils read them (tests/fixtures/lmms_eval/PROVENANCE.md)
VIDEOMME = {"question_id": "001-1", "videoID": "fFjv93ACGo8", "duration": "long", "domain": "Knowledge",
            "sub_category": "Humanity & History", "task_type": "Counting Problem", "question": "How many?",
            "options": ["A. one", "B. two", "C. three", "D. four"], "answer": "C"}
LONGVIDEOBENCH = {"id": "86CxyhFV9MI_0", "question": "What is shown?", "option0": "a cat", "option1": "a dog",
                  "option2": "a bird", "option3": "N/A", "option4": "N/A", "correct_choice": 1, "duration": 523.5, "duration_group": 600, "question_category": "TOS",
                  "video_path": "86CxyhFV9MI.mp4"}
LVBENCH = {"uid": 42, "key": "abc", "question": "Where is he?\n(A) home\n(B) work\n(C) park\n(D) shop",
           "answer": "D", "video_path": "abc.mp4"}
MLVU = {"video_name": "x.mp4", "question": "Which scene?\n(A) first\n(B) second", "answer": "(A)",
        "task_type": "plotQA", "duration": 180}


def test_videomme_options_lose_their_letter_prefixes():
    sample = sample_from_doc("videomme_long", VIDEOMME, 3, "/v/fFjv93ACGo8.mp4")
    assert sample.options == ["one", "two", "three", "four"] and sample.letters == ["A", "B", "C", "D"]
    assert sample.answer == "C" and sample.sample_id == "001-1" and sample.benchmark == "videomme_long"
    assert sample.duration is None  # "long" is a bucket, not seconds
    assert sample.meta == {"task_type": "Counting Problem", "duration_bucket": "long"}
    assert sample.video == "/v/fFjv93ACGo8.mp4"


def test_longvideobench_candidates_and_the_index_of_the_gold_one():
    sample = sample_from_doc("longvideobench_val_v", LONGVIDEOBENCH, 0, "v.mp4")
    assert sample.options == ["a cat", "a dog", "a bird"] and sample.letters == ["A", "B", "C"]
    assert sample.answer == "B" and sample.duration == 523.5 and sample.sample_id == "86CxyhFV9MI_0"
    with pytest.raises(BadDocument, match=r"longvideobench_val_v doc 5: correct_choice 3"):
        sample_from_doc("longvideobench_val_v", LONGVIDEOBENCH | {"correct_choice": 3}, 5, "v.mp4")
    # the release's own form (lvb_val.json) names the options `candidates`
    release = {k: v for k, v in LONGVIDEOBENCH.items() if not k.startswith("option")} | {"candidates": ["x", "y"]}
    assert sample_from_doc("longvideobench_val_v", release, 0, "v.mp4").options == ["x", "y"]
    with pytest.raises(BadDocument, match=r"no 'option0' \(or 'candidates'\) field"):
        sample_from_doc("longvideobench_val_v", {"question": "q", "correct_choice": 0}, 2, "v.mp4")


def test_lvbench_and_mlvu_options_are_read_from_the_question():
    sample = sample_from_doc("lvbench", LVBENCH, 7, "abc.mp4")
    assert sample.question == "Where is he?" and sample.options == ["home", "work", "park", "shop"]
    assert sample.answer == "D" and sample.sample_id == "42"
    sample = sample_from_doc("mlvu_dev", MLVU, 9, "x.mp4")
    assert sample.options == ["first", "second"] and sample.answer == "A" and sample.sample_id == "9"
    assert sample.meta == {"task_type": "plotQA"} and sample.duration == 180.0
    with pytest.raises(BadDocument, match=r"mlvu_dev doc 9: no '\(A\) \.\.\.' options"):
        sample_from_doc("mlvu_dev", MLVU | {"question": "no options here"}, 9, "x.mp4")


def test_an_unsupported_task_is_refused_by_name():
    with pytest.raises(UnsupportedTask, match=r"'mmmu_val' is not supported .*videomme\*, longvideobench\*"):
        family_of("mmmu_val")
    with pytest.raises(BadDocument, match=r"videomme doc 1: no 'options' field"):
        sample_from_doc("videomme", {k: v for k, v in VIDEOMME.items() if k != "options"}, 1, "v.mp4")


def test_the_doc_hash_is_lmms_evals():
    # lmms_eval/evaluator.py: hash_string(json.dumps(doc, indent=2, default=handle_non_serializable,
    # ensure_ascii=False)), hash_string = sha256 hex; the field order is the document's
    text = '{\n  "b": 1,\n  "a": "é",\n  "s": [\n    3\n  ]\n}'
    assert doc_hash({"b": 1, "a": "é", "s": {3}}) == hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert doc_hash(VIDEOMME) != doc_hash(VIDEOMME | {"answer": "D"})
    assert doc_hash({"n": np.int64(4)}) == doc_hash({"n": 4})


# lmms-eval 0.7.3's Video-MME-v2 rows: one options string, eight lettered lines (tasks/videomme_v2/utils.py)
V2_OPTIONS = "\n".join(f"{letter}. choice {letter.lower()}" for letter in "ABCDEFGH")
VIDEOMME_V2 = {"video_id": "001", "question_id": "001-2", "question": "What happens next?", "options": V2_OPTIONS,
               "answer": "G", "group_type": "logic", "group_structure": "[1, 2, 3, 4]", "level": 2,
               "second_head": "Temporal Understanding", "third_head": "Action Order"}


def test_videomme_v2_reads_its_newline_joined_options_a_to_h():
    assert family_of("videomme_v2_reasoning") == "videomme_v2" and family_of("videomme_long") == "videomme"
    sample = sample_from_doc("videomme_v2", VIDEOMME_V2, 5, "/v/001.mp4")
    assert sample.letters == list("ABCDEFGH") and sample.options == [f"choice {c}" for c in "abcdefgh"]
    assert sample.answer == "G" and sample.sample_id == "001-2" and sample.duration is None
    assert sample.meta == {"group_type": "logic", "level": 2, "second_head": "Temporal Understanding",
                           "third_head": "Action Order"}
    # a list of the same lines is the same document
    as_list = sample_from_doc("videomme_v2", VIDEOMME_V2 | {"options": V2_OPTIONS.split("\n")}, 5, "v.mp4")
    assert as_list.options == sample.options


@pytest.mark.parametrize(("options", "why"), [
    ("A. x\nB. y\nD. z", r"'options' line 3 is 'D. z', not 'C. \.\.\.'"),
    ("A. x\nsecond line of A\nB. y", r"'options' line 2 is 'second line of A', not 'B. \.\.\.'"),
    ("x\ny", r"'options' line 1 is 'x', not 'A. \.\.\.'"),
    ({"A": "x"}, r"'options' is dict, not the newline-joined 'A\. \.\.\.' string"),
    ("", r"'options' is empty"),
])
def test_videomme_v2_options_cader_cannot_read_fail_that_document_by_name(options, why):
    with pytest.raises(BadDocument, match=rf"^videomme_v2 doc 4: {why}"):
        sample_from_doc("videomme_v2", VIDEOMME_V2 | {"options": options}, 4, "v.mp4")


def test_lvbench_rows_with_an_options_list():
    row = {"uid": 7, "question": "Where is he?", "options": ["home", "work", "park", "shop"], "answer": "C",
           "video_path": "abc.mp4"}
    sample = sample_from_doc("lvbench", row, 0, "abc.mp4")
    assert (sample.question, sample.options, sample.answer) == ("Where is he?", ["home", "work", "park", "shop"], "C")
    # an empty list: the options are in the question, as in the release
    assert sample_from_doc("lvbench", LVBENCH | {"options": []}, 0, "v.mp4").options == ["home", "work", "park", "shop"]
    with pytest.raises(BadDocument, match=r"lvbench doc 3: 'options' is str 'home', not a list of option texts"):
        sample_from_doc("lvbench", row | {"options": "home"}, 3, "v.mp4")


def test_mlvu_keeps_blank_text_and_the_no_match_gold():
    blank = sample_from_doc("mlvu_dev", MLVU | {"question": "\n(A) first\n(B) \n(C) third"}, 1, "x.mp4")
    assert (blank.question, blank.options) == ("", ["first", "", "third"])
    no_match = sample_from_doc("mlvu_dev", MLVU | {"answer": "@"}, 2, "x.mp4")
    assert no_match.answer == "@"  # MLVU's official gold for an answer none of the candidates equals
    with pytest.raises(BadDocument, match=r"lvbench doc 2: answer '@'"):
        sample_from_doc("lvbench", LVBENCH | {"answer": "@"}, 2, "x.mp4")
