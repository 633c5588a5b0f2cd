"""Regenerate the measured figures in README.md and docs/ from the files that hold them, so no number there is typed
by hand.

Each generated block sits between `<!-- BEGIN generated: NAME -->` and `<!-- END generated: NAME -->` in any page
(README.md or a Markdown file under docs/) and is rendered from one file under docs/measured/, which the command
named in the block writes:

    python scripts/bench/run_all.py --json_out docs/measured/bench.json            # the bench table
    bash scripts/quickstart.sh && cp runs/tiny/summary.json docs/measured/quickstart.json   # the miniature
    cp runs/tiny/run_time.json docs/measured/quickstart_time.json    # its step times and the machine they ran on
    python scripts/miniature_seeds.py --json_out docs/measured/miniature_grid.json  # its robustness grid
    python scripts/miniature_trades.py --json_out docs/measured/miniature_trades.json  # the options against the default
    python scripts/update_readme.py                                                 # rewrite the blocks
    python scripts/update_readme.py --check true                                    # exit 1 when a page is stale

    bash scripts/bench/gpu_run.sh    # on a lent GPU; then copy its $OUT/gpu.json to docs/measured/gpu.json

`bench` (docs/bench.md), `grid`, `quickstart` and `quickstart_time` (docs/miniature.md) and `trades` (docs/video.md)
are the full blocks;
`bench_summary`, `grid_summary` and `quickstart_time_summary` are their one-paragraph forms for the README. tests/test_readme_generated.py runs the check and
requires every block somewhere, so the pages and docs/measured/ cannot drift apart and no figure can be dropped.
`gpu` (README) is optional: until a device run's gpu.json is there it renders one line saying so.
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


def pct(x) -> str:
    return "–" if x is None else f"{100 * x:.1f} %"


def num(x) -> str:
    return "–" if x is None else f"{x:.3f}"


def _ci(r: dict | None) -> str:
    if not r or r.get("rate") is None:
        return "–"
    return f"{r['k']}/{r['n']} = {pct(r['rate'])} (95 % CI {pct(r['ci95'][0])}–{pct(r['ci95'][1])})"


def render_bench(rows: list[dict]) -> str:
    runs = {(r["measured"]["date"], r["measured"]["commit"]) for r in rows if r.get("measured")}
    lines = [("Measured by `python scripts/bench/run_all.py --json_out docs/measured/bench.json` (this project's 2-core "
              "CPU machine; each value is a ratio against a baseline measured in the same run"
              + ("; rows re-measured with `--only KEYS --update true` name their own date, commit and load average"
                 if len(runs) > 1 else "") + "):"), "",
             "| check | what | value | goal | status | measured |", "|---|---|---|---|---|---|"]
    for r in rows:
        value = "–" if r.get("value") is None else f"{r['value']:g}"
        m = r.get("measured")
        when = f"{m['date']} `{m['commit']}`, load {m['load_average']:g}" if m else "an earlier run"
        lines.append(f"| {r['key']} | {r['title']} | {value} | {r['goal']} | {r['status']} | {when} |")
    return "\n".join(lines) + "\n"


def render_quickstart(facts: dict) -> str:
    lines = [("Measured by `bash scripts/quickstart.sh` (numbers from its `runs/tiny/summary.json`, copied to "
             "`docs/measured/quickstart.json`; `runs/tiny/SUMMARY.md` has the same with links):"), ""]
    s1 = facts.get("stage1_heldout")
    if s1:
        lines.append(f"- held-out Stage-1 accuracy {_ci(s1)}, chance {pct(s1.get('chance'))}")
    cal = facts.get("calibration")
    if cal:
        lines.append(f"- calibration: T = {cal['temperature']:.3g}, τ = {cal['tau']:.4g} ({cal['mode']} mode); exit rate "
                     f"{pct(cal.get('exit_rate'))}, exit accuracy {pct(cal.get('exit_accuracy'))}")
        ece = cal.get("ece_check")
        if ece:
            lines.append(f"- temperature on the {ece['n']} held-out samples: NLL {ece['nll_raw']:.3f} → "
                         f"{ece['nll_fitted']:.3f} (T is fitted by NLL, lowest near T = {ece['nll_best_t']:.2g}); "
                         f"ECE {ece['ece_raw']:.3f} → {ece['ece_fitted']:.3f}, mean confidence "
                         f"{ece['confidence_raw']:.3f} → {ece['confidence_fitted']:.3f} against accuracy "
                         f"{ece['accuracy']:.3f}: the NLL-optimal T leaves the model "
                         f"{'under' if ece['confidence_fitted'] < ece['accuracy'] else 'over'}-confident, which ECE "
                         "counts (SUMMARY.md, section 3)")
    stage2 = facts.get("stage2")
    if stage2:
        props, verify = stage2["proposals"], stage2["verifier"]
        lines.append(f"- Stage 2: proposals parsed {_ci(props['parsed'])}; overlapping the evidence "
                     f"{_ci(props['overlaps_evidence'])} (random window {pct(props.get('chance_overlap'))}); "
                     f"verifier AUROC {'–' if verify.get('auroc') is None else round(verify['auroc'], 3)}; "
                     f"fallbacks {stage2['routed_gain'].get('fallbacks') or 'none'}")
        accepted = stage2["routed_gain"]["accepted"]
        if accepted["n"]:
            lines.append(f"- samples with an accepted crop: Stage 1 {_ci(accepted['stage1'])} → final "
                         f"{_ci(accepted['final'])}")
    table2 = facts.get("table2")
    if table2:
        cells = ", ".join(f"{v} {pct(row['accuracy']['rate'])}" for v, row in table2.items())
        lines.append(f"- Table 2 rows (synthetic test split): {cells}")
    cost = facts.get("cost_vs_uniform")
    if cost and cost.get("n"):
        ratio = cost["ratio_full_over_uniform"]
        lines.append(f"- cost of `full` / `uniform_stage2` per sample (B4, goal ≤ {cost['goal']}): forwards "
                     f"{num(ratio.get('forwards'))}, decoded frames {num(ratio.get('frames_decoded'))}; accuracy "
                     f"{_ci(cost['full']['accuracy'])} vs {_ci(cost['uniform_stage2']['accuracy'])}")
    layouts = facts.get("other_layouts")
    if layouts:
        rates = [row["accuracy"] for row in layouts.values()]
        read = [row["training_letter"] for row in layouts.values() if row["training_letter"]["n"]]
        k, n = sum(r["k"] for r in read), sum(r["n"] for r in read)
        sizes = sorted({r["n"] for r in rates})
        lines.append(f"- the {len(layouts)} released layouts ({'–'.join(map(str, sizes))} questions each): accuracy "
                     f"{pct(min(r['rate'] for r in rates))}–{pct(max(r['rate'] for r in rates))} at chance "
                     f"{pct(min(r['chance'] for r in rates))}–{pct(max(r['chance'] for r in rates))}, as designed: "
                     "the tiny model learned the six colours in one fixed option order and these layouts shuffle "
                     f"theirs (it answers the colour's training letter in {k}/{n} questions; SUMMARY.md, section 7)")
    flags = facts.get("red_flags") or []
    lines.append("- red flags: " + ("; ".join(flags) if flags else "none"))
    for caveat in facts.get("caveats") or []:
        lines.append(f"- caveat: {caveat}")
    return "\n".join(lines) + "\n"


def _minutes(seconds) -> str:
    if seconds is None:
        return "–"
    return f"{seconds} s" if seconds < 60 else f"{seconds / 60:.1f} min"


def _machine(t: dict) -> str:
    """'x86_64, 2 cores (CPU name), 8.0 GiB, load average 7.4 at the start and 9.1 at the end'."""
    m = t.get("machine") or {}
    start, end = (m.get("load_average_at_start") or [None])[0], (m.get("load_average_at_end") or [None])[0]
    load = "" if start is None or end is None else f", 1-minute load average {start:g} at the start and {end:g} at the end"
    busy = (" (other jobs shared the cores)" if m.get("cores") and start is not None and end is not None
            and max(start, end) > m["cores"] else "")
    memory = f", {m['memory_gib']:g} GiB" if m.get("memory_gib") else ""
    return f"{m.get('arch')}, {m.get('cores')} cores ({m.get('cpu')}){memory}{load}{busy}"


def render_quickstart_time(t: dict) -> str:
    """The quickstart's step times from a complete run (docs/measured/quickstart_time.json), and the machine."""
    if not t.get("complete"):
        return "_not measured from a complete run: rerun bash scripts/quickstart.sh in a fresh folder_\n"
    names, steps = t.get("step_names") or {}, t["steps"]
    lines = [(f"Measured by `bash scripts/quickstart.sh` ({t.get('settings')}; its `runs/tiny/run_time.json`, copied "
              f"to `docs/measured/quickstart_time.json`) on {_machine(t)}:"), "",
             "| step | wall-clock time |", "|---|---|"]
    lines += [f"| {names.get(key, key)} | {_minutes(seconds)} |" for key, seconds in steps.items()]
    lines += [(f"| **the main job** (the README's third line: {', '.join(t.get('main_job') or [])}) | "
               f"**{_minutes(t.get('main_job_seconds'))}** |"),
              f"| **the whole quickstart** | **{_minutes(t.get('total_seconds'))}** |", "",
              ("Every step runs on one torch thread (`OMP_NUM_THREADS=1`, `num_threads: 1`), so a step's time "
               "follows how busy the cores are more than how many there are.")]
    return "\n".join(lines) + "\n"


