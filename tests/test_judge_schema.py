import json

import pytest
from cader.dev.judge_double import synthetic_judgment
from cader.evaluate.judge.schema import (
    FAILURE_TAGS,
    JudgeOutputError,
    applied_sweep,
    extract_json_object,
    json_objects,
    p_scores,
    parse_judgment,
)

IDS = ["M1", "M2", "M3"]


def judgment(sweep="yes", **changes):
    value = synthetic_judgment("7", IDS, sweep)
    value["process_scores"].update(changes)
    return value


def test_vocabulary_has_the_21_tags_of_appendix_d_in_the_official_spelling():
    assert len(FAILURE_TAGS) == 21 == len(set(FAILURE_TAGS))
    assert "audio_transcript_error" in FAILURE_TAGS and "overconfident_uncertainty" in FAILURE_TAGS
    assert "audio_tranerror" not in FAILURE_TAGS


@pytest.mark.parametrize("spelling", ["audio_tranerror", "audio_transcript_error"])
def test_audio_tag_accepted_in_both_spellings_and_stored_in_the_official_one(spelling):
    value = judgment()
    value["failure_tags"] = [spelling, "ocr_error", "audio_transcript_error"]
    assert parse_judgment(json.dumps(value), IDS, "yes").failure_tags == ["audio_transcript_error", "ocr_error"]


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


def test_p4_required_when_sweep_yes():
    with pytest.raises(JudgeOutputError, match="P4"):
        parse_judgment(json.dumps(judgment(evidence_completeness=None)), IDS, "yes")


def with_p4_rationale(text, **scores):
    value = judgment(**scores)
    value["axis_rationales"]["P4"] = text
    return json.dumps(value)


def test_p4_when_unknown_follows_the_judges_own_anchor_test():
    # Official prompt: with SWEEP_REQUIRED unknown the judge classifies the question and says so first in P4's
    # rationale; YES means P4 is scored, NO means it is null like a pre-classified "no".
    yes = parse_judgment(with_p4_rationale("FALLBACK SWEEP=YES because it counts reps", evidence_completeness=1),
                         IDS, "unknown")
    assert p_scores(yes)["P4"] == 1 and applied_sweep(yes, "unknown") == "yes"
    no = parse_judgment(with_p4_rationale("FALLBACK SWEEP=NO because one shot decides", evidence_completeness=2),
                        IDS, "unknown")
    assert p_scores(no)["P4"] is None and applied_sweep(no, "unknown") == "no"
    with pytest.raises(JudgeOutputError, match="your fallback says SWEEP=YES"):
        parse_judgment(with_p4_rationale("FALLBACK SWEEP=YES because ...", evidence_completeness=None), IDS,
                       "unknown")
    with pytest.raises(JudgeOutputError, match="FALLBACK SWEEP=YES because"):
        parse_judgment(with_p4_rationale("looks fine", evidence_completeness=1), IDS, "unknown")
    # A pre-classified flag is never overridden by the judge's fallback text.
    forced = parse_judgment(with_p4_rationale("FALLBACK SWEEP=YES because", evidence_completeness=2), IDS, "no")
    assert p_scores(forced)["P4"] is None and applied_sweep(forced, "no") == "no"


@pytest.mark.parametrize("text", [
    '{"a": 1}\n{"process_scores": {}}',
    "Draft: {judgment}\nFinal: {judgment}",
    "```json\n{judgment}\n```\n```json\n{judgment}\n```",
])
def test_more_than_one_json_object_is_refused(text):
    one = json.dumps(judgment())
    with pytest.raises(JudgeOutputError, match="JSON objects; return exactly one"):
        parse_judgment(text.replace("{judgment}", one), IDS, "yes")
    assert len(json_objects(text.replace("{judgment}", one))) == 2


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
