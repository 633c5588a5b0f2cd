"""The miniature's robustness grid: `scripts/quickstart.sh` once per cell of seed x torch threads x training loss x
data order, every cell held to the bars of `scripts/miniature_bars.py`, so the README and docs/miniature.md show
that the demo's verdict is the method's and not one run's luck.

    python scripts/miniature_seeds.py --json_out docs/measured/miniature_grid.json            # the design below
    python scripts/miniature_seeds.py --cells '[{seed: 3, threads: 2, loss: all, order: 1}]'  # one cell

A cell's factors are the quickstart's SEED (model init and pre-training, synthetic data, SFT), THREADS (torch threads
of every step: the order of float sums), LOSS (`labelled` positions, the paper recipe's, or `all`) and DATA_ORDER
(the training sampler's shuffle seed; 0 is the order as shipped). `DESIGN` is a fractional design: the three
two-level factors in full (8 cells), seeds 0-4 spread over them, so each factor takes each of its values four times.
Each cell runs in `<workdir>/<cell name>/` (a rerun resumes every finished step; `--parallel` cells at once) and is
appended to `--json_out` as it finishes, with the commit and a fingerprint of the training code it ran
(`training_code`); `python scripts/update_readme.py` renders the cells of the newest fingerprint.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from cader.scripts.miniature_bars import BARS, bar_values, evidence_p_value
from cader.vlm.files import write_atomic
from jsonargparse import CLI

REPO = Path(__file__).resolve().parents[1]
# What makes a cell's models and data (the training loop, the frames it reads, the synthetic videos and rows, the
# tiny models and their recipes): a change here makes the grid's earlier cells another recipe's.
TRAINING_CODE = ("train", "vlm", "devtools/synthetic", "devtools/tiny.py", "devtools/tiny_pretrain.py",
                 "devtools/tiny_verifier.py", "evaluate/method/prompts.py", "configs/train",
                 "scripts/make_tiny_model.py", "scripts/make_synthetic_data.py")
WRITING = threading.Lock()   # cells finishing at once append to one file


@dataclass(frozen=True)
class Cell:
    """One cell of the grid (the quickstart's SEED, THREADS, LOSS, DATA_ORDER)."""

    seed: int = 0
    threads: int = 1
    loss: Literal["labelled", "all"] = "labelled"
    order: int = 0

    @property
    def name(self) -> str:
        """`seed_<S>` with a suffix per factor off its default (the README's run is `seed_0`)."""
        parts = [f"seed_{self.seed}"]
        parts += [f"threads{self.threads}"] if self.threads != 1 else []
        parts += [f"loss_{self.loss}"] if self.loss != "labelled" else []
        parts += [f"order{self.order}"] if self.order != 0 else []
        return "_".join(parts)

    def env(self) -> dict[str, str]:
        return {"SEED": str(self.seed), "THREADS": str(self.threads), "LOSS": self.loss, "DATA_ORDER": str(self.order)}


DESIGN = (Cell(0, 1, "labelled", 0), Cell(1, 1, "labelled", 1), Cell(2, 1, "all", 0), Cell(3, 1, "all", 1),
          Cell(4, 2, "labelled", 0), Cell(0, 2, "labelled", 1), Cell(1, 2, "all", 0), Cell(2, 2, "all", 1))


def cell_numbers(facts: dict) -> dict:
    """The headline numbers of one cell's summary.json and, per bar, whether it holds."""
    s1 = facts.get("stage1_heldout") or {}
    stage2 = facts.get("stage2") or {}
    props = stage2.get("proposals") or {}
    routed = (stage2.get("routed_gain") or {}).get("routed") or {}
    cal = facts.get("calibration") or {}
    cost = (facts.get("cost_vs_uniform") or {}).get("ratio_full_over_uniform") or {}
    return {
        "stage1_accuracy": s1.get("rate"),
        "margin_auroc": (facts.get("margin_trend") or {}).get("auroc"),
        "temperature": cal.get("temperature"),
        "exit_rate": cal.get("exit_rate"),
        "proposals_contain_evidence": (props.get("contains_evidence") or {}).get("rate"),
        "proposals_evidence_p": evidence_p_value(props),
        "routed_stage1_accuracy": (routed.get("stage1") or {}).get("rate"),
        "routed_final_accuracy": (routed.get("final") or {}).get("rate"),
        "table2": {v: (row.get("accuracy") or {}).get("rate") for v, row in (facts.get("table2") or {}).items()},
        "cost_forwards": cost.get("forwards"),
        "cost_frames": cost.get("frames_decoded"),
        "red_flags": facts.get("red_flags") or [],
        "bars": {bar: bool(held) for bar, (held, _) in bar_values(facts).items()},
    }


def spread(values: list[float | None]) -> dict:
    """min / median / max of the values that exist."""
    xs = [v for v in values if v is not None]
    if not xs:
        return {"min": None, "median": None, "max": None, "n": 0}
    return {"min": min(xs), "median": statistics.median(xs), "max": max(xs), "n": len(xs)}


def aggregate(cells: list[dict]) -> dict:
    """The spread over cells of every headline number, and in how many cells each bar holds."""
    numbers = [c["numbers"] for c in cells]
    keys = [k for k, v in numbers[0].items() if isinstance(v, (int, float)) or v is None]
    out = {k: spread([n[k] for n in numbers]) for k in keys}
    variants = sorted({v for n in numbers for v in n["table2"]})
    out["table2"] = {v: spread([n["table2"].get(v) for n in numbers]) for v in variants}
    names = list(dict.fromkeys(bar for n in numbers for bar in n["bars"]))   # the bars the cells were held to
    out["bars_held"] = {bar: sum(bool(n["bars"].get(bar)) for n in numbers) for bar in names}
    return out


def training_code(repo: Path = REPO) -> str:
    """A fingerprint of the committed training code (`TRAINING_CODE`'s git trees and blobs at HEAD)."""
    ids = subprocess.run(["git", "rev-parse", *(f"HEAD:{p}" for p in TRAINING_CODE)], cwd=repo, check=True,
                         capture_output=True, text=True).stdout
    return hashlib.sha256(ids.encode()).hexdigest()[:12]


def newest_cells(records: list[dict]) -> list[dict]:
    """The records of the newest training-code fingerprint, the last record of each cell."""
    if not records:
        return []
    newest = records[-1]["training_code"]
    by_cell = {json.dumps(r["cell"], sort_keys=True): r for r in records if r["training_code"] == newest}
    return list(by_cell.values())


def append_cell(path: Path, record: dict) -> list[dict]:
    """Add `record` to the grid file at `path` (atomically: read, append, replace); returns every record."""
    records = json.loads(path.read_text())["records"] if path.exists() else []
    records.append(record)
    cells = newest_cells(records)
    payload = {"bars": BARS, "records": records, "newest": {"cells": len(cells), "spread": aggregate(cells)}}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(payload, indent=1) + "\n")
    return records


