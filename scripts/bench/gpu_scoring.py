"""Stage-1 scoring and verifier forwards on ONE GPU through the HF backend's own scoring path
(`HFBackend._last_logits`: no KV cache, the last position alone onto the vocabulary), at the released widths with the
language model cut to the depths `gpu_run.py` chose, under each attention kernel torch's SDPA offers.

- stage1: Qwen3-VL-8B's widths (`cader.vlm.flops`, the full 27-layer vision tower), one Stage-1 prompt of 768 frames
  at 256x256 = 65,536 px (`CaderConfig().max_frames`, App. A): 27.6k tokens, built as B16 builds its prompts
  (`scoring_memory.stage1_prompts`).
- verifier: Qwen3-VL-4B's widths (`QWEN3_VL_4B_*`: hidden 2560, intermediate 9728, 32/8 heads; a 24-layer vision
  tower of width 1024) on a crop of N_budget = 512 frames (`CaderConfig().n_budget`, the most a crop gets): 18.6k
  tokens.

The weights are random (no download), the vocabulary the tiny tokenizer's (the scoring forward projects one position
onto it; the FLOPs count the released vocabulary there), bf16, `attn_implementation="sdpa"`. The model is saved once
at the deeper depth and loaded through `HFBackend`, then cut to the shallower one in place (the layers are
identical). The prompt is encoded once (`encode_s`, the processor's CPU seconds) and replayed to every call. Each
kernel gets one warm-up call and `repeats` timed ones; `call_s` is the whole scoring call (the host-to-GPU copy
included), the forward and the vision tower are timed with CUDA events from forward hooks. An out-of-memory or a kernel that refuses the inputs is recorded as that kernel's error.
"""

from __future__ import annotations

import gc
import statistics
import tempfile
import time
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import torch
from cader.scripts.bench.gpu_sft_step import (
    TINY_TEXT,
    TINY_VISION,
    extrapolate,
    mrope_section,
    peak_flops_of,
    vision_config,
)
from cader.scripts.bench.harness import write_qwen3vl
from cader.vlm.flops import (
    QWEN3_VL_4B_TEXT,
    QWEN3_VL_4B_VISION,
    QWEN3_VL_8B_TEXT,
    QWEN3_VL_8B_VISION,
    TextShape,
    VisionShape,
    text_forward_flops,
    vision_forward_flops,
)

SHAPES = {"8b": (QWEN3_VL_8B_TEXT, QWEN3_VL_8B_VISION), "4b": (QWEN3_VL_4B_TEXT, QWEN3_VL_4B_VISION),
          "tiny": (TINY_TEXT, TINY_VISION)}
KERNELS = ("default", "flash", "efficient", "math")  # "default": SDPA's own choice, as the backend runs


def prompt_tokens_for(frames: int) -> int:
    """The `tokens` that makes `scoring_memory.stage1_prompts` build `frames` frames (72 tokens a temporal pair)."""
    return 120 + 36 * frames


def build_scoring_model(out_dir: str, shape: str, layers: int, device: str, dtype: torch.dtype) -> str:
    """`shape`'s widths, `layers` text layers, the tiny tokenizer and processor (B16's `build_model`, with the full
    vision tower), random weights, saved in `dtype`."""
    text, vision = SHAPES[shape]
    widths = {"hidden_size": text.hidden, "intermediate_size": text.intermediate, "num_hidden_layers": layers,
              "num_attention_heads": text.heads, "num_key_value_heads": text.kv_heads, "head_dim": text.head_dim}
    write_qwen3vl(out_dir, widths, vision_config(vision), mrope_section(text.head_dim), dtype, device)
    return out_dir


class ForwardClock:
    """Seconds spent in a module's forward calls: CUDA events from forward hooks on a GPU (no host sync inside the
    forward), the host clock on a CPU."""

    def __init__(self, module: torch.nn.Module, cuda: bool):
        self.cuda, self.spans, self._begin = cuda, [], None
        module.register_forward_pre_hook(lambda *_: setattr(self, "_begin", self._mark()))
        module.register_forward_hook(lambda *_: self.spans.append((self._begin, self._mark())))

    def _mark(self):
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def take(self) -> float:
        """The seconds of the calls since the last take."""
        if self.cuda:
            torch.cuda.synchronize()
            seconds = sum(start.elapsed_time(end) for start, end in self.spans) / 1e3
        else:
            seconds = sum(end - start for start, end in self.spans)
        self.spans = []
        return seconds


def kernel_context(kernel: str):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    chosen = {"default": None, "flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
              "math": SDPBackend.MATH}[kernel]
    return nullcontext() if chosen is None else sdpa_kernel([chosen])


