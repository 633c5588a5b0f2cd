"""write_training_mix split into its parts writes the mix it wrote as one function, and the parts do what they say."""

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from cader.dev.synthetic.train_mix import LONGVT_FILES, MixRows, deal_longvt_rows, write_training_mix

# The digest of the mix below, computed with write_training_mix as it was before the split (commit 0799f74). It
# covers every row file (the JSON/JSONL bytes, the parquet rows), the media file names, the manifest and the rng
# state after the call (so every draw the mix makes, in its order). Not the mp4 bytes: libx264 through PyAV does
# not give the same bytes for the same frames from one encode to the next. A deliberate change to the synthetic
# data (media.py's texts, the prompts) changes it too; recompute it then, after checking the change is the one meant.
MIX_DIGEST = "2f3d889af8934902654d73eb0cf1b3cdf0883cf49cca74a0883ffc2f5c1ebb2e"
# 30 videos reach Video-R1's 8th row (a numerical one); half have a decoy; n_tool=3 uses every tool-marker kind
MIX_ARGS = {"n_train": 30, "n_images": 6, "n_tool": 3,
            "video": {"width": 32, "height": 32, "fps": 2, "duration_range": (32, 32), "scene_len": 8,
                      "event_len": (1, 3), "decoy_rate": 0.5}}


def mix_digest(root: Path, manifest: dict, rng: np.random.Generator) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if not path.is_file():
            continue
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        if path.suffix in (".json", ".jsonl"):
            digest.update(path.read_bytes())
        elif path.suffix == ".parquet":
            digest.update(json.dumps(pq.read_table(path).to_pylist(), sort_keys=True).encode())
    digest.update(json.dumps(manifest, sort_keys=True).encode())
    digest.update(str(rng.integers(1 << 62)).encode())
    return digest.hexdigest()


def test_the_mix_is_the_one_written_before_the_split(tmp_path):
    rng = np.random.default_rng(7)
    manifest = write_training_mix(tmp_path, rng, **MIX_ARGS)
    rows = json.loads((tmp_path / "video_r1_cot.json").read_text())
    assert sum(r["problem_type"] == "numerical" for r in rows) == 1  # the case the digest is meant to cover
    assert mix_digest(tmp_path, manifest, rng) == MIX_DIGEST


def test_clean_longvt_rows_are_dealt_in_turn_and_tool_rows_go_to_the_first_file():
    clean = [{"k": k} for k in range(7)]
    tools = [{"tool": 0}, {"tool": 1}]
    dealt = deal_longvt_rows(clean, tools)
    assert list(dealt) == list(LONGVT_FILES)
    assert dealt[LONGVT_FILES[0]] == [{"k": 0}, {"k": 5}, {"tool": 0}, {"tool": 1}]
    assert dealt[LONGVT_FILES[1]] == [{"k": 1}, {"k": 6}]
    assert [len(dealt[name]) for name in LONGVT_FILES[2:]] == [1, 1, 1]


def test_too_few_clean_longvt_rows_is_refused_with_the_counts():
    with pytest.raises(ValueError, match="4 clean LongVT rows cannot fill its 5 release files"):
        deal_longvt_rows([{}] * 4, [{}] * 9)


def test_mix_rows_count_returns_the_running_total():
    mix = MixRows()
    assert [mix.count("video_r1"), mix.count("video_r1", tool_call=True), mix.count("sharegpt")] == [1, 2, 1]
    mix.count("longvt", direct_answer=True)
    assert mix.counts["video_r1"] == {"total": 2, "tool_call": 1, "direct_answer": 0}
    assert mix.counts["longvt"] == {"total": 1, "tool_call": 0, "direct_answer": 1}