def run_cell(cell: Cell, workdir: Path, table2_limit: int | None) -> Path:
    folder = workdir / cell.name
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **cell.env(), **({"TABLE2_LIMIT": str(table2_limit)} if table2_limit else {})}
    with open(folder / "quickstart.log", "ab") as log:
        code = subprocess.run(["bash", str(REPO / "scripts" / "quickstart.sh"), str(folder)], env=env, check=False,
                              stdout=log, stderr=subprocess.STDOUT).returncode
    if code != 0:
        raise RuntimeError(f"{cell.name}: scripts/quickstart.sh exited {code} (log: {folder / 'quickstart.log'})")
    return folder / "runs" / "tiny" / "summary.json"


def main(cells: list[Cell] | None = None, workdir: str = "runs/grid", parallel: int = 2,
         table2_limit: int | None = None, json_out: str = "runs/grid/miniature_grid.json") -> list[dict]:
    """Run the quickstart once per cell and append each cell's numbers and bars to `json_out`.

    Args:
        cells: The cells to run (default: `DESIGN`, the documented grid).
        workdir: One folder per cell under it.
        parallel: Cells run at once (a cell of THREADS=2 wants both cores of a 2-core machine to itself).
        table2_limit: TABLE2_LIMIT for the quickstart (its default when unset).
        json_out: The grid file cells are appended to (docs/measured/miniature_grid.json is the documented one).
    """
    root, out, fingerprint = Path(workdir).resolve(), Path(json_out), training_code()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                            check=True).stdout.strip()

    def one(cell: Cell) -> dict:
        facts = json.loads(run_cell(cell, root, table2_limit).read_text())
        record = {"cell": asdict(cell), "name": cell.name, "commit": commit, "training_code": fingerprint,
                  "numbers": cell_numbers(facts)}
        with WRITING:
            append_cell(out, record)
        failed = [b for b, held in record["numbers"]["bars"].items() if not held]
        print(f"{cell.name}: " + ("every bar holds" if not failed else f"not held: {', '.join(failed)}"), flush=True)
        return record

    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        return list(pool.map(one, cells or DESIGN))


if __name__ == "__main__":
    CLI(main, as_positional=False)
