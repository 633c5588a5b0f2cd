"""``python -m cader.evaluate.benchmarks``: the registered benchmark names, one a line, in the order their
synthetic copies are written (what ``scripts/quickstart.sh`` runs over).

``--real``: only the benchmarks that have a released layout (leaves out the synthetic task's own names).
"""

from __future__ import annotations

import sys

from cader.evaluate.benchmarks import benchmarks


def names(real_only: bool) -> list[str]:
    """The registered names in write order.

    real_only: leave out the names whose folder is the synthetic task's (``synthetic``).
    """
    from cader.evaluate.benchmarks.synthetic import FOLDER as SYNTHETIC_FOLDER

    return [b.name for b in benchmarks() if not (real_only and b.folder == SYNTHETIC_FOLDER)]


if __name__ == "__main__":
    print("\n".join(names(real_only="--real" in sys.argv[1:])))
