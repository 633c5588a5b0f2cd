"""Write the miniature's models (the quickstart's and the README main job's): a tiny Qwen3-VL built from config,
then taught the CADER roles, and the tiny verifier beside it.

    python scripts/make_tiny_model.py --out runs/tiny/model                                 # most of the main job (docs/miniature.md#time)
    python scripts/make_tiny_model.py --out runs/tiny/verifier --role verifier              # the verifier (C.3 only)
    python scripts/make_tiny_model.py --out DIR --grounding_epochs 0 --roles_epochs 0       # random weights only

No downloads. The random model stands in for the architecture; two short passes on videos of its own stand in for
what Qwen3-VL-8B-Instruct brings from pre-training and CADER's Stage 2 relies on (devtools/tiny_pretrain.py). The
verifier stands in for Qwen3-VL-4B-Instruct, the paper's verifier: a narrower language model, a vocabulary of its own,
and one pass on verifier rows of videos of its own (devtools/tiny_verifier.py).
Work files (the random model, the videos, the runs) stay in DIR_pretrain/.
"""

from typing import Literal

from cader.dev.tiny import make_tiny_model
from cader.dev.tiny_pretrain import make_pretrained_model
from cader.dev.tiny_verifier import VERIFY_EPOCHS, make_tiny_verifier
from jsonargparse import CLI


def main(out: str, seed: int = 0, role: Literal["main", "verifier"] = "main", grounding_epochs: int = 25,
         roles_epochs: int = 12, verify_epochs: int = VERIFY_EPOCHS, pretrain_videos: int = 96,
         train_flags: list[str] = []) -> None:  # noqa: B006
    """Build the tiny model.

    Args:
        out: Output folder (replaced when complete).
        seed: The model's seed: its weight init, the pre-training passes' data order, and (offset from
            PRETRAIN_SEED) the pre-training videos. 0 is the shipped model.
        role: main (the model the SFT fine-tunes) or verifier (the narrower model that scores crops, App. C.3).
        grounding_epochs: main: epochs of the grounding pass (proposal rows); 0 skips it.
        roles_epochs: main: epochs of the roles pass (every CADER role row); 0 skips it. Both 0: the random model.
        verify_epochs: verifier: epochs of its pass on the verifier rows; 0: the random verifier.
        pretrain_videos: Videos the passes train on (drawn from a seed of their own).
        train_flags: Flags for every pass's train/sft.py, after the config's (e.g. '["--num_threads", "2"]').
    """
    if role == "verifier":
        path = make_tiny_verifier(out, seed, verify_epochs, pretrain_videos, tuple(train_flags))
        print(f"wrote tiny Qwen3-VL verifier to {path}")
    elif grounding_epochs == roles_epochs == 0:
        print(f"wrote random-weight tiny Qwen3-VL to {make_tiny_model(out, seed=seed)}")
    else:
        path = make_pretrained_model(out, seed, grounding_epochs, roles_epochs, pretrain_videos,
                                     tuple(train_flags))
        print(f"wrote tiny Qwen3-VL (random init + pre-training passes) to {path}")


if __name__ == "__main__":
    CLI(main, as_positional=False)
