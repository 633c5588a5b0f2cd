"""How the lmms-eval model answers a call's requests (no lmms-eval needed): grouped by video, replies in request
order, bad documents recorded as failed, duplicates run once, resume from the side file by doc hash, samples in
flight through batching wrappers, the records of `cader eval`'s grouped runner at any concurrency, multi-process
launches refused, the vLLM backend choice, and a document whose doc_to_visual stops failing alone."""

import json

import pytest
from cader.contracts.jsonl import read_jsonl
from cader.dev.scripted import ScriptedBackend
from cader.evaluate.lmms.answering import (
    DocRequest,
    SideFile,
    answer_requests,
    load_backends,
    run_grouped,
    single_process_problem,
)
from cader.evaluate.lmms.docs import UnsupportedTask, sample_from_doc
from cader.evaluate.method.config import CaderConfig
from cader.evaluate.runner import run_samples


def videomme_doc(i: int, video: str) -> dict:
    return {"question_id": f"{i:03d}-1", "videoID": video, "duration": "long", "question": f"How many in {i}?",
            "options": ["A. 1", "B. 2", "C. 3", "D. 4"], "answer": "ABCD"[i % 4]}


def to_visual(doc):
    return [f"/videos/{doc['videoID']}.mp4"]


def request(doc_id: int, doc: dict, task: str = "videomme_long") -> DocRequest:
    return DocRequest(task, "test", doc_id, doc, to_visual)


class Recorder:
    """A stand-in for CADER: records which samples it ran, in which order; answers each with its gold letter."""

    def __init__(self):
        self.ran = []

    def __call__(self, samples):
        for sample in samples:
            self.ran.append(sample.sample_id)
            yield {"benchmark": sample.benchmark, "sample_id": sample.sample_id, "video": sample.video,
                   "pred": sample.answer, "correct": True, "error": None}


def never(samples):
    assert not samples, f"ran again: {[s.sample_id for s in samples]}"
    return iter(())


def test_one_process_only():
    assert single_process_problem({}) is None and single_process_problem({"WORLD_SIZE": "1"}) is None
    problem = single_process_problem({"WORLD_SIZE": "4", "RANK": "0"})
    assert "WORLD_SIZE=4" in problem and "every 4th document" in problem and "concurrency=N" in problem
    assert "not a process count" in single_process_problem({"WORLD_SIZE": "two"})


def test_interleaved_videos_run_grouped_and_replies_come_back_in_request_order(tmp_path):
    side_path = tmp_path / "side.jsonl"
    docs = [videomme_doc(i, "vidA" if i % 2 == 0 else "vidB") for i in range(4)]
    broken = {"question_id": "bad", "videoID": "vidA", "question": "no options"}
    asked = [request(0, docs[0]), request(1, docs[1]), request(4, broken), request(2, docs[2]), request(3, docs[3]),
             request(1, docs[1])]  # doc 1 twice: lmms-eval clones a request `repeats` times
    side, run = SideFile(side_path), Recorder()
    records = answer_requests(asked, side, run, progress=False)
    assert run.ran == ["000-1", "002-1", "001-1", "003-1"]  # vidA's questions, then vidB's; doc 1 once
    assert [r["pred"] for r in records] == ["A", "B", None, "C", "D", "B"]
    assert records[2]["error"].startswith("bad_sample: videomme_long doc 4: no 'options' field")
    assert side.failures == 1
    lines = [json.loads(line) for line in side_path.read_text().splitlines()]
    assert [r["lmms"]["doc_id"] for r in lines] == [4, 0, 2, 1, 3]  # failed at once, then as they ran
    assert all(r["lmms"]["task"] == "videomme_long" and r["lmms"]["split"] == "test" for r in lines)


