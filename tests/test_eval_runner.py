"""Runner (resume, shards, merge, failures) and report, with real videos and a scripted backend (test double)."""

import json

import pytest
from cader.contracts.jsonl import repair_torn_tail
from cader.dev.scripted import ScriptedBackend
from cader.evaluate.benchmarks.base import Sample
from cader.evaluate.method.config import CaderConfig
from cader.evaluate.report import build_report, render_markdown, write_report
from cader.evaluate.runner import (
    merge_shards,
    parse_shard,
    predictions_path,
    read_records,
    read_timings,
    run_samples,
    select_samples,
    timings_path,
)

LETTERS = ["A", "B", "C", "D"]


def make_samples(video, n=6):
    samples = []
    for i in range(n):
        samples.append(
            Sample(
                "bench",
                f"s{i}",
                video,
                f"q{i}",
                ["a", "b", "c", "d"],
                LETTERS,
                "B",
                60.0,
                {"task_type": "t" + str(i % 2)},
            )
        )
    return samples


CONFIDENT = [0.0, 40.0, 0.0, 0.0]  # B with margin ~1 -> exit
UNSURE = [0.0, 0.1, 0.0, 0.0]  # low margin -> stage 2


@pytest.fixture
def video_root(barcode_video):
    return barcode_video.parent, barcode_video.name


def logits_map(n):
    return {f"q{i}": (CONFIDENT if i % 2 == 0 else UNSURE) for i in range(n)}


def run(samples, root, out, backend, **cfg):
    cfg = CaderConfig(max_frames=8, max_pixels=2048, **cfg)
    return run_samples(
        samples, root, out, backend, backend, cfg, video_path=lambda s, r: r / s.video, progress=False
    )


def test_run_resume_and_routes(tmp_path, video_root):
    root, name = video_root
    samples = make_samples(name)
    backend = ScriptedBackend(logits_map(6))
    out = tmp_path / "predictions.jsonl"
    counts = run(samples[:3], root, out, backend)
    none = {"retried": 0, "stage1_reused": 0, "flagged": 0}
    assert counts == {"done_before": 0, "ran": 3, "failed": 0, **none}
    counts = run(samples, root, out, backend)  # rerun: the first three are skipped
    assert counts == {"done_before": 3, "ran": 3, "failed": 0, **none}
    records = read_records(out)
    assert [r["sample_id"] for r in records] == [f"s{i}" for i in range(6)]
    assert [r["route"] for r in records] == ["exit", "stage2"] * 3
    s2 = records[1]["stage2"]
    assert s2["accepted"] == [20.0, 30.0] and s2["pred"] == "B" and records[1]["correct"] is True
    assert s2["steps"][1]["r2"] == 8.0 and records[1]["duration"] == 60.0
    # the whole-video decode (F1's 8 frames and the 1-fps lattice's 60, which the RGR contexts would come from; frame
    # 0 in both) and the accepted crop's 8
    assert records[1]["cost"]["forwards"] == 4 and records[1]["cost"]["frames_decoded"] == 8 + 60 - 1 + 8
    assert records[0]["stage2"] is None and records[0]["cost"]["forwards"] == 1


def test_variants_route_as_table2(tmp_path, video_root):
    root, name = video_root
    samples = make_samples(name, 2)
    recs = {}
    for variant in ("no_stage2", "uniform_stage2"):
        out = tmp_path / variant / "p.jsonl"
        run(samples, root, out, ScriptedBackend(logits_map(2)), variant=variant)
        recs[variant] = read_records(out)
    assert [r["route"] for r in recs["no_stage2"]] == ["exit", "exit"]
    assert [r["route"] for r in recs["uniform_stage2"]] == ["stage2", "stage2"]


