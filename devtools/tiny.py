"""A tiny random-weight Qwen3-VL, built from config with an offline tokenizer: the model of the tests and the miniature.

Nothing here downloads. The model uses the same transformers classes, processor and chat template as
Qwen3-VL-8B-Instruct, only with small sizes, so every code path that runs on it runs on the real model:
  * text: 2 layers x 64 hidden, 4 heads (2 KV), head_dim 32 (vLLM's CPU attention refuses 16), interleaved M-RoPE;
  * vision: 2 blocks x 32 hidden, the real patch size 16, temporal patch 2, spatial merge 2 (32-px merge unit),
    DeepStack on the last block;
  * tokenizer: byte-level BPE trained here on a small corpus of the project's own prompts, plus every Qwen3-VL
    special token at the end of the vocabulary. Option letters A-Z are single bytes, hence single tokens; "Yes" and
    "No" are forced to single tokens by the training corpus and checked after training.

Two sizes (`TINY_SIZES`), as the paper has two models (Implementation Details: Qwen3-VL-8B-Instruct main,
Qwen3-VL-4B-Instruct verifier): "main", above, and "verifier", built the same way with the language model at half
the widths, with a smaller BPE vocabulary. The smaller vocabulary gives every token another id than the main model's
("Yes", "No", the special tokens), so a code path that scored the verifier with the main model's ids, or fed one
model's token ids to the other, fails on the miniature instead of passing by coincidence.
"""

from __future__ import annotations

import json
import string
from dataclasses import dataclass
from pathlib import Path

import torch
from cader.vlm.chat_template import QWEN3_VL_CHAT_TEMPLATE

# Qwen3-VL's special tokens, in their released order (ids are assigned after the BPE vocabulary).
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                  "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
                  "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>"]
# Added as normal (non-special) tokens, as in the released tokenizer, so they survive decoding.
ADDED_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]


@dataclass(frozen=True)
class TinySize:
    """The widths of one tiny model (text decoder, vision tower) and its BPE vocabulary."""

    vocab_size: int        # BPE merges + bytes, before the special and added tokens
    reserved: int          # unused tokens ahead of the bytes: they shift every other id
    text_hidden: int
    text_intermediate: int
    text_heads: int
    text_kv_heads: int
    vision_hidden: int
    vision_intermediate: int
    vision_heads: int


TINY_SIZES = {
    "main": TinySize(vocab_size=1024, reserved=0, text_hidden=64, text_intermediate=128, text_heads=4, text_kv_heads=2,
                     vision_hidden=32, vision_intermediate=64, vision_heads=2),
    # the language model at half the widths (the 4B beside the 8B), the vision tower at the main model's (a 16-wide one
    # separated the verifier's crops less well: devtools/tiny_verifier.py), and another vocabulary: fewer merges move
    # the special tokens' ids, the reserved tokens every other id ("Yes" and "No" are the first merges of either corpus)
    "verifier": TinySize(vocab_size=512, reserved=8, text_hidden=32, text_intermediate=64, text_heads=2, text_kv_heads=1,
                         vision_hidden=32, vision_intermediate=64, vision_heads=2),
}


def _training_corpus() -> list[str]:
    """Text the tiny tokenizer learns merges from: the project's prompts, answers, numbers and timestamps."""
    lines = [
        ("You are a video question answering assistant. Watch the video carefully and answer the multiple-choice "
         "question. Output ONLY a single capital letter corresponding to your answer."),
        ("You are a video temporal grounding assistant. Identify the time window in the video that contains the key "
         "visual evidence to answer the given multiple-choice question."),
        "Does this video clip contain relevant visual evidence for answering the question below?",
        'Question: What colour is the shape that appears in the video? Options: "relevant_windows": [[12.0, 30.5]]',
        "This is the most relevant segment of the video. After thinking, output your answer in this format:",
        "<think> The shape is red, so the answer is A. </think> <answer>A</answer>",
        "red green blue yellow purple orange white black circle square triangle seconds frame video image clip",
    ]
    # Yes/No as standalone words many times so BPE merges each into one token.
    lines += ["Yes", "No", "Yes.", "No.", " Yes", " No"] * 200
    lines += [f"<{t:.1f} seconds>" for t in range(0, 600, 7)]
    lines += [" ".join(string.ascii_uppercase)] * 5
    return lines * 3


