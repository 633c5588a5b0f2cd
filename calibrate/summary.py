"""summary.md of a calibration run: the numbers of calibration.json as tables and sentences."""

from __future__ import annotations

import math

from cader.contracts.calibration import NO_EXIT_TAU


def _fmt(x, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "–"
    return f"{x:.{digits}g}" if isinstance(x, float) else str(x)


def render_summary(p: dict) -> str:
    fit, sel, paper = p["fit"], p["select"], p["paper_point"]
    tau_txt = "no exit (every sample goes to Stage 2)" if p["tau"] >= NO_EXIT_TAU else _fmt(p["tau"], 6)
    lines = [
        "# CADER calibration",
        "",
        (
            f"Sources: {', '.join(p['sources'])} — {p['n_samples']} usable samples, {p['n_benchmarks']} benchmark(s); "
            f"skipped rows: {p['skipped'] or 'none'}."
        ),
        "",
        (
            f"**T = {_fmt(p['temperature'])}, tau = {tau_txt}** (mode `{p['mode']}`, alpha = {p['alpha']}, "
            f"delta = {p['delta']}, seed = {p['seed']})."
        ),
        "",
        "## Temperature fit (gold-letter NLL; ECE on P_top1, 15 equal-width bins)",
        "",
        "| | n | NLL | ECE |",
        "|---|---|---|---|",
        f"| T = 1 (raw) | {fit.get('n')} | {_fmt(fit.get('nll_before'))} | {_fmt(fit.get('ece_before'))} |",
        f"| paper T = 2 | {fit.get('n')} | {_fmt(fit.get('nll_paper'))} | {_fmt(fit.get('ece_paper'))} |",
        (
            f"| fitted T = {_fmt(p['temperature'], 3)} | {fit.get('n')} | {_fmt(fit.get('nll_after'))} "
            f"| {_fmt(fit.get('ece_after'))} |"
        ),
        "",
        fit_note(fit),
        "",
        "## Early exit on the selection split",
        "",
        "| | T | tau | n | exit rate | exit accuracy | upper bound on exit error | final accuracy |",
        "|---|---|---|---|---|---|---|---|",
        (
            f"| chosen | {_fmt(p['temperature'], 3)} | {tau_txt} | {sel['n']} | {_fmt(sel['exit_rate'])} | "
            f"{_fmt(sel['exit_accuracy'])} | {_fmt(sel['upper_bound_error'])} | {_fmt(sel.get('final_accuracy'))} |"
        ),
        (
            f"| paper | 2 | 0.97 | {paper['n']} | {_fmt(paper['exit_rate'])} | {_fmt(paper['exit_accuracy'])} | "
            f"{_fmt(paper['upper_bound_error'])} | {_fmt(paper.get('final_accuracy'))} |"
        ),
        "",
        (
            f"Upper bounds are one-sided {1 - p['delta']:.0%} Clopper–Pearson{cluster_note(p)}. The paper point "
            f"{'meets' if paper['meets_alpha'] else 'does not meet'} alpha = {p['alpha']} on this data."
        ),
        "",
        split_note(p),
        "",
        "## Samples per margin interval (paper Table 4 bins, all samples)",
        "",
        "| margin | " + " | ".join(p["table4_counts"]["paper_T"]) + " |",
        "|---|" + "---|" * len(p["table4_counts"]["paper_T"]),
        "| paper T = 2 | " + " | ".join(str(v) for v in p["table4_counts"]["paper_T"].values()) + " |",
        f"| fitted T = {_fmt(p['temperature'], 3)} | "
        + " | ".join(str(v) for v in p["table4_counts"]["fitted_T"].values())
        + " |",
        "",
    ]
    lines += guarantee_lines(p)
    lines += ["## Figures", ""]
    lines += [f"- `{f}`" for f in p.get("figures", []) if f.endswith(".png")]
    return "\n".join(lines) + "\n"


def fit_note(fit: dict) -> str:
    """What the temperature table's two criteria say: T is chosen by NLL; ECE is a binned second opinion that can
    rise while NLL falls, more easily the fewer samples share its 15 bins."""
    if fit.get("fixed") or fit.get("nll_after") is None or fit.get("nll_before") is None:
        return "T was given, not fitted."
    n, bins = fit.get("n") or 0, fit.get("ece_bins") or 15
    text = (f"T minimises the gold-letter NLL on the fit split (n = {n}); ECE is a second criterion, binned "
            f"({bins} equal-width bins of P_top1, about {n / bins:.2g} samples per bin on average), that the fit "
            "does not optimise.")
    if fit["nll_after"] > fit["nll_before"] + 1e-9:
        return text + f" **The NLL rose ({_fmt(fit['nll_before'])} → {_fmt(fit['nll_after'])}): the fit is wrong.**"
    if (fit.get("ece_after") or 0) > (fit.get("ece_before") or 0):
        text += (f" Here NLL fell ({_fmt(fit['nll_before'])} → {_fmt(fit['nll_after'])}) while ECE rose "
                 f"({_fmt(fit['ece_before'])} → {_fmt(fit['ece_after'])}): NLL punishes a confident wrong answer "
                 "hardest, so its T softens the wrong answers' confidence at the price of the right ones', which "
                 "ECE's bins weigh by count; and with few samples per bin ECE is noisy. A rising ECE is not by "
                 "itself a sign of a wrong fit; a rising NLL would be.")
    return text


def cluster_note(p: dict) -> str:
    if not p.get("cluster_bound"):
        return ", counting questions as independent trials"
    d = p["select"].get("design_effect")
    at_tau = f"; design effect at the chosen tau {_fmt(d, 3)}" if d is not None else ""
    return f" on effective counts (exits and errors / design effect over videos{at_tau})"


def split_note(p: dict) -> str:
    if "split_by" not in p:
        return ""
    asked = p.get("split_by_requested")
    fell_back = f" (asked: {asked}; fell back, too few videos)" if asked and asked != p["split_by"] else ""
    pv = p.get("per_video")
    exact = (f" Exact per-video mode: tau certified on one random question from each of {pv['videos']} selection "
             f"videos ({pv['questions_in_selection']} questions)." if pv else "")
    return (f"Fit/select split by {p['split_by']}{fell_back}: {p.get('videos_fit')} videos fit T, "
            f"{p.get('videos_select')} select tau, {p.get('videos_in_both')} in both; rows without a video (each its "
            f"own): {p.get('rows_without_video')}.{exact}")


def guarantee_lines(p: dict) -> list[str]:
    """summary.md's account of the Learn-then-Test constraints, per-benchmark taus, verifier and validity runs."""
    sel, lines = p["select"], []
    if sel.get("constraints"):
        lines += ["## Constraints (Learn-then-Test)", "", "| constraint | level | how | met | value | upper bound | why not |",
                  "|---|---|---|---|---|---|---|"]
        lines += [f"| {c['name']} | {c['level']} | {c['handled']} | {'yes' if c['met'] else 'no'} | "
                  f"{_fmt(c.get('value'))} | {_fmt(c.get('upper_bound'))} | {c.get('reason') or ''} |"
                  for c in sel["constraints"]]
        lines.append("")
    if p.get("per_benchmark"):
        lines += ["## tau per benchmark", "", "| benchmark | n | tau | exit rate | upper bound on exit error |",
                  "|---|---|---|---|---|"]
        for name, g in p["per_benchmark"].items():
            tau = "no exit" if g.get("no_exit") else _fmt(g.get("tau"), 6)
            lines.append(f"| {name} | {g.get('n')} | {tau} | {_fmt(g.get('exit_rate'))} | "
                         f"{_fmt(g.get('upper_bound_error'))} |")
        lines.append("")
    v = p.get("verifier")
    if v:
        got = _fmt(v["threshold"]) if v["threshold"] is not None else f"none certified ({v.get('reason')})"
        bound = ("bound on effective counts over videos" + (f", design effect {_fmt(v['design_effect'])}"
                                                             if v.get("design_effect") is not None else "")
                 if v.get("cluster_bound") else "bound counting crops")
        lines += [(f"Verifier threshold delta_v = {got} for alpha_v = {v['alpha_v']} on {v['n']} first crops with "
                   f"an evidence window ({bound}; paper 0.60 accepts {v['paper_n_accepted']}, miss rate "
                   f"{_fmt(v.get('paper_miss_rate'))}); left out: {v['left_out'] or 'none'}."), ""]
    g = p.get("guarantee_validity")
    if g:
        how = (f" (split by {g.get('split_by', 'question')}, "
               f"{'bound on effective counts over videos' if g.get('cluster_bound') else 'question-counting bound'})")
        lines += [(f"Over {g['splits']} random fit/select/test splits{how}, the realised {g['risk']} exceeded "
                   f"{g['level']} in {g['above_level']} ({_fmt(g['above_rate'], 3)}; delta = {g['delta']}"
                   f"{'' if g['guaranteed'] else ', not guaranteed by this mode'}); the guarantee cost "
                   f"{_fmt(g['mean_price'], 3)} exit rate against the oracle tau "
                   "(`figures/guarantee_validity.png`)."), ""]
    return lines
