"""Stage 1 once per sample: reuse the raw option logits of an earlier run (`--stage1_from predictions.jsonl`).

Stage 1 is the same computation in every Table 2 variant and in the held-out run calibration reads, so its logits
are stored raw (before temperature) with a fingerprint of what produced them:
- the model (`Backend.fingerprint()`: its folder's config, weight files and chat template),
- the Stage-1 frames (r1, frame cap, pixel cap, frame rule) — T and tau are *not* part of it: the margin and the route are
  recomputed from the raw logits with the current T and tau, which is what lets a held-out run at the paper's T = 2
  feed a calibrated run,
- the sample (video, question, options, letters).
A record whose fingerprint differs from the current run's is refused with the reason (a stale or foreign file must
never stand in for the model being evaluated); a sample missing from the file runs Stage 1 as usual.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from cader.calibrate.margin import exits_early, stage1_confidence
from cader.evaluate.method.config import CaderConfig
from cader.evaluate.method.stage1 import Stage1Outcome


class Stage1ReuseError(ValueError):
    """A Stage-1 record that cannot stand in for this run's Stage 1 (different model, frames or sample)."""


def _digest(payload) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]


def frames_fingerprint(cfg: CaderConfig) -> dict:
    """The settings F1 depends on. The frame rule is named only when it is not the bin-centre rule, the one every
    fingerprint written before the rule existed was made with, so those records still stand in for a bin-centre run
    and are refused by a backbone-rule one."""
    frames = {"r1": float(cfg.r1), "max_frames": cfg.max_frames, "max_pixels": cfg.max_pixels}
    if cfg.frame_rule != "bin_centre":
        frames["frame_rule"] = cfg.frame_rule
    return frames


def sample_fingerprint(video: str, question: str, options: Sequence[str], letters: Sequence[str]) -> str:
    return _digest([str(video), question, list(options), list(letters)])


def stage1_fingerprint(model: str | None, cfg: CaderConfig, video, question, options, letters) -> dict:
    """What a stored Stage-1 result depends on (stored as `stage1.fingerprint`)."""
    return {"model": model, "frames": frames_fingerprint(cfg),
            "sample": sample_fingerprint(video, question, options, letters)}


def mismatch(stored: dict | None, current: dict) -> str | None:
    """Why a stored fingerprint cannot stand in for the current one (None when it can)."""
    if not stored:
        return "the record has no stage1.fingerprint (written before Stage-1 reuse existed)"
    for part, what in (("model", "model"), ("frames", "Stage-1 frame settings"), ("sample", "sample")):
        if stored.get(part) != current.get(part):
            return f"{what} differs: stored {stored.get(part)!r}, now {current.get(part)!r}"
    return None


def reuse_stage1(stored: dict, letters: Sequence[str], cfg: CaderConfig) -> Stage1Outcome:
    """The Stage-1 outcome from stored raw logits, with the current T and tau (Eq. 2-3, Algorithm 1 line 10)."""
    logits = [float(z) for z in stored["logits"]]
    if len(logits) != len(letters):
        raise Stage1ReuseError(f"{len(logits)} stored logits for {len(letters)} letters")
    conf = stage1_confidence(logits, cfg.temperature)
    pred = letters[conf.index]
    record = {**stored, "pred": pred, "margin": float(conf.margin), "temperature": float(cfg.temperature),
              "tau": float(cfg.tau), "reused": True}
    return Stage1Outcome(record, pred, float(conf.margin), exits_early(conf.margin, cfg.tau))


def model_fingerprint(path: str | Path) -> str:
    """A model folder's identity: its config, the names, sizes and mtimes of its weight files, its chat template.

    A hub id (no local folder) is fingerprinted by name only.
    """
    folder = Path(path)
    if not folder.is_dir():
        return f"hub:{path}"
    parts = {}
    for name in ("config.json", "chat_template.jinja", "chat_template.json", "tokenizer_config.json"):
        file = folder / name
        if file.exists():
            parts[name] = hashlib.sha256(file.read_bytes()).hexdigest()[:16]
    for file in sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin")):
        stat = file.stat()
        parts[file.name] = [stat.st_size, int(stat.st_mtime)]
    return _digest(parts)