def build_tokenizer(vocab_size: int = TINY_SIZES["main"].vocab_size, reserved: int = 0):
    """Train the byte-level BPE (`vocab_size` entries before the special tokens, the first `reserved` of them unused
    placeholders) and wrap it as the Qwen2 fast tokenizer class Qwen3-VL ships with."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import Qwen2TokenizerFast

    bpe = Tokenizer(models.BPE(unk_token=None))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=[f"<|reserved_{i}|>" for i in range(reserved)], show_progress=False)
    bpe.train_from_iterator(_training_corpus(), trainer=trainer)
    tok = Qwen2TokenizerFast(tokenizer_object=bpe, unk_token=None, bos_token=None, eos_token="<|im_end|>",
                             pad_token="<|endoftext|>", clean_up_tokenization_spaces=False)
    tok.add_special_tokens({"additional_special_tokens": SPECIAL_TOKENS})
    tok.add_tokens(ADDED_TOKENS)
    tok.chat_template = QWEN3_VL_CHAT_TEMPLATE
    for word in ["Yes", "No", *string.ascii_uppercase]:
        ids = tok.encode(word, add_special_tokens=False)
        if len(ids) != 1:  # a regression here breaks Stage 1 letters and the verifier's P(Yes)
            raise RuntimeError(f"tiny tokenizer splits {word!r} into {ids}")
    return tok


def tiny_config(tokenizer, size: str = "main"):
    """A Qwen3VLConfig with the 8B's structure and the tiny widths of `size` (TINY_SIZES); token ids taken from the
    tokenizer."""
    from transformers import Qwen3VLConfig

    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    widths = TINY_SIZES[size]
    head_dim = 32  # the smallest head size vLLM's CPU attention serves, so one model runs under both backends
    text_config = {
        "vocab_size": len(tokenizer), "hidden_size": widths.text_hidden, "intermediate_size": widths.text_intermediate,
        "num_hidden_layers": 2, "num_attention_heads": widths.text_heads, "num_key_value_heads": widths.text_kv_heads,
        "head_dim": head_dim, "max_position_embeddings": 32768,
        # mrope_section: the temporal / height / width split of head_dim/2 rotary pairs, in the ratio [24, 20, 20]
        # it has at 128
        "rope_parameters": {"rope_type": "default", "rope_theta": 5_000_000.0, "mrope_interleaved": True,
                            "mrope_section": [6, 5, 5]},
        "bos_token_id": None, "eos_token_id": ids["<|im_end|>"], "pad_token_id": ids["<|endoftext|>"],
        "tie_word_embeddings": False,
    }
    vision_config = {
        "depth": 2, "hidden_size": widths.vision_hidden, "intermediate_size": widths.vision_intermediate,
        "num_heads": widths.vision_heads, "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
        "out_hidden_size": widths.text_hidden, "num_position_embeddings": 256, "deepstack_visual_indexes": [1],
    }
    return Qwen3VLConfig(text_config=text_config, vision_config=vision_config, image_token_id=ids["<|image_pad|>"],
                         video_token_id=ids["<|video_pad|>"], vision_start_token_id=ids["<|vision_start|>"],
                         vision_end_token_id=ids["<|vision_end|>"], tie_word_embeddings=False)


def build_processor(tokenizer):
    """The Qwen3-VL processor (image + video processors + tokenizer + chat template) with the paper's pixel caps."""
    from transformers import Qwen3VLProcessor
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    shared = {"patch_size": 16, "merge_size": 2, "temporal_patch_size": 2, "image_mean": [0.5, 0.5, 0.5],
              "image_std": [0.5, 0.5, 0.5]}
    image_processor = Qwen2VLImageProcessor(size={"shortest_edge": 32 * 32, "longest_edge": 262_144}, **shared)
    video_processor = Qwen3VLVideoProcessor(size={"shortest_edge": 32 * 32, "longest_edge": 65_536 * 4096},
                                            cap_pixels_per_frame=False, max_frames=4096, min_frames=1, **shared)
    return Qwen3VLProcessor(image_processor=image_processor, tokenizer=tokenizer, video_processor=video_processor,
                            chat_template=QWEN3_VL_CHAT_TEMPLATE)


def make_tiny_model(out_dir: str | Path, seed: int = 0, size: str = "main") -> Path:
    """Build and save the tiny Qwen3-VL of `size` (TINY_SIZES: main or verifier; model, processor, tokenizer, chat
    template) as an HF folder."""
    if size not in TINY_SIZES:
        raise ValueError(f"unknown tiny size {size!r}; choose one of {', '.join(TINY_SIZES)}")
    from transformers import GenerationConfig, Qwen3VLForConditionalGeneration

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(TINY_SIZES[size].vocab_size, TINY_SIZES[size].reserved)
    processor = build_processor(tokenizer)
    config = tiny_config(tokenizer, size)
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(config)
    model.generation_config = GenerationConfig(
        eos_token_id=[tokenizer.convert_tokens_to_ids("<|im_end|>"), tokenizer.convert_tokens_to_ids("<|endoftext|>")],
        pad_token_id=tokenizer.pad_token_id, do_sample=False)
    model.save_pretrained(out)
    processor.save_pretrained(out)
    record = {"seed": seed, "size": size, "parameters": sum(p.numel() for p in model.parameters())}
    (out / "cader_tiny.json").write_text(json.dumps(record, indent=2) + "\n")
    return out
