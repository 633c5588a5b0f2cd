"""scripts/miniature_trades.py pairs each option's records with the default's sample by sample; hand-counted cases."""

import json

import pytest
from cader.dev.viewer_records import synthetic_records
from cader.scripts.miniature_trades import eval_command, paired, trade_table, variant_files
from cader.scripts.update_readme import render_trades
from scipy.stats import binomtest


def records(correct: list[bool], lost: int = 0, skip: int | None = None) -> list[dict]:
    """Contract-valid records (read_records drops any other) of the same questions, with this correctness."""
    rows = [r for r in synthetic_records(40) if r["error"] is None][:len(correct)]
    for row, c in zip(rows, correct, strict=True):
        row["correct"], row["cost"]["rgr_frames_lost"] = c, lost
    if skip is not None:
        rows[skip]["answer"] = None   # no gold letter: left out of the pairs
    return rows


def test_pairs_count_only_the_samples_both_modes_answered():
    default = records([True, True, False, False, True, False])
    option = records([True, False, True, True, True, False], lost=3, skip=5)
    got = paired(default, option)
    assert (got["default"]["k"], got["default"]["n"]) == (3, 5)
    assert (got["option"]["k"], got["option"]["n"]) == (4, 5)
    assert got["diff"]["diff"] == pytest.approx(0.2)
    assert (got["mcnemar"]["only_a"], got["mcnemar"]["only_b"]) == (2, 1)   # a: the option right alone
    assert got["mcnemar"]["p_value"] == pytest.approx(binomtest(2, 3, 0.5).pvalue)
    assert got["frames_lost"] == 18


def write(run, variant, rows):
    folder = run / variant
    folder.mkdir(parents=True)
    (folder / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_seeds_pool_their_discordant_pairs_and_the_table_renders(tmp_path):
    seeds = {}
    for seed, (d, o) in enumerate([([True, False], [False, True]), ([False, False], [True, True])]):
        tiny = seeds[seed] = tmp_path / f"seed_{seed}"
        write(tiny / "t2_default", "full", records(d))
        write(tiny / "t2_speed", "full", records(o))
    table = trade_table(seeds, "t2_default", "t2_speed")
    assert list(table) == ["full"] and list(table["full"]["per_seed"]) == ["0", "1"]
    pooled = table["full"]["pooled_mcnemar"]
    assert (pooled["only_a"], pooled["only_b"]) == (3, 1)
    text = render_trades({"seeds": [0, 1], "trades": {"speed": table}})
    assert "| full | 0 | 1/2 = 50.0 %" in text and "| full | pooled |" in text


def test_a_run_of_one_configuration_is_its_own_row_and_heldout_runs_stage1_alone(tmp_path):
    (tmp_path / "predictions.jsonl").write_text("")
    assert list(variant_files(tmp_path)) == ["stage1"]
    line = eval_command(tmp_path, "heldout_bins")
    assert line[line.index("--variant") + 1] == "no_stage2" and line[-2:] == ["--frame_rule", "bin_centre"]
    assert "--calibration" in eval_command(tmp_path, "t2_speed")
