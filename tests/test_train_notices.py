"""Lightning's product tips and its LeafSpec deprecation warning are filtered at their source (train/notices.py),
and nothing else is."""
from __future__ import annotations

import logging
import warnings

import lightning as L
from lightning.pytorch.loggers import CSVLogger

from cader.train.notices import silence_third_party_notices


def _trainer_log(tmp_path, caplog) -> str:
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="lightning.pytorch"):
        L.Trainer(logger=CSVLogger(tmp_path), accelerator="cpu", max_steps=1, enable_progress_bar=False)
    return caplog.text


def test_lightning_tips_are_dropped_and_its_other_lines_kept(tmp_path, caplog):
    logger = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    saved = list(logger.filters)
    try:
        for f in list(logger.filters):
            logger.removeFilter(f)
        assert "💡 Tip:" in _trainer_log(tmp_path, caplog)     # what a user saw before
        silence_third_party_notices()
        silence_third_party_notices()   # idempotent: one filter
        text = _trainer_log(tmp_path, caplog)
        assert "Tip:" not in text and "litlogger" not in text and "litmodels" not in text
        assert "GPU available" in text   # Lightning's own information still shows
        assert len(logger.filters) == 1
    finally:
        logger.filters[:] = saved


def test_the_leafspec_deprecation_alone_is_filtered():
    from lightning.pytorch.utilities._pytree import _tree_flatten

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _tree_flatten({"a": 1})
        assert any("LeafSpec" in str(w.message) for w in seen)   # torch 2.14 + Lightning 2.6 (the lock) warn
        seen.clear()
        silence_third_party_notices()
        _tree_flatten({"a": 1})
        warnings.warn("another FutureWarning", FutureWarning)
    assert [str(w.message) for w in seen] == ["another FutureWarning"]
