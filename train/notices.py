"""Third-party notices a user of `train/sft.py` can do nothing about, silenced where they come from.

Each filter names one message: a new warning from the same library still shows."""
from __future__ import annotations

import logging
import warnings

# Lightning 2.6 advertises its cloud products on every run ("💡 Tip: ... try installing [litlogger]" when no
# LitLogger is set, "... [litmodels]" for checkpoints). The recipes choose a CSVLogger and a plain ModelCheckpoint
# on purpose, and an offline cluster cannot install either product: the tips are noise in every run's log.
LIGHTNING_TIP_PREFIX = "💡 Tip:"
# Lightning 2.6's own pytree helper (lightning/pytorch/utilities/_pytree.py) tests `isinstance(treespec, LeafSpec)`,
# which torch 2.14 deprecates with a FutureWarning on every fit: the call is inside Lightning, not here.
LIGHTNING_LEAFSPEC_DEPRECATION = r"`isinstance\(treespec, LeafSpec\)` is deprecated"


class _DropLightningTips(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(LIGHTNING_TIP_PREFIX)


def silence_third_party_notices() -> None:
    """Install the filters (idempotent): the tips on Lightning's rank-zero logger, the LeafSpec FutureWarning."""
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if not any(isinstance(f, _DropLightningTips) for f in logger.filters):
        logger.addFilter(_DropLightningTips())
    warnings.filterwarnings("ignore", message=LIGHTNING_LEAFSPEC_DEPRECATION, category=FutureWarning)
