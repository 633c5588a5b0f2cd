"""``python -m cader.evaluate.benchmarks``: the registered benchmark names, one a line, in the order their
synthetic copies are written. ``--real true``: only those with an official release (``released()``: what
``scripts/quickstart.sh`` runs full CADER on besides ``synthetic``).
"""

from __future__ import annotations

from cader.evaluate.benchmarks import benchmarks, released


def names(real: bool = False) -> None:
    """Print the registered benchmark names, one a line.

    Args:
        real: Only those with an official release (what scripts/quickstart.sh runs full CADER on besides synthetic).
    """
    print("\n".join(released() if real else [b.name for b in benchmarks()]))


if __name__ == "__main__":
    from jsonargparse import CLI

    CLI(names, as_positional=False)
