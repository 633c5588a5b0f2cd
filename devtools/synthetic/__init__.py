"""The miniature's synthetic data set (written by ``scripts/make_synthetic_data.py``).

- `media`: the videos and images (a coloured event at known times) and the question and answer texts about them.
- `train_mix`: the CoT training mix in the released formats; `format_rows` builds one row in each format.
- `eval_sets`: evaluation sets in each benchmark's released layout, with their ground truth.
- `dataset`: one call writing both (``make_synthetic_data``).
"""