def render_quickstart_time_summary(t: dict) -> str:
    """The main job's and the quickstart's measured time in one sentence."""
    if not t.get("complete"):
        return "_time not measured from a complete run_\n"
    return (f"Measured (`bash scripts/quickstart.sh`, `docs/measured/quickstart_time.json`): the main job took "
            f"{_minutes(t.get('main_job_seconds'))} and the whole quickstart {_minutes(t.get('total_seconds'))} on "
            f"{_machine(t)}.\n")


def _spread(d: dict | None, fmt=pct) -> str:
    if not d or d.get("median") is None:
        return "–"
    return f"{fmt(d['median'])} ({fmt(d['min'])} – {fmt(d['max'])})"


GRID_COLUMNS = (("held-out Stage 1", "stage1_accuracy", pct), ("margin AUROC", "margin_auroc", num),
                ("T", "temperature", num), ("exit rate", "exit_rate", pct),
                ("proposals with evidence", "proposals_contain_evidence", pct),
                ("routed: Stage 1 → final", None, None), ("full", "full", pct), ("no_stage2", "no_stage2", pct))


def _grid_value(numbers: dict, key: str | None, fmt) -> str:
    if key is None:
        return f"{pct(numbers.get('routed_stage1_accuracy'))} → {pct(numbers.get('routed_final_accuracy'))}"
    value = numbers["table2"].get(key) if key in ("full", "no_stage2") else numbers.get(key)
    return fmt(value)