def test_failures_are_recorded_and_run_continues(tmp_path, video_root):
    root, name = video_root
    (root / "empty.mp4").write_bytes(b"")
    (root / "corrupt.mp4").write_bytes(b"not a video at all" * 10)
    samples = make_samples(name, 3)
    samples[0].video = "missing.mp4"
    samples.append(Sample("bench", "empty", "empty.mp4", "q0", ["a", "b"], ["A", "B"], "A"))
    samples.append(Sample("bench", "corrupt", "corrupt.mp4", "q0", ["a", "b"], ["A", "B"], "A"))
    samples.append(
        Sample("bench", "many", name, "q0", ["x"] * 27, [chr(65 + i) for i in range(26)] + ["A"], "A")
    )
    samples.append(Sample("bench", "nan", name, "qnan", ["a", "b", "c", "d"], LETTERS, "A"))
    samples.append(Sample("bench", "crash", name, "qcrash", ["a", "b", "c", "d"], LETTERS, "A"))
    logits = logits_map(3) | {"qnan": [float("nan"), 0, 0, 0], "qcrash": RuntimeError("CUDA out of memory")}
    out = tmp_path / "p.jsonl"
    counts = run(samples, root, out, ScriptedBackend(logits))
    records = {r["sample_id"]: r for r in read_records(out)}
    assert counts["ran"] == 8 and counts["failed"] == 6 and len(records) == 8
    for sid in ("s0", "empty", "corrupt"):
        assert records[sid]["error"].startswith("video_unreadable:") and records[sid]["pred"] is None
        assert records[sid]["correct"] is False
    assert "missing.mp4" in records["s0"]["error"]
    assert records["many"]["error"].startswith("bad_sample:")
    assert records["nan"]["error"].startswith("invalid_logits: non_finite")
    assert records["crash"]["error"] == "stage1_failed: RuntimeError: CUDA out of memory"
    assert records["s1"]["error"] is None
    report = build_report(list(records.values()))
    assert report["failures"]["count"] == 6
    assert report["failures"]["by_reason"] == {
        "video_unreadable": 3,
        "bad_sample": 1,
        "invalid_logits": 1,
        "stage1_failed": 1,
    }
    assert report["overall"]["accuracy"] == pytest.approx(100 * 2 / 8)


def test_stage2_failure_keeps_stage1_and_partial_steps(tmp_path, video_root):
    root, name = video_root

    class BadVerifier(ScriptedBackend):
        def yes_no(self, prompts):
            raise ValueError("verifier exploded")

    out = tmp_path / "p.jsonl"
    run(make_samples(name, 2)[1:], root, out, BadVerifier(logits_map(2)))
    (record,) = read_records(out)
    assert record["error"] == "stage2_failed: ValueError: verifier exploded"
    assert record["stage1"]["pred"] == "B" and [s["phase"] for s in record["stage2"]["steps"]] == [
        "propose",
        "verify",
    ]
    assert record["pred"] is None and record["correct"] is False


def test_killed_mid_write_then_rerun_has_no_duplicates_or_loss(tmp_path, video_root):
    root, name = video_root
    samples = make_samples(name, 4)
    out = tmp_path / "p.jsonl"
    run(samples[:2], root, out, ScriptedBackend(logits_map(4)))
    with out.open("a") as handle:  # a record torn by a kill
        handle.write('{"benchmark": "bench", "sample_id": "s2", "pred": "B", "cor')
    repair_torn_tail(out)
    assert out.read_text().endswith("\n") and len(read_records(out)) == 2
    with out.open("a") as handle:
        handle.write('{"benchmark": "bench", "sample_id": "s2", "pred": "B", "cor')
    run(samples, root, out, ScriptedBackend(logits_map(4)))
    ids = [r["sample_id"] for r in read_records(out)]
    assert sorted(ids) == ["s0", "s1", "s2", "s3"]
    assert all(json.loads(line) for line in out.read_text().splitlines())


def test_shards_and_merge(tmp_path, video_root):
    root, name = video_root
    samples = make_samples(name, 5)
    for sample, video in zip(samples, "abacb"):  # three videos (one file under three names)
        sample.video = f"{video}_{name}"
        if not (root / sample.video).exists():
            (root / sample.video).symlink_to(root / name)
    # the first 4: a weighs 2 x 60 s, b and c 60 s each -> a to rank 0, b to 1, c to the lighter rank 1
    assert [s.sample_id for s in select_samples(samples, limit=4, shard=(1, 2))] == ["s1", "s3"]
    # all 5: a and b 120 s, c 60 s -> a to 0, b to 1, c to 0 (equal loads: the lower rank); whole videos each
    assert [s.sample_id for s in select_samples(samples, shard=(0, 2))] == ["s0", "s2", "s3"]
    assert [s.sample_id for s in select_samples(samples, shard=(1, 2))] == ["s1", "s4"]
    for i in range(2):
        shard = parse_shard(f"{i}/2")
        run(
            select_samples(samples, shard=shard),
            root,
            predictions_path(tmp_path, shard),
            ScriptedBackend(logits_map(5)),
        )
    assert (tmp_path / "predictions.shard-0-of-2.jsonl").exists()
    target, n = merge_shards(tmp_path)
    assert n == 5 and sorted(r["sample_id"] for r in read_records(target)) == [f"s{i}" for i in range(5)]
    assert merge_shards(tmp_path)[1] == 5  # idempotent