def time_kernel(backend, prompt, kernel: str, repeats: int, clocks: dict, cuda: bool) -> dict:
    """One warm-up and `repeats` timed scoring calls under `kernel`: median forward, vision-tower and call seconds,
    peak memory over the weights; or the error that stopped it."""
    try:
        with kernel_context(kernel):
            backend._last_logits([prompt])
            for clock in clocks.values():
                clock.take()
            if cuda:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated() if cuda else 0
            calls, forwards, visions, out = [], [], [], None
            for _ in range(repeats):
                start = time.perf_counter()
                out = backend._last_logits([prompt])
                if cuda:
                    torch.cuda.synchronize()
                calls.append(time.perf_counter() - start)
                forwards.append(clocks["forward"].take())
                visions.append(clocks["vision"].take())
    except RuntimeError as err:  # torch.OutOfMemoryError is one; so is SDPA's "No available kernel"
        for clock in clocks.values():
            clock.spans = []
        gc.collect()  # what the failed call held, before the next kernel's
        if cuda:
            torch.cuda.empty_cache()
        return {"kernel": kernel, "error": f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"}
    logits, prompt_len = out[0]
    return {"kernel": kernel, "call_s": statistics.median(calls), "forward_s": statistics.median(forwards),
            "vision_s": statistics.median(visions), "prompt_tokens": prompt_len,
            "peak_over_weights_gib": (torch.cuda.max_memory_allocated() - base) / 2**30 if cuda else None,
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
            # one vector of vocabulary logits per prompt is what letter_logits and yes_no index
            "logits_shape": list(logits.shape)}


def cut_depth(model, layers: int) -> None:
    """Keep the first `layers` decoder layers of the language model (the forward runs over `self.layers`)."""
    language_model = model.model.language_model
    language_model.layers = language_model.layers[:layers]
    language_model.config.num_hidden_layers = layers


def forward_flops(text: TextShape, vision: VisionShape, layers: int, seq: int, grid: list) -> tuple[float, float]:
    """(language model, vision tower) FLOPs of one scoring forward: every position through the layers, the last one
    alone onto the released vocabulary."""
    lm = text_forward_flops(replace(text, layers=layers, vocab=0), seq) + 2 * text.hidden * text.vocab
    return lm, vision_forward_flops(vision, grid)


def add_rates(row: dict, lm: float, vit: float, peak: float | None) -> dict:
    if "forward_s" in row:
        row["prefill_tokens_per_s"] = row["prompt_tokens"] / row["forward_s"]
        row["mfu_lm"] = lm / (row["forward_s"] - row["vision_s"]) / peak if peak else None
        row["mfu_lm_plus_vit"] = (lm + vit) / row["forward_s"] / peak if peak else None
    return row


def run_scoring(role: str = "stage1", shape: str = "8b", depths: list[int] = (4, 8), frames: int = 768,
                kernels: list[str] = KERNELS, repeats: int = 2, model_dir: str | None = None) -> dict:
    """Build, load and time one role's scoring forwards at each depth and kernel (run in a fresh process).

    Args:
        role: "stage1" (the main model's letter scoring) or "verifier" (its P(Yes) on a crop): the same path.
        shape: "8b", "4b" or "tiny" (CPU rehearsal).
        depths: Text layers to measure (the model is saved at the deepest and cut in place).
        frames: Video frames in the prompt (256x256 each).
        kernels: SDPA kernels to try, of `KERNELS`.
        repeats: Timed calls per kernel (the median is kept).
        model_dir: Where to save the model (default: a temporary folder, removed after).
    """
    from cader.evaluate.backends.hf import HFBackend
    from cader.scripts.bench.scoring_memory import stage1_prompts

    cuda = torch.cuda.is_available()
    device, dtype = ("cuda", torch.bfloat16) if cuda else ("cpu", torch.float32)
    text, vision = SHAPES[shape]
    depths = sorted(depths, reverse=True)
    with tempfile.TemporaryDirectory(prefix="gpu_scoring_") as tmp:
        folder = model_dir or str(Path(tmp) / "model")
        start = time.perf_counter()
        build_scoring_model(folder, shape, depths[0], device, dtype)
        gc.collect()
        backend = HFBackend(folder, dtype=str(dtype).removeprefix("torch."), device=device,
                            attn_implementation="sdpa", batch_size=1)
        setup_s = time.perf_counter() - start
        prompt = stage1_prompts(1, prompt_tokens_for(frames))[0]
        start = time.perf_counter()
        staged = backend._staged(prompt)
        encode_s = time.perf_counter() - start
        seq, grid = int(staged["input_ids"].shape[-1]), [tuple(g) for g in staged["video_grid_thw"].tolist()]
        # the processor's CPU work is the same every call (seconds for 768 frames): encoded once, timed above, and
        # replayed to the backend's scoring path, which moves it to the GPU and runs the forward as always
        backend._staged = lambda p: staged if p is prompt else HFBackend._staged(backend, p)
        clocks = {"forward": ForwardClock(backend.model, cuda), "vision": ForwardClock(backend.model.model.visual, cuda)}
        peak = peak_flops_of(torch.cuda.get_device_name() if cuda else "cpu")
        rows = []
        for layers in depths:
            cut_depth(backend.model, layers)
            lm, vit = forward_flops(text, vision, layers, seq, grid)
            for kernel in kernels:
                rows.append({"layers": layers, **add_rates(time_kernel(backend, prompt, kernel, repeats, clocks, cuda),
                                                           lm, vit, peak)})
    return {"role": role, "shape": shape, "frames": frames, "prompt_tokens": seq, "grid_thw": grid,
            "setup_s": setup_s, "encode_s": encode_s, "peak_flops": peak, "runs": rows,
            "extrapolated": extrapolated(rows, text, vision, seq, grid, peak)}


def extrapolated(rows: list[dict], text: TextShape, vision: VisionShape, seq: int, grid: list,
                 peak: float | None) -> dict:
    """Per kernel measured at two or more depths: the forward at the full depth along the straight line through
    them, and the MFU and prefill tokens/s it implies (labelled as not measured)."""
    out = {}
    for kernel in dict.fromkeys(r["kernel"] for r in rows):
        done = [r for r in rows if r["kernel"] == kernel and "forward_s" in r]
        if len({r["layers"] for r in done}) < 2:
            continue
        depths = [r["layers"] for r in done]
        seconds = extrapolate(depths, [r["forward_s"] for r in done], text.layers)
        lm, vit = forward_flops(text, vision, text.layers, seq, grid)
        out[kernel] = {"what": f"extrapolated to {text.layers} layers from the depths {sorted(set(depths))} "
                               "(not measured)",
                       "forward_s": seconds, "prefill_tokens_per_s": seq / seconds,
                       "mfu_lm_plus_vit": (lm + vit) / seconds / peak if peak else None}
    return out
