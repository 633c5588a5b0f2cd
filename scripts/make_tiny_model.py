"""Write the embedded default's model: a tiny Qwen3-VL built from config, then taught temporal grounding.

    python scripts/make_tiny_model.py --out runs/tiny/model                        # about a minute on 2 cores
    python scripts/make_tiny_model.py --out DIR --grounding_epochs 0               # the random-weight model only

No downloads. The random model stands in for the architecture; the short grounding pass stands in for the ability
Qwen3-VL-8B-Instruct brings from pre-training and CADER's proposal step relies on (devtools/tiny_pretrain.py).
Work files (the random model, the grounding videos, the run) stay in DIR_pretrain/.
"""

from pathlib import Path

from cader.dev.tiny import make_tiny_model
from cader.dev.tiny_pretrain import GROUNDING_SEED, install, pretrain_grounding
from jsonargparse import CLI


def main(out: str, seed: int = 0, grounding_epochs: int = 25, grounding_videos: int = 96) -> None:
    """Build the tiny model.

    Args:
        out: Output folder (replaced when complete).
        seed: Weight-init seed.
        grounding_epochs: Epochs of the grounding pass over its rows; 0 writes the random-weight model.
        grounding_videos: Videos in the grounding set (each gives a proposal row, every 2nd a reflection row too).
    """
    if grounding_epochs == 0:
        print(f"wrote random-weight tiny Qwen3-VL to {make_tiny_model(out, seed=seed)}")
        return
    work = Path(f"{out}_pretrain")
    base = make_tiny_model(work / "random", seed=seed)
    export = pretrain_grounding(base, work, n_videos=grounding_videos, epochs=grounding_epochs)
    record = {
        "seed": seed,
        "grounding": {"videos": grounding_videos, "epochs": grounding_epochs, "video_seed": GROUNDING_SEED,
                      "config": "configs/train/grounding_tiny.yaml"},  # fmt: skip
        **{k: v for k, v in __import__("json").loads((base / "cader_tiny.json").read_text()).items() if k != "seed"},
    }
    print(f"wrote tiny Qwen3-VL (random init + grounding pass) to {install(export, out, record)}")


if __name__ == "__main__":
    CLI(main, as_positional=False)
