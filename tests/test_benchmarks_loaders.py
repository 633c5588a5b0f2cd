"""Every benchmark loader on the generated synthetic layouts: counts, letters, answers, windows, ids."""

import importlib
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import cader.evaluate.benchmarks as benchmarks_package
import numpy as np
import pytest
from benchmark_facts import facts_of
from cader.dev.synthetic.eval_sets import write_eval_sets, writer_of
from cader.evaluate.benchmarks import (
    LETTERS,
    Benchmark,
    available,
    benchmarks,
    get_benchmark,
    load_benchmark,
    macro_metric,
    released,
    video_path,
)

N_EVAL = 7


@pytest.fixture(scope="module")
def eval_root(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    # the evaluation half of make_synthetic_data (the training mix is not needed here)
    write_eval_sets(out / "eval", np.random.default_rng(11), N_EVAL, 5, {"duration_range": (12, 20)})
    return out / "eval"


@pytest.fixture(scope="module")
def manifest(eval_root):
    return json.loads((eval_root / "manifest.json").read_text())["benchmarks"]


def test_every_benchmark_states_its_facts():
    for benchmark in benchmarks():
        facts = facts_of(benchmark)
        assert facts, f"{benchmark.name}: no tests/fixtures/{benchmark.folder}/facts.json (see benchmark_facts.py)"
        assert {"annotations", "states_duration_seconds"} <= set(facts), benchmark.name
        # a released benchmark names the release's annotation files (its schema test); the synthetic task has none
        assert bool(facts["annotations"]) == benchmark.released, benchmark.name


def test_registry_finds_every_loader_module():
    # every module of the package but base registers at least one name, and every name comes back from available()
    package = Path(benchmarks_package.__file__).parent
    for path in sorted(package.glob("[!_]*.py")):
        if path.stem == "base":
            continue
        module = importlib.import_module(f"cader.evaluate.benchmarks.{path.stem}")
        registered = getattr(module, "BENCHMARKS", ()) + ((module.BENCHMARK,) if hasattr(module, "BENCHMARK") else ())
        assert registered, f"{path.name} registers no benchmark"
        assert all(get_benchmark(b.name) is b for b in registered)
    assert available() == sorted(b.name for b in benchmarks())
    assert [b.write_order for b in benchmarks()] == sorted(b.write_order for b in benchmarks())


def test_macro_metric_is_the_one_its_fixture_states():
    for benchmark in benchmarks():
        assert macro_metric(benchmark.name) == facts_of(benchmark).get("macro_metric"), benchmark.name
    assert macro_metric("not a registered benchmark") is None and macro_metric(None) is None


def test_a_misspelt_registration_fails_naming_the_benchmark():
    load = get_benchmark("synthetic").load
    with pytest.raises(ValueError, match="'mine': synthetic_size 'evaluation'"):
        Benchmark("mine", "mine", load, "cader.dev.synthetic.eval_sets:write_mine", synthetic_size="evaluation")
    with pytest.raises(ValueError, match="'mine': synthetic_writer 'write_mine' is not 'module:function'"):
        Benchmark("mine", "mine", load, "write_mine")


def test_a_writer_that_names_nothing_is_an_error_naming_the_benchmark():
    mine = Benchmark("mine", "mine", get_benchmark("synthetic").load, "cader.dev.synthetic.eval_sets:write_mine")
    with pytest.raises(LookupError, match="benchmark 'mine': synthetic_writer .*write_mine' names no function"):
        writer_of(mine)
    assert all(callable(writer_of(b)) for b in benchmarks())


def test_names_print_for_shell_scripts():
    out = subprocess.run(
        [sys.executable, "-m", "cader.evaluate.benchmarks", "--real", "true"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == released() == [b.name for b in benchmarks() if b.released]
    assert set(out) < set(available())
    everything = subprocess.run(
        [sys.executable, "-m", "cader.evaluate.benchmarks"], capture_output=True, text=True, check=True
    ).stdout.split()
    assert everything == [b.name for b in benchmarks()] and sorted(everything) == available()


@pytest.mark.parametrize("name", available())
def test_loader_reproduces_the_generated_truth(name, eval_root, manifest):
    samples, errors = load_benchmark(name, eval_root)
    truth = manifest[name]["samples"]
    assert errors == []
    assert len(samples) == manifest[name]["expected_samples"] == len(truth)
    assert len({s.sample_id for s in samples}) == len(samples)
    for s in samples:
        expected = truth[s.sample_id]
        assert s.benchmark == name
        assert s.letters == list(LETTERS[: len(s.options)])
        assert s.answer == expected["answer"] and s.answer in s.letters
        assert s.video == expected["video"] and video_path(s, eval_root).is_file()
        assert s.meta["evidence_window"] == pytest.approx(expected["evidence_window"])
        assert s.meta["task_type"]
        assert s.meta["source_file"] and "row" in s.meta
        if facts_of(get_benchmark(name))["states_duration_seconds"]:  # Video-MME: only a category
            assert s.duration == pytest.approx(expected["duration"])
        if s.meta["task_type"] != "temporal grounding":  # LVBench time questions answer with a window
            assert s.options[LETTERS.index(s.answer)] == expected["colour"]


def test_loading_is_deterministic(eval_root):
    for name in available():
        assert load_benchmark(name, eval_root)[0] == load_benchmark(name, eval_root)[0]


def test_videomme_keeps_only_long_videos(eval_root):
    import pyarrow.parquet as pq

    table = pq.read_table(eval_root / "videomme" / "videomme" / "test-00000-of-00001.parquet").to_pylist()
    assert Counter(r["duration"] for r in table) == {"long": N_EVAL, "short": 1, "medium": 1}
    samples, _ = load_benchmark("videomme_long", eval_root)
    assert all(s.meta["duration_category"] == "long" for s in samples)
    assert all(not s.options[0].startswith("A.") for s in samples)  # "A. " prefixes stripped


def test_mlvu_task_types_cover_all_multiple_choice_tasks(eval_root):
    samples, _ = load_benchmark("mlvu_dev", eval_root)
    # the official scorer names each task after its annotation file (2_needle.json -> "needle")
    assert {s.meta["task_type"] for s in samples} == {
        "plotQA",
        "needle",
        "ego",
        "count",
        "order",
        "anomaly_reco",
        "topic_reasoning",
    }
    assert not any(s.sample_id.startswith(("8_", "9_")) for s in samples)  # generation tasks skipped


def test_lvbench_splits_options_from_question_and_parses_time_reference(eval_root):
    samples, _ = load_benchmark("lvbench", eval_root)
    assert all("(A)" not in s.question and len(s.options) == 4 for s in samples)
    assert {s.meta["task_type"] for s in samples} == {"key information retrieval", "temporal grounding"}
    timed = [s for s in samples if s.meta["task_type"] == "temporal grounding"]
    for s in timed:  # the correct option is the evidence window written as MM:SS-MM:SS
        start, end = s.meta["evidence_window"]
        assert s.options[LETTERS.index(s.answer)] == f"00:{int(start):02d}-00:{int(end):02d}"


def test_agentvidbench_has_26_letters_and_keeps_unknown_ecom_absent(eval_root):
    samples, _ = load_benchmark("agentvidbench", eval_root)
    assert all(s.letters == list(LETTERS) for s in samples)
    assert any("ecom_required" not in s.meta for s in samples)
    assert any("ecom_required" in s.meta for s in samples)
    assert all(
        s.meta["milestones"] and s.meta["difficulty"] and isinstance(s.meta["question_id"], int)
        for s in samples
    )


def test_data_root_may_point_at_the_benchmark_folder(eval_root):
    samples, _ = load_benchmark("longvideobench_val", eval_root / "longvideobench")
    assert len(samples) == N_EVAL
    assert video_path(samples[0], eval_root / "longvideobench").is_file()
