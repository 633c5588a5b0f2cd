"""lmms-eval documents as cader samples (no lmms-eval needed): options per task family from the raw document, the
gold letter, a clear error for an unsupported task or a broken document, and the document hash."""

import hashlib

import numpy as np
import pytest
from cader.evaluate.lmms.docs import BadDocument, UnsupportedTask, doc_hash, family_of, sample_from_doc

# documents shaped as the lmms-eval task utils read them (tests/fixtures/lmms_eval/PROVENANCE.md)
VIDEOMME = {"question_id": "001-1", "videoID": "fFjv93ACGo8", "duration": "long", "domain": "Knowledge",
            "sub_category": "Humanity & History", "task_type": "Counting Problem", "question": "How many?",
            "options": ["A. one", "B. two", "C. three", "D. four"], "answer": "C"}  # fmt: skip
LONGVIDEOBENCH = {"id": "86CxyhFV9MI_0", "question": "What is shown?", "option0": "a cat", "option1": "a dog",
                  "option2": "a bird", "option3": "N/A", "option4": "N/A", "correct_choice": 1, "duration": 523.5, "duration_group": 600, "question_category": "TOS",
                  "video_path": "86CxyhFV9MI.mp4"}  # fmt: skip
LVBENCH = {"uid": 42, "key": "abc", "question": "Where is he?\n(A) home\n(B) work\n(C) park\n(D) shop",
           "answer": "D", "video_path": "abc.mp4"}  # fmt: skip
MLVU = {"video_name": "x.mp4", "question": "Which scene?\n(A) first\n(B) second", "answer": "(A)",
        "task_type": "plotQA", "duration": 180}  # fmt: skip


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
