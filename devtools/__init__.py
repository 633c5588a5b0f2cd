"""Development tools: the miniature's data and model (tiny Qwen3-VL, synthetic data), and the doubles that stand in for real services.

Tests, `scripts/` and the quickstart import this package; product code (`vlm`, `train`, `calibrate`, `evaluate`,
`contracts`, `cli`) never does, so a real run cannot reach a double (`tests/test_import_graph.py` checks it).

- `tiny`: a tiny random-weight Qwen3-VL with an offline tokenizer (`make_tiny_model`).
- `tiny_pretrain`: the miniature's stand-in for pre-training: the CADER roles on videos of its own.
- `synthetic`: synthetic videos and images with a learnable question, the CoT training mix in the released
  formats, evaluation sets in every benchmark's released layout, and a per-role probe of a trained miniature.
- `judge_double`: a loopback judge server speaking the OpenAI and Anthropic APIs with made-up judgments.
- `judge_inputs`: synthetic AgentVidBench questions and CADER-shaped predictions for the judge.
- `calibration_rows`: Stage-1 logits calibrated at a known temperature, and prediction rows built from them.
- `scripted`: evaluation backends with scripted replies, and a wrapper adding a fixed latency per model call.
"""
