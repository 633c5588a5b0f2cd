"""What Stage 2 did on a run, measured against the evidence windows a benchmark states (`meta["evidence_window"]`).

Pure functions over `predictions.jsonl` records (dicts), for reports and the quickstart summary:
- `proposal_stats`: how often the first proposal (Algorithm 1 line 15, on F1) parsed into a window, and how often
  that window overlaps / contains the evidence;
- `verifier_stats`: whether the verifier's P_yes (App. C.3) separates crops that contain the evidence from crops
  that do not (means and AUROC);
- `routed_gain`: on samples routed to Stage 2, Stage-1 accuracy against the final accuracy (paired, McNemar, and a
  paired bootstrap that resamples videos), split by whether a crop was accepted;
- `rate`: a proportion with its exact 95 % interval and a one-sided binomial test against a chance rate.
Records without an evidence window are left out of the evidence measures and counted.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def rate(k: int, n: int, chance: float | None = None) -> dict:
    """k / n with its 95 % Clopper–Pearson interval; with `chance`, the one-sided binomial test p(rate > chance)."""
    from cader.calibrate.binomial import clopper_pearson_interval
    from scipy.stats import binomtest

    k, n = int(k), int(n)
    if n == 0:
        return {"k": 0, "n": 0, "rate": None, "ci95": [None, None], "chance": chance, "p_above_chance": None}
    lo, hi = clopper_pearson_interval(k, n)
    out = {"k": k, "n": n, "rate": k / n, "ci95": [float(lo), float(hi)], "chance": chance, "p_above_chance": None}
    if chance is not None:
        out["p_above_chance"] = float(binomtest(k, n, chance, alternative="greater").pvalue)
    return out


def overlap(a: Sequence[float], b: Sequence[float]) -> float:
    """Length of the intersection of two [start, end] windows (0 when they are disjoint)."""
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


def contains(outer: Sequence[float], inner: Sequence[float]) -> bool:
    return outer[0] <= inner[0] and inner[1] <= outer[1]


def _evidence(record: dict) -> list[float] | None:
    window = (record.get("meta") or {}).get("evidence_window")
    if window is None or len(window) != 2:
        return None
    return [float(window[0]), float(window[1])]


def _steps(record: dict, phase: str) -> list[dict]:
    stage2 = record.get("stage2") or {}
    return [s for s in stage2.get("steps") or [] if s.get("phase") == phase]


def proposal_stats(records: Sequence[dict]) -> dict:
    """First proposals of the routed samples: parse rate, and overlap/containment of the evidence window.

    `chance_overlap` is what a window of the same length placed uniformly at random would score on average (the
    fraction of start positions whose window overlaps the evidence), for the parsed proposals with evidence.
    """
    routed = [r for r in records if r.get("stage2")]
    firsts = [steps[0] for steps in (_steps(r, "propose") for r in routed) if steps]
    parsed = [(r, s) for r in routed for s in _steps(r, "propose")[:1] if s.get("window")]
    with_evidence = [(s["window"], _evidence(r), float(r.get("duration") or 0.0)) for r, s in parsed if _evidence(r)]
    overlaps = [overlap(w, e) > 0 for w, e, _ in with_evidence]
    contained = [contains(w, e) for w, e, _ in with_evidence]
    chance = []
    for w, e, d in with_evidence:
        length = w[1] - w[0]
        if d > length > 0:  # starts in [0, d - length] whose window meets [e0, e1]
            lo, hi = max(0.0, e[0] - length), min(d - length, e[1])
            chance.append(max(0.0, hi - lo) / (d - length))
    return {
        "routed": len(routed),
        "proposed": len(firsts),
        "parsed": rate(len(parsed), len(firsts)),
        "with_evidence": len(with_evidence),
        "overlaps_evidence": rate(sum(overlaps), len(overlaps)),
        "contains_evidence": rate(sum(contained), len(contained)),
        "chance_overlap": float(np.mean(chance)) if chance else None,
    }


def verifier_stats(records: Sequence[dict]) -> dict:
    """P_yes of every verified crop, split by whether the crop contains the evidence window; AUROC of P_yes."""
    pos, neg = [], []
    for record in records:
        evidence = _evidence(record)
        if evidence is None:
            continue
        for step in _steps(record, "verify"):
            if step.get("p_yes") is None or not step.get("crop"):
                continue
            (pos if contains(step["crop"], evidence) else neg).append(float(step["p_yes"]))
    out = {"n_with_evidence": len(pos), "n_without": len(neg),
           "mean_p_yes_with_evidence": float(np.mean(pos)) if pos else None,
           "mean_p_yes_without": float(np.mean(neg)) if neg else None, "auroc": None}
    if pos and neg:
        import torch
        from torchmetrics.functional.classification import binary_auroc

        scores = torch.tensor(pos + neg, dtype=torch.float64)
        labels = torch.tensor([1] * len(pos) + [0] * len(neg))
        out["auroc"] = float(binary_auroc(scores, labels))
    return out


def _video_bootstrap(a: Sequence[bool], b: Sequence[bool], rows: Sequence[dict]) -> dict | None:
    """Paired bootstrap of mean(a) - mean(b) resampling the rows' videos (questions on one video are not
    independent); None without rows."""
    from cader.evaluate.report_stats import cluster_of
    from cader.evaluate.stats import paired_bootstrap_diff

    if not rows:
        return None
    return paired_bootstrap_diff([float(x) for x in a], [float(x) for x in b], clusters=[cluster_of(r) for r in rows])


def routed_gain(records: Sequence[dict]) -> dict:
    """Stage-1 vs final correctness on the samples routed to Stage 2 (the paper's Table 5 question), all routed
    samples and those whose crop was accepted, with McNemar's exact test on the discordant pairs and a paired
    bootstrap of final - Stage-1 accuracy over videos ("gain_video_bootstrap", fractions)."""
    from cader.evaluate.stats import mcnemar_exact

    def block(rows: list[dict]) -> dict:
        s1 = [r["stage1"]["pred"] == r["answer"] for r in rows]
        final = [bool(r.get("correct")) for r in rows]
        test = mcnemar_exact(final, s1) if rows else None
        return {"n": len(rows), "stage1": rate(sum(s1), len(rows)), "final": rate(sum(final), len(rows)),
                "corrected": sum(f and not s for f, s in zip(final, s1)),
                "overturned": sum(s and not f for f, s in zip(final, s1)), "mcnemar": test,
                "gain_video_bootstrap": _video_bootstrap(final, s1, rows)}

    routed = [r for r in records if r.get("stage2") and r.get("stage1") and not r.get("error")]
    accepted = [r for r in routed if (r.get("stage2") or {}).get("accepted")]
    fallbacks: dict[str, int] = {}
    for r in routed:
        reason = r["stage2"].get("fallback")
        if reason:
            fallbacks[reason] = fallbacks.get(reason, 0) + 1
    return {"routed": block(routed), "accepted": block(accepted), "fallbacks": fallbacks}


def cost_comparison(full: Sequence[dict], uniform: Sequence[dict], goal: float = 0.6) -> dict:
    """CADER `full` against `uniform_stage2` (every sample through Stage 2) on the samples both ran: accuracy of each
    with its exact interval and McNemar's test on the pairs (is the accuracy the same?), mean forwards and decoded
    frames per sample, and full's cost as a fraction of uniform's (Table 3's saving from early exit; `meets_goal`
    when both fractions are at most `goal`). Failed records count as wrong and keep their cost."""
    from cader.evaluate.stats import mcnemar_exact

    by_id = {r["sample_id"]: r for r in uniform}
    pairs = [(r, by_id[r["sample_id"]]) for r in full if r.get("sample_id") in by_id]
    out: dict = {"n": len(pairs), "goal": goal}
    if not pairs:
        return {**out, "meets_goal": False, "ratio_full_over_uniform": {}}
    for name, rows in (("full", [a for a, _ in pairs]), ("uniform_stage2", [b for _, b in pairs])):
        correct = [bool(r.get("correct")) for r in rows]
        out[name] = {
            "accuracy": rate(sum(correct), len(rows)),
            "forwards": float(np.mean([(r.get("cost") or {}).get("forwards", 0) for r in rows])),
            "frames_decoded": float(np.mean([(r.get("cost") or {}).get("frames_decoded", 0) for r in rows])),
            "stage2_rate": float(np.mean([r.get("route") == "stage2" for r in rows])),
            "failures": sum(r.get("error") is not None for r in rows),
        }
    out["mcnemar"] = mcnemar_exact([bool(a.get("correct")) for a, _ in pairs], [bool(b.get("correct")) for _, b in pairs])
    out["accuracy_diff_video_bootstrap"] = _video_bootstrap(  # full - uniform_stage2, resampling videos
        [bool(a.get("correct")) for a, _ in pairs], [bool(b.get("correct")) for _, b in pairs], [a for a, _ in pairs])
    ratios = {key: (out["full"][key] / out["uniform_stage2"][key] if out["uniform_stage2"][key] else None)
              for key in ("forwards", "frames_decoded")}
    out["ratio_full_over_uniform"] = ratios
    out["meets_goal"] = all(v is not None and v <= goal for v in ratios.values())
    return out