def test_a_rerun_reuses_the_side_file_and_reruns_a_changed_document(tmp_path):
    side_path = tmp_path / "side.jsonl"
    docs = [videomme_doc(i, "vidA") for i in range(3)]
    first = answer_requests([request(i, d) for i, d in enumerate(docs)], SideFile(side_path), Recorder(), False)
    again = answer_requests([request(i, d) for i, d in enumerate(docs)], SideFile(side_path), never, False)
    assert again == first
    changed = {**docs[1], "answer": "D"}  # another dataset revision: another doc hash, so not a resume
    run = Recorder()
    records = answer_requests([request(0, docs[0]), request(1, changed)], SideFile(side_path), run, False)
    assert run.ran == ["001-1"] and [r["pred"] for r in records] == ["A", "D"]


def test_an_interrupted_run_keeps_what_it_finished(tmp_path):
    side_path = tmp_path / "side.jsonl"
    docs = [videomme_doc(i, "vidA") for i in range(3)]

    def dies_on_the_third(samples):
        for done, record in enumerate(Recorder()(samples)):
            if done == 2:
                raise KeyboardInterrupt
            yield record

    with pytest.raises(KeyboardInterrupt):
        answer_requests([request(i, d) for i, d in enumerate(docs)], SideFile(side_path), dies_on_the_third, False)
    run = Recorder()
    answer_requests([request(i, d) for i, d in enumerate(docs)], SideFile(side_path), run, False)
    assert run.ran == ["002-1"]


def test_an_unsupported_task_is_refused_before_anything_is_written(tmp_path):
    side_path = tmp_path / "side.jsonl"
    with pytest.raises(UnsupportedTask, match="'mmmu_val' is not supported"):
        answer_requests([request(0, videomme_doc(0, "v")), request(0, {}, task="mmmu_val")], SideFile(side_path),
                        never, False)
    assert not side_path.exists() or side_path.read_text() == ""


def test_backend_vllm_takes_the_config_files_engines(monkeypatch):
    import cader.evaluate.backends.vllm as vllm_module

    made = []

    class FakeVLLM:
        def __init__(self, path, *, dtype, engine):
            made.append((path, dtype, engine))

    monkeypatch.setattr(vllm_module, "VLLMBackend", FakeVLLM)
    kwargs = {"device": "cpu", "verifier_device": None, "dtype": "float32", "attn_implementation": None}
    main, verifier = load_backends("vllm", "M", "V", engines={"vllm_main": {"enforce_eager": True,
                                                                              "max_model_len": 4096}}, **kwargs)
    assert [m[0] for m in made] == ["M", "V"] and main is not verifier
    assert made[0][2] == vllm_module.VLLMEngineConfig(enforce_eager=True, max_model_len=4096)
    assert made[1][2] == vllm_module.VERIFIER_ENGINE  # no vllm_verifier: the default that shares a GPU
    made.clear()
    main, verifier = load_backends("vllm", "M", "M", engines={}, **kwargs)
    assert main is verifier and len(made) == 1
    with pytest.raises(ValueError, match="backend='tgi'; choose one of hf, vllm"):
        load_backends("tgi", "M", "V", engines={}, **kwargs)


