"""End-to-end: calibrate/fit.py on synthetic predictions.jsonl files -> calibration.json, figures, summary."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from cader.calibrate.calibration_file import (
    CalibrationFileError,
    load_calibration,
    read_calibration,
)
from cader.calibrate.margin import margin
from cader.calibrate.plots import (
    equal_mass_table,
    paper_bin_table,
    plot_accuracy_vs_margin,
    plot_per_benchmark,
    plot_reliability,
    plot_risk_coverage,
    plot_tau_sweep,
)
from cader.calibrate.tau import NO_EXIT_TAU
from cader.dev.calibration_rows import synthetic_prediction_rows
from cader.vlm.files import write_json_atomic

REPO = Path(__file__).resolve().parents[1]
FIT = REPO / "calibrate" / "fit.py"
DESIGN_KEYS = {"temperature", "tau", "mode", "alpha", "delta", "fit", "select", "sources", "seed"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _load_fit_main():
    import importlib

    return importlib.import_module("cader.calibrate.fit")


def _write_rows(path: Path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def prediction_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("preds")
    a = _write_rows(
        d / "a.jsonl", synthetic_prediction_rows("synthetic_a", 700, 4, 1.5, seed=0, stage2_accuracy=0.6)
    )
    b = _write_rows(
        d / "b.jsonl", synthetic_prediction_rows("synthetic_b", 500, 5, 1.5, seed=1, stage2_accuracy=0.6)
    )
    return [a, b]


def _assert_png(path: Path):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 10_000, path


@pytest.mark.slow
def test_fit_writes_calibration_figures_and_summary(prediction_files, tmp_path):
    out = tmp_path / "calib"
    rc = _load_fit_main().main(
        ["--predictions", *prediction_files, "--out", str(out), "--seed", "1", "--alpha", "0.1"]
    )
    assert rc == 0
    payload = json.loads((out / "calibration.json").read_text())
    assert DESIGN_KEYS <= payload.keys()
    assert payload["mode"] == "precision" and payload["sources"] == prediction_files and payload["seed"] == 1
    assert {"n", "nll_before", "nll_after", "ece_before", "ece_after"} <= payload["fit"].keys()
    assert {"n", "exit_rate", "exit_accuracy", "upper_bound_error"} <= payload["select"].keys()
    assert payload["fit"]["n"] + payload["select"]["n"] == 1200
    assert payload["temperature"] == pytest.approx(1.5, rel=0.15)
    assert payload["select"]["upper_bound_error"] <= payload["alpha"]
    assert 0 < payload["select"]["exit_rate"] < 1
    assert payload["paper_point"]["tau"] == 0.97 and payload["paper_point"]["temperature"] == 2.0
    assert load_calibration(out / "calibration.json") == (payload["temperature"], payload["tau"])
    for name in ("accuracy_vs_margin", "reliability", "risk_coverage", "tau_sweep", "per_benchmark_tau"):
        _assert_png(out / "figures" / f"{name}.png")
        assert len((out / "figures" / f"{name}.csv").read_text().splitlines()) > 2
    summary = (out / "summary.md").read_text()
    assert "T = " in summary and "paper" in summary and "figures/tau_sweep.png" in summary
    assert not [p for p in os.listdir(out) if p.endswith(".tmp")]


def test_accuracy_and_budget_modes(prediction_files, tmp_path):
    fit_main = _load_fit_main().main
    assert (
        fit_main(
            [
                "--predictions",
                *prediction_files,
                "--out",
                str(tmp_path / "acc"),
                "--mode",
                "accuracy",
                "--figures",
                "false",
            ]
        )
        == 0
    )
    acc = read_calibration(tmp_path / "acc" / "calibration.json")
    assert acc["select"]["final_accuracy"] >= acc["select"]["stage1_only_accuracy"] - 1e-12
    assert acc["select"]["final_accuracy"] >= acc["select"]["stage2_everywhere_accuracy"] - 1e-12
    assert "final_accuracy" in acc["paper_point"]
    assert (
        fit_main(
            [
                "--predictions",
                *prediction_files,
                "--out",
                str(tmp_path / "bud"),
                "--mode",
                "budget",
                "--budget",
                "0.25",
                "--figures",
                "false",
            ]
        )
        == 0
    )
    bud = read_calibration(tmp_path / "bud" / "calibration.json")
    assert 1 - bud["select"]["exit_rate"] <= 0.25 + 1e-12
    # budget mode without --budget is refused with a message, not a traceback
    assert (
        fit_main(["--predictions", *prediction_files, "--out", str(tmp_path / "x"), "--mode", "budget"]) == 2
    )


def test_accuracy_mode_without_stage2_outcomes_is_refused(tmp_path, capsys):
    path = _write_rows(tmp_path / "s1.jsonl", synthetic_prediction_rows("synthetic", 60, seed=2))
    rc = _load_fit_main().main(["--predictions", path, "--out", str(tmp_path / "o"), "--mode", "accuracy"])
    assert rc == 2 and "uniform_stage2" in capsys.readouterr().err
    assert not (tmp_path / "o" / "calibration.json").exists()


def test_file_without_logits_names_file_and_line(tmp_path, capsys):
    rows = [dict(r, stage1={"pred": "A"}) for r in synthetic_prediction_rows("synthetic", 5, seed=2)]
    path = _write_rows(tmp_path / "nologits.jsonl", rows)
    rc = _load_fit_main().main(["--predictions", path, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and f"{path}:1:" in err and "stage1.logits" in err


def test_fixed_temperature_uses_every_sample_for_tau(prediction_files, tmp_path):
    assert (
        _load_fit_main().main(
            [
                "--predictions",
                prediction_files[0],
                "--out",
                str(tmp_path / "t"),
                "--temperature",
                "2.0",
                "--figures",
                "false",
            ]
        )
        == 0
    )
    p = read_calibration(tmp_path / "t" / "calibration.json")
    assert p["temperature"] == 2.0 and p["select"]["n"] == 700 and p["fit"]["fixed"] is True


@pytest.mark.slow
def test_cli_subprocess_with_shipped_config(prediction_files, tmp_path):
    config = REPO / "configs" / "calibrate" / "default.yaml"
    assert yaml.safe_load(config.read_text())["mode"] == "precision"
    proc = subprocess.run(
        [
            sys.executable,
            str(FIT),
            "--config",
            str(config),
            "--predictions",
            prediction_files[1],
            "--out",
            str(tmp_path / "cli"),
            "--figures",
            "false",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "tau =" in proc.stdout
    assert (tmp_path / "cli" / "calibration.json").is_file()


def test_shipped_config_parses_into_the_parser():
    parser = _load_fit_main().build_parser()
    cfg = parser.parse_args(
        [
            "--config",
            str(REPO / "configs" / "calibrate" / "default.yaml"),
            "--predictions",
            "x.jsonl",
            "--out",
            "o",
        ]
    )
    assert (cfg.mode, cfg.alpha, cfg.delta, cfg.min_exits, cfg.budget) == ("precision", 0.05, 0.1, 50, None)
    assert cfg.predictions == ["x.jsonl"]


def test_load_calibration_validates(tmp_path):
    good = {
        "temperature": 1.7,
        "tau": 0.96,
        "mode": "precision",
        "alpha": 0.05,
        "delta": 0.1,
        "fit": {},
        "select": {},
        "sources": [],
        "seed": 0,
    }
    write_json_atomic(tmp_path / "ok.json", good)
    assert load_calibration(tmp_path / "ok.json") == (1.7, 0.96)
    write_json_atomic(tmp_path / "noexit.json", dict(good, tau=NO_EXIT_TAU))
    assert load_calibration(tmp_path / "noexit.json")[1] > 1.0
    bad = {
        "neg_t": dict(good, temperature=-1.0),
        "tau_big": dict(good, tau=1.5),
        "nan_tau": dict(good, tau=None),
        "mode": dict(good, mode="magic"),
        "missing": {k: v for k, v in good.items() if k != "select"},
    }
    for name, payload in bad.items():
        write_json_atomic(tmp_path / f"{name}.json", payload)
        with pytest.raises(CalibrationFileError, match=f"{name}.json"):
            load_calibration(tmp_path / f"{name}.json")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(CalibrationFileError, match="broken.json"):
        load_calibration(tmp_path / "broken.json")
    with pytest.raises(CalibrationFileError, match="not found"):
        load_calibration(tmp_path / "absent.json")
    # NaN never reaches the file: it becomes null, and the file stays strict JSON
    write_json_atomic(tmp_path / "nan.json", dict(good, fit={"ece_after": float("nan")}))
    assert json.loads((tmp_path / "nan.json").read_text())["fit"]["ece_after"] is None


@pytest.mark.slow
def test_plots_render_headless_with_paper_bins(tmp_path):
    rng = np.random.default_rng(0)
    m = np.r_[rng.random(300), 1 - rng.random(60) * 0.01, [0.9, 0.97, 0.99, 0.995]]
    correct = rng.random(m.size) < 0.3 + 0.7 * m
    bench = np.where(rng.random(m.size) < 0.5, "b1", "b2")
    rows = paper_bin_table(m, correct)
    assert [r["n"] for r in rows] == [
        int((m < 0.9).sum()),
        int(((m >= 0.9) & (m < 0.97)).sum()),
        int(((m >= 0.97) & (m < 0.99)).sum()),
        int(((m >= 0.99) & (m < 0.995)).sum()),
        int((m >= 0.995).sum()),
    ]
    assert sum(r["n"] for r in equal_mass_table(m, correct, n_bins=10)) == m.size
    chosen = {"tau": 0.9, "exit_rate": 0.2, "exit_accuracy": 0.95, "label": "chosen"}
    paper = {"exit_rate": 0.1, "exit_accuracy": 0.97, "label": "paper"}
    files = []
    files += plot_accuracy_vs_margin(tmp_path, m, correct, bench, 1.5)
    files += plot_reliability(
        tmp_path, {"T=1": np.clip(m, 0.25, 1), "T=2": np.clip(m * 0.9, 0.25, 1)}, correct
    )
    files += plot_risk_coverage(tmp_path, m, correct, 0.1, 0.05, chosen, paper)
    files += plot_tau_sweep(tmp_path, m, correct, chosen, paper, stage2_correct=rng.random(m.size) < 0.6)
    files += plot_per_benchmark(tmp_path, m, correct, bench, 0.9)
    for f in files:
        if f.suffix == ".png":
            _assert_png(f)
        else:
            assert f.stat().st_size > 100
    assert margin([1000.0, 0.0]) >= 0.995  # saturated logits land in the paper's top bin


def test_too_few_samples_for_the_guarantee_means_no_exit(tmp_path, capsys):
    path = _write_rows(tmp_path / "tiny.jsonl", synthetic_prediction_rows("synthetic", 30, seed=5))
    assert (
        _load_fit_main().main(["--predictions", path, "--out", str(tmp_path / "o"), "--figures", "false"])
        == 0
    )
    assert "no exit" in capsys.readouterr().out
    temperature, tau = load_calibration(tmp_path / "o" / "calibration.json")
    assert tau == NO_EXIT_TAU and not margin([1000.0, 0.0], temperature) >= tau
    sel = read_calibration(tmp_path / "o" / "calibration.json")["select"]
    assert sel["no_exit"] and sel["exit_accuracy"] is None and "reason" in sel


def test_cascade_and_joint_modes_record_their_constraints(prediction_files, tmp_path, capsys):
    fit_main = _load_fit_main().main
    flags = ["--predictions", *prediction_files, "--figures", "false"]
    assert fit_main([*flags, "--out", str(tmp_path / "c"), "--mode", "cascade", "--epsilon", "0.03"]) == 0
    c = read_calibration(tmp_path / "c" / "calibration.json")
    (loss,) = c["select"]["constraints"]
    assert loss["name"] == "accuracy_loss" and loss["met"] and loss["upper_bound"] <= 0.03
    assert loss["value"] == pytest.approx(c["select"]["accuracy_loss"]) and not c["select"]["no_exit"]
    assert c["epsilon"] == 0.03 and {"git_commit", "packages", "date", "command"} <= c["provenance"].keys()
    assert c["select_margins"]["n"] == c["select"]["n"]
    assert "accuracy_loss <= 0.03" in capsys.readouterr().out
    # joint: both risks and a Stage-2 budget the risks cannot afford -> no exit, and the run says which and why
    assert fit_main([*flags, "--out", str(tmp_path / "j"), "--mode", "joint", "--alpha", "0.1", "--epsilon", "0.03",
                     "--budget", "0.05"]) == 0
    j = read_calibration(tmp_path / "j" / "calibration.json")
    assert j["select"]["no_exit"] and j["select"]["unmet"] == ["stage2_fraction"] and j["tau"] == NO_EXIT_TAU
    captured = capsys.readouterr()
    assert "stage2_fraction" in captured.err and "budget 0.05" in captured.err and "NOT met" in captured.out
    assert fit_main([*flags, "--out", str(tmp_path / "j2"), "--mode", "joint", "--alpha", "0.1", "--epsilon",
                     "0.03", "--budget", "0.9"]) == 0
    j2 = read_calibration(tmp_path / "j2" / "calibration.json")
    assert [x["met"] for x in j2["select"]["constraints"]] == [True, True, True]
    assert j2["select"]["upper_bound_error"] <= 0.1 and 1 - j2["select"]["exit_rate"] <= 0.9


def test_guarantee_modes_refuse_what_they_cannot_use(tmp_path, capsys):
    fit_main = _load_fit_main().main
    no_s2 = _write_rows(tmp_path / "p.jsonl", synthetic_prediction_rows("s", 200, 4, 1.5, seed=0))
    assert fit_main(["--predictions", no_s2, "--out", str(tmp_path / "a"), "--mode", "cascade"]) == 2
    assert "--epsilon" in capsys.readouterr().err
    assert fit_main(["--predictions", no_s2, "--out", str(tmp_path / "b"), "--mode", "cascade", "--epsilon",
                     "0.02"]) == 2
    assert "uniform_stage2" in capsys.readouterr().err
    assert not (tmp_path / "b" / "calibration.json").exists()


def test_help_documents_every_mode_in_one_line():
    from cader.calibrate.tau import MODES

    text = _load_fit_main().build_parser().format_help()
    lines = text.split("modes (--mode)")[1].splitlines()  # the table after the flags
    for mode in MODES:
        (line,) = [x for x in lines if x.strip().startswith(mode + " ")]
        assert len(line.split()) > 4, line  # the mode and what it guarantees
    assert "--verifier_alpha" in text and "calibrate/transfer.py" in text


def test_per_benchmark_taus_each_with_its_own_numbers(prediction_files, tmp_path):
    payload = _load_fit_main().main(["--predictions", *prediction_files, "--out", str(tmp_path / "pb"),
                                     "--per_benchmark", "true", "--alpha", "0.1", "--figures", "false"])
    assert payload == 0
    p = read_calibration(tmp_path / "pb" / "calibration.json")
    groups = p["per_benchmark"]
    assert set(groups) == {"synthetic_a", "synthetic_b"}
    assert sum(g["n"] for g in groups.values()) == p["select"]["n"]
    for g in groups.values():
        assert g["no_exit"] or g["upper_bound_error"] <= 0.1


def test_the_temperature_note_says_which_criterion_the_fit_minimises_and_why_ece_can_rise():
    from cader.calibrate.summary import fit_note

    rose = fit_note({"n": 120, "nll_before": 0.62, "nll_after": 0.45, "ece_before": 0.111, "ece_after": 0.160,
                     "ece_bins": 15})
    assert "T minimises the gold-letter NLL on the fit split (n = 120)" in rose
    assert "about 8 samples per bin" in rose
    assert "NLL fell (0.62 → 0.45) while ECE rose (0.111 → 0.16)" in rose and "not by itself a sign" in rose
    fell = fit_note({"n": 120, "nll_before": 0.62, "nll_after": 0.45, "ece_before": 0.2, "ece_after": 0.1})
    assert "ECE rose" not in fell and "does not optimise" in fell
    assert "the fit is wrong" in fit_note({"n": 9, "nll_before": 0.4, "nll_after": 0.5, "ece_before": 0.1,
                                           "ece_after": 0.1})
    assert fit_note({"fixed": True}) == "T was given, not fitted."


def test_fit_prints_nll_and_ece_rounded_for_reading(prediction_files, tmp_path, capsys):
    assert _load_fit_main().main(["--predictions", *prediction_files, "--out", str(tmp_path / "c")]) == 0
    out = capsys.readouterr().out
    fit = json.loads((tmp_path / "c" / "calibration.json").read_text())["fit"]
    assert (f"temperature fitted by gold-letter NLL {fit['nll_before']:.4g} -> {fit['nll_after']:.4g} on "
            f"{fit['n']} samples; ECE {fit['ece_before']:.3g} -> {fit['ece_after']:.3g}") in out
    summary = (tmp_path / "c" / "summary.md").read_text()
    assert "T minimises the gold-letter NLL on the fit split" in summary
