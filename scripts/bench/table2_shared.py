"""B8: a six-variant Table 2 run in one pass against six separate runs — model forwards and decoded frames.

    python scripts/bench/table2_shared.py [--n 8]

The tiny Qwen3-VL on a 60 s video per sample; `run_variants` (evaluate/run.py --variants all) shares decoded frames
and repeated model calls across the variants of a sample. The separate runs' cost is what each variant's records
say it used alone. Goal: shared / separate <= 0.45 for both forwards and frames. Also checks that the one-pass
records equal the separate runs' (timings aside).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from cader.scripts.bench.harness import emit, shade_samples
from jsonargparse import CLI


def main(n: int = 8) -> dict:
    """Run Table 2 both ways on `n` samples.

    Args:
        n: Samples.
    """
    from cader.contracts.jsonl import read_jsonl
    from cader.dev.tiny import make_tiny_model
    from cader.evaluate.backends.hf import HFBackend
    from cader.evaluate.method.config import VARIANTS, CaderConfig
    from cader.evaluate.runner import run_samples, run_variants
    from cader.scripts.bench.concurrency import TINY_BUDGET

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        samples = shade_samples(root, n)
        backend = HFBackend(str(make_tiny_model(root / "model")), dtype="float32")
        cfgs = {v: CaderConfig(variant=v, **TINY_BUDGET, tau=0.5) for v in VARIANTS}
        _, work = run_variants(samples, root, root / "shared", backend, backend, cfgs,
                               video_path=lambda s, r: r / s.video, progress=False)
        separate = {"forwards": 0, "frames": 0}
        same = True
        for variant, cfg in cfgs.items():
            out = root / f"{variant}.jsonl"
            run_samples(samples, root, out, backend, backend, cfg, video_path=lambda s, r: r / s.video, progress=False)
            alone = read_jsonl(out)
            separate["forwards"] += sum(r["cost"]["forwards"] for r in alone)
            separate["frames"] += sum(r["cost"]["frames_decoded"] for r in alone)
            shared = read_jsonl(root / "shared" / variant / "predictions.jsonl")
            strip = [[{k: v for k, v in r.items() if k != "cost"} for r in rs] for rs in (alone, shared)]
            same = same and strip[0] == strip[1]
    result = {"separate": separate, "shared": {"forwards": work.calls, "frames": work.frames},
              "ratio_forwards": round(work.calls / max(1, separate["forwards"]), 3),
              "ratio_frames": round(work.frames / max(1, separate["frames"]), 3), "same_records": same,
              "goal": "<= 0.45"}
    result["ratio"] = max(result["ratio_forwards"], result["ratio_frames"])
    return emit(result)


if __name__ == "__main__":
    CLI(main, as_positional=False)
