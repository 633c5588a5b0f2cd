"""The bars a run of the miniature must clear to show the method working, read from a quickstart's summary.json.

One definition for the quickstart's verdict lines (`scripts/quickstart_summary.py` prints one per bar) and for the
robustness grid (`scripts/miniature_seeds.py` holds every cell to the same). Each bar is a pure function of the
summary's numbers; a number that is missing fails its bar (a run that did not produce it showed nothing).
"""

from __future__ import annotations

# A finding counts when its one-sided test rejects at this level (the margin trend; a Table 2 gap, McNemar).
SIGNIFICANCE = 0.05
MIN_PARSE_RATE = 0.8
MIN_MARGIN_AUROC = 0.8   # the margin must rank a correct Stage-1 answer above a wrong one this often
# First proposals holding the evidence: one-sided binomial p against a random window of their length, at the level
# of every other test here. (It was 1e-6 when every sample went to Stage 2; with a working exit only the ~25 samples
# whose brief event Stage 1 missed are routed, and on the half with a decoy the first proposal cannot tell the two
# light scenes apart by design: the verifier and reflection are what recover those.)
EVIDENCE_P = SIGNIFICANCE

BARS = {
    "stage1_2x_chance": "Stage-1 held-out accuracy at least twice chance",
    "margin_auroc": f"the margin ranks correct Stage-1 answers above wrong ones (AUROC >= {MIN_MARGIN_AUROC})",
    "temperature_inside": "the fitted temperature T lies inside its search bounds",
    "certified_exit": "calibration certified an early exit (a threshold with exits)",
    "proposals_parse": f"at least {MIN_PARSE_RATE:.0%} of the first proposals parse into a window",
    "proposals_hold_evidence": ("first proposals contain the evidence more often than a random window (binomial "
                                f"p < {EVIDENCE_P:g})"),
    "stage2_beats_stage1": ("on the samples routed to Stage 2 the final answer beats Stage 1's, the paired 95 % "
                            "interval (bootstrap over videos) above 0"),
    "full_beats_no_stage2": "Table 2: full beats no_stage2, and at least one row differs from full (McNemar)",
}


def evidence_p_value(props: dict) -> float | None:
    """One-sided binomial p of the first proposals containing the evidence as often as they do, against a random
    window of the same length (`chance_overlap`); None without proposals."""
    from scipy.stats import binomtest

    contains, chance = props.get("contains_evidence") or {}, props.get("chance_overlap")
    if not contains.get("n") or chance is None:
        return None
    return float(binomtest(contains["k"], contains["n"], min(1.0, chance), alternative="greater").pvalue)


def bar_values(facts: dict) -> dict[str, tuple[bool, str]]:
    """Per bar of `BARS`: (held, the number it was decided on, as text) for one run's summary.json `facts`."""
    s1 = facts.get("stage1_heldout") or {}
    auroc = (facts.get("margin_trend") or {}).get("auroc")
    cal = facts.get("calibration") or {}
    stage2 = facts.get("stage2") or {}
    props = stage2.get("proposals") or {}
    parsed = (props.get("parsed") or {}).get("rate")
    p_evidence = evidence_p_value(props)
    routed = (stage2.get("routed_gain") or {}).get("routed") or {}
    gain = routed.get("gain_video_bootstrap") or {}
    table2 = {v: (row.get("accuracy") or {}).get("rate") for v, row in (facts.get("table2") or {}).items()}
    gaps = facts.get("table2_gaps") or {}
    s1_rate, chance = s1.get("rate"), s1.get("chance")
    full, alone = table2.get("full"), table2.get("no_stage2")
    smallest_gap = min((p for p in gaps.values() if p is not None), default=None)
    return {
        "stage1_2x_chance": (s1_rate is not None and chance is not None and s1_rate >= 2 * chance,
                             f"{_pct(s1_rate)} at chance {_pct(chance)}"),
        "margin_auroc": (auroc is not None and auroc >= MIN_MARGIN_AUROC, f"AUROC {_num(auroc)}"),
        "temperature_inside": (cal.get("temperature") is not None and not cal.get("at_bound"),
                               f"T = {_num(cal.get('temperature'))} in {cal.get('bounds')}"),
        "certified_exit": (bool(cal.get("exit_rate")) and not cal.get("no_exit"),
                           f"tau = {_num(cal.get('tau'))}, exit rate {_pct(cal.get('exit_rate'))}"),
        "proposals_parse": (parsed is not None and parsed >= MIN_PARSE_RATE, f"{_pct(parsed)} parsed"),
        "proposals_hold_evidence": (p_evidence is not None and p_evidence < EVIDENCE_P,
                                    (f"{_pct((props.get('contains_evidence') or {}).get('rate'))} contain it, "
                                     f"p = {_p(p_evidence)}")),
        "stage2_beats_stage1": (gain.get("low") is not None and gain["low"] > 0,
                                (f"Stage 1 {_pct((routed.get('stage1') or {}).get('rate'))} -> final "
                                 f"{_pct((routed.get('final') or {}).get('rate'))}, gain interval "
                                 f"[{_num(gain.get('low'))}, {_num(gain.get('high'))}]")),
        "full_beats_no_stage2": (full is not None and alone is not None and full > alone
                                 and smallest_gap is not None and smallest_gap < SIGNIFICANCE,
                                 f"full {_pct(full)} vs no_stage2 {_pct(alone)}, smallest McNemar p "
                                 + _p(smallest_gap)),
    }


def verdict_lines(facts: dict) -> list[str]:
    """One line per bar ("holds" / "DOES NOT HOLD", what it checks, the number), then the run's verdict."""
    values = bar_values(facts)
    lines = [f"{'holds' if held else 'DOES NOT HOLD'}: {BARS[bar]} ({reading})" for bar, (held, reading) in
             values.items()]
    failed = [bar for bar, (held, _) in values.items() if not held]
    lines.append("verdict: the method works here (every bar holds)" if not failed else
                 f"verdict: {len(failed)} of {len(values)} bars do not hold ({', '.join(failed)})")
    return lines


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f} %"


def _num(x) -> str:
    return "–" if x is None else f"{x:.3g}"


def _p(x) -> str:
    return "–" if x is None else f"{x:.2g}"
