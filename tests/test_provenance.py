"""The provenance block every summary file carries: which code (commit, dirty), packages, date and command."""

import datetime as dt
import subprocess
from pathlib import Path

import pytest
from cader.contracts import provenance as prov

REPO = Path(__file__).resolve().parents[1]


def test_the_block_names_this_checkouts_commit_and_the_installed_versions():
    block = prov.collect_provenance(["evaluate/run.py", "--benchmark", "synthetic"])
    head = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=False).stdout.strip()
    if head:   # a checkout: the commit is HEAD, and the dirty flag is a bool
        assert block["git_commit"] == head and isinstance(block["git_dirty"], bool)
    import torch
    import transformers

    assert block["packages"]["torch"] == torch.__version__.split("+")[0]
    assert block["packages"]["transformers"] == transformers.__version__
    assert block["command"] == "evaluate/run.py --benchmark synthetic"
    written = dt.datetime.fromisoformat(block["date"])
    assert abs((dt.datetime.now(dt.timezone.utc) - written).total_seconds()) < 60


def test_the_dirty_flag_follows_uncommitted_changes_to_tracked_files(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "f.txt").write_text("a\n")
    subprocess.run([*git, "add", "f.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    monkeypatch.setattr(prov, "_REPO", repo)
    assert prov.collect_provenance([])["git_dirty"] is False
    (repo / "untracked.txt").write_text("ignored: untracked files are not the code that ran\n")
    assert prov.collect_provenance([])["git_dirty"] is False
    (repo / "f.txt").write_text("b\n")
    assert prov.collect_provenance([])["git_dirty"] is True


def test_no_git_means_nulls_not_a_failure(tmp_path, monkeypatch):
    monkeypatch.setattr(prov, "_REPO", tmp_path)   # not a repository
    block = prov.collect_provenance(["x"])
    assert block["git_commit"] is None and block["git_dirty"] is None and block["command"] == "x"


@pytest.mark.parametrize(("argv", "shown"), [
    (["judge.py", "--api_key", "sk-123", "--model", "m"], "judge.py --api_key '***' --model m"),
    (["judge.py", "--api_key=sk-123"], "judge.py '--api_key=***'"),
    (["x", "--hf_token", "hf_abc", "--secret-file=s"], "x --hf_token '***' '--secret-file=***'"),
    (["x", "--judge.api-key", "k"], "x --judge.api-key '***'"),
    (["x", "--tokens_per_s", "5"], "x --tokens_per_s 5"),
    (["x", "--monkey", "1"], "x --monkey 1"),
])
def test_secret_looking_flag_values_never_reach_the_file(argv, shown):
    block = prov.collect_provenance(argv)
    assert block["command"] == shown and "sk-123" not in str(block) and "hf_abc" not in str(block)
