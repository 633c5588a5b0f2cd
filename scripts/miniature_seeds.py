"""The miniature across seeds: run `scripts/quickstart.sh` once per seed (model init and pre-training, synthetic
data and SFT all follow SEED) and write the spread of its headline numbers, so the README and docs/miniature.md show how robust the
miniature is rather than one run's luck.

    python scripts/miniature_seeds.py --seeds '[0, 1, 2]' --workdir runs/seeds --json_out docs/measured/seeds.json

Each seed runs in `<workdir>/seed_<S>/` (a rerun resumes every finished step). `--parallel` seeds run at once, each
on one torch thread (the quickstart pins one), so on 2 cores two seeds take about the time of one.
The bars each seed is held to are those of the method working (`BARS`); `python scripts/update_readme.py` renders the
table from the JSON.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cader.scripts.quickstart_summary import SIGNIFICANCE
from jsonargparse import CLI

REPO = Path(__file__).resolve().parents[1]

# The miniature shows the method only if every one of these holds on a seed (the bars of a demo that is not chance).
BARS = {
    "stage1_2x_chance": "Stage-1 held-out accuracy at least twice chance",
    "margin_trend": f"correct answers have larger margins (one-sided Mann-Whitney p < {SIGNIFICANCE})",
    "proposals_hold_evidence": "first proposals contain the evidence far above a random window (binomial p < 1e-6)",
    "stage2_beats_stage1": "on the samples routed to Stage 2, the final answer beats Stage 1's",
    "ablation_order": "full >= no_stage2, and at least one Table 2 gap is significant (McNemar)",
}


def seed_numbers(facts: dict) -> dict:
    """The headline numbers of one seed's summary.json, and whether each bar holds."""
    from scipy.stats import binomtest

    s1 = facts.get("stage1_heldout") or {}
    trend = facts.get("margin_trend") or {}
    props = ((facts.get("stage2") or {}).get("proposals")) or {}
    contains = props.get("contains_evidence") or {}
    routed = ((facts.get("stage2") or {}).get("routed_gain") or {}).get("routed") or {}
    table2 = {v: row["accuracy"]["rate"] for v, row in (facts.get("table2") or {}).items()}
    cost = (facts.get("cost_vs_uniform") or {}).get("ratio_full_over_uniform") or {}
    chance_overlap = props.get("chance_overlap")
    p_evidence = None
    if contains.get("n") and chance_overlap is not None:
        p_evidence = float(binomtest(contains["k"], contains["n"], min(1.0, chance_overlap), alternative="greater").pvalue)
    s1_routed, final_routed = ((routed.get(k) or {}).get("rate") for k in ("stage1", "final"))
    gap_flag = any("differs significantly" in f for f in facts.get("red_flags") or [])
    bars = {
        "stage1_2x_chance": s1.get("rate") is not None and s1["rate"] >= 2 * s1["chance"],
        "margin_trend": trend.get("p_value") is not None and trend["p_value"] < SIGNIFICANCE,
        "proposals_hold_evidence": p_evidence is not None and p_evidence < 1e-6,
        "stage2_beats_stage1": s1_routed is not None and final_routed is not None and final_routed > s1_routed,
        "ablation_order": ("full" in table2 and "no_stage2" in table2 and table2["full"] >= table2["no_stage2"]
                           and not gap_flag),
    }
    bars = {bar: bool(held) for bar, held in bars.items()}   # plain bools for the JSON (scipy gives numpy ones)
    return {
        "stage1_accuracy": s1.get("rate"),
        "margin_auroc": trend.get("auroc"),
        "proposals_contain_evidence": contains.get("rate"),
        "proposals_evidence_p": p_evidence,
        "routed_stage1_accuracy": s1_routed,
        "routed_final_accuracy": final_routed,
        "table2": table2,
        "cost_forwards": cost.get("forwards"),
        "cost_frames": cost.get("frames_decoded"),
        "red_flags": facts.get("red_flags") or [],
        "bars": bars,
    }


def spread(values: list[float | None]) -> dict:
    """min / median / max of the seeds' values that exist."""
    xs = [v for v in values if v is not None]
    if not xs:
        return {"min": None, "median": None, "max": None, "n": 0}
    return {"min": min(xs), "median": statistics.median(xs), "max": max(xs), "n": len(xs)}


def aggregate(per_seed: dict[int, dict]) -> dict:
    """The spread over seeds of every headline number, and how many seeds hold each bar."""
    first = next(iter(per_seed.values()))
    keys = [k for k, v in first.items() if isinstance(v, (int, float)) or v is None]
    out = {k: spread([s[k] for s in per_seed.values()]) for k in keys}
    variants = sorted({v for s in per_seed.values() for v in s["table2"]})
    out["table2"] = {v: spread([s["table2"].get(v) for s in per_seed.values()]) for v in variants}
    out["bars_held"] = {bar: sum(bool(s["bars"][bar]) for s in per_seed.values()) for bar in BARS}
    return out


def run_seed(seed: int, workdir: Path, table2_limit: int | None) -> Path:
    folder = workdir / f"seed_{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SEED": str(seed)}
    if table2_limit:
        env["TABLE2_LIMIT"] = str(table2_limit)
    with open(folder / "quickstart.log", "ab") as log:
        code = subprocess.run(["bash", str(REPO / "scripts" / "quickstart.sh"), str(folder)], env=env, check=False,
                              stdout=log, stderr=subprocess.STDOUT).returncode
    if code != 0:
        raise RuntimeError(f"seed {seed}: scripts/quickstart.sh exited {code} (log: {folder / 'quickstart.log'})")
    return folder / "runs" / "tiny" / "summary.json"


def main(seeds: list[int] = [0, 1, 2], workdir: str = "runs/seeds", parallel: int = 2,  # noqa: B006
         table2_limit: int | None = None, json_out: str | None = None) -> dict:
    """Run the quickstart once per seed and write the spread of its numbers.

    Args:
        seeds: The seeds (SEED of scripts/quickstart.sh; 0 is the README's run).
        workdir: One folder per seed under it.
        parallel: Seeds run at once (each on one torch thread).
        table2_limit: TABLE2_LIMIT for the quickstart (its default when unset).
        json_out: Also write the result here (docs/measured/seeds.json, rendered into the README and docs/miniature.md).
    """
    root = Path(workdir).resolve()
    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        paths = dict(zip(seeds, pool.map(lambda s: run_seed(s, root, table2_limit), seeds)))
    per_seed = {s: seed_numbers(json.loads(p.read_text())) for s, p in paths.items()}
    result = {"seeds": seeds, "bars": BARS, "per_seed": {str(s): v for s, v in per_seed.items()},
              "spread": aggregate(per_seed)}
    text = json.dumps(result, indent=1) + "\n"
    (root / "seeds.json").write_text(text)
    if json_out:
        Path(json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(json_out).write_text(text)
    held = result["spread"]["bars_held"]
    print("\n".join(f"{bar}: {held[bar]}/{len(seeds)} seeds — {BARS[bar]}" for bar in BARS))
    return result


if __name__ == "__main__":
    CLI(main, as_positional=False)
