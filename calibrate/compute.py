"""Compute per sample in FLOPs: pure functions on token counts and the model's sizes (vlm/flops.py).

A model call is a prompt of P tokens and G generated tokens. With a KV cache, the prefill and the G decode steps do
the same matmuls as one causal forward over P + G tokens (each token's projections and MLP once, its attention
over the tokens before it), so a call costs ``text_forward_flops(shape, P + G)`` (2 FLOPs per multiply-add,
matmuls only, as vlm/flops.py counts them). The vision tower is not counted: the records carry no patch grids, and
published accuracy-compute curves of long-video methods count the language model (say so where a figure shows it).

Roles: ``stage1`` (the main model's Stage-1 scoring call), ``main`` (its Stage-2 proposals and answers) and
``verifier`` (the verifier's Yes/No calls, a model of its own size). A record's cost block then carries
``flops = {"stage1", "main", "verifier", "total"}`` (main includes stage1), which is what the frontier reads.

Records written before that block existed carry only token totals: ``estimated_sample_flops`` splits them evenly
over the record's calls (Stage 1 plus one call per propose/answer step and per verifier score), which counts every
matmul of the linear part exactly and the quadratic attention part approximately; the frontier marks such rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from cader.vlm.flops import QWEN3_VL_8B_TEXT, TextShape, text_forward_flops

ROLES = ("stage1", "main", "verifier")
GENERATE_PHASES = ("propose", "answer")


def text_shape_from_config(config: Mapping) -> TextShape:
    """A language model's sizes from an HF config.json (Qwen3-VL's ``text_config``, or a flat text config)."""
    text = config.get("text_config") or config
    heads = int(text["num_attention_heads"])
    hidden = int(text["hidden_size"])
    return TextShape(hidden=hidden, intermediate=int(text["intermediate_size"]), layers=int(text["num_hidden_layers"]),
                     heads=heads, kv_heads=int(text.get("num_key_value_heads") or heads),
                     head_dim=int(text.get("head_dim") or hidden // heads),
                     vocab=int(text.get("vocab_size") or config.get("vocab_size")))


def call_flops(shape: TextShape, prompt_tokens: float, completion_tokens: float = 0) -> float:
    """FLOPs of one call: a causal forward over prompt + generated tokens (module docstring)."""
    if prompt_tokens < 0 or completion_tokens < 0:
        raise ValueError(f"token counts must be >= 0, got {prompt_tokens}, {completion_tokens}")
    tokens = prompt_tokens + completion_tokens
    return text_forward_flops(shape, tokens) if tokens > 0 else 0.0


def sample_flops(calls: Iterable[tuple[str, float, float]], main: TextShape = QWEN3_VL_8B_TEXT,
                 verifier: TextShape | None = None) -> dict:
    """A sample's FLOPs by role from its calls, each (role, prompt tokens, generated tokens); ``verifier`` defaults
    to the main model's sizes (the same model, as in the quickstart). Returns {"stage1", "main", "verifier",
    "total"}, main including stage1."""
    out = dict.fromkeys(ROLES, 0.0)
    for role, prompt, completion in calls:
        if role not in ROLES:
            raise ValueError(f"unknown call role {role!r}; one of {ROLES}")
        out[role] += call_flops(verifier or main if role == "verifier" else main, prompt, completion)
    out["main"] += out["stage1"]
    out["total"] = out["main"] + out["verifier"]
    return out


def calls_of_record(record: Mapping) -> list[tuple[str, float, float]]:
    """The calls a predictions.jsonl record's token totals are spread over (an estimate; module docstring):
    Stage 1, one per propose/answer step (the generated tokens shared among them) and one per verifier score."""
    cost = record.get("cost") or {}
    steps = (record.get("stage2") or {}).get("steps") or []
    n_generate = sum(s.get("phase") in GENERATE_PHASES for s in steps)
    n_verify = sum(s.get("phase") == "verify" and s.get("p_yes") is not None for s in steps)
    n_calls = 1 + n_generate + n_verify
    prompt = float(cost.get("prompt_tokens") or 0) / n_calls
    generated = float(cost.get("completion_tokens") or 0) / n_generate if n_generate else 0.0
    return ([("stage1", prompt, 0.0)] + [("main", prompt, generated)] * n_generate
            + [("verifier", prompt, 0.0)] * n_verify)


def record_flops(record: Mapping, main: TextShape = QWEN3_VL_8B_TEXT, verifier: TextShape | None = None
                 ) -> tuple[dict, bool]:
    """(the record's FLOPs by role, whether they were estimated): its ``cost.flops`` block when it has one, else
    ``sample_flops`` of ``calls_of_record``."""
    given = (record.get("cost") or {}).get("flops")
    if isinstance(given, Mapping) and all(isinstance(given.get(k), (int, float)) for k in (*ROLES, "total")):
        return {k: float(given[k]) for k in (*ROLES, "total")}, False
    return sample_flops(calls_of_record(record), main, verifier), True