def _grid_cells(result: dict) -> list[dict]:
    from cader.scripts.miniature_seeds import newest_cells

    # in the design's order: threads, then loss, then data order (the README's cell, seed 0 as shipped, first)
    return sorted(newest_cells(result["records"]), key=lambda c: (c["cell"]["threads"], c["cell"]["loss"] != "labelled",
                                                                  c["cell"]["order"], c["cell"]["seed"]))


def render_grid(result: dict) -> str:
    """Per cell of the newest training code: its factors, main numbers and bars; then the spread and the bars held."""
    cells, bars = _grid_cells(result), result["bars"]
    spread = result["newest"]["spread"]
    commits = sorted({c["commit"] for c in cells})
    lines = [(f"Measured by `python scripts/miniature_seeds.py --json_out docs/measured/miniature_grid.json` (commit "
              f"{', '.join(commits)}, training code `{cells[0]['training_code']}`): the quickstart once per cell of "
              f"seed × torch threads × training loss × data order, {len(cells)} cells:"), "",
             "| seed | threads | loss | data order | " + " | ".join(c[0] for c in GRID_COLUMNS) + " | bars held |",
             "|" + "---|" * (5 + len(GRID_COLUMNS))]
    for c in cells:
        cell, numbers = c["cell"], c["numbers"]
        held = sum(numbers["bars"].values())
        order = "as shipped" if cell["order"] == 0 else f"reshuffled ({cell['order']})"
        lines.append(f"| {cell['seed']} | {cell['threads']} | {cell['loss']} | {order} | "
                     + " | ".join(_grid_value(numbers, key, fmt) for _, key, fmt in GRID_COLUMNS)
                     + f" | {held}/{len(numbers['bars'])} |")
    lines += ["", "Spread over the cells, median (min – max):", "", "| number | median (min – max) |", "|---|---|"]
    lines += [f"| {title} | {_spread(spread[key], fmt)} |" for title, key, fmt in GRID_COLUMNS if key in spread]
    lines += [f"| routed: {name} | {_spread(spread[key])} |" for name, key in
              (("Stage 1", "routed_stage1_accuracy"), ("final", "routed_final_accuracy"))]
    lines += [f"| Table 2 `{v}` | {_spread(d)} |" for v, d in spread["table2"].items()]
    lines += ["", f"Bars held (cells of {len(cells)}):", ""]
    lines += [f"- {bars[bar]}: {held}/{len(cells)}" for bar, held in spread["bars_held"].items()]
    flagged = {c["name"]: c["numbers"]["red_flags"] for c in cells if c["numbers"]["red_flags"]}
    lines.append("- red flags: " + ("; ".join(f"{name}: {', '.join(f)}" for name, f in flagged.items())
                                     if flagged else "none in any cell"))
    return "\n".join(lines) + "\n"


