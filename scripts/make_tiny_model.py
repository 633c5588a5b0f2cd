"""Write the tiny random-weight Qwen3-VL (the embedded default) as an HF folder. No downloads."""

from cader.dev.tiny import make_tiny_model
from jsonargparse import CLI


def main(out: str, seed: int = 0) -> None:
    """Build the tiny model.

    Args:
        out: Output folder (created).
        seed: Weight-init seed.
    """
    path = make_tiny_model(out, seed=seed)
    print(f"wrote tiny Qwen3-VL to {path}")


if __name__ == "__main__":
    CLI(main, as_positional=False)