@pytest.mark.parametrize("bad", ["2/2", "x", "1/0", "-1/3"])
def test_parse_shard_rejects(bad):
    with pytest.raises(ValueError):
        parse_shard(bad)


def _rec(bench, sid, margin, s1, final, route="stage2", cycles=1, p_yes=0.95, task="t", fallback=None):
    stage2 = None
    if route == "stage2":
        stage2 = {
            "pred": final,
            "cycles": cycles,
            "fallback": fallback,
            "steps": [{"phase": "verify", "p_yes": p_yes}],
        }
    return {
        "benchmark": bench,
        "sample_id": sid,
        "answer": "A",
        "meta": {"task_type": task},
        "stage1": {"pred": s1, "margin": margin, "tau": 0.97},
        "route": route,
        "stage2": stage2,
        "pred": final,
        "correct": final == "A",
        "error": None,
        "cost": {"forwards": 1 if route == "exit" else 4, "frames_decoded": 10},
    }


def test_report_tables_by_hand(tmp_path):
    records = [
        _rec("mlvu_dev", "1", 0.999, "A", "A", route="exit", task="x"),
        _rec("mlvu_dev", "2", 0.98, "B", "B", route="exit", task="x"),
        _rec("mlvu_dev", "3", 0.95, "B", "A", task="y"),  # corrected, P_yes .95
        _rec("mlvu_dev", "4", 0.5, "A", "B", cycles=3, p_yes=0.2, task="y", fallback=None),  # overturned
        _rec("mlvu_dev", "5", 0.2, "B", "B", cycles=3, p_yes=0.1, task="y", fallback="not_accepted"),
    ]
    report = build_report(records)
    bench = report["benchmarks"]["mlvu_dev"]
    assert bench["accuracy"] == 40.0 and bench["stage1_accuracy"] == 40.0
    assert bench["per_task_type"] == {"x": 50.0, "y": pytest.approx(100 / 3, abs=0.01)}
    assert bench["m_avg"] == pytest.approx((50 + 33.33) / 2, abs=0.01)
    assert bench["stage2_trigger_rate"] == 60.0 and bench["stage1_exit_rate"] == 40.0
    bins = {
        row["bin"]: (row["n"], row["stage1_accuracy"]) for row in report["table4_margin_bins"]["mlvu_dev"]
    }
    assert bins == {
        ">=0.995": (1, 100.0),
        "[0.99,0.995)": (0, None),
        "[0.97,0.99)": (1, 0.0),
        "[0.90,0.97)": (1, 0.0),
        "<0.90": (2, 50.0),
    }
    t5 = {row["band"]: row for row in report["table5_low_confidence"]["mlvu_dev"]}
    assert (t5["[0.90,tau)"]["stage1_accuracy"], t5["[0.90,tau)"]["final_accuracy"]) == (0.0, 100.0)
    assert (t5["<0.90"]["n"], t5["<0.90"]["stage1_accuracy"], t5["<0.90"]["final_accuracy"]) == (2, 50.0, 0.0)
    depth = {row["depth"]: row["n"] for row in report["table7_depth"]["mlvu_dev"]}
    assert depth == {1: 1, 3: 2}
    assert report["figure4_net_gain"]["mlvu_dev"] == {"n": 1, "corrected": 1, "overturned": 0, "net_gain": 1}
    assert report["fallbacks"] == {"none": 2, "not_accepted": 1}
    assert report["cycles_histogram"] == {"1": 1, "3": 2}
    assert report["cost"]["total"]["forwards"] == 2 + 12
    md = render_markdown(report)
    assert "Table 4" in md and "| mlvu_dev | 5 | 40.0 |" in md
    write_report(
        tmp_path, records, ["bench: f.json, row 3: no options"], {"variant": "full"}, compare_to=records
    )
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["load_errors"]["count"] == 1 and (tmp_path / "report.md").read_text().startswith("# CADER")
    if saved.get("comparison") is not None:  # stats helper present
        assert saved["comparison"]["n"] == 5


