"""``python -m cader.evaluate.benchmarks``: the registered benchmark names, one a line, in the order their
synthetic copies are written. ``--real``: only those with an official release (``released()``: what
``scripts/quickstart.sh`` runs full CADER on besides ``synthetic``).
"""

from __future__ import annotations

import sys

from cader.evaluate.benchmarks import benchmarks, released

if __name__ == "__main__":
    names = released() if "--real" in sys.argv[1:] else [b.name for b in benchmarks()]
    print("\n".join(names))