TRADE_TITLES = {"speed": "RGR contexts from F1's frames (`--trade_rgr_frames_for_speed true`), Table 2",
                "bin_centre": "bin-centre frame times (`--frame_rule bin_centre`), Table 2",
                "bin_centre_heldout": "bin-centre frame times, Stage 1 on the held-out split"}


def _acc(r: dict) -> str:
    lo, hi = r["ci_exact"]
    return "–" if r["accuracy"] is None else f"{r['k']}/{r['n']} = {pct(r['accuracy'])} ({pct(lo)}–{pct(hi)})"


def render_trades(result: dict) -> str:
    lines = [(f"Measured by `python scripts/miniature_trades.py --seeds '{json.dumps(result['seeds'])}' --json_out "
              "docs/measured/miniature_trades.json` on the seeds of `scripts/miniature_seeds.py`: each row's accuracy "
              "in the default mode and with the option, on the samples both answered (95 % exact interval), the "
              "paired difference option − default (95 % bootstrap interval over videos) and McNemar's exact p; "
              "the last line of each row pools the seeds' discordant pairs.")]
    for trade, table in result["trades"].items():
        lines += ["", f"**{TRADE_TITLES.get(trade, trade)}**", "",
                  "| row | seed | default | option | option − default | McNemar p | frames lost |",
                  "|---|---|---|---|---|---|---|"]
        for variant, row in table.items():
            for seed, r in row["per_seed"].items():
                d = r["diff"]
                diff = "–" if not d else f"{100 * d['diff']:+.1f} pt ({100 * d['low']:+.1f}, {100 * d['high']:+.1f})"
                lines.append(f"| {variant} | {seed} | {_acc(r['default'])} | {_acc(r['option'])} | {diff} | "
                             f"{r['mcnemar']['p_value']:.3g} | {r['frames_lost']} |")
            pooled = row["pooled_mcnemar"]
            lines.append(f"| {variant} | pooled | | | {pooled['only_a']} pairs only the option answers right, "
                         f"{pooled['only_b']} only the default | {pooled['p_value']:.3g} | |")
    return "\n".join(lines) + "\n"


def render_bench_summary(rows: list[dict]) -> str:
    """The bench table in one sentence: how many checks meet their goal, and every one that does not."""
    passing = [r for r in rows if r.get("status") == "pass"]
    missed = []
    for r in rows:
        if r.get("status") == "pass":
            continue
        value = "–" if r.get("value") is None else format(r["value"], "g")
        why = "" if r.get("status") == "below goal" else f"; {r.get('status')}"
        missed.append(f"{r['key']} {r['title'].split(':')[0]} {value} (goal {r['goal']}{why})")
    runs = len({(r.get("measured") or {}).get("commit") for r in rows})
    how = "one run" if runs == 1 else f"{runs} runs, each row dated in the table"
    line = (f"Performance checks (`python scripts/bench/run_all.py`, {how} on this project's 2-core CPU machine): "
            f"{len(passing)} of {len(rows)} meet their goal")
    return line + ("; not met: " + ", ".join(missed) if missed else "") + ".\n"