def test_jsonl_appender_cuts_a_torn_tail_and_appends_whole_lines(tmp_path):
    from cader.contracts.jsonl import JsonlAppender, read_jsonl

    path = tmp_path / "results.jsonl"
    path.write_text('{"id": 1}\n{"id": 2, "trunc')  # killed mid-write
    assert read_jsonl(path) == [{"id": 1}]
    with JsonlAppender(path) as appender:
        appender.write({"id": 3})
    assert path.read_text() == '{"id": 1}\n{"id": 3}\n'
    assert read_jsonl(tmp_path / "missing.jsonl") == []


def test_decode_workers_reach_the_video_reader(tmp_path, video_root, monkeypatch):
    import cader.evaluate.runner as runner_module

    root, name = video_root
    opened = []
    real_reader = runner_module.VideoReader

    def recording_reader(path, **kwargs):
        reader = real_reader(path, **kwargs)
        opened.append(reader.decode_workers)
        return reader

    monkeypatch.setattr(runner_module, "VideoReader", recording_reader)
    run(make_samples(name, 2), root, tmp_path / "p.jsonl", ScriptedBackend(logits_map(2)), decode_workers=3)
    assert opened == [3, 3]
    with pytest.raises(ValueError, match="decode_workers"):
        CaderConfig(decode_workers=0)


def test_a_complete_last_record_without_its_newline_is_kept_on_resume(tmp_path, video_root):
    """read_jsonl counts it as done, so the repair must keep it (adding the newline), not cut it."""
    root, name = video_root
    samples = make_samples(name, 3)
    out = tmp_path / "predictions.jsonl"
    run(samples[:2], root, out, ScriptedBackend(logits_map(4)))
    out.write_text(out.read_text().rstrip("\n"))  # a writer stopped between the record and its newline
    assert len(read_records(out)) == 2
    run(samples, root, out, ScriptedBackend(logits_map(4)))
    ids = [r["sample_id"] for r in read_records(out)]
    assert sorted(ids) == sorted(s.sample_id for s in samples) and len(ids) == 3
    assert all(json.loads(line) for line in out.read_text().splitlines())


def test_jsonl_repair_keeps_a_complete_tail_and_cuts_a_torn_one(tmp_path):
    from cader.contracts.jsonl import JsonlAppender, read_jsonl

    path = tmp_path / "results.jsonl"
    path.write_text('{"id": 1}\n{"id": 2}')
    with JsonlAppender(path) as appender:
        appender.write({"id": 3})
    assert read_jsonl(path) == [{"id": 1}, {"id": 2}, {"id": 3}]
    path.write_text('{"id": 1}\n[1, 2]')  # parses, but is no record: cut
    repair_torn_tail(path)
    assert path.read_text() == '{"id": 1}\n'


def test_retry_failed_reruns_failed_samples_and_replaces_their_records(tmp_path, video_root):
    root, name = video_root
    samples = make_samples(name, 3)
    out = tmp_path / "predictions.jsonl"
    broken = logits_map(3) | {"q1": RuntimeError("CUDA out of memory")}
    run(samples, root, out, ScriptedBackend(broken))
    assert [r["error"] is not None for r in read_records(out)] == [False, True, False]
    counts = run(samples, root, out, ScriptedBackend(logits_map(3)))  # a plain rerun keeps the failure
    assert counts["ran"] == 0 and sum(r["error"] is not None for r in read_records(out)) == 1
    counts = run_samples(samples, root, out, ScriptedBackend(logits_map(3)), ScriptedBackend(logits_map(3)),
                         CaderConfig(max_frames=8, max_pixels=2048), video_path=lambda s, r: r / s.video,
                         progress=False, retry_failed=True)
    records = read_records(out)
    assert counts["retried"] == 1 and counts["ran"] == 1 and len(records) == 3
    assert all(r["error"] is None for r in records)
    assert sorted(r["sample_id"] for r in records) == sorted(s.sample_id for s in samples)


