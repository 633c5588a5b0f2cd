"""SUMMARY.md of a quickstart run (scripts/quickstart.sh): the paper's findings in miniature, with intervals, and red
flags for anything that means the run proves nothing.

Reads `<root>/eval/heldout_stage1/predictions.jsonl` (Stage 1 on the held-out split), `<root>/calibration/`,
`<root>/eval/full/synthetic/` and `<root>/eval/<variant>/synthetic/` (paper Table 2 rows), and `<root>/judge/`.
"""

from __future__ import annotations

import json
from pathlib import Path

from cader.evaluate.judge.aggregate import NOT_A_REAL_JUDGE
from cader.evaluate.judge.providers import LOOPBACK_MODEL
from cader.evaluate.trajectory_stats import cost_comparison, proposal_stats, rate, routed_gain, verifier_stats
from cader.vlm.files import write_atomic
from jsonargparse import CLI

VARIANTS = ("full", "no_stage2", "uniform_stage2", "no_verifier", "no_reflection", "no_rgr")
MIN_PARSE_RATE = 0.8
# A finding counts when its one-sided test rejects at this level (the margin trend; a Table 2 gap, McNemar).
SIGNIFICANCE = 0.05


def margin_trend(margins: list[float], correct: list[bool]) -> dict:
    """Does Stage-1 accuracy rise with the margin (the premise of CADER's early exit, paper Fig. 5)? The one-sided
    Mann-Whitney U test that correct answers have larger margins than wrong ones; its AUROC is U / (n_right n_wrong).
    p is None when one of the two groups is empty."""
    from scipy.stats import mannwhitneyu

    right = [m for m, c in zip(margins, correct) if c]
    wrong = [m for m, c in zip(margins, correct) if not c]
    if not right or not wrong:
        return {"n_correct": len(right), "n_wrong": len(wrong), "auroc": None, "p_value": None}
    test = mannwhitneyu(right, wrong, alternative="greater")
    return {"n_correct": len(right), "n_wrong": len(wrong), "auroc": float(test.statistic) / (len(right) * len(wrong)),
            "p_value": float(test.pvalue)}


def _load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _records(path: Path) -> list[dict]:
    from cader.contracts.jsonl import read_jsonl

    return [r for r in read_jsonl(path)] if path.exists() else []


def _link(root: Path, path: Path) -> str:
    return f"[{path.relative_to(root)}]({path.relative_to(root)})"


def _pct(value) -> str:
    return "–" if value is None else f"{100 * value:.1f} %"


def _ci(r: dict) -> str:
    if r["rate"] is None:
        return "– (n = 0)"
    lo, hi = r["ci95"]
    return f"{r['k']}/{r['n']} = {_pct(r['rate'])} [{_pct(lo)}, {_pct(hi)}]"


def _chance(record: dict) -> float:
    return 1.0 / max(1, len(record.get("letters") or record.get("options") or [0]))


def _variant_dir(root: Path, variant: str) -> Path:
    return root / "eval" / ("full" if variant == "full" else variant) / "synthetic"