def render_grid_summary(result: dict) -> str:
    """The grid in one sentence: in how many cells every bar holds, the headline accuracy, the bars not held."""
    cells = _grid_cells(result)
    spread = result["newest"]["spread"]
    everywhere = sum(1 for c in cells if all(c["numbers"]["bars"].values()))
    accuracy = spread["stage1_accuracy"]
    failing = {bar: n for bar, n in spread["bars_held"].items() if n < len(cells)}
    return (f"Across {len(cells)} cells of seed × torch threads × training loss × data order (`python "
            f"scripts/miniature_seeds.py`, [docs/miniature.md](docs/miniature.md#robustness)): every bar holds in "
            f"{everywhere} of {len(cells)} cells; held-out Stage-1 accuracy median {pct(accuracy.get('median'))} "
            f"(min {pct(accuracy.get('min'))}, max {pct(accuracy.get('max'))})"
            + ("" if not failing else "; bars not held everywhere: "
               + ", ".join(f"{bar} ({n}/{len(cells)})" for bar, n in failing.items())) + ".\n")


def _layers(n: int) -> str:
    return f"{n} layer" + ("" if n == 1 else "s")


def _gpu_sft_row(row: dict) -> str:
    extrapolated = " (extrapolated)" if "what" in row else ""
    return (f"{_layers(row['layers'])}{extrapolated} {row['step_seconds']:.2f} s, {row['tokens_per_s']:,.0f} tokens/s, "
            f"peak {'–' if row.get('peak_memory_gib') is None else format(row['peak_memory_gib'], '.1f') + ' GiB'}, "
            f"MFU {pct(row.get('mfu_lm'))} ({pct(row.get('mfu_lm_plus_vit'))} with the ViT)")


def _gpu_kernel(kernel: str, row: dict) -> str:
    if "error" in row:
        return f"{kernel}: {row['error'].split(':')[0]} ({row['error'].split(':', 1)[-1].strip()[:60]})"
    over = row.get("peak_over_weights_gib")
    return (f"{kernel} {row['forward_s']:.3f} s ({row['prefill_tokens_per_s']:,.0f} tokens/s"
            + ("" if over is None else f", +{over:.1f} GiB over the weights") + f", MFU {pct(row.get('mfu_lm_plus_vit'))})")


def render_gpu(record: dict) -> str:
    """The GPU check's headline figures (docs/measured/gpu.json, the `gpu.json` that scripts/bench/gpu_run.sh writes on
    a lent device machine), one line a part."""
    s = record["summary"]
    what = " (a CPU rehearsal at tiny widths, `--dry_run`: no figure here is a GPU's)" if record.get("dry_run") else ""
    depths = record["depths"]
    lines = [(f"Measured by `bash scripts/bench/gpu_run.sh` ([docs/bench.md](docs/bench.md#gpu-check)) on "
              f"{record['device']}{what}, torch {record['torch']}, {record['date']}; the language model cut to "
              f"{depths[0]} and {depths[-1]} layers, the full depth *extrapolated* along the line through them:"), ""]
    names = {"zero3": "ZeRO-3 bf16", "plain": "plain bf16 AdamW"}
    for engine, sft in s["sft"].items():
        lines.append(f"- SFT step, {names[engine]}, {sft['seq_len']:,} tokens, activation checkpointing: "
                     + "; ".join(_gpu_sft_row(row) for row in sft["rows"]))
    for role, scoring in s["scoring"].items():
        extra = scoring["extrapolated"].get("default")
        full = (f"; full depth, extrapolated: {extra['forward_s']:.3f} s, MFU {pct(extra.get('mfu_lm_plus_vit'))}"
                if extra else "")
        lines.append(f"- {role} scoring forward ({scoring['shape']} widths, {scoring['frames']} frames, "
                     f"{scoring['prompt_tokens']:,} tokens), {_layers(scoring['layers'])}: "
                     + "; ".join(_gpu_kernel(k, row) for k, row in scoring["kernels"].items()) + full)
    decode = s.get("decode")
    if decode:
        runs = "; ".join(f"{r['cpu_s']:.1f} CPU-s, {r['wall_s']:.1f} s wall on {r['decoders']} decoders"
                         for r in decode["runs"])
        ratio = (f"{decode['cpu_s_per_gpu_s']:.1f} CPU-s per GPU-s of the full-depth Stage-1 forward, "
                 if "cpu_s_per_gpu_s" in decode else "")
        length = decode.get("video_seconds") or 0
        video = f"{length / 60:g}-minute" if length >= 60 else f"{length}-second"
        lines.append(f"- F1 decode ({decode['frames']} frames of B14's {video} 720p30 H.264, {decode['cores']} cores): "
                     f"{runs}; {ratio}{decode['cpu_s_per_gpu_s_b14_assumption']:.1f} with B14's assumed 40 % MFU")
    lines += [f"- problem: {problem}" for problem in s["problems"]]
    if s["not_run"]:
        lines.append("- not run: " + "; ".join(f"{name} ({why})" for name, why in s["not_run"].items()))
    return "\n".join(lines) + "\n"


