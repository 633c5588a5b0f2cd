"""Regenerate the measured figures in README.md from the files that hold them, so no number there is typed by hand.

Each generated block sits between `<!-- BEGIN generated: NAME -->` and `<!-- END generated: NAME -->` and is
rendered from one file under docs/measured/, which the command named in the block writes:

    python scripts/bench/run_all.py --json_out docs/measured/bench.json            # the bench table
    bash scripts/quickstart.sh && cp runs/tiny/summary.json docs/measured/quickstart.json   # the miniature
    python scripts/miniature_seeds.py --json_out docs/measured/seeds.json           # its spread over seeds
    python scripts/update_readme.py                                                 # rewrite the blocks
    python scripts/update_readme.py --check true                                    # exit 1 when README is stale

tests/test_readme_generated.py runs the check, so README.md and docs/measured/ cannot drift apart.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from jsonargparse import CLI

REPO = Path(__file__).resolve().parents[1]
MEASURED = REPO / "docs" / "measured"
BLOCK = re.compile(r"(<!-- BEGIN generated: (\w+) -->\n)(.*?)(<!-- END generated: \2 -->)", re.DOTALL)


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f} %"


def _ratio(x) -> str:
    return "–" if x is None else f"{x:.3f}"


def _ci(r: dict | None) -> str:
    if not r or r.get("rate") is None:
        return "–"
    return f"{r['k']}/{r['n']} = {_pct(r['rate'])} (95 % CI {_pct(r['ci95'][0])}–{_pct(r['ci95'][1])})"


def render_bench(rows: list[dict]) -> str:
    lines = [("Measured by `python scripts/bench/run_all.py --json_out docs/measured/bench.json` (one run, this project's "
             "2-core CPU machine; each value is a ratio against a baseline measured in the same run):"), "",
             "| check | what | value | goal | status |", "|---|---|---|---|---|"]
    for r in rows:
        value = "–" if r.get("value") is None else f"{r['value']:g}"
        lines.append(f"| {r['key']} | {r['title']} | {value} | {r['goal']} | {r['status']} |")
    return "\n".join(lines) + "\n"


def render_quickstart(facts: dict) -> str:
    lines = [("Measured by `bash scripts/quickstart.sh` (numbers from its `runs/tiny/summary.json`, copied to "
             "`docs/measured/quickstart.json`; `runs/tiny/SUMMARY.md` has the same with links):"), ""]
    s1 = facts.get("stage1_heldout")
    if s1:
        lines.append(f"- held-out Stage-1 accuracy {_ci(s1)}, chance {_pct(s1.get('chance'))}")
    cal = facts.get("calibration")
    if cal:
        lines.append(f"- calibration: T = {cal['temperature']:.3g}, τ = {cal['tau']:.4g} ({cal['mode']} mode); exit rate "
                     f"{_pct(cal.get('exit_rate'))}, exit accuracy {_pct(cal.get('exit_accuracy'))}")
    stage2 = facts.get("stage2")
    if stage2:
        props, verify = stage2["proposals"], stage2["verifier"]
        lines.append(f"- Stage 2: proposals parsed {_ci(props['parsed'])}; overlapping the evidence "
                     f"{_ci(props['overlaps_evidence'])} (random window {_pct(props.get('chance_overlap'))}); "
                     f"verifier AUROC {'–' if verify.get('auroc') is None else round(verify['auroc'], 3)}; "
                     f"fallbacks {stage2['routed_gain'].get('fallbacks') or 'none'}")
        accepted = stage2["routed_gain"]["accepted"]
        if accepted["n"]:
            lines.append(f"- samples with an accepted crop: Stage 1 {_ci(accepted['stage1'])} → final "
                         f"{_ci(accepted['final'])}")
    table2 = facts.get("table2")
    if table2:
        cells = ", ".join(f"{v} {_pct(row['accuracy']['rate'])}" for v, row in table2.items())
        lines.append(f"- Table 2 rows (synthetic test split): {cells}")
    cost = facts.get("cost_vs_uniform")
    if cost and cost.get("n"):
        ratio = cost["ratio_full_over_uniform"]
        lines.append(f"- cost of `full` / `uniform_stage2` per sample (P4, goal ≤ {cost['goal']}): forwards "
                     f"{_ratio(ratio.get('forwards'))}, decoded frames {_ratio(ratio.get('frames_decoded'))}; accuracy "
                     f"{_ci(cost['full']['accuracy'])} vs {_ci(cost['uniform_stage2']['accuracy'])}")
    flags = facts.get("red_flags") or []
    lines.append("- red flags: " + ("; ".join(flags) if flags else "none"))
    for caveat in facts.get("caveats") or []:
        lines.append(f"- caveat: {caveat}")
    return "\n".join(lines) + "\n"


def _spread(d: dict | None, fmt=_pct) -> str:
    if not d or d.get("median") is None:
        return "–"
    return f"{fmt(d['median'])} ({fmt(d['min'])} – {fmt(d['max'])})"


def render_seeds(result: dict) -> str:
    seeds, spread = result["seeds"], result["spread"]
    n = len(seeds)
    lines = [(f"Measured by `python scripts/miniature_seeds.py --seeds '{json.dumps(seeds)}' --json_out "
             f"docs/measured/seeds.json`: the quickstart once per seed (model init and pre-training, synthetic data, "
             f"SFT), median (min – max) over the {n} seeds:"), "",
             "| number | median (min – max) |", "|---|---|",
             f"| held-out Stage-1 accuracy | {_spread(spread['stage1_accuracy'])} |",
             f"| AUROC of the margin for a correct Stage-1 answer | {_spread(spread['margin_auroc'], _ratio)} |",
             f"| first proposals containing the evidence | {_spread(spread['proposals_contain_evidence'])} |",
             f"| routed samples: Stage-1 accuracy | {_spread(spread['routed_stage1_accuracy'])} |",
             f"| routed samples: final accuracy | {_spread(spread['routed_final_accuracy'])} |"]
    lines += [f"| Table 2 `{v}` accuracy | {_spread(d)} |" for v, d in spread["table2"].items()]
    lines += [f"| P4 cost `full` / `uniform_stage2`: forwards | {_spread(spread['cost_forwards'], _ratio)} |",
              f"| P4 cost `full` / `uniform_stage2`: decoded frames | {_spread(spread['cost_frames'], _ratio)} |",
              "", "Bars held (seeds of " + str(n) + "):", ""]
    lines += [f"- {result['bars'][bar]}: {held}/{n}" for bar, held in spread["bars_held"].items()]
    flagged = {s: v["red_flags"] for s, v in result["per_seed"].items() if v["red_flags"]}
    lines.append("- red flags: " + ("; ".join(f"seed {s}: {', '.join(f)}" for s, f in flagged.items())
                                     if flagged else "none on any seed"))
    return "\n".join(lines) + "\n"


RENDERERS = {"bench": ("bench.json", render_bench), "quickstart": ("quickstart.json", render_quickstart),
             "seeds": ("seeds.json", render_seeds)}


def render_readme(text: str, measured: Path = MEASURED) -> str:
    def block(match: re.Match) -> str:
        name = match.group(2)
        if name not in RENDERERS:
            raise KeyError(f"README block {name!r} has no renderer ({sorted(RENDERERS)})")
        file, render = RENDERERS[name]
        path = measured / file
        body = render(json.loads(path.read_text())) if path.exists() else f"_not measured yet: {path.name} missing_\n"
        return match.group(1) + body + match.group(4)

    return BLOCK.sub(block, text)


def main(readme: str = str(REPO / "README.md"), check: bool = False) -> int:
    """Rewrite the generated blocks of README.md from docs/measured/.

    Args:
        readme: The README to update.
        check: Only compare; exit 1 when a block differs from its rendering.
    """
    path = Path(readme)
    text = path.read_text()
    rendered = render_readme(text)
    if check:
        if rendered != text:
            print(f"{path} is stale: run python scripts/update_readme.py", file=sys.stderr)
            return 1
        return 0
    if rendered != text:
        path.write_text(rendered)
        print(f"updated {path}")
    return 0


if __name__ == "__main__":
    sys.exit(CLI(main, as_positional=False))
