import json

import pytest
from cader.evaluate.judge.loopback import synthetic_judgment
from cader.evaluate.judge.schema import (
    FAILURE_TAGS,
    JudgeOutputError,
    extract_json_object,
    p_scores,
    parse_judgment,
)

IDS = ["M1", "M2", "M3"]


def judgment(sweep="yes", **changes):
    value = synthetic_judgment("7", IDS, sweep)
    value["process_scores"].update(changes)
    return value


def test_vocabulary_has_the_21_tags_of_appendix_d():
    assert len(FAILURE_TAGS) == 21 == len(set(FAILURE_TAGS))
    assert "audio_tranerror" in FAILURE_TAGS and "overconfident_uncertainty" in FAILURE_TAGS


@pytest.mark.parametrize("wrap", [lambda s: s, lambda s: f"```json\n{s}\n```", lambda s: f"Sure! {s} Done {{x}}."])
def test_valid_bare_fenced_and_prose_wrapped_json(wrap):
    value = judgment(task_understanding=2, gt_evidence_coverage=1)
    out = parse_judgment(wrap(json.dumps(value)), IDS, "yes")
    assert p_scores(out)["P1"] == 2 and p_scores(out)["P2"] == 1
    assert [m.milestone_id for m in out.milestone_coverage] == IDS


def test_no_json_is_an_error():
    with pytest.raises(JudgeOutputError, match="no JSON object"):
        extract_json_object('{"process_scores": {"task_understanding": 2,')


@pytest.mark.parametrize("bad", [3, -1, 1.5, True, "2", None])
def test_scores_must_be_integers_0_to_2(bad):
    with pytest.raises(JudgeOutputError, match="task_understanding"):
        parse_judgment(json.dumps(judgment(task_understanding=bad)), IDS, "yes")


def test_p4_forced_null_when_sweep_not_required():
    out = parse_judgment(json.dumps(judgment(sweep="yes", evidence_completeness=2)), IDS, "no")
    assert p_scores(out)["P4"] is None


def test_p4_required_when_sweep_yes_and_free_when_unknown():
    with pytest.raises(JudgeOutputError, match="P4"):
        parse_judgment(json.dumps(judgment(evidence_completeness=None)), IDS, "yes")
    assert p_scores(parse_judgment(json.dumps(judgment(evidence_completeness=None)), IDS, "unknown"))["P4"] is None
    assert p_scores(parse_judgment(json.dumps(judgment(evidence_completeness=1)), IDS, "unknown"))["P4"] == 1


@pytest.mark.parametrize("ids", [["M1", "M2"], ["M2", "M1", "M3"], ["M1", "M2", "M3", "M4"]])
def test_milestones_must_match_ids_and_order(ids):
    value = judgment()
    value["milestone_coverage"] = [{"milestone_id": i, "status": "covered"} for i in ids]
    with pytest.raises(JudgeOutputError, match="milestone_coverage"):
        parse_judgment(json.dumps(value), IDS, "yes")


def test_unknown_status_and_unknown_tag_rejected():
    value = judgment()
    value["milestone_coverage"][0]["status"] = "mostly"
    with pytest.raises(JudgeOutputError, match="status"):
        parse_judgment(json.dumps(value), IDS, "yes")
    value = judgment()
    value["failure_tags"] = ["counting_error", "made_up_tag"]
    with pytest.raises(JudgeOutputError, match="failure_tags"):
        parse_judgment(json.dumps(value), IDS, "yes")


def test_at_most_eight_distinct_tags_duplicates_collapse():
    value = judgment()
    value["failure_tags"] = list(FAILURE_TAGS[:8]) + [FAILURE_TAGS[0]]
    assert parse_judgment(json.dumps(value), IDS, "yes").failure_tags == list(FAILURE_TAGS[:8])
    value["failure_tags"] = list(FAILURE_TAGS[:9])
    with pytest.raises(JudgeOutputError, match="at most 8"):
        parse_judgment(json.dumps(value), IDS, "yes")


def test_missing_process_scores_key_rejected():
    value = judgment()
    del value["process_scores"]["reasoning_faithfulness"]
    with pytest.raises(JudgeOutputError, match="reasoning_faithfulness"):
        parse_judgment(json.dumps(value), IDS, "yes")