NO_GPU_RUN = ("_No GPU run yet: `bash scripts/bench/gpu_run.sh` on a lent device machine writes "
              "`docs/measured/gpu.json` ([docs/bench.md](docs/bench.md#gpu-check))._\n")

RENDERERS = {"bench": ("bench.json", render_bench), "quickstart": ("quickstart.json", render_quickstart),
             "grid": ("miniature_grid.json", render_grid), "bench_summary": ("bench.json", render_bench_summary),
             "grid_summary": ("miniature_grid.json", render_grid_summary),
             "quickstart_time": ("quickstart_time.json", render_quickstart_time),
             "quickstart_time_summary": ("quickstart_time.json", render_quickstart_time_summary),
             "trades": ("miniature_trades.json", render_trades)}
# blocks whose file a run may not have written yet: (file, renderer, the text until it has)
OPTIONAL = {"gpu": ("gpu.json", render_gpu, NO_GPU_RUN)}


def render_readme(text: str, measured: Path = MEASURED) -> str:
    """`text` with every generated block rendered anew from the files under `measured`."""

    def block(match: re.Match) -> str:
        name = match.group(2)
        if name in OPTIONAL:
            file, render, absent = OPTIONAL[name]
        elif name in RENDERERS:
            (file, render), absent = RENDERERS[name], None
        else:
            raise KeyError(f"block {name!r} has no renderer ({sorted(RENDERERS) + sorted(OPTIONAL)})")
        path = measured / file
        body = (render(json.loads(path.read_text())) if path.exists()
                else absent or f"_not measured yet: {path.name} missing_\n")
        return match.group(1) + body + match.group(4)

    return BLOCK.sub(block, text)


def block_names(text: str) -> list[str]:
    """The names of the generated blocks in `text`, in order."""
    return [match.group(2) for match in BLOCK.finditer(text)]


def pages(repo: Path = REPO) -> list[Path]:
    """README.md and every Markdown page under docs/ that holds a generated block."""
    candidates = [repo / "README.md", *sorted((repo / "docs").rglob("*.md"))]
    return [path for path in candidates if path.is_file() and "<!-- BEGIN generated:" in path.read_text()]


def main(files: list[str] | None = None, check: bool = False) -> int:
    """Rewrite the generated blocks of README.md and docs/ from docs/measured/.

    Args:
        files: The pages to update (default: README.md and every page under docs/ with a generated block).
        check: Only compare; exit 1 when a block differs from its rendering.
    """
    paths = [Path(f) for f in files] if files else pages()
    stale = []
    for path in paths:
        text = path.read_text()
        rendered = render_readme(text)
        if rendered == text:
            continue
        if check:
            stale.append(path)
        else:
            path.write_text(rendered)
            print(f"updated {path}")
    for path in stale:
        print(f"{path} is stale: run python scripts/update_readme.py", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(CLI(main, as_positional=False))
