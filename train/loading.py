"""What a DataLoader over the planned mix is made of: the dataset that encodes planned samples lazily (a sample that
fails at decode time is handed on as a `DecodeFailure`, never replaced), the collator that pads a batch and lists the
failures, and the loader whose position Lightning checkpoints for an exact mid-epoch resume. Built by
`cader.train.datamodule.SFTDataModule` (re-exported there)."""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import asdict

from cader.train.collate import PlannedSample, SampleEncoder, SkipSample, pad_batch
from cader.train.decode_failures import DECODE_FAILURES, DecodeFailure
from cader.train.mix_index import PlannedRows
from torch.utils.data import DataLoader, Dataset

log = logging.getLogger(__name__)


class PlannedDataset(Dataset):
    """Encodes planned samples lazily. A sample that fails at decode time becomes a `DecodeFailure` (the collator
    drops it from the batch and hands it to the main process to count; see cader.train.decode_failures): never
    replaced by a neighbour, which would train that one twice."""

    def __init__(self, items: PlannedRows | list[PlannedSample], encoder: SampleEncoder,
                 source_names: list[str] | None = None, uncached_sources: frozenset[int] = frozenset()):
        """`uncached_sources`: indices of the sources whose videos bypass the encoder's frame cache."""
        self.items, self.encoder, self.source_names = items, encoder, source_names
        self.uncached_sources = uncached_sources
        self.failures: Counter = Counter()   # this process's count (a worker's dies with it; the batch reports)

    def __len__(self) -> int:
        return len(self.items)

    def _source(self, index: int) -> str:
        sources = getattr(self.items, "sources", None)
        if self.source_names is None or sources is None:
            return "?"
        return self.source_names[int(sources[index])]

    def __getitem__(self, index: int):
        item = self.items[index]
        sources = getattr(self.items, "sources", None)
        cached = sources is None or int(sources[index]) not in self.uncached_sources
        try:
            return self.encoder.encode(item, frame_cache=cached)
        except SkipSample as err:
            self.failures[err.reason] += 1
            log.warning("sample %s failed at decode time and is left out of its batch: %s",
                        item.sample.sample_id, err)
            return DecodeFailure(self._source(index), item.sample.sample_id, err.reason, err.detail)


class BatchCollator:
    """Pads the encoded samples of a batch; failed ones are left out and listed under DECODE_FAILURES."""

    def __init__(self, pad_id: int):
        self.pad_id = pad_id

    def __call__(self, items):
        failed = [asdict(i) for i in items if isinstance(i, DecodeFailure)]
        good = [i for i in items if not isinstance(i, DecodeFailure)]
        batch = pad_batch(good, self.pad_id) if good else {}
        if failed:
            batch[DECODE_FAILURES] = failed
        return batch


class ResumableLoader(DataLoader):
    """DataLoader whose state (epoch, batches consumed) Lightning saves in checkpoints, for exact mid-epoch resume.

    `consumed` is set by the LightningModule at the start of each training batch; on load the batch sampler skips
    that many batches of the same epoch.
    """

    consumed = 0
    on_resume = None   # called with (epoch, consumed) when a checkpoint's position is loaded

    def state_dict(self) -> dict:
        return {"epoch": self.batch_sampler.epoch, "consumed": self.consumed}

    def load_state_dict(self, state: dict) -> None:
        self.batch_sampler.set_epoch(state["epoch"])
        self.batch_sampler.skip = self.consumed = state["consumed"]
        if self.on_resume is not None:
            self.on_resume(state["epoch"], state["consumed"])
