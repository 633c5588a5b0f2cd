"""What an evaluate/run.py run is, besides CADER's own settings (CaderConfig): its models, inputs, outputs, runtime and
parallelism. Each field is a flag of evaluate/run.py, its help the field's entry below (`cader.cli.function_cli`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from cader.contracts.paper import PAPER
from cader.evaluate.backends.server import ServerOptions
from cader.evaluate.backends.vllm import VERIFIER_ENGINE, VLLMEngineConfig


@dataclass
class RunOptions:
    """The run's flags, beside CaderConfig's.

    Attributes:
        out: output folder: predictions.jsonl, report.json/md, load_errors.json
        model: main VLM: HF folder or hub id (the paper's: Qwen/Qwen3-VL-8B-Instruct, or its SFT export)
        verifier: verifier VLM: HF folder or hub id (default: the paper's Qwen/Qwen3-VL-4B-Instruct);
            main_model: the main model verifies its own crops, which is not the paper's Stage 2 and costs about
            twice the 4B verifier (report.json and every Stage-2 record say which verifier ran)
        benchmark: benchmark to run, a registered name (`python -m cader.evaluate.benchmarks` lists them)
        data_root: folder holding the benchmarks' released layouts (or the benchmark's own folder)
        calibration: calibration.json from calibrate/fit.py; its T and tau override --temperature and --tau
        limit: run only the first N samples of the benchmark
        shard: run shard I of N (I/N, 0 <= I < N): whole videos, balanced by duration, written to its own file
        merge: join the shard files in --out into predictions.jsonl and write the report; runs nothing
        compare: another run's predictions.jsonl, compared with this run in the report
        backend: model runtime: transformers (hf), vLLM in this process (vllm), or vLLM OpenAI servers (server:
            --model_urls, --verifier_urls; docs/serving.md)
        device: torch device of the HF backend (cpu, cuda, cuda:1)
        dtype: weights dtype: bfloat16 (the paper's), float16, float32 (the CPU configs'), auto (the checkpoint's)
        attn_implementation: HF attention kernel (sdpa, flash_attention_2, eager; null: transformers' choice)
        hf_max_batch_tokens: HF backend: padded tokens (prompts x longest prompt) one forward may hold; a prompt
            over it runs alone (one 27k-token Stage-1 prompt of the 8B already fills a GPU)
        progress: a tqdm bar with ETA
        vllm_main: the main model's vLLM engine (memory share, max_model_len, tensor parallel, eager)
        vllm_verifier: the verifier's vLLM engine; the defaults let 8B + 4B share one 80 GB GPU
        model_urls: --backend server: base URLs of the main model's replicas, comma separated
            (http://node1:8000,http://node2:8000); --model is still its folder or hub id (its processor is read here)
        verifier_urls: --backend server: the verifier's replicas (default: --model_urls, when the verifier is the
            main model: --verifier main_model)
        server: --backend server: requests in flight per replica, time-out, retries, back-off, the environment
            variable holding an API key (never a flag)
        accept_calibration_mismatch: use a --calibration certified under other settings (backbone, Stage-1 frames
            and pixels, benchmark); report.md then says its guarantee does not transfer
        stage1_from: reuse the raw Stage-1 logits of another run's predictions.jsonl (same model, frame settings and
            samples; T and tau are applied anew); samples not in it run Stage 1 as usual
        devices: processes (GPUs) on this node: torchrun starts one rank per device, each a shard; the launcher
            merges the shards and writes the report
        num_nodes: nodes; run the same command on each with MASTER_ADDR, MASTER_PORT and NODE_RANK set
        variants: several Table 2 rows in one pass ('all' or a comma list of variants): each sample runs every
            variant before the next, sharing decoded frames and repeated model calls; writes
            <out>/<variant>/predictions.jsonl and a report per variant
        concurrency: samples in flight; their model calls are merged into batched calls (vLLM gets every pending
            request at once, the HF backend left-padded batches)
        group_by_video: take a video's questions together: one reader and one decode of each frame request per
            video, shared by its questions and variants (records as per question, plus
            cost.frames_shared/forwards_shared); false: every question opens and decodes its video on its own
        retry_failed: run again the samples whose record has `error` set, replacing those records
    """

    out: str
    model: str | None = None
    verifier: str = PAPER.verifier
    benchmark: str | None = None
    data_root: str | None = None
    calibration: str | None = None
    limit: int | None = None
    shard: str | None = None
    merge: bool = False
    compare: str | None = None
    backend: Literal["hf", "vllm", "server"] = "hf"
    device: str = "cpu"
    dtype: str = PAPER.dtype
    attn_implementation: str | None = None
    hf_max_batch_tokens: int = 8192
    progress: bool = True
    vllm_main: VLLMEngineConfig = field(default_factory=VLLMEngineConfig)
    vllm_verifier: VLLMEngineConfig = field(default_factory=lambda: VERIFIER_ENGINE)
    model_urls: str | None = None
    verifier_urls: str | None = None
    server: ServerOptions = field(default_factory=ServerOptions)
    accept_calibration_mismatch: bool = False
    stage1_from: str | None = None
    devices: int = 1
    num_nodes: int = 1
    variants: str | None = None
    concurrency: int = 1
    group_by_video: bool = True
    retry_failed: bool = False