def test_stage1_is_reused_across_variants_and_refused_for_another_setting(tmp_path, video_root):
    """A no_stage2 run's raw logits stand in for the full run's Stage 1 (no Stage-1 forward, no F1 decode for exits),
    with the margin recomputed at the current T; other frame settings are refused with the reason."""
    from cader.evaluate.method.stage1_reuse import Stage1ReuseError
    from cader.evaluate.runner import load_stage1_priors

    root, name = video_root
    samples = make_samples(name, 4)
    first = tmp_path / "no_stage2.jsonl"
    run(samples, root, first, ScriptedBackend(logits_map(4)), variant="no_stage2")
    priors = load_stage1_priors(first)
    assert len(priors) == 4 and all(p["fingerprint"]["frames"]["max_frames"] == 8 for p in priors.values())

    fresh, reused = ScriptedBackend(logits_map(4)), ScriptedBackend(logits_map(4))
    cfg = CaderConfig(max_frames=8, max_pixels=2048, temperature=3.0)
    kw = {"video_path": lambda s, r: r / s.video, "progress": False}
    run_samples(samples, root, tmp_path / "fresh.jsonl", fresh, fresh, cfg, **kw)
    counts = run_samples(samples, root, tmp_path / "reused.jsonl", reused, reused, cfg, stage1_priors=priors, **kw)
    assert counts["stage1_reused"] == 4
    a, b = read_records(tmp_path / "fresh.jsonl"), read_records(tmp_path / "reused.jsonl")
    for x, y in zip(a, b):
        assert x["stage1"]["logits"] == y["stage1"]["logits"] and y["stage1"]["reused"]
        assert y["stage1"]["margin"] == pytest.approx(x["stage1"]["margin"]) and y["stage1"]["temperature"] == 3.0
        assert (x["route"], x["pred"]) == (y["route"], y["pred"])
        assert y["cost"]["forwards"] == x["cost"]["forwards"] - 1  # the Stage-1 forward is saved
        if y["route"] == "exit":
            assert y["cost"]["frames_decoded"] == 0
    with pytest.raises(Stage1ReuseError, match="Stage-1 frame settings differs"):
        run_samples(samples, root, tmp_path / "other.jsonl", reused, reused,
                    CaderConfig(max_frames=4, max_pixels=2048), stage1_priors=priors, **kw)
    assert not (tmp_path / "other.jsonl").exists() or read_records(tmp_path / "other.jsonl") == []


# ---- wall-clock time apart from the records ------------------------------------------------------------------------


def test_two_runs_at_different_speeds_write_byte_identical_predictions(tmp_path, video_root, monkeypatch):
    from cader.evaluate.method import stage1

    root, name = video_root
    samples = make_samples(name, n=4)
    files = {}
    for run_name, step in (("fast", 0.25), ("slow", 7.5)):
        # this machine's clock: every sample takes `step` seconds
        monkeypatch.setattr(stage1.Cost, "stop", lambda cost, step=step: setattr(cost, "seconds", step))
        out = tmp_path / run_name / "predictions.jsonl"
        run(samples, root, out, ScriptedBackend(logits_map(4)))
        files[run_name] = out
    assert files["fast"].read_bytes() == files["slow"].read_bytes()   # what `cmp` compares
    assert all("seconds" not in r["cost"] for r in read_records(files["fast"]))
    fast, slow = read_timings(files["fast"]), read_timings(files["slow"])
    assert set(fast) == set(slow) == {("bench", f"s{i}") for i in range(4)}
    assert set(fast.values()) == {0.25} and set(slow.values()) == {7.5}
    report = write_report(tmp_path / "slow", read_records(files["slow"]))
    assert report["timing"] == {"n_timed": 4, "seconds": {"total": 30.0, "per_sample": 7.5}}
    assert "seconds" not in report["cost"]["total"]


def test_timings_follow_shards_into_the_merge_and_a_rerun_line_counts(tmp_path, video_root):
    root, name = video_root
    samples = make_samples(name, n=4)
    for i in range(2):
        shard = (i, 2)
        run(select_samples(samples, shard=shard), root, predictions_path(tmp_path, shard), ScriptedBackend(logits_map(4)))
    assert timings_path(predictions_path(tmp_path, (1, 2))).name == "timings.shard-1-of-2.jsonl"
    target, n = merge_shards(tmp_path)
    assert timings_path(target) == tmp_path / "timings.jsonl" and n == 4
    assert set(read_timings(target)) == {("bench", f"s{i}") for i in range(4)}
    with (tmp_path / "timings.jsonl").open("a") as handle:   # a --retry_failed rerun of s0 appends its own line
        handle.write('{"benchmark": "bench", "sample_id": "s0", "seconds": 99.0}\nnot json\n')
    assert read_timings(target)[("bench", "s0")] == 99.0
    assert timings_path(tmp_path / "out.jsonl") == tmp_path / "out.timings.jsonl"
