"""On-disk cache of valid judge replies keyed by (prompt hash, model), so a rerun never pays twice."""

from __future__ import annotations

import json
from pathlib import Path

from cader.vlm.files import write_atomic


class JudgeCache:
    """One small JSON file per key under `root`; writes are atomic (tmp file + os.replace), so threads may share it."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict | None:
        path = self._path(key)
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, json.JSONDecodeError):
            return None  # a torn or foreign file is a miss, never a crash

    def put(self, key: str, value: dict) -> None:
        write_atomic(self._path(key), json.dumps(value, ensure_ascii=False), durable=False)  # a lost entry is a miss

    def __len__(self) -> int:
        return sum(1 for _ in self.root.glob("*/*.json"))