def test_the_records_are_cader_evals_grouped_records_at_any_concurrency(tmp_path, barcode_video):
    videos = {}
    for name in "ab":  # the barcode file under two names: two videos to the readers
        videos[name] = tmp_path / f"{name}.mp4"
        videos[name].symlink_to(barcode_video)
    order = "abaab"  # lmms-eval asks in dataset order: the videos alternate
    docs = [videomme_doc(i, name) for i, name in enumerate(order)]

    def visual(doc):
        return [str(videos[doc["videoID"]])]

    asked = [DocRequest("videomme_long", "test", i, doc, visual) for i, doc in enumerate(docs)]
    unsure, confident = [0.0, 0.1, 0.0, 0.0], [0.0, 40.0, 0.0, 0.0]
    logits = {doc["question"]: confident if i == 2 else unsure for i, doc in enumerate(docs)}
    cfg = CaderConfig(max_frames=8, max_pixels=2048, max_new_tokens_propose=16, max_new_tokens_answer=16)
    runs = {}
    for level in (1, 2):
        side = SideFile(tmp_path / f"side{level}.jsonl")
        backend = ScriptedBackend(logits)
        records = answer_requests(asked, side, lambda s, b=backend, n=level: run_grouped(s, b, b, cfg, n),
                                  progress=False)
        assert [r["lmms"]["doc_id"] for r in records] == [0, 1, 2, 3, 4]  # request order
        runs[level] = [{k: v for k, v in r.items() if k != "lmms"} for r in read_jsonl(side.path)]
    samples = [sample_from_doc("videomme_long", doc, i, visual(doc)[0]) for i, doc in enumerate(docs)]
    backend = ScriptedBackend(logits)   # one model in both roles, as in the lmms-eval runs above
    run_samples(samples, tmp_path, tmp_path / "cader.jsonl", backend, backend, cfg,
                video_path=lambda s, _root: s.video, progress=False, group_by_video=True)
    runs["cader eval"] = read_jsonl(tmp_path / "cader.jsonl")
    for name, records in runs.items():
        runs[name] = [{**r, "cost": {k: v for k, v in r["cost"].items() if k != "seconds"}} for r in records]
    assert runs[1] == runs[2]  # the first in order pays a shared decode, whichever thread made it
    assert runs[2] == runs["cader eval"]  # the runner's own records_of: the same records, shared cost included
    assert [r["sample_id"] for r in runs[2]] == ["000-1", "002-1", "003-1", "001-1", "004-1"]  # video by video
    assert [r["route"] for r in runs[2]] == ["stage2", "exit", "stage2", "stage2", "stage2"]
    # the first question of each video pays its whole-video decode (F1 and the r1 lattice the RGR contexts take
    # from: 67 frames of this video); the later ones take it from the group, and those in Stage 2 also the crop an
    # earlier question of the video asked for (the scripted proposal: 8 more)
    assert [r["cost"]["frames_shared"] for r in runs[2]] == [0, 67, 75, 0, 75]
    assert all(r["cost"]["forwards_shared"] == 0 for r in runs[2])


def test_a_document_whose_doc_to_visual_stops_fails_alone(tmp_path):
    """lmms-eval's task utils sys.exit (videomme, mlvu, videomme_v2) or assert (lvbench) on a missing video, which
    would end the run and lose every other answer; the document fails, the others are answered."""

    def missing(doc):
        if doc["videoID"] == "gone":
            raise SystemExit(f"video path:/hf/videomme/data/{doc['videoID']}.mp4 does not exist, please check")
        return to_visual(doc)

    def asserting(doc):
        assert doc["videoID"] != "gone"
        return to_visual(doc)

    side = SideFile(tmp_path / "side.jsonl")
    asked = [DocRequest("videomme_long", "test", 0, videomme_doc(0, "gone"), missing),
             DocRequest("videomme_long", "test", 1, videomme_doc(1, "here"), missing),
             DocRequest("lvbench", "train", 0, videomme_doc(2, "gone") | {"question": "q\n(A) x\n(B) y"}, asserting)]
    records = answer_requests(asked, side, Recorder())
    assert [r["pred"] for r in records] == [None, "B", None]
    assert records[0]["error"] == ("bad_sample: videomme_long doc 0: its doc_to_visual stopped (video path:"
                                   "/hf/videomme/data/gone.mp4 does not exist, please check)")
    assert records[2]["error"].startswith("bad_sample: lvbench doc 0: its doc_to_visual stopped (")


def test_the_weights_dtype_is_the_model_arg_else_the_config_files_else_the_papers_bf16():
    from pathlib import Path

    import yaml
    from cader.evaluate.lmms.answering import weights_dtype

    configs = Path(__file__).resolve().parents[1] / "configs/eval"
    paper, tiny = (yaml.safe_load((configs / name).read_text()) for name in ("cader.yaml", "cader_tiny.yaml"))
    assert weights_dtype(None, paper) == "bfloat16"   # the paper's config on a GPU: not an fp32 8B
    assert weights_dtype("float16", paper) == "float16"
    assert weights_dtype(None, tiny) == "float32"     # the CPU config says so
    assert weights_dtype(None, {}) == "bfloat16"      # no config: the paper's precision, never a silent fp32
