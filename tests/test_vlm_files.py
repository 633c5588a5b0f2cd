import threading

import pytest
from cader.vlm.files import write_atomic


def test_writes_text_or_lines_and_replaces_the_old_file(tmp_path):
    target = tmp_path / "sub" / "report.json"
    assert write_atomic(target, "first") == target and target.read_text() == "first"
    write_atomic(target, (f"{i}\n" for i in range(3)))
    assert target.read_text() == "0\n1\n2\n"
    assert [p.name for p in target.parent.iterdir()] == ["report.json"]  # no tmp left behind


def test_a_failed_write_keeps_the_old_file_and_leaves_no_tmp(tmp_path):
    target = tmp_path / "plan.jsonl"
    write_atomic(target, "old\n")

    def lines():
        yield "new\n"
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        write_atomic(target, lines())
    assert target.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["plan.jsonl"]


def test_concurrent_writers_each_leave_a_whole_file(tmp_path):
    target = tmp_path / "shared.txt"
    texts = [str(k) * 100_000 for k in range(8)]
    threads = [threading.Thread(target=write_atomic, args=(target, t)) for t in texts]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert target.read_text() in texts and [p.name for p in tmp_path.iterdir()] == ["shared.txt"]


def test_atomic_writes_follow_the_umask_like_open_does(tmp_path):
    import os

    from cader.vlm.files import write_atomic

    old = os.umask(0o027)
    try:
        written = write_atomic(tmp_path / "report.json", "{}\n")
        with open(tmp_path / "plain.txt", "w") as handle:
            handle.write("x")
    finally:
        os.umask(old)
    assert oct(written.stat().st_mode & 0o777) == oct((tmp_path / "plain.txt").stat().st_mode & 0o777) == "0o640"