def stage1_section(root: Path, flags: list[str], facts: dict) -> list[str]:
    records = [r for r in _records(root / "eval" / "heldout_stage1" / "predictions.jsonl") if not r.get("error")]
    if not records:
        flags.append("no held-out Stage-1 predictions")
        return ["- **no held-out Stage-1 predictions**"]
    chance = _chance(records[0])
    correct = [r["stage1"]["pred"] == r["answer"] for r in records]
    acc = rate(sum(correct), len(correct), chance)
    facts["stage1_heldout"] = acc
    lines = [(f"- held-out Stage-1 accuracy {_ci(acc)}; chance {_pct(chance)}, "
             f"one-sided binomial p = {acc['p_above_chance']:.2g}")]
    if acc["ci95"][0] is None or acc["ci95"][0] <= chance:
        flags.append(f"Stage-1 accuracy is within chance ({_ci(acc)} vs {_pct(chance)})")
    trend = margin_trend([r["stage1"]["margin"] for r in records], correct)
    facts["margin_trend"] = trend
    if trend["p_value"] is None or trend["p_value"] >= SIGNIFICANCE:
        flags.append("Stage-1 accuracy does not rise with the margin (correct vs wrong margins, one-sided "
                     f"Mann-Whitney p = {_p(trend['p_value'])}): the early exit has nothing to rest on")
    lines.append(f"- correct answers have larger margins than wrong ones: AUROC {_number(trend['auroc'])}, "
                 f"one-sided Mann-Whitney p = {_p(trend['p_value'])}")
    # accuracy by margin quartile (the trend of the paper's Fig. 5 / Table 4)
    ranked = sorted(zip((r["stage1"]["margin"] for r in records), correct))
    k = len(ranked)
    rows = ["", "| margin quartile | margin range | Stage-1 accuracy [95 % CI] |", "|---|---|---|"]
    for q in range(4):
        part = ranked[q * k // 4:(q + 1) * k // 4]
        if part:
            r = rate(sum(c for _, c in part), len(part))
            rows.append(f"| Q{q + 1} | {part[0][0]:.3g}–{part[-1][0]:.3g} | {_ci(r)} |")
    return lines + rows


def calibration_section(root: Path, flags: list[str], facts: dict) -> list[str]:
    cal = _load(root / "calibration" / "calibration.json")
    if not cal:
        flags.append("no calibration.json")
        return ["- **no calibration.json found**"]
    fit, sel = cal.get("fit", {}), cal.get("select", {})
    facts["calibration"] = {"temperature": cal["temperature"], "tau": cal["tau"], "mode": cal.get("mode"),
                            "exit_rate": sel.get("exit_rate"), "exit_accuracy": sel.get("exit_accuracy")}
    lines = [(f"- {_link(root, root / 'calibration' / 'calibration.json')}: T = {cal['temperature']:.3g}, "
             f"τ = {cal['tau']:.4g} (mode {cal.get('mode')}); on the selection split (n = {sel.get('n')}): exit rate "
             f"{_pct(sel.get('exit_rate'))}, exit accuracy {_pct(sel.get('exit_accuracy'))}")]
    if fit.get("at_bound"):
        flags.append(f"the fitted temperature T = {cal['temperature']:.3g} sits on a search bound {fit.get('bounds')}")
    if sel.get("no_exit"):
        lines.append("- no threshold qualified: every sample goes to Stage 2")
    lines += [f"- figure: {_link(root, f)}" for f in sorted((root / "calibration" / "figures").glob("*.png"))]
    return lines


def stage2_section(root: Path, flags: list[str], facts: dict) -> list[str]:
    records = _records(_variant_dir(root, "full") / "predictions.jsonl")
    if not records:
        flags.append("no full CADER run on the synthetic benchmark")
        return ["- **no full CADER run found**"]
    props, verify, gain = proposal_stats(records), verifier_stats(records), routed_gain(records)
    facts["stage2"] = {"proposals": props, "verifier": verify, "routed_gain": gain}
    lines = [f"- routed to Stage 2: {props['routed']} of {len(records)}; fallbacks {gain['fallbacks'] or 'none'}",
             f"- first proposals parsed into a window: {_ci(props['parsed'])}",
             (f"- parsed proposals overlapping the evidence: {_ci(props['overlaps_evidence'])} "
             f"(a random window of the same length: {_pct(props['chance_overlap'])}); containing it: "
             f"{_ci(props['contains_evidence'])}"),
             (f"- verifier P_yes on crops with the evidence {_pct(verify['mean_p_yes_with_evidence'])} "
             f"(n = {verify['n_with_evidence']}) vs without {_pct(verify['mean_p_yes_without'])} "
             f"(n = {verify['n_without']}); AUROC {verify['auroc'] if verify['auroc'] is None else round(verify['auroc'], 3)}")]
    for name, block in (("all routed samples", gain["routed"]), ("samples with an accepted crop", gain["accepted"])):
        if block["n"]:
            lines.append(f"- {name}: Stage 1 {_ci(block['stage1'])} → final {_ci(block['final'])} "
                         f"({block['corrected']} corrected, {block['overturned']} overturned, McNemar p = "
                         f"{block['mcnemar']['p_value']:.2g})")
    parsed = props["parsed"]
    if props["routed"] and parsed["rate"] is not None and parsed["rate"] < MIN_PARSE_RATE:
        flags.append(f"only {_pct(parsed['rate'])} of the proposals parse (goal ≥ {_pct(MIN_PARSE_RATE)})")
    if props["routed"] and sum(gain["fallbacks"].values()) == props["routed"]:
        flags.append("every Stage-2 attempt fell back to the Stage-1 answer")
    return lines


def table2_section(root: Path, flags: list[str], facts: dict) -> list[str]:
    lines = ["| variant | n | accuracy [95 % CI] | vs full (McNemar p) | forwards / sample | frames / sample | report |",
             "|---|---|---|---|---|---|---|"]
    accuracies, gaps = {}, {}
    for variant in VARIANTS:
        folder = _variant_dir(root, variant)
        report = _load(folder / "report.json")
        records = [r for r in _records(folder / "predictions.jsonl")]
        if report is None or not records:
            lines.append(f"| {variant} | – | not run | | | | |")
            continue
        acc = rate(sum(bool(r.get("correct")) for r in records), len(records))
        accuracies[variant] = acc["rate"]
        facts.setdefault("table2", {})[variant] = {"accuracy": acc, "cost_per_sample": per_sample(report)}
        comparison = report.get("comparison") or {}
        mcnemar = (comparison.get("mcnemar") or {}).get("p_value")
        per = per_sample(report)
        vs = "–" if variant == "full" else (f"{mcnemar:.2g}" if mcnemar is not None else "–")
        if variant != "full":
            gaps[variant] = mcnemar
        lines.append(f"| {variant} | {acc['n']} | {_ci(acc)} | {vs} | {per.get('forwards', '–')} | "
                     f"{per.get('frames_decoded', '–')} | {_link(root, folder / 'report.md')} |")
    if len(accuracies) > 1 and len(set(accuracies.values())) == 1:
        flags.append("every Table 2 row has the same accuracy: the ablations change nothing on this run")
    tested = {v: p for v, p in gaps.items() if p is not None}
    if gaps and not any(p < SIGNIFICANCE for p in tested.values()):
        smallest = min(tested.values()) if tested else None
        flags.append("no Table 2 row differs significantly from `full` (smallest McNemar p = "
                     f"{_p(smallest)}): the run does not show what any component adds")
    lines += safeguard_reading(accuracies, facts)
    full, uniform = (_records(_variant_dir(root, v) / "predictions.jsonl") for v in ("full", "uniform_stage2"))
    if full and uniform:   # Table 3's point: the early exit saves Stage-2 cost at the same accuracy (P4)
        cost = cost_comparison(full, uniform)
        facts["cost_vs_uniform"] = cost
        ratio = cost["ratio_full_over_uniform"]
        lines += ["", (f"- cost of `full` as a fraction of `uniform_stage2` on the same {cost['n']} samples: "
                  f"forwards {_number(ratio['forwards'])}, decoded frames {_number(ratio['frames_decoded'])} "
                  f"(goal ≤ {cost['goal']}); accuracy {_ci(cost['full']['accuracy'])} vs "
                  f"{_ci(cost['uniform_stage2']['accuracy'])}, McNemar p = {cost['mcnemar']['p_value']:.2g}")]
    return lines


def safeguard_reading(accuracies: dict, facts: dict) -> list[str]:
    """Why the verifier, reflection and RGR ablations can match `full`: all three act only after the verifier rejects
    a crop (Algorithm 1), so where the first proposals hold the evidence they have little to fix. Said only when the
    run's own proposal numbers show it."""
    same = [v for v in ("no_verifier", "no_reflection", "no_rgr") if "full" in accuracies and
            v in accuracies and accuracies[v] == accuracies["full"]]  # fmt: skip
    contains = ((facts.get("stage2") or {}).get("proposals") or {}).get("contains_evidence") or {}
    if not same or not contains.get("n"):
        return []
    names = ", ".join(f"`{v}`" for v in same)
    return ["", (f"- {names} match `full`'s accuracy on this run: the first proposal held the evidence on "
                 f"{contains['k']}/{contains['n']} routed samples, and the verifier, reflection and RGR only act once "
                 "the verifier rejects a crop (Algorithm 1); they can still differ in cost")]


def per_sample(report: dict) -> dict:
    return report.get("cost", {}).get("per_sample", {})


def judge_section(root: Path, caveats: list[str], facts: dict) -> list[str]:
    """The judge's headline numbers, and, first, a warning when they did not come from a real judge (a caveat on the
    judge's numbers: the method's findings above do not depend on the judge)."""
    judge = _load(root / "judge" / "judge_report.json")
    if not judge:
        return ["- **no judge report found**"]
    facts["judge"] = {"real_judge": judge.get("real_judge"), "judge_model": judge.get("judge_model")}
    lines = []
    if judge.get("real_judge") is False or judge.get("judge_model") == LOOPBACK_MODEL:
        caveats.append("the AgentVidBench judge is the loopback test double, not a real judge: its scores are made "
                       "up and prove only that the judge pipeline runs")
        lines.append(f"- **{judge.get('warning') or NOT_A_REAL_JUDGE}.** Set JUDGE_BASE_URL and JUDGE_MODEL "
                     "to judge with a real model.")
    failed = judge.get("failed_judgments") or []
    lines.append(
        f"- {_link(root, root / 'judge' / 'judge_report.md')}: judge `{judge.get('judge_model')}`, n = {judge['n']}, "
        f"accuracy {_number(judge.get('accuracy'))}, Traj {_number(judge.get('traj'))}, "
        f"MC-rate {_number(judge.get('mc_rate'))}, failed judgments {len(failed)}"
    )
    if (judge.get("rerun") or {}).get("summary"):
        lines.append(f"- last judge run: {judge['rerun']['summary']}")
    return lines


def judge_lines(root: Path) -> list[str]:
    """The judge section alone (the loopback warning, if any, first)."""
    return judge_section(root, [], {})


def _number(value) -> str:
    return "–" if value is None else f"{value:.3f}"


def _p(value) -> str:
    return "–" if value is None else f"{value:.2g}"


def summarize(root: Path) -> tuple[str, dict]:
    """(SUMMARY.md text, the headline numbers and red flags as a dict)."""
    flags: list[str] = []
    caveats: list[str] = []
    facts: dict = {}
    export = root / "sft" / "export"
    sections = [("1. Tiny SFT", [f"- exported model: {_link(root, export)}"] if (export / "config.json").exists()
                 else ["- **no export found**"])]
    if not (export / "config.json").exists():
        flags.append("no SFT export")
    sections += [
        ("2. Stage 1 on the held-out split (paper Fig. 5 / Table 4 in miniature)", stage1_section(root, flags, facts)),
        ("3. Calibration", calibration_section(root, flags, facts)),
        ("4. Stage 2 on the synthetic test split (Table 5 in miniature)", stage2_section(root, flags, facts)),
        ("5. Table 2 rows on the synthetic test split", table2_section(root, flags, facts)),
        ("6. AgentVidBench judge", judge_section(root, caveats, facts)),
    ]
    lines = [f"# Quickstart summary: `{root}`", ""]
    if (root / "view.html").exists():
        lines += [(f"Every trajectory, report and figure of this run in one page: {_link(root, root / 'view.html')} "
                  "(`cader view`; open it in a browser, no server needed)."), ""]
    if flags:
        lines += ["## Red flags: this run does not show the method working", ""]
        lines += [f"- **{flag}**" for flag in flags]
    else:
        lines += [("No red flags: Stage 1 is above chance and its accuracy rises with the margin, T is inside its "
                  "search bounds, proposals parse, Stage 2 ran, and at least one Table 2 row differs from `full`.")]
    if caveats:
        lines += ["", "## Caveat: numbers that are not real", ""]
        lines += [f"- **{caveat}**" for caveat in caveats]
    for title, body in sections:
        lines += ["", f"## {title}", "", *body]
    facts["red_flags"] = flags
    facts["caveats"] = caveats
    return "\n".join(lines) + "\n", facts


def main(root: str = "runs/tiny", json_out: str | None = None) -> Path:
    """Write <root>/SUMMARY.md and <root>/summary.json (the numbers behind it; `scripts/update_readme.py` reads it).

    Args:
        root: The quickstart output folder.
        json_out: Also write the numbers here (e.g. docs/measured/quickstart.json for the README).
    """
    base = Path(root)
    text, facts = summarize(base)
    out = base / "SUMMARY.md"
    write_atomic(out, text)
    payload = json.dumps(facts, indent=1, default=str) + "\n"
    write_atomic(base / "summary.json", payload)
    if json_out:
        Path(json_out).parent.mkdir(parents=True, exist_ok=True)
        write_atomic(Path(json_out), payload)
    print(text)
    return out


if __name__ == "__main__":
    CLI(main, as_positional=False)
